"""benchmarks/admission.py, pure parts only (seconds, no server): the planner-derived pool mapping,
log and /metrics parsing on captured snippets, aggregation, and the result JSON schema."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

_ROOT = str(pathlib.Path(__file__).resolve().parents[2])
sys.path.insert(0, os.path.join(_ROOT, "benchmarks"))

from admission import cli as admission  # noqa: E402
from admission import report as admission_report  # noqa: E402
from admission import run as admission_run  # noqa: E402
from admission import setup as admission_setup  # noqa: E402
from admission import workloads as admission_workloads  # noqa: E402
from islands_harness import sched_log  # noqa: E402
from islands_harness.client import Metrics  # noqa: E402

plan = admission_setup.plan


# ------------------------------------------------------------------------------- pool mapping


def test_mapping_reproduces_the_spec_pools():
    m = admission_setup.plan_mapping()
    prod, cpu, pools = m["production"], m["cpu"], m["pools"]
    # the spec's numbers (planner docstring): SWA pools at 0.32 / 0.17, floor, bind 10.7
    assert pools["0.32"]["prod_swa_pool"] == 236_096
    assert pools["0.17"]["prod_swa_pool"] == 175_232
    assert pools["0.17"]["prod_full_pool"] == 1_030_912
    assert prod["island_floor"] == 68_608
    assert pools["0.17"]["prod_bind_without_islands"] == pytest.approx(10.7, abs=0.01)
    assert prod["cap_x_hold"] == 48 * 16384 and cpu["cap_x_hold"] == 16 * 512
    # the scaled shape keeps cp/(w+p) near 15
    assert 14 < cpu["cp_over_w_plus_p"] < 17 and 14 < prod["cp_over_w_plus_p"] < 17


@pytest.mark.parametrize("key", ["0.32", "0.17", "0.10"])
def test_cpu_pool_is_the_same_fraction_of_cap_x_hold(key):
    m = admission_setup.plan_mapping()
    p = m["pools"][key]
    frac = p["prod_swa_pool"] / m["production"]["cap_x_hold"]
    assert p["swa_pool"] == round(frac * m["cpu"]["cap_x_hold"])
    # the predicted bind without islands, as a share of the cap, is the same in both units
    share_prod = p["prod_bind_without_islands"] / m["production"]["cap"]
    share_cpu = p["bind_without_islands"] / m["cpu"]["cap"]
    assert share_cpu == pytest.approx(share_prod, abs=0.01)
    # the server ratio gives exactly that pool with SGLang's rounding at --max-total-tokens
    assert plan.swa_pool_tokens(m["cpu"]["max_total_tokens"], p["server_ratio"], 1) == p["swa_pool"]


def test_island_floor_fits_the_010_equivalent_and_ordering():
    m = admission_setup.plan_mapping()
    pools, cpu = m["pools"], m["cpu"]
    assert cpu["island_floor"] == plan.island_floor(16, 32, 1, 512) == 512 + 16 * 33
    assert pools["0.10"]["floor_fits"] and pools["0.10"]["swa_pool"] >= cpu["island_floor"]
    assert pools["floor"]["swa_pool"] == cpu["island_floor"]
    assert pools["0.32"]["swa_pool"] > pools["0.17"]["swa_pool"] > pools["0.10"]["swa_pool"] \
        > pools["floor"]["swa_pool"]
    # upstream binds below the cap at every equivalent (that is the point of the pressure)
    assert all(p["bind_without_islands"] < cpu["cap"] for p in pools.values())
    # the floor arm's equivalent production ratio lies below 0.10
    assert 0.0 < pools["floor"]["ratio_equivalent"] < 0.10


def test_decode_tail_scaling():
    m = admission_setup.plan_mapping()
    assert m["production"]["decode_tail"] == plan.decode_tail_tokens(8.5, eviction_interval=128,
                                                                     decode_interval=4096) == 1088
    assert m["cpu"]["decode_tail"] == round(1088 / 16384 * 512) == 34
    assert m["cpu"]["eviction_interval"] == 34


def test_arm_server_args_and_env():
    m = admission_setup.plan_mapping()
    cpu = admission_setup.CpuShape()
    a = admission_setup.arm_server_args(admission_report.ARMS["islands_0.17"], m, cpu)
    assert a[a.index("--swa-full-tokens-ratio") + 1] == repr(m["pools"]["0.17"]["server_ratio"])
    assert "--enable-swa-islands" in a and a[a.index("--max-running-requests") + 1] == "16"
    assert a[a.index("--max-total-tokens") + 1] == "65536"
    c = admission_setup.arm_server_args(admission_report.ARMS["chunk_cache"], m, cpu)
    assert "--disable-radix-cache" in c and "--swa-full-tokens-ratio" not in c
    env = admission_setup.arm_env(admission_report.ARMS["upstream_knobs_0.17"], 34)
    assert env == {"SGLANG_OPT_SWA_SPLIT_LEAF_ON_INSERT": "1",
                   "SGLANG_OPT_SWA_RELEASE_LEAF_LOCK_AFTER_WINDOW": "1",
                   "SGLANG_SWA_EVICTION_INTERVAL": "34"}
    assert admission_setup.arm_env(admission_report.ARMS["upstream_0.17"], 0) == {}


@pytest.mark.parametrize("pool", ["0.17", "0.10"])
def test_main_arm_is_upstream_at_the_same_pool_on_the_other_release(pool):
    """``main_<pool>``: the arguments and environment of ``upstream_<pool>`` (default settings),
    booted from .venv-main; only the main arms take that interpreter."""
    m, cpu = admission_setup.plan_mapping(), admission_setup.CpuShape()
    arms = admission_setup.ARMS
    main, up = arms[f"main_{pool}"], arms.get(f"upstream_{pool}") or arms["upstream_0.17"]
    assert main.main and not any(a.main for n, a in arms.items() if not n.startswith("main_"))
    assert admission_setup.arm_server_args(main, m, cpu) == admission_setup.arm_server_args(
        admission_setup.Arm(f"upstream_{pool}", pool), m, cpu)
    assert admission_setup.arm_env(main, 34) == admission_setup.arm_env(up, 34)
    assert main.name not in admission_setup.QUICK_ARMS + admission_setup.DEFAULT_ARMS


@pytest.mark.parametrize("pool", ["0.17", "0.10"])
def test_main_knobs_and_main_islands_arms_at_the_same_pool(pool):
    """``main_knobs_<pool>``: main's arguments plus its two knobs, from .venv-main;
    ``main_islands_<pool>``: main's arguments plus --enable-swa-islands, from .venv-main-islands."""
    from islands_harness.main_arm import MAIN_KNOBS_ENV

    m, cpu = admission_setup.plan_mapping(), admission_setup.CpuShape()
    arms = admission_setup.ARMS
    main, knobs, isl = arms[f"main_{pool}"], arms[f"main_knobs_{pool}"], arms[f"main_islands_{pool}"]
    base = admission_setup.arm_server_args(main, m, cpu)
    assert knobs.main and not knobs.main_islands
    assert admission_setup.arm_server_args(knobs, m, cpu) == base
    assert admission_setup.arm_env(knobs, 34) == {**MAIN_KNOBS_ENV,
                                                  "SGLANG_SWA_EVICTION_INTERVAL": "34"}
    assert isl.main_islands and not isl.main
    assert admission_setup.arm_server_args(isl, m, cpu) == base + ["--enable-swa-islands"]
    assert admission_setup.arm_env(isl, 34) == admission_setup.arm_env(main, 34)
    assert not {knobs.name, isl.name} & set(admission_setup.QUICK_ARMS + admission_setup.DEFAULT_ARMS)


def test_acceptance_checks_main_islands_against_the_main_arms_at_each_pool():
    def arm(max_running, retractions, hit):
        return {"max_running": max_running, "max_running_min_over_repeats": max_running,
                "mean_running": max_running / 2, "retractions": retractions,
                "agent_hit_rate": hit}

    arms = {"main_0.17": arm(9, 0, 0.5), "main_knobs_0.17": arm(10, 0, 0.6),
            "main_islands_0.17": arm(16, 0, 0.6)}
    checks = admission_report.acceptance(arms, 16)
    assert [(c["check"], c["pass"]) for c in checks] == [
        ("main_islands reach the cap with 0 retractions at 0.17-eq", True),
        ("agent: main_islands hit rate >= main and main_knobs at 0.17-eq", True)]
    arms["main_islands_0.17"] = arm(16, 1, 0.59)
    assert [c["pass"] for c in admission_report.acceptance(arms, 16)] == [False, False]


# ------------------------------------------------------------------------------- workloads


def test_workloads_are_seeded_and_fit_the_context():
    cfg = admission_workloads.WorkloadConfig(requests=4, convs=2, turns=3)
    a, b = admission_workloads.no_reuse_requests(cfg), admission_workloads.no_reuse_requests(cfg)
    assert a == b and len(a) == 4
    assert all(cfg.in_min <= len(r["input_ids"]) <= cfg.in_max for r in a)
    assert all(cfg.out_min <= r["max_new_tokens"] <= cfg.out_max for r in a)
    assert all(cfg.token_lo <= t < cfg.token_hi for r in a for t in r["input_ids"])
    assert len({tuple(r["input_ids"][:8]) for r in a}) == 4  # no shared prefix
    s = admission_workloads.agent_script(cfg)
    assert s == admission_workloads.agent_script(cfg) and len(s) == 2 and len(s[0]["turns"]) == 3
    assert s[0]["system"] != s[1]["system"]
    assert admission_workloads.agent_max_context(admission_workloads.WorkloadConfig()) < 4096


def test_agent_mode_flags_reach_the_workload_and_the_report():
    a = admission.parse_args(["--quick", "--workloads", "agent", "--agent-mode", "while_running",
                              "--reply-min", "150", "--reply-max", "250", "--run-on", "16"])
    cfg = admission.workload_from_args(a)
    assert (cfg.agent_mode, cfg.reply_min, cfg.reply_max, cfg.run_on) == ("while_running", 150, 250, 16)
    assert all(150 <= t["max_new_tokens"] <= 250 for c in admission_workloads.agent_script(cfg) for t in c["turns"])
    assert admission.workload_from_args(admission.parse_args(["--quick"])).agent_mode == "after_finish"
    with pytest.raises(SystemExit):
        admission.parse_args(["--agent-mode", "sometimes"])
    with pytest.raises(SystemExit):
        admission.workload_from_args(admission.parse_args(["--reply-min", "9", "--reply-max", "8"]))
    with pytest.raises(ValueError):
        admission_workloads.run_agent("http://127.0.0.1:1", [], 1.0, print, mode="sometimes")
    r = _synthetic_result()
    r.update(command="x", date="d", repeats=1, runtime_s=60.0, quick=True, eviction_interval=34,
             workload=dict(admission_setup.dataclasses.asdict(cfg)), arm_order=list(r["arms"]),
             png="admission_running.png")
    assert "while turn k keeps generating 16 more tokens" in admission_report.to_markdown(r)


# ------------------------------------------------------------------------------- parsing

LOG = """\
[2026-11-29 17:09:42] SWAKVPool mem usage: 0.00 GB, swa size: 1318, full size: 65536
[2026-11-29 17:09:42] SWA pool of 1825 tokens (--swa-full-tokens-ratio 0.02785492) binds admission at about 3.6 running requests without --enable-swa-islands: each running request holds about one prefill chunk (512 tokens) of SWA KV, and the request pool allows 17.
[2026-11-29 17:18:08] Prefill batch, #new-seq: 1, #new-token: 512, #cached-token: 0, full token usage: 0.02, swa token usage: 0.41, #running-req: 0, #queue-req: 19, #pending-token: 1469, cpu graph: False, input throughput (token/s): 87.39
[2026-11-29 17:18:14] Prefill batch, #new-seq: 2, #new-token: 500, #cached-token: 12, full token usage: 0.04, swa token usage: 0.44, #running-req: 15, #queue-req: 18, #pending-token: 38029, cpu graph: False, input throughput (token/s): 157.22
[2026-11-29 17:20:19] Decode batch, #running-req: 16, #full token: 32113, full token usage: 0.49, #swa token: 576, swa token usage: 0.44, swa held/req: 36 (max 40), islands: 77 chunk + 3 decode, swa reclaimed: 31537 at commit + 0 cold + 0 window, #tombstone token: 31000, cpu graph: False, gen throughput (token/s): 0.12, #queue-req: 4
[2026-11-29 17:20:22] Decode batch, #running-req: 15, #full token: 32129, full token usage: 0.49, #swa token: 592, swa token usage: 0.45, swa held/req: 37 (max 41), islands: 77 chunk + 3 decode, swa reclaimed: 31537 at commit + 0 cold + 0 window, #tombstone token: 31537, cpu graph: False, gen throughput (token/s): 5.31, #queue-req: 4
[2026-11-29 17:30:06] KV cache pool is full. Retract requests. #retracted_reqs: 2, #new_tokens_gained: 95, #new_token_ratio: 0.6137 -> 0.9368
[2026-11-29 17:31:18] Decode batch, #running-req: 6, #full token: 12165, full token usage: 0.19, #swa token: 1415, swa token usage: 0.78, cpu graph: False, gen throughput (token/s): 9.10, #queue-req: 11
"""


def test_parse_log_lines_and_summary():
    parsed = sched_log.parse_lines(LOG.splitlines())
    assert len(parsed["decode"]) == 3 and len(parsed["prefill"]) == 2
    assert parsed["retract_events"] == [2]
    d0 = parsed["decode"][0]
    assert d0["run"] == 16 and d0["swa_tok"] == 576 and d0["queue"] == 4
    assert d0["held_mean"] == 36 and d0["held_max"] == 40 and d0["chunk_islands"] == 77
    assert d0["decode_islands"] == 3 and d0["freed"] == 31537 and d0["tomb"] == 31000
    assert "held_mean" not in parsed["decode"][2]  # an upstream line has no island fragment
    s = admission_run.summarize_log(parsed, cap=16)
    assert s["decode_steps"] == 3 and s["prefill_batches"] == 2
    assert s["prefill_tokens"] == 1012 and s["prefill_cached_tokens"] == 12
    assert s["max_running_decode"] == 16 and s["max_running_log"] == 17  # 15 running + 2 new
    assert s["mean_running_step"] == pytest.approx((16 + 15 + 6) / 3, abs=1e-3)
    assert s["frac_steps_at_cap"] == pytest.approx(1 / 3, abs=1e-3)
    assert s["retractions_log"] == 2 and s["retraction_events_log"] == 1
    assert s["max_swa_used_tokens"] == 1415 and s["max_swa_usage"] == 0.78
    assert s["max_full_used_tokens"] == 32129 and s["max_full_usage"] == 0.49
    assert s["held_per_req_max"] == 41 and s["max_tombstone_tokens"] == 31537
    b = sched_log.parse_boot(LOG)
    assert b == {"swa_pool_log": 1318, "full_pool_log": 65536, "server_predicted_bind": 3.6}


METRICS_BEFORE = """\
# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{engine_type="unified",model_name="m",tp_rank="0"} 3.0
sglang:num_retracted_requests_total{model_name="m"} 1.0
sglang:swa_island_chunk_inserts{model_name="m"} 10.0
sglang:swa_island_decode_inserts{model_name="m"} 2.0
sglang:swa_freed_at_commit_tokens{model_name="m"} 100.0
"""
METRICS_AFTER = """\
sglang:num_running_reqs{engine_type="unified",model_name="m",tp_rank="0"} 16.0
sglang:num_retracted_requests_total{model_name="m"} 4.0
sglang:swa_island_chunk_inserts{model_name="m"} 25.0
sglang:swa_island_decode_inserts{model_name="m"} 7.0
sglang:swa_freed_at_commit_tokens{model_name="m"} 600.0
sglang:swa_reclaimed_cold_tokens{model_name="m"} 80.0
sglang:evicted_tokens_total{cache_type="swa"} 50.0
"""


def test_metrics_parsing_and_deltas():
    before, after = Metrics.parse(METRICS_BEFORE), Metrics.parse(METRICS_AFTER)
    assert after.value("sglang:num_running_reqs") == 16.0
    assert after.value("sglang:swa_island_chunk_inserts") == 25.0
    assert after.value("sglang:num_running_reqs", {"engine_type": "unified"}) == 16.0
    assert after.value("sglang:num_running_reqs", {"engine_type": "x"}, default=None) is None
    with pytest.raises(KeyError):
        after.value("sglang:no_such_metric")
    d = admission_run.counter_deltas(before, after)
    assert d["retractions"] == 3 and d["chunk_islands"] == 15 and d["decode_islands"] == 5
    assert d["island_freed_tokens"] == 500 and d["evicted_tokens"] == 50  # absent before: 0
    assert d["island_reclaimed_cold_tokens"] == 80 and d["island_reclaimed_window_tokens"] == 0


def test_time_weighted_mean():
    samples = [(0.0, 2.0), (1.0, 4.0), (3.0, 0.0)]
    assert admission_run.time_weighted_mean(samples, 0.0, 4.0) == pytest.approx((2 + 8 + 0) / 4)
    assert admission_run.time_weighted_mean([], 0.0, 1.0) is None


def test_agent_hit_rates():
    rows = [
        {"conv": 0, "turn": 1, "prompt_tokens": 100, "reusable_tokens": 0, "cached_tokens": 0},
        {"conv": 0, "turn": 2, "prompt_tokens": 200, "reusable_tokens": 150, "cached_tokens": 120},
        {"conv": 1, "turn": 2, "prompt_tokens": 200, "reusable_tokens": 150, "cached_tokens": 0},
    ]
    h = admission_workloads.agent_hit_rates(rows)
    assert h["per_turn"]["1"]["hit_rate"] == 0.0 and h["per_turn"]["1"]["hit_of_reusable"] is None
    assert h["agent_hit_rate"] == pytest.approx(120 / 400)
    assert h["agent_hit_of_reusable"] == pytest.approx(120 / 300)
    assert h["agent_ideal_hit_rate"] == pytest.approx(300 / 400)


# ------------------------------------------------------------------------------- result schema


def _run(arm, rep, running, mean, retr, thr, lat, hit):
    phase = {"max_running": running, "mean_running": mean, "mean_running_step": mean,
             "frac_steps_at_cap": 1.0 if running == 16 else 0.0, "retractions": retr,
             "throughput_tok_s": thr, "latency_mean_s": lat, "prefill_tokens": 1000}
    agent = dict(phase, agent_hit_rate=hit, agent_hit_of_reusable=hit, agent_ideal_hit_rate=0.9,
                 per_turn={"1": {"hit_rate": 0.0}, "2": {"hit_rate": hit}})
    return {"arm": arm, "repeat": rep, "swa_pool_log": 1825, "no_reuse": phase, "agent": agent}


def _synthetic_result():
    m = admission_setup.plan_mapping()
    runs = []
    for rep in range(2):
        runs += [
            _run("chunk_cache", rep, 16, 9.0, 40, 100.0, 30.0, 0.0),
            _run("upstream_0.17", rep, 6, 4.0 + rep, 3, 80.0, 40.0, 0.3),
            _run("upstream_knobs_0.17", rep, 9, 6.0, 0, 90.0, 35.0, 0.4),
            _run("islands_0.17", rep, 16, 12.0, 0, 160.0 + rep, 20.0, 0.9),
            _run("islands_0.10", rep, 16, 11.0, 0, 150.0, 21.0, 0.9),
        ]
    arms = admission_report.aggregate(runs, m, 16)
    result = {"cap": 16, "arms": arms, "mapping": m}
    result["acceptance"] = admission_report.acceptance(arms, 16)
    return result


def test_aggregate_and_schema():
    result = _synthetic_result()
    admission_report.validate_result(result)
    json.loads(json.dumps(result))  # serialisable
    arms = result["arms"]
    assert arms["chunk_cache"]["ratio"] is None and arms["islands_0.17"]["ratio"] == 0.17
    assert arms["upstream_0.17"]["throughput_ratio"] == 1.0
    assert arms["islands_0.17"]["throughput_ratio"] == pytest.approx((160 / 80 + 161 / 80) / 2, abs=1e-4)
    assert arms["islands_0.17"]["latency_ratio"] == pytest.approx(0.5)
    assert arms["upstream_0.17"]["mean_running"] == pytest.approx(4.5)
    assert arms["upstream_0.17"]["spread"]["mean_running"] == [4.0, 5.0]
    assert arms["islands_0.17"]["agent_hit_rate_per_turn"] == {"1": 0.0, "2": 0.9}
    assert all(c["pass"] for c in result["acceptance"]), result["acceptance"]


def test_schema_rejects_bad_results():
    good = _synthetic_result()
    bad = json.loads(json.dumps(good))
    del bad["arms"]["islands_0.17"]["agent_hit_rate"]
    with pytest.raises(ValueError, match="missing"):
        admission_report.validate_result(bad)
    bad = json.loads(json.dumps(good))
    bad["arms"]["chunk_cache"]["ratio"] = 0.5
    with pytest.raises(ValueError, match="chunk_cache"):
        admission_report.validate_result(bad)
    with pytest.raises(ValueError, match="cap"):
        admission_report.validate_result(dict(good, cap=0))


def test_markdown_renders_from_a_synthetic_result():
    r = _synthetic_result()
    r.update(command="x", date="d", repeats=2, runtime_s=60.0, quick=True, eviction_interval=34,
             workload=dict(admission_setup.dataclasses.asdict(admission_workloads.WorkloadConfig())),
             arm_order=list(r["arms"]), png="admission_running.png")
    md = admission_report.to_markdown(r)
    assert "| `islands_0.17` |" in md and "PASS" in md and "0.10-eq" in md


def test_markdown_names_the_counters_the_run_scraped(tmp_path):
    """The eviction note names the Prometheus counters as the result records them (the run's
    own ``counters``), today's ``admission.run.COUNTERS`` for a result from before the field;
    a run writes its counters into the result."""
    r = _synthetic_result()
    r.update(command="x", date="d", repeats=2, runtime_s=60.0, quick=True, eviction_interval=34,
             workload=dict(admission_setup.dataclasses.asdict(admission_workloads.WorkloadConfig())),
             workloads=["no_reuse", "agent"], arm_order=list(r["arms"]), png=None)
    today = admission_report.to_markdown(r)
    assert "eager-freed = `sglang:swa_freed_at_commit_tokens` (SWA" in today
    assert "LRU-evicted = `sglang:evicted_tokens_total` (pressure" in today
    r["counters"] = {"island_freed_tokens": "sglang:swa_island_freed_tokens_total"}
    then = admission_report.to_markdown(r)
    assert "eager-freed = `sglang:swa_island_freed_tokens_total` (SWA" in then
    assert "LRU-evicted = `sglang:evicted_tokens_total` (pressure" in then
    assert then.replace("swa_island_freed_tokens_total", "swa_freed_at_commit_tokens") == today
    runs = [_run("upstream_0.17", 0, 6, 4.0, 3, 80.0, 40.0, 0.3),
            _run("islands_0.17", 0, 16, 12.0, 0, 160.0, 20.0, 0.9)]
    for x in runs:
        x["arm_s"] = 60.0
    meta = {k: r[k] for k in ("command", "date", "quick", "repeats", "runtime_s",
                              "eviction_interval", "workload", "workloads")}
    meta.update(arm_order=["upstream_0.17", "islands_0.17"], counters=dict(admission_run.COUNTERS))
    a = admission.parse_args(["--quick", "--json", str(tmp_path / "r.json")])
    assert admission.write_outputs(runs, meta, r["mapping"], a, tmp_path) == 0
    assert json.loads((tmp_path / "r.json").read_text())["counters"] == admission_run.COUNTERS
    del meta["counters"]  # --from-runs of a run folder from before the field
    assert admission.write_outputs(runs, meta, r["mapping"], a, tmp_path) == 0
    assert "counters" not in json.loads((tmp_path / "r.json").read_text())


@pytest.mark.parametrize("stem", ["admission", "admission_agent_while_running"])
def test_committed_runs_before_the_counter_rename_regenerate(stem):
    """Run while the eager-free counter was ``sglang:swa_island_freed_tokens_total``; the JSON
    records that name, and the markdown regenerates byte-identical from it."""
    path = pathlib.Path(_ROOT) / "benchmarks" / "results" / f"{stem}.json"
    result = json.loads(path.read_text())
    assert result["counters"]["island_freed_tokens"] == "sglang:swa_island_freed_tokens_total"
    assert admission_report.to_markdown(result) == path.with_suffix(".md").read_text()


def test_cli_help_and_plan_only():
    py = sys.executable
    out = subprocess.run([py, os.path.join(_ROOT, "benchmarks", "admission.py"), "--help"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "--quick" in out.stdout and "--repeats" in out.stdout
    out = subprocess.run([py, os.path.join(_ROOT, "benchmarks", "admission.py"), "--plan-only"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and json.loads(out.stdout)["pools"]["0.17"]["swa_pool"] == 1825


def test_model_option_reaches_the_arms_and_refuses_arms_that_do_not_serve_it(monkeypatch, tmp_path):
    """``--model gemma4``: its server arguments follow every arm's own at boot (``run_arm``
    stopped at the server's construction); the 0.5.15.post1 arms are refused by name."""
    from islands_harness import server
    from islands_harness.models import get_model

    g4 = list(get_model("gemma4").server_args)
    seen = []

    class Boot(Exception):
        pass

    def fake_server(model_dir, args, **kw):
        seen.append(list(args))
        raise Boot

    monkeypatch.setattr(server, "SglangServer", fake_server)
    a = admission.parse_args(["--quick", "--model", "gemma4", "--arms",
                              "main_0.17,main_islands_0.10"])
    a.eviction_interval = 34
    m, cpu = admission_setup.plan_mapping(), admission_setup.CpuShape()
    for n in ("main_0.17", "main_islands_0.10"):
        with pytest.raises(Boot):
            admission_run.run_arm(admission_setup.ARMS[n], 0, m, admission.workload_from_args(a),
                                  a, tmp_path, tmp_path, ["no_reuse"])
    assert seen == [admission_setup.arm_server_args(admission_setup.ARMS[n], m, cpu) + g4
                    for n in ("main_0.17", "main_islands_0.10")]
    assert admission.parse_args(["--quick"]).model == "laguna"
    with pytest.raises(SystemExit) as e:
        admission.parse_args(["--quick", "--model", "gemma4", "--arms",
                              "upstream_0.17,main_0.17,islands_0.10"])
    assert e.value.code == 2


def test_gpu_bench_script_parses_and_dry_runs():
    sh = os.path.join(_ROOT, "benchmarks", "gpu_bench.sh")
    assert subprocess.run(["bash", "-n", sh], timeout=60).returncode == 0
    out = subprocess.run(["bash", sh, "--model", "/models/m", "--dry-run", "--out", "/tmp/x"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert sum("sglang.launch_server" in l for l in lines) == 6
    assert sum("sglang.bench_serving" in l for l in lines) == 12
    assert any("--enable-swa-islands --swa-full-tokens-ratio 0.10" in l for l in lines)
    assert any("SGLANG_OPT_SWA_SPLIT_LEAF_ON_INSERT=1" in l for l in lines)
    assert any("--max-concurrency 96" in l and "--num-prompts 192" in l for l in lines)
    assert all("--max-running-requests 48" in l for l in lines if "launch_server" in l)
