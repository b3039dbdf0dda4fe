"""NEGATIVE CONTROL for the equality gate: a deliberately wrong SWA-island frontier.

Test-only. Nothing in the production path imports this file: Python imports a module named
``sitecustomize`` at interpreter start only when its directory is on ``sys.path``, and only
``scripts/equality_gate.py --negative-control`` puts this directory on the server's
``PYTHONPATH``. The scheduler subprocesses inherit that environment, so they load it as well.

What it breaks. After the real ``SWAIslandRadixCache.cache_unfinished_req`` (chunk islands) and
``SWAIslandRadixCache.insert_decode_island`` (decode islands) have run, it also frees, with
``allocator.free_swa``, the SWA slots of ``req_to_token[req.req_pool_idx, t : t + shift]``, where
``t`` is the frontier that call used (``swa_tombstone_frontier``, or ``chunk_frontier`` for
chunk commits), clamped to the committed length. The tree is left as it is, so those nodes still
look live (not tombstoned, counted as SWA-resident) while their SWA KV is gone and their slots go
back to the free list for other requests. In effect the frontier sits ``shift`` tokens too far.
The full-to-SWA mapping of those slots is zeroed, so SWA layers read slot 0 (padding) or, after
re-allocation, another request's KV.

Why ``shift`` defaults to a window (``w = window_left + 1``) and not one page:

- The spec frontier ``t = floor_p(L - (w + p))`` keeps ``L - t >= w + p`` committed tokens live.
  The request's next token (position ``L``) reads SWA keys ``[L - w + 1, L]``, and every later
  token reads only positions after that. Freeing one page more, ``[t, t + p)``, ends at
  ``t + p <= L - w``, strictly before ``L - w + 1``: the running request never reads it. That
  wrong frontier is invisible to the request itself; only a later request whose prefix match ends
  within the island's first page would read the freed page, which is a rare probe. A gate that
  passes that control would prove nothing about the gate.
- With ``shift = w`` the freed range is ``[t, t + w)``. For ``p == 1`` (``t = L - w - 1``) that
  is ``[L - w - 1, L - 1)``: ``w - 2`` of the ``w - 1`` committed keys the next token reads (all
  but the newest). For ``p > 1`` it cuts into the next token's window unless ``t`` sits at the
  bottom of its page-rounding range (``t = L - w - 2p + 1``). Every continuation, extension and re-serve of the island then reads
  freed KV: the equality gate must see different tokens.

On the CPU gate's tiny Laguna model the cache's ``window`` is 33, one more than the 32 keys the
attention reads (SGLang gives ``SWARadixCache`` Laguna's HF ``sliding_window`` as
``sliding_window_size``, while its attention uses ``sliding_window - 1``; Gemma models pass
``sliding_window - 1`` to both). So the spec frontier there keeps one token more than needed, and
a wrong frontier must be more than two tokens too far (p = 1) before any read notices.

Knobs (environment of the server process):

- ``SWA_WRONG_FRONTIER_SHIFT``: the shift in tokens (default: the model window ``w``); used to
  probe how small a shift the gate still catches.

The server's own invariant checks would also notice (``available + evictable + protected`` no
longer equals the pool size), so the gate's control run turns them off: the control is meant to
show that the *output comparison* catches a wrong frontier. The island cache frees a node's SWA
(``_free_node_swa``, through the allocator's ``free_swa_pages``) only for pages it knows are live
and has no filter, so the shim replaces that step with one that drops the pages the shim already
freed; otherwise the later free of the same node would free them twice. A line starting with
``[wrong_frontier shim]`` in the server log confirms the shim is installed and counts its frees.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import logging
import os
import sys

TARGET = "sglang.srt.mem_cache.swa_island_radix_cache"
MARKER = "[wrong_frontier shim]"
_log = logging.getLogger("wrong_frontier_shim")


def _say(msg: str) -> None:
    # stderr goes to the server log (SglangServer redirects both streams there).
    print(f"{MARKER} pid={os.getpid()} {msg}", file=sys.stderr, flush=True)


def _shift_for(cache) -> int:
    raw = os.environ.get("SWA_WRONG_FRONTIER_SHIFT", "").strip()
    return int(raw) if raw else int(cache.window)


def _free_past_frontier(cache, req, frontier: int, committed: int, kind: str) -> None:
    import torch

    if req.req_pool_idx is None or frontier <= 0:
        return
    shift = _shift_for(cache)
    end = min(frontier + shift, committed)
    if end <= frontier:
        return
    idx = cache.req_to_token_pool.req_to_token[req.req_pool_idx, frontier:end].to(torch.int64)
    allocator = cache.token_to_kv_pool_allocator
    before = allocator.swa_available_size()
    allocator.free_swa(idx)
    freed = allocator.swa_available_size() - before
    cache._wrong_frontier_frees = getattr(cache, "_wrong_frontier_frees", 0) + 1
    cache._wrong_frontier_freed = getattr(cache, "_wrong_frontier_freed", 0) + freed
    n = cache._wrong_frontier_frees
    if n <= 3 or n % 50 == 0:
        _say(f"{kind} island: freed SWA of [{frontier}, {end}) (shift {shift}, {freed} slots); "
             f"total {n} frees, {cache._wrong_frontier_freed} slots")


def install(module) -> None:
    cls = module.SWAIslandRadixCache
    if getattr(cls, "_wrong_frontier_installed", False):
        return
    real_cache_unfinished_req = cls.cache_unfinished_req
    real_insert_decode_island = cls.insert_decode_island

    def cache_unfinished_req(self, req, chunked: bool = False):
        if self.disable:
            return real_cache_unfinished_req(self, req, chunked=chunked)
        frontier = self.chunk_frontier(req, chunked)  # what the real call uses
        committed = req.extend_range.end
        before = self.stats.chunk_islands
        out = real_cache_unfinished_req(self, req, chunked=chunked)
        if self.stats.chunk_islands > before:
            _free_past_frontier(self, req, frontier, committed, "chunk")
        return out

    def insert_decode_island(self, req):
        committed = req.kv_committed_len
        frontier = module.swa_tombstone_frontier(committed, self.window, self.page_size)
        before = self.stats.decode_islands
        out = real_insert_decode_island(self, req)
        if self.stats.decode_islands > before:
            _free_past_frontier(self, req, frontier, committed, "decode")
        return out

    def _free_node_swa(self, x):
        # The island cache frees a node's SWA only as the node turns into a tombstone, and
        # without a filter; the shim freed some of those pages behind its back (tree and request
        # state unchanged), so drop them here: without this the later free of the same node
        # would free them again (a double free that the SGLANG_DEBUG_MEMORY_POOL check turns
        # into a crash) instead of the gate seeing outputs.
        import torch

        allocator = self.token_to_kv_pool_allocator
        starts = x.value[:: self.page_size]
        live = allocator.full_to_swa_index_mapping[starts] > 0
        if not bool(torch.all(live)):
            starts = starts[live]
        allocator.free_swa_pages(starts)

    cls._free_node_swa = _free_node_swa
    cls.cache_unfinished_req = cache_unfinished_req
    cls.insert_decode_island = insert_decode_island
    cls._wrong_frontier_installed = True
    _say(f"installed on {cls.__module__}.{cls.__name__} "
         f"(shift {os.environ.get('SWA_WRONG_FRONTIER_SHIFT') or 'w'})")


class _PatchAfterImport(importlib.abc.MetaPathFinder):
    """Finds TARGET with the normal path finder and patches the module right after it executes."""

    def find_spec(self, name, path, target=None):
        if name != TARGET:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return None
        real_exec = spec.loader.exec_module

        def exec_module(module):
            real_exec(module)
            install(module)

        spec.loader.exec_module = exec_module
        return spec


if TARGET in sys.modules:  # imported before us (not expected): patch in place
    install(sys.modules[TARGET])
else:
    sys.meta_path.insert(0, _PatchAfterImport())
