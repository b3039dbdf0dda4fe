"""scripts/swa_pool_plan.py (islands_tools/pool_plan_cli.py): the table, the JSON, a model's
config.json read with and without SGLang installed, the README's example command, tensor and data
parallelism per rank, and bad input (exit 2 with a clear message).
"""

from __future__ import annotations

import contextlib
import io
import json
import runpy
import subprocess
import sys
import types

import pytest

from islands_tools import pool_plan as plan
from pool_plan_cases import (CP, GB, GEMMA4_LIKE, HYBRID_PATTERN_LLAMA, N, P, SCRIPT, SPEC_BUDGET,
                             SPEC_KV, SPEC_LOAD, W, spec_pool)

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
