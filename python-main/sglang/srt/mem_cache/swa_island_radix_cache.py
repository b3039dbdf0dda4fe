# SPDX-License-Identifier: Apache-2.0
"""SWA islands on sglang 0.5.23's UnifiedRadixCache: ``SWAIslandUnifiedRadixCache``.

Owns what ``--enable-swa-islands`` changes in the controller (the registry builds this class with
``create_unified_radix_cache(ctx, cache_class=...)``): decode islands (``on_decode_progress``),
the release of an island's window lock, the commit-time reclaim decision
(``frees_out_of_window_at_commit``), commits past an SWA branch, the eviction order, and under
the ``window`` order the queued hits and their admission reserve.

Invariants: islands go only through what both tree cores answer (``checkpoint``, ``lock`` /
``release_swa``, ``evict``), so the Rust and Python cores behave alike; only the ``window`` order
swaps in a ``TreeComponent`` (``SWAIslandComponent``, Python core). Every decision reads request,
tree and pool state only, so it is the same on every rank, and the cache keeps no per-request
state. After every commit a running request holds at most ``w + 2p`` SWA tokens.

Units are tokens: ``L`` the committed length (:func:`committed_len`), ``w`` the retained window
+ 1, ``p`` the page. Formulas: ``swa_island_formulas`` (shared with 0.5.15.post1). Design, step
by step: docs/MAIN_DESIGN.md, "The island cache".
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Optional

from sglang.srt.mem_cache.base_prefix_cache import MatchPrefixParams
from sglang.srt.mem_cache.cache_init_params import CacheInitParams
from sglang.srt.mem_cache.common import req_radix_key
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
    return (
        " (auto: the SWA pool keeps a chunk per running request)"
        if fits
        else " (auto: the SWA pool cannot keep a chunk per running request)"
    )


class SWAIslandUnifiedRadixCache(UnifiedRadixCache):
    """``UnifiedRadixCache`` with SWA islands (``--enable-swa-islands``)."""

    # What ``swa_island_guard.is_island_cache`` reads, so the guard need not import this module.
    runs_swa_islands = True

    def __init__(self, params: CacheInitParams):
        if params.swa_islands_eviction not in EVICTION_ORDERS:
            raise ValueError(
                f"swa_islands_eviction must be one of {EVICTION_ORDERS}, "
                f"got {params.swa_islands_eviction!r}"
            )
        swa_tree = ComponentType.SWA in (params.tree_components or ())
        # Whether the SWA pool keeps one chunk live per running request (``lazy_reclaim_fits``):
        # it resolves ``auto`` of both settings.
        fits = swa_tree and lazy_reclaim_fits(
            params.token_to_kv_pool_allocator.size_swa,
            params.req_to_token_pool.size,
            params.chunked_prefill_size,
            params.page_size,
        )
        eviction = resolve_eviction(params.swa_islands_eviction, fits or not swa_tree)
        reclaim = params.swa_islands_reclaim or default_reclaim(eviction)
        if reclaim not in RECLAIM_POLICIES:
            raise ValueError(
                f"swa_islands_reclaim must be one of {RECLAIM_POLICIES}, "
                f"got {params.swa_islands_reclaim!r}"
            )
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
        self.reclaim_watermark = reclaim_watermark(
            params.chunked_prefill_size, self.page_size
        )
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
            else None
        )
        if self._islands_active:
            check_swa_island_pool(self, params.chunked_prefill_size)
        logger.info(
            "SWA islands: reclaim %s%s, eviction %s%s, decode island every %d tokens",
            reclaim,
            "" if params.swa_islands_reclaim else " (the default for it)",
            eviction,
            _auto_reason(params.swa_islands_eviction, fits),
            self.decode_island_interval,
        )
        if eviction == "window" and swa_tree:
            logger.info(
                "SWA islands: the window order runs on the Python tree core, not the "
                "Rust one: a match costs 5-12x, one request's cache work 0.34-1.22x "
                "stock main's on that core; --swa-islands-eviction lru keeps the Rust core"
            )

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
        return (
            self.token_to_kv_pool_allocator.swa_available_size()
            < self.reclaim_watermark
        )

    # ---- queued hits (window order) ---------------------------------------------------------------

    def on_request_queued(self, req: "Req") -> None:
        """``req`` joined the waiting queue (new, or retracted and queued again, then at the end):
        the node its match ends at becomes its queued hit, whose window eviction takes last, until
        its first checkpoint (admission locks its own match before that) or its release.
        """
        if self._swa_island_component is None or self.disable:
            return
        self._queue_match(req)

    def _queue_match(self, req: "Req") -> None:
        """Match ``req`` once (``match_prefix``, as admission will) and file the match end as its
        queued hit, under the child key its next page would continue on."""
        token_ids = req.origin_input_ids + req.output_ids
        result = self.match_prefix(
            MatchPrefixParams(key=req_radix_key(self, req, token_ids))
        )
        node = self.resolve_node_handle(result.last_device_node)
        hit, page = result.device_prefix_len, self.page_size
        is_eagle = self.tree_core.is_eagle
        nxt = token_ids[hit : hit + page + (1 if is_eagle else 0)]
        edge = None
        if len(nxt) >= page + (1 if is_eagle else 0):
            edge = RadixKey(
                nxt, req.extra_key, is_bigram=is_eagle, cache_salt=req.cache_salt
            ).child_key(page)
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

    def _continues_past_branch(
        self, req: Req, branching: Optional[int], up_to: int
    ) -> bool:
        """Whether the checkpoint of the running ``req`` to ``up_to`` inserts again, past the SWA
        branch at which main stopped the first insert (``swa_branching_seqlen``, cleared once the
        branch is in). Example: page 1, a 1,137-token prompt whose match hit 775 tokens and whose
        Full KV hit ran to 887: ``[0, 887)``, then ``[887, 1137)``. Why: docs/MAIN_DESIGN.md,
        "The island cache"."""
        return (
            self._islands_active
            and branching is not None
            and req.swa_branching_seqlen is None
            and not req.finished()
            and req.kv.cache_protected_len < up_to // self.page_size * self.page_size
        )

    def on_release(self, req: "Req", *, checkpointed: bool) -> None:
        if self._swa_island_component is not None:
            self._swa_island_component.queued.drop(req)
        super().on_release(req, checkpointed=checkpointed)

    def swa_admission_reserve(self, running_batch: "ScheduleBatch") -> int:
        """SWA tokens a prefill pass leaves unspent: under the window order, while decode
        requests run, the windows of the queued hits still evictable (end node live and
        SWA-unlocked), at most the SWA neither free nor evictable (``queued_hit_reserve``); 0
        with nothing running. O(cap + running requests) per prefill pass. Why and the bound:
        docs/MAIN_DESIGN.md, "The island cache"."""
        component = self._swa_island_component
        if component is None or self.disable or running_batch.is_empty():
            return 0
        allocator = self.token_to_kv_pool_allocator
        held = (
            allocator.size_swa
            - allocator.swa_available_size()
            - self.swa_evictable_size()
        )
        window = window_lock_tokens(self.sliding_window_size, self.page_size)
        limit = -(-held // window)
        hits = component.spendable_queued_hits(
            limit, limit + running_batch.batch_size() + 1
        )
        return queued_hit_reserve(hits, self.sliding_window_size, self.page_size, held)

    # ---- decode islands -------------------------------------------------------------------------

    def on_decode_progress(self, req: "Req", accepted: int) -> None:
        """After a decode step of the running ``req`` (the scheduler calls it once per running
        request and step, so it is on the decode hot path): lay a decode island when one is due,
        then release the latest island's window lock once the request has left it. The common
        step (no island due, the window lock already released) reads four request fields.
        """
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
        if (
            lock is not None
            and not lock.swa_released
            and island_out_of_window(
                committed, protected, self._island_window, self.page_size
            )
        ):
            super().release_swa_prefix_lock(req)

    def insert_decode_island(self, req: "Req", committed: int) -> None:
        """Checkpoint ``[0, committed)`` of the request's tokens: main's own insert path (frees the
        request's SWA below the frontier as tombstones, caps the new leaf at one window, moves
        ``req.lock`` to the island and sets ``cache_protected_len`` to its page-aligned end).
        """
        req.refresh_fill_ids()  # the fill ids lag output_ids until the next prepare_for_decode
        self.checkpoint(req, up_to=committed)

    def release_swa_prefix_lock(self, req: "Req") -> None:
        """Release the SWA part of ``req.lock`` only once the request left the window of the
        island it locks: ``island_out_of_window(L, cache_protected_len, w, p)``.

        Answers main's ``SGLANG_OPT_RELEASE_PREFILL_SWA`` (``maybe_evict_swa``), which counts
        decode batches since the prefill: under islands the lock may be a decode island's taken
        a step ago, whose window the request still reads."""
        if island_out_of_window(
            committed_len(req),
            req.kv.cache_protected_len,
            self._island_window,
            self.page_size,
        ):
            super().release_swa_prefix_lock(req)
