from __future__ import annotations

"""
Copyright 2023-2024 SGLang Team
Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
"""

"""
Where SWA islands may run, and how large their SWA pool must be.

Islands run only on ``SWAIslandRadixCache`` built in place of ``SWARadixCache``: the check
(:func:`is_island_cache`) reads the cache's class, not ``supports_swa()``, which
``UnifiedRadixCache``, ``PureSWARadixCache``, ``SWAChunkCache`` and the streaming-session wrapper
also answer without having an island path. A check that refuses raises ``ValueError`` with the
reason and the way out. It never imports the cache module, the layer above it.

The pool formulas (hold, island floor, admission bind, the ratio for a pool) are defined in
``swa_island_formulas``, shared with the 0.5.23 target, and re-exported here.

This module imports only the standard library at import time.
"""

import logging
from typing import TYPE_CHECKING

from sglang.srt.mem_cache.swa_island_formulas import (  # noqa: F401  (re-exported)
    RATIO_STEP,
    _ceil_page,
    _require_int,
    admission_bind,
    hold_without_islands,
    island_capacity,
    island_floor,
    island_pool_check,
    ratio_for_swa_pool,
    swa_pool_tokens,
)

if TYPE_CHECKING:
    from sglang.srt.mem_cache.base_prefix_cache import BasePrefixCache
    from sglang.srt.server_args import ServerArgs

logger = logging.getLogger(__name__)

FLAG = "--enable-swa-islands"


def is_island_cache(cache: BasePrefixCache) -> bool:
    """Whether ``cache`` is the island cache: its class says so (``runs_swa_islands``), read on
    the class, so a wrapper that forwards attributes to an island cache is not one."""
    return getattr(type(cache), "runs_swa_islands", False) is True


def check_swa_islands_cache(cache: BasePrefixCache, is_hybrid_swa: bool) -> None:
    """In ``create_tree_cache``: the cache built must be ``SWAIslandRadixCache``.

    Also covers what only the model decides: not hybrid SWA, all layers SWA, hybrid SWA memory
    disabled by a model override.
    """
    from sglang.srt.mem_cache.allocator.swa import SWATokenToKVPoolAllocator

    if is_island_cache(cache):
        allocator = type(cache.token_to_kv_pool_allocator)
        if allocator is not SWATokenToKVPoolAllocator:
            # free_swa_pages reads full_to_swa_index_mapping, which e.g. the unified-memory
            # allocator does not keep
            raise ValueError(
                f"{FLAG} cannot be used here: the SWA allocator is {allocator.__name__}, and "
                "islands need SWATokenToKVPoolAllocator (drop --enable-unified-memory or "
                f"{FLAG})."
            )
        return
    if not is_hybrid_swa:
        reason = (
            "the model is not a hybrid sliding-window model (or its hybrid SWA memory pool is "
            "disabled), so there is no out-of-window SWA KV to free"
        )
    else:
        reason = (
            f"the tree cache built for this configuration is {type(cache).__name__}, and islands "
            "run only where the default chain builds exactly SWARadixCache"
        )
    raise ValueError(f"{FLAG} cannot be used here: {reason}. Remove {FLAG}.")


def check_swa_pool_plan(cache: BasePrefixCache, server_args: ServerArgs) -> None:
    """At startup, the SWA pool against the island floor or the admission bind.

    - Islands on: a pool below ``island_floor(1, ...)`` can never admit a full chunk, a
      ``ValueError``; a pool below the floor of the request pool's size, a warning.
    - Islands off on ``SWARadixCache`` with a ratio below 0.8: a pool that binds admission below
      the request pool's size (``admission_bind`` at ``hold_without_islands``), a warning. The
      ratio was lowered for islands and must move back with them.

    Suggested ratios come from ``ratio_for_swa_pool`` at the full pool's size.
    """
    from sglang.srt.mem_cache.swa_radix_cache import SWARadixCache

    islands = is_island_cache(cache)
    if not islands and type(cache) is not SWARadixCache:
        return
    allocator = cache.token_to_kv_pool_allocator
    swa_pool, full_pool = allocator.size_swa, max(allocator.size_full, 1)
    window, page = cache.sliding_window_size + 1, cache.page_size
    chunk = server_args.chunked_prefill_size
    chunk = chunk if chunk is not None and chunk > 0 else page
    n_cap = cache.req_to_token_pool.size
    ratio = server_args.swa_full_tokens_ratio

    if islands:
        check = island_pool_check(swa_pool, full_pool, window, page, chunk, n_cap, ratio=ratio)
        if check.verdict == "refuse":
            raise ValueError(f"{FLAG}: {check.message}")
        if check.verdict == "warn":
            logger.warning("%s: %s", FLAG, check.message)
        return

    if ratio >= 0.8:  # upstream's default: the operator did not trade SWA pool for capacity
        return
    hold = hold_without_islands(window, page, chunk)
    bind = admission_bind(swa_pool, hold)
    if bind < n_cap:
        suggested = ratio_for_swa_pool(n_cap * hold, full_pool, page)
        logger.warning(
            "SWA pool of %d tokens (--swa-full-tokens-ratio %s) binds admission at about %.1f "
            "running requests without %s: each running request holds about one prefill chunk "
            "(%d tokens) of SWA KV, and the request pool allows %d. If islands were just turned "
            "off (rollback), move the ratio back with them, e.g. --swa-full-tokens-ratio %.2f, or "
            "keep %s on.",
            swa_pool, ratio, bind, FLAG, hold, n_cap, suggested, FLAG,
        )
