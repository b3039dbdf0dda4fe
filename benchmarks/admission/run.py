"""Admission benchmark, running: one boot per arm, one phase per workload, and what a phase reads
from the server (the scheduler log slice, ``/metrics`` counters before and after, sampled gauges,
server CPU seconds).
"""

from __future__ import annotations

import pathlib
import statistics
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import _bench_path  # noqa: F401  (puts the repository root on sys.path)
from admission.setup import Arm, CpuShape, arm_env, arm_server_args
from islands_harness.speculative import mode_args
from admission.workloads import (WorkloadConfig, agent_hit_rates, agent_script, no_reuse_requests,
                                 run_agent, run_no_reuse, summarize_requests)
from islands_harness import sched_log
from islands_harness.client import POOL_FIELDS, Metrics, MetricsSampler, fetch_metrics

def summarize_log(parsed: Dict[str, Any], cap: int) -> Dict[str, Any]:
    dec, pre = parsed["decode"], parsed["prefill"]
    runs = [d["run"] for d in dec]
    out = {
        "decode_steps": len(dec),
        "prefill_batches": len(pre),
        "prefill_tokens": sum(p["new_tok"] for p in pre),
        "prefill_cached_tokens": sum(p["cached"] for p in pre),
        "max_running_log": max(runs + [p["run"] + p["new_seq"] for p in pre], default=0),
        "max_running_decode": max(runs, default=0),
        "mean_running_step": round(statistics.mean(runs), 3) if runs else 0.0,
        "frac_steps_at_cap": round(sum(r >= cap for r in runs) / len(runs), 4) if runs else 0.0,
        "retractions_log": sum(parsed["retract_events"]),
        "retraction_events_log": len(parsed["retract_events"]),
        "max_swa_used_tokens": max((d["swa_tok"] for d in dec), default=0),
        "max_swa_usage": max([d["swa_use"] for d in dec] + [p["swa_use"] for p in pre], default=0.0),
        "max_full_used_tokens": max((d["full_tok"] for d in dec), default=0),
        "max_full_usage": max([d["full_use"] for d in dec] + [p["full_use"] for p in pre], default=0.0),
        "mean_swa_usage_step": round(statistics.mean(d["swa_use"] for d in dec), 4) if dec else 0.0,
        "max_queue": max([d.get("queue", 0) for d in dec] + [p["queue"] for p in pre], default=0),
    }
    isl = [d for d in dec if "held_mean" in d]
    if isl:
        out["held_per_req_mean"] = round(statistics.mean(d["held_mean"] for d in isl), 1)
        out["held_per_req_max"] = max(d["held_max"] for d in isl)
        out["max_tombstone_tokens"] = max(d["tomb"] for d in isl)
    return out


COUNTERS = {
    "retractions": "sglang:num_retracted_requests_total",
    "evicted_tokens": "sglang:evicted_tokens_total",
    "island_freed_tokens": "sglang:swa_freed_at_commit_tokens",
    "island_reclaimed_cold_tokens": "sglang:swa_reclaimed_cold_tokens",
    "island_reclaimed_window_tokens": "sglang:swa_reclaimed_window_tokens",
    "chunk_islands": "sglang:swa_island_chunk_inserts",
    "decode_islands": "sglang:swa_island_decode_inserts",
    "cached_tokens_metric": "sglang:cached_tokens_total",
    "prompt_tokens_metric": "sglang:prompt_tokens_total",
    "generation_tokens_metric": "sglang:generation_tokens_total",
}


def counter_deltas(before: Metrics, after: Metrics,
                   counters: Optional[Dict[str, str]] = None) -> Dict[str, float]:
    """Growth of each of ``counters`` (default ``COUNTERS``; key: metric name) between two scrapes
    (summed over label sets; absent: 0)."""
    return {k: after.value(n, default=0.0) - before.value(n, default=0.0)
            for k, n in (COUNTERS if counters is None else counters).items()}


def time_weighted_mean(samples: Sequence[Tuple[float, float]], t0: float, t1: float) -> Optional[float]:
    """Mean of a step function given by (t, value) samples over [t0, t1]."""
    pts = sorted((t, v) for t, v in samples if t0 <= t <= t1)
    if not pts:
        return None
    if len(pts) == 1 or t1 <= t0:
        return pts[0][1]
    area = 0.0
    for (ta, va), (tb, _) in zip(pts, pts[1:]):
        area += va * (tb - ta)
    area += pts[-1][1] * (t1 - pts[-1][0])
    span = t1 - pts[0][0]
    return area / span if span > 0 else pts[0][1]


def log(msg: str) -> None:
    print(f"[admission {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def server_cpu_seconds(pid: Optional[int]) -> Optional[float]:
    """User + system CPU seconds of the server process tree so far (scheduler, tokenizer manager,
    detokenizer). Unlike wall time, it hardly grows when other work shares the cores, so output
    tokens per server CPU second is the throughput figure that survives a loaded machine."""
    from islands_harness.server import process_tree_cpu_seconds

    return process_tree_cpu_seconds(pid)


def run_phase(srv, name: str, cap: int, sample_interval: float,
              body: Callable[[], List[Dict[str, Any]]], *,
              extra: Optional[Callable[[Dict[str, Any], List[Dict[str, Any]]], Dict[str, Any]]] = None,
              lead_s: float = 0.5, settle_s: float = 1.5) -> Dict[str, Any]:
    """Run one workload against a booted server: requests, log slice, /metrics deltas, samples.

    ``extra(parsed_log, rows)``, when given, returns more fields for the result (after the
    ``agent`` hit rates); ``lead_s`` / ``settle_s`` are the pauses before the workload and after it
    (for the last log lines and gauges to land)."""
    time.sleep(lead_s)
    tail = sched_log.LogTail(srv.log_path)
    before = fetch_metrics(srv.base_url)
    sampler = MetricsSampler(srv.base_url, sample_interval, POOL_FIELDS).start()
    cpu0 = server_cpu_seconds(srv.pid)
    t0 = time.monotonic()
    rows = body()
    t1 = time.monotonic()
    cpu1 = server_cpu_seconds(srv.pid)
    time.sleep(settle_s)  # let the last decode/log lines and gauges land
    sampler.stop()
    after = fetch_metrics(srv.base_url)
    parsed = sched_log.parse_lines(tail.text().splitlines())
    res = summarize_requests(rows, t1 - t0)
    if cpu0 is not None and cpu1 is not None and cpu1 > cpu0:
        res["server_cpu_s"] = round(cpu1 - cpu0, 2)
        res["tok_per_cpu_s"] = round(res["output_tokens"] / (cpu1 - cpu0), 3)
    res.update(summarize_log(parsed, cap))
    res.update(counter_deltas(before, after))
    samples = [(s["t"], s["running"]) for s in sampler.samples]
    twm = time_weighted_mean(samples, t0, t1)
    res["mean_running_time"] = round(twm, 3) if twm is not None else None
    res["max_running_metrics"] = max((v for t, v in samples if t0 <= t <= t1), default=None)
    res["max_running"] = max(res["max_running_decode"], int(res["max_running_metrics"] or 0))
    res["mean_running"] = res["mean_running_time"] if twm is not None else res["mean_running_step"]
    res["series"] = [[round(s["t"] - t0, 2), s["running"], s["swa_used"]] for s in sampler.samples
                     if t0 - 0.5 <= s["t"] <= t1 + 0.5]
    res["step_running"] = [d["run"] for d in parsed["decode"]]
    res["requests"] = [{k: (round(v - t0, 3) if k in ("t_send", "t_done") else
                            round(v, 3) if isinstance(v, float) else v) for k, v in r.items()}
                       for r in rows]
    if name == "agent":
        res.update(agent_hit_rates(rows))
    if extra is not None:
        res.update(extra(parsed, rows))
    return res


def run_arm(arm: Arm, repeat: int, mapping: Dict[str, Any], cfg: WorkloadConfig, a,
            model_dir: pathlib.Path, log_dir: pathlib.Path, workloads: Sequence[str]) -> Dict[str, Any]:
    from islands_harness.main_arm import main_islands_python, main_python
    from islands_harness.server import SglangServer

    cpu = CpuShape()
    args = arm_server_args(arm, mapping, cpu, model=getattr(a, "model", "laguna"))
    args += mode_args(getattr(a, "speculative", "none"))
    env = arm_env(arm, a.eviction_interval)
    log_path = log_dir / f"{arm.name}_r{repeat}.log"
    out: Dict[str, Any] = {"arm": arm.name, "repeat": repeat, "server_args": args, "env": env,
                           "log": str(log_path)}
    t_arm = time.monotonic()
    log(f"[{arm.name} r{repeat}] booting: {' '.join(args)}"
        + (f"  env {' '.join(f'{k}={v}' for k, v in env.items())}" if env else ""))
    with SglangServer(model_dir, args, env=env, omp_threads=a.omp_threads, log_path=log_path,
                      boot_timeout_s=a.boot_timeout,
                      python=(main_python() if arm.main else
                              main_islands_python() if arm.main_islands else None)) as srv:
        out["boot_s"] = round(srv.boot_s, 1)
        boot_text = srv.log_path.read_text(errors="replace")
        out.update(sched_log.parse_boot(boot_text))
        m = fetch_metrics(srv.base_url)
        out["swa_pool"], out["full_pool"] = m.pool_tokens("swa"), m.pool_tokens("kv")
        if arm.pool_key is not None:
            want = mapping["pools"][arm.pool_key]["swa_pool"]
            if out.get("swa_pool_log", out["swa_pool"]) != want:
                log(f"[{arm.name}] WARNING: SWA pool {out.get('swa_pool_log')} != planned {want}")
        log(f"[{arm.name} r{repeat}] healthy in {srv.boot_s:.0f} s: SWA pool "
            f"{out.get('swa_pool_log', out['swa_pool'])}, full pool "
            f"{out.get('full_pool_log', out['full_pool'])} (log {log_path})")
        progress = lambda msg: log(f"[{arm.name} r{repeat}] {msg}")  # noqa: E731
        if "no_reuse" in workloads:
            reqs = no_reuse_requests(cfg)
            out["no_reuse"] = run_phase(
                srv, "no_reuse", cpu.cap, a.sample_interval,
                lambda: run_no_reuse(srv.base_url, reqs, cfg.clients, a.request_timeout, progress))
            _progress_summary(progress, "no_reuse", out["no_reuse"])
        if "agent" in workloads:
            if "no_reuse" in workloads:
                srv.flush_cache()
            convs = agent_script(cfg)
            out["agent"] = run_phase(
                srv, "agent", cpu.cap, a.sample_interval,
                lambda: run_agent(srv.base_url, convs, a.request_timeout, progress,
                                  mode=cfg.agent_mode, run_on=cfg.run_on))
            _progress_summary(progress, "agent", out["agent"])
    out["arm_s"] = round(time.monotonic() - t_arm, 1)
    return out


def _progress_summary(progress, name: str, r: Dict[str, Any]) -> None:
    extra = f", hit rate (turns>=2) {r['agent_hit_rate']:.2f}" if "agent_hit_rate" in r else ""
    progress(f"{name}: {r['wall_s']:.0f} s, running max {r['max_running']} mean "
             f"{r['mean_running']}, retractions {r['retractions']:.0f}, "
             f"{r['throughput_tok_s']:.0f} tok/s, latency {r['latency_mean_s']:.1f} s{extra}")
