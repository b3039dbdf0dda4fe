"""Fleet benchmark, running: two workers of one arm booted at one pool, the router started in front
of them once per policy, each class sent through the router while both workers are observed.

A class's record has the fleet's figures (from the responses: requests, prompt and cached tokens,
what a cache that forgets nothing could hit) and each worker's (its own ``/metrics`` counters:
requests, prompt and cached tokens; its scheduler log slice: cached tokens again, running while
queued, retractions, peak SWA used). Responses, counters and logs are three independent counts of
the same cached tokens; the record keeps all three.
"""

from __future__ import annotations

import concurrent.futures as cf
import pathlib
import statistics
import sys
import time
from contextlib import ExitStack
from typing import Any, Callable, Dict, List, Sequence

import _bench_path  # noqa: F401  (puts the repository root and benchmarks/ on sys.path)
from admission.run import counter_deltas
from islands_harness import sched_log
from islands_harness.client import fetch_metrics
from islands_harness.main_arm import main_islands_python, main_python
from islands_harness.router import SmgRouter
from prefix_reuse.arms import ARMS, CPU, server_args, server_env
from prefix_reuse.clients import http_sender, run_class
from prefix_reuse.workloads import expected_shared_per_request, in_script_order

WORKERS = 2
"""Workers per fleet (the issue's two CPU workers; one core each on this machine)."""
ROUTER_ARGS = ("--disable-health-check",)
"""The router's probes off: sglang answers ``/health`` by generating a token, which would add
prefills to the workers' logs mid-class; the harness has checked each worker healthy at boot."""


def log(msg: str) -> None:
    """One progress line on stderr, ``[fleet HH:MM:SS] msg``."""
    print(f"[fleet {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def arm_python(arm: str):
    """The interpreter of the arm's environment (None: this one, ``.venv``)."""
    spec = ARMS[arm]
    return main_python() if spec.get("main") else main_islands_python() if spec.get("main_islands") else None


REQUEST_COUNTERS = {"requests": "sglang:num_requests_total",
                    "prompt_tokens": "sglang:prompt_tokens_total",
                    "cached_tokens": "sglang:cached_tokens_total"}
"""The worker's own counters of finished requests (both targets export these names)."""


def worker_record(lines: List[str], counted: Dict[str, float]) -> Dict[str, Any]:
    """One worker's figures for one class: ``counted`` (growth of ``REQUEST_COUNTERS`` over the
    class) and its scheduler log slice (cached tokens once more, running, retractions, SWA)."""
    parsed = sched_log.parse_lines(lines)
    pre, dec = parsed["prefill"], parsed["decode"]
    queued = [d["run"] for d in dec if d.get("queue", 0) > 0]
    return {
        "requests": int(counted["requests"]),
        "prompt_tokens": int(counted["prompt_tokens"]),
        "cached_tokens": int(counted["cached_tokens"]),
        "cached_tokens_log": sum(p["cached"] for p in pre),
        "running_while_queued": round(statistics.mean(queued), 3) if queued else None,
        "queued_steps": len(queued),
        "max_running": max([d["run"] for d in dec] + [p["run"] + p["new_seq"] for p in pre], default=0),
        "retractions": sum(parsed["retract_events"]),
        "peak_swa_used": max((d["swa_tok"] for d in dec), default=0),
    }


def fleet_record(rows: List[Dict[str, Any]], workers: List[Dict[str, Any]], wall_s: float,
                 page: int = CPU.page) -> Dict[str, Any]:
    """The fleet's figures for one class: responses summed, workers' logs combined."""
    prompt = sum(r["prompt_tokens"] for r in rows)
    cached = sum(r["cached_tokens"] for r in rows)
    expected = sum(expected_shared_per_request(in_script_order(rows), page))
    steps = sum(w["queued_steps"] for w in workers)
    rwq = (sum(w["running_while_queued"] * w["queued_steps"] for w in workers if w["queued_steps"])
           / steps if steps else None)
    return {
        "requests": len(rows),
        "prompt_tokens": prompt,
        "cached_tokens": cached,
        "cached_share": round(cached / prompt, 4) if prompt else 0.0,
        "expected_shared_tokens": expected,
        "expected_share": round(expected / prompt, 4) if prompt else 0.0,
        "cached_tokens_workers": sum(w["cached_tokens"] for w in workers),
        "cached_tokens_log": sum(w["cached_tokens_log"] for w in workers),
        "running_while_queued": round(rwq, 3) if rwq is not None else None,
        "retractions": sum(w["retractions"] for w in workers),
        "requests_per_worker": [w["requests"] for w in workers],
        "wall_s": round(wall_s, 1),
        "workers": workers,
    }


def run_class_through(router: SmgRouter, servers: Sequence[Any], cls: str, script: Any, a,
                      settle_s: float) -> Dict[str, Any]:
    """Flush every worker, send ``cls`` through the router, read each worker's log slice."""
    for s in servers:
        s.flush_cache()
    time.sleep(a.lead)
    tails = [sched_log.LogTail(s.log_path) for s in servers]
    before = [fetch_metrics(s.base_url) for s in servers]
    send = http_sender(router.base_url, a.request_timeout)
    t0 = time.monotonic()
    rows = run_class(cls, script, send, lambda m: None, base_url=router.base_url,
                     timeout=a.request_timeout)
    wall = time.monotonic() - t0
    time.sleep(settle_s)  # the last decode lines land
    workers = [worker_record(t.text().splitlines(),
                             counter_deltas(b, fetch_metrics(s.base_url), REQUEST_COUNTERS))
               for t, b, s in zip(tails, before, servers)]
    return fleet_record(rows, workers, wall)


def run_fleet(arm: str, pool_name: str, pool: Dict[str, Any], policies: Sequence[str],
              scripts: Dict[str, Any], classes: Sequence[str], a, model_dir: pathlib.Path,
              log_dir: pathlib.Path, on_class: Callable[[str, str, Dict[str, Any]], None] = lambda *x: None
              ) -> Dict[str, Any]:
    """Boot ``WORKERS`` workers of ``arm`` at ``pool``; per policy a router and every class."""
    from islands_harness.server import SglangServer

    args, env = server_args(arm, pool), server_env(arm, a.eviction_interval)
    out: Dict[str, Any] = {"arm": arm, "pool": pool_name, "server_args": args, "env": env,
                           "policies": {}}
    t0 = time.monotonic()
    tag = f"[{arm} @{pool_name}]"
    log(f"{tag} booting {WORKERS} workers (SWA pool {pool['swa_pool']} each)")
    with ExitStack() as stack:
        servers = [SglangServer(model_dir, args, env=env, omp_threads=a.omp_threads,
                                boot_timeout_s=a.boot_timeout, python=arm_python(arm),
                                log_path=log_dir / f"{arm}_{pool_name}_w{i}.log")
                   for i in range(WORKERS)]
        for s in servers:
            stack.callback(s.stop)
        with cf.ThreadPoolExecutor(max_workers=WORKERS) as ex:  # boots at once, one core each
            list(ex.map(lambda s: s.start(), servers))
        out["worker_urls"] = [s.base_url for s in servers]
        boot = [sched_log.parse_boot(s.log_path.read_text(errors="replace")) for s in servers]
        out["swa_pool_log"] = [b.get("swa_pool_log") for b in boot]
        log(f"{tag} workers {', '.join(out['worker_urls'])} healthy (SWA pools {out['swa_pool_log']})")
        for policy in policies:
            with SmgRouter(out["worker_urls"], policy,
                           log_path=log_dir / f"router_{arm}_{pool_name}_{policy}.log",
                           extra_args=ROUTER_ARGS) as router:
                log(f"{tag} router {policy} at {router.base_url}")
                recs = out["policies"].setdefault(policy, {})
                for cls in classes:
                    recs[cls] = run_class_through(router, servers, cls, scripts[cls], a, a.settle)
                    on_class(policy, cls, recs[cls])
    out["fleet_s"] = round(time.monotonic() - t0, 1)
    return out
