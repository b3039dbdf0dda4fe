# SPDX-License-Identifier: Apache-2.0
"""Checks of the built cache and its SWA pool for SWA islands.

Flag combinations are refused earlier, with the server arguments (``swa_islands_hook``);
this module checks what only the model decides, once the cache is built. A refusal is a
``ValueError`` with the reason and the way out. It does not import the island cache.
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
    """Whether the class of ``cache`` sets ``runs_swa_islands`` (a wrapper does not)."""
    return getattr(type(cache), "runs_swa_islands", False) is True


def check_swa_islands_cache(
    cache: BasePrefixCache, *, is_hybrid_swa: bool, is_hybrid_ssm: bool
) -> None:
    """Refuse anything but an island cache over a hybrid SWA model with the SWA
    allocator and no Mamba layers."""
    from sglang.srt.mem_cache.allocator.swa import SWATokenToKVPoolAllocator

    if not is_hybrid_swa:
        reason = (
            "the model is not a hybrid sliding-window model (or its hybrid SWA memory "
            "pool is disabled), so there is no SWA KV to keep islands of"
        )
    elif is_hybrid_ssm:
        reason = (
            "the model also has Mamba layers, whose checkpoints decide where the tree "
            "inserts; islands do not cover them"
        )
    elif not is_island_cache(cache):
        reason = (
            f"the tree cache built for this configuration is {type(cache).__name__} "
            "(e.g. every layer sliding-window), and islands run only where the "
            "default chain builds UnifiedRadixCache"
        )
    elif type(cache.token_to_kv_pool_allocator) is not SWATokenToKVPoolAllocator:
        reason = (
            f"the SWA allocator is {type(cache.token_to_kv_pool_allocator).__name__}, "
            "and islands need SWATokenToKVPoolAllocator"
        )
    else:
        return
    raise ValueError(f"{FLAG} cannot be used here: {reason}. Remove {FLAG}.")


def check_swa_island_pool(
    cache: BasePrefixCache, chunked_prefill_size: Optional[int]
) -> None:
    """Refuse an SWA pool below one request's island floor; warn below the request
    pool's floor."""
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
    """Without the flag, warn when a stock ``UnifiedRadixCache`` whose ratio was set
    (``operator_ratio``, None: the default) admits fewer decoding requests than the
    request pool, ``(pool - cp) / hold_unified_decode``, with the ratio that fits."""
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
        "SWA pool of %d tokens (--swa-full-tokens-ratio %s) binds admission at about "
        "%.1f decoding requests without %s: each holds up to %d tokens of SWA KV (a "
        "window lock plus its decode tail), one chunk of %d is in flight, and the "
        "request pool allows %d. If islands were just turned off (rollback), move the "
        "ratio back with them, e.g. --swa-full-tokens-ratio %.2f, or keep %s on.",
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
