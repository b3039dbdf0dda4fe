"""Where SWA islands may run, and the clear errors everywhere else.

Islands are a memory-safety change to one cache class. The guard is an exact type check, never a
capability flag: ``UnifiedRadixCache``, ``PureSWARadixCache``, ``SWAChunkCache`` and the streaming
session wrapper all answer ``supports_swa() == True`` but have no island path.

Two checks, both raising ``ValueError`` with the reason and the way out:

- :func:`validate_swa_islands_args` runs in ``ServerArgs`` before any model is loaded and rejects
  flag combinations whose cache can never be ``SWARadixCache``;
- :func:`check_swa_islands_cache` runs in ``create_tree_cache`` on the cache actually built,
  which also covers what only the model decides (not hybrid SWA, all layers SWA, hybrid SWA
  memory disabled by a model override).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from sglang.srt.mem_cache.base_prefix_cache import BasePrefixCache
    from sglang.srt.server_args import ServerArgs

FLAG = "--enable-swa-islands"


def _flag_conflict(server_args: ServerArgs) -> Optional[str]:
    from sglang.srt.environ import envs

    if server_args.disable_radix_cache:
        return "--disable-radix-cache builds a chunk cache, which has no radix tree to hold islands"
    if server_args.enable_hierarchical_cache:
        return (
            "--enable-hierarchical-cache builds UnifiedRadixCache for hybrid models, "
            "which has no island path"
        )
    if server_args.radix_cache_backend:
        return (
            f"--radix-cache-backend={server_args.radix_cache_backend!r} replaces the default "
            "cache chain; islands exist only in the default SWARadixCache"
        )
    if server_args.enable_streaming_session:
        return (
            "--enable-streaming-session wraps the tree cache in StreamingSession, "
            "which has no island path"
        )
    if envs.SGLANG_ENABLE_UNIFIED_RADIX_TREE.get():
        return "SGLANG_ENABLE_UNIFIED_RADIX_TREE=1 builds UnifiedRadixCache, which has no island path"
    if envs.SGLANG_EXPERIMENTAL_CPP_RADIX_TREE.get():
        return "SGLANG_EXPERIMENTAL_CPP_RADIX_TREE=1 builds the C++ radix tree, which has no island path"
    if server_args.disable_hybrid_swa_memory:
        return "--disable-hybrid-swa-memory keeps one pool for all layers; there is no SWA pool to free"
    return None


def validate_swa_islands_args(server_args: ServerArgs) -> None:
    """Reject ``--enable-swa-islands`` with flags that never build ``SWARadixCache``."""
    if not server_args.enable_swa_islands:
        return
    reason = _flag_conflict(server_args)
    if reason is not None:
        raise ValueError(f"{FLAG} cannot be used here: {reason}. Drop one of the two.")


def check_swa_islands_cache(cache: BasePrefixCache, is_hybrid_swa: bool) -> None:
    """Exact type check on the cache the scheduler will use (``create_tree_cache``)."""
    from sglang.srt.mem_cache.swa_island_radix_cache import SWAIslandRadixCache

    if type(cache) is SWAIslandRadixCache:
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
    """Startup check of the SWA pool against the formulas of ``swa_pool_plan``.

    - Islands on, SWA pool below the island floor of one request (one chunk + ``w + p``):
      ``ValueError`` (no full chunk could ever be admitted). Below the floor of the request pool's
      concurrency: a warning with the number of requests islands can carry.
    - Islands off on ``SWARadixCache`` with a lowered ``--swa-full-tokens-ratio`` whose pool binds
      admission below the request pool (the hold is about one chunk per request): a warning with
      the predicted bind and the ratio that removes it. This is the coupled-rollback guard: the
      ratio was chosen for islands and must move back with the flag.
    """
    import logging

    from sglang.srt.mem_cache.swa_island_radix_cache import SWAIslandRadixCache
    from sglang.srt.mem_cache.swa_pool_plan import (
        admission_bind,
        hold_without_islands,
        island_capacity,
        island_floor,
    )
    from sglang.srt.mem_cache.swa_radix_cache import SWARadixCache

    kind = type(cache)
    if kind is not SWAIslandRadixCache and kind is not SWARadixCache:
        return
    logger = logging.getLogger(__name__)
    allocator = cache.token_to_kv_pool_allocator
    swa_pool, full_pool = allocator.size_swa, allocator.size_full
    window, page = cache.sliding_window_size + 1, cache.page_size
    chunk = server_args.chunked_prefill_size
    chunk = chunk if chunk is not None and chunk > 0 else page
    n_cap = cache.req_to_token_pool.size
    ratio = server_args.swa_full_tokens_ratio

    if kind is SWAIslandRadixCache:
        floor_one = island_floor(1, window, page, chunk)
        if swa_pool < floor_one:
            need = min(1.0, ratio * floor_one / max(swa_pool, 1))
            raise ValueError(
                f"{FLAG}: --swa-full-tokens-ratio {ratio} gives an SWA pool of {swa_pool} tokens, "
                f"below the island floor of a single request ({floor_one} tokens: one chunk of "
                f"{chunk} + window {window} + page {page}), so no full chunk could be admitted. "
                f"Raise --swa-full-tokens-ratio to at least {need:.3f} "
                "(scripts/swa_pool_plan.py computes the split)."
            )
        capacity = island_capacity(swa_pool, window, page, chunk)
        if capacity < n_cap:
            logger.warning(
                "%s: the SWA pool (%d tokens) carries about %d running requests at the island "
                "floor (%d + N x %d tokens), fewer than the request pool's %d.",
                FLAG, swa_pool, capacity, chunk, window + page, n_cap,
            )
        return

    if ratio >= 0.8:  # upstream's default: the operator did not trade SWA pool for capacity
        return
    hold = hold_without_islands(window, page, chunk)
    bind = admission_bind(swa_pool, hold)
    if bind < n_cap:
        suggested = min(1.0, -(-n_cap * hold * 100 // max(full_pool, 1)) / 100)
        logger.warning(
            "SWA pool of %d tokens (--swa-full-tokens-ratio %s) binds admission at about %.1f "
            "running requests without %s: each running request holds about one prefill chunk "
            "(%d tokens) of SWA KV, and the request pool allows %d. If islands were just turned "
            "off (rollback), move the ratio back with them, e.g. --swa-full-tokens-ratio %.2f, or "
            "keep %s on.",
            swa_pool, ratio, bind, FLAG, hold, n_cap, suggested, FLAG,
        )
