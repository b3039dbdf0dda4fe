# SPDX-License-Identifier: Apache-2.0
"""SWA islands on sglang 0.5.23's UnifiedRadixCache.

The island cache of the 0.5.23 target: a ``UnifiedRadixCache`` subclass that the registry builds
under ``--enable-swa-islands`` (``create_unified_radix_cache(ctx, cache_class=...)``). Islands
live in the controller only: they go through what both tree cores answer (``checkpoint``,
``lock`` / ``release_swa``, ``evict``), never a ``TreeComponent`` override (which would force the
Python core), so the default Rust core and the Python core behave alike. Vocabulary and formulas:
``swa_island_formulas`` (shared with the 0.5.15 target).

This first cut carries the settings (``CacheInitParams``) and the startup check of the SWA pool
against the island floor; the island behaviour (decode islands every ``decode_island_interval``
committed tokens, the release of an island's window ``w + p`` past it, the commit-time reclaim
policy) arrives with the patches that name the steps it overrides (docs/MAIN_DESIGN.md). Until
then this cache behaves exactly as ``UnifiedRadixCache``.
"""

from __future__ import annotations

from sglang.srt.mem_cache.cache_init_params import CacheInitParams
from sglang.srt.mem_cache.swa_island_formulas import RECLAIM_POLICIES, decode_island_interval
from sglang.srt.mem_cache.swa_island_guard import check_swa_island_pool
from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache


class SWAIslandUnifiedRadixCache(UnifiedRadixCache):
    """``UnifiedRadixCache`` with SWA islands (``--enable-swa-islands``)."""

    def __init__(self, params: CacheInitParams):
        if params.swa_islands_reclaim not in RECLAIM_POLICIES:
            raise ValueError(f"swa_islands_reclaim must be one of {RECLAIM_POLICIES}, "
                             f"got {params.swa_islands_reclaim!r}")
        super().__init__(params)
        self.swa_islands_reclaim = params.swa_islands_reclaim
        # Committed decode tokens between two decode islands: cp / 4 unless overridden.
        self.decode_island_interval = decode_island_interval(
            params.chunked_prefill_size, params.swa_islands_decode_interval
        )
        if self.is_swa_enabled and not self.disable:
            check_swa_island_pool(self, params.chunked_prefill_size)
