"""Prefix reuse benchmark, running: one server boot per (arm, pool), the classes in order on it
with ``/flush_cache`` between them, each class measured as one ``admission.run.run_phase``, and
the per-class record it yields (cached tokens against the expected hits, running requests while
queued, retractions, SWA used and held, CPU seconds).
"""

from __future__ import annotations

import pathlib
import statistics
import sys
import time
from typing import Any, Dict, List, Sequence

import _bench_path  # noqa: F401  (puts the repository root and benchmarks/ on sys.path)
from admission import run as admission_run
from islands_harness import sched_log
from islands_harness.main_arm import main_islands_python, main_python
from islands_harness.speculative import mode_args
from prefix_reuse.arms import ARMS, CPU, ISLAND_ARMS, server_args, server_env
from prefix_reuse.clients import http_sender, run_class
from prefix_reuse.report import fmt_or_dash
from prefix_reuse.workloads import expected_shared_per_request, in_script_order


def class_extra(parsed: Dict[str, Any], rows: List[Dict[str, Any]], page: int = CPU.page) -> Dict[str, Any]:
    """run_phase's ``extra`` hook: expected hits, running while queued, per-request SWA."""
    per_exp = expected_shared_per_request(in_script_order(rows), page)
    dec = parsed["decode"]
    queued = [d["run"] for d in dec if d.get("queue", 0) > 0]
    per_run = [d["swa_tok"] / d["run"] for d in dec if d["run"] > 0]
    ordered = sorted(rows, key=lambda r: tuple(r["order"]))
    return {
        "expected_shared_tokens": sum(per_exp),
        # [order, prompt tokens, cached tokens, expected shared] per request, in script order
        "per_request": [[r["order"], r["prompt_tokens"], r["cached_tokens"], e]
                        for r, e in zip(ordered, per_exp)],
        "mean_running_queued": round(statistics.mean(queued), 3) if queued else None,
        "queued_steps": len(queued),
        "max_swa_used_per_running": round(max(per_run), 1) if per_run else None,
    }


def finish_class(res: Dict[str, Any], islands: bool) -> Dict[str, Any]:
    """run_phase's result -> the per-class record (the issue's keys first)."""
    n = res["n_requests"]
    prompt, cached = res["prompt_tokens"], res["cached_tokens"]
    exp = res["expected_shared_tokens"]
    cpu_s = res.get("server_cpu_s")
    rec = {
        "requests": n,
        "cached_tokens": cached,
        "cached_share": round(cached / prompt, 4) if prompt else 0.0,
        "prefill_tokens": res["prefill_tokens"],
        "mean_running": res["mean_running"],
        "max_running": res["max_running"],
        "retractions": int(res["retractions"]),
        "peak_swa_used": res["max_swa_used_tokens"],
        "max_swa_held_per_running_req": res.get("held_per_req_max") if islands else None,
        "expected_shared_tokens": exp,
        "expected_share": round(exp / prompt, 4) if prompt else 0.0,
        "cached_of_expected": round(cached / exp, 4) if exp else None,
        "prompt_tokens": prompt,
        "output_tokens": res["output_tokens"],
        "mean_running_step": res["mean_running_step"],
        "mean_running_queued": res["mean_running_queued"],
        "queued_steps": res["queued_steps"],
        "frac_steps_at_cap": res["frac_steps_at_cap"],
        "decode_steps": res["decode_steps"],
        "wall_s": res["wall_s"],
        "server_cpu_s": cpu_s,
        "tok_per_cpu_s": res.get("tok_per_cpu_s"),
        "req_per_cpu_s": round(n / cpu_s, 4) if cpu_s else None,
        "max_swa_used_per_running": res["max_swa_used_per_running"],
        "held_per_req_mean": res.get("held_per_req_mean") if islands else None,
        "evicted_tokens": res.get("evicted_tokens"),
        "island_freed_tokens": res.get("island_freed_tokens"),
        "island_reclaimed_cold_tokens": res.get("island_reclaimed_cold_tokens"),
        "island_reclaimed_window_tokens": res.get("island_reclaimed_window_tokens"),
        "retractions_log": res.get("retractions_log"),
        "latency_mean_s": res["latency_mean_s"],
        "throughput_tok_s": res["throughput_tok_s"],
    }
    if "agent_hit_rate" in res:
        rec["agent_hit_rate"] = res["agent_hit_rate"]
    return rec


HOST_COUNTERS = {  # record key: (/metrics counter, labels)
    "host_hit_tokens": ("sglang:cached_tokens_total", {"cache_source": "host"}),
    "backup_kv_tokens": ("sglang:hicache_backup_tokens_total", {"pool": "kv"}),
    "backup_swa_tokens": ("sglang:hicache_backup_tokens_total", {"pool": "swa"}),
    "load_back_kv_tokens": ("sglang:load_back_tokens_total", {"pool": "kv"}),
    "load_back_swa_tokens": ("sglang:load_back_tokens_total", {"pool": "swa"}),
}
"""HiCache's host<->device traffic, per class as the counters' growth over it."""


def host_counters(base_url: str) -> Dict[str, float]:
    from islands_harness.client import fetch_metrics

    m = fetch_metrics(base_url)
    return {k: m.value(name, labels, default=0.0) for k, (name, labels) in HOST_COUNTERS.items()}


def host_traffic(before: Dict[str, float], after: Dict[str, float], cached: int) -> Dict[str, Any]:
    """The counters' growth over a class, and the tokens moved between device and host (backups
    plus loads, both pools) per cached token."""
    out: Dict[str, Any] = {k: int(after[k] - before[k]) for k in HOST_COUNTERS}
    moved = sum(v for k, v in out.items() if k != "host_hit_tokens")
    out["host_traffic_per_hit_token"] = round(moved / cached, 3) if cached else None
    return out


def log(msg: str) -> None:
    """One progress line on stderr, ``[prefix_reuse HH:MM:SS] msg``."""
    print(f"[prefix_reuse {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def run_boot(arm: str, pool_name: str, pool: Dict[str, Any], scripts: Dict[str, Any],
             classes: Sequence[str], a, model_dir: pathlib.Path, log_dir: pathlib.Path) -> Dict[str, Any]:
    """One server boot: the classes in order, the cache flushed between them."""
    from islands_harness.server import SglangServer

    args = server_args(arm, pool, model=getattr(a, "model", "laguna"))
    args += mode_args(getattr(a, "speculative", "none"))
    env = server_env(arm, a.eviction_interval)
    tag = f"[{arm} @{pool_name}]"
    log_path = log_dir / f"{arm}_{pool_name}.log"
    out: Dict[str, Any] = {"arm": arm, "pool": pool_name, "server_args": args, "env": env,
                           "log": str(log_path), "classes": {}}
    t0 = time.monotonic()
    log(f"{tag} booting (SWA pool {pool['swa_pool']}, ratio {pool['server_ratio']})"
        + (f", env {' '.join(f'{k}={v}' for k, v in env.items())}" if env else ""))
    islands = arm in ISLAND_ARMS
    python = (main_python() if ARMS[arm].get("main") else
              main_islands_python() if ARMS[arm].get("main_islands") else None)
    with SglangServer(model_dir, args, env=env, omp_threads=a.omp_threads, log_path=log_path,
                      boot_timeout_s=a.boot_timeout, python=python) as srv:
        out["boot_s"] = round(srv.boot_s, 1)
        out.update(sched_log.parse_boot(srv.log_path.read_text(errors="replace")))
        if out.get("swa_pool_log") not in (None, pool["swa_pool"]):
            log(f"{tag} WARNING: SWA pool {out['swa_pool_log']} != planned {pool['swa_pool']}")
        log(f"{tag} healthy in {srv.boot_s:.0f} s (SWA pool {out.get('swa_pool_log')})")
        send = http_sender(srv.base_url, a.request_timeout)
        for i, cls in enumerate(classes):
            if i:
                srv.flush_cache()
            script = scripts[cls]
            body = lambda: run_class(cls, script, send, lambda m: None,  # noqa: E731
                                     base_url=srv.base_url, timeout=a.request_timeout)
            hicache = ARMS[arm].get("hicache", False)
            before = host_counters(srv.base_url) if hicache else None
            res = admission_run.run_phase(srv, "agent" if cls == "agents" else cls, CPU.cap,
                                          a.sample_interval, body, extra=class_extra,
                                          lead_s=a.lead, settle_s=a.settle)
            rec = finish_class(res, islands)
            if hicache:
                rec.update(host_traffic(before, host_counters(srv.base_url), rec["cached_tokens"]))
            out["classes"][cls] = rec
            out.setdefault("series", {})[cls] = res.get("series")
            out.setdefault("per_request", {})[cls] = res.get("per_request")
            q = rec["mean_running_queued"]
            log(f"{tag} {cls}: {rec['requests']} req in {rec['wall_s']:.0f} s; cached share "
                f"{rec['cached_share']:.3f} (expected {rec['expected_share']:.3f}); running mean "
                f"{fmt_or_dash(rec['mean_running'])}, while queued {fmt_or_dash(q)}, "
                f"max {rec['max_running']}; "
                f"retractions {rec['retractions']}; peak SWA used {rec['peak_swa_used']}")
    out["boot_total_s"] = round(time.monotonic() - t0, 1)
    return out
