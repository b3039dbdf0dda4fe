"""One arm of the seed-shape benchmark on a live server (``benchmarks/seed_shape.py``).

``run_arm`` boots the arm's server, optionally warms it up, sends every prompt at once as a
streaming ``/generate`` request, samples ``/metrics`` during the load window and stops the server;
``summarize`` turns what was measured into the arm's record (seconds, tokens, tokens/s).
"""

from __future__ import annotations

import math
import pathlib
import statistics
import sys
import time
from typing import Any, Dict, List, Optional, Sequence

from seed_shape.setup import (MIN_WINDOW_S, Arm, Profile, arm_env, make_server,
                              planned_command, server_args)

from admission import run as admission_run  # (the scheduler-log summary, time-weighted means)
from islands_harness import sched_log
from islands_harness.client import POOL_FIELDS, MetricsSampler, StreamingRequest
from islands_harness.server import ServerError


def percentile(values: Sequence[float], q: float) -> Optional[float]:
    """Nearest-rank percentile (q in (0, 100])."""
    if not values:
        return None
    s = sorted(values)
    return s[max(0, math.ceil(q / 100 * len(s)) - 1)]


SAMPLER_FIELDS = {**POOL_FIELDS, "held_mean": "sglang:swa_held_tokens_per_req_mean",
                  "held_max": "sglang:swa_held_tokens_per_req_max"}
"""Sampled every profile.sample_s: running, queue, SWA/full used, and the islands' hold gauges
(0 where the cache does not report them)."""


def summarize(arm: Arm, pool, streams: Sequence[StreamingRequest],
              generated: Sequence[int], t0: float, t_end: float, samples: List[Dict[str, float]],
              retractions: float, log_summary: Dict[str, Any]) -> Dict[str, Any]:
    """One arm's figures from what was measured (pure: the tests feed it by hand too)."""
    done = [s for s in streams if s.result is not None and s.error is None
            and s.finished_at is not None and s.finished_at <= t_end + 1e-6]
    lat = [s.finished_at - s.started_at for s in done]
    window = max(t_end - t0, 1e-9)
    win = [s for s in samples if t0 <= s["t"] <= t_end]
    run = [(s["t"], s["running"]) for s in win]
    busy = [s for s in win if s["running"] > 0]
    held_gauge = [s["held_mean"] for s in busy if s["held_mean"] > 0]
    max_running = max([s["running"] for s in win] + [log_summary.get("max_running_log", 0)],
                      default=0)
    peak_swa = max([s["swa_used"] for s in win] + [log_summary.get("max_swa_used_tokens", 0)],
                   default=0)
    out_tokens = int(sum(generated))
    return {
        "arm": arm.name,
        "ratio": arm.ratio,
        "max_total_tokens": pool.full_tokens,
        "swa_pool_plan": pool.swa_tokens,
        "requests": len(streams),
        "completed": len(done),
        "window_s": round(window, 2),
        "window_limited": len(done) < len(streams),
        "output_tokens": out_tokens,
        "output_tok_s": round(out_tokens / window, 2),
        "mean_running": (round(admission_run.time_weighted_mean(run, t0, t_end), 2)
                         if run else None),
        "max_running": int(max_running),
        # the counter is exported only once something was retracted; the log line always is
        "retractions": max(int(retractions), int(log_summary.get("retractions_log") or 0)),
        "latency_mean_s": round(statistics.mean(lat), 3) if lat else None,
        "latency_p99_s": round(percentile(lat, 99), 3) if lat else None,
        "peak_swa_used": int(peak_swa),
        "swa_held_per_running": (round(statistics.mean(s["swa_used"] / s["running"]
                                                       for s in busy), 1) if busy else None),
        "swa_held_per_req_island_gauge": (round(statistics.mean(held_gauge), 1)
                                          if held_gauge else None),
        "samples": len(win),
        "log": {k: log_summary.get(k) for k in (
            "max_running_log", "mean_running_step", "retractions_log", "max_swa_used_tokens",
            "held_per_req_mean", "held_per_req_max", "decode_steps", "prefill_tokens")},
    }


def log(msg: str) -> None:
    print(f"[seed_shape {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def run_arm(profile: Profile, arm: Arm, model_dir: pathlib.Path, pool, prompts, warm,
            out: pathlib.Path, deadline: float, load_s: float,
            python: Optional[str] = None) -> Dict[str, Any]:
    args = server_args(profile, arm, pool)
    log_path = out / f"{arm.name}.server.log"
    # a slow boot shortens this arm's window (recorded) rather than failing the arm
    boot_timeout = max(30.0, deadline - time.monotonic() - profile.stop_s - MIN_WINDOW_S)
    srv = make_server(profile, model_dir, args, arm_env(profile, arm), log_path=log_path,
                      boot_timeout_s=boot_timeout, python=python)
    record: Dict[str, Any] = {"arm": arm.name,
                              "command": planned_command(profile, model_dir, arm, pool, python),
                              "env": arm_env(profile, arm)}
    log(f"{arm.name}: booting (up to {boot_timeout:.0f} s)")
    try:
        srv.start()
    except ServerError as e:
        record["error"] = f"boot failed: {str(e)[:2000]}"
        log(f"{arm.name}: {record['error'][:300]}")
        return record
    try:
        record["boot_s"] = round(srv.boot_s, 1)
        record["boot_log"] = sched_log.parse_boot(log_path.read_text(errors="replace"))
        if warm is not None:
            t = time.monotonic()
            srv.generate(warm, 4, timeout=max(10.0, deadline - t - profile.stop_s))
            srv.flush_cache()
            record["warmup_s"] = round(time.monotonic() - t, 1)
        offset = log_path.stat().st_size
        m0 = srv.metrics()
        sampler = MetricsSampler(srv.base_url, profile.sample_s, SAMPLER_FIELDS).start()
        load_deadline = min(time.monotonic() + load_s, deadline - profile.stop_s)
        log(f"{arm.name}: healthy after {record['boot_s']} s; {len(prompts)} requests, window "
            f"up to {load_deadline - time.monotonic():.0f} s")
        t0 = time.monotonic()
        streams = [StreamingRequest(srv.base_url, p, profile.output_len, name=f"{arm.name}-{i}",
                                    timeout=load_deadline - t0 + 120).start()
                   for i, p in enumerate(prompts)]
        while time.monotonic() < load_deadline and not all(s.done.is_set() for s in streams):
            time.sleep(0.25)
        now = time.monotonic()
        all_done = all(s.done.is_set() for s in streams)
        t_end = max(s.finished_at for s in streams) if all_done else now
        generated = [s.generated() for s in streams]
        m1 = srv.metrics()
        sampler.stop()
        failed = [s for s in streams if s.done.is_set() and s.error is not None]
        with open(log_path, "rb") as f:
            f.seek(offset)
            lines = f.read().decode(errors="replace").splitlines()
        log_summary = admission_run.summarize_log(sched_log.parse_lines(lines), profile.cap)
        retr = (m1.get("sglang:num_retracted_requests_total", 0.0)
                - m0.get("sglang:num_retracted_requests_total", 0.0))
        record.update(summarize(arm, pool, streams, generated, t0, t_end,
                                sampler.samples, retr, log_summary))
        record["retractions_metric_present"] = "sglang:num_retracted_requests_total" in m1
        first = next((x for x in streams if x.result is not None), None)
        record["first_output_ids"] = list(first.result.output_ids[:16]) if first else None
        record["failed"] = len(failed)
        if failed:
            record["first_error"] = repr(failed[0].error)[:500]
        log(f"{arm.name}: {record['completed']}/{len(streams)} completed in "
            f"{record['window_s']} s, {record['output_tok_s']} tok/s, mean running "
            f"{record['mean_running']}, max {record['max_running']}, retractions "
            f"{record['retractions']}")
    except (ServerError, OSError) as e:
        record["error"] = f"load failed: {e!r}"[:2000]
        log(f"{arm.name}: {record['error'][:300]}")
    finally:
        try:
            srv.stop()
        except ServerError as e:
            record["stop_error"] = str(e)[:500]
    return record
