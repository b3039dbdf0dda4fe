"""benchmarks/swa_hold.py --target main --quick (sglang 0.5.23, both tree cores): the JSON and
markdown, the island hold bound after every commit, decode islands and sync-free commits on
``main_islands``, what stock main holds, and both cores agreeing on every hold.

Runs the 0.5.23 driver in ``.venv-main`` and ``.venv-main-islands`` (``scripts/setup_main.sh``,
``scripts/setup_main.sh --islands``); skipped, with the reason, where either is missing. About a
minute on 2 idle cores (four driver processes, each importing sglang 0.5.23).
"""

import json
import os
import pathlib
import sys

import pytest

_ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, os.path.join(str(_ROOT), "benchmarks"))

from swa_hold import cli as swa_hold  # noqa: E402
from swa_hold import target_main as swa_hold_target_main  # noqa: E402

MISSING = swa_hold_target_main.missing_envs(root=str(_ROOT))
pytestmark = pytest.mark.skipif(
    bool(MISSING), reason=f"no 0.5.23 environment for {', '.join(MISSING)} (build it with "
    "scripts/setup_main.sh and scripts/setup_main.sh --islands)")

COLUMNS = ["main/rust", "main_islands/rust", "main/python", "main_islands/python"]


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    d = tmp_path_factory.mktemp("swa_hold_main")
    jp, mp = d / "r.json", d / "r.md"
    assert swa_hold.main(["--target", "main", "--quick", "--repeats", "1",
                          "--json", str(jp), "--md", str(mp)]) == 0
    return json.loads(jp.read_text()), mp.read_text()


def test_quick_result_schema_and_markdown(quick):
    result, md = quick
    assert result["target"] == "main" and result["arm_order"] == COLUMNS
    assert result["command"].startswith("python benchmarks/swa_hold.py --target main --quick")
    s = result["shape"]
    assert (s["window"], s["page"], s["chunk"]) == (64, 1, 256)
    assert s["decode_interval"] == 64  # the island cache's own default, cp / 4
    for v in result["versions"].values():
        assert v["sglang"] == "0.5.23"
    for col in COLUMNS:
        a = result["arms"][col]
        assert a["commits_per_run"] == s["n_requests"] * (s["prompt"] // s["chunk"])
        assert a["commit_thread_cpu_seconds_median"] > 0
        assert a["per_run_median"]["whole_thread"] > 0
        assert a["final_swa_reclaimed_tokens"] > 0
        assert a["swa_protected_after_run"] == 0  # every lock given back
    assert "| metric | main/rust | main_islands/rust | main/python | main_islands/python |" in md
    assert "commit + reclaim thread CPU ratio vs main" in md and "Acceptance (issue 27" in md


def test_islands_hold_after_every_commit_and_decode_islands(quick):
    result, _ = quick
    w, p = result["shape"]["window"], result["shape"]["page"]
    interval = result["shape"]["decode_interval"]
    n_dec = result["shape"]["decode_tokens"]
    for core in ("rust", "python"):
        isl = result["arms"][f"main_islands/{core}"]
        main = result["arms"][f"main/{core}"]
        # chunk commits: one window (main's own out-of-window free and leaf split)
        assert isl["after_chunk_commit"]["max_swa_held_per_running_req"] <= w + 2 * p
        assert main["after_chunk_commit"]["max_swa_held_per_running_req"] <= w + 2 * p
        # decode islands: one per interval computed tokens (page 1: the hook sees computed
        # lengths prompt + 1 .. prompt + n_dec - 2, the last step finishes the request); a
        # decode island locks the window before it (islands less than a window apart: the
        # previous island's node too)
        assert isl["decode_islands"] == result["shape"]["n_requests"] * ((n_dec - 2) // interval)
        assert main["decode_islands"] == 0 and not main["after_decode_island"]
        bound = w + 2 * p if interval > w + p else w + interval + p
        assert isl["after_decode_island"]["max_swa_held_per_running_req"] <= bound
        # the sync-free commit paths (no host sync per chunk commit or decode island)
        assert isl["host_syncs"]["syncs_per_commit_max"] == 0
        assert isl["decode_island_host_syncs"]["syncs_per_commit_max"] == 0
        acc = result["acceptance"]
        assert acc[f"main_islands/{core}_host_syncs_per_commit_max"] == 0
        assert acc[f"main_islands/{core}_held_le_w_plus_2p"] is (
            isl["max_swa_held_per_running_req"] <= w + 2 * p)
        # during decode islands release the prompt's window; stock main locks it to the end
        assert (isl["decode"]["max_swa_locked_per_running_req"]
                <= main["decode"]["max_swa_locked_per_running_req"] + interval)
        assert "commit_reclaim_thread_cpu" in result["ratios_vs_main"][f"main_islands/{core}"]


def test_both_cores_hold_the_same(quick):
    result, _ = quick
    for arm in ("main", "main_islands"):
        rust, py = (result["arms"][f"{arm}/{c}"] for c in ("rust", "python"))
        assert rust["commit_rows"] == py["commit_rows"], arm
        for phase in ("after_commit", "with_chunk_in_flight", "decode"):
            assert rust[phase] == py[phase], (arm, phase)


def test_speculative_decode_commits_accept_lengths_and_islands_keep_the_cadence(tmp_path):
    """``--accept-max 4`` (issue 58): each decode step commits 1 to 4 tokens and the cache is told
    so; the island cache still lays a decode island per interval of committed tokens, at least
    ``floor(G / (interval + 4))`` for every request, and holds no more than stock main."""
    jp, mp = tmp_path / "r.json", tmp_path / "r.md"
    assert swa_hold.main(["--target", "main", "--tiny", "--accept-max", "4", "--cores", "python",
                          "--repeats", "1", "--json", str(jp), "--md", str(mp)]) == 0
    result, md = json.loads(jp.read_text()), mp.read_text()
    s = result["shape"]
    assert s["accept_max"] == 4 and "speculative: 1-4 tokens a step (mean 2.5)" in md
    isl, stock = result["arms"]["main_islands/python"], result["arms"]["main/python"]
    floor = s["decode_tokens"] // (s["decode_interval"] + 4)
    assert floor >= 1 and isl["decode_islands_min_per_request"] >= floor
    assert 1.5 < isl["accept_mean"] < 4  # whole accept lengths, not one token a step
    assert (isl["decode"]["mean_swa_held_per_running_req"]
            <= stock["decode"]["mean_swa_held_per_running_req"])
    assert f"floor(G / (interval + N)) = {floor}" in md
