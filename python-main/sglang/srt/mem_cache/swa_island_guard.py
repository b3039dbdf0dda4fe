# SPDX-License-Identifier: Apache-2.0
"""Where SWA islands may run on sglang 0.5.23, and how large their SWA pool must be.

The flag combinations the island path does not cover are refused with the server arguments
(``sglang.srt.arg_groups.swa_islands_hook``). What only the model decides is checked here once the
registry has built the cache (:func:`check_swa_islands_cache`): islands run only on an
``SWAIslandUnifiedRadixCache`` over a hybrid sliding-window model without Mamba layers and with
the SWA allocator. Without the flag, a lowered ratio that binds stock admission is warned about
(:func:`warn_swa_pool_binds_without_islands`, the rollback). The pool formulas are
``swa_island_formulas``' (shared with the 0.5.15 target); a check that refuses raises
``ValueError`` with the reason and the way out. The cache module imports this one, never the
other way round (:func:`is_island_cache` reads the cache's class instead).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Optional

from sglang.srt.mem_cache.swa_island_formulas import (
    admission_bind,
    hold_unified_decode,
    island_pool_check,
    ratio_for_swa_pool,
)

if TYPE_CHECKING:
    from sglang.srt.mem_cache.base_prefix_cache import BasePrefixCache

logger = logging.getLogger(__name__)

FLAG = "--enable-swa-islands"


def is_island_cache(cache: BasePrefixCache) -> bool:
    """Whether ``cache`` is the island cache: its class says so (``runs_swa_islands``), read on
    the class, so a wrapper that forwards attributes to an island cache is not one."""
    return getattr(type(cache), "runs_swa_islands", False) is True


def check_swa_islands_cache(
    cache: BasePrefixCache, *, is_hybrid_swa: bool, is_hybrid_ssm: bool
) -> None:
    """In ``create_tree_cache``: the cache built must be ``SWAIslandUnifiedRadixCache`` over a
    hybrid SWA model (no Mamba layers) with the SWA allocator."""
    from sglang.srt.mem_cache.allocator.swa import SWATokenToKVPoolAllocator

    if not is_hybrid_swa:
        reason = (
            "the model is not a hybrid sliding-window model (or its hybrid SWA memory pool "
            "is disabled), so there is no SWA KV to keep islands of"
        )
    elif is_hybrid_ssm:
        reason = (
            "the model also has Mamba layers, whose checkpoints decide where the tree "
            "inserts; islands do not cover them"
        )
    elif not is_island_cache(cache):
        reason = (
            f"the tree cache built for this configuration is {type(cache).__name__} (e.g. "
            "every layer sliding-window), and islands run only where the default chain "
            "builds UnifiedRadixCache"
        )
    elif type(cache.token_to_kv_pool_allocator) is not SWATokenToKVPoolAllocator:
        reason = (
            f"the SWA allocator is {type(cache.token_to_kv_pool_allocator).__name__}, and "
            "islands need SWATokenToKVPoolAllocator"
        )
    else:
        return
    raise ValueError(f"{FLAG} cannot be used here: {reason}. Remove {FLAG}.")


def check_swa_island_pool(
    cache: BasePrefixCache, chunked_prefill_size: Optional[int]
) -> None:
    """At startup, the SWA pool against the island floor: below one request's floor (one chunk +
    window + page) no full chunk could ever be admitted, a ``ValueError``; below the floor of the
    request pool's size, a warning with the running requests it carries."""
    allocator = cache.token_to_kv_pool_allocator
    check = island_pool_check(
        allocator.size_swa,
        allocator.size_full,
        cache.sliding_window_size + 1,
        cache.page_size,
        chunked_prefill_size,
        cache.req_to_token_pool.size,
    )
    if check.verdict == "refuse":
        raise ValueError(f"{FLAG}: {check.message}")
    if check.verdict == "warn":
        logger.warning("%s: %s", FLAG, check.message)


def warn_swa_pool_binds_without_islands(
    cache: BasePrefixCache,
    operator_ratio: Optional[float],
    chunked_prefill_size: Optional[int],
    eviction_interval: int,
) -> None:
    """In ``create_tree_cache`` without the flag (a rollback keeps the ratio islands ran with): a
    stock ``UnifiedRadixCache`` whose SWA pool, at an explicitly set ``--swa-full-tokens-ratio``,
    admits fewer decoding requests than the request pool, ``(pool - cp) / hold_unified_decode``
    (one chunk in flight), is told so with the ratio that fits and the way back to islands.
    ``operator_ratio``: the ratio the operator gave, None when it is the default (nothing to
    say then); other caches: nothing."""
    from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache

    if (
        type(cache) is not UnifiedRadixCache
        or not cache.is_swa_enabled
        or cache.disable
    ):
        return
    if operator_ratio is None:
        return
    allocator = cache.token_to_kv_pool_allocator
    page = cache.page_size
    chunk = (
        chunked_prefill_size
        if chunked_prefill_size and chunked_prefill_size > 0
        else page
    )
    hold = hold_unified_decode(
        cache.sliding_window_size + 1, page, max(1, eviction_interval)
    )
    n_cap = cache.req_to_token_pool.size
    bind = admission_bind(max(allocator.size_swa - chunk, 0), hold)
    if bind >= n_cap:
        return
    suggested = ratio_for_swa_pool(
        n_cap * hold + chunk, max(allocator.size_full, 1), page
    )
    logger.warning(
        "SWA pool of %d tokens (--swa-full-tokens-ratio %s) binds admission at about %.1f "
        "decoding requests without %s: each holds up to %d tokens of SWA KV (a window lock plus "
        "its decode tail), one chunk of %d is in flight, and the request pool allows %d. If "
        "islands were just turned off (rollback), move the ratio back with them, e.g. "
        "--swa-full-tokens-ratio %.2f, or keep %s on.",
        allocator.size_swa,
        operator_ratio,
        bind,
        FLAG,
        hold,
        chunk,
        n_cap,
        suggested,
        FLAG,
    )
