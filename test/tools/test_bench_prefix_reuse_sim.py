"""benchmarks/prefix_reuse_sim.py: prefix_reuse's workloads replayed in the scheduler glue on the
real SGLang classes, deterministic per (arm, pool, class, seed)."""

import dataclasses
import json
import os
import pathlib
import subprocess
import sys

import pytest

_ROOT = str(pathlib.Path(__file__).resolve().parents[2])
sys.path.insert(0, os.path.join(_ROOT, "benchmarks"))

import _bench_path  # noqa: E402
from prefix_reuse.arms import pool_table  # noqa: E402
from prefix_reuse.workloads import PRESETS, build_scripts  # noqa: E402
from prefix_reuse import sim  # noqa: E402

def _run(arm, pool, cls, seed=0):
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
    rec = lambda xs: {"cached_tokens": xs, "retractions": [0] * len(xs)}  # noqa: E731
    result = {"pools": ["0.17-eq"], "classes": ["fanout"], "arms": {
        "upstream": {"0.17-eq": {"fanout": rec([5, 9, 1])}},
        "upstream_knobs": {"0.17-eq": {"fanout": rec([6, 2, 2])}},
        "islands": {"0.17-eq": {"fanout": rec([6, 8, 3])}},
        "main": {"0.17-eq": {"fanout": rec([4, 4, 4])}},
        "main_islands": {"0.17-eq": {"fanout": rec([6, 8, 2])}},
    }}
    assert sim.summarize(result) == [
        {"candidate": "islands", "reference": "better upstream arm", "pool": "0.17-eq",
         "class": "fanout", "cached": 17, "best_reference_arm": "upstream", "best_reference": 15,
         "seeds_at_least_as_good": 2, "seeds": 3, "mean_seed_difference": 0.0,
         "seed_difference_se": 0.6, "retractions": 0},
        {"candidate": "main_islands", "reference": "better main arm", "pool": "0.17-eq",
         "class": "fanout", "cached": 16, "best_reference_arm": "main", "best_reference": 12,
         "seeds_at_least_as_good": 2, "seeds": 3, "mean_seed_difference": 1.3,
         "seed_difference_se": 1.8, "retractions": 0},
        {"candidate": "main_islands", "reference": "0.5.15 islands", "pool": "0.17-eq",
         "class": "fanout", "cached": 16, "best_reference_arm": "islands", "best_reference": 17,
         "seeds_at_least_as_good": 2, "seeds": 3, "mean_seed_difference": -0.3,
         "seed_difference_se": 0.3, "retractions": 0}]


@pytest.mark.parametrize("name", ["prefix_reuse_sim.json", "prefix_reuse_sim_main.json",
                                  "prefix_reuse_sim_main_latency2.json",
                                  "prefix_reuse_sim_main_24seeds.json",
                                  "prefix_reuse_sim_main_24seeds_latency2.json",
                                  "prefix_reuse_sim_main_hicache.json"])
def test_committed_result_matches_its_summary(name):
    path = os.path.join(_ROOT, "benchmarks", "results", name)
    assert os.path.exists(path), f"benchmarks/results/{name} is missing"
    with open(path) as f:
        result = json.load(f)
    assert set(result["arms"]) == set(sim.TARGET_ARMS[result["target"]])
    assert sim.summarize(result) == result["summary"]
    assert result["command"].startswith(".venv/bin/python benchmarks/prefix_reuse_sim.py")
    assert sim.to_markdown(result) == open(path.replace(".json", ".md")).read()


def _main_cells(arms, cls="fanout", pool="0.10-eq"):
    """Smoke ``cls`` at ``pool``, seed 0, for each of ``arms``, each in its arm's interpreter."""
    a = sim.parse_args(["--preset", "smoke", "--classes", cls])
    swa = {pool: pool_table()[pool]["swa_pool"]}
    return {arm: dict(sim.run_cells(arm, [(0, pool, arm, cls)], a, swa, 34))[(0, pool, arm, cls)]
            for arm in arms}


def test_main_arms_replay_in_their_own_sglang():
    """The 0.5.23 arms run in their environments (stock main in .venv-main, the island series in
    .venv-main-islands), on 0.5.23's own scheduler glue. Smoke fan-out at the 0.10-eq pool (2
    documents x 3 questions, 2,400 shared tokens): islands with the window order (reclaim
    ``lazy``, its default) keep every hit; stock main, whose single SWA LRU list gives a document's
    window up before newer SWA, loses some, and islands' default (``lru``, reclaim ``auto``) no
    fewer than it; deterministic."""
    assert sim.arm_python("main").endswith(".venv-main/bin/python")
    assert sim.arm_python("main_islands").endswith(".venv-main-islands/bin/python")
    assert sim.arm_python("islands") == sys.executable
    r = _main_cells(["main", "main_islands", "main_islands_window"])
    win = r["main_islands_window"]
    assert win["cached_tokens"] == win["expected_shared_tokens"] == 2400
    assert r["main"]["cached_tokens"] < 2400 and r["main"]["requests"] == 6
    assert r["main_islands"]["cached_tokens"] >= r["main"]["cached_tokens"]
    assert _main_cells(["main"]) == {"main": r["main"]}


def test_a_host_tier_replays_with_hicache_s_controller_and_loads_back_what_the_device_lost():
    """The host-tier arms replay with HiCache's own controller and host pools (write-through,
    loads admitted by ``PrefillAdder``). Smoke fan-out with a 1,024-token full pool (each
    600-token document is pushed off the device by the next): without a host tier no question
    hits its document; with one, every hit is loaded back from the host, with islands or
    without. Edited transcripts: islands with the host tier hit at least the better of the host
    tier alone and islands alone."""
    a = sim.parse_args(["--preset", "smoke", "--classes", "fanout,branch_edit"])
    arms = ("main", "main_hicache", "main_islands", "main_islands_hicache")
    cells = {arm: dict(sim.run_cells(arm, [(0, "tiny", arm, c) for c in a.class_list], a,
                                     {"tiny": 600}, 34, {"tiny": 1024}))
             for arm in arms}
    fan = {arm: r[(0, "tiny", arm, "fanout")] for arm, r in cells.items()}
    edit = {arm: r[(0, "tiny", arm, "branch_edit")] for arm, r in cells.items()}
    assert fan["main"]["cached_tokens"] == fan["main_islands"]["cached_tokens"] == 0
    for arm in ("main_hicache", "main_islands_hicache"):
        assert fan[arm]["cached_tokens"] == fan[arm]["host_cached_tokens"] > 0, (arm, fan[arm])
    for arm in ("main", "main_islands"):
        assert fan[arm]["host_cached_tokens"] == edit[arm]["host_cached_tokens"] == 0
    assert edit["main_islands_hicache"]["cached_tokens"] >= max(
        edit["main_hicache"]["cached_tokens"], edit["main_islands"]["cached_tokens"]), edit


def test_patched_main_with_the_flag_off_replays_as_stock_main():
    """The `main` arm's replay in .venv-main-islands (series applied, flag off) equals the one in
    .venv-main (stock): same cached tokens and retractions, cell by cell."""
    spec = {"cells": [[0, "0.10-eq", "main", c] for c in ("fanout", "branch_edit")],
            "shape": dataclasses.asdict(sim.SHAPE), "preset": "smoke",
            "classes": ["fanout", "branch_edit"],
            "swa_pools": {"0.10-eq": pool_table()["0.10-eq"]["swa_pool"]},
            "eviction_interval": 34, "latency": 0, "main": {"main": {"args": [], "env": {}}}}
    outs = []
    for py in (sim.main_python(), sim.main_islands_python()):
        p = subprocess.run([py, "-m", "prefix_reuse.replay", json.dumps(spec)], cwd=_ROOT,
                           capture_output=True, text=True, timeout=600, env=_bench_path.worker_env())
        assert p.returncode == 0, p.stderr[-2000:]
        outs.append([json.loads(x) for x in p.stdout.splitlines()])
    assert len(outs[0]) == 2 and outs[0] == outs[1]


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


def test_rows_name_every_request_of_every_cell_with_its_hit(tmp_path):
    """``--rows``: per cell, each request in script order with its prompt, cached and expected
    tokens; they sum to the cell's totals in the JSON."""
    rows_path, out = tmp_path / "rows.json", tmp_path / "out"
    assert sim.main(["--arms", "islands,upstream", "--pools", "0.10-eq", "--classes", "fanout",
                     "--seeds", "0", "--preset", "quick", "--out", str(out),
                     "--rows", str(rows_path)]) == 0
    result = json.loads((out / "prefix_reuse_sim.json").read_text())
    rows = json.loads(rows_path.read_text())
    assert set(rows) == {"0/0.10-eq/islands/fanout", "0/0.10-eq/upstream/fanout"}
    for key, rs in rows.items():
        _, pool, arm, cls = key.split("/")
        cell = result["arms"][arm][pool][cls]
        assert [tuple(r["order"]) for r in rs] == sorted(tuple(r["order"]) for r in rs)
        assert sum(r["cached_tokens"] for r in rs) == cell["cached_tokens"][0]
        assert sum(r["expected_shared_tokens"] for r in rs) == cell["expected_shared_tokens"][0]
        assert len(rs) == cell["requests"][0]
        assert all(0 <= r["cached_tokens"] < r["prompt_tokens"] for r in rs)
    # the two arms replay the same script: the same requests, in the same order
    a, b = rows.values()
    assert [(r["order"], r["prompt_tokens"]) for r in a] == [(r["order"], r["prompt_tokens"]) for r in b]
