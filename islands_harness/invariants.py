"""Invariants of an SWA radix tree, its pools and its running requests, checkable while busy.

Upstream's ``SWARadixCache.sanity_check`` is valid only when idle (it asserts no locks). These
checks hold at every point between scheduler steps and are what the island tests assert:

- counters: ``full/swa_{evictable,protected}_size_`` equal what a walk of the tree recomputes;
- structure: no unlocked tombstone leaf; no tombstone inside a running request's SWA-lock range;
- mapping: tombstone nodes map to SWA slot 0, live nodes to a slot > 0;
- no double free: each sub-allocator's free list holds unique pages; no live full->SWA mapping
  shares a slot; no slot is both free and referenced by the tree or a running request; the SWA
  slots in use are exactly the live mapping entries (nothing leaked, nothing freed twice);
- windows: every running request's last ``sliding_window_size`` committed positions (what its next
  token reads) map to live SWA slots, so no SWA slot a running request reads was freed;
- locks: the SWA locks of the running requests cover at least the tree's protected SWA tokens.

The hold of a request (:func:`held_swa`) is computed here from the tree's lock range and the
allocator's mapping, independently of how the cache's metrics compute it.
"""

from __future__ import annotations

from typing import Iterable, List, Tuple

import torch


def tree_nodes(tree) -> List:
    out, stack = [], [tree.root_node]
    while stack:
        n = stack.pop()
        if n is not tree.root_node:
            out.append(n)
        stack.extend(n.children.values())
    return out


def recomputed_counters(tree) -> Tuple[int, int, int, int]:
    fe = fp = se = sp = 0
    for n in tree_nodes(tree):
        k = len(n.value)
        if n.full_lock_ref > 0:
            fp += k
        else:
            fe += k
        if not n.swa_tombstone:
            if n.swa_lock_ref > 0:
                sp += k
            else:
                se += k
    return fe, fp, se, sp


def swa_lock_range(tree, req) -> List:
    """Nodes whose SWA lock belongs to ``req`` (``inc_lock_ref``'s walk), [] if released."""
    if req.last_node is None or req.swa_prefix_lock_released:
        return []
    out, node = [], req.last_node
    while node is not tree.root_node:
        out.append(node)
        if req.swa_uuid_for_lock is not None and node.swa_uuid == req.swa_uuid_for_lock:
            break
        node = node.parent
    return out


def window_positions(tree, req) -> Tuple[int, int]:
    """``[lo, L)``: the committed positions the request's next token reads through SWA.

    ``L = kv_committed_len`` (positions whose KV is written); the next token at position ``L``
    attends to ``[L - sliding_window_size, L]``.
    """
    L = req.kv_committed_len
    return max(0, L - tree.sliding_window_size), L


def check_windows_live(stack, running: Iterable) -> None:
    """Every running request's window maps to live SWA slots (nothing it reads was freed)."""
    mapping = stack.allocator.full_to_swa_index_mapping
    for r in running:
        if r.req_pool_idx is None:
            continue
        lo, hi = window_positions(stack.tree, r)
        if hi <= lo:
            continue
        locs = stack.req_to_token_pool.req_to_token[r.req_pool_idx, lo:hi].to(torch.int64)
        dead = (mapping[locs] <= 0).nonzero().flatten()
        assert dead.numel() == 0, (
            f"{r.rid}: SWA of positions {[lo + int(i) for i in dead[:8]]} freed inside its "
            f"window [{lo}, {hi})"
        )


def held_swa(stack, req) -> Tuple[int, int]:
    """``(locked, private)`` SWA tokens a running request keeps, from the tree and the allocator.

    ``locked``: tokens of the live nodes in its SWA-lock range; ``private``: its own slots past
    ``cache_protected_len`` whose full->SWA mapping is live.
    """
    locked = sum(len(n.value) for n in swa_lock_range(stack.tree, req) if not n.swa_tombstone)
    private = 0
    lo, hi = req.cache_protected_len, req.kv_allocated_len
    if req.req_pool_idx is not None and hi > lo:
        locs = stack.req_to_token_pool.req_to_token[req.req_pool_idx, lo:hi].to(torch.int64)
        private = int((stack.allocator.full_to_swa_index_mapping[locs] > 0).sum())
    return locked, private


def _free_list(sub) -> torch.Tensor:
    return torch.cat([sub.free_pages, sub.release_pages])


def check_invariants(stack, running: Iterable = ()) -> None:
    tree, alloc = stack.tree, stack.allocator
    page = alloc.page_size
    mapping = alloc.full_to_swa_index_mapping
    nodes = tree_nodes(tree)

    counters = (
        tree.full_evictable_size_,
        tree.full_protected_size_,
        tree.swa_evictable_size_,
        tree.swa_protected_size_,
    )
    assert counters == recomputed_counters(tree), (counters, recomputed_counters(tree))

    for n in nodes:
        # Leaves are live, except a leaf still full-locked by a running request whose SWA was
        # released early (upstream's dec_swa_lock_only, or evict's SWA phase on such a leaf).
        assert n.children or not n.swa_tombstone or n.full_lock_ref > 0, f"tombstone leaf {n.id}"
        assert n.full_lock_ref >= n.swa_lock_ref >= 0, f"lock refs of {n.id}"
        m = mapping[n.value]
        if n.swa_tombstone:
            assert n.swa_lock_ref == 0, f"locked tombstone {n.id}"
            assert bool((m == 0).all()), f"tombstone {n.id} still maps SWA slots"
        else:
            assert bool((m > 0).all()), f"live node {n.id} maps freed SWA slots"

    running = [r for r in running if r.req_pool_idx is not None]
    locked_total = 0
    for r in running:
        for n in swa_lock_range(tree, r):
            assert not n.swa_tombstone, f"{r.rid}: tombstone {n.id} inside its SWA lock"
            assert n.swa_lock_ref > 0, f"{r.rid}: node {n.id} in its SWA lock range is unlocked"
            locked_total += len(n.value)
    # shared nodes are counted once per request: at least what the tree says is protected
    assert locked_total >= tree.swa_protected_size_, (locked_total, tree.swa_protected_size_)
    check_windows_live(stack, running)
    if hasattr(tree, "check_eviction_classes"):
        tree.check_eviction_classes()  # islands: the eviction index agrees with the tree

    # Full pool: free list unique, disjoint from what the tree and running requests reference.
    # (Counting and masks instead of unique/isin: O(n), and these run after every step.)
    full_free = _free_list(alloc.full_attn_allocator)
    assert _each_once(full_free), "full page freed twice"
    referenced = [n.value for n in nodes]
    for r in running:
        referenced.append(
            stack.req_to_token_pool.req_to_token[r.req_pool_idx, : r.kv_allocated_len].to(
                torch.int64
            )
        )
    if referenced:
        ref_pages = torch.cat(referenced) // page
        assert not bool(_mask(full_free, ref_pages)[ref_pages].any()), "referenced full page is free"

    # SWA pool: free list unique; live mapping entries unique and exactly the slots in use.
    swa_free = _free_list(alloc.swa_attn_allocator)
    assert _each_once(swa_free), "SWA page freed twice"
    live = mapping[:-1][mapping[:-1] > 0]
    assert _each_once(live), "two full slots map one SWA slot"
    used = alloc.size_swa - alloc.swa_available_size()
    live_pages = live // page
    n_live_pages = int((torch.bincount(live_pages) > 0).sum()) if live.numel() else 0
    assert n_live_pages * page == used, (
        f"SWA in use {used} tokens != {n_live_pages} live mapped pages x {page}"
    )
    assert not bool(_mask(swa_free, live_pages)[live_pages].any()), "live SWA slot is free"


def _each_once(x: torch.Tensor) -> bool:
    return x.numel() == 0 or int(torch.bincount(x).max()) <= 1


def _mask(members: torch.Tensor, queries: torch.Tensor) -> torch.Tensor:
    """Boolean membership table of ``members``, large enough to index with ``queries``."""
    size = 1 + max(int(members.max()) if members.numel() else 0,
                   int(queries.max()) if queries.numel() else 0)
    mask = torch.zeros(size, dtype=torch.bool, device=members.device)
    mask[members] = True
    return mask


def req_private_swa(stack, req) -> int:
    """Live SWA slots of ``req`` past its tree-owned prefix (request-owned hold)."""
    return held_swa(stack, req)[1]


def req_locked_swa(stack, req) -> int:
    """SWA slots of the tree nodes ``req`` SWA-locks."""
    return held_swa(stack, req)[0]


def req_hold(stack, req) -> int:
    """SWA slots ``req`` keeps: its SWA-locked tree nodes plus its live request-owned slots."""
    return sum(held_swa(stack, req))
