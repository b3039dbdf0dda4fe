#!/usr/bin/env python3
"""The seed's headline shape on a GPU with nothing downloaded: Gemma 4 26B-A4B (text) with dummy
weights, fp8 KV, page 64, chunk 16384, cap 48, at the seed's pool sizes; upstream vs islands.

    python benchmarks/seed_shape.py --dry-run                 # the exact commands, nothing run
    python benchmarks/seed_shape.py --out DIR --budget 330    # on a GPU (scripts/gpu_check.sh)
    python benchmarks/seed_shape.py --profile cpu-tiny --arms islands_0.17 --out DIR   # CPU smoke
    python benchmarks/seed_shape.py --target 0.5.23 --main-python P --main-islands-python Q \
        --out DIR --budget 515                                # 0.5.23: main vs main islands

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

With ``--target 0.5.23`` the same shape, pools, prompts and server arguments on sglang 0.5.23
(upstream main), each arm served by its own interpreter (``scripts/gpu_check.sh --steps main``
makes both from the ``--bundle-main`` bundle):

  main_0.17            stock 0.5.23 at 0.17 (--main-python; patches-main/series-stock)
  main_islands_0.17    0.5.23 with the islands series (--main-islands-python), + --enable-swa-islands
  main_0.32            stock at 0.32 (the ratio before islands)
  main_islands_0.32    islands at 0.32

Pools: the H200 has more memory than the seed's H100, so ``--max-total-tokens`` pins each arm to
what the seed's 37 GB KV budget gives at its ratio, from the planner (``islands_tools.pool_plan``,
the formulas ``scripts/swa_pool_plan.py`` prints; the seed's bytes per token: full 9.5 KB, SWA
95 KB, EAGLE draft 10.24 KB, as in README and benchmarks/admission/setup.py ``Production``):
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

Modules: ``seed_shape.setup`` (arms, profiles, planner pools, server commands, prompts),
``seed_shape.run`` (one arm on a live server and its summary), ``seed_shape.report`` (the
tables); this file is the command line and the run's plan and budget.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import pathlib
import shlex
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional

from seed_shape.setup import (ARMS, MAIN_PRIORITY, MIN_WINDOW_S, PRIORITY, PROFILES, PROMPT_SEED,
                              ROOT, TARGETS, Profile, arm_env, arm_pools, gpu_seed_model, kv_cost,
                              make_prompts, planned_command, planner_command, prompts_digest)
from seed_shape.report import tables
from seed_shape.run import log, run_arm, summarize

from islands_harness import main_arm
from islands_harness.server import raise_keyboard_interrupt_on_signals
from islands_harness.speculative import ngram_args

SEED_DRAFT_TOKENS = 16
"""NGRAM's drafts at the seed shape: a step commits 1 to 16 tokens (the seed's block drafts
accept about 8.5)."""

__all__ = ["ARMS", "MAIN_PRIORITY", "PRIORITY", "PROFILES", "PROMPT_SEED", "Profile", "RunPlan", "main",
           "make_prompts", "parse_args", "plan_run", "prompts_digest", "run_arm", "summarize",
           "tables"]


def parse_args(argv=None):
    ap = argparse.ArgumentParser(prog="benchmarks/seed_shape.py",
                                 description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", choices=sorted(PROFILES), default="h200")
    ap.add_argument("--target", choices=TARGETS, default=TARGETS[0],
                    help="which sglang the default arms run: 0.5.15.post1 (this interpreter's) "
                         "or 0.5.23 (--main-python, --main-islands-python)")
    ap.add_argument("--arms", default=None,
                    help=f"comma list, run in this order while the budget allows (default: "
                         f"{','.join(PRIORITY)}; with --target 0.5.23 {','.join(MAIN_PRIORITY)})")
    ap.add_argument("--main-python", default=str(main_arm.MAIN_PYTHON),
                    help="the interpreter of the main_* arms: sglang 0.5.23, stock (default "
                         ".venv-main's; on a GPU it needs a CUDA torch and sglang-kernel)")
    ap.add_argument("--main-islands-python", default=str(main_arm.MAIN_ISLANDS_PYTHON),
                    help="the interpreter of the main_islands_* arms: 0.5.23 with the islands "
                         "series (default .venv-main-islands's)")
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
    ap.add_argument("--speculative", choices=("none", "ngram"), default="none",
                    help="every arm decodes speculatively: ngram, NGRAM with "
                         f"{SEED_DRAFT_TOKENS} draft tokens (the seed's block drafts accept about "
                         "8.5 a step; NGRAM on token-id prompts and dummy weights accepts far less, "
                         "but every step allocates and verifies the drafts' slots)")
    ap.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    a = ap.parse_args(argv)
    if a.arms is None:
        a.arms = ",".join(MAIN_PRIORITY if a.target == "0.5.23" else PRIORITY)
    arms = [x for x in a.arms.split(",") if x]
    bad = [x for x in arms if x not in ARMS]
    if bad or not arms:
        ap.error(f"unknown arm(s) {bad}; known: {', '.join(ARMS)}")
    a.arm_list = arms
    a.pythons = {name: arm_python(a, ARMS[name]) for name in arms}
    prof = PROFILES[a.profile]
    changes = {k: v for k, v in (("requests", a.requests), ("input_len", a.input_len),
                                 ("output_len", a.output_len), ("load_s", a.load_s),
                                 ("arm_s", a.arm_s)) if v is not None}
    if a.speculative == "ngram":
        changes["server_args"] = (*prof.server_args, *ngram_args(SEED_DRAFT_TOKENS,
                                                                  cpu=prof.device == "cpu"))
    a.prof = dataclasses.replace(prof, **changes)
    if a.prof.input_len <= a.prof.chunk:
        ap.error(f"--input-len {a.prof.input_len} fits in one chunk ({a.prof.chunk}); the seed "
                 f"shape needs prompts of at least two chunks")
    return a


def arm_python(a: argparse.Namespace, arm) -> Optional[str]:
    """The interpreter that serves ``arm``: None for this one (0.5.15.post1), else --main-python
    or --main-islands-python."""
    return {"": None, "main": a.main_python, "main_islands": a.main_islands_python}[arm.python]


@dataclasses.dataclass
class RunPlan:
    """What every arm of one run shares: where files go, the planner's pools per ratio, the one
    prompt set (and its digest), and the time limits in seconds (``budget``: the whole run,
    ``arm_s``: one arm at most, ``load_s``: every arm's load window)."""

    out: pathlib.Path
    model_dir: pathlib.Path
    ratios: List[float]
    pools: Dict[float, Any]
    kv_src: str
    prompts: List[List[int]]
    digest: str
    warm: Optional[List[int]]
    budget: float
    arm_s: float
    load_s: float
    workload: str
    plan_cmd: List[str]


def plan_run(a: argparse.Namespace) -> RunPlan:
    """Write the config-only model (unless a dry run needs none), size the pools, draw the
    prompts and share the budget between the arms."""
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
    return RunPlan(out=out, model_dir=model_dir, ratios=ratios, pools=pools, kv_src=kv_src,
                   prompts=prompts, digest=digest, warm=warm, budget=budget, arm_s=arm_s,
                   load_s=load_s, workload=workload,
                   plan_cmd=planner_command(prof, model_dir, ratios))


def new_result(a: argparse.Namespace, p: RunPlan) -> Dict[str, Any]:
    """``seed_shape.json`` before any arm ran: profile, workload, pools; no arms yet."""
    prof: Profile = a.prof
    return {
        "profile": prof.name, "model": f"gemma-4-26b-a4b text, {prof.model_size} "
                                      f"(scripts/gpu_seed_model.py), dummy weights",
        "workload": {"requests": prof.requests, "input_len": prof.input_len,
                     "output_len": prof.output_len, "seed": a.seed, "sha256": p.digest,
                     "page": prof.page, "chunk": prof.chunk, "cap": prof.cap,
                     "load_s": round(p.load_s, 1)},
        "arm_s": round(p.arm_s, 1), "budget_s": a.budget,
        "workload_line": p.workload, "kv_source": p.kv_src,
        "planner_command": p.plan_cmd,
        "pools": {f"{r:.2f}": {"max_total_tokens": q.full_tokens, "swa_pool": q.swa_tokens}
                  for r, q in p.pools.items()},
        "arms": [], "skipped": [],
    }


def print_plan(a: argparse.Namespace, p: RunPlan) -> None:
    prof: Profile = a.prof
    print(f"seed_shape: profile {prof.name}, model dir {p.model_dir}, out {p.out}")
    print(f"+ {shlex.join([sys.executable, 'scripts/gpu_seed_model.py', '--size', prof.model_size, '--out', str(p.model_dir)])}")
    print(f"planner: {p.kv_src}, budget {prof.budget_bytes:,.0f} B, page {prof.page}")
    print(f"+ {shlex.join(p.plan_cmd)}")
    for r, q in p.pools.items():
        print(f"  ratio {r:.2f}: --max-total-tokens {q.full_tokens} (SWA pool {q.swa_tokens})")
    print(p.workload)


def print_dry_run(a: argparse.Namespace, p: RunPlan) -> None:
    """Each arm's exact server command and client, nothing started."""
    prof: Profile = a.prof
    for name in a.arm_list:
        arm = ARMS[name]
        env = arm_env(prof, arm)
        cmd = planned_command(prof, p.model_dir, arm, p.pools[arm.ratio], a.pythons[name])
        print(f"== {name}")
        print("+ " + shlex.join(["env", *[f"{k}={v}" for k, v in env.items()], *cmd]))
        print(f"  client: {prof.requests} x StreamingRequest(input_ids=prompts[i], "
              f"max_new_tokens={prof.output_len}), prompt seed {a.seed}, sha256 {p.digest}")
    print("(dry run: nothing started)")


def run_arms(a: argparse.Namespace, p: RunPlan, result: Dict[str, Any]) -> int:
    """Run the arms in order while the budget has room, rewriting the result files after each;
    the exit status: 0 all ran, 1 an arm failed or none ran, 130 interrupted."""
    prof: Profile = a.prof
    out, budget, arm_s, load_s = p.out, p.budget, p.arm_s, p.load_s
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
            rec = run_arm(prof, ARMS[name], p.model_dir, p.pools[ARMS[name].ratio], p.prompts,
                          p.warm, out, time.monotonic() + min(arm_s, left - 2), load_s,
                          a.pythons[name])
        except KeyboardInterrupt:  # run_arm stopped its server on the way out
            interrupted = True
            result["skipped"].append([name, "interrupted while running (signal)"])
            continue
        rec["prompt_sha256"] = p.digest
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


def main(argv=None) -> int:
    a = parse_args(argv)
    p = plan_run(a)
    result = new_result(a, p)
    print_plan(a, p)
    if a.dry_run:
        print_dry_run(a, p)
        return 0
    return run_arms(a, p, result)
