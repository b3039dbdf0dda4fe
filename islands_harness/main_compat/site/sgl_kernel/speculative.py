"""Harness-only CPU stand-ins for sgl_kernel's speculative-decoding CPU kernels (issue 58).

sglang 0.5.23 imports these on CPU at module load of its speculative workers
(``sglang/kernels/ops/speculative/{reconstruct_tree,spec_tree,cache_locs,eagle}.py``). Upstream's
CPU kernels live in sgl-kernel's CPU build (``csrc/cpu/spec.cpp``), which no package index serves.
Each function here is a small pure-torch (or plain Python loop) version of the Triton kernel in the
same sglang module, which is its reference: ``test/tools/test_main_compat.py`` runs both on random
inputs (the Triton ones under ``TRITON_INTERPRET=1``) and requires equal outputs.

Index conventions are the kernels': every ``retrieve_*`` / ``positions`` tensor is addressed flat
(row ``b`` of a ``[bs, n]`` tensor starts at ``b * n``), draft trees have ``n = draft_token_num``
nodes with node 0 the last verified token, and ``-1`` means "none". All outputs are written in
place; nothing is returned.
"""

from __future__ import annotations

import torch

__all__ = [
    "assign_draft_cache_locs_contiguous_cpu",
    "assign_extend_cache_locs_cpu",
    "build_tree_kernel_efficient_cpu",
    "fill_accept_out_cache_loc_cpu",
    "fill_bonus_tokens_cpu",
    "reconstruct_indices_from_tree_mask",
    "verify_tree_greedy_cpu",
]


def _flat(t: torch.Tensor) -> torch.Tensor:
    """A flat view of a contiguous output tensor (writes land in ``t``)."""
    if not t.is_contiguous():
        raise ValueError("sgl_kernel CPU stand-in: output tensors must be contiguous")
    return t.view(-1)


def reconstruct_indices_from_tree_mask(
    tree_mask: torch.Tensor,
    verified_seq_len: torch.Tensor,
    positions: torch.Tensor,
    retrieve_index: torch.Tensor,
    retrieve_next_token: torch.Tensor,
    retrieve_next_sibling: torch.Tensor,
    batch_size: int,
    draft_token_num: int,
) -> None:
    """NGRAM verify metadata from the ``[bs, n, n]`` ancestor mask (row ``i`` marks the ancestors
    of node ``i``; only ``j < i`` counts). The contract of ``reconstruct_tree.py``'s docstring:
    ``positions = #ancestors + verified_seq_len``, ``retrieve_index = b * n + i``, the first child
    and next sibling (same parent, smallest larger index) or -1; roots have no sibling."""
    if batch_size == 0:
        return
    n = draft_token_num
    mask = tree_mask.reshape(-1)[: batch_size * n * n].view(batch_size, n, n).bool()
    idx = torch.arange(n)
    below = idx.view(1, n) < idx.view(n, 1)  # [i, j]: j < i
    ancestor = mask & below  # [b, i, j]: j a strict ancestor of i
    depth = ancestor.sum(dim=2)
    seq = verified_seq_len.reshape(-1)[:batch_size].to(torch.int64).view(batch_size, 1)
    cols = idx.view(1, 1, n).expand(batch_size, n, n)
    parent = torch.where(ancestor, cols, torch.full_like(cols, -1)).amax(dim=2)  # [b, i]
    rows = idx.view(1, n, 1).expand(batch_size, n, n)
    first_child = torch.where(ancestor, rows, torch.full_like(rows, n)).amin(dim=1)  # [b, tid]
    next_token = torch.where(first_child < n, first_child, torch.full_like(first_child, -1))
    same = (parent.unsqueeze(2) == parent.unsqueeze(1)) & below.unsqueeze(0)  # [b, k, tid]
    sibling = torch.where(same, rows, torch.full_like(rows, n)).amin(dim=1)
    next_sibling = torch.where((parent >= 0) & (sibling < n), sibling,
                               torch.full_like(sibling, -1))
    count = batch_size * n
    _flat(positions)[:count] = (depth + seq).reshape(-1).to(positions.dtype)
    _flat(retrieve_index)[:count] = torch.arange(count, dtype=retrieve_index.dtype)
    _flat(retrieve_next_token)[:count] = next_token.reshape(-1).to(retrieve_next_token.dtype)
    _flat(retrieve_next_sibling)[:count] = next_sibling.reshape(-1).to(
        retrieve_next_sibling.dtype)


def verify_tree_greedy_cpu(
    predicts: torch.Tensor,
    accept_index: torch.Tensor,
    accept_token_num: torch.Tensor,
    candidates: torch.Tensor,
    retrive_index: torch.Tensor,
    retrive_next_token: torch.Tensor,
    retrive_next_sibling: torch.Tensor,
    target_predict: torch.Tensor,
) -> None:
    """Greedy tree verification (``verify_tree_greedy_kernel_triton``): from node 0, at each level
    walk the children (first child, then siblings) for the one whose draft token equals the
    target's prediction at the last accepted node; accept it or stop. ``accept_index[b]`` gets the
    accepted nodes' retrieve indices (node 0 first), ``accept_token_num[b]`` their count past node
    0, ``predicts`` the target token at every accepted node and at the last one."""
    bs, n = candidates.shape[0], candidates.shape[1]
    steps = accept_index.shape[1]
    preds, target = _flat(predicts), target_predict.reshape(-1)
    cand = candidates.reshape(bs, n).tolist()
    r_index = retrive_index.reshape(bs, n).tolist()
    r_next = retrive_next_token.reshape(bs, n).tolist()
    r_sib = retrive_next_sibling.reshape(bs, n).tolist()
    for b in range(bs):
        last = r_index[b][0]
        accept_index[b, 0] = last
        accepted, cur = 0, 0
        for _ in range(1, steps):
            cur = r_next[b][cur]
            want = int(target[last])
            while cur != -1 and cand[b][cur] != want:
                cur = r_sib[b][cur]
            if cur == -1:
                break
            preds[last] = want
            accepted += 1
            accept_index[b, accepted] = r_index[b][cur]
            last = r_index[b][cur]
        accept_token_num[b] = accepted
        preds[last] = target[last]


def build_tree_kernel_efficient_cpu(
    parent_list: torch.Tensor,
    selected_index: torch.Tensor,
    verified_seq_len: torch.Tensor,
    tree_mask: torch.Tensor,
    positions: torch.Tensor,
    retrieve_index: torch.Tensor,
    retrieve_next_token: torch.Tensor,
    retrieve_next_sibling: torch.Tensor,
    topk: int,
    depth: int,
    draft_token_num: int,
    tree_mask_mode: int,
) -> None:
    """The EAGLE draft tree (``sgl_build_tree_kernel_efficient_triton``), one request at a time:
    retrieve links from each node's parent in ``selected_index``, the tree mask (mode 0
    ``FULL_MASK``: rows of ``seq_len + n`` after the earlier requests' rows; mode 1 ``QLEN_ONLY``:
    ``n x n`` per request) and each node's position. Mode 2 (bit-packed) is not provided."""
    if int(tree_mask_mode) not in (0, 1):
        raise NotImplementedError(
            "sgl_kernel CPU stand-in: build_tree_kernel_efficient_cpu supports tree_mask_mode 0 "
            f"(FULL_MASK) and 1 (QLEN_ONLY), got {int(tree_mask_mode)}")
    n = draft_token_num
    mask, pos = _flat(tree_mask), _flat(positions)
    r_index, r_next, r_sib = _flat(retrieve_index), _flat(retrieve_next_token), _flat(
        retrieve_next_sibling)
    seq_lens = verified_seq_len.reshape(-1).tolist()
    parents = parent_list.reshape(len(seq_lens), -1).tolist()
    selected = selected_index.reshape(len(seq_lens), -1).tolist()
    prefix = 0
    for b, seq_len in enumerate(seq_lens):
        sel, par = selected[b], parents[b]

        def position_of(token: int) -> int:
            return next((pp for pp in range(n - 1) if sel[pp] == token), -1)

        seq_tree_idx = n * n * b + prefix * n
        pos[b * n] = seq_len
        for i in range(n - 1, 0, -1):
            r_index[b * n + i] = b * n + i
            parent_tb = sel[i - 1] // topk
            if parent_tb == 0:
                parent_position = 0
            else:
                found = position_of(par[parent_tb])
                if found < 0:
                    continue
                parent_position = found + 1
            first = int(r_next[b * n + parent_position])
            r_next[b * n + parent_position] = i
            if first != -1:
                r_sib[b * n + i] = first
        r_index[b * n] = b * n
        for x in range(n):
            if int(tree_mask_mode) == 0:
                row = seq_tree_idx + (seq_len + n) * x + seq_len + 1
            else:
                row = n * n * b + n * x + 1
            mask[row - 1] = True
            mask[row: row + n - 1] = False
            if x == 0:
                continue
            cur, steps = x - 1, 0
            for _ in range(depth):
                steps += 1
                mask[row + cur] = True
                parent_tb = sel[cur] // topk
                if parent_tb == 0:
                    break
                cur = position_of(par[parent_tb])
                if cur < 0:
                    break
            pos[b * n + x] = steps + seq_len
        prefix += seq_len


def assign_draft_cache_locs_contiguous_cpu(
    req_pool_indices: torch.Tensor,
    req_to_token: torch.Tensor,
    seq_lens: torch.Tensor,
    out_cache_loc: torch.Tensor,
    pool_len: int,
    topk: int,
    num_cols: int,
) -> None:
    """``out_cache_loc[b * topk * num_cols:][:topk * num_cols] = req_to_token[row_b, seq_len_b:]
    [:topk * num_cols]`` (``assign_draft_cache_locs_contiguous``; positions are not written)."""
    if pool_len != req_to_token.shape[1]:
        raise ValueError(f"pool_len {pool_len} != req_to_token.shape[1] {req_to_token.shape[1]}")
    width = topk * num_cols
    out = _flat(out_cache_loc)
    for b, (row, start) in enumerate(zip(req_pool_indices.tolist(), seq_lens.tolist())):
        out[b * width:(b + 1) * width] = req_to_token[row, start:start + width].to(out.dtype)


def assign_extend_cache_locs_cpu(
    req_pool_indices: torch.Tensor,
    req_to_token: torch.Tensor,
    start_offset: torch.Tensor,
    end_offset: torch.Tensor,
    out_cache_loc: torch.Tensor,
    pool_len: int,
) -> None:
    """Gather ``req_to_token[row_b, start_b:end_b]`` for each request, packed in batch order into
    ``out_cache_loc`` (``assign_extend_cache_locs``; the reverse of
    ``assign_req_to_token_pool_cpu``)."""
    if pool_len != req_to_token.shape[1]:
        raise ValueError(f"pool_len {pool_len} != req_to_token.shape[1] {req_to_token.shape[1]}")
    out, at = _flat(out_cache_loc), 0
    rows, starts, ends = req_pool_indices.tolist(), start_offset.tolist(), end_offset.tolist()
    for row, s, e in zip(rows, starts, ends):
        if e > s:
            out[at:at + e - s] = req_to_token[row, s:e].to(out.dtype)
            at += e - s


def fill_accept_out_cache_loc_cpu(
    accept_index: torch.Tensor,
    out_cache_loc: torch.Tensor,
    accept_out_cache_loc: torch.Tensor,
) -> None:
    """Pack ``out_cache_loc[accept_index[i]]`` for every ``accept_index[i] != -1``, in order, into
    ``accept_out_cache_loc`` (``fill_accept_out_cache_loc``)."""
    index = accept_index.reshape(-1)
    kept = index[index != -1].to(torch.int64)
    _flat(accept_out_cache_loc)[: kept.numel()] = out_cache_loc.reshape(-1)[kept].to(
        accept_out_cache_loc.dtype)


def fill_bonus_tokens_cpu(
    accept_tokens: torch.Tensor,
    accept_lens: torch.Tensor,
    bonus_tokens: torch.Tensor,
    accept_stride: int,
) -> None:
    """``bonus_tokens[b] = accept_tokens.flat[accept_stride * b + accept_lens[b] - 1]``: each
    request's last accepted token (``fill_bonus_tokens``)."""
    lens = accept_lens.reshape(-1).to(torch.int64)
    at = torch.arange(lens.numel(), dtype=torch.int64) * accept_stride + lens - 1
    _flat(bonus_tokens)[: lens.numel()] = accept_tokens.reshape(-1)[at].to(bonus_tokens.dtype)
