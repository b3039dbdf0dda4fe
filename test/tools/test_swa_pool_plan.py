"""The pool-split arithmetic of the design note, pinned: "The hybrid KV layout", "The lazy-eviction
hold" and "Re-deriving the pool split", plus a cross-check against SGLang's own pool configurator
and ModelConfig, and the command line scripts/swa_pool_plan.py (islands_tools/pool_plan_cli.py).

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

import contextlib
import dataclasses
import io
import json
import math
import os
import pathlib
import random
import runpy
import subprocess
import sys
import types

import pytest

from islands_tools import pool_plan as plan
from sglang.srt.mem_cache import swa_island_guard as guard

ROOT = str(pathlib.Path(__file__).resolve().parents[2])
SCRIPT = os.path.join(ROOT, "scripts", "swa_pool_plan.py")

KB = 1000
GB = 10**9
SPEC_KV = plan.KVBytesPerToken(full=9500, swa=95000, draft=10240)  # 9.5 KB, 95 KB, 10.24 KB
SPEC_BUDGET = 37 * GB
W, P, CP, N = 1024, 64, 16384, 48
SPEC_LOAD = plan.Workload(n_running=N, window=W, page=P, chunk=CP)


def spec_pool(ratio):
    return plan.solve_pool_sizes(SPEC_KV, SPEC_BUDGET, ratio, P)


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


# ---------------------------------------------------------------- bytes from a config.json

GEMMA4_LIKE = {
    # Gemma-4 naming: base attributes describe the SWA layers, global_* the full layers.
    "architectures": ["Gemma4ForConditionalGeneration"],
    "model_type": "gemma4",
    "text_config": {
        "model_type": "gemma4_text",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 6,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "num_global_key_value_heads": 1,
        "global_head_dim": 64,
        "sliding_window": 128,
        "vocab_size": 1000,
        "max_position_embeddings": 4096,
        "layer_types": ["sliding_attention", "sliding_attention", "full_attention",
                        "sliding_attention", "sliding_attention", "full_attention"],
    },
}

HYBRID_PATTERN_LLAMA = {
    # The generic opt-in: is_hybrid_swa + hybrid_layer_pattern (1 = SWA), with swa_* overrides.
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "vocab_size": 1000,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 5,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "swa_num_key_value_heads": 4,
    "swa_head_dim": 24,
    "max_position_embeddings": 4096,
    "sliding_window": 64,
    "is_hybrid_swa": True,
    "hybrid_layer_pattern": [1, 1, 0, 1, 0],
    "torch_dtype": "bfloat16",
    "eos_token_id": 999,
    "bos_token_id": 1,
}

CONFIGS = {"gemma4": (GEMMA4_LIKE, "triton"), "hybrid_pattern": (HYBRID_PATTERN_LLAMA, "torch_native")}


def test_gemma4_26b_a4b_bytes_per_token_from_its_config_shape():
    cfg = {
        "model_type": "gemma4",
        "text_config": {"num_hidden_layers": 30, "num_key_value_heads": 8, "head_dim": 256,
                        "num_global_key_value_heads": 2, "global_head_dim": 512, "sliding_window": 1024,
                        "layer_types": (["sliding_attention"] * 5 + ["full_attention"]) * 5},
    }
    layout = plan.kv_layout_from_hf_config(cfg, "fp8", draft_layers=5)
    assert (layout.full_layers, layout.swa_layers) == (5, 25)
    assert layout.full_bytes_per_layer == 2 * (512 + 512) * 1
    assert layout.swa_bytes_per_layer == 8 * (256 + 256) * 1
    assert layout.bytes_per_token == plan.KVBytesPerToken(full=10_240, swa=102_400, draft=10_240)
    assert plan.sliding_window_from_hf_config(cfg) == 1024
    assert plan.kv_layout_from_hf_config(cfg, "bf16").bytes_per_token.full == 20_480


@pytest.fixture(scope="module")
def sglang_configs(tmp_path_factory):
    """Real ServerArgs + ModelConfig for each tiny config (no weights)."""
    pytest.importorskip("torch")
    import logging
    import warnings

    out = {}
    logging.disable(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from sglang.srt.configs.model_config import ModelConfig
            from sglang.srt.server_args import ServerArgs

            for name, (cfg, backend) in CONFIGS.items():
                d = tmp_path_factory.mktemp(name)
                (d / "config.json").write_text(json.dumps(cfg))
                sa = ServerArgs(model_path=str(d), device="cpu", attention_backend=backend, skip_tokenizer_init=True)
                mc = ModelConfig.from_server_args(sa)
                assert mc.is_hybrid_swa
                out[name] = (cfg, sa, mc)
    finally:
        logging.disable(logging.NOTSET)
    return out


def _model_runner(sa, mc, kv_dtype, draft_layers):
    """The attributes HybridSWAPoolConfigurator.__init__ and the pool-resolution chain read.

    A real ModelRunner cannot be built here: its __init__ initialises torch.distributed, loads
    weights and profiles device memory. Everything this object points at is real (ServerArgs,
    ModelConfig, SpeculativeAlgorithm, torch dtype); only the runner shell is a namespace.
    """
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    return types.SimpleNamespace(
        model_config=mc,
        kv_cache_dtype=kv_dtype,
        server_args=sa,
        spec_algorithm=SpeculativeAlgorithm.EAGLE if draft_layers else SpeculativeAlgorithm.NONE,
        is_draft_worker=False,
        eagle_draft_num_layers=draft_layers,
        is_hybrid_swa=True,
        page_size=sa.page_size,
        sliding_window_size=mc.sliding_window_size,
        dp_size=1,
        pp_size=1,
        mambaish_config=None,
    )


DTYPES = {"fp8": "float8_e4m3fn", "bf16": "bfloat16", "fp32": "float32"}


@pytest.mark.parametrize("name", sorted(CONFIGS))
@pytest.mark.parametrize("kv_dtype", sorted(DTYPES))
@pytest.mark.parametrize("draft_layers", [0, 3])
@pytest.mark.parametrize("tp_size", [1, 2])
def test_cell_size_matches_sglang_pool_configurator(sglang_configs, monkeypatch, name, kv_dtype, draft_layers, tp_size):
    import torch
    from sglang.srt.model_executor import pool_configurator as pc

    cfg, sa, mc = sglang_configs[name]
    # The attention-TP group is a torch.distributed object; its size is all this reads.
    monkeypatch.setattr(pc, "get_attention_tp_size", lambda: tp_size)
    layout = plan.kv_layout_from_hf_config(cfg, kv_dtype, draft_layers=draft_layers, tp_size=tp_size)
    # The planner's ModelConfig reader and its config.json fallback agree.
    assert plan.kv_layout_from_model_config(mc, kv_dtype, draft_layers=draft_layers, tp_size=tp_size) == layout
    mr = _model_runner(sa, mc, getattr(torch, DTYPES[kv_dtype]), draft_layers)
    for ratio in (0.05, 0.1, 0.17, 0.32, 0.8, 1.0):
        monkeypatch.setattr(sa, "swa_full_tokens_ratio", ratio)
        conf = pc.HybridSWAPoolConfigurator(mr)
        assert conf._full_per_token == layout.full_bytes_per_layer
        assert conf._swa_per_token == layout.swa_bytes_per_layer
        assert (conf._full_layers_num, conf._swa_layers_num, conf._draft_full_layers_num) == (
            layout.full_layers, layout.swa_layers, layout.draft_layers)
        assert conf._cell_size == layout.cell_size(ratio)
        bpt = layout.bytes_per_token
        assert plan.cost_per_token(bpt.full, bpt.swa, bpt.draft, ratio) == pytest.approx(conf._cell_size, rel=1e-12)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_pool_sizes_match_sglang_pool_configurator(sglang_configs, monkeypatch, name):
    import torch
    from sglang.srt.model_executor import pool_configurator as pc

    cfg, sa, mc = sglang_configs[name]
    monkeypatch.setattr(pc, "get_attention_tp_size", lambda: 1)
    mr = _model_runner(sa, mc, torch.bfloat16, 1)
    layout = plan.kv_layout_from_hf_config(cfg, "bf16", draft_layers=1)
    rng = random.Random(1)
    for ratio in (0.01, 0.06, 0.1, 0.17, 0.25, 0.32, 1 / 3, 0.8, 1.0):
        monkeypatch.setattr(sa, "swa_full_tokens_ratio", ratio)
        conf = pc.HybridSWAPoolConfigurator(mr)
        for _ in range(60):
            budget = rng.randint(10**6, 10**11)
            page = rng.choice([1, 16, 64, 128, 256])
            ours = plan.solve_pool_sizes(layout, budget, ratio, page)
            aggregate = plan.solve_pool_sizes(layout.bytes_per_token, budget, ratio, page)
            theirs = conf.calculate_pool_sizes(budget, page)
            assert (ours.full_tokens, ours.swa_tokens) == (
                theirs.full_max_total_num_tokens, theirs.swa_max_total_num_tokens), (ratio, budget, page)
            assert theirs.max_total_num_tokens == ours.full_tokens
            assert (aggregate.full_tokens, aggregate.swa_tokens) == (ours.full_tokens, ours.swa_tokens)
            cap = rng.randint(page, 3 * max(page, ours.full_tokens))
            constrained = conf.calculate_pool_sizes_from_max_tokens(min(cap, ours.full_tokens), page)
            capped = plan.solve_pool_sizes(layout, budget, ratio, page, max_total_tokens_cap=cap)
            assert capped.full_tokens == constrained.full_max_total_num_tokens
            assert capped.swa_tokens == constrained.swa_max_total_num_tokens


@pytest.mark.parametrize("ratio", [0.10, 0.17, 0.32])
def test_spec_deployment_rounds_like_sglang(monkeypatch, ratio):
    """The note's per-token bytes are totals (10.24 KB of draft is no whole number of 9.5 KB full
    layers), so build a real HybridSWAPoolConfigurator with object.__new__ and set the attributes
    its __init__ would set, with _cell_size = c(r); SGLang's own calculate_pool_sizes then does
    the T = avail // cell_size and page rounding."""
    pytest.importorskip("torch")
    from sglang.srt.model_executor.pool_configurator import HybridSWAPoolConfigurator

    conf = object.__new__(HybridSWAPoolConfigurator)
    conf._full_layers_num = 1
    conf._swa_layers_num = 1
    conf._swa_full_tokens_ratio = ratio
    conf._full_per_token = SPEC_KV.full
    conf._swa_per_token = SPEC_KV.swa
    conf._draft_full_layers_num = 0
    conf._cell_size = plan.cost_per_token(SPEC_KV.full, SPEC_KV.swa, SPEC_KV.draft, ratio)
    theirs = conf.calculate_pool_sizes(SPEC_BUDGET, P)
    ours = spec_pool(ratio)
    assert (theirs.full_max_total_num_tokens, theirs.swa_max_total_num_tokens) == (ours.full_tokens, ours.swa_tokens)
    assert plan.max_total_tokens(SPEC_BUDGET, conf._cell_size, P) == theirs.max_total_num_tokens


@pytest.mark.parametrize("cap", [None, 10**9, 4_000, 4_001, 63])
def test_max_total_tokens_cap_matches_sglang_resolution(sglang_configs, monkeypatch, cap):
    """Runs ModelRunner's own _resolve_memory_pool_config (profile -> configurator ->
    --max-total-tokens -> re-solve) with the budget standing in for the profiled bytes."""
    import torch
    from sglang.srt.model_executor import pool_configurator as pc
    from sglang.srt.model_executor.model_runner_kv_cache_mixin import ModelRunnerKVCacheMixin as Mixin

    cfg, sa, mc = sglang_configs["gemma4"]
    monkeypatch.setattr(pc, "get_attention_tp_size", lambda: 1)
    page, ratio, budget = 64, 0.17, 3 * 10**8
    monkeypatch.setattr(sa, "swa_full_tokens_ratio", ratio)
    monkeypatch.setattr(sa, "page_size", page)
    monkeypatch.setattr(sa, "max_total_tokens", cap)
    mr = _model_runner(sa, mc, torch.float8_e4m3fn, 0)
    mr._profile_available_bytes = lambda pre_model_load_memory: budget
    mr._apply_token_constraints = types.MethodType(Mixin._apply_token_constraints, mr)
    mr._resolve_max_num_reqs = types.MethodType(Mixin._resolve_max_num_reqs, mr)
    layout = plan.kv_layout_from_hf_config(cfg, "fp8")
    try:
        theirs = Mixin._resolve_memory_pool_config(mr, 0)
    except RuntimeError as e:  # SGLang: "Not enough memory"
        with pytest.raises(ValueError, match="Not enough memory"):
            plan.solve_pool_sizes(layout, budget, ratio, page, max_total_tokens_cap=cap)
        assert "Not enough memory" in str(e)
        return
    ours = plan.solve_pool_sizes(layout, budget, ratio, page, max_total_tokens_cap=cap)
    assert (ours.full_tokens, ours.swa_tokens) == (theirs.full_max_total_num_tokens, theirs.swa_max_total_num_tokens)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_model_shape_is_read_through_sglang_model_config(tmp_path, name):
    cfg, _ = CONFIGS[name]
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    by_dir = plan.read_model_shape(str(tmp_path))
    by_file = plan.read_model_shape(str(tmp_path / "config.json"))
    assert by_dir == by_file
    assert by_dir.reader == "ModelConfig"
    fallback = plan.model_shape_from_hf_config(cfg)
    assert fallback.reader == "config.json"
    assert dataclasses.replace(by_dir, reader="config.json") == fallback


def test_model_shape_falls_back_to_config_json_only_where_model_config_cannot_load_it(tmp_path):
    # No model_type / architectures: transformers cannot build a config, ModelConfig neither.
    shape_only = {"num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
                  "sliding_window": 64, "layer_types": ["sliding_attention"] * 3 + ["full_attention"]}
    (tmp_path / "config.json").write_text(json.dumps(shape_only))
    shape = plan.read_model_shape(str(tmp_path))
    assert shape.reader == "config.json"
    assert (shape.full_layers, shape.swa_layers, shape.kv_heads, shape.head_dim, shape.sliding_window) == (1, 3, 2, 16, 64)
    # A file not named config.json is not something ModelConfig loads.
    other = tmp_path / "gemma4.json"
    other.write_text(json.dumps(GEMMA4_LIKE))
    assert plan.read_model_shape(str(other)).reader == "config.json"


# ------------------------------------------------------------------------------------- CLI

SPEC_ARGS = ["--full-bytes-per-token", "9.5KB", "--swa-bytes-per-token", "95KB", "--draft-bytes-per-token",
             "10.24KB", "--budget", "37GB", "--window", "1024", "--page", "64", "--chunk", "16384",
             "--max-running", "48"]


def run_script(*args, bare=False):
    """The script in a fresh interpreter; ``bare``: without site-packages, i.e. no SGLang installed."""
    cmd = [sys.executable] + (["-S"] if bare else []) + [SCRIPT, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


# In-process runs of the script's main(): a fresh interpreter would import SGLang (seconds) per case.
_SCRIPT_GLOBALS = runpy.run_path(SCRIPT, run_name="swa_pool_plan_script")


def cli(*args):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = _SCRIPT_GLOBALS["main"](list(args))
        except SystemExit as e:
            rc = e.code
    return types.SimpleNamespace(returncode=rc, stdout=out.getvalue(), stderr=err.getvalue())


def test_cli_help_explains_every_input():
    res = run_script("--help")
    assert res.returncode == 0
    for word in ["--model-config", "--kv-dtype", "--draft-layers", "--full-bytes-per-token",
                 "--swa-bytes-per-token", "--draft-bytes-per-token", "--budget", "--window", "--page",
                 "--chunk", "--max-running", "--ratios", "--json", "--margin", "KiB", "powers of 1000",
                 "window_left", "c(r) = full + r * swa + draft", "cp + N * (w + p)", "examples:"]:
        assert word in res.stdout, word


def test_cli_prints_the_spec_table():
    res = cli(*SPEC_ARGS, "--ratios", "0.10,0.17,0.32")
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert "19.74 KB + r x 95.00 KB" in out
    assert "= 68,608 tokens" in out
    assert "--swa-full-tokens-ratio 0.06" in out
    assert "+27.1%" in out
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.strip()[:4] in ("0.06", "0.10", "0.17", "0.32")}
    assert rows["0.17"][1:4] == ["35.89", "1,030,912", "175,232"]
    assert rows["0.17"][6] == "10.7"
    assert rows["0.32"][1:4] == ["50.14", "737,920", "236,096"]
    assert rows["0.06"][-1] == "*"


def test_cli_default_ratio_range():
    res = cli(*SPEC_ARGS)
    assert res.returncode == 0, res.stderr
    for r in ("0.05", "0.15", "0.25", "0.35", "0.40"):
        assert any(line.strip().startswith(r) for line in res.stdout.splitlines()), r


def test_cli_json():
    res = cli(*SPEC_ARGS, "--json", "--ratios", "0.05:0.40:0.05")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["island_floor"] == 68_608
    assert data["recommendation"]["swa_full_tokens_ratio"] == 0.06
    assert data["recommendation"]["swa_pool_tokens"] == 87_232
    assert data["inputs"]["budget_bytes"] == 37 * GB
    assert data["inputs"]["draft_bytes_per_token"] == 10_240
    assert [row["ratio"] for row in data["table"]] == [0.05, 0.06, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4]
    row = next(r for r in data["table"] if r["ratio"] == 0.15)
    assert row == {
        "ratio": 0.15,
        "cost_per_token_bytes": SPEC_KV.cell_size(0.15),
        "max_total_tokens": spec_pool(0.15).full_tokens,
        "swa_pool_tokens": spec_pool(0.15).swa_tokens,
        "floor_margin": pytest.approx(spec_pool(0.15).swa_tokens / 68_608 - 1),
        "island_capacity": plan.island_capacity(spec_pool(0.15).swa_tokens, W, P, CP),
        "admission_bind_without_islands": pytest.approx(spec_pool(0.15).swa_tokens / CP),
    }
    assert data["command"].startswith("scripts/swa_pool_plan.py --full-bytes-per-token 9.5KB")


def test_cli_reads_a_model_config(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(GEMMA4_LIKE))
    common = ["--kv-dtype", "bf16", "--draft-layers", "1", "--budget", "300MB", "--page", "16", "--chunk", "512",
              "--max-running", "8", "--json"]
    by_dir = cli("--model-config", str(tmp_path), *common)
    by_file = cli("--model-config", str(tmp_path / "config.json"), *common)
    assert by_dir.returncode == 0, by_dir.stderr
    data = json.loads(by_dir.stdout)
    assert data["inputs"]["window"] == 128  # from sliding_window
    layout = plan.kv_layout_from_hf_config(GEMMA4_LIKE, "bf16", draft_layers=1)
    assert data["inputs"]["full_bytes_per_token"] == layout.bytes_per_token.full == 2 * 1 * (64 + 64) * 2
    assert data["inputs"]["swa_bytes_per_token"] == layout.bytes_per_token.swa == 4 * 2 * (32 + 32) * 2
    assert data["inputs"]["draft_bytes_per_token"] == 1 * (64 + 64) * 2
    assert data["recommendation"] == json.loads(by_file.stdout)["recommendation"]
    # Without SGLang installed the script reads config.json itself, to the same plan.
    bare = run_script("--model-config", str(tmp_path), *common, bare=True)
    assert bare.returncode == 0, bare.stderr
    assert json.loads(bare.stdout)["inputs"] == data["inputs"]
    assert json.loads(bare.stdout)["recommendation"] == data["recommendation"]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--budget", "37GB", "--page", "64", "--chunk", "16384", "--max-running", "48"], "bytes per token are missing"),
        (SPEC_ARGS + ["--budget", "37XB"], "invalid size '37XB'"),
        (SPEC_ARGS + ["--full-bytes-per-token=-9.5KB"], "invalid size '-9.5KB'"),
        (SPEC_ARGS + ["--page", "0"], "page (--page-size) must be positive"),
        (SPEC_ARGS + ["--max-running", "0"], "n_running (--max-running-requests) must be positive"),
        (SPEC_ARGS + ["--window", "200000"], "does not fit"),
        (SPEC_ARGS + ["--budget", "5GB"], "does not fit"),
        (SPEC_ARGS + ["--ratios", "0:0.5:0.1"], "every ratio must be in (0, 1]"),
        (SPEC_ARGS + ["--ratios", "a,b"], "invalid --ratios"),
        (SPEC_ARGS + ["--margin", "-1"], "invalid margin"),
        (SPEC_ARGS + ["--chunk", "sixteen"], "invalid count 'sixteen'"),
        (SPEC_ARGS + ["--full-bytes-per-token", "0"], "must be positive"),
        (SPEC_ARGS + ["--model-config", "/nonexistent/config.json", "--kv-dtype", "fp8"], "not both"),
        (SPEC_ARGS + ["--kv-dtype", "fp8"], "only apply with --model-config"),
        ([a for a in SPEC_ARGS if a not in ("--window", "1024")], "--window is required"),
        (["--model-config", "/nonexistent/config.json", "--kv-dtype", "fp8", "--budget", "37GB", "--page", "64",
          "--chunk", "16384", "--max-running", "48"], "cannot read --model-config"),
        (["--model-config", "/nonexistent", "--budget", "37GB", "--page", "64", "--chunk", "16384",
          "--max-running", "48"], "needs --kv-dtype"),
        (["--model-config", SCRIPT, "--kv-dtype", "fp8", "--budget", "37GB", "--page", "64", "--chunk", "16384",
          "--max-running", "48"], "is not valid JSON"),
    ],
)
def test_cli_bad_input_exits_2_with_a_clear_message(args, message):
    res = cli(*args)
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert "swa_pool_plan.py: error:" in res.stderr
    assert message in res.stderr, res.stderr
    assert res.stdout == ""


def test_cli_bad_model_config_content_exits_2(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"num_hidden_layers": 4, "sliding_window": 64}))
    res = cli("--model-config", str(tmp_path), "--kv-dtype", "fp8", "--budget", "1GB", "--page", "1",
              "--chunk", "128", "--max-running", "4")
    assert res.returncode == 2
    assert "neither 'layer_types' nor 'hybrid_layer_pattern'" in res.stderr
    res = cli("--model-config", str(tmp_path), "--kv-dtype", "int2", "--budget", "1GB", "--page", "1",
              "--chunk", "128", "--max-running", "4")
    assert res.returncode == 2
    assert "unknown KV dtype 'int2'" in res.stderr


# ------------------------------------------------------------------- the serving floor (0.17)


def test_decode_tail_is_the_evictor_interval_times_accept_length_capped_by_the_cadence():
    assert plan.decode_tail_tokens(8.5, decode_interval=16384 // 4) == 1088
    assert plan.decode_tail_tokens(1.0) == 128
    assert plan.decode_tail_tokens(64.0, decode_interval=512 // 4) == 128
    with pytest.raises(ValueError):
        plan.decode_tail_tokens(0)


def test_serving_floor_recommends_the_spec_ratio():
    """Two chunks in flight (overlap scheduler) and the decode tail at accept length 8.5: the
    recommendation is the 0.17 the spec deployed, with its ~27% margin."""
    load = plan.Workload(n_running=N, window=W, page=P, chunk=CP, chunks_in_flight=2,
                         decode_tail=plan.decode_tail_tokens(8.5, decode_interval=CP // 4))
    assert load.floor == 2 * 16384 + 48 * (1024 + 64 + 1088) == 137_216
    rec = plan.recommend_ratio(SPEC_KV, SPEC_BUDGET, load)
    assert rec.ratio == pytest.approx(0.17)
    # The README's example command, as a script, with SGLang installed and without it.
    res = run_script(*SPEC_ARGS, "--chunks-in-flight", "2", "--mean-accept-len", "8.5")
    assert res.returncode == 0, res.stderr
    assert "--swa-full-tokens-ratio 0.17" in res.stdout
    assert "T_max = 1,030,912 tokens, SWA pool = 175,232 tokens" in res.stdout
    assert "= 137,216 tokens" in res.stdout and "+27.7%" in res.stdout
    assert "admission binds at 10.7 running requests" in res.stdout
    bare = run_script(*SPEC_ARGS, "--chunks-in-flight", "2", "--mean-accept-len", "8.5", bare=True)
    assert (bare.returncode, bare.stdout) == (0, res.stdout), bare.stderr
    bad = cli(*SPEC_ARGS, "--mean-accept-len", "-1")
    assert bad.returncode == 2 and "--mean-accept-len must be positive" in bad.stderr


# ------------------------------------------------------- tensor and data parallelism (per rank)


def test_kv_heads_per_rank_is_sglangs_get_num_kv_heads(sglang_configs):
    """A rank stores max(1, heads // tp): split when TP divides the heads, one replicated head
    per rank when there are fewer heads than ranks (ModelConfig.get_num_kv_heads)."""
    _, _, mc = sglang_configs["hybrid_pattern"]  # 2 full KV heads, 4 SWA KV heads
    for tp in (1, 2, 4, 8):
        assert plan.kv_heads_per_rank(2, tp) == mc.get_num_kv_heads(tp)
        assert plan.kv_heads_per_rank(4, tp) == mc.get_swa_num_kv_heads(tp)
    assert [plan.kv_heads_per_rank(8, tp) for tp in (1, 2, 4, 8, 16)] == [8, 4, 2, 1, 1]


def test_a_tp_that_divides_the_kv_heads_divides_bytes_per_token_not_tokens():
    """Explicit whole-model sizes, 2 full and 8 SWA KV heads, TP 2: each rank stores half of
    every layer, so its bytes per token halve and its pools (same per-GPU budget) hold more."""
    kv = plan.per_rank_bytes_per_token(SPEC_KV, 2, kv_heads=2, swa_kv_heads=8)
    assert kv == plan.KVBytesPerToken(full=4750, swa=47500, draft=5120)
    res = cli(*SPEC_ARGS, "--tp-size", "2", "--kv-heads", "2", "--swa-kv-heads", "8", "--json")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert (data["inputs"]["full_bytes_per_token"], data["inputs"]["swa_bytes_per_token"],
            data["inputs"]["draft_bytes_per_token"]) == (4750, 47500, 5120)
    par = data["parallelism"]
    assert par["kv_heads"] == {"full": {"total": 2, "per_rank": 1, "replicas": 1},
                               "swa": {"total": 8, "per_rank": 4, "replicas": 1}}
    assert (par["tp_size"], par["dp_size"], par["gpus"]) == (2, 1, 2)
    rec = plan.recommend_ratio(kv, SPEC_BUDGET, SPEC_LOAD)
    r = par["per_rank"]
    assert r["swa_full_tokens_ratio"] == rec.ratio == data["recommendation"]["swa_full_tokens_ratio"]
    assert (r["max_total_tokens"], r["swa_pool_tokens"]) == (rec.pool.full_tokens, rec.pool.swa_tokens)
    assert r["full_pool_bytes"] == rec.pool.full_tokens * 4750
    assert r["draft_pool_bytes"] == rec.pool.full_tokens * 5120
    assert r["swa_pool_bytes"] == rec.pool.swa_tokens * 47500
    assert r["kv_bytes"] <= SPEC_BUDGET
    assert r["running_requests"] == N  # TP does not split requests: every rank carries all 48
    # one rank's pools at a ratio hold more tokens than TP 1's at the same ratio
    assert plan.solve_pool_sizes(kv, SPEC_BUDGET, 0.17, P).full_tokens > spec_pool(0.17).full_tokens
    text = cli(*SPEC_ARGS, "--tp-size", "2", "--kv-heads", "2", "--swa-kv-heads", "8").stdout
    assert "full 4.75 KB, SWA 47.50 KB (if retained), draft 5.12 KB" in text
    assert "TP 2 x DP 1 = 2 GPUs, each rank with both pools of its own" in text
    assert "KV heads per rank: full 1 of 2; SWA 4 of 8" in text
    assert f"SWA {rec.pool.swa_tokens:,} tokens x 47.50 KB = {rec.pool.swa_tokens * 47500 / 1e9:,.2f} GB" in text
    assert "48 running requests per replica at the cap, on each of its 2 TP ranks" in text


def test_a_tp_beyond_the_kv_heads_replicates_them_and_stops_shrinking_bytes():
    """2 full KV heads over TP 8: every rank still stores one (each head on 4 ranks), so full
    and draft bytes per rank stay at TP 2's; the 8 SWA heads split to one per rank."""
    kv = plan.per_rank_bytes_per_token(SPEC_KV, 8, kv_heads=2, swa_kv_heads=8)
    assert kv == plan.KVBytesPerToken(full=4750, swa=11875, draft=5120)
    res = cli(*SPEC_ARGS, "--tp-size", "8", "--kv-heads", "2", "--swa-kv-heads", "8", "--json")
    assert res.returncode == 0, res.stderr
    par = json.loads(res.stdout)["parallelism"]
    assert par["kv_heads"]["full"] == {"total": 2, "per_rank": 1, "replicas": 4}
    assert par["kv_heads"]["swa"] == {"total": 8, "per_rank": 1, "replicas": 1}
    assert json.loads(res.stdout)["inputs"]["full_bytes_per_token"] == 4750
    text = cli(*SPEC_ARGS, "--tp-size", "8", "--kv-heads", "2", "--swa-kv-heads", "8").stdout
    assert "KV heads per rank: full 1 of 2, each on 4 ranks; SWA 1 of 8" in text


def test_tp_from_a_model_config_reads_sglangs_per_rank_heads(tmp_path):
    """HYBRID_PATTERN_LLAMA: 2 full KV heads, 4 SWA KV heads, bf16. TP 2 divides both; TP 4
    replicates the full heads (full bytes stay at TP 2's) and divides the SWA ones."""
    (tmp_path / "config.json").write_text(json.dumps(HYBRID_PATTERN_LLAMA))
    common = ["--model-config", str(tmp_path), "--kv-dtype", "bf16", "--budget", "300MB", "--page", "16",
              "--chunk", "512", "--max-running", "8", "--json"]
    runs = {tp: json.loads(cli(*common, "--tp-size", str(tp)).stdout) for tp in (1, 2, 4)}
    full = {tp: d["inputs"]["full_bytes_per_token"] for tp, d in runs.items()}
    swa = {tp: d["inputs"]["swa_bytes_per_token"] for tp, d in runs.items()}
    assert full == {1: 2 * 2 * (16 + 16) * 2, 2: 2 * 1 * (16 + 16) * 2, 4: 2 * 1 * (16 + 16) * 2}
    assert swa == {1: 3 * 4 * (24 + 24) * 2, 2: 3 * 2 * (24 + 24) * 2, 4: 3 * 1 * (24 + 24) * 2}
    assert runs[2]["parallelism"]["kv_heads"] == {"full": {"total": 2, "per_rank": 1, "replicas": 1},
                                                  "swa": {"total": 4, "per_rank": 2, "replicas": 1}}
    assert runs[4]["parallelism"]["kv_heads"]["full"] == {"total": 2, "per_rank": 1, "replicas": 2}
    # bytes fall, so one rank's index space grows (same per-GPU budget)
    assert (runs[1]["parallelism"]["per_rank"]["max_total_tokens"]
            < runs[2]["parallelism"]["per_rank"]["max_total_tokens"]
            < runs[4]["parallelism"]["per_rank"]["max_total_tokens"])


def test_dp_splits_the_requests_and_each_replica_plans_its_share():
    """--max-running 48 over DP 2: each replica's pools carry 24, so its plan is the 24-request
    plan (floor, recommendation, table); bytes per token do not change. Uneven splits round up."""
    res = cli(*SPEC_ARGS, "--dp-size", "2", "--json")
    one = cli(*[a if a != "48" else "24" for a in SPEC_ARGS], "--json")
    assert res.returncode == one.returncode == 0, res.stderr
    dp, alone = json.loads(res.stdout), json.loads(one.stdout)
    for key in ("island_floor", "pool_floor_ratio", "recommendation", "table", "cost_per_token"):
        assert dp[key] == alone[key], key
    assert dp["island_floor"] == 16384 + 24 * (1024 + 64)
    par = dp["parallelism"]
    assert (par["running_total"], par["running_per_replica"], par["gpus"]) == (48, 24, 2)
    assert par["per_rank"]["running_requests"] == 24
    assert par["kv_heads"] is None  # explicit sizes, TP 1: no heads needed
    assert dp["inputs"]["full_bytes_per_token"] == 9500
    assert plan.Parallelism(dp_size=3).requests_per_replica(49) == 17
    assert json.loads(cli(*SPEC_ARGS, "--dp-size", "3", "--json").stdout)["island_floor"] == 16384 + 16 * 1088
    text = cli(*SPEC_ARGS, "--dp-size", "2").stdout
    assert "workload          24 running per replica (48 over DP 2)" in text
    assert "= 42,496 tokens" in text
    assert "24 running requests per replica at the cap (48 over DP 2)" in text
    assert "N counts one replica's requests, the deployment admits 2 times as many" in text


def test_tp_1_dp_1_prints_no_per_rank_block():
    out = cli(*SPEC_ARGS).stdout
    assert "per rank" not in out and "Every row is one rank's" not in out
    same = cli(*SPEC_ARGS, "--tp-size", "1", "--dp-size", "1", "--kv-heads", "2").stdout
    assert same == out


def test_cli_help_explains_tp_and_dp():
    res = run_script("--help")
    assert res.returncode == 0
    text = " ".join(res.stdout.split())
    for phrase in ["--tp-size", "--dp-size", "--kv-heads", "--swa-kv-heads", "max(1, kv_heads // N)",
                   "get_num_kv_heads", "replicated", "ceil(N / D)", "--budget is one GPU's",
                   "--enable-dp-attention", "its own pools"]:
        assert phrase in text, phrase


@pytest.mark.parametrize(
    "args, message",
    [
        (SPEC_ARGS + ["--tp-size", "2"], "--tp-size with explicit sizes needs --kv-heads"),
        (SPEC_ARGS + ["--tp-size", "0"], "--tp-size and --dp-size must be at least 1"),
        (SPEC_ARGS + ["--dp-size", "0"], "--tp-size and --dp-size must be at least 1"),
        (SPEC_ARGS + ["--swa-kv-heads", "8"], "--swa-kv-heads needs --kv-heads"),
        (SPEC_ARGS + ["--tp-size", "2", "--kv-heads", "3"], "not a multiple of its 3 KV heads"),
        (["--model-config", "/nonexistent", "--kv-dtype", "fp8", "--kv-heads", "2", "--budget", "37GB",
          "--page", "64", "--chunk", "16384", "--max-running", "48"], "apply only to explicit sizes"),
    ],
)
def test_cli_bad_parallelism_exits_2_with_a_clear_message(args, message):
    res = cli(*args)
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert message in res.stderr, res.stderr
