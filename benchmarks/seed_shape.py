#!/usr/bin/env python3
"""The seed's headline shape on a GPU with nothing downloaded: Gemma 4 26B-A4B (text) with dummy
weights, fp8 KV, page 64, chunk 16384, cap 48, at the seed's pool sizes; upstream vs islands.

    python benchmarks/seed_shape.py --dry-run                 # the exact commands, nothing run
    python benchmarks/seed_shape.py --out DIR --budget 330    # on a GPU (scripts/gpu_check.sh)
    python benchmarks/seed_shape.py --profile cpu-tiny --arms islands_0.17 --out DIR   # CPU smoke

What runs
---------
The model directory holds only ``config.json`` (``scripts/gpu_seed_model.py``: the published
26B-A4B text config, sources in its docstring); the server builds random weights from it
(``--load-format dummy``) and never loads a tokenizer (``--skip-tokenizer-init``): prompts are
token ids. Admission, pool sizes and throughput do not depend on the weights' values. One server
boot per arm, through ``islands_harness.server.SglangServer`` (its port reservation, health wait
and process-group stop; on a GPU without the CPU argument set). Arms, in priority order (an arm
starts only while the budget has room for it):

  upstream_0.17        --swa-full-tokens-ratio 0.17 (the seed's lean ratio, stock cache)
  islands_0.17         + --enable-swa-islands
  upstream_0.32        --swa-full-tokens-ratio 0.32 (the ratio before islands)
  upstream_knobs_0.17  0.17 + upstream's two SWA knobs (islands_harness.knobs)

Pools: the H200 has more memory than the seed's H100, so ``--max-total-tokens`` pins each arm to
what the seed's 37 GB KV budget gives at its ratio, from the planner (``islands_tools.pool_plan``,
the formulas ``scripts/swa_pool_plan.py`` prints; the seed's bytes per token: full 9.5 KB, SWA
95 KB, EAGLE draft 10.24 KB, as in README and benchmarks/admission_setup.py ``Production``):
T = 1,030,912 tokens at 0.17 (SWA pool 175,232) and 737,920 at 0.32 (SWA pool 236,096). The
server then splits T exactly as the seed's did (full = T, SWA = floor_64(T x r)). This config's
own KV is 10.24 KB full + 102.4 KB SWA per token at fp8 (no draft model here); the token counts,
not the bytes, are what admission sees.

Offered load (identical in every arm: the same seeded token ids, all sent at once as streaming
``/generate`` requests through ``islands_harness.client.StreamingRequest``, greedy,
``ignore_eos``): 96 requests of 24,576 input and 256 output tokens. Why these:
  - 96 = 2x the cap, so the queue never drains while the first requests run (the seed's
    pool-bound concurrency);
  - 24,576 = 1.5 chunks: every prompt takes two prefill chunks (16,384 + 8,192), and upstream's
    SWA lock then covers the whole last chunk node, 8,192 tokens per running request, so at 0.17
    (175,232 SWA tokens) upstream binds near 175,232 / 8,192 = 21 running, the seed's measured
    figure, while islands hold w + p = 1,088 and can reach the cap. A prompt of exactly two chunks
    would bind upstream near 10.7 (the planner's ``H = cp`` case), one barely over one chunk would
    not bind it at all;
  - 256 output tokens: with 96 x 24,576 = 2.36 M prompt tokens, prefill is most of an arm's work;
    at an estimated 30-50 k prompt tokens/s on an H200 (not measured here) that is 50-80 s, and
    256 decode steps per wave add 5-10 s, so an arm, boot (~60 s, estimated) and a warm-up
    included, fits in about three minutes. Longer outputs (the seed ran 16 k with EAGLE) make the
    throughput gap larger and do not fit. So the running-request and hold figures are the ones to
    compare with the seed's; throughput and latency are this prefill-heavy shape's.
Each arm's measurement window is the same length (``--load-s``); if the load has not finished by
then, the window closes there, the server is stopped, and the tables say how many requests
completed (throughput counts every streamed token in the window; latency only completed requests).

Per arm (measured from the server, not predicted): running requests (``sglang:num_running_reqs``
sampled every ``sample_s``: time-weighted mean, max with the scheduler log's), retractions
(``sglang:num_retracted_requests_total`` delta, which exists only once there was one, and the
scheduler log's ``#retracted_reqs``), output tokens/s (streamed tokens / window),
mean / p99 end-to-end latency, peak SWA used (``sglang:swa_used_tokens`` and the decode log),
SWA held per running request (``swa_used / running`` over the samples, for every arm; it
includes the SWA of a chunk being prefilled; islands also report their own
``sglang:swa_held_tokens_per_req_mean``, locked tree + request-owned SWA of decoding requests). Then a table of each arm / upstream_0.17
with the seed's ratios beside it. Files in ``--out``: ``<arm>.server.log``, ``seed_shape.json``,
``seed_shape.md`` (rewritten after every arm, so a run cut short keeps what it measured).

``--profile cpu-tiny`` is the same script on the CPU test server with the tiny variant of the
config (``gpu_seed_model.py --size tiny``), its own planner pools (the tiny config's fp32 bytes
per token, a 24 MB budget), a few requests; test/tools/test_gpu_seed_shape.py runs it.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import math
import pathlib
import random
import shlex
import statistics
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

ROOT = pathlib.Path(__file__).resolve().parent.parent
for _p in (ROOT, ROOT / "benchmarks", ROOT / "scripts"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

import admission_run  # noqa: E402  (the scheduler-log summary, time-weighted means)
import admission_setup  # noqa: E402  (the seed deployment, the knobs)
import gpu_seed_model  # noqa: E402  (scripts/gpu_seed_model.py)
from islands_harness import sched_log  # noqa: E402
from islands_harness.client import POOL_FIELDS, MetricsSampler, StreamingRequest  # noqa: E402
from islands_harness.server import (  # noqa: E402
    ServerError,
    SglangServer,
    raise_keyboard_interrupt_on_signals,
)
from islands_tools import pool_plan as plan  # noqa: E402

# The seed's headline (H100-80GB, real weights, EAGLE, 32k-in / 16k-out; issue 13).
SEED_FIGURES = {
    "upstream_0.17": {"mean_running": 21, "output_tok_s": 3995},
    "islands_0.17": {"mean_running": 46, "output_tok_s": 5695},
    "mean_latency_ratio": 0.63,
    "retractions": 0,
}
BASELINE = "upstream_0.17"
MIN_WINDOW_S = 30.0  # an arm whose boot leaves less than this for its load window is not measured
PROMPT_SEED = 20261202


@dataclasses.dataclass(frozen=True)
class Arm:
    name: str
    ratio: float
    args: Tuple[str, ...] = ()
    env: Tuple[Tuple[str, str], ...] = ()


ARMS: Dict[str, Arm] = {a.name: a for a in (
    Arm("upstream_0.17", 0.17),
    Arm("islands_0.17", 0.17, ("--enable-swa-islands",)),
    Arm("upstream_0.32", 0.32),
    Arm("upstream_knobs_0.17", 0.17, (), tuple(sorted(admission_setup.KNOBS_ENV.items()))),
)}
PRIORITY = list(ARMS)


@dataclasses.dataclass(frozen=True)
class Profile:
    name: str
    model_size: str           # scripts/gpu_seed_model.py --size
    device: str               # "cuda": the caller's full argument list; "cpu": SglangServer's
    kv: str                   # "seed": the seed deployment's bytes per token; "config": the model's
    kv_dtype: str             # with kv == "config"
    budget_bytes: float       # KV bytes the planner sizes the pools from
    page: int
    chunk: int
    cap: int
    requests: int
    input_len: int
    output_len: int
    arm_s: float              # one arm at most: boot + warm-up + load window + stop
    load_s: float             # the load window, the same in every arm
    sample_s: float
    decode_log_interval: int
    warmup: bool
    server_args: Tuple[str, ...]
    env: Tuple[Tuple[str, str], ...] = ()
    stop_s: float = 25.0      # kept for stopping the server inside the arm's time


PROFILES: Dict[str, Profile] = {p.name: p for p in (
    Profile(
        name="h200", model_size="full", device="cuda", kv="seed", kv_dtype="fp8",
        budget_bytes=admission_setup.Production.budget_bytes, page=64, chunk=16384, cap=48,
        requests=96, input_len=24576, output_len=256, arm_s=165.0, load_s=85.0, sample_s=0.5,
        decode_log_interval=20, warmup=True,
        server_args=(
            "--load-format", "dummy", "--skip-tokenizer-init",
            "--dtype", "bfloat16", "--kv-cache-dtype", "fp8_e4m3",
            # Gemma 4 on Hopper: SGLang accepts only triton (trtllm_mha is SM100-only)
            "--attention-backend", "triton",
            # what an offline bundle has (no flashinfer, no grammar backend); harmless elsewhere
            "--sampling-backend", "pytorch", "--grammar-backend", "none",
            # decode CUDA graphs up to the cap; no prefill graphs (16k chunks gain nothing from
            # them, and capturing 45 token counts of a 30-layer MoE costs boot time)
            "--cuda-graph-max-bs-decode", "48", "--disable-prefill-cuda-graph",
            "--skip-server-warmup", "--random-seed", "0",
        ),
        env=(("SGLANG_USE_CPU_ENGINE", "0"),),
    ),
    Profile(
        name="cpu-tiny", model_size="tiny", device="cpu", kv="config", kv_dtype="fp32",
        budget_bytes=24e6, page=16, chunk=256, cap=8,
        requests=4, input_len=384, output_len=4, arm_s=170.0, load_s=100.0, sample_s=1.0,
        decode_log_interval=1, warmup=False,
        server_args=(
            "--load-format", "dummy", "--skip-tokenizer-init",
            # SGLang 0.5.15.post1 serves Gemma 4 only on triton attention (CPU: the Triton
            # interpreter, TRITON_INTERPRET=1); it overrides BASE_ARGS' torch_native
            "--attention-backend", "triton",
        ),
        env=(("TRITON_INTERPRET", "1"),),
        stop_s=20.0,
    ),
)}


# ----------------------------------------------------------------------------- plan


def kv_cost(profile: Profile, model_dir: Optional[pathlib.Path]):
    """Bytes per token the pools are sized from, and a line saying where they came from."""
    if profile.kv == "seed":
        p = admission_setup.Production()
        return (plan.KVBytesPerToken(full=p.full_bytes, swa=p.swa_bytes, draft=p.draft_bytes),
                f"the seed deployment: full {p.full_bytes:.0f} B, SWA {p.swa_bytes:.0f} B, draft "
                f"{p.draft_bytes:.0f} B per token (benchmarks/admission_setup.py Production)")
    layout = plan.kv_layout_from_shape(plan.read_model_shape(str(model_dir)), profile.kv_dtype)
    return layout, (f"{model_dir} ({profile.kv_dtype}): {layout.full_layers} full x "
                    f"{layout.full_bytes_per_layer} B + {layout.swa_layers} SWA x "
                    f"{layout.swa_bytes_per_layer} B per token")


def planner_command(profile: Profile, model_dir: Optional[pathlib.Path], ratios) -> List[str]:
    """The scripts/swa_pool_plan.py command that prints the same pools."""
    window = str(gpu_seed_model.SIZES[profile.model_size]["sliding_window"])
    if profile.kv == "seed":
        p = admission_setup.Production()
        src = ["--full-bytes-per-token", f"{p.full_bytes:.0f}", "--swa-bytes-per-token",
               f"{p.swa_bytes:.0f}", "--draft-bytes-per-token", f"{p.draft_bytes:.0f}",
               "--window", window]
    else:
        src = ["--model-config", str(model_dir), "--kv-dtype", profile.kv_dtype]
    return ["scripts/swa_pool_plan.py", *src, "--budget", f"{profile.budget_bytes:.0f}",
            "--page", str(profile.page), "--chunk", str(profile.chunk), "--max-running",
            str(profile.cap), "--ratios", ",".join(f"{r:.2f}" for r in sorted(ratios)), "--json"]


def arm_pools(profile: Profile, model_dir: Optional[pathlib.Path], ratios) -> Dict[float, Any]:
    kv, _ = kv_cost(profile, model_dir)
    return {r: plan.solve_pool_sizes(kv, profile.budget_bytes, r, profile.page) for r in ratios}


# ----------------------------------------------------------------------------- commands


def server_args(profile: Profile, arm: Arm, pool) -> List[str]:
    return [*profile.server_args,
            "--page-size", str(profile.page), "--chunked-prefill-size", str(profile.chunk),
            "--max-running-requests", str(profile.cap),
            "--max-total-tokens", str(pool.full_tokens),
            "--swa-full-tokens-ratio", f"{arm.ratio:.2f}",
            "--enable-metrics", "--decode-log-interval", str(profile.decode_log_interval),
            *arm.args]


def arm_env(profile: Profile, arm: Arm) -> Dict[str, str]:
    return {**dict(profile.env), **dict(arm.env)}


class DeviceServer(SglangServer):
    """SglangServer's lifecycle with the caller's whole argument list: none of the CPU test
    server's BASE_ARGS (--device cpu, torch_native, fp32, no CUDA graphs)."""

    def command(self) -> List[str]:
        return [self.python, "-m", "sglang.launch_server", "--model-path", self.model_path,
                "--host", self.host, "--port", str(self.port), *self.extra_args]


def make_server(profile: Profile, model_dir, args, env, **kw) -> SglangServer:
    cls = DeviceServer if profile.device == "cuda" else SglangServer
    return cls(model_dir, args, env=env, omp_threads=4 if profile.device == "cuda" else 2, **kw)


def planned_command(profile: Profile, model_dir, arm: Arm, pool) -> List[str]:
    """The exact argv an arm's server runs, with ``$PORT`` for the port it is given at boot."""
    srv = make_server(profile, model_dir, server_args(profile, arm, pool), arm_env(profile, arm))
    srv.port = "$PORT"  # command() only formats it
    return srv.command()


# ----------------------------------------------------------------------------- workload


def make_prompts(seed: int, n: int, length: int, vocab: int) -> List[List[int]]:
    """``n`` prompts of ``length`` token ids in [4, vocab) (ids 0-3: pad, eos, bos, unk)."""
    rng = random.Random(seed)
    return [[rng.randrange(4, vocab) for _ in range(length)] for _ in range(n)]


def prompts_digest(prompts: Sequence[Sequence[int]]) -> str:
    h = hashlib.sha256()
    for p in prompts:
        h.update(json.dumps(list(p)).encode())
        h.update(b"\n")
    return h.hexdigest()[:16]


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


# ----------------------------------------------------------------------------- one arm


def log(msg: str) -> None:
    print(f"[seed_shape {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def run_arm(profile: Profile, arm: Arm, model_dir: pathlib.Path, pool, prompts, warm,
            out: pathlib.Path, deadline: float, load_s: float) -> Dict[str, Any]:
    args = server_args(profile, arm, pool)
    log_path = out / f"{arm.name}.server.log"
    # a slow boot shortens this arm's window (recorded) rather than failing the arm
    boot_timeout = max(30.0, deadline - time.monotonic() - profile.stop_s - MIN_WINDOW_S)
    srv = make_server(profile, model_dir, args, arm_env(profile, arm), log_path=log_path,
                      boot_timeout_s=boot_timeout)
    record: Dict[str, Any] = {"arm": arm.name,
                              "command": planned_command(profile, model_dir, arm, pool),
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


# ----------------------------------------------------------------------------- tables


def _f(x, nd=1) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:,.{nd}f}"
    return f"{x:,}" if isinstance(x, int) else str(x)


def _ratio(a, b) -> str:
    return f"{a / b:.3f}" if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b else "-"


def tables(result: Dict[str, Any]) -> str:
    rows = [r for r in result["arms"] if "error" not in r]
    out = [f"### Seed shape ({result['profile']}): {result['model']}", "",
           f"{result['workload_line']}", "",
           "| arm | ratio | --max-total-tokens | SWA pool | boot s | completed | window s | "
           "output tok/s | mean running | max running | retractions | mean E2E s | p99 E2E s | "
           "peak SWA used | SWA held / running req | islands' held gauge |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        pool = r.get("boot_log", {}).get("swa_pool_log", r["swa_pool_plan"])
        out.append(
            f"| {r['arm']} | {r['ratio']:.2f} | {_f(r['max_total_tokens'])} | {_f(pool)} | "
            f"{_f(r.get('boot_s'))} | {r['completed']}/{r['requests']} | {_f(r['window_s'])} | "
            f"{_f(r['output_tok_s'], 0 if r['output_tok_s'] >= 100 else 2)} | "
            f"{_f(r['mean_running'])} | {_f(r['max_running'])} | "
            f"{_f(r['retractions'])} | {_f(r['latency_mean_s'], 2)} | {_f(r['latency_p99_s'], 2)} | "
            f"{_f(r['peak_swa_used'])} | {_f(r['swa_held_per_running'], 0)} | "
            f"{_f(r['swa_held_per_req_island_gauge'], 0)} |")
    for r in result["arms"]:
        if "error" in r:
            out.append(f"| {r['arm']} | ERROR: {r['error'][:160]} |")
    for name, why in result.get("skipped", []):
        out.append(f"| {name} | not run: {why} |")
    base = next((r for r in rows if r["arm"] == BASELINE), None)
    if base is not None and len(rows) > 1:
        out += ["", f"Each arm / {BASELINE} (the seed: H100, real weights, EAGLE, 32k in / 16k out):",
                "", "| arm | mean running x | max running x | output tok/s x | mean E2E x | "
                "p99 E2E x | SWA held / running req x |", "|---|---|---|---|---|---|---|"]
        for r in rows:
            if r is base:
                continue
            out.append(
                f"| {r['arm']} / {BASELINE} | {_ratio(r['mean_running'], base['mean_running'])} | "
                f"{_ratio(r['max_running'], base['max_running'])} | "
                f"{_ratio(r['output_tok_s'], base['output_tok_s'])} | "
                f"{_ratio(r['latency_mean_s'], base['latency_mean_s'])} | "
                f"{_ratio(r['latency_p99_s'], base['latency_p99_s'])} | "
                f"{_ratio(r['swa_held_per_running'], base['swa_held_per_running'])} |")
        s = SEED_FIGURES
        out.append(
            f"| seed: islands_0.17 / {BASELINE} | "
            f"{_ratio(s['islands_0.17']['mean_running'], s['upstream_0.17']['mean_running'])} | - | "
            f"{_ratio(s['islands_0.17']['output_tok_s'], s['upstream_0.17']['output_tok_s'])} | "
            f"{s['mean_latency_ratio']:.3f} | - | - |")
    if any(r.get("window_limited") for r in rows):
        out += ["", "Window-limited arms: the load had not finished when the window closed; "
                "throughput counts every token streamed in the window, latency only the "
                "completed requests."]
    out += ["", "Commands: `seed_shape.json` (`arms[].command`, `arms[].env`); planner: `"
            + shlex.join(result["planner_command"]) + "`."]
    return "\n".join(out)


# ----------------------------------------------------------------------------- main


def parse_args(argv=None):
    ap = argparse.ArgumentParser(prog="benchmarks/seed_shape.py",
                                 description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", choices=sorted(PROFILES), default="h200")
    ap.add_argument("--arms", default=",".join(PRIORITY),
                    help=f"comma list, run in this order while the budget allows (default: "
                         f"{','.join(PRIORITY)})")
    ap.add_argument("--out", default=None, help="results directory (default "
                    ".work/seed_shape/<timestamp>; scripts/gpu_check.sh names one)")
    ap.add_argument("--model-dir", default=None, help="where the config-only model is written "
                    "(default OUT/model)")
    ap.add_argument("--budget", type=float, default=None,
                    help="seconds for the whole run; arms that no longer fit are not started")
    ap.add_argument("--arm-s", type=float, default=None, help="seconds one arm may take at most "
                    "(default: the profile's, or less so the first two arms fit the budget)")
    ap.add_argument("--load-s", type=float, default=None,
                    help="the load window of every arm (default: the profile's)")
    ap.add_argument("--requests", type=int, default=None)
    ap.add_argument("--input-len", type=int, default=None)
    ap.add_argument("--output-len", type=int, default=None)
    ap.add_argument("--seed", type=int, default=PROMPT_SEED, help="prompt seed (every arm)")
    ap.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    a = ap.parse_args(argv)
    arms = [x for x in a.arms.split(",") if x]
    bad = [x for x in arms if x not in ARMS]
    if bad or not arms:
        ap.error(f"unknown arm(s) {bad}; known: {', '.join(ARMS)}")
    a.arm_list = arms
    prof = PROFILES[a.profile]
    changes = {k: v for k, v in (("requests", a.requests), ("input_len", a.input_len),
                                 ("output_len", a.output_len), ("load_s", a.load_s),
                                 ("arm_s", a.arm_s)) if v is not None}
    a.prof = dataclasses.replace(prof, **changes)
    if a.prof.input_len <= a.prof.chunk:
        ap.error(f"--input-len {a.prof.input_len} fits in one chunk ({a.prof.chunk}); the seed "
                 f"shape needs prompts of at least two chunks")
    return a


def main(argv=None) -> int:
    a = parse_args(argv)
    prof: Profile = a.prof
    out = pathlib.Path(a.out or ROOT / ".work" / "seed_shape" / time.strftime("%Y%m%d-%H%M%S"))
    model_dir = pathlib.Path(a.model_dir) if a.model_dir else out / "model"
    if a.dry_run and prof.kv == "config" and not (model_dir / "config.json").is_file():
        model_dir = pathlib.Path(tempfile.mkdtemp(prefix="seed-shape-model-"))
    if not a.dry_run or prof.kv == "config":
        gpu_seed_model.build(prof.model_size, model_dir)
    ratios = sorted({ARMS[n].ratio for n in a.arm_list})
    pools = arm_pools(prof, model_dir, ratios)
    _, kv_src = kv_cost(prof, model_dir)
    vocab = gpu_seed_model.SIZES[prof.model_size]["vocab_size"]
    prompts = make_prompts(a.seed, prof.requests, prof.input_len, vocab)
    digest = prompts_digest(prompts)
    warm = make_prompts(a.seed + 1, 1, prof.input_len, vocab)[0] if prof.warmup else None
    budget = a.budget if a.budget is not None else math.inf
    n_first = min(2, len(a.arm_list))
    # the first two arms (upstream_0.17, islands_0.17 by default) share the budget equally
    arm_s = min(prof.arm_s, (budget - 10) / n_first) if a.arm_s is None else prof.arm_s
    load_s = max(MIN_WINDOW_S, min(prof.load_s, arm_s - prof.stop_s - MIN_WINDOW_S))
    workload = (f"Offered load (every arm): {prof.requests} streaming requests at once, "
                f"{prof.input_len} input token ids ({prof.input_len / prof.chunk:.2f} chunks of "
                f"{prof.chunk}) and {prof.output_len} output tokens, greedy, ignore_eos; prompt "
                f"seed {a.seed}, sha256 {digest}; page {prof.page}, cap {prof.cap}; load window "
                f"up to {load_s:.0f} s per arm, an arm up to {arm_s:.0f} s.")
    plan_cmd = planner_command(prof, model_dir, ratios)
    result: Dict[str, Any] = {
        "profile": prof.name, "model": f"gemma-4-26b-a4b text, {prof.model_size} "
                                      f"(scripts/gpu_seed_model.py), dummy weights",
        "workload": {"requests": prof.requests, "input_len": prof.input_len,
                     "output_len": prof.output_len, "seed": a.seed, "sha256": digest,
                     "page": prof.page, "chunk": prof.chunk, "cap": prof.cap,
                     "load_s": round(load_s, 1)},
        "arm_s": round(arm_s, 1), "budget_s": a.budget,
        "workload_line": workload, "kv_source": kv_src,
        "planner_command": plan_cmd,
        "pools": {f"{r:.2f}": {"max_total_tokens": p.full_tokens, "swa_pool": p.swa_tokens}
                  for r, p in pools.items()},
        "arms": [], "skipped": [],
    }
    print(f"seed_shape: profile {prof.name}, model dir {model_dir}, out {out}")
    print(f"+ {shlex.join([sys.executable, 'scripts/gpu_seed_model.py', '--size', prof.model_size, '--out', str(model_dir)])}")
    print(f"planner: {kv_src}, budget {prof.budget_bytes:,.0f} B, page {prof.page}")
    print(f"+ {shlex.join(plan_cmd)}")
    for r, p in pools.items():
        print(f"  ratio {r:.2f}: --max-total-tokens {p.full_tokens} (SWA pool {p.swa_tokens})")
    print(workload)
    if a.dry_run:
        for name in a.arm_list:
            arm = ARMS[name]
            env = arm_env(prof, arm)
            cmd = planned_command(prof, model_dir, arm, pools[arm.ratio])
            print(f"== {name}")
            print("+ " + shlex.join(["env", *[f"{k}={v}" for k, v in env.items()], *cmd]))
            print(f"  client: {prof.requests} x StreamingRequest(input_ids=prompts[i], "
                  f"max_new_tokens={prof.output_len}), prompt seed {a.seed}, sha256 {digest}")
        print("(dry run: nothing started)")
        return 0

    out.mkdir(parents=True, exist_ok=True)
    raise_keyboard_interrupt_on_signals()  # SIGTERM (an outer `timeout`) still stops the server
    start = time.monotonic()

    def save():
        (out / "seed_shape.json").write_text(json.dumps(result, indent=1) + "\n")
        (out / "seed_shape.md").write_text(tables(result) + "\n")

    interrupted = False
    for name in a.arm_list:
        left = budget - (time.monotonic() - start)
        if interrupted or left < 0.85 * arm_s:
            why = ("interrupted" if interrupted else f"{left:.0f} s left of the {budget:.0f} s "
                   f"budget, an arm takes up to {arm_s:.0f} s")
            result["skipped"].append([name, why])
            log(f"{name}: not started ({why})")
            continue
        try:
            rec = run_arm(prof, ARMS[name], model_dir, pools[ARMS[name].ratio], prompts, warm,
                          out, time.monotonic() + min(arm_s, left - 2), load_s)
        except KeyboardInterrupt:  # run_arm stopped its server on the way out
            interrupted = True
            result["skipped"].append([name, "interrupted while running (signal)"])
            continue
        rec["prompt_sha256"] = digest
        result["arms"].append(rec)
        if rec.get("window_limited") and rec["window_s"] < load_s:
            # a slow boot cut this window short: give the later arms the same window
            load_s = max(MIN_WINDOW_S, rec["window_s"])
            result["workload"]["load_s"] = round(load_s, 1)
        save()
    save()
    print(tables(result))
    print(f"seed_shape: results in {out}/seed_shape.md, seed_shape.json, <arm>.server.log")
    ran = [r for r in result["arms"] if "error" not in r]
    if interrupted:
        return 130
    return 0 if ran and len(ran) == len(result["arms"]) else 1


if __name__ == "__main__":
    sys.exit(main())
