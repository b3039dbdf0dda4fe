"""benchmarks/prefix_reuse.py: the expected-hit oracle, the seeded workloads, the acceptance rules
and the committed result (seconds, no server), plus one smoke run on the real server."""

import dataclasses
import json
import os
import pathlib
import subprocess
import sys

import pytest

_ROOT = str(pathlib.Path(__file__).resolve().parents[2])
sys.path.insert(0, os.path.join(_ROOT, "benchmarks"))

from prefix_reuse.arms import ARMS, DEFAULT_ARMS, DEFAULT_POOLS, POOLS  # noqa: E402
from prefix_reuse.clients import plan_classes  # noqa: E402
from prefix_reuse.report import (ALWAYS_DESCRIBED, CLASS_KEYS, COLORS,  # noqa: E402
                                 MAIN_ISLANDS_AUTO, acceptance, acceptance_hicache,
                                 acceptance_main,
                                 arm_descriptions, assemble, to_markdown, validate_result)
from prefix_reuse.run import HOST_COUNTERS, class_extra, host_traffic  # noqa: E402
from prefix_reuse.workloads import (CLASSES, PRESETS, build_branch_edit, build_scripts,  # noqa: E402
                                    build_shared_system, check_workload, common_prefix_len,
                                    expected_shared_per_request, expected_shared_tokens)

QUICK_JSON = os.path.join(_ROOT, "benchmarks", "results", "prefix_reuse_quick.json")


# ------------------------------------------------------------------------------- expected hits


def test_expected_shared_is_the_longest_prefix_of_an_earlier_prompt_plus_output():
    reqs = [
        ([1, 2, 3, 4], [5, 6]),  # nothing earlier: 0; caches 1 2 3 4 5 (6 has no KV)
        ([1, 2, 3, 4, 5, 6, 7], [8]),  # shares 1..5 with the first: 5
        ([1, 2, 9], [3]),  # shares 1 2: 2
        ([1, 2, 3, 4], []),  # all 4 shared, capped at len - 1 = 3
        ([7, 7], [1]),  # nothing: 0
    ]
    assert expected_shared_per_request(reqs) == [0, 5, 2, 3, 0]
    assert expected_shared_per_request(reqs, page=2) == [0, 4, 2, 2, 0]
    assert expected_shared_tokens(reqs, page=2) == 8


def test_common_prefix_len():
    assert common_prefix_len([1, 2, 3], [1, 2, 4]) == 2
    assert common_prefix_len([1, 2, 3], [1, 2, 3, 4]) == 3
    assert common_prefix_len([], [1]) == 0
    assert common_prefix_len([5], [6]) == 0


# ------------------------------------------------------------------------------- workloads


@pytest.mark.parametrize("preset", ["full", "quick", "smoke"])
def test_workloads_are_seeded_and_fit_the_context(preset):
    wl = PRESETS[preset]
    check_workload(wl)
    assert build_scripts(wl) == build_scripts(wl)
    other = build_scripts(dataclasses.replace(wl, seed=wl.seed + 1))
    assert other != build_scripts(wl)


def test_divergence_points_are_distinct_tokens():
    s = build_scripts(PRESETS["quick"])
    firsts = [u["turns"][0]["user"][0] for u in s["shared_system"]["users"]]
    assert len(set(firsts)) == len(firsts) == 20
    for d in s["fanout"]["docs"]:
        qf = [q["q"][0] for q in d["questions"]]
        assert len(set(qf)) == len(qf) == 8
    assert len({d["doc"][0] for d in s["fanout"]["docs"]}) == 3
    for c in s["branch_edit"]["convs"]:
        for e in c["edits"]:  # the edited message differs from the old one at the cut
            old = c["turns"][e["turn"] - 1]["user"]
            assert e["user"][0] != old[e["keep"]]
    assert len({c["system"][0] for c in s["agents"]}) == len(s["agents"]) == 20


def test_plan_counts_the_hits_a_cache_that_forgets_nothing_could_make():
    wl = PRESETS["smoke"]
    plan = plan_classes(wl)
    assert plan["no_reuse"]["expected_shared_tokens"] == 0
    # fanout smoke: 2 documents of 600 tokens x 3 questions: the 2nd and 3rd question of each
    # document share the document (the fake outputs match nothing)
    assert plan["fanout"]["requests"] == 6
    assert plan["fanout"]["expected_shared_tokens"] == 2 * 2 * 600
    # shared_system smoke: 3 users x 2 turns behind a 600-token system prompt; users 1 and 2 share
    # the system prompt in turn 1, every user's turn 2 shares its own whole first transcript
    # (prompt + output - 1)
    s = build_shared_system(wl)
    own = sum(600 + len(u["turns"][0]["user"]) + u["turns"][0]["max_new_tokens"] - 1
              for u in s["users"])
    assert plan["shared_system"]["requests"] == 6
    assert plan["shared_system"]["expected_shared_tokens"] == 2 * 600 + own
    # branch_edit: every edit shares the transcript up to its cut
    b = build_branch_edit(wl)
    assert plan["branch_edit"]["requests"] == sum(len(c["turns"]) + len(c["edits"]) for c in b["convs"])


# ------------------------------------------------------------------------------- acceptance


def _rec(cached, requests=10, queued=None, retractions=0, mean=8.0):
    return {"cached_tokens": cached, "requests": requests, "mean_running_queued": queued,
            "retractions": retractions, "mean_running": mean, "max_running": 16,
            "expected_shared_tokens": 1000}


def _by(checks, pool, crit_prefix):
    return [c for c in checks if c["pool"] == pool and c["criterion"].startswith(crit_prefix)]


def test_acceptance_at_the_ample_pool_allows_one_page_per_request():
    arms = {"upstream": {"ample": {"fanout": _rec(1000)}},
            "islands": {"ample": {"fanout": _rec(990, requests=10)}}}
    [c] = acceptance(arms, cap=16, page=1, pools=["ample"], classes=["fanout"])
    assert c["pass"] is True  # 990 >= 1000 - 10
    arms["islands"]["ample"]["fanout"] = _rec(989, requests=10)
    [c] = acceptance(arms, cap=16, page=1, pools=["ample"], classes=["fanout"])
    assert c["pass"] is False


def test_acceptance_at_a_lean_pool_takes_the_better_upstream_arm_and_the_cap():
    arms = {"upstream": {"0.17-eq": {"fanout": _rec(500, queued=9.0)}},
            "upstream_knobs": {"0.17-eq": {"fanout": _rec(800, queued=10.0)}},
            "islands": {"0.17-eq": {"fanout": _rec(799, queued=15.5)}}}
    checks = acceptance(arms, cap=16, page=1, pools=["0.17-eq"], classes=["fanout"])
    [hits] = _by(checks, "0.17-eq", "cached")
    [cap] = _by(checks, "0.17-eq", "where upstream binds")
    assert hits["pass"] is False and hits["reference"] == 800
    assert cap["pass"] is True  # 15.5 >= cap - 1, no retraction
    arms["islands"]["0.17-eq"]["fanout"] = _rec(800, queued=14.9)
    checks = acceptance(arms, cap=16, page=1, pools=["0.17-eq"], classes=["fanout"])
    assert [c["pass"] for c in checks] == [True, False]
    arms["islands"]["0.17-eq"]["fanout"] = _rec(800, queued=None, retractions=1)
    checks = acceptance(arms, cap=16, page=1, pools=["0.17-eq"], classes=["fanout"])
    assert [c["pass"] for c in checks] == [True, False]
    # upstream does not bind: the cap check is n/a
    arms["upstream"]["0.17-eq"]["fanout"] = _rec(500, queued=15.0)
    checks = acceptance(arms, cap=16, page=1, pools=["0.17-eq"], classes=["fanout"])
    assert checks[1]["pass"] is None


def test_main_acceptance_takes_the_better_main_arm_with_one_page_per_request():
    arms = {"main": {"0.10-eq": {"fanout": _rec(700)}},
            "main_knobs": {"0.10-eq": {"fanout": _rec(800)}},
            "main_islands": {"0.10-eq": {"fanout": _rec(790, requests=10)}}}
    [c] = acceptance_main(arms, page=1, pools=["0.10-eq"], classes=["fanout"])
    assert c["pass"] is True and c["reference"] == 800  # 790 >= 800 - 10
    arms["main_islands"]["0.10-eq"]["fanout"] = _rec(789, requests=10)
    [c] = acceptance_main(arms, page=1, pools=["0.10-eq"], classes=["fanout"])
    assert c["pass"] is False
    assert acceptance_main({"main": arms["main"]}, page=1) == []  # main_islands not run
    arms["main_islands_window"] = {"0.10-eq": {"fanout": _rec(795, requests=10)}}
    checks = acceptance_main(arms, page=1, pools=["0.10-eq"], classes=["fanout"])
    assert [(c["criterion"].split()[0], c["pass"]) for c in checks] == [
        ("main_islands", False), ("main_islands_window", True)]


def test_hicache_acceptance_takes_the_better_reference_and_the_gap_to_the_bound():
    arms = {"main_hicache": {"0.10-eq": {"fanout": _rec(700)}},
            "main_islands": {"0.10-eq": {"fanout": _rec(800)}},
            "main_islands_hicache": {"0.10-eq": {"fanout": _rec(900, requests=10)}}}
    [c] = acceptance_hicache(arms, page=1, pools=["0.10-eq"], classes=["fanout"])
    assert c["pass"] is True and c["reference"] == 800 and c["bound"] == 1000
    assert c["gap_closed"] == 0.5  # (900 - 800) / (1000 - 800)
    arms["main_islands_hicache"]["0.10-eq"]["fanout"] = _rec(789, requests=10)
    [c] = acceptance_hicache(arms, page=1, pools=["0.10-eq"], classes=["fanout"])
    assert c["pass"] is False and c["gap_closed"] == -0.055
    arms["main_islands"]["0.10-eq"]["fanout"] = _rec(1000)
    [c] = acceptance_hicache(arms, page=1, pools=["0.10-eq"], classes=["fanout"])
    assert c["gap_closed"] is None  # no gap left to close
    assert acceptance_hicache({"main_hicache": arms["main_hicache"]}, page=1) == []
    result = assemble([{"arm": a, "pool": "0.10-eq", "classes": v["0.10-eq"]}
                       for a, v in arms.items()], {})
    assert result["acceptance_hicache"][0]["class"] == "fanout"


def test_host_traffic_is_each_counter_growth_and_tokens_moved_per_cached_token():
    before = {k: 10.0 for k in HOST_COUNTERS}
    after = {"host_hit_tokens": 110.0, "backup_kv_tokens": 60.0, "backup_swa_tokens": 30.0,
             "load_back_kv_tokens": 110.0, "load_back_swa_tokens": 20.0}
    out = host_traffic(before, after, cached=200)
    assert out["host_hit_tokens"] == 100 and out["backup_kv_tokens"] == 50
    assert out["host_traffic_per_hit_token"] == round((50 + 20 + 100 + 10) / 200, 3)
    assert host_traffic(before, before, cached=0)["host_traffic_per_hit_token"] is None


def test_hicache_arms_add_the_host_tier_to_main_and_main_islands():
    for arm, base in (("main_hicache", "main"), ("main_islands_hicache", "main_islands")):
        assert ARMS[arm]["args"][:len(ARMS[base]["args"])] == ARMS[base]["args"]
        assert "--enable-hierarchical-cache" in ARMS[arm]["args"] and ARMS[arm]["hicache"]
        assert ARMS[arm]["env"] == ARMS[base]["env"]


def test_main_arms_take_their_environments():
    from islands_harness import main_arm

    assert ARMS["main_knobs"] == {"args": (), "env": main_arm.MAIN_KNOBS_ENV, "main": True}
    assert ARMS["main_free_off"]["env"] == main_arm.MAIN_FREE_OFF_ENV
    assert ARMS["main_release_prefill"]["env"] == main_arm.MAIN_RELEASE_PREFILL_ENV
    assert ARMS["main_islands"] == {"args": ("--enable-swa-islands",), "env": {},
                                    "main_islands": True}
    assert not set(DEFAULT_ARMS) & {"main", "main_knobs", "main_islands"}


def test_schema_rejects_bad_results():
    good = {"cap": 16, "page": 1, "arms": {"upstream": {"ample": {"fanout": {
        k: 0 for k in CLASS_KEYS} | {"max_swa_held_per_running_req": None}}}}}
    validate_result(good)
    for bad in ({**good, "cap": 0}, {**good, "arms": {}},
                {**good, "arms": {"nope": {}}},
                {**good, "arms": {"upstream": {"0.5": {}}}},
                {**good, "arms": {"upstream": {"ample": {"fanout": {"requests": 1}}}}},
                {**good, "arms": {"upstream": {"ample": {"fanout": {
                    k: 1 for k in CLASS_KEYS}}}}}):
        with pytest.raises(ValueError):
            validate_result(bad)


def test_committed_quick_result_has_the_schema_and_its_acceptance():
    """The committed result exists, has the issue's schema, and its recorded acceptance is what
    the rules give on its own numbers."""
    assert os.path.exists(QUICK_JSON), "benchmarks/results/prefix_reuse_quick.json is missing"
    with open(QUICK_JSON) as f:
        result = json.load(f)
    validate_result(result)
    assert set(DEFAULT_ARMS) <= set(result["arms"]) <= set(ARMS)
    for arm in result["arms"]:
        assert set(result["arms"][arm]) == set(DEFAULT_POOLS), arm
        for pool in DEFAULT_POOLS:
            assert set(result["arms"][arm][pool]) == set(CLASSES), (arm, pool)
    again = acceptance(result["arms"], result["cap"], result["page"])
    assert again == result["acceptance"]
    for c in result["acceptance"]:
        if c["pass"] is False:  # every failure is explained in the markdown next to it
            md = open(QUICK_JSON[:-5] + ".md").read()
            assert "FAIL" in md
    assert result["command"].startswith(".venv/bin/python benchmarks/prefix_reuse.py")


def test_committed_main_result_compares_upstream_main_in_the_same_run():
    """``prefix_reuse_quick_main.json``: upstream, knobs, islands and stock 0.5.23 (``main``) in
    one run, schema and acceptance as recorded; the README's claim on it: islands cache at least
    as many tokens as main in every pool and class, and main loses part of the partial-prefix
    hits at the ample pool (fan-out, edited transcripts) that 0.5.15 keeps."""
    path = QUICK_JSON[:-5] + "_main.json"
    with open(path) as f:
        result = json.load(f)
    validate_result(result)
    assert set(result["arms"]) == {"upstream", "upstream_knobs", "islands", "main"}
    assert acceptance(result["arms"], result["cap"], result["page"]) == result["acceptance"]
    arms = result["arms"]
    for pool in DEFAULT_POOLS:
        for cls in CLASSES:
            isl, main = arms["islands"][pool][cls], arms["main"][pool][cls]
            assert isl["cached_tokens"] >= main["cached_tokens"], (pool, cls)
    for cls in ("fanout", "branch_edit"):
        assert arms["main"]["ample"][cls]["cached_tokens"] < arms["upstream"]["ample"][cls][
            "cached_tokens"], cls


def test_committed_main_auto_result_backs_issue_27s_prefix_claims():
    """``prefix_reuse_quick_main_auto.json`` (sglang 0.5.23 with the defaults, the 0.5.15 islands
    arm in the same run): the recorded acceptance is what the cells give; at the ample pool
    ``main_islands`` caches what a cache that forgets nothing could (no #36131 loss) and at least
    the better of ``main`` and ``main_knobs``; it runs at the cap while requests queue in every
    lean-pool cell. Lean-pool cached tokens move by thousands between single runs
    (``prefix_reuse_repeats_main.md``), so their ranking is the repeats' and the replay's."""
    path = QUICK_JSON[:-5] + "_main_auto.json"
    with open(path) as f:
        result = json.load(f)
    validate_result(result)
    assert set(result["arms"]) == {"main", "main_knobs", "main_islands", "islands"}
    checks = acceptance_main(result["arms"], result["page"])
    assert checks == result["acceptance_main"] and len(checks) == len(DEFAULT_POOLS) * len(CLASSES)
    assert all(c["pass"] for c in checks if c["pool"] == "ample")
    isl = result["arms"]["main_islands"]
    for cls in CLASSES:
        assert isl["ample"][cls]["cached_tokens"] == isl["ample"][cls]["expected_shared_tokens"]
        for pool in DEFAULT_POOLS[1:]:
            assert isl[pool][cls]["mean_running_queued"] >= result["cap"] - 1, (pool, cls)


def _arms_line(md):
    (line,) = [x for x in md.splitlines() if x.startswith("Arms: ")]
    return line


def test_a_result_keeps_the_arm_descriptions_of_its_run():
    """``assemble`` stores the arms' descriptions in the result (the run's own from ``meta`` when
    it has them, today's otherwise; arms without records left out) and the markdown says what
    the result stores, not what today's code would say."""
    rec = {k: 0 for k in CLASS_KEYS} | {"max_swa_held_per_running_req": None, "requests": 1}
    boots = [{"arm": a, "pool": "ample", "classes": {"fanout": dict(rec)}}
             for a in ("main", "main_islands")] + [
        {"arm": "main_knobs", "pool": "ample", "error": "boom", "classes": {}}]
    today = assemble(boots, {"command": "x"})
    assert today["arm_descriptions"] == arm_descriptions(["main", "main_islands"])
    assert list(today["arm_descriptions"]) == [*ALWAYS_DESCRIBED, "main", "main_islands"]
    assert "`main_islands` (0.5.23 + the main islands series, `--enable-swa-islands`, default " \
           "reclaim `auto`)" in _arms_line(to_markdown(today))
    auto = assemble(boots, {"command": "x", "main_islands_eviction": "auto"})
    assert auto["arm_descriptions"]["main_islands"].endswith(MAIN_ISLANDS_AUTO)
    run_text = arm_descriptions(["main", "main_knobs", "main_islands"]) | {
        "main_islands": "as it was then, default reclaim `lazy`"}
    then = assemble(boots, {"command": "x", "arm_descriptions": run_text})
    assert "main_knobs" not in then["arm_descriptions"]  # its boot failed: no records
    assert then["arm_descriptions"]["main_islands"] == "as it was then, default reclaim `lazy`"
    line = _arms_line(to_markdown(then))
    assert line.endswith(", `main_islands` (as it was then, default reclaim `lazy`).")
    assert line.startswith("Arms: `upstream` (stock), `upstream_knobs` (+ ")
    # a result from before the field: today's descriptions of the arms it has
    del then["arm_descriptions"]
    assert _arms_line(to_markdown(then)) == _arms_line(to_markdown(today))


@pytest.mark.parametrize("stem", ["prefix_reuse_quick_main_islands",
                                  "prefix_reuse_quick_main_islands_repeat"])
def test_committed_lazy_runs_say_lazy_and_regenerate(stem):
    """These runs were made while ``main_islands`` defaulted to the lazy reclaim; their JSON
    carries that description (copied from their markdown), so they regenerate byte-identical
    although today's code would describe the arm otherwise."""
    path = pathlib.Path(QUICK_JSON).with_name(stem + ".json")
    result = json.loads(path.read_text())
    assert result["arm_descriptions"]["main_islands"].endswith("default reclaim `lazy`")
    assert arm_descriptions(result["arms"])["main_islands"].endswith("default reclaim `auto`")
    assert to_markdown(result) == path.with_suffix(".md").read_text()


def test_class_extra_records_each_request_against_what_could_be_hit():
    """Per request, in script order: [order, prompt tokens, cached tokens, expected shared];
    the expected column sums to the class's expected shared tokens."""
    a, b = [1, 2, 3, 4, 5, 6], [1, 2, 3, 9, 9]
    rows = [  # sent out of script order: b's row first
        {"order": [1, 0], "input_ids": b, "output_ids": [7], "prompt_tokens": 5, "cached_tokens": 2},
        {"order": [0, 0], "input_ids": a, "output_ids": [8, 8], "prompt_tokens": 6,
         "cached_tokens": 0},
    ]
    parsed = {"decode": [{"run": 2, "queue": 1, "swa_tok": 70}, {"run": 1, "queue": 0, "swa_tok": 30}]}
    extra = class_extra(parsed, rows, page=1)
    assert extra["per_request"] == [[[0, 0], 6, 0, 0], [[1, 0], 5, 2, 3]]
    assert extra["expected_shared_tokens"] == 3
    assert extra["mean_running_queued"] == 2 and extra["queued_steps"] == 1
    assert extra["max_swa_used_per_running"] == 35.0


def test_every_arm_has_a_plot_colour():
    assert set(COLORS) == set(ARMS)


def test_cli_help_and_plan_only():
    py = sys.executable
    h = subprocess.run([py, "benchmarks/prefix_reuse.py", "--help"], cwd=_ROOT,
                       capture_output=True, text=True, timeout=120)
    assert h.returncode == 0 and "--quick" in h.stdout and "islands_eager" in h.stdout
    assert "islands_auto" in h.stdout
    p = subprocess.run([py, "benchmarks/prefix_reuse.py", "--smoke", "--plan-only",
                        "--arms", "upstream,islands", "--pools", "ample"], cwd=_ROOT,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    j = json.loads(p.stdout)
    assert j["boots"] == 2 and set(j["classes"]) == set(CLASSES)
    bad = subprocess.run([py, "benchmarks/prefix_reuse.py", "--arms", "islands,bogus",
                          "--plan-only"], cwd=_ROOT, capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0 and "bogus" in bad.stderr



def test_model_option_reaches_the_arms_and_refuses_arms_that_do_not_serve_it():
    """``--model gemma4``: its server arguments follow every arm's own (plan-only and the boot's
    ``server_args``); the 0.5.15.post1 arms are refused by name; the default stays laguna."""
    from islands_harness.models import get_model
    from prefix_reuse.arms import pool_table, server_args

    g4 = list(get_model("gemma4").server_args)
    assert g4 and "--attention-backend" in g4
    py = sys.executable
    p = subprocess.run([py, "benchmarks/prefix_reuse.py", "--smoke", "--plan-only", "--model",
                        "gemma4", "--arms", "main,main_islands", "--pools", "ample"], cwd=_ROOT,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    j = json.loads(p.stdout)
    assert j["model"] == "gemma4"
    assert j["arms"]["main_islands"]["args"] == ["--enable-swa-islands", *g4]
    assert j["arms"]["main"]["args"] == g4
    pool = pool_table()["ample"]
    assert server_args("main", pool, model="gemma4") == server_args("main", pool) + g4
    assert server_args("upstream", pool) == server_args("upstream", pool, model="laguna")
    bad = subprocess.run([py, "benchmarks/prefix_reuse.py", "--plan-only", "--model", "gemma4",
                          "--arms", "upstream,islands,main"], cwd=_ROOT, capture_output=True,
                         text=True, timeout=120)
    assert bad.returncode == 2 and "upstream,islands" in bad.stderr and "0.5.23" in bad.stderr


# ------------------------------------------------------------------------------- real server


@pytest.mark.server
def test_smoke_run_on_the_real_server(tmp_path):
    """Two boots (upstream, islands) at the ample pool, the fanout and branch_edit classes: both
    hit, islands at least as much as upstream less a page per request."""
    out = tmp_path / "prefix_reuse_smoke.json"
    r = subprocess.run([sys.executable, "benchmarks/prefix_reuse.py", "--smoke",
                        "--arms", "upstream,islands", "--pools", "ample",
                        "--classes", "fanout,branch_edit", "--out", str(tmp_path),
                        "--log-dir", str(tmp_path / "logs")], cwd=_ROOT,
                       capture_output=True, text=True, timeout=1500)
    assert r.returncode == 0, r.stderr[-4000:]
    res = json.loads(out.read_text())
    validate_result(res)
    for cls in ("fanout", "branch_edit"):
        up = res["arms"]["upstream"]["ample"][cls]
        isl = res["arms"]["islands"]["ample"][cls]
        assert up["cached_tokens"] > 0 and isl["cached_tokens"] > 0, cls
        assert isl["cached_tokens"] >= up["cached_tokens"] - isl["requests"], cls
        assert isl["max_swa_held_per_running_req"] is not None
    assert (tmp_path / "prefix_reuse_smoke.md").exists()
    assert (tmp_path / "prefix_reuse_smoke.png").exists()


def test_lean_device_pool_keeps_0_17_eq_swa_pool_on_a_quarter_of_the_device_pool():
    """``lean-device``: ``--max-total-tokens`` 16,384 given after the common arguments (the last
    one wins), a server ratio scaled so the SWA pool stays 0.17-eq's; not a default pool, and the
    markdown names the device pool only when a pool sets its own."""
    from admission import setup as admission_setup
    from prefix_reuse.arms import (CPU, LEAN_DEVICE_TOKENS, pool_table,
                                   server_args)
    from islands_tools import pool_plan as plan

    pools = pool_table()
    lean, eq17 = pools["lean-device"], pools["0.17-eq"]
    assert "lean-device" in POOLS and "lean-device" not in DEFAULT_POOLS
    assert lean["max_total_tokens"] == LEAN_DEVICE_TOKENS == CPU.max_total_tokens // 4
    assert abs(plan.swa_pool_tokens(LEAN_DEVICE_TOKENS, lean["server_ratio"], CPU.page)
               - eq17["swa_pool"]) <= 1
    args = server_args("main_hicache", lean)
    common = admission_setup.common_server_args(CPU)
    assert args[:len(common)] == common
    i = len(args) - 1 - args[::-1].index("--max-total-tokens")
    assert args[i + 1] == str(LEAN_DEVICE_TOKENS) and i >= len(common)
    assert "--max-total-tokens" not in server_args("main_hicache", eq17)[len(common):]
    rec = {"cached_tokens": 1, "requests": 1, "cached_share": 0.1, "prefill_tokens": 1,
           "mean_running": 1, "max_running": 1, "retractions": 0, "peak_swa_used": 1,
           "max_swa_held_per_running_req": None, "expected_shared_tokens": 1, "decode_steps": 1,
           "wall_s": 1, "tok_per_cpu_s": 1}
    for pool, shown in (("lean-device", True), ("0.17-eq", False)):
        boots = [{"arm": "main_hicache", "pool": pool, "classes": {"fanout": dict(rec)}}]
        meta = {"pools": {pool: pools[pool]}, "eviction_interval": 34, "command": "x"}
        md = to_markdown(assemble(boots, meta))
        assert ("device pool tokens" in md) is shown
        assert ("| 16,384 |" in md) is shown
