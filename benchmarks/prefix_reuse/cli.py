#!/usr/bin/env python
"""Prefix reuse under SWA-pool pressure on the real SGLang server (CPU, tiny hybrid-SWA model).

The question: with SWA islands on (``--enable-swa-islands``, default reclaim ``lazy``), does the
radix cache keep every prefix hit upstream keeps, across the ways real traffic shares prefixes,
at an ample SWA pool and at the lean pools islands are meant for, and does admission still reach
the concurrency cap there? One run boots the real ``sglang.launch_server`` once per (arm, pool)
and runs five seeded workload classes on it, one after the other, with ``/flush_cache`` between
them (classes never share cache).

Machinery comes from the admission benchmark (``admission.setup``, ``admission.run``,
``admission.workloads``): the CPU shape (``CpuShape``: window 32, page 1, chunk 512, cap 16,
``--max-total-tokens`` 65536), the pools (``plan_mapping``: the planner's 0.17- and
0.10-equivalent SWA pools; ``ample`` is ratio 0.5), the server arguments, the scaled
decode-evictor interval (``SGLANG_SWA_EVICTION_INTERVAL``, 34 for every arm), ``run_phase`` (log
slice, ``/metrics`` deltas, running samples, server CPU seconds), the request helpers,
``run_agent`` / ``run_no_reuse`` and the tiny model.

This file is the command line; the pieces are ``prefix_reuse.arms`` (shape, arms, pools),
``prefix_reuse.workloads`` (the classes' scripts and the expected-hit oracle),
``prefix_reuse.clients`` (how each class is sent), ``prefix_reuse.run`` (one boot, the per-class
record) and ``prefix_reuse.report`` (result, acceptance, markdown, plot).

Arms (same arguments otherwise):

* ``upstream``: stock ``SWARadixCache``;
* ``upstream_knobs``: plus ``SGLANG_OPT_SWA_SPLIT_LEAF_ON_INSERT=1`` and
  ``SGLANG_OPT_SWA_RELEASE_LEAF_LOCK_AFTER_WINDOW=1`` (``islands_harness.knobs``);
* ``islands_eager``: ``--enable-swa-islands --swa-islands-reclaim eager`` (SWA below a new island
  freed at the commit);
* ``islands``: ``--enable-swa-islands`` (reclaim ``lazy``, the default: SWA below an island stays
  cached and evictable, cold tokens least recently used first);
* ``islands_auto`` (only when named in ``--arms``): ``--swa-islands-reclaim auto`` (lazy while
  one prefill chunk of SWA is free, else eager).

Classes (token-id prompts from the tiny model's vocabulary; temperature 0, ``ignore_eos``, so
every output is exactly ``max_new_tokens`` long; every divergence point is a different token, so
no two requests share a token more than the script says):

* ``shared_system``: U users x T turns; turn k = one shared system prompt + the user's own
  history (messages and replies) + a new message. Users run concurrently (U > cap), each user's
  turns in sequence. User 0's first turn goes alone first (it opens the system prompt), so every
  later hit is decided by what the cache keeps, not by an arrival race.
* ``fanout``: D documents, each read by K requests = document + an own question. The first
  question per document goes first (wave 1, one per document), then all the others at once.
* ``branch_edit``: C conversations, each an own opening + T turns built in sequence, then E
  re-sends of the transcript edited at an earlier turn (cut inside turn j's message, which is
  replaced by a new one: the branch point lies inside the cached path, mid-node), sent at once.
* ``agents``: ``admission.workloads.agent_script`` (own system prompt per conversation; turn k+1 re-sends
  the transcript + a new user message, sent when turn k finished), run by ``admission.workloads.run_agent``.
* ``no_reuse``: ``admission.workloads.no_reuse_requests`` (random prompts), all sent at once.

Measured per (arm, pool, class): requests, cached tokens (``meta_info.cached_tokens``) and their
share of prompt tokens, ``expected_shared_tokens`` (what a cache that forgets nothing could have
hit: per request, the longest prefix shared with any earlier request of the class in script
order, that request's prompt + output minus its last token (whose KV is never computed), capped
at the prompt length - 1 and page-floored), prefill tokens computed (``#new-token`` of the
scheduler log), running requests (time-weighted mean of ``sglang:num_running_reqs``, mean over
decode steps, and ``mean_running_queued``: the mean ``#running-req`` over the decode steps with a
non-empty queue, i.e. while demand exceeded what ran), max running, retractions, peak SWA used
(``#swa token`` of the decode lines: locked + request-owned, not evictable), the largest SWA hold
of one running request (islands' ``swa held/req: MEAN (max MAX)``; None for upstream arms),
decode steps, wall seconds, and output tokens / requests per server CPU second.

Acceptance (the issue's "done when"), per class: at ``ample``, islands' cached tokens >=
upstream's - one page per request; at ``0.17-eq`` and ``0.10-eq``, >= the better of upstream and
upstream_knobs, and where upstream binds (its ``mean_running_queued`` < cap - 1) islands'
``mean_running_queued`` >= cap - 1 (or no step ever queued) with 0 retractions. ``mean running``
is judged while requests queue, because a finite workload ramps up and drains below the cap in
every arm; the time-weighted mean is reported next to it.

Examples::

    .venv/bin/python benchmarks/prefix_reuse.py --plan-only
    .venv/bin/python benchmarks/prefix_reuse.py --quick          # results/prefix_reuse_quick.*
    .venv/bin/python benchmarks/prefix_reuse.py                  # full run, results/prefix_reuse.*
    .venv/bin/python benchmarks/prefix_reuse.py --quick --pools 0.17-eq --arms upstream,islands \\
        --classes fanout,branch_edit --json /tmp/p.json --md /tmp/p.md --png /tmp/p.png
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pathlib
import platform
import shlex
import sys
import time
from typing import Any, Dict, List

import _bench_path  # noqa: E402  (puts the repository root and benchmarks/ on sys.path)
from admission import setup as admission_setup  # noqa: E402
from islands_harness.bench_outputs import add_output_args, output_paths, write_files, write_json, write_text  # noqa: E402,E501
from islands_harness.provenance import git_head  # noqa: E402
from islands_harness.speculative import MODES as SPEC_MODES  # noqa: E402
from sglang.srt.mem_cache.swa_island_formulas import EVICTION_ORDERS  # noqa: E402
from prefix_reuse.arms import (ARMS, CPU, DEFAULT_ARMS, DEFAULT_POOLS,  # noqa: E402
                               LEAN_DEVICE_TOKENS, POOLS, comma_choice, pool_table,
                               unserved_arms)
from islands_harness.models import MODELS, get_model, real_vocab  # noqa: E402
from prefix_reuse.clients import plan_classes  # noqa: E402
from prefix_reuse.report import (arm_descriptions, assemble, plot, to_markdown,  # noqa: E402
                                 validate_result)
from prefix_reuse.run import log, run_boot  # noqa: E402
from prefix_reuse.workloads import (CLASSES, PRESETS, Workload, build_scripts,  # noqa: E402
                                    check_workload)

ROOT = _bench_path.ROOT

DESCRIPTION = (
    "Prefix reuse under SWA-pool pressure on the real SGLang server (CPU, tiny hybrid-SWA "
    "model; window 32, chunk 512, page 1, cap 16; admission.py's shape and pools). Boots "
    "one server per (arm, pool) and runs five seeded workload classes on it in a fixed "
    "order with /flush_cache between them: shared_system (users x turns behind one "
    "system prompt), fanout (documents x questions), branch_edit (transcripts re-sent "
    "edited at an earlier turn), agents (admission's multi-turn agents), no_reuse "
    "(random prompts). Reports per (arm, pool, class) cached tokens and share, what a "
    "cache that forgets nothing could hit, prefill tokens computed, mean/max running, "
    "retractions, peak SWA used, SWA held per running request, and requests per server "
    "CPU second; evaluates the issue's acceptance criteria (PASS/FAIL) and writes JSON, "
    "markdown and a plot. The module docstring has the definitions.")
"""``--help``'s text above the options."""
EPILOG = (
    "arms: upstream (stock), upstream_knobs (+ upstream's split-leaf and release-after-"
    "window env knobs), islands_eager (--enable-swa-islands --swa-islands-reclaim "
    "eager), islands (--enable-swa-islands, default reclaim lazy); islands_auto "
    "(--swa-islands-reclaim auto: eager below one chunk of free SWA) runs only when named in "
    "--arms; so do the arms on sglang 0.5.23: main (stock, .venv-main), main_knobs (+ "
    "SGLANG_OPT_UNIFIED_CACHE_FREE_OUT_OF_WINDOW_SLOTS=0 SGLANG_OPT_RELEASE_PREFILL_SWA=1), "
    "main_free_off and main_release_prefill (one knob each), main_islands (.venv-main-islands, "
    "--enable-swa-islands)\n"
    "pools: ample (--swa-full-tokens-ratio 0.5), 0.17-eq and 0.10-eq (the planner's "
    "production pools scaled to the CPU shape: admission.setup.plan_mapping)\n"
    "presets: full (default, ~45 min on 2 quiet cores), --quick (< 10 min), --smoke "
    "(seconds per class; for the server test, numbers mean nothing)\n\n"
    "examples:\n"
    "  .venv/bin/python benchmarks/prefix_reuse.py --plan-only\n"
    "  .venv/bin/python benchmarks/prefix_reuse.py --quick\n"
    "  .venv/bin/python benchmarks/prefix_reuse.py --pools 0.17-eq --arms upstream,islands "
    "--classes fanout\n"
    "  .venv/bin/python benchmarks/prefix_reuse.py --from-runs .work/prefix_reuse/STAMP")
"""``--help``'s text below the options."""


def parse_args(argv=None):
    """The options, plus ``argv``, ``class_list`` / ``arm_list`` / ``pool_list`` (in fixed
    order), ``preset`` and ``stem`` (the output files' name)."""
    ap = argparse.ArgumentParser(prog="benchmarks/prefix_reuse.py", description=DESCRIPTION,
                                 epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    size = ap.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true",
                      help="the quick preset (fewer users, documents, conversations and shorter "
                           "replies): under 10 minutes for all 12 boots on 2 cores")
    size.add_argument("--smoke", action="store_true",
                      help="tiny workloads (the server test's size; numbers mean nothing)")
    ap.add_argument("--classes", default=",".join(CLASSES),
                    help=f"comma list, run in this fixed order: {','.join(CLASSES)} (default all)")
    ap.add_argument("--arms", default=",".join(DEFAULT_ARMS),
                    help=f"comma list of arms: {','.join(ARMS)} (default {','.join(DEFAULT_ARMS)})")
    ap.add_argument("--model", default="laguna", choices=list(MODELS),
                    help="the tiny model served (islands_harness.models; default laguna); gemma4 "
                         "and gemma4-moe run on the 0.5.23 arms only")
    ap.add_argument("--pools", default=",".join(DEFAULT_POOLS),
                    help=f"comma list of pools: {','.join(POOLS)} (default "
                         f"{','.join(DEFAULT_POOLS)}; lean-device: --max-total-tokens "
                         f"{LEAN_DEVICE_TOKENS:,} with 0.17-eq's SWA pool, for a host tier)")
    ap.add_argument("--speculative", choices=SPEC_MODES, default="none",
                    help="decode speculatively on every arm (0.5.23 arms only): ngram, NGRAM "
                         "(islands_harness.speculative)")
    ap.add_argument("--seed", type=int, default=Workload().seed, help="workload seed")
    ap.add_argument("--plan-only", action="store_true",
                    help="print the pools, arms and per-class workload sizes (requests, prompt "
                         "tokens, expected shared tokens) as JSON; no server")
    add_output_args(ap, output_files("prefix_reuse[_quick|_smoke]"))
    ap.add_argument("--log-dir", default=str(ROOT / ".work" / "prefix_reuse"),
                    help="server logs and raw per-boot JSON, one STAMP folder per run (not committed)")
    ap.add_argument("--from-runs", metavar="DIR", default=None,
                    help="no server: rebuild JSON, markdown and plot from the raw per-boot files of "
                         "an earlier run (a --log-dir/STAMP folder)")
    ap.add_argument("--eviction-interval", type=int, default=None,
                    help="SGLANG_SWA_EVICTION_INTERVAL for every arm (default: admission's scaled "
                         "decode tail, 34; 0 keeps sglang's 128)")
    ap.add_argument("--sample-interval", type=float, default=0.25, help="/metrics sampling period, s")
    ap.add_argument("--lead", type=float, default=0.3, help="pause before each class, s")
    ap.add_argument("--settle", type=float, default=0.7,
                    help="pause after each class for its last log lines and gauges, s")
    ap.add_argument("--omp-threads", type=int, default=2, help="OMP threads of each server")
    ap.add_argument("--boot-timeout", type=float, default=600.0, help="server boot timeout, s")
    ap.add_argument("--request-timeout", type=float, default=3600.0, help="per request timeout, s")
    a = ap.parse_args(argv)
    a.argv = list(sys.argv[1:] if argv is None else argv)
    a.class_list = comma_choice(a.classes, CLASSES, "classes", ap)
    a.arm_list = comma_choice(a.arms, list(ARMS), "arms", ap)
    unserved = unserved_arms(a.arm_list, a.model)
    if unserved:
        ap.error(f"--model {a.model} is served on {', '.join(get_model(a.model).targets)} only, "
                 f"not by arms {','.join(unserved)}")
    a.pool_list = comma_choice(a.pools, POOLS, "pools", ap)
    old = [n for n in a.arm_list if not n.startswith("main")]
    if a.speculative != "none" and old:
        ap.error(f"--speculative runs on the 0.5.23 arms only (no drafter runs on 0.5.15.post1's "
                 f"CPU harness), not {','.join(old)}")
    a.preset = "quick" if a.quick else "smoke" if a.smoke else "full"
    a.stem = {"full": "prefix_reuse", "quick": "prefix_reuse_quick",
              "smoke": "prefix_reuse_smoke"}[a.preset]
    return a


def output_files(stem: str) -> Dict[str, str]:
    """``{kind: file name}`` of the outputs named ``stem``."""
    return {"json": f"{stem}.json", "md": f"{stem}.md", "png": f"{stem}.png"}


def workload_from_args(a) -> Workload:
    """The preset's workload at ``--seed``, checked against the model's context."""
    wl = dataclasses.replace(PRESETS[a.preset], seed=a.seed)
    check_workload(wl)
    return wl


def _machine() -> Dict[str, Any]:
    """CPU count, platform and the 1/5/15-minute load averages (None where unavailable)."""
    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load = None
    return {"cpus": os.cpu_count(), "platform": platform.platform(terse=True), "load": load}



def plan(a, pools: Dict[str, Dict[str, Any]], wl: Workload) -> Dict[str, Any]:
    """``--plan-only``'s JSON: shape, pools, arms, boots and per-class sizes (no server)."""
    return {
        "cap": CPU.cap, "page": CPU.page, "window": CPU.window, "chunk": CPU.chunk,
        "preset": a.preset, "eviction_interval": a.eviction_interval,
        "pools": {p: pools[p] for p in a.pool_list},
        "model": a.model,
        "arms": {n: {"args": list(ARMS[n]["args"]) + list(get_model(a.model).server_args),
                     "env": ARMS[n]["env"]} for n in a.arm_list},
        "boots": len(a.arm_list) * len(a.pool_list),
        "classes": plan_classes(wl, a.class_list),
    }


def main(argv=None) -> int:
    a = parse_args(argv)
    mapping = admission_setup.plan_mapping()
    if a.eviction_interval is None:
        a.eviction_interval = mapping["cpu"]["eviction_interval"]
    pools = pool_table(mapping)
    wl = workload_from_args(a)
    if a.plan_only:
        print(json.dumps(plan(a, pools, wl), indent=1))
        return 0
    if a.from_runs:
        return rebuild(pathlib.Path(a.from_runs), a)
    return run(a, pools, wl)


def run(a, pools: Dict[str, Dict[str, Any]], wl: Workload) -> int:
    """Every boot, pools outer and arms inner (the arms of one pool run close in time); the raw
    per-boot JSON and ``meta.json`` go to ``--log-dir/STAMP``, then the outputs. 1 if a boot
    failed (the others still run and are written)."""
    command = " ".join(shlex.quote(x) for x in [".venv/bin/python", "benchmarks/prefix_reuse.py",
                                                 *a.argv])
    model_dir = get_model(a.model).build(window=CPU.window)
    wl = dataclasses.replace(wl, token_hi=real_vocab(model_dir))
    check_workload(wl)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    log_dir = pathlib.Path(a.log_dir) / stamp
    log_dir.mkdir(parents=True, exist_ok=True)
    scripts = build_scripts(wl, a.class_list)
    m = _machine()
    meta = {"command": command, "model": a.model, "date": time.strftime("%Y-%m-%d %H:%M"), "git_head": git_head(),
            "preset": a.preset, "eviction_interval": a.eviction_interval,
            "workload": wl.to_dict(), "classes": a.class_list, "arm_order": a.arm_list,
            "pool_order": a.pool_list, "pools": pools,
            "main_islands_eviction": EVICTION_ORDERS[0],
            "arm_descriptions": arm_descriptions(a.arm_list, EVICTION_ORDERS[0]),
            "plan": plan_classes(wl, a.class_list),
            "machine": {"cpus": m["cpus"], "platform": m["platform"], "load_start": m["load"]}}
    (log_dir / "meta.json").write_text(json.dumps(meta, indent=1))
    log(f"{len(a.arm_list)} arms x {len(a.pool_list)} pools = {len(a.arm_list) * len(a.pool_list)} "
        f"boots, classes {a.class_list} ({a.preset}); logs in {log_dir}")
    for c in a.class_list:
        p = meta["plan"][c]
        log(f"  {c}: {p['requests']} requests, {p['prompt_tokens']:,} prompt tokens, expected "
            f"share {p['expected_share']:.2f}")

    t_start = time.monotonic()
    boots: List[Dict[str, Any]] = []
    for pool_name in a.pool_list:
        for arm in a.arm_list:
            boots.append(_boot_or_error(arm, pool_name, pools[pool_name], scripts, a, model_dir,
                                        log_dir))
            log(f"[{arm} @{pool_name}] done in {boots[-1].get('boot_total_s', 0):.0f} s; "
                f"{time.monotonic() - t_start:.0f} s elapsed")
    meta["runtime_s"] = round(time.monotonic() - t_start, 1)
    meta["machine"]["load_end"] = _machine()["load"]
    (log_dir / "meta.json").write_text(json.dumps(meta, indent=1))
    rc = write_outputs(boots, meta, a, log_dir)
    return rc if not any("error" in b for b in boots) else 1


def _boot_or_error(arm: str, pool_name: str, pool: Dict[str, Any], scripts: Dict[str, Any], a,
                   model_dir: pathlib.Path, log_dir: pathlib.Path) -> Dict[str, Any]:
    """``run_boot``, or a record with its ``error`` if it raised; saved as ``ARM_POOL.json``."""
    try:
        b = run_boot(arm, pool_name, pool, scripts, a.class_list, a, model_dir, log_dir)
    except Exception as e:  # noqa: BLE001 - record it, run the other boots
        log(f"[{arm} @{pool_name}] FAILED: {type(e).__name__}: {e}")
        b = {"arm": arm, "pool": pool_name, "error": f"{type(e).__name__}: {e}", "classes": {}}
    (log_dir / f"{arm}_{pool_name}.json").write_text(json.dumps(b, indent=1))
    return b


def rebuild(run_dir: pathlib.Path, a) -> int:
    """``--from-runs``: the outputs from an earlier run's ``meta.json`` and per-boot files."""
    meta_path = run_dir / "meta.json"
    if not meta_path.exists():
        raise SystemExit(f"no meta.json in {run_dir}")
    meta = json.loads(meta_path.read_text())
    boots = [json.loads(f.read_text()) for f in sorted(run_dir.glob("*.json"))
             if f.name != "meta.json"]
    if not boots:
        raise SystemExit(f"no per-boot files in {run_dir}")
    meta.setdefault("runtime_s", round(sum(b.get("boot_total_s", 0) for b in boots), 1))
    meta["rebuilt_by"] = " ".join(shlex.quote(x) for x in [".venv/bin/python",
                                                           "benchmarks/prefix_reuse.py", *a.argv])
    log(f"rebuilding from {len(boots)} boots in {run_dir}")
    return write_outputs(boots, meta, a, run_dir)


def write_outputs(boots: List[Dict[str, Any]], meta: Dict[str, Any], a,
                  run_dir: pathlib.Path) -> int:
    """Assemble, check and write the files asked for (``islands_harness.bench_outputs``)."""
    paths = output_paths(a, output_files(a.stem), run_dir)
    result = assemble(boots, meta)
    result["png"] = str(paths["png"]) if paths["png"] else None
    if not result["arms"]:
        log("no boot produced results; nothing to write")
        return 1
    validate_result(result)
    md = to_markdown(result)
    written = write_files(paths, {"json": write_json(result), "md": write_text(md),
                                  "png": lambda p: plot(result, p)})
    s = result["acceptance_summary"]
    log(f"wrote {', '.join(written) or 'nothing'}; runtime {(result['runtime_s'] or 0) / 60:.1f} "
        f"min; acceptance {s['pass']} PASS / {s['fail']} FAIL")
    return 0
