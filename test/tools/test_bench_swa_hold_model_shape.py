"""benchmarks/swa_hold.py --model-shape (issue 49): the hold benchmark's pools at a model's layer
count, KV heads and head dims.

- the table's Gemma 4 26B-A4B entry is ``scripts/gpu_seed_model.py``'s published fields (read in
  Gemma 4's own convention here, independently of the ``sglang_form`` the table goes through);
- the pools are sized before anything is allocated, and a shape that does not fit is refused with
  the number of requests that would;
- a run at that shape (small workload, sglang 0.5.23 in both environments; skipped without them):
  the pools SGLang built have the shape's bytes per token, and every byte figure of the result is
  its token figure times the SWA pool's bytes per token;
- the committed production result (``swa_hold_main_production_gemma4.json``) keeps that identity.
"""

import json
import os
import pathlib
import sys

import pytest

_ROOT = pathlib.Path(__file__).resolve().parents[2]
for _p in (_ROOT / "benchmarks", _ROOT / "scripts", _ROOT):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

import gpu_seed_model  # noqa: E402
from swa_hold import cli as swa_hold  # noqa: E402
from swa_hold import model_shape as ms  # noqa: E402
from swa_hold import target_main  # noqa: E402
from swa_hold.setup import PRODUCTION  # noqa: E402

RESULTS = _ROOT / "benchmarks" / "results"
GIB = 1 << 30


def test_gemma4_shape_is_gpu_seed_models_published_fields():
    text = gpu_seed_model.PUBLISHED_TEXT  # Gemma 4's convention: base = sliding, global_* = full
    m = ms.model_shape("gemma4-26b-a4b")
    types = text["layer_types"]
    assert len(m.swa_layers) + len(m.full_layers) == text["num_hidden_layers"] == len(types)
    assert [types[i] for i in m.swa_layers] == ["sliding_attention"] * len(m.swa_layers)
    assert [types[i] for i in m.full_layers] == ["full_attention"] * len(m.full_layers)
    assert (m.swa_kv_heads, m.swa_head_dim, m.swa_v_head_dim) == (
        text["num_key_value_heads"], text["head_dim"], text["head_dim"])
    assert (m.full_kv_heads, m.full_head_dim, m.full_v_head_dim) == (
        text["num_global_key_value_heads"], text["global_head_dim"], text["global_head_dim"])
    assert m.window == text["sliding_window"] == PRODUCTION.window
    assert m.kv_dtype == "float8_e4m3fn" and m.dtype_bytes == 1
    # the and gpu_seed_model's figures: 25 sliding (8 x 256), 5 full (2 x 512); fp8
    assert (len(m.swa_layers), len(m.full_layers)) == (25, 5)
    assert m.bytes_per_token() == (5 * 2 * (512 + 512), 25 * 8 * (256 + 256)) == (10240, 102400)


def test_toy_shape_is_the_driver_default():
    from swa_hold import main_driver

    toy = ms.model_shape("toy").to_json()
    assert {k: toy[k] for k in main_driver.TOY_MODEL} == main_driver.TOY_MODEL
    with pytest.raises(SystemExit, match="unknown model shape"):
        ms.model_shape("gemma5")


def test_pools_are_sized_before_allocating_and_refused_with_what_fits():
    m = ms.model_shape("gemma4-26b-a4b")
    s3 = PRODUCTION  # n 3, prompt 32768, decode 4608, p 64
    shape, mem = swa_hold.fit_model_pools(s3, m, 20.0, available=64 * GIB)
    tokens = 3 * (32768 + 4608 + 64)
    assert shape.pool_sizes() == (tokens, tokens)
    assert mem["pool_bytes_estimate"] == (tokens + 64) * (10240 + 102400)
    with pytest.raises(SystemExit, match="--n-requests 2 fits"):
        swa_hold.fit_model_pools(s3, m, 10.0, available=64 * GIB)
    with pytest.raises(SystemExit, match="70% of 8.0 GiB available.*--n-requests 1 fits"):
        swa_hold.fit_model_pools(s3, m, 10.0, available=8 * GIB)
    with pytest.raises(SystemExit, match="the model's window is 1024"):
        swa_hold.fit_model_pools(swa_hold.QUICK, m, 10.0, available=64 * GIB)
    with pytest.raises(SystemExit, match="--target main only"):
        swa_hold.main(["--tiny", "--model-shape", "gemma4-26b-a4b"])


def _check_bytes(result):
    """Every byte figure is its token figure x the SWA pool's bytes per token, read off the pools
    (which are the model's); the pools' GiB are their slots x bytes per token."""
    m = ms.model_shape(result["model_shape"]["name"])
    pools = result["model_shape"]["pools"]
    full_bpt, swa_bpt = m.bytes_per_token()
    assert (pools["full"]["bytes_per_token"], pools["swa"]["bytes_per_token"]) == (full_bpt, swa_bpt)
    s = result["shape"]
    assert pools["full"]["pool_bytes"] == (s["full_pool"] + s["page"]) * full_bpt
    assert pools["swa"]["pool_bytes"] == (s["swa_pool"] + s["page"]) * swa_bpt
    assert result["model_shape"]["swa_pool_gib"] == pools["swa"]["pool_bytes"] / GIB
    assert (pools["full"]["layers"], pools["swa"]["layers"]) == (len(m.full_layers),
                                                                len(m.swa_layers))
    checked = 0
    for col, a in result["arms"].items():
        assert a["hold_bytes"], col
        for phase, fields in a["hold_bytes"].items():
            assert set(fields) == set(target_main.HOLD_BYTES_FIELDS)
            for f, v in fields.items():
                assert v == a[phase][f] * swa_bpt, (col, phase, f)
                checked += 1
    return checked


_MISSING = target_main.missing_envs(root=str(_ROOT))


@pytest.mark.skipif(bool(_MISSING), reason=f"no 0.5.23 environment for {', '.join(_MISSING)} "
                    "(scripts/setup_main.sh, scripts/setup_main.sh --islands)")
def test_run_at_the_gemma4_shape_reports_bytes_from_the_pools(tmp_path):
    """About a minute: pools of 2,432 tokens at the seed's shape (0.26 GiB), one repeat."""
    jp, mp = tmp_path / "r.json", tmp_path / "r.md"
    assert swa_hold.main(["--target", "main", "--model-shape", "gemma4-26b-a4b", "--window", "1024",
                          "--page", "64", "--chunk", "1024", "--prompt", "2048",
                          "--n-requests", "1", "--decode-tokens", "300", "--repeats", "1",
                          "--json", str(jp), "--md", str(mp)]) == 0
    result, md = json.loads(jp.read_text()), mp.read_text()
    assert result["model_shape"]["name"] == "gemma4-26b-a4b"
    assert result["shape"]["full_pool"] == result["shape"]["swa_pool"] == 2432
    assert result["memory"]["pool_bytes_estimate"] == sum(
        result["model_shape"]["pools"][k]["pool_bytes"] for k in ("full", "swa"))
    assert _check_bytes(result) > 0
    for col in ("main/rust", "main_islands/rust", "main/python", "main_islands/python"):
        held = result["arms"][col]["after_commit"]["max_swa_held_per_running_req"]
        assert held >= 1024  # at least the window, at 102,400 B a token
    assert "pools of gemma4-26b-a4b" in md and "GiB of SWA KV" in md
    assert "102,400 B per token" in md and "10,240 B per token" in md


@pytest.mark.skipif(not (RESULTS / "swa_hold_main_production_gemma4.json").is_file(),
                    reason="no committed Gemma 4 production result")
def test_committed_production_result_bytes_are_tokens_times_pool_bytes():
    result = json.loads((RESULTS / "swa_hold_main_production_gemma4.json").read_text())
    s = result["shape"]
    assert (s["window"], s["page"], s["chunk"]) == (1024, 64, 16384)
    assert _check_bytes(result) > 0
