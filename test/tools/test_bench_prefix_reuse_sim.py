"""benchmarks/prefix_reuse_sim.py: prefix_reuse's workloads replayed in the scheduler glue on the
real SGLang classes, deterministic per (arm, pool, class, seed)."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

_ROOT = str(pathlib.Path(__file__).resolve().parents[2])
sys.path.insert(0, os.path.join(_ROOT, "benchmarks"))

from prefix_reuse_arms import pool_table  # noqa: E402
from prefix_reuse_workloads import PRESETS, build_scripts  # noqa: E402
import prefix_reuse_sim as sim  # noqa: E402

SIM_JSON = os.path.join(_ROOT, "benchmarks", "results", "prefix_reuse_sim.json")


def _run(arm, pool, cls, seed=0):
    import dataclasses

    wl = dataclasses.replace(PRESETS["smoke"], seed=seed)
    script = build_scripts(wl, [cls])[cls]
    return sim.run_one(arm, pool_table()[pool]["swa_pool"], cls, script, 34)


def test_ample_pool_islands_hit_everything_upstream_hits():
    """At the ample pool nothing is evicted: both arms hit every shared token (expected)."""
    for cls in ("shared_system", "branch_edit"):
        up, isl = _run("upstream", "ample", cls), _run("islands", "ample", cls)
        assert up["cached_tokens"] == isl["cached_tokens"] == isl["expected_shared_tokens"] > 0, cls
        assert up["requests"] == isl["requests"] > 1


def test_lean_pool_lazy_keeps_the_fanout_hits_eager_frees():
    """0.10-eq pool (1,318 SWA tokens), smoke fanout (2 documents x 3 questions): the default
    (lazy) hits all 2,400 shared tokens; eager, which frees the SWA below each island at the
    commit, keeps only the islands and hits 973. Deterministic: the same numbers twice."""
    lazy = _run("islands", "0.10-eq", "fanout")
    eager = _run("islands_eager", "0.10-eq", "fanout")
    assert (lazy["cached_tokens"], lazy["expected_shared_tokens"]) == (2400, 2400)
    assert eager["cached_tokens"] == 973
    assert _run("islands_eager", "0.10-eq", "fanout") == eager


def test_clients_replay_the_server_benchmark_order():
    """branch_edit: a conversation's turns in sequence, then its edits as one group."""
    import dataclasses

    wl = dataclasses.replace(PRESETS["smoke"], seed=0)
    script = build_scripts(wl, ["branch_edit"])["branch_edit"]
    conv = script["convs"][0]
    client = sim._branch_conv(conv)
    first = next(client)
    assert [s[2] for s in first] == [(0, 0, 0)]
    groups = [first]
    try:
        while True:
            groups.append(client.send([[7] * s[1] for s in groups[-1]]))
    except StopIteration:
        pass
    assert [len(g) for g in groups] == [1] * len(conv["turns"]) + [len(conv["edits"])]
    assert [s[2] for s in groups[-1]] == [(1, 0, i) for i in range(len(conv["edits"]))]


def test_summary_counts_seeds_where_islands_is_at_least_as_good():
    rec = lambda xs: {"cached_tokens": xs}  # noqa: E731
    result = {"pools": ["0.17-eq"], "classes": ["fanout"], "arms": {
        "upstream": {"0.17-eq": {"fanout": rec([5, 9, 1])}},
        "upstream_knobs": {"0.17-eq": {"fanout": rec([6, 2, 2])}},
        "islands": {"0.17-eq": {"fanout": rec([6, 8, 3])}},
    }}
    assert sim.summarize(result) == [{
        "pool": "0.17-eq", "class": "fanout", "islands": 17, "best_upstream_arm": "upstream",
        "best_upstream": 15, "seeds_at_least_as_good": 2, "seeds": 3}]


def test_committed_result_matches_its_summary():
    assert os.path.exists(SIM_JSON), "benchmarks/results/prefix_reuse_sim.json is missing"
    with open(SIM_JSON) as f:
        result = json.load(f)
    assert set(result["arms"]) == set(sim.SIM_ARMS)
    assert sim.summarize(result) == result["summary"]
    assert result["command"].startswith(".venv/bin/python benchmarks/prefix_reuse_sim.py")


def test_cli_help():
    h = subprocess.run([sys.executable, "benchmarks/prefix_reuse_sim.py", "--help"], cwd=_ROOT,
                       capture_output=True, text=True, timeout=120)
    assert h.returncode == 0 and "--seeds" in h.stdout and "islands_auto" in h.stdout
    bad = subprocess.run([sys.executable, "benchmarks/prefix_reuse_sim.py", "--arms", "bogus"],
                         cwd=_ROOT, capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0 and "bogus" in bad.stderr


@pytest.mark.parametrize("latency", [0, 3])
def test_a_client_s_next_group_joins_the_queue_latency_steps_after_its_last_finish(latency):
    """Two turns of one client on the real stack: turn 2 is submitted ``latency`` scheduler steps
    after turn 1 finished (0: before the next step), with turn 1's output in its prompt."""
    from islands_harness.sim import MiniScheduler
    from islands_harness.stack import build_stack

    stack = build_stack(window=32, chunk=128, islands=True, reclaim="lazy")
    sched = MiniScheduler(stack, max_running=4, next_token=sim.next_token)
    steps, submitted, finished = [0], {}, {}
    real_step, real_submit = sched.step, sched.submit

    def step():
        steps[0] += 1
        kind = real_step()
        for r in sched.finished:
            finished.setdefault(r.rid, steps[0])
        return kind

    def submit(rid, ids, max_new):
        submitted[rid] = steps[0]
        return real_submit(rid, ids, max_new)

    sched.step, sched.submit = step, submit
    turns = [{"user": list(range(10, 70)), "max_new_tokens": 4},
             {"user": list(range(70, 90)), "max_new_tokens": 4}]
    rows = sim.drive(sched, [sim._turns(list(range(100, 140)), turns, lambda k: (k,))], latency)
    first, second = sorted(submitted, key=submitted.get)
    assert submitted[second] - finished[first] == latency
    assert rows[1]["input_ids"] == rows[0]["input_ids"] + rows[0]["output_ids"] + turns[1]["user"]
    assert rows[1]["cached_tokens"] == len(rows[0]["input_ids"]) + 3  # all but turn 1's last token
