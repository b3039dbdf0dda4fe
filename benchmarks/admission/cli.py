#!/usr/bin/env python
"""Admission under SWA-pool pressure on the real SGLang server (CPU, tiny hybrid-SWA model).

The production question: with a lean ``--swa-full-tokens-ratio`` (0.17), does the SWA pool bind
admission below the concurrency cap (upstream: each running request pins about one prefill chunk
of SWA KV), and do SWA islands remove that bind without losing prefix reuse? This benchmark boots
the real ``sglang.launch_server`` (``islands_harness.server.SglangServer``) on the tiny Laguna
model (``islands_harness.tiny_model``), once per arm and repeat, and drives two workloads through
``/generate`` on token ids.

Scaling (see ``plan_mapping``; the results file prints the numbers):

* shape: window ``w`` = 32, page ``p`` = 1, chunk ``cp`` = 512, so ``cp / (w + p)`` = 15.5
  (production 16384 / 1088 = 15.1); cap ``--max-running-requests`` 16 (production 48);
* pools: the production SWA pool at ratio ``r`` (``islands_tools.pool_plan.solve_pool_sizes``: 9.5 KB full,
  95 KB SWA, 10.24 KB draft per token, 37 GB, p = 64) in units of cap x hold (48 x 16384) gives a
  fraction; the CPU SWA pool is that fraction x 16 x 512; the server ratio is that pool /
  ``--max-total-tokens`` (65536, large enough that the full pool never binds);
* decode tail: production's decode evictor runs every 128 steps of ~8.5 accepted tokens, a tail
  of 1088 tokens = 6.6% of cp (``decode_tail_tokens``); the CPU has no speculative decoding, so
  ``SGLANG_SWA_EVICTION_INTERVAL`` is set to the same 6.6% of cp (34 steps) for every arm
  (``--eviction-interval 0`` keeps sglang's 128).

Arms (one boot each, same arguments otherwise):

* ``chunk_cache``: ``--disable-radix-cache``; the server sizes its SWA pool itself
  (``SWAChunkCapPoolConfigurator``), the ratio is ignored (reported as null);
* ``upstream_0.32`` / ``upstream_0.17``: stock ``SWARadixCache`` at the 0.32- and 0.17-equivalent;
* ``upstream_knobs_0.17``: plus ``SGLANG_OPT_SWA_SPLIT_LEAF_ON_INSERT=1`` and
  ``SGLANG_OPT_SWA_RELEASE_LEAF_LOCK_AFTER_WINDOW=1``;
* ``islands_0.17`` / ``islands_0.10``: ``--enable-swa-islands``;
* ``islands_floor`` (opt-in via ``--arms``): islands with the SWA pool at the island floor
  ``cp + N (w + p)`` itself;
* ``main_0.17`` / ``main_0.10`` (opt-in via ``--arms``): stock sglang 0.5.23 (upstream main, its
  own ``UnifiedRadixCache``) from ``.venv-main`` (``scripts/setup_main.sh``), same arguments;
* ``main_knobs_0.17`` / ``main_knobs_0.10`` (opt-in): the same plus main's two off-by-default
  SWA knobs ``SGLANG_OPT_UNIFIED_CACHE_FREE_OUT_OF_WINDOW_SLOTS=0`` and
  ``SGLANG_OPT_RELEASE_PREFILL_SWA=1`` (``islands_harness.main_arm.MAIN_KNOBS_ENV``);
* ``main_islands_0.17`` / ``main_islands_0.10`` (opt-in): 0.5.23 with the main islands series
  from ``.venv-main-islands`` (``scripts/setup_main.sh --islands``), ``--enable-swa-islands``.

Workloads (seeded; identical token totals in every arm; temperature 0, ``ignore_eos``):

* ``no_reuse``: ``--requests`` random prompts (U[in-min, in-max] tokens, no shared prefix) with
  U[out-min, out-max] output tokens, sent by ``--clients`` concurrent clients (2x the cap);
* ``agent``: ``--convs`` conversations in parallel, ``--turns`` turns each; every turn re-sends
  the whole transcript (system prompt + all previous user turns and replies) plus a new user
  message, so turn k > 1 can reuse turn k-1's prompt and reply from the radix cache. There are
  more conversations than upstream admits at the lean pools, so a turn waits in the queue with
  its cached transcript unlocked while other requests need SWA slots: upstream's lazy LRU
  eviction must run, and it deletes whole leaves (full KV too) or tombstones internal nodes.

Measured from the server: running requests per scheduler step (``#running-req`` of the
``Decode batch`` / ``Prefill batch`` log lines, ``--decode-log-interval 1``) and over time
(``sglang:num_running_reqs`` sampled from ``/metrics`` every ``--sample-interval`` s), both pools'
usage (decode log lines), decode steps, prefill tokens computed (sum of ``#new-token``),
retractions (``sglang:num_retracted_requests_total``, cross-checked with the log), islands'
eager frees (``sglang:swa_freed_at_commit_tokens``) vs pressure-driven LRU eviction
(``sglang:evicted_tokens_total``: full + SWA slots, summed by sglang), and cached tokens per
request (``meta_info.cached_tokens``).

Examples::

    .venv/bin/python benchmarks/admission.py --quick
    .venv/bin/python benchmarks/admission.py --repeats 2 --json benchmarks/results/admission.json \\
        --md benchmarks/results/admission.md --png benchmarks/results/admission_running.png
    .venv/bin/python benchmarks/admission.py --plan-only          # the pool mapping, no server
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
import shlex
import sys
import time
from typing import Any, Dict, List

import _bench_path
from admission.report import acceptance, aggregate, plot_running, to_markdown, validate_result
from admission.run import COUNTERS, log, run_arm
from admission.setup import (ARMS, BASELINE_ARM, DEFAULT_ARMS, QUICK_ARMS, CpuShape,
                             arm_target, plan_mapping)
from admission.workloads import QUICK, WorkloadConfig, agent_max_context
from islands_harness.bench_outputs import add_output_args, output_paths, write_files, write_json, write_text
from islands_harness.models import MODELS, get_model, real_vocab
from islands_harness.provenance import git_head
from islands_harness.speculative import MODES as SPEC_MODES

ROOT = _bench_path.ROOT
OUTPUT_FILES = {"json": "admission.json", "md": "admission.md", "png": "admission_running.png"}


def parse_args(argv=None):
    ap = argparse.ArgumentParser(
        prog="benchmarks/admission.py",
        description=(
            "Admission under SWA-pool pressure on the real SGLang server (CPU, tiny hybrid-SWA "
            "model, window 32, chunk 512, page 1, cap 16). Boots one server per arm and repeat, "
            "runs a no-reuse workload (random ~2k-token prompts at 2x the cap) and a multi-turn "
            "agent workload, and reports running requests, retractions, pool usage, throughput, "
            "latency and cache hit rates. Pools are the production pools at ratios 0.32/0.17/0.10 "
            "scaled by the planner (run --plan-only to see the mapping)."),
        epilog=(
            "examples:\n"
            "  .venv/bin/python benchmarks/admission.py --plan-only\n"
            "  .venv/bin/python benchmarks/admission.py --quick\n"
            "  .venv/bin/python benchmarks/admission.py --repeats 2\n"
            "  .venv/bin/python benchmarks/admission.py --arms upstream_0.17,islands_0.17,islands_floor\n"
            "  .venv/bin/python benchmarks/admission.py --from-runs .work/admission/STAMP   # re-render\n"
            f"arms: {', '.join(ARMS)}"),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    d = WorkloadConfig()
    ap.add_argument("--quick", action="store_true",
                    help="smaller workload (32 requests of 96-192 output tokens; 8 conversations x "
                         "3 turns): about 10 minutes on a quiet 2-core machine")
    ap.add_argument("--repeats", type=int, default=1, help="boots per arm; arms interleaved (default 1)")
    ap.add_argument("--arms", default=None,
                    help=f"comma list of arms (default: {','.join(DEFAULT_ARMS)}; with --quick "
                         "without upstream_knobs_0.10)")
    ap.add_argument("--workloads", default="no_reuse,agent",
                    help="comma list: no_reuse, agent (default both, one boot per arm)")
    ap.add_argument("--requests", type=int, help=f"no_reuse requests (default {d.requests})")
    ap.add_argument("--clients", type=int, help=f"no_reuse concurrent clients (default {d.clients})")
    ap.add_argument("--out-min", type=int, help=f"no_reuse min output tokens (default {d.out_min})")
    ap.add_argument("--out-max", type=int, help=f"no_reuse max output tokens (default {d.out_max})")
    ap.add_argument("--convs", type=int, help=f"agent conversations in parallel (default {d.convs})")
    ap.add_argument("--turns", type=int, help=f"agent turns per conversation (default {d.turns})")
    ap.add_argument("--reply-min", type=int, help=f"agent min reply tokens (default {d.reply_min})")
    ap.add_argument("--reply-max", type=int, help=f"agent max reply tokens (default {d.reply_max})")
    ap.add_argument("--agent-mode", choices=("after_finish", "while_running"), default=None,
                    help="after_finish (default): a turn is sent when the previous one finished; "
                         "while_running: as soon as the previous one has streamed its reply, "
                         "which keeps generating --run-on more tokens (replies longer than the "
                         "decode-island interval cp/4 = 128 show what decode islands add)")
    ap.add_argument("--run-on", type=int, help=f"while_running: tokens a turn generates after "
                                               f"its reply (default {d.run_on})")
    ap.add_argument("--seed", type=int, default=d.seed, help="workload seed")
    ap.add_argument("--eviction-interval", type=int, default=None,
                    help="SGLANG_SWA_EVICTION_INTERVAL for every arm (default: the planner's scaled "
                         "decode tail, 34; 0 keeps sglang's 128)")
    ap.add_argument("--sample-interval", type=float, default=0.25, help="/metrics sampling period, s")
    ap.add_argument("--omp-threads", type=int, default=2, help="OMP threads of each server")
    ap.add_argument("--boot-timeout", type=float, default=600.0, help="server boot timeout, s")
    ap.add_argument("--request-timeout", type=float, default=3600.0, help="per request timeout, s")
    add_output_args(ap, OUTPUT_FILES)
    ap.add_argument("--log-dir", default=str(ROOT / ".work" / "admission"),
                    help="server logs and raw per-run JSON (not committed)")
    ap.add_argument("--model", default="laguna", choices=list(MODELS),
                    help="the tiny model served (islands_harness.models; default laguna); gemma4 "
                         "and gemma4-moe run on the 0.5.23 arms (main*) only")
    ap.add_argument("--speculative", choices=SPEC_MODES, default="none",
                    help="decode speculatively on every arm (0.5.23 arms only): ngram, "
                         "islands_harness.speculative's NGRAM arguments (each verify step "
                         "allocates the draft tokens' slots per request)")
    ap.add_argument("--plan-only", action="store_true", help="print the pool mapping and exit")
    ap.add_argument("--from-runs", metavar="DIR", default=None,
                    help="no server: rebuild the JSON, markdown and plot from the raw per-run files "
                         "of an earlier run (a --log-dir/STAMP directory)")
    a = ap.parse_args(argv)
    if a.arms is None:
        a.arms = ",".join(QUICK_ARMS if a.quick else DEFAULT_ARMS)
    unknown = [n for n in a.arms.split(",") if n and n not in ARMS]
    if unknown:
        ap.error(f"unknown arm(s) {unknown}; choose from {list(ARMS)}")
    tiny = get_model(a.model)
    unserved = [n for n in a.arms.split(",") if n and not tiny.serves_on(arm_target(ARMS[n]))]
    if unserved:
        ap.error(f"--model {a.model} is served on {', '.join(tiny.targets)} only, not by arms "
                 f"{','.join(unserved)}")
    old = [n for n in a.arms.split(",") if n and arm_target(ARMS[n]) != "0.5.23"]
    if a.speculative != "none" and old:
        ap.error(f"--speculative runs on the 0.5.23 arms only (no drafter runs on 0.5.15.post1's "
                 f"CPU harness), not {','.join(old)}")
    bad = [w for w in a.workloads.split(",") if w not in ("no_reuse", "agent")]
    if bad:
        ap.error(f"unknown workload(s) {bad}")
    if a.repeats < 1:
        ap.error("--repeats must be >= 1")
    return a


def workload_from_args(a) -> WorkloadConfig:
    kw = dict(QUICK) if a.quick else {}
    for k in ("requests", "clients", "out_min", "out_max", "convs", "turns", "reply_min",
              "reply_max", "agent_mode", "run_on"):
        v = getattr(a, k)
        if v is not None:
            kw[k] = v
    kw["seed"] = a.seed
    cfg = WorkloadConfig(**kw)
    if cfg.out_min > cfg.out_max or cfg.in_min > cfg.in_max or cfg.reply_min > cfg.reply_max:
        raise SystemExit("min > max in the workload lengths")
    if agent_max_context(cfg) + 8 > 4096:
        raise SystemExit("agent transcripts would exceed the tiny model's 4096-token context")
    return cfg


def main(argv=None) -> int:
    a = parse_args(argv)
    mapping = plan_mapping()
    if a.eviction_interval is None:
        a.eviction_interval = mapping["cpu"]["eviction_interval"]
    if a.plan_only:
        print(json.dumps(mapping, indent=1))
        return 0
    command = " ".join(shlex.quote(x) for x in [".venv/bin/python", "benchmarks/admission.py",
                                                 *(sys.argv[1:] if argv is None else argv)])
    if a.from_runs:
        return rebuild(pathlib.Path(a.from_runs), a, mapping)
    cfg = workload_from_args(a)
    arm_names = [n for n in a.arms.split(",") if n]
    workloads = [w for w in a.workloads.split(",") if w]
    model_dir = get_model(a.model).build(window=CpuShape().window)
    cfg = dataclasses.replace(cfg, token_hi=real_vocab(model_dir))
    stamp = time.strftime("%Y%m%d-%H%M%S")
    log_dir = pathlib.Path(a.log_dir) / stamp
    log_dir.mkdir(parents=True, exist_ok=True)
    meta = {"command": command, "model": a.model, "date": time.strftime("%Y-%m-%d %H:%M"), "git_head": git_head(),
            "quick": a.quick, "repeats": a.repeats, "eviction_interval": a.eviction_interval,
            "workload": dataclasses.asdict(cfg), "workloads": workloads, "arm_order": arm_names,
            "counters": dict(COUNTERS)}
    (log_dir / "meta.json").write_text(json.dumps(meta, indent=1))
    log(f"{len(arm_names)} arms x {a.repeats} repeat(s), workloads {workloads}; logs in {log_dir}")
    for n in arm_names:
        arm = ARMS[n]
        if arm.pool_key:
            p = mapping["pools"][arm.pool_key]
            log(f"  {n}: SWA pool {p['swa_pool']} (ratio {p['server_ratio']}, {arm.pool_key}-eq; "
                f"predicted bind without islands {p['bind_without_islands']})")
        else:
            log(f"  {n}: SWA pool sized by the server (chunk-cache configurator)")

    t_start = time.monotonic()
    runs: List[Dict[str, Any]] = []
    for rep in range(a.repeats):
        order = arm_names if rep % 2 == 0 else list(reversed(arm_names))
        for n in order:
            r = run_arm(ARMS[n], rep, mapping, cfg, a, model_dir, log_dir, workloads)
            runs.append(r)
            (log_dir / f"{n}_r{rep}.json").write_text(json.dumps(r, indent=1))
            log(f"[{n} r{rep}] done in {r['arm_s']:.0f} s; {time.monotonic() - t_start:.0f} s elapsed")
    meta["runtime_s"] = round(time.monotonic() - t_start, 1)
    (log_dir / "meta.json").write_text(json.dumps(meta, indent=1))
    return write_outputs(runs, meta, mapping, a, log_dir)


def rebuild(run_dir: pathlib.Path, a, mapping: Dict[str, Any]) -> int:
    """Re-aggregate the raw per-run files of an earlier run (no server)."""
    files = sorted(run_dir.glob("*_r*.json"))
    if not files:
        raise SystemExit(f"no per-run files (<arm>_r<k>.json) in {run_dir}")
    runs = [json.loads(f.read_text()) for f in files]
    meta_path = run_dir / "meta.json"
    if meta_path.exists():
        meta = json.loads(meta_path.read_text())
    else:  # a run from before meta.json existed: the workload comes from this command line
        cfg = workload_from_args(a)
        meta = {"command": "(not recorded)", "date": time.strftime(
                    "%Y-%m-%d %H:%M", time.localtime(files[0].stat().st_mtime)),
                "git_head": None, "quick": a.quick, "repeats": max(r["repeat"] for r in runs) + 1,
                "eviction_interval": a.eviction_interval, "workload": dataclasses.asdict(cfg),
                "workloads": [w for w in ("no_reuse", "agent") if any(w in r for r in runs)],
                "arm_order": [n for n in ARMS if any(r["arm"] == n for r in runs)]}
    if "runtime_s" not in meta:
        meta["runtime_s"] = round(sum(r.get("arm_s", 0) for r in runs), 1)
    meta["arm_order"] = [n for n in meta["arm_order"] if any(r["arm"] == n for r in runs)]
    log(f"rebuilding from {len(runs)} runs in {run_dir}")
    return write_outputs(runs, meta, mapping, a, run_dir)


def write_outputs(runs: List[Dict[str, Any]], meta: Dict[str, Any], mapping: Dict[str, Any], a,
                  run_dir: pathlib.Path) -> int:
    """Aggregate, check and write the files asked for (``islands_harness.bench_outputs``); print the markdown."""
    paths = output_paths(a, OUTPUT_FILES, run_dir)
    cap = CpuShape().cap
    # ratios are to upstream_0.17; a run without it (a model only 0.5.23 serves) takes its first arm
    baseline = (BASELINE_ARM if any(r["arm"] == BASELINE_ARM for r in runs)
                else next(n for n in meta["arm_order"] if any(r["arm"] == n for r in runs)))
    arms = aggregate(runs, mapping, cap, baseline)
    result = {
        "cap": cap,
        **{k: meta.get(k) for k in ("command", "date", "git_head", "quick", "repeats", "runtime_s",
                                    "eviction_interval", "workload", "workloads", "arm_order")},
        **({"model": meta["model"]} if "model" in meta else {}),
        "arm_runtimes_s": {f"{r['arm']} r{r['repeat']}": r["arm_s"] for r in runs},
        "baseline_arm": baseline,
        "mapping": mapping,
        **({"counters": meta["counters"]} if "counters" in meta else {}),
        "png": str(paths["png"]) if paths["png"] else None,
        "arms": arms,
    }
    result["acceptance"] = acceptance(arms, cap, result.get("workloads") or ("no_reuse", "agent"))
    result["runs"] = [dict(r) for r in runs]
    for r in result["runs"]:  # keep the committed JSON readable: no raw series / per-step lists
        for phase in ("no_reuse", "agent"):
            if phase in r:
                r[phase] = {k: v for k, v in r[phase].items()
                            if k not in ("series", "step_running", "requests")}
    validate_result(result)
    md = to_markdown(result)
    written = write_files(paths, {"json": write_json(result), "md": write_text(md),
                                  "png": lambda p: plot_running(result, runs, p)})
    log(f"wrote {', '.join(written) or 'nothing'}; runtime {result['runtime_s'] / 60:.1f} min")
    print(md)
    return 0
