# SPDX-License-Identifier: Apache-2.0
"""SWA islands on sglang 0.5.23's UnifiedRadixCache.

The island cache of the 0.5.23 target: a ``UnifiedRadixCache`` subclass that the registry builds
under ``--enable-swa-islands`` (``create_unified_radix_cache(ctx, cache_class=...)``). Islands
live in the controller only: they go through what both tree cores answer (``checkpoint``,
``lock`` / ``release_swa``, ``evict``), so the default Rust core and the Python core behave alike;
only the eviction order ``window`` (``auto``'s choice at a lean SWA pool) overrides a
``TreeComponent`` (and so runs on the Python core). Vocabulary and formulas:
``swa_island_formulas`` (shared with the 0.5.15 target).

- committed length ``L`` of a running request: ``req.owned_kv_len()``, the tokens upstream's
  ``release_kv_cache`` would checkpoint were the request released now (``kv_committed_len``).
  Its KV is written, or being written by a forward already launched: under the overlap
  scheduler ``alloc_for_decode`` counts the next step's position before this step's result is
  processed, and that step runs before any batch scheduled later, as at upstream's finish insert.
  Without overlap it is every token but the newest. ``island_out_of_window`` keeps one page of
  slack for that token.
- decode island: ``on_decode_progress`` (called by the scheduler once per decode step of a running
  request) checkpoints ``[0, L)`` into the tree through main's own ``checkpoint`` once
  ``decode_island_interval`` tokens were committed since the request's tree-protected end
  (``req.kv.cache_protected_len``, the end of its last island: the prompt end, then each decode
  island). Main's insert path then frees the request's SWA below its frontier (tombstones),
  splits a leaf longer than the window so the request's new lock covers one window, and moves
  the lock there (islands closer than a window: the lock takes whole island nodes back to one
  window, so the hold is up to ``w + interval`` instead of ``w + 2p``). The
  cadence is accumulated progress (speculative accept lengths fire it) and reads request and
  tree state only, so ``up_to`` is the same on every rank (``@rank_consensus``); it keeps no
  per-request state of its own (nothing to leak when a request finishes, aborts or retracts).
- island window release: once ``island_out_of_window(L, end, w, p)`` (``w`` = the retained
  window + 1), no token of the request reads the island's window any more: its SWA lock is
  released (``release_swa``, once per lock through ``TreeLock.swa_released``; the full lock
  stays), so the island is live, matchable and evictable.

- reclaim without forgetting (``--swa-islands-reclaim``): main frees a committing request's SWA
  below its frontier at every commit (``SGLANG_OPT_UNIFIED_CACHE_FREE_OUT_OF_WINDOW_SLOTS``, on by
  default), so a request that diverges inside a committed chunk hits only up to the last chunk end.
  The island cache answers main's named decision ``frees_out_of_window_at_commit(req)`` (patch
  ``unified cache: name the commit-time out-of-window free decision``) from the policy: ``lazy``
  never frees at the commit, so that SWA goes into the tree live, leaves the
  request's hold (the new lock is capped at one window by main's leaf split) and stays matchable
  and evictable (main's SWA LRU); ``eager`` always frees (main's default behaviour); ``auto``
  (the default under ``lru``) frees at every commit where the SWA pool cannot keep one chunk per running
  request live (``lazy_reclaim_fits``: main's single SWA LRU list evicts a lazily kept chunk
  under pressure and the window at its end with it, as measured at the lean pools), and
  elsewhere while the free SWA pool is below ``reclaim_watermark`` (one prefill chunk). Not
  given, the policy is ``default_reclaim`` of the eviction order: ``lazy`` under ``window``, whose
  order gives cold SWA up before any window, ``auto`` under ``lru``.
- commits past an SWA branch: main stops the first insert after a match whose Full KV hit ran past
  its SWA hit at that branch (``swa_branching_seqlen``) and leaves the committed tokens after it to
  the request's next checkpoint (for a prompt on stock main, its finish); the island cache inserts
  them in the same checkpoint (``_continues_past_branch``), so a prefilled prompt's end is a match
  end and its SWA is the tree's (``lazy``: live and evictable), not the request's. A finish keeps
  main's single insert.
- eviction order (``--swa-islands-eviction``, ``resolve_eviction``): ``auto`` (default) is
  ``window`` where the SWA pool cannot keep one chunk per running request
  (``lazy_reclaim_fits``), else ``lru``; ``lru`` keeps upstream's SWA walk on
  either tree core; ``window`` swaps in ``SWAIslandComponent`` (cold SWA before retention windows
  before the other windows before queued hits', ``unified_cache.components.swa_island``) through
  upstream's ``component_registry_override``, which selects the Python tree core.
- queued hits (``window`` only): ``on_request_queued`` (the scheduler calls it when a request joins
  the waiting queue, new or retracted) matches the request once and keeps the node its match
  ends at as its queued hit until its first ``checkpoint`` or its release; every checkpoint then
  matches again the waiting requests whose hit lies on the committed path and whose next page
  continues along it (``swa_island_queue.QueuedHitIndex.continuing``). One match per arriving request and per
  request a commit moves; no host sync. While requests run, admission leaves their windows unspent
  (``swa_admission_reserve``, at most the SWA the running requests hold), so a prefill pass does
  not admit one request by evicting the window the next one will hit.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from sglang.srt.mem_cache.base_prefix_cache import MatchPrefixParams
from sglang.srt.mem_cache.cache_init_params import CacheInitParams
from sglang.srt.mem_cache.common import _req_radix_key
from sglang.srt.mem_cache.radix_cache import RadixKey
from sglang.srt.mem_cache.swa_island_formulas import (
    EVICTION_ORDERS,
    RECLAIM_POLICIES,
    decode_island_due,
    decode_island_interval,
    default_reclaim,
    island_out_of_window,
    lazy_reclaim_fits,
    queued_hit_reserve,
    reclaim_watermark,
    resolve_eviction,
    window_lock_tokens,
)
from sglang.srt.mem_cache.swa_island_guard import check_swa_island_pool
from sglang.srt.mem_cache.unified_cache.component_type import ComponentType
from sglang.srt.mem_cache.unified_cache.components.swa_island import SWAIslandComponent
from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache

logger = logging.getLogger(__name__)

if TYPE_CHECKING:
    from sglang.srt.managers.schedule_batch import Req, ScheduleBatch


def committed_len(req: "Req") -> int:
    """``L``: what upstream's release would checkpoint now (``owned_kv_len``; the prompt only
    under ``strip_thinking_cache`` while reasoning). Example: a 100-token prompt with 5 output
    tokens -> 104 without overlap, 105 with the next decode step launched (overlap)."""
    return req.owned_kv_len()


def _auto_reason(eviction: str, fits: bool) -> str:
    """What the log says after a resolved ``auto`` eviction order."""
    if eviction != "auto":
        return ""
    return (" (auto: the SWA pool keeps a chunk per running request)" if fits else
            " (auto: the SWA pool cannot keep a chunk per running request)")


class SWAIslandUnifiedRadixCache(UnifiedRadixCache):
    """``UnifiedRadixCache`` with SWA islands (``--enable-swa-islands``)."""

    def __init__(self, params: CacheInitParams):
        if params.swa_islands_eviction not in EVICTION_ORDERS:
            raise ValueError(f"swa_islands_eviction must be one of {EVICTION_ORDERS}, "
                             f"got {params.swa_islands_eviction!r}")
        swa_tree = ComponentType.SWA in (params.tree_components or ())
        # Whether the SWA pool keeps one chunk live per running request (``lazy_reclaim_fits``):
        # it resolves ``auto`` of both settings.
        fits = swa_tree and lazy_reclaim_fits(
            params.token_to_kv_pool_allocator.size_swa, params.req_to_token_pool.size,
            params.chunked_prefill_size, params.page_size)
        eviction = resolve_eviction(params.swa_islands_eviction, fits or not swa_tree)
        reclaim = params.swa_islands_reclaim or default_reclaim(eviction)
        if reclaim not in RECLAIM_POLICIES:
            raise ValueError(f"swa_islands_reclaim must be one of {RECLAIM_POLICIES}, "
                             f"got {params.swa_islands_reclaim!r}")
        if eviction == "window" and swa_tree:
            # Upstream's extension point for a component; it selects the Python tree core.
            params.component_registry_override = {
                **(params.component_registry_override or {}),
                ComponentType.SWA: SWAIslandComponent,
            }
        super().__init__(params)
        # --swa-islands-reclaim, or when not given the default for the eviction order.
        self.swa_islands_reclaim = reclaim
        # Computed decode tokens between two decode islands: cp / 4 unless overridden.
        self.decode_island_interval = decode_island_interval(
            params.chunked_prefill_size, params.swa_islands_decode_interval
        )
        # Free SWA tokens below which ``auto`` frees at the commit: one prefill chunk.
        self.reclaim_watermark = reclaim_watermark(params.chunked_prefill_size, self.page_size)
        # Whether ``auto`` may leave chunks live at all: only where the SWA pool keeps one chunk
        # per running request (main's single SWA LRU list would evict them with their windows).
        self.lazy_reclaim_fits = self.is_swa_enabled and fits
        # The eviction order this cache runs: --swa-islands-eviction, ``auto`` resolved.
        self.swa_islands_eviction = eviction
        # Tokens an island's window spans for ``island_out_of_window``: the retained window + 1.
        self._island_window = (self.swa_retain_window or 0) + 1
        # Whether decode islands run at all (an SWA tree that is not disabled).
        self._islands_active = self.is_swa_enabled and not self.disable
        # Queued hits: kept by the window order's component, installed above (None under ``lru``).
        self._swa_island_component = (
            self.components[ComponentType.SWA]
            if eviction == "window" and ComponentType.SWA in self.components
            else None)
        if self._islands_active:
            check_swa_island_pool(self, params.chunked_prefill_size)
        logger.info("SWA islands: reclaim %s%s, eviction %s%s, decode island every %d tokens",
                    reclaim, "" if params.swa_islands_reclaim else " (the default for it)",
                    eviction, _auto_reason(params.swa_islands_eviction, fits),
                    self.decode_island_interval)

    # ---- reclaim --------------------------------------------------------------------------------

    def frees_out_of_window_at_commit(self, req: "Req") -> bool:
        """Main's commit-time free of ``req``'s SWA below its frontier, decided by
        ``--swa-islands-reclaim``: ``lazy`` no (it stays in the tree, live and evictable, so a
        request diverging inside the committed tokens hits up to its divergence), ``eager`` yes,
        ``auto`` yes where the SWA pool is too small to keep a chunk per running request live
        (``lazy_reclaim_fits``) and elsewhere while the free SWA pool is below
        ``reclaim_watermark``. The answer reads pool state every rank shares."""
        if self.swa_islands_reclaim == "lazy":
            return False
        if self.swa_islands_reclaim == "eager" or not self.lazy_reclaim_fits:
            return True
        return self.token_to_kv_pool_allocator.swa_available_size() < self.reclaim_watermark

    # ---- queued hits (window order) ---------------------------------------------------------------

    def on_request_queued(self, req: "Req") -> None:
        """``req`` joined the waiting queue (new, or retracted and queued again, then at the end):
        the node its match ends at becomes its queued hit, whose window eviction takes last, until
        its first checkpoint (admission locks its own match before that) or its release."""
        if self._swa_island_component is None or self.disable:
            return
        self._queue_match(req)

    def _queue_match(self, req: "Req") -> None:
        """Match ``req`` once (``match_prefix``, as admission will) and file the match end as its
        queued hit, under the child key its next page would continue on."""
        token_ids = req.origin_input_ids + req.output_ids
        result = self.match_prefix(MatchPrefixParams(key=_req_radix_key(self, req, token_ids)))
        node = self.resolve_node_handle(result.last_device_node)
        hit, page = result.device_prefix_len, self.page_size
        is_eagle = self.tree_core.is_eagle
        nxt = token_ids[hit: hit + page + (1 if is_eagle else 0)]
        edge = None
        if len(nxt) >= page + (1 if is_eagle else 0):
            edge = RadixKey(nxt, req.extra_key, is_bigram=is_eagle,
                            cache_salt=req.cache_salt).child_key(page)
        self._swa_island_component.queued.set(req, node, edge)

    def checkpoint_into_tree(self, req: "Req", *, up_to: int, **kwargs) -> None:
        """Main's insert, which goes on past an SWA branch (:meth:`_continues_past_branch`);
        under the window order the request's queued hit ends at its first checkpoint, and the
        waiting requests that continue along the committed path match again (their deeper hit
        becomes their queued hit)."""
        component = self._swa_island_component
        if component is not None:
            component.queued.drop(req)
        branching = req.swa_branching_seqlen
        super().checkpoint_into_tree(req, up_to=up_to, **kwargs)
        if self._continues_past_branch(req, branching, up_to):
            super().checkpoint_into_tree(req, up_to=up_to, **kwargs)
        if component is not None:
            last_node = self.resolve_node_handle(req.last_node)
            for waiting in component.queued.continuing(last_node, self.page_size):
                self._queue_match(waiting)

    def _continues_past_branch(self, req: "Req", branching, up_to: int) -> bool:
        """Whether the checkpoint of the running ``req`` to ``up_to`` inserts again: main stops
        the first insert after a match whose Full KV hit ran past its SWA hit at that branch
        (``swa_branching_seqlen``, cleared once the branch is in) and leaves the committed tokens
        after it to the request's next checkpoint. With islands they go in now, as every other
        commit's do: the prompt's end is a match end from its prefill on, and the SWA below the
        window is the tree's, live and evictable (``lazy``) or freed, not held by the request
        until its first decode island. Example: page 1, a 1,137-token prompt whose match hit 775
        tokens and whose Full KV hit ran to 887: the prefill's checkpoint inserts ``[0, 887)``,
        then ``[887, 1137)``."""
        return (self._islands_active and branching is not None
                and req.swa_branching_seqlen is None and not req.finished()
                and req.kv.cache_protected_len < up_to // self.page_size * self.page_size)

    def on_release(self, req: "Req", *, checkpointed: bool) -> None:
        if self._swa_island_component is not None:
            self._swa_island_component.queued.drop(req)
        super().on_release(req, checkpointed=checkpointed)

    def swa_admission_reserve(self, running_batch: "ScheduleBatch") -> int:
        """SWA tokens a prefill pass leaves unspent (patch ``admission: leave the SWA a tree cache
        reserves``): under the window order, while decode requests run, the windows of the queued
        hits whose window is still evictable (end node live and SWA-unlocked), at most the SWA
        neither free nor evictable (``queued_hit_reserve``). Admission counts those windows as
        evictable; spending them admits a request now and costs a waiting one its hit, while the
        running requests would have returned SWA by finishing. With no request running it
        reserves nothing, so admission always makes progress. Once per prefill pass, O(cap +
        running requests): the hits it visits (``spendable_queued_hits``) stop at the cap's worth
        of windows plus one per running request and one for a chunked prefill (each locks one
        node, so at most that many hits are passed over as locked; tombstoned hits passed over
        only shrink the reserve)."""
        component = self._swa_island_component
        if component is None or self.disable or running_batch.is_empty():
            return 0
        allocator = self.token_to_kv_pool_allocator
        held = allocator.size_swa - allocator.swa_available_size() - self.swa_evictable_size()
        window = window_lock_tokens(self.sliding_window_size, self.page_size)
        limit = -(-held // window)
        hits = component.spendable_queued_hits(limit, limit + running_batch.batch_size() + 1)
        return queued_hit_reserve(hits, self.sliding_window_size, self.page_size, held)

    # ---- decode islands -------------------------------------------------------------------------

    def on_decode_progress(self, req: "Req", accepted: int) -> None:
        """After a decode step of the running ``req`` (the scheduler calls it once per running
        request and step, so it is on the decode hot path): lay a decode island when one is due,
        then release the latest island's window lock once the request has left it. The common
        step (no island due, the window lock already released) reads four request fields."""
        lock = req.lock
        if lock is None or not self._islands_active:
            return
        committed = committed_len(req)
        protected = req.kv.cache_protected_len
        if (
            decode_island_due(committed, protected, self.decode_island_interval)
            and req.kv.holds_kv
            and not req.skip_radix_cache_insert  # barred from the tree, as checkpoint_kv_cache
            and not req.finished()
        ):
            self.insert_decode_island(req, committed)
            lock, protected = req.lock, req.kv.cache_protected_len
        if lock is not None and not lock.swa_released and island_out_of_window(
            committed, protected, self._island_window, self.page_size
        ):
            super().release_swa_prefix_lock(req)

    def insert_decode_island(self, req: "Req", committed: int) -> None:
        """Checkpoint ``[0, committed)`` of the request's tokens: main's own insert path (frees the
        request's SWA below the frontier as tombstones, caps the new leaf at one window, moves
        ``req.lock`` to the island and sets ``cache_protected_len`` to its page-aligned end)."""
        req.refresh_fill_ids()  # the fill ids lag output_ids until the next prepare_for_decode
        self.checkpoint(req, up_to=committed)

    def release_swa_prefix_lock(self, req: "Req") -> None:
        """Release the SWA part of ``req.lock`` only once the request left the window of the
        island it locks: ``island_out_of_window(L, cache_protected_len, w, p)``.

        Answers main's ``SGLANG_OPT_RELEASE_PREFILL_SWA`` (``maybe_evict_swa``), which counts
        decode batches since the prefill: under islands the lock may be a decode island's taken
        a step ago, whose window the request still reads."""
        if island_out_of_window(committed_len(req), req.kv.cache_protected_len,
                                self._island_window, self.page_size):
            super().release_swa_prefix_lock(req)
