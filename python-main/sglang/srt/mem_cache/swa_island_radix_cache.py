# SPDX-License-Identifier: Apache-2.0
"""``SWAIslandUnifiedRadixCache``: ``UnifiedRadixCache`` with SWA islands.

Uses only ``checkpoint``, ``lock`` / ``release_swa`` and ``evict``, so both tree cores
behave alike, and reads request, tree and pool state only (the same on every rank).
Invariant: a running request holds at most ``w + 2p`` SWA tokens after each commit.
Design and glossary: docs/MAIN_DESIGN.md, "The island cache".
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
    """``L``: the tokens upstream's release would checkpoint now (``owned_kv_len``)."""
    return req.owned_kv_len()


def _auto_reason(eviction: str, fits: bool) -> str:
    if eviction != "auto":
        return ""
    return (
        " (auto: the SWA pool keeps a chunk per running request)"
        if fits
        else " (auto: the SWA pool cannot keep a chunk per running request)"
    )


class SWAIslandUnifiedRadixCache(UnifiedRadixCache):
    """``UnifiedRadixCache`` with SWA islands (``--enable-swa-islands``)."""

    # Read by ``swa_island_guard.is_island_cache``, which does not import this module.
    runs_swa_islands = True

    def __init__(self, params: CacheInitParams):
        if params.swa_islands_eviction not in EVICTION_ORDERS:
            raise ValueError(
                f"swa_islands_eviction must be one of {EVICTION_ORDERS}, "
                f"got {params.swa_islands_eviction!r}"
            )
        swa_tree = ComponentType.SWA in (params.tree_components or ())
        # Whether the SWA pool keeps a chunk live per running request (for ``auto``).
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
            # Upstream's component override; it selects the Python tree core.
            params.component_registry_override = {
                **(params.component_registry_override or {}),
                ComponentType.SWA: SWAIslandComponent,
            }
        super().__init__(params)
        self.swa_islands_reclaim = reclaim
        # Committed tokens between two decode islands: cp / 4 unless overridden.
        self.decode_island_interval = decode_island_interval(
            params.chunked_prefill_size, params.swa_islands_decode_interval
        )
        # Free SWA below which ``auto`` frees at the commit: one prefill chunk.
        self.reclaim_watermark = reclaim_watermark(
            params.chunked_prefill_size, self.page_size
        )
        self.lazy_reclaim_fits = self.is_swa_enabled and fits
        self.swa_islands_eviction = eviction
        self._island_window = (self.swa_retain_window or 0) + 1  # w
        self._islands_active = self.is_swa_enabled and not self.disable
        # The window order's component keeps the queued hits; None under ``lru``.
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
                "stock main's on that core; --swa-islands-eviction lru keeps the Rust "
                "core"
            )

    def frees_out_of_window_at_commit(self, req: "Req") -> bool:
        """Whether the commit frees ``req``'s SWA below its frontier: ``lazy`` no,
        ``eager`` yes, ``auto`` unless a chunk per request fits and free SWA is at or
        above ``reclaim_watermark``."""
        if self.swa_islands_reclaim == "lazy":
            return False
        if self.swa_islands_reclaim == "eager" or not self.lazy_reclaim_fits:
            return True
        return (
            self.token_to_kv_pool_allocator.swa_available_size()
            < self.reclaim_watermark
        )

    def on_request_queued(self, req: "Req") -> None:
        """Set ``req``'s queued hit when it joins the waiting queue (window order)."""
        if self._swa_island_component is None or self.disable:
            return
        self._queue_match(req)

    def _queue_match(self, req: "Req") -> None:
        """Match ``req`` and set its queued hit, keyed by its next page's child key."""
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
        """Main's insert, continued past an SWA branch; drops ``req``'s queued hit and
        matches again the waiting requests that continue along the committed path."""
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
        """Whether to insert again up to ``up_to``, past the SWA branch where main
        stopped the first insert (``swa_branching_seqlen``, now cleared)."""
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
        """SWA a prefill pass leaves unspent for queued hits' evictable windows while
        requests run (``queued_hit_reserve``). O(cap + running requests)."""
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

    def on_decode_progress(self, req: "Req", accepted: int) -> None:
        """Insert a decode island when due; release the latest island's SWA lock once
        ``req`` has left its window. Decode hot path: once per request and step."""
        lock = req.lock
        if lock is None or not self._islands_active:
            return
        committed = committed_len(req)
        protected = req.kv.cache_protected_len
        if (
            decode_island_due(committed, protected, self.decode_island_interval)
            and req.kv.holds_kv
            and not req.skip_radix_cache_insert  # as checkpoint_kv_cache
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
        """Checkpoint ``[0, committed)`` through main's insert; ``req.lock`` moves."""
        req.refresh_fill_ids()  # they lag output_ids until prepare_for_decode
        self.checkpoint(req, up_to=committed)

    def release_swa_prefix_lock(self, req: "Req") -> None:
        """Main's SWA lock release, once ``req`` has left the locked island's window."""
        if island_out_of_window(
            committed_len(req),
            req.kv.cache_protected_len,
            self._island_window,
            self.page_size,
        ):
            super().release_swa_prefix_lock(req)
