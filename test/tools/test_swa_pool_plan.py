"""The pool-split arithmetic of the design note, pinned: "The hybrid KV layout", "The lazy-eviction
hold" and "Re-deriving the pool split", and the planner's refusals. Against SGLang's own pool
configurator and ModelConfig: ``test_swa_pool_plan_sglang.py``; the command line
scripts/swa_pool_plan.py (islands_tools/pool_plan_cli.py): ``test_swa_pool_plan_cli.py``.

The planner is ``islands_tools.pool_plan``; the pool formulas the server checks at startup are
imported by it from ``sglang.srt.mem_cache.swa_island_guard`` (their literal pins are in
test/engine/test_guard.py).

Units. The note's figures come out with SI units: KB = 1000 bytes and GB = 10**9 bytes.
* 10.24 KB of draft KV is exactly 10,240 bytes (5 layers x 2 KV heads x (512 + 512) x fp8).
* 37 GB / 50.14 KB = 737,933 tokens ~ "740k", and 0.32 x that = 236k ~ "the 237k the old ratio
  provisioned". With KiB the first figure would be 720k (-2.6%) and the second 231k.
* 37 GB / 35.89 KB = 1,030,928 ~ "~1M" (+3.1%). The TL;DR's 980k is a boot measurement, not this
  formula (its ratio to 740k, +32%, is not c(0.32) / c(0.17) = +39.7% either), so it is not pinned.
"""

from __future__ import annotations

import math
import random

import pytest

from islands_tools import pool_plan as plan
from pool_plan_cases import CP, GB, KB, N, P, SPEC_BUDGET, SPEC_KV, SPEC_LOAD, W, spec_pool
from sglang.srt.mem_cache import swa_island_guard as guard


# ------------------------------------------------------------------------ one definition


@pytest.mark.parametrize(
    "name", ["island_floor", "island_capacity", "hold_without_islands", "admission_bind", "swa_pool_tokens"]
)
def test_planner_uses_the_engine_formulas_not_a_copy(name):
    assert getattr(plan, name) is getattr(guard, name)
    assert name in plan.__all__


# ----------------------------------------------------------------- "The hybrid KV layout"


def test_token_costs_50_1_kb_at_ratio_032():
    assert plan.cost_per_token(9500, 95000, 10240, 0.32) == pytest.approx(50.14 * KB)
    assert round(SPEC_KV.cell_size(0.32) / KB, 1) == 50.1


def test_token_costs_35_9_kb_at_ratio_017():
    assert plan.cost_per_token(9500, 95000, 10240, 0.17) == pytest.approx(35.89 * KB)
    assert round(SPEC_KV.cell_size(0.17) / KB, 1) == 35.9


def test_machine_holds_740k_tokens_at_ratio_032():
    pool = spec_pool(0.32)
    assert pool.full_tokens == pytest.approx(740_000, rel=0.01)
    assert pool.full_tokens == 737_920  # 37e9 // 50140 = 737,933, floored to 64


def test_machine_holds_about_1m_tokens_at_ratio_017():
    pool = spec_pool(0.17)
    # "~1M": the formula gives 1,030,928 (+3.1%); see the module docstring.
    assert pool.full_tokens == pytest.approx(1_000_000, rel=0.035)
    assert pool.full_tokens == 1_030_912


def test_old_ratio_provisioned_237k_swa_tokens():
    assert spec_pool(0.32).swa_tokens == pytest.approx(237_000, rel=0.01)


def test_every_point_of_ratio_is_bought_with_total_capacity():
    ratios = [k / 100 for k in range(1, 101)]
    totals = [spec_pool(r).full_tokens for r in ratios]
    assert totals == sorted(totals, reverse=True)


# ---------------------------------------------------------------- "The lazy-eviction hold"


def test_hold_without_islands_is_about_one_chunk():
    assert plan.hold_without_islands(W, P, CP) == CP
    assert plan.hold_without_islands(W, P, CP, worst_case=True) == CP + W
    # Tree lengths are whole pages.
    assert plan.hold_without_islands(1000, 64, 1000) == 1024


def test_admission_binds_at_10_7_running_at_ratio_017():
    bind = plan.admission_bind(spec_pool(0.17).swa_tokens, plan.hold_without_islands(W, P, CP))
    assert round(bind, 1) == 10.7
    assert math.floor(bind) == 10  # "measured bind was 10-11 running requests"


def test_ratio_032_lifts_the_bind_to_15_18_with_the_measured_hold():
    # "roughly 15,500 tokens per request" measured; "lifting the bind to ~15-18".
    assert 15 <= plan.admission_bind(spec_pool(0.32).swa_tokens, 15_500) <= 18


# ----------------------------------------------------------- "Re-deriving the pool split"


def test_island_floor_is_68k_at_48_running():
    assert plan.island_floor(N, W, P, CP) == 16384 + 48 * (1024 + 64) == 68_608
    assert SPEC_LOAD.floor == 68_608
    assert plan.island_floor(N, W, P, CP) == pytest.approx(68_000, rel=0.01)


def test_island_floor_counts_the_model_window_not_window_left():
    # SGLang's tree uses window_left = w - 1 for Gemma; the floor with w is N tokens larger.
    assert plan.island_floor(N, W, P, CP) - plan.island_floor(N, W - 1, P, CP) == N


def test_island_floor_options_count_more_in_flight_state():
    assert plan.island_floor(N, W, P, CP, chunks_in_flight=2) == 68_608 + CP
    assert plan.island_floor(N, W, P, CP, decode_tail=100) == 68_608 + N * 100


@pytest.mark.parametrize("ratio", [0.10, 0.17, 0.32])
def test_all_three_ratios_satisfy_the_floor_with_margin(ratio):
    pool = spec_pool(ratio)
    assert pool.swa_tokens > 1.25 * SPEC_LOAD.floor
    assert plan.island_capacity(pool.swa_tokens, W, P, CP) >= N


def test_island_capacity_inverts_the_floor():
    for n in (1, 7, 48, 146):
        floor = plan.island_floor(n, W, P, CP)
        assert plan.island_capacity(floor, W, P, CP) == n
        assert plan.island_capacity(floor - 1, W, P, CP) == n - 1


def test_pool_floor_ratio_is_the_closed_form():
    r_star = plan.pool_floor_ratio(SPEC_KV, SPEC_BUDGET, SPEC_LOAD)
    assert r_star == pytest.approx(68_608 * 19_740 / (37e9 - 68_608 * 95_000))
    assert round(r_star, 4) == 0.0444


def test_no_ratio_below_the_pool_floor_ratio_fits_the_floor():
    rng = random.Random(0)
    for _ in range(200):
        kv = plan.KVBytesPerToken(rng.randint(1, 50_000), rng.randint(1, 200_000), rng.randint(0, 20_000))
        load = plan.Workload(rng.randint(1, 128), rng.choice([128, 1024, 4096]), rng.choice([1, 16, 64]),
                             rng.choice([2048, 8192, 16384]))
        budget = rng.randint(10**9, 8 * 10**10)
        try:
            r_star = plan.pool_floor_ratio(kv, budget, load)
        except ValueError:
            continue
        for r in (r_star * 0.5, r_star * 0.9, r_star * 0.999):
            assert plan.solve_pool_sizes(kv, budget, r, load.page).swa_tokens < load.floor


def test_pool_floor_ratio_honours_max_total_tokens():
    r = plan.pool_floor_ratio(SPEC_KV, SPEC_BUDGET, SPEC_LOAD, max_total_tokens_cap=200_000)
    assert r == pytest.approx(68_608 / 200_000)


def test_recommended_ratio_is_the_smallest_with_25_percent_margin():
    rec = plan.recommend_ratio(SPEC_KV, SPEC_BUDGET, SPEC_LOAD)
    assert rec.ratio == 0.06
    assert rec.floor == 68_608
    assert rec.pool == spec_pool(0.06)
    assert rec.pool.swa_tokens >= 1.25 * rec.floor
    assert spec_pool(0.05).swa_tokens < 1.25 * rec.floor
    assert rec.margin == pytest.approx(rec.pool.swa_tokens / rec.floor - 1)
    assert rec.margin_target == 0.25
    assert rec.ratio > rec.pool_floor_ratio


def test_recommended_ratio_follows_the_margin():
    assert plan.recommend_ratio(SPEC_KV, SPEC_BUDGET, SPEC_LOAD, margin=0).ratio == 0.05
    assert plan.recommend_ratio(SPEC_KV, SPEC_BUDGET, SPEC_LOAD, margin=1.0).ratio == 0.12
    assert spec_pool(0.11).swa_tokens < 2 * SPEC_LOAD.floor <= spec_pool(0.12).swa_tokens


def test_max_total_tokens_cap_shrinks_both_pools():
    pool = plan.solve_pool_sizes(SPEC_KV, SPEC_BUDGET, 0.17, P, max_total_tokens_cap=500_001)
    assert pool.full_tokens == 500_000 - 500_000 % 64
    assert pool.swa_tokens == (int(pool.full_tokens * 0.17) // 64) * 64
    # A cap above the profiled size changes nothing.
    assert plan.solve_pool_sizes(SPEC_KV, SPEC_BUDGET, 0.17, P, max_total_tokens_cap=10**8) == spec_pool(0.17)


# ------------------------------------------------------------------------------ bad inputs


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: plan.cost_per_token(9500, 95000, 0, 0), "must be in (0, 1]"),
        (lambda: plan.cost_per_token(9500, 95000, 0, 1.5), "must be in (0, 1]"),
        (lambda: plan.cost_per_token(-1, 95000, 0, 0.2), "must be positive"),
        (lambda: plan.cost_per_token(9500, 95000, -5, 0.2), "must not be negative"),
        (lambda: plan.KVBytesPerToken(9500, -1), "must be positive"),
        (lambda: plan.max_total_tokens(37e9, 35890.0, 0), "page must be positive"),
        (lambda: plan.max_total_tokens(37e9, 35890.0, 1.5), "page must be a positive integer"),
        (lambda: plan.max_total_tokens(-1, 35890.0, 64), "budget_bytes must be positive"),
        (lambda: plan.max_total_tokens(1000, 35890.0, 64), "Not enough memory"),
        (lambda: plan.Workload(48, 0, 64, 16384), "window"),
        (lambda: plan.Workload(0, 1024, 64, 16384), "n_running"),
        (lambda: plan.Workload(48, 1024, 64, -1), "chunk"),
        (lambda: plan.pool_floor_ratio(SPEC_KV, 10**9, SPEC_LOAD), "does not fit"),
        (lambda: plan.recommend_ratio(SPEC_KV, SPEC_BUDGET, plan.Workload(48, 10**6, 64, 16384)), "does not fit"),
        (lambda: plan.recommend_ratio(SPEC_KV, 9 * GB, SPEC_LOAD, margin=5), "no ratio up to 1.0"),
        (lambda: plan.dtype_bytes("int3"), "unknown KV dtype"),
        (lambda: plan.HybridKVLayout(0, 25, 2048, 4096), "all-SWA"),
        (lambda: plan.kv_layout_from_hf_config({"num_hidden_layers": 4}, "fp8"), "layer_types"),
    ],
)
def test_bad_inputs_raise_a_clear_value_error(call, message):
    with pytest.raises(ValueError) as err:
        call()
    assert message in str(err.value)


# ------------------------------------------------------------------- the serving floor (0.17)


def test_decode_tail_is_the_evictor_interval_times_accept_length_capped_by_the_cadence():
    assert plan.decode_tail_tokens(8.5, decode_interval=16384 // 4) == 1088
    assert plan.decode_tail_tokens(1.0) == 128
    assert plan.decode_tail_tokens(64.0, decode_interval=512 // 4) == 128
    with pytest.raises(ValueError):
        plan.decode_tail_tokens(0)
