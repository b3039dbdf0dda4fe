"""The island formulas, pinned: frontier and decode cadence (one source of truth each)."""

import random

import pytest

from sglang.srt.mem_cache.swa_island_formulas import (
    DEFAULT_DECODE_ISLAND_INTERVAL,
    IslandPoolCheck,
    decode_island_due,
    decode_island_interval,
    island_out_of_window,
    island_pool_check,
    hold_unified_decode,
    lazy_reclaim_fits,
    default_reclaim,
    host_backup_tokens,
    queued_hit_reserve,
    reclaim_watermark,
    resolve_eviction,
    swa_tombstone_frontier,
    window_lock_tokens,
)


# ---- frontier ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "L, w, p, t",
    [
        (16384, 1024, 64, 15296),  # the spec's production shape: 1088 tokens stay live
        (300, 32, 1, 267),
        (1024, 65, 1, 958),
        (1024, 65, 16, 928),
        (100, 32, 64, 0),  # too short: nothing to tombstone
        (96, 32, 64, 0),  # exactly w + p: nothing below the frontier
        (97, 32, 1, 64),
    ],
)
def test_frontier_examples(L, w, p, t):
    assert swa_tombstone_frontier(L, w, p) == t


@pytest.mark.parametrize("p", [1, 16, 64])
@pytest.mark.parametrize("w", [32, 40, 65, 1024])
def test_frontier_keeps_window_plus_page_live_and_is_page_aligned(w, p):
    for L in range(0, 4 * (w + p) + 3 * p):
        t = swa_tombstone_frontier(L, w, p)
        assert t % p == 0
        assert t >= 0
        if t > 0:
            assert L - t >= w + p
            # the largest such page-aligned position: one page more would cut into w + p
            assert L - (t + p) < w + p
            # the page-aligned tree key keeps at least w live tokens after the frontier
            assert (L // p * p) - t >= w


def test_frontier_rejects_nonsense():
    with pytest.raises(ValueError):
        swa_tombstone_frontier(10, 0, 1)
    with pytest.raises(ValueError):
        swa_tombstone_frontier(10, 4, 0)


# ---- cadence -----------------------------------------------------------------------------------


def test_interval_is_a_quarter_chunk_with_a_documented_default():
    assert decode_island_interval(16384) == 4096
    assert decode_island_interval(512) == 128
    assert decode_island_interval(None) == DEFAULT_DECODE_ISLAND_INTERVAL
    assert decode_island_interval(-1) == DEFAULT_DECODE_ISLAND_INTERVAL
    assert decode_island_interval(512, override=40) == 40
    assert decode_island_interval(2) == 1
    assert decode_island_interval(1) == 1  # a one-token chunk is chunked prefill, not "off"


def _fire_points(steps, interval, start=0):
    """Drive the trigger like the scheduler: committed grows by each step; an island at
    ``committed`` moves ``last`` there."""
    committed, last, fired = start, start, []
    for a in steps:
        committed += a
        if decode_island_due(committed, last, interval):
            fired.append(committed)
            last = committed
    return fired


def test_cadence_step_1_fires_every_interval():
    assert _fire_points([1] * 1000, 128) == [128 * k for k in range(1, 8)]


def test_cadence_step_3_fires_at_first_crossing():
    fired = _fire_points([3] * 300, 128)
    assert fired[0] == 129  # 43 steps of 3
    assert all(b - a >= 128 for a, b in zip(fired, fired[1:]))
    assert len(fired) == 900 // 129


def test_cadence_random_accept_lengths_never_missed_never_twice():
    rng = random.Random(0)
    # accept lengths 1..16, mean ~8.5: the spec's speculative decoding average
    steps = [rng.randint(1, 16) for _ in range(4000)]
    assert 8.0 < sum(steps) / len(steps) < 9.0
    interval = 128
    fired = _fire_points(steps, interval)
    # a modulo trigger would fire only where the sequence lands exactly on a multiple
    committed, modulo = 0, 0
    for a in steps:
        committed += a
        modulo += committed % interval == 0
    assert modulo < len(fired) / 4
    # accumulated progress: every gap is at least the interval and less than interval + max step
    gaps = [b - a for a, b in zip([0] + fired, fired)]
    assert all(interval <= g < interval + 16 for g in gaps)
    assert len(set(fired)) == len(fired)
    assert sum(steps) - fired[-1] < interval


def test_cadence_step_straddling_several_multiples_fires_once():
    # one step of 1000 crosses 7 multiples of 128: one island, not seven
    assert _fire_points([1000], 128) == [1000]
    assert _fire_points([5, 1000, 5, 300], 128) == [1005, 1310]


# ---- release and watermark ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "end, w, p, first_out",
    [
        (300, 33, 1, 334),  # the docstring's example: end + w + p
        (16384, 1024, 64, 17472),  # the seed's shape
        (0, 33, 16, 49),
    ],
)
def test_island_leaves_the_window_a_window_plus_a_page_after_its_end(end, w, p, first_out):
    assert not island_out_of_window(first_out - 1, end, w, p)
    assert island_out_of_window(first_out, end, w, p)
    assert island_out_of_window(first_out + 100, end, w, p)


def test_reclaim_watermark_is_one_chunk_rounded_up_to_a_page():
    assert reclaim_watermark(16384, 64) == 16384
    assert reclaim_watermark(500, 16) == 512
    assert reclaim_watermark(None, 1) == DEFAULT_DECODE_ISLAND_INTERVAL
    assert reclaim_watermark(0, 64) == DEFAULT_DECODE_ISLAND_INTERVAL


@pytest.mark.parametrize(
    "pool, running, chunk, page, fits",
    [
        (32768, 16, 512, 1, True),   # the benchmarks' ample pool
        (8192, 16, 512, 1, True),    # exactly one chunk per running request
        (8191, 16, 512, 1, False),
        (1825, 16, 512, 1, False),   # the 0.17-equivalent pool
        (8192, 16, 500, 16, True),   # 500 page-rounds up to 512
        (8000, 16, 500, 16, False),  # 16 x 500 but not 16 x 512
        (175232, 48, 16384, 64, False),  # production at 0.17
    ],
)
def test_lazy_reclaim_fits_one_page_rounded_chunk_per_running_request(pool, running, chunk, page,
                                                                       fits):
    assert lazy_reclaim_fits(pool, running, chunk, page) is fits


@pytest.mark.parametrize("window_left, page, want", [(31, 1, 31), (32, 16, 32), (33, 16, 48),
                                                     (127, 16, 128), (31, 64, 64)])
def test_a_match_lock_takes_the_window_rounded_up_to_pages(window_left, page, want):
    assert window_lock_tokens(window_left, page) == want


@pytest.mark.parametrize("w, p, want", [(32, 1, 33), (1024, 64, 1088), (33, 16, 64), (128, 16, 144)])
def test_a_host_backup_takes_what_a_commit_leaves_live_at_the_least(w, p, want):
    assert host_backup_tokens(w, p) == want
    # exactly what a commit at a page-aligned L leaves live behind L (the frontier's w + p)
    for L in range(want + p, want + 8 * p, p):
        assert L - swa_tombstone_frontier(L, w, p) == want, L


@pytest.mark.parametrize("hits, window_left, page, held, want", [
    (3, 32, 1, 900, 96), (40, 32, 1, 900, 900), (2, 127, 16, 10_000, 256), (0, 32, 1, 900, 0),
    (5, 32, 1, 0, 0), (5, 32, 1, -3, 0)])
def test_the_queued_hit_reserve_is_a_window_per_hit_at_most_what_is_held(hits, window_left, page,
                                                                         held, want):
    assert queued_hit_reserve(hits, window_left, page, held) == want


def test_unified_decode_hold_is_a_page_rounded_window_lock_plus_the_decode_tail():
    assert hold_unified_decode(1024, 64, 128) == 2175  # measured max on 0.5.23, both cores
    assert hold_unified_decode(32, 1, 34) == 31 + 31 + 34
    assert hold_unified_decode(33, 16, 1) == 32 + 32 + 1
    with pytest.raises(ValueError):
        hold_unified_decode(32, 1, 0)


@pytest.mark.parametrize("pool, running, order", [(32768, 16, "lru"), (1825, 16, "window"),
                                                   (1318, 16, "window"), (175232, 48, "window")])
def test_auto_eviction_is_the_window_order_where_a_chunk_per_request_does_not_fit(pool, running,
                                                                                  order):
    # the prefix_reuse pools (CPU shape: cp 512, page 1) and production at 0.17 (cp 16384, p 64)
    chunk, page = (16384, 64) if running == 48 else (512, 1)
    fits = lazy_reclaim_fits(pool, running, chunk, page)
    assert resolve_eviction("auto", fits) == order
    for given in ("lru", "window"):  # a given order stands, whatever the pool
        assert resolve_eviction(given, fits) == given


def test_the_default_reclaim_follows_the_resolved_eviction_order():
    assert default_reclaim("window") == "lazy"
    assert default_reclaim("lru") == "auto"
    for bad in ("auto", "fifo"):
        with pytest.raises(ValueError):
            default_reclaim(bad)
    with pytest.raises(ValueError):
        resolve_eviction("fifo", True)


def test_lazy_reclaim_fits_rejects_a_nonsense_pool():
    with pytest.raises(ValueError):
        lazy_reclaim_fits(-1, 16, 512, 1)
    with pytest.raises(ValueError):
        lazy_reclaim_fits(100, 0, 512, 1)


# ---- the pool-floor check (both targets' guards act on its verdict) ----------------------------


def test_pool_check_refuses_a_pool_below_one_requests_floor_with_the_ratio_that_holds_it():
    # one chunk (128) + window (33) + page (1) = 162 tokens; of a 1000-token full pool: 0.17
    check = island_pool_check(150, 1000, 33, 1, 128, 16)
    assert check == IslandPoolCheck(
        "refuse", swa_pool=150, chunk=128, floor_one=162, capacity=0, max_running=16,
        ratio_needed=0.17,
        message="the SWA pool holds 150 tokens, below the island floor of a single request "
        "(162 tokens: one chunk of 128 + window 33 + page 1), so no full chunk could be "
        "admitted. Raise --swa-full-tokens-ratio to at least 0.17.")
    named = island_pool_check(150, 1000, 33, 1, 128, 16, ratio=0.05)
    assert named.message.startswith("--swa-full-tokens-ratio 0.05 gives an SWA pool of 150 "
                                    "tokens, below the island floor of a single request (162")
    assert island_pool_check(161, 1000, 33, 1, 128, 1).verdict == "refuse"


def test_pool_check_warns_below_the_request_pools_floor_with_the_requests_it_carries():
    # (1000 - 128) // (33 + 1) = 25 running requests fit, the request pool has 32
    check = island_pool_check(1000, 16384, 33, 1, 128, 32)
    assert (check.verdict, check.capacity, check.ratio_needed) == ("warn", 25, None)
    assert check.message == ("the SWA pool (1000 tokens) carries about 25 running requests at "
                             "the island floor (128 + N x 34 tokens), fewer than the request "
                             "pool's 32.")
    # exactly one request's floor: one request fits, a second does not
    assert island_pool_check(162, 1000, 33, 1, 128, 1).verdict == "ok"
    assert island_pool_check(162, 1000, 33, 1, 128, 2).verdict == "warn"


def test_pool_check_passes_a_pool_that_carries_the_request_pool():
    check = island_pool_check(1000, 16384, 33, 1, 128, 25)
    assert (check.verdict, check.capacity, check.message) == ("ok", 25, "")
    # the seed deployment: w 1024, p 64, cp 16384, 48 running, SWA pool 175,232 at 0.17
    seed = island_pool_check(175_232, 1_030_912, 1024, 64, 16384, 48, ratio=0.17)
    assert (seed.verdict, seed.floor_one, seed.capacity) == ("ok", 17_472, 146)


@pytest.mark.parametrize("chunk", [None, 0, -1])
def test_pool_check_without_chunked_prefill_counts_one_page(chunk):
    check = island_pool_check(1000, 16384, 33, 16, chunk, 1)
    assert (check.chunk, check.floor_one) == (16, 16 + 33 + 16)


def test_pool_check_rejects_bad_input_and_is_frozen():
    with pytest.raises(ValueError, match="swa_pool"):
        island_pool_check(-1, 1000, 33, 1, 128, 1)
    with pytest.raises(ValueError, match="max_running"):
        island_pool_check(100, 1000, 33, 1, 128, -1)
    with pytest.raises(ValueError, match="window"):
        island_pool_check(100, 1000, 0, 1, 128, 1)
    check = island_pool_check(1000, 16384, 33, 1, 128, 1)
    with pytest.raises(AttributeError):
        check.verdict = "refuse"


def test_formulas_module_needs_only_the_standard_library():
    """Defined once for both targets: every target imports this module as it is, so it needs
    nothing beyond the standard library."""
    import ast
    import sys

    from sglang.srt.mem_cache import swa_island_formulas as formulas

    tree = ast.parse(open(formulas.__file__).read())
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}, imported
