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
The pure formulas of SWA islands, defined once for both targets of the series (sglang 0.5.15.post1's
``SWARadixCache`` and 0.5.23's ``UnifiedRadixCache``): the frontier, the decode-island cadence,
the release point of an island's window, the reclaim watermark (and where lazy reclaim fits) and
the SWA pool formulas.
Standard library only, so every target imports the same functions.

Units are tokens. ``window_left``: the tree's ``sliding_window_size`` (the query at ``i`` reads
SWA KV of ``[i - window_left, i]``); ``w = window_left + 1``; ``p``: page size; ``cp``: the
chunked-prefill size; ``L``: committed length (KV written); ``T``: the full pool (the token index
space); ``r``: the SWA/full ratio, the SWA pool being ``floor_p(int(T * r))``.

- frontier ``t = floor_p(L - (w + p))``: no future token of the request reads SWA KV below it;
- island: ``[t, floor_p(L))``, the end of a request's inserted prefix; decode islands every
  ``cp/4`` committed decode tokens; an island's window is no longer read once ``L >= end + w + p``;
- hold: SWA tokens one running request keeps away from admission;
- island floor: SWA tokens ``N`` running requests need with islands;
- admission bind: running requests an SWA pool admits at a given hold.
"""

import math
from dataclasses import dataclass
from typing import Optional

RECLAIM_POLICIES = ("lazy", "eager", "auto")
"""``--swa-islands-reclaim`` choices; on 0.5.15 the first is the default (its SWA eviction is
window-aware); on 0.5.23 the default is :func:`default_reclaim` of the eviction order."""

EVICTION_ORDERS = ("auto", "lru", "window")
"""``--swa-islands-eviction`` choices on the 0.5.23 target; the first is the default. ``lru`` is
upstream's SWA walk (either tree core), ``window`` gives SWA up by class (Python tree core),
``auto`` is one of the two by the pool (:func:`resolve_eviction`)."""


def resolve_eviction(eviction: str, lazy_fits: bool) -> str:
    """The SWA eviction order a cache runs, on the 0.5.23 target. ``lru`` and ``window`` stand;
    ``auto`` is ``window`` where the SWA pool cannot keep one chunk per running request
    (``lazy_fits`` false, :func:`lazy_reclaim_fits`: the lean pools islands are for, where one LRU
    walk gives up the windows that end matches together with cold SWA), else ``lru`` (no pressure
    to order, upstream's walk on its default tree core). Example: SWA pool 1,825, 16 requests,
    cp 512: ``window``; SWA pool 32,768: ``lru``. A HiCache host tier changes nothing: under
    ``window`` each match or insert end backs up its own window (``SWAIslandComponent``).
    """
    if eviction not in EVICTION_ORDERS:
        raise ValueError(
            f"eviction order must be one of {EVICTION_ORDERS}, got {eviction!r}"
        )
    if eviction != "auto":
        return eviction
    return "lru" if lazy_fits else "window"


def default_reclaim(eviction: str) -> str:
    """``--swa-islands-reclaim`` when not given, on the 0.5.23 target, for a resolved eviction
    order (:func:`resolve_eviction`): ``lazy`` under ``window``, which gives cold SWA up before
    any window, so SWA kept below a frontier costs no window a match needs; ``auto`` under
    ``lru``, whose single LRU walk would give up an older window before newer cold SWA (lazy
    there loses hits upstream keeps at lean pools)."""
    if eviction not in ("lru", "window"):
        raise ValueError(
            f"a resolved eviction order is lru or window, got {eviction!r}"
        )
    return "lazy" if eviction == "window" else "auto"


COLD, RETENTION, WINDOW, QUEUED = 0, 1, 2, 3
"""Eviction classes, in the order passes give them up. COLD: not known to be covered by any kept
window (the first pass takes it, or finds its cover and files it higher). RETENTION: covered only
by retention points' windows. WINDOW: by another match end's window. QUEUED: by a queued hit's."""

CLASSES = (COLD, RETENTION, WINDOW, QUEUED)
"""Both targets' eviction passes run over these, in this order (0.5.15: ``swa_island_eviction``;
0.5.23: ``unified_cache.components.swa_island``)."""

DEFAULT_DECODE_ISLAND_INTERVAL = 2048
"""Decode tokens between decode islands when chunked prefill is off (``cp/4`` of 8192)."""


def swa_tombstone_frontier(committed_len: int, window: int, page_size: int) -> int:
    """``t = floor_p(L - (w + p))``, at least 0: no future token of the request reads below it.

    The next token (position ``L``) reads ``[L - w + 1, L]``, and the page-aligned key end
    ``floor_p(L)`` keeps at least ``w`` tokens after ``t``.
    Example: w=1024, p=64, L=16384 -> t=15296 (1088 tokens after it). w=33, p=1, L=300 -> 266.
    """
    if committed_len < 0 or window <= 0 or page_size <= 0:
        raise ValueError(f"{committed_len=}, {window=}, {page_size=}")
    live = window + page_size
    if committed_len <= live:
        return 0
    return (committed_len - live) // page_size * page_size


def decode_island_interval(
    chunked_prefill_size: Optional[int], override: Optional[int] = None
) -> int:
    """Committed decode tokens between two decode islands: ``cp/4`` (at least 1).

    ``override`` wins; without chunked prefill (``None`` or ``<= 0``) the default is
    :data:`DEFAULT_DECODE_ISLAND_INTERVAL`. Example: cp=16384 -> 4096; cp=512 -> 128.
    """
    if override is not None and override > 0:
        return override
    if chunked_prefill_size is None or chunked_prefill_size <= 0:
        return DEFAULT_DECODE_ISLAND_INTERVAL
    return max(1, chunked_prefill_size // 4)


def decode_island_due(committed_len: int, last_island_len: int, interval: int) -> bool:
    """Fire once ``interval`` tokens were committed since the last island.

    Accumulated progress, never ``committed_len % interval == 0``: speculative decoding advances
    by variable accept lengths and would almost never land on a multiple.
    """
    return committed_len - last_island_len >= interval


def island_out_of_window(
    committed_len: int, island_end: int, window: int, page_size: int
) -> bool:
    """Whether no token of the request, the one in flight included, reads the island ending at
    ``island_end`` any more: ``L >= end + w + p`` (``w`` to leave the window, ``p`` of slack for
    a token already counted in ``L`` but still being written). Example: end 300, w 33, p 1: 334.
    """
    return committed_len >= island_end + window + page_size


def window_lock_tokens(window_left: int, page_size: int) -> int:
    """SWA tokens a match lock takes behind its end: the tokens a match end needs live
    (``window_left``), page-rounded up. Example: window_left 31, p 1: 31; window_left 127, p 16:
    128."""
    return -(-window_left // page_size) * page_size


def host_backup_tokens(window: int, page_size: int) -> int:
    """SWA tokens a HiCache host backup of a match or insert end at ``E`` takes behind ``E``:
    ``ceil_p(w) + p``, the least a commit leaves live (:func:`swa_tombstone_frontier`), so that
    a match ending up to a page short of ``E`` finds its window on the host too (a re-sent prompt
    leaves its last page to compute; its first decode island lands a token or two past the
    prompt's end). Example: w=32, p=1: 33; w=1024, p=64: 1088."""
    return _ceil_page(window, page_size) + page_size


def queued_hit_reserve(
    queued_hits: int, window_left: int, page_size: int, held: int
) -> int:
    """SWA tokens a prefill pass leaves unspent while requests run: the windows of ``queued_hits``
    distinct queued hits (one page-rounded window each, ``window_lock_tokens``), at most ``held``,
    the SWA that is neither free nor evictable (running requests' own slots and locked windows),
    which the running requests return as they finish. Admission then waits for that SWA instead
    of evicting the window a waiting request will hit; with nothing held it reserves nothing.
    Example: 3 hits, window_left 32, p 1, 900 held: 96; 40 hits, 900 held: 900."""
    return max(0, min(queued_hits * window_lock_tokens(window_left, page_size), held))


def reclaim_watermark(chunked_prefill_size: Optional[int], page_size: int) -> int:
    """Free SWA tokens below which ``auto`` reclaims eagerly: one prefill chunk, page-rounded up.

    Below it the next chunk's allocation would have to evict anyway; freeing the cold SWA of the
    committing path at the insert saves that eviction walk. Without chunked prefill: the decode
    default interval. Example: cp=16384, p=64 -> 16384; cp=500, p=16 -> 512.
    """
    chunk = (
        chunked_prefill_size
        if chunked_prefill_size and chunked_prefill_size > 0
        else (DEFAULT_DECODE_ISLAND_INTERVAL)
    )
    return -(-chunk // page_size) * page_size


def lazy_reclaim_fits(
    swa_pool: int, max_running: int, chunked_prefill_size: Optional[int], page_size: int
) -> bool:
    """Whether the SWA pool keeps one chunk live per running request, ``N * ceil_p(cp)`` tokens:
    where it does, chunks left live by ``lazy`` stay until a diverging request can hit them; where
    it does not, they are evicted under pressure. A tree that evicts SWA from one LRU list
    (sglang 0.5.23) then takes the window at a chunk's end with its cold SWA, so ``auto`` frees
    at every commit there. Example: 32,768 >= 16 * 512 fits; 1,825 < 8,192 does not."""
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
    """SWA pool of a ``full_tokens``-token index space: ``floor_p(int(T * r))`` tokens.

    Same float expression as ``HybridSWAPoolConfigurator``.
    Example: T = 1,030,912, r = 0.17, p = 64: int(175,255.04) = 175,255 -> 175,232.
    """
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


def hold_unified_decode(window: int, page: int, eviction_interval: int) -> int:
    """SWA tokens one decoding request holds on sglang 0.5.23's ``UnifiedRadixCache`` without
    islands, at most: its prompt-end lock of one window, ``ceil_p(w - 1)``, for the whole
    generation, plus its own decode tail, up to ``w - 1 + interval`` between two runs of the
    decode SWA evictor (``SGLANG_SWA_EVICTION_INTERVAL``). A chunk commit frees everything
    below the window there, so no chunk is held. Example: w = 1024, p = 64, interval 128:
    1024 + 1151 = 2175 (measured max, ``swa_hold_main_production``)."""
    _require_int("window", window, 1)
    _require_int("page", page, 1)
    _require_int("eviction_interval", eviction_interval, 1)
    return window_lock_tokens(window - 1, page) + window - 1 + eviction_interval


def admission_bind(swa_pool: int, hold: float) -> float:
    """Running requests an SWA pool of ``swa_pool`` tokens admits at ``hold`` tokens each.

    ``swa_pool / hold``, a float: ``PrefillAdder`` counts locked SWA tokens as unavailable, so
    admission stops at its floor. Example: 175,232 / 16,384 = 10.7.
    """
    _require_int("swa_pool", swa_pool, 0)
    if (
        isinstance(hold, bool)
        or not isinstance(hold, (int, float))
        or not (math.isfinite(hold) and hold > 0)
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


@dataclass(frozen=True)
class IslandPoolCheck:
    """The SWA pool against the island floor at startup, the verdict both targets' guards act on.

    ``verdict``: ``"refuse"`` below one request's floor (no full chunk could ever be admitted),
    ``"warn"`` below the floor of the request pool's size, ``"ok"`` otherwise. ``message`` says
    why with the numbers (empty when ``ok``); ``ratio_needed`` (refuse only) is the smallest ratio
    whose pool holds one request's floor at the full pool's size.
    """

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
    """Check an SWA pool of ``swa_pool`` tokens against ``island_floor``.

    ``chunk``: the chunked-prefill size (``None`` or ``<= 0``: off, one page counts);
    ``max_running``: the request pool's size; ``ratio``: the ``--swa-full-tokens-ratio`` that gave
    the pool, named in the message when known.
    Example: pool 150, w 33, p 1, cp 128: floor 162 -> refuse; pool 1000, 32 requests: capacity
    (1000 - 128) // 34 = 25 -> warn; 16 requests -> ok.
    """
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
            message=f"{pool}, below the island floor of a single request ({floor_one} tokens: "
            f"one chunk of {chunk} + window {window} + page {page}), so no full chunk could be "
            f"admitted. Raise --swa-full-tokens-ratio to at least {need:.2f}.",
        )
    if capacity < max_running:
        return IslandPoolCheck(
            "warn",
            ratio_needed=None,
            **numbers,
            message=f"the SWA pool ({swa_pool} tokens) carries about {capacity} running requests "
            f"at the island floor ({chunk} + N x {window + page} tokens), fewer than the request "
            f"pool's {max_running}.",
        )
    return IslandPoolCheck("ok", ratio_needed=None, message="", **numbers)
