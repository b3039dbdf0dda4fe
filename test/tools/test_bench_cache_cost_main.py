"""benchmarks/cache_cost_main.py (sglang 0.5.23, both tree cores) at a toy size: every arm builds
its cache on the core it names, times every operation, and the table pairs each island arm with
stock main on the same core.

Runs in ``.venv-main-islands`` (``scripts/setup_main.sh --islands``); skipped, with the reason,
where it is missing. About 20 seconds.
"""

import json
import os
import pathlib
import subprocess
import sys

import pytest

_ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, os.path.join(str(_ROOT), "benchmarks"))

from swa_hold import target_main as swa_hold_target_main  # noqa: E402

MISSING = swa_hold_target_main.missing_envs(arms=("main_islands",), root=str(_ROOT))
pytestmark = pytest.mark.skipif(
    bool(MISSING), reason="no .venv-main-islands (build it with scripts/setup_main.sh --islands)")

ARMS = ["main_rust", "main_python", "islands_rust", "islands_window"]
OPS = {"match_continue", "match_diverge", "commit_chunk", "decode_hook", "finish", "queue",
       "commit_chunk_q64", "finish_q64", "request", "evict_64_first", "evict_64_q64",
       "evict_64_late", "evict_64_drain"}


def test_toy_run_times_every_operation_of_every_arm(tmp_path):
    py = swa_hold_target_main.venv_python("main_islands", str(_ROOT))
    out = tmp_path / "cc"
    subprocess.run([py, str(_ROOT / "benchmarks" / "cache_cost_main.py"), "--clients", "8",
                    "--samples", "5", "--out", str(out)], check=True, cwd=_ROOT, timeout=600)
    result = json.loads(out.with_suffix(".json").read_text())
    assert [r["arm"] for r in result["rows"]] == ARMS
    for r in result["rows"]:
        assert set(r["median_us"]) == OPS and all(v > 0 for v in r["median_us"].values()), r
        assert all(r["n"][op] == 16 for op in OPS if op.startswith("evict_64_")), r
        assert r["n"]["commit_chunk"] >= 32 and r["n"]["decode_hook"] == 32 * 8
        assert r["n"]["queue"] == 64 and r["n"]["finish_q64"] == 32 and r["n"]["request"] == 32
        # the 64 waiting requests and the probes left the queue before the evictions
        assert r["queued_at_evict"] == 0, r
        # ... and 64 wait through the q64 evictions where the window order keeps queued hits
        assert r["queued_at_q64"] == (64 if r["arm"] == "islands_window" else 0), r
        # one request's cache work holds at least its own commits' and finish's
        assert r["median_us"]["request"] > r["median_us"]["finish"] + r["median_us"]["commit_chunk"]
        # the work of the calls whose work depends on the tree: what matches returned and what
        # 64-token evictions freed (whole nodes: at least one token per call), and its price
        work = r["work_tokens"]
        assert set(work) == {"match_continue", "match_diverge", "evict_64_first",
                             "evict_64_q64", "evict_64_late", "evict_64_drain"}, r
        assert work["match_continue"] > 0 and work["evict_64_first"] >= 16, r
        assert set(r["us_per_token"]) == set(work) and all(
            v > 0 for v in r["us_per_token"].values()), r
        # an eviction call's Full frees (leaves deleted with their SWA) and its price per token
        # freed in both pools
        full = r["full_work_tokens"]
        assert set(full) == {"evict_64_first", "evict_64_q64", "evict_64_late",
                             "evict_64_drain"}, r
        assert all(v >= 0 for v in full.values()), r
        for op, us in r["us_per_kv_token"].items():
            total_us = us * (work[op] + full[op])
            assert total_us == pytest.approx(r["us_per_token"][op] * work[op], rel=1e-3), r
        # the upstream steps each eviction call took, and the time per step
        steps = r["evict_steps"]
        assert set(steps) == set(full) and steps["evict_64_first"] >= 16, r
        for op, us in r["us_per_step"].items():
            assert us * steps[op] == pytest.approx(r["us_per_token"][op] * work[op], rel=1e-3), r
    live = {r["arm"]: r["live_swa_before_evict"] for r in result["rows"]}
    rows = {r["arm"]: r for r in result["rows"]}
    # the default shape: chunk 128, the island caches' decode islands every cp/4 = 32 tokens
    assert {(a, r["chunk"], r["decode_interval"]) for a, r in rows.items()} == {
        ("main_rust", 128, None), ("main_python", 128, None), ("islands_rust", 128, 32),
        ("islands_window", 128, 32)}
    # a diverging match returns at least as much with islands as on stock main (islands keep the
    # SWA behind a mid-node point live), and the same tree gives both cores the same hits
    assert rows["main_rust"]["work_tokens"]["match_diverge"] == \
        rows["main_python"]["work_tokens"]["match_diverge"]
    assert rows["islands_rust"]["work_tokens"]["match_diverge"] >= \
        rows["main_rust"]["work_tokens"]["match_diverge"]
    # the same cache on both cores; islands keep more SWA live than main's commit-time free
    assert live["main_rust"] == live["main_python"] < live["islands_rust"] == live["islands_window"]
    md = out.with_suffix(".md").read_text()
    assert "| op | clients | `main_rust` | `main_python` | `islands_rust` | `islands_window` | " \
           "islands_rust / main_rust | islands_window / main_python | main_python / main_rust |" in md
    assert "| evict_64_late | 8 |" in md
    assert "| op | clients | `main_rust` tokens per call | `main_python` tokens per call | " \
           "`islands_rust` tokens per call | `islands_window` tokens per call | " \
           "islands_rust / main_rust per token | islands_window / main_python per token |" in md
    mine = rows["islands_window"]["us_per_token"]["evict_64_first"]
    theirs = rows["main_python"]["us_per_token"]["evict_64_first"]
    row = next(ln for ln in md.splitlines() if ln.startswith("| evict_64_first | 8 |")
               and "tokens per call" not in ln and ln.count("|") == 9)
    assert row.split(" | ")[-1].rstrip(" |") == f"{mine / theirs:.2f}", row
    assert "| op | clients | `main_rust` SWA + Full per call | `main_python` SWA + Full per call | " \
           "`islands_rust` SWA + Full per call | `islands_window` SWA + Full per call | " \
           "islands_rust / main_rust per token freed | islands_window / main_python per token " \
           "freed |" in md
    mine = rows["islands_window"]["us_per_kv_token"]["evict_64_drain"]
    theirs = rows["main_python"]["us_per_kv_token"]["evict_64_drain"]
    row = next(ln for ln in md.splitlines() if ln.startswith("| evict_64_drain | 8 |")
               and " + " in ln)
    assert row.split(" | ")[-1].rstrip(" |") == f"{mine / theirs:.2f}", row
    drained = rows["islands_window"]
    assert row.split(" | ")[5] == (
        f"{drained['work_tokens']['evict_64_drain'] / 16:,.1f} + "
        f"{drained['full_work_tokens']['evict_64_drain'] / 16:,.1f}"), row
    # the steps table: each arm's steps per call (SWA per step), each island arm's time per step
    assert "| op | clients | `main_rust` steps per call (SWA per step) | " in md
    steps_row = next(ln for ln in md.splitlines() if ln.startswith("| evict_64_first | 8 |")
                     and "(" in ln.split(" | ")[2])
    first, op = rows["main_python"], "evict_64_first"
    taken = first["evict_steps"][op]
    assert steps_row.split(" | ")[3] == (
        f"{taken / 16:,.2f} ({first['work_tokens'][op] / taken:,.1f})"), steps_row
    mine, theirs = rows["islands_window"]["us_per_step"][op], first["us_per_step"][op]
    assert steps_row.split(" | ")[-1].rstrip(" |") == f"{mine / theirs:.2f}", steps_row


def test_repeats_rotate_the_arms_and_the_table_takes_the_median_of_the_runs(tmp_path):
    """``--repeats 3``: every (size, arm) three times, the arms rotated each round; each cell is
    the median of the three runs' medians and each ratio carries its round-by-round range."""
    from cache_cost import main_target

    py = swa_hold_target_main.venv_python("main_islands", str(_ROOT))
    out = tmp_path / "cc"
    arms = "main_python,islands_window"
    subprocess.run([py, str(_ROOT / "benchmarks" / "cache_cost_main.py"), "--clients", "8",
                    "--samples", "3", "--arms", arms, "--repeats", "3", "--out", str(out)],
                   check=True, cwd=_ROOT, timeout=600)
    result = json.loads(out.with_suffix(".json").read_text())
    assert [(r["arm"], r["round"]) for r in result["rows"]] == [
        (a, k) for k in range(3) for a in arms.split(",")]
    runs = [r for r in result["rows"] if r["arm"] == "islands_window"]
    want = sorted(r["median_us"]["finish"] for r in runs)[1]
    md = out.with_suffix(".md").read_text()
    assert "the median of 3 runs' medians" in md
    row = next(ln for ln in md.splitlines() if ln.startswith("| finish | 8 |"))
    assert row.split(" | ")[3] == f"{want:,.1f}", row
    per = sorted(r["median_us"]["finish"] / m["median_us"]["finish"]
                 for r, m in zip(runs, [r for r in result["rows"] if r["arm"] == "main_python"]))
    assert f"({per[0]:.2f}–{per[-1]:.2f})" in row
    assert main_target.report(result) == md


def test_chunk_and_decode_interval_set_the_shape_and_bad_values_are_refused(tmp_path):
    """``--chunk`` is the caches' chunked prefill size (the prompts commit every ``cp`` tokens,
    and scale with it) and ``--decode-interval`` the island caches' decode-island cadence, as the
    cache itself reports it; the table's header names both. A chunk under 8 tokens or a cadence
    under 1 is refused with the reason, before anything runs."""
    from cache_cost import main_target

    py = swa_hold_target_main.venv_python("main_islands", str(_ROOT))
    script = str(_ROOT / "benchmarks" / "cache_cost_main.py")
    runs = {}
    for name, extra in (("cp64", ["--chunk", "64"]),
                        ("cp64_iv8", ["--chunk", "64", "--decode-interval", "8"])):
        out = tmp_path / name
        subprocess.run([py, script, "--clients", "8", "--samples", "3", "--arms",
                        "main_python,islands_window", "--out", str(out)] + extra,
                       check=True, cwd=_ROOT, timeout=600)
        runs[name] = (json.loads(out.with_suffix(".json").read_text()),
                      out.with_suffix(".md").read_text())
    for name, cadence in (("cp64", 16), ("cp64_iv8", 8)):
        result, md = runs[name]
        rows = {r["arm"]: r for r in result["rows"]}
        assert (rows["main_python"]["chunk"], rows["islands_window"]["chunk"]) == (64, 64)
        assert rows["main_python"]["decode_interval"] is None
        assert rows["islands_window"]["decode_interval"] == cadence, name
        assert f"window 32, page 1, chunk 64, decode islands every {cadence} decode tokens, " in md
        assert main_target.report(result) == md
        # prompts of cp to 3cp own tokens after the 128-token system prompt, then the decode
        cached = rows["main_python"]["tokens_cached"]
        assert 8 * (128 + 64) < cached <= 8 * (128 + 3 * 64 + 48), cached
    # the same prompts either way; only the island cache's cadence differs
    assert (runs["cp64"][0]["rows"][0]["tokens_cached"]
            == runs["cp64_iv8"][0]["rows"][0]["tokens_cached"])
    for bad, why in ((["--chunk", "4"], "--chunk must be at least 8 tokens"),
                     (["--decode-interval", "0"], "--decode-interval must be at least 1 token")):
        done = subprocess.run([py, script, "--clients", "8"] + bad, capture_output=True, text=True,
                              cwd=_ROOT, timeout=120)
        assert done.returncode == 2 and why in done.stderr, done.stderr
