"""The slice on a real server: one boot per arm (stock 0.5.23 ``main``, islands ``main_islands``)
of tiny Gemma 4 on CPU at the CPU shape (window 32, page 1, chunk 512, ``--max-running-requests``
16, ``--max-total-tokens`` 65,536) and a lean SWA pool (``prefix_reuse.arms.pool_table``: the
production's ratio 0.17 or 0.10 carried to the CPU shape, so stock's SWA binds at the same share
of the cap), every request sent on its own thread at its (compressed) arrival time: one greedy
``/generate`` (temperature 0, ``ignore_eos``, so each produces exactly its output length).

Measured as one ``admission.run.run_phase``: per request the output ids and ``cached_tokens``
(``meta_info``), the running requests from ``/metrics`` (``sglang:num_running_reqs``, sampled every
``sample_interval`` seconds, time-weighted over the traffic) and from the scheduler's decode log
lines, retractions. Times in seconds, lengths in tokens.
"""

from __future__ import annotations

import concurrent.futures as cf
import pathlib
import sys
import time
from typing import Any, Dict, List, Sequence

import _bench_path  # noqa: F401  (puts the repository root and benchmarks/ on sys.path)
from admission import run as admission_run
from islands_harness import sched_log
from islands_harness.client import MetricsSampler, generate, thread_session
from prefix_reuse.arms import ARMS, CPU, server_args
from trace_replay.traces import TokenMap, TraceRequest

MODEL = "gemma4"
SERVER_ARMS = ("main", "main_islands")
"""Stock 0.5.23 and 0.5.23 with islands (``prefix_reuse.arms.ARMS``), in report order."""


def log(msg: str) -> None:
    """One progress line on stderr, ``[trace_server HH:MM:SS] msg``."""
    print(f"[trace_server {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def send_all(base_url: str, reqs: Sequence[TraceRequest], tokmap: TokenMap,
             timeout: float) -> List[Dict[str, Any]]:
    """Every request of ``reqs`` at ``t_ms`` after the call (its own thread): one row each,
    ``{i, arrival_s, t_send, t_done, latency_s, prompt_tokens, cached_tokens,
    completion_tokens, output_ids}`` (``t_*`` monotonic seconds)."""
    start = time.monotonic()
    ids = [tokmap.tokens(r) for r in reqs]

    def one(i: int) -> Dict[str, Any]:
        r = reqs[i]
        time.sleep(max(0.0, start + r.t_ms / 1000.0 - time.monotonic()))
        t0 = time.monotonic()
        g = generate(base_url, ids[i], r.output_len, timeout=timeout, session=thread_session())
        t1 = time.monotonic()
        return {"i": i, "arrival_s": r.t_ms / 1000.0, "t_send": t0, "t_done": t1,
                "latency_s": t1 - t0, "prompt_tokens": len(ids[i]),
                "cached_tokens": g.cached_tokens, "completion_tokens": g.completion_tokens,
                "output_ids": g.output_ids}

    with cf.ThreadPoolExecutor(max_workers=len(reqs)) as ex:
        return list(ex.map(one, range(len(reqs))))


QUEUE_FIELDS = {"running": "sglang:num_running_reqs", "queue": "sglang:num_queue_reqs"}


def running_while_waiting(samples: Sequence[Dict[str, float]]) -> float:
    """The time-weighted mean of ``running`` over the spans where ``queue`` > 0 (each sample
    holds until the next), as the replay's ``running_mean_waiting``; 0 when nothing waited."""
    area = span = 0.0
    for a, b in zip(samples, samples[1:]):
        if a["queue"] > 0:
            dt = b["t"] - a["t"]
            area += a["running"] * dt
            span += dt
    return round(area / span, 2) if span else 0.0


def arm_python(arm: str) -> str:
    from islands_harness.main_arm import main_islands_python, main_python

    return main_islands_python() if ARMS[arm].get("main_islands") else main_python()


def serve_arm(arm: str, pool: Dict[str, Any], reqs: Sequence[TraceRequest], tokmap: TokenMap,
              model_dir: pathlib.Path, log_dir: pathlib.Path, *, sample_interval: float = 0.25,
              omp_threads: int = 2, boot_timeout: float = 600.0,
              request_timeout: float = 1800.0) -> Dict[str, Any]:
    """Boot ``arm`` at ``pool`` (a ``pool_table`` row), send the slice, stop; the arm's record:
    the server's arguments and pools, ``summary`` (``summarize``) and ``per_request`` rows
    ``[cached_tokens, output_ids]`` in slice order, and the running series ``[t, running]``."""
    from islands_harness.server import SglangServer

    args = server_args(arm, pool, CPU, model=MODEL)
    log_path = log_dir / f"{arm}.log"
    log(f"[{arm}] booting (SWA pool {pool['swa_pool']}, ratio {pool['server_ratio']})")
    t0 = time.monotonic()
    with SglangServer(model_dir, args, env=dict(ARMS[arm]["env"]), omp_threads=omp_threads,
                      log_path=log_path, boot_timeout_s=boot_timeout,
                      python=arm_python(arm)) as srv:
        boot = sched_log.parse_boot(srv.log_path.read_text(errors="replace"))
        log(f"[{arm}] healthy in {srv.boot_s:.0f} s (SWA pool {boot.get('swa_pool_log')}, full "
            f"pool {boot.get('full_pool_log')}); sending {len(reqs)} requests")
        queued: List[Dict[str, float]] = []

        def body() -> List[Dict[str, Any]]:
            with MetricsSampler(srv.base_url, sample_interval, QUEUE_FIELDS) as smp:
                rows = send_all(srv.base_url, reqs, tokmap, request_timeout)
            queued.extend(smp.samples)
            return rows

        res = admission_run.run_phase(srv, "trace", CPU.cap, sample_interval, body)
        res["mean_running_waiting"] = running_while_waiting(queued)
        boot_s = srv.boot_s
    rows = sorted(res["requests"], key=lambda r: r["i"])
    out = {"arm": arm, "server_args": args, "env": dict(ARMS[arm]["env"]),
           "boot_s": round(boot_s, 1), "arm_wall_s": round(time.monotonic() - t0, 1),
           "swa_pool": boot.get("swa_pool_log"), "full_pool": boot.get("full_pool_log"),
           "summary": summarize(res, rows),
           "per_request": [[r["cached_tokens"], r["output_ids"]] for r in rows],
           "series": [[t, run] for t, run, _ in res["series"]]}
    s = out["summary"]
    log(f"[{arm}] {s['requests']} requests in {s['wall_s']:.0f} s: cached share "
        f"{s['cached_share']:.4f}, running mean {s['running_mean']} max {s['running_max']}, "
        f"retractions {s['retractions']}")
    return out


def summarize(res: Dict[str, Any], rows: List[Dict[str, Any]]) -> Dict[str, Any]:
    """The arm's numbers from ``run_phase``'s result: requests, tokens, cached share of input
    tokens, running requests (time-weighted mean and max over the traffic from ``/metrics``, and
    the mean over decode steps from the log), retractions, latency and wall seconds."""
    prompt = sum(r["prompt_tokens"] for r in rows)
    cached = sum(r["cached_tokens"] for r in rows)
    return {"requests": len(rows), "input_tokens": prompt, "cached_tokens": cached,
            "cached_share": round(cached / prompt, 4) if prompt else 0.0,
            "output_tokens": sum(r["completion_tokens"] for r in rows),
            "running_mean": res["mean_running"], "running_max": res["max_running"],
            "running_mean_step": res["mean_running_step"],
            "running_mean_waiting": res["mean_running_waiting"],
            "retractions": int(res["retractions"]), "prefill_tokens": res["prefill_tokens"],
            "max_swa_used_tokens": res["max_swa_used_tokens"], "max_queue": res["max_queue"],
            "latency_mean_s": res["latency_mean_s"], "latency_max_s": res["latency_max_s"],
            "wall_s": res["wall_s"], "server_cpu_s": res.get("server_cpu_s")}
