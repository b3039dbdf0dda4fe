"""Harness-only stand-in for ``sgl_kernel`` in ``.venv-main`` (stock sglang 0.5.23 on CPU; issue 17).

Why it exists: sglang 0.5.23 imports a few CPU kernels from ``sgl_kernel`` at module load when
``SGLANG_USE_CPU_ENGINE=1`` (``sglang/kernels/ops/kvcache/cache_move.py``,
``sglang/srt/mem_cache/allocation.py``, ``sglang/kernels/ops/speculative/*``). The registry's
``sglang-kernel==0.4.10`` wheel is CUDA-only (``sm90``/``sm100`` ``common_ops``, no CPU extension)
and no CPU build of the kernel package is served; upstream builds its CPU kernels from source
(Xeon/AMX). ``scripts/setup_main.sh`` therefore puts this directory on ``.venv-main``'s
``sys.path`` (a ``.pth`` file), and nowhere else: never in ``.venv``, never in our engine modules.

What it provides, by name, nothing more (an import of any other name fails loudly):
- ``copy_all_layer_kv_cache_cpu`` and ``assign_req_to_token_pool_cpu``: small pure-torch functions
  computing what the CPU kernels compute (the Triton kernels ``copy_all_layer_kv_cache_tiled`` and
  ``assign_req_to_token_pool`` in the same sglang modules are the reference semantics); tested in
  ``test/tools/test_main_compat.py``.
- the speculative-decoding CPU kernels (``sgl_kernel.speculative``, re-exported here under the
  names sglang imports): pure-torch versions of the Triton kernels in sglang's
  ``kernels/ops/speculative``, the NGRAM, EAGLE and frozen-KV MTP paths' (issue 58).

It registers no ``torch.ops.sgl_kernel`` operator, so sglang's ``cpu_has_amx_support()`` (which
probes ``torch.ops.sgl_kernel.convert_weight_packed``) stays False and the AMX paths stay off.
"""

from __future__ import annotations

import ctypes

import torch

__version__ = "0.4.10+islands-harness-cpu-standin"
IS_ISLANDS_HARNESS_STANDIN = True


def _bytes_view(ptr: int, nbytes: int) -> torch.Tensor:
    """A uint8 tensor aliasing ``nbytes`` of host memory at address ``ptr`` (no copy)."""
    if nbytes <= 0:
        return torch.empty(0, dtype=torch.uint8)
    buf = (ctypes.c_uint8 * nbytes).from_address(ptr)
    return torch.frombuffer(buf, dtype=torch.uint8)


def copy_all_layer_kv_cache_cpu(
    data_ptrs: torch.Tensor,
    strides: torch.Tensor,
    tgt_loc: torch.Tensor,
    src_loc: torch.Tensor,
) -> None:
    """For every buffer ``b`` (base address ``data_ptrs[b]``, row size ``strides[b]`` bytes), copy
    row ``src_loc[i]`` to row ``tgt_loc[i]`` for every ``i``, in place.

    Safe for overlapping moves, like the Triton kernel it stands for: all source rows of a buffer
    are read before any target row is written. Buffers are host (CPU) memory; the caller owns
    them and guarantees every row index lies inside its buffer.
    """
    if tgt_loc.numel() != src_loc.numel():
        raise ValueError(f"tgt_loc has {tgt_loc.numel()} entries, src_loc {src_loc.numel()}")
    if data_ptrs.numel() != strides.numel():
        raise ValueError(f"{data_ptrs.numel()} data pointers but {strides.numel()} strides")
    if tgt_loc.numel() == 0:
        return
    tgt = tgt_loc.to(torch.int64).reshape(-1)
    src = src_loc.to(torch.int64).reshape(-1)
    rows = int(torch.maximum(tgt.max(), src.max()).item()) + 1
    for ptr, stride in zip(data_ptrs.tolist(), strides.tolist()):
        ptr, stride = int(ptr), int(stride)
        view = _bytes_view(ptr, rows * stride).view(rows, stride)
        view[tgt] = view[src]  # advanced indexing on the right gathers a copy first


def assign_req_to_token_pool_cpu(
    req_pool_indices: torch.Tensor,
    req_to_token: torch.Tensor,
    start_offset: torch.Tensor,
    end_offset: torch.Tensor,
    out_cache_loc: torch.Tensor,
    pool_len: int,
) -> None:
    """For each request ``i``: ``req_to_token[req_pool_indices[i], start[i]:end[i]]`` gets the
    next ``end[i] - start[i]`` entries of ``out_cache_loc`` (requests consume ``out_cache_loc``
    in batch order). ``pool_len`` is ``req_to_token.shape[1]``, checked."""
    if pool_len != req_to_token.shape[1]:
        raise ValueError(f"pool_len {pool_len} != req_to_token.shape[1] {req_to_token.shape[1]}")
    starts = start_offset.tolist()
    ends = end_offset.tolist()
    rows = req_pool_indices.tolist()
    pt = 0
    for row, s, e in zip(rows, starts, ends):
        n = e - s
        if n <= 0:
            continue
        req_to_token[row, s:e] = out_cache_loc[pt:pt + n].to(req_to_token.dtype)
        pt += n


# The speculative-decoding CPU kernels (issue 58): pure-torch versions in ``speculative``, which
# is also the ``sgl_kernel.speculative`` module ``reconstruct_tree.py`` imports on CPU.
from .speculative import (  # noqa: E402
    assign_draft_cache_locs_contiguous_cpu,
    assign_extend_cache_locs_cpu,
    build_tree_kernel_efficient_cpu,
    fill_accept_out_cache_loc_cpu,
    fill_bonus_tokens_cpu,
    verify_tree_greedy_cpu,
)

SPECULATIVE = (
    "build_tree_kernel_efficient_cpu",
    "verify_tree_greedy_cpu",
    "assign_draft_cache_locs_contiguous_cpu",
    "assign_extend_cache_locs_cpu",
    "fill_accept_out_cache_loc_cpu",
    "fill_bonus_tokens_cpu",
)
