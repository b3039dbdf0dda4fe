"""NEGATIVE CONTROL for the equality gate on sglang 0.5.23 (``--target main``): a deliberately
wrong SWA frontier in ``SWAIslandUnifiedRadixCache``.

Test-only, like ``test/shims/wrong_frontier`` (the 0.5.15 control, whose docstring explains the
choice of the shift): Python imports a module named ``sitecustomize`` at interpreter start only
when its directory is on ``sys.path``, and only ``scripts/equality_gate.py --target main
--negative-control`` puts this directory on the islands server's ``PYTHONPATH``; the scheduler
subprocesses inherit it.

What it breaks. On 0.5.23 every island is a ``checkpoint`` of the running request through main's
own insert path (``checkpoint_into_tree``: chunk commits and decode islands alike), whose
out-of-window free leaves the request's SWA evicted below ``req.kv.get_evicted_seqlen(SWA)`` =
``t`` (main's frontier). After the real call on the island cache (never the plain
``UnifiedRadixCache`` of the islands-off boot), for an unfinished request, the shim also frees,
with ``allocator.free_swa``, the SWA slots of ``req_to_token[req_pool_idx, t : t + shift]``,
clamped to ``up_to``: the frontier sits ``shift`` tokens too far (default: the window
``w = swa_retain_window + 1``). The tree is left as it is, so those positions still look live
(tree-owned, not tombstoned) while their SWA KV is gone (mapping zeroed: SWA layers read the
padding slot, or another request's KV once the slot is reused). The next token reads most of
them, so continuations, extensions and re-serves must differ.

The tree later frees those positions again (eviction, or a finish that drops duplicates); a
second free of an unmapped slot would put the padding slot on the free list, so the shim also
filters unmapped pages out of the allocator's page free (``_free_swa_pages_none_cuda``). The
server's own invariant checks must be off in the control boot (the gate does that): the control
shows that the *output comparison* catches a wrong frontier. Log lines start with
``[wrong_frontier shim]`` ("installed", then "freed SWA").

The control boot runs the ``lru`` eviction order (the gate passes ``--swa-islands-eviction lru``),
whose default reclaim frees below the frontier at every commit at the gate's pool: the frontier
this shim moves. Under the window order reclaim is lazy, nothing is freed at a commit, and the
shim's frees would hit SWA the tree still owns.

``SWA_WRONG_FRONTIER_SHIFT`` (environment): the shift in tokens (default ``w``).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys

TARGET = "sglang.srt.mem_cache.swa_island_radix_cache"
ALLOCATOR = "sglang.srt.mem_cache.allocator.swa"
MARKER = "[wrong_frontier shim]"


def _say(msg: str) -> None:
    print(f"{MARKER} pid={os.getpid()} {msg}", file=sys.stderr, flush=True)


def _shift_for(cache) -> int:
    raw = os.environ.get("SWA_WRONG_FRONTIER_SHIFT", "").strip()
    return int(raw) if raw else int(cache.swa_retain_window) + 1


def _free_past_frontier(cache, req, up_to: int) -> None:
    import torch

    from sglang.srt.mem_cache.unified_cache.components import ComponentType

    if not req.kv.holds_kv:
        return
    frontier = req.kv.get_evicted_seqlen(ComponentType.SWA)
    if frontier <= 0:
        return
    end = min(frontier + _shift_for(cache), up_to)
    if end <= frontier:
        return
    idx = cache.req_to_token_pool.req_to_token[req.kv.req_pool_idx, frontier:end].to(torch.int64)
    allocator = cache.token_to_kv_pool_allocator
    idx = idx[allocator.full_to_swa_index_mapping[idx] > 0]  # not freed already
    if idx.numel() == 0:
        return
    before = allocator.swa_available_size()
    allocator.free_swa(idx)
    freed = allocator.swa_available_size() - before
    cache._wrong_frontier_frees = getattr(cache, "_wrong_frontier_frees", 0) + 1
    cache._wrong_frontier_freed = getattr(cache, "_wrong_frontier_freed", 0) + freed
    n = cache._wrong_frontier_frees
    if n <= 3 or n % 50 == 0:
        _say(f"island of {req.rid} up to {up_to}: freed SWA of [{frontier}, {end}) "
             f"({freed} slots); total {n} frees, {cache._wrong_frontier_freed} slots")


def install_cache(module) -> None:
    cls = module.SWAIslandUnifiedRadixCache
    if getattr(cls, "_wrong_frontier_installed", False):
        return
    real = cls.checkpoint_into_tree

    def checkpoint_into_tree(self, req, *, up_to: int, **kwargs):
        out = real(self, req, up_to=up_to, **kwargs)
        if not self.disable and not req.finished():
            _free_past_frontier(self, req, up_to)
        return out

    cls.checkpoint_into_tree = checkpoint_into_tree
    cls._wrong_frontier_installed = True
    _say(f"installed on {cls.__module__}.{cls.__name__} "
         f"(shift {os.environ.get('SWA_WRONG_FRONTIER_SHIFT') or 'w'})")


def install_allocator(module) -> None:
    cls = module.SWATokenToKVPoolAllocator
    if getattr(cls, "_wrong_frontier_installed", False):
        return
    real = cls._free_swa_pages_none_cuda

    def _free_swa_pages_none_cuda(self, full_page_representatives):
        live = self.full_to_swa_index_mapping[full_page_representatives] > 0
        return real(self, full_page_representatives[live])

    cls._free_swa_pages_none_cuda = _free_swa_pages_none_cuda
    cls._wrong_frontier_installed = True


_INSTALL = {TARGET: install_cache, ALLOCATOR: install_allocator}


class _PatchAfterImport(importlib.abc.MetaPathFinder):
    """Finds the targets with the normal path finder and patches each right after it executes."""

    def find_spec(self, name, path, target=None):
        if name not in _INSTALL:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return None
        real_exec = spec.loader.exec_module

        def exec_module(module):
            real_exec(module)
            _INSTALL[name](module)

        spec.loader.exec_module = exec_module
        return spec


for _name, _install in _INSTALL.items():
    if _name in sys.modules:  # imported before us (not expected): patch in place
        _install(sys.modules[_name])
if not all(n in sys.modules for n in _INSTALL):
    sys.meta_path.insert(0, _PatchAfterImport())
