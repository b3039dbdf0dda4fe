"""The capacity planner against SGLang itself: bytes per token and pool sizes equal what SGLang's
``HybridSWAPoolConfigurator`` computes from a real ``ServerArgs`` and ``ModelConfig`` (tiny configs,
no weights), the ``--max-total-tokens`` resolution, KV heads per rank, and model shapes read
through ``ModelConfig`` with ``config.json`` only as the fallback.
"""

from __future__ import annotations

import dataclasses
import json
import random
import types

import pytest

from islands_tools import pool_plan as plan
from pool_plan_cases import CONFIGS, GEMMA4_LIKE, P, SPEC_BUDGET, SPEC_KV, spec_pool


# ---------------------------------------------------------------- bytes from a config.json


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


# ------------------------------------------------------- tensor and data parallelism (per rank)


def test_kv_heads_per_rank_is_sglangs_get_num_kv_heads(sglang_configs):
    """A rank stores max(1, heads // tp): split when TP divides the heads, one replicated head
    per rank when there are fewer heads than ranks (ModelConfig.get_num_kv_heads)."""
    _, _, mc = sglang_configs["hybrid_pattern"]  # 2 full KV heads, 4 SWA KV heads
    for tp in (1, 2, 4, 8):
        assert plan.kv_heads_per_rank(2, tp) == mc.get_num_kv_heads(tp)
        assert plan.kv_heads_per_rank(4, tp) == mc.get_swa_num_kv_heads(tp)
    assert [plan.kv_heads_per_rank(8, tp) for tp in (1, 2, 4, 8, 16)] == [8, 4, 2, 1, 1]
