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
Pure SWA island formulas shared by both targets (0.5.15.post1 and 0.5.23): frontier,
decode-island cadence, window release, reclaim and SWA pool sizes. Standard library
only. Units are tokens: ``window_left`` is the tree's ``sliding_window_size``,
``w = window_left + 1``, ``p`` the page, ``cp`` the chunk size, ``L`` the committed
length. Formulas with examples: docs/MAIN_DESIGN.md, "Pure formulas".
"""

import math
from dataclasses import dataclass
from typing import Optional

RECLAIM_POLICIES = ("lazy", "eager", "auto")
"""``--swa-islands-reclaim`` choices; the default is ``lazy`` on 0.5.15 and
:func:`default_reclaim` on 0.5.23."""

EVICTION_ORDERS = ("auto", "lru", "window")
"""``--swa-islands-eviction`` choices (0.5.23), the default first."""


def resolve_eviction(eviction: str, lazy_fits: bool) -> str:
    """The eviction order to run: ``auto`` is ``lru`` if ``lazy_fits``, else window."""
    if eviction not in EVICTION_ORDERS:
        raise ValueError(
            f"eviction order must be one of {EVICTION_ORDERS}, got {eviction!r}"
        )
    if eviction != "auto":
        return eviction
    return "lru" if lazy_fits else "window"


def default_reclaim(eviction: str) -> str:
    """The reclaim policy when none is given: ``lazy`` under window, else ``auto``."""
    if eviction not in ("lru", "window"):
        raise ValueError(
            f"a resolved eviction order is lru or window, got {eviction!r}"
        )
    return "lazy" if eviction == "window" else "auto"


COLD, RETENTION, WINDOW, QUEUED = 0, 1, 2, 3
"""Eviction classes, evicted in this order: COLD (in no kept window), RETENTION
(retention windows only), WINDOW (another match end's), QUEUED (a queued hit's)."""

CLASSES = (COLD, RETENTION, WINDOW, QUEUED)
"""The classes in the order both targets' eviction passes run."""

DEFAULT_DECODE_ISLAND_INTERVAL = 2048
"""Decode-island interval without chunked prefill (``cp/4`` of 8192)."""


def swa_tombstone_frontier(committed_len: int, window: int, page_size: int) -> int:
    """``floor_p(L - (w + p))``, at least 0: no later token reads SWA below it."""
    if committed_len < 0 or window <= 0 or page_size <= 0:
        raise ValueError(f"{committed_len=}, {window=}, {page_size=}")
    live = window + page_size
    if committed_len <= live:
        return 0
    return (committed_len - live) // page_size * page_size


def decode_island_interval(
    chunked_prefill_size: Optional[int], override: Optional[int] = None
) -> int:
    """Committed tokens between decode islands: ``override``, else ``cp // 4``."""
    if override is not None and override > 0:
        return override
    if chunked_prefill_size is None or chunked_prefill_size <= 0:
        return DEFAULT_DECODE_ISLAND_INTERVAL
    return max(1, chunked_prefill_size // 4)


def decode_island_due(committed_len: int, last_island_len: int, interval: int) -> bool:
    """Whether ``interval`` tokens were committed since the last island (not a
    multiple of ``interval``: speculative decoding advances by accept lengths)."""
    return committed_len - last_island_len >= interval


def island_out_of_window(
    committed_len: int, island_end: int, window: int, page_size: int
) -> bool:
    """Whether ``L >= island_end + w + p``: no token reads the island any more."""
    return committed_len >= island_end + window + page_size


def window_lock_tokens(window_left: int, page_size: int) -> int:
    """``ceil_p(window_left)``: the live SWA a match lock takes behind its end."""
    return -(-window_left // page_size) * page_size


def host_backup_tokens(window: int, page_size: int) -> int:
    """``ceil_p(w) + p``: the SWA a host backup of an end takes behind it."""
    return _ceil_page(window, page_size) + page_size


def queued_hit_reserve(
    queued_hits: int, window_left: int, page_size: int, held: int
) -> int:
    """SWA a prefill pass leaves unspent for queued hits' windows, at most ``held``."""
    return max(0, min(queued_hits * window_lock_tokens(window_left, page_size), held))


def reclaim_watermark(chunked_prefill_size: Optional[int], page_size: int) -> int:
    """Free SWA below which ``auto`` reclaims: ``ceil_p(cp)``."""
    chunk = (
        chunked_prefill_size
        if chunked_prefill_size and chunked_prefill_size > 0
        else (DEFAULT_DECODE_ISLAND_INTERVAL)
    )
    return -(-chunk // page_size) * page_size


def lazy_reclaim_fits(
    swa_pool: int, max_running: int, chunked_prefill_size: Optional[int], page_size: int
) -> bool:
    """Whether the SWA pool keeps a chunk live per request: ``>= N * ceil_p(cp)``."""
    _require_int("swa_pool", swa_pool, 0)
    _require_int("max_running", max_running, 1)
    return swa_pool >= max_running * reclaim_watermark(chunked_prefill_size, page_size)


# Suggested ratios are multiples of this step.
RATIO_STEP = 0.01


def _require_int(name: str, value: object, minimum: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value!r}")


def _ceil_page(x: int, page: int) -> int:
    return -(-x // page) * page


def swa_pool_tokens(full_tokens: int, ratio: float, page: int) -> int:
    """SWA pool of ``full_tokens`` at ``ratio``: ``floor_p(int(T * r))``."""
    _require_int("full_tokens", full_tokens, 0)
    _require_int("page", page, 1)
    if (
        isinstance(ratio, bool)
        or not isinstance(ratio, (int, float))
        or not 0 < ratio <= 1
    ):
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
    """SWA ``N`` running requests need with islands: ``k*cp + N*(w + p + tail)``."""
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
    """Most running requests whose :func:`island_floor` fits ``swa_pool``."""
    _require_int("swa_pool", swa_pool, 0)
    fixed = island_floor(
        0,
        window,
        page,
        chunk,
        chunks_in_flight=chunks_in_flight,
        decode_tail=decode_tail,
    )
    return max(0, (swa_pool - fixed) // (window + page + decode_tail))


def hold_without_islands(
    window: int, page: int, chunk: int, *, worst_case: bool = False
) -> int:
    """SWA one request locks in ``SWARadixCache``: ``ceil_p(cp)`` (worst ``+ w``)."""
    _require_int("window", window, 1)
    _require_int("page", page, 1)
    _require_int("chunk", chunk, 1)
    return _ceil_page(chunk + window if worst_case else chunk, page)


def hold_unified_decode(window: int, page: int, eviction_interval: int) -> int:
    """SWA one decoding request holds on 0.5.23 without islands, at most:
    ``ceil_p(w - 1) + w - 1 + eviction_interval``."""
    _require_int("window", window, 1)
    _require_int("page", page, 1)
    _require_int("eviction_interval", eviction_interval, 1)
    return window_lock_tokens(window - 1, page) + window - 1 + eviction_interval


def admission_bind(swa_pool: int, hold: float) -> float:
    """Running requests ``swa_pool`` admits at ``hold`` tokens each."""
    _require_int("swa_pool", swa_pool, 0)
    if (
        isinstance(hold, bool)
        or not isinstance(hold, (int, float))
        or not (math.isfinite(hold) and hold > 0)
    ):
        raise ValueError(f"hold must be a positive number, got {hold!r}")
    return swa_pool / hold


def ratio_for_swa_pool(need: int, full_tokens: int, page: int) -> float:
    """Smallest ``RATIO_STEP`` multiple whose SWA pool holds ``need``; 1.0 if none."""
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


@dataclass(frozen=True)
class IslandPoolCheck:
    """The SWA pool against the island floor: ``refuse``, ``warn`` or ``ok``."""

    verdict: str
    swa_pool: int
    chunk: int
    floor_one: int
    capacity: int
    max_running: int
    ratio_needed: Optional[float]
    message: str


def island_pool_check(
    swa_pool: int,
    full_pool: int,
    window: int,
    page: int,
    chunk: Optional[int],
    max_running: int,
    *,
    ratio: Optional[float] = None,
) -> IslandPoolCheck:
    """Check an SWA pool against :func:`island_floor` (no ``chunk``: one page)."""
    _require_int("swa_pool", swa_pool, 0)
    _require_int("max_running", max_running, 0)
    chunk = chunk if chunk is not None and chunk > 0 else page
    floor_one = island_floor(1, window, page, chunk)
    capacity = island_capacity(swa_pool, window, page, chunk)
    numbers = dict(
        swa_pool=swa_pool,
        chunk=chunk,
        floor_one=floor_one,
        capacity=capacity,
        max_running=max_running,
    )
    if swa_pool < floor_one:
        need = ratio_for_swa_pool(floor_one, max(full_pool, 1), page)
        pool = (
            f"--swa-full-tokens-ratio {ratio} gives an SWA pool of {swa_pool} tokens"
            if ratio is not None
            else f"the SWA pool holds {swa_pool} tokens"
        )
        return IslandPoolCheck(
            "refuse",
            ratio_needed=need,
            **numbers,
            message=(
                f"{pool}, below the island floor of a single request ({floor_one} "
                f"tokens: one chunk of {chunk} + window {window} + page {page}), so no "
                f"full chunk could be admitted. Raise --swa-full-tokens-ratio to at "
                f"least {need:.2f}."
            ),
        )
    if capacity < max_running:
        return IslandPoolCheck(
            "warn",
            ratio_needed=None,
            **numbers,
            message=(
                f"the SWA pool ({swa_pool} tokens) carries about {capacity} running "
                f"requests at the island floor ({chunk} + N x {window + page} tokens), "
                f"fewer than the request pool's {max_running}."
            ),
        )
    return IslandPoolCheck("ok", ratio_needed=None, message="", **numbers)
