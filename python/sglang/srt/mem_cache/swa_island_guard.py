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

Islands run only on a cache that is exactly ``SWAIslandRadixCache`` built in place of
``SWARadixCache``: the check is on the type, not on ``supports_swa()``, which
``UnifiedRadixCache``, ``PureSWARadixCache``, ``SWAChunkCache`` and the streaming-session wrapper
also answer without having an island path. A check that refuses raises ``ValueError`` with the
reason and the way out.

Pool formulas, in tokens. ``w`` is the model's sliding window (the tree's
``sliding_window_size + 1``), ``p`` the page size, ``cp`` the chunked-prefill size, ``T`` the
full pool (the token index space) and ``r`` the SWA/full ratio; the SWA pool is
``floor_p(int(T * r))``.

- hold: SWA tokens one running request keeps away from admission;
- island floor: SWA tokens ``N`` running requests need with islands;
- admission bind: running requests an SWA pool admits at a given hold.

This module imports only the standard library at import time.
"""

import logging
import math
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from sglang.srt.mem_cache.base_prefix_cache import BasePrefixCache
    from sglang.srt.server_args import ServerArgs

logger = logging.getLogger(__name__)

FLAG = "--enable-swa-islands"

# Suggested ratios are multiples of this step.
RATIO_STEP = 0.01


def _require_int(name: str, value, minimum: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value!r}")


def _ceil_page(x: int, page: int) -> int:
    return -(-x // page) * page


def swa_pool_tokens(full_tokens: int, ratio: float, page: int) -> int:
    """SWA pool of a ``full_tokens``-token index space: ``floor_p(int(T * r))`` tokens.

    Same float expression as ``HybridSWAPoolConfigurator``.
    Example: T = 1,030,912, r = 0.17, p = 64: int(175,255.04) = 175,255 -> 175,232.
    """
    _require_int("full_tokens", full_tokens, 0)
    _require_int("page", page, 1)
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 < ratio <= 1:
        raise ValueError(f"ratio must be in (0, 1], got {ratio!r}")
    return (int(full_tokens * ratio) // page) * page


def island_floor(
    n_running: int,
    window: int,
    page: int,
    chunk: int,
    *,
    chunks_in_flight: int = 1,
    decode_tail: int = 0,
) -> int:
    """SWA tokens ``N`` running requests need with islands: ``k*cp + N*(w + p + tail)``.

    Each request keeps one live island of at most ``w + p`` tokens (the window, plus up to one
    page of alignment) and at most ``tail`` request-owned decode tokens between two frees; the
    ``k`` prefill chunks in flight are not committed yet and count whole.
    Example: w = 1024, p = 64, cp = 16384, N = 48: 16384 + 48 * 1088 = 68,608.
    """
    _require_int("n_running", n_running, 0)
    _require_int("window", window, 1)
    _require_int("page", page, 1)
    _require_int("chunk", chunk, 1)
    _require_int("chunks_in_flight", chunks_in_flight, 0)
    _require_int("decode_tail", decode_tail, 0)
    return chunks_in_flight * chunk + n_running * (window + page + decode_tail)


def island_capacity(
    swa_pool: int,
    window: int,
    page: int,
    chunk: int,
    *,
    chunks_in_flight: int = 1,
    decode_tail: int = 0,
) -> int:
    """Most running requests whose island floor fits ``swa_pool`` tokens (inverts ``island_floor``).

    Example: (175,232 - 16,384) // 1,088 = 146.
    """
    _require_int("swa_pool", swa_pool, 0)
    fixed = island_floor(
        0, window, page, chunk, chunks_in_flight=chunks_in_flight, decode_tail=decode_tail
    )
    return max(0, (swa_pool - fixed) // (window + page + decode_tail))


def hold_without_islands(
    window: int, page: int, chunk: int, *, worst_case: bool = False
) -> int:
    """SWA tokens one running request locks in ``SWARadixCache``: ``ceil_p(cp)``.

    Every chunk commit inserts the chunk as one leaf and ``inc_lock_ref`` locks whole nodes up to
    at least the window, so the last chunk's leaf stays locked until the request finishes.
    ``worst_case`` gives ``ceil_p(cp + w)``: a last leaf shorter than the window also locks the
    previous chunk's node.
    Example: cp = 16384, p = 64: 16384 (worst case 17408).
    """
    _require_int("window", window, 1)
    _require_int("page", page, 1)
    _require_int("chunk", chunk, 1)
    return _ceil_page(chunk + window if worst_case else chunk, page)


def admission_bind(swa_pool: int, hold: float) -> float:
    """Running requests an SWA pool of ``swa_pool`` tokens admits at ``hold`` tokens each.

    ``swa_pool / hold``, a float: ``PrefillAdder`` counts locked SWA tokens as unavailable, so
    admission stops at its floor. Example: 175,232 / 16,384 = 10.7.
    """
    _require_int("swa_pool", swa_pool, 0)
    if isinstance(hold, bool) or not isinstance(hold, (int, float)) or not (
        math.isfinite(hold) and hold > 0
    ):
        raise ValueError(f"hold must be a positive number, got {hold!r}")
    return swa_pool / hold


def ratio_for_swa_pool(need: int, full_tokens: int, page: int) -> float:
    """Smallest ratio, a multiple of ``RATIO_STEP``, whose SWA pool holds ``need`` tokens.

    The pool is ``swa_pool_tokens(full_tokens, r, page)`` at a fixed ``full_tokens``; at a fixed
    memory budget a larger ratio also shrinks ``full_tokens``, so there the result is a lower
    bound. Returns 1.0 when even the whole index space is short of ``need``.
    Example: need 2048, T = 16384, p = 1: 0.125 -> 0.13 (int(16384 * 0.13) = 2129).
    """
    _require_int("need", need, 0)
    _require_int("full_tokens", full_tokens, 1)
    _require_int("page", page, 1)
    steps = round(1 / RATIO_STEP)
    # Start at the exact bound; float rounding of T * r can cost a step, hence the loop.
    for k in range(max(1, -(-need * steps // full_tokens)), steps + 1):
        ratio = round(k * RATIO_STEP, 10)
        if swa_pool_tokens(full_tokens, ratio, page) >= need:
            return ratio
    return 1.0


def check_swa_islands_cache(cache: BasePrefixCache, is_hybrid_swa: bool) -> None:
    """In ``create_tree_cache``: the cache built must be exactly ``SWAIslandRadixCache``.

    Also covers what only the model decides: not hybrid SWA, all layers SWA, hybrid SWA memory
    disabled by a model override.
    """
    from sglang.srt.mem_cache.allocator.swa import SWATokenToKVPoolAllocator
    from sglang.srt.mem_cache.swa_island_radix_cache import SWAIslandRadixCache

    if type(cache) is SWAIslandRadixCache:
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
    from sglang.srt.mem_cache.swa_island_radix_cache import SWAIslandRadixCache
    from sglang.srt.mem_cache.swa_radix_cache import SWARadixCache

    kind = type(cache)
    if kind is not SWAIslandRadixCache and kind is not SWARadixCache:
        return
    allocator = cache.token_to_kv_pool_allocator
    swa_pool, full_pool = allocator.size_swa, max(allocator.size_full, 1)
    window, page = cache.sliding_window_size + 1, cache.page_size
    chunk = server_args.chunked_prefill_size
    chunk = chunk if chunk is not None and chunk > 0 else page
    n_cap = cache.req_to_token_pool.size
    ratio = server_args.swa_full_tokens_ratio

    if kind is SWAIslandRadixCache:
        floor_one = island_floor(1, window, page, chunk)
        if swa_pool < floor_one:
            need = ratio_for_swa_pool(floor_one, full_pool, page)
            raise ValueError(
                f"{FLAG}: --swa-full-tokens-ratio {ratio} gives an SWA pool of {swa_pool} tokens, "
                f"below the island floor of a single request ({floor_one} tokens: one chunk of "
                f"{chunk} + window {window} + page {page}), so no full chunk could be admitted. "
                f"Raise --swa-full-tokens-ratio to at least {need:.2f}."
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
        suggested = ratio_for_swa_pool(n_cap * hold, full_pool, page)
        logger.warning(
            "SWA pool of %d tokens (--swa-full-tokens-ratio %s) binds admission at about %.1f "
            "running requests without %s: each running request holds about one prefill chunk "
            "(%d tokens) of SWA KV, and the request pool allows %d. If islands were just turned "
            "off (rollback), move the ratio back with them, e.g. --swa-full-tokens-ratio %.2f, or "
            "keep %s on.",
            swa_pool, ratio, bind, FLAG, hold, n_cap, suggested, FLAG,
        )
