#!/usr/bin/env python
"""Prefix reuse across a fleet: two CPU workers of one arm behind SGLang's router (``smg``).

The question: when a deployment scales out to replicas behind the router, do islands keep their
prefix hits and their admission at the lean pools, with cache-aware routing (requests sharing a
prefix go to the worker that holds it) and with round robin (every worker sees every prefix)?

Per (arm, pool) two workers are booted (``prefix_reuse``'s CPU shape and arms, one OMP thread
each), then per policy the router starts in front of them (``islands_harness.router.SmgRouter``:
``.venv-router/bin/smg launch --worker-urls W0 W1 --policy POLICY`` on a reserved local port; its
Prometheus listener on another; stopped when the policy's classes are done) and
``prefix_reuse``'s classes are sent to it, both workers' caches flushed before each class. Build
the router's environment first with ``scripts/setup_router.sh``.

This file is the command line; ``fleet.run`` boots and measures, ``fleet.report`` compares and
writes (definitions in its docstring).

Examples::

    scripts/setup_router.sh
    .venv/bin/python benchmarks/fleet.py --quick --out benchmarks/results
    .venv/bin/python benchmarks/fleet.py --smoke --arms islands --pools 0.10-eq \\
        --policies cache_aware --classes fanout
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
from fleet.report import assemble, plot, to_markdown  # noqa: E402
from fleet.run import WORKERS, log, run_fleet  # noqa: E402
from islands_harness.provenance import git_head  # noqa: E402
from islands_harness.router import POLICIES, smg_binary  # noqa: E402
from prefix_reuse.arms import ARMS, POOLS, comma_choice, pool_table  # noqa: E402
from prefix_reuse.workloads import CLASSES, PRESETS, build_scripts, check_workload  # noqa: E402

ROOT = _bench_path.ROOT
DEFAULT_ARMS = ("upstream", "islands", "main", "main_islands")
DEFAULT_POOLS = ("0.17-eq", "0.10-eq")
DEFAULT_CLASSES = ("shared_system", "fanout", "branch_edit", "agents")
ROUTER_VERSION = "smg 1.13.0"


def parse_args(argv=None):
    ap = argparse.ArgumentParser(
        prog="benchmarks/fleet.py", formatter_class=argparse.RawDescriptionHelpFormatter,
        description=__doc__.split("\n\n")[0] + " Boots two workers per (arm, pool), starts the "
        "router once per policy, sends prefix_reuse's classes through it, and reports fleet and "
        "per-worker cached tokens, running while queued and retractions, with a plot.",
        epilog="examples:\n  scripts/setup_router.sh\n"
               "  .venv/bin/python benchmarks/fleet.py --quick --out benchmarks/results\n"
               "  .venv/bin/python benchmarks/fleet.py --smoke --arms islands --pools 0.10-eq "
               "--policies cache_aware --classes fanout")
    size = ap.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="prefix_reuse's quick workloads")
    size.add_argument("--smoke", action="store_true", help="tiny workloads (numbers mean nothing)")
    ap.add_argument("--arms", default=",".join(DEFAULT_ARMS),
                    help=f"comma list of prefix_reuse arms: {','.join(ARMS)} "
                         f"(default {','.join(DEFAULT_ARMS)})")
    ap.add_argument("--pools", default=",".join(DEFAULT_POOLS),
                    help=f"comma list of pools: {','.join(POOLS)} (default {','.join(DEFAULT_POOLS)})")
    ap.add_argument("--policies", default=",".join(POLICIES),
                    help=f"comma list of router policies: {','.join(POLICIES)} (default both)")
    ap.add_argument("--classes", default=",".join(DEFAULT_CLASSES),
                    help=f"comma list of classes: {','.join(CLASSES)} (default {','.join(DEFAULT_CLASSES)})")
    ap.add_argument("--seed", type=int, default=None, help="workload seed (default the preset's)")
    add_output_args(ap, {"json": "fleet[_quick|_smoke].json", "md": "fleet[_quick|_smoke].md",
                         "png": "fleet[_quick|_smoke].png"})
    ap.add_argument("--log-dir", default=str(ROOT / ".work" / "fleet"),
                    help="worker and router logs, one STAMP folder per run (not committed)")
    ap.add_argument("--eviction-interval", type=int, default=None,
                    help="SGLANG_SWA_EVICTION_INTERVAL (default prefix_reuse's, 34)")
    ap.add_argument("--omp-threads", type=int, default=1, help="OMP threads of each worker")
    ap.add_argument("--lead", type=float, default=0.3, help="pause before each class, s")
    ap.add_argument("--settle", type=float, default=0.7, help="pause after each class, s")
    ap.add_argument("--boot-timeout", type=float, default=600.0, help="worker boot timeout, s")
    ap.add_argument("--request-timeout", type=float, default=3600.0, help="per request timeout, s")
    ap.add_argument("--from-json", metavar="PATH", default=None,
                    help="no server: rewrite the markdown and plot (and the comparison) from the "
                         "JSON of an earlier run; with --md/--png/--out only, nothing else")
    a = ap.parse_args(argv)
    a.argv = list(sys.argv[1:] if argv is None else argv)
    a.arm_list = comma_choice(a.arms, list(ARMS), "arms", ap)
    a.pool_list = comma_choice(a.pools, POOLS, "pools", ap)
    a.policy_list = comma_choice(a.policies, POLICIES, "policies", ap)
    a.class_list = comma_choice(a.classes, CLASSES, "classes", ap)
    a.preset = "quick" if a.quick else "smoke" if a.smoke else "full"
    a.stem = {"full": "fleet", "quick": "fleet_quick", "smoke": "fleet_smoke"}[a.preset]
    return a


def rebuild(a) -> int:
    """``--from-json``: the comparison, markdown and plot from an earlier run's result."""
    result = json.loads(pathlib.Path(a.from_json).read_text())
    meta = {k: v for k, v in result.items()
            if k not in ("fleets", "comparison", "comparison_summary", "png")}
    paths = output_paths(a, {k: f"{a.stem}.{k}" for k in ("md", "png")}, None)
    out = assemble(result["fleets"], meta)
    out["png"] = str(paths["png"]) if paths["png"] else result.get("png")
    written = write_files(paths, {"md": write_text(to_markdown(out)),
                                  "png": lambda p: plot(out, p)})
    log(f"rebuilt {', '.join(written) or 'nothing (name --md/--png/--out)'} from {a.from_json}")
    return 0


def main(argv=None) -> int:
    a = parse_args(argv)
    if a.from_json:
        return rebuild(a)
    smg_binary()  # fail before any boot when the router is not installed
    mapping = admission_setup.plan_mapping()
    if a.eviction_interval is None:
        a.eviction_interval = mapping["cpu"]["eviction_interval"]
    pools = pool_table(mapping)
    wl = PRESETS[a.preset] if a.seed is None else dataclasses.replace(PRESETS[a.preset], seed=a.seed)
    check_workload(wl)
    scripts = build_scripts(wl, a.class_list)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    log_dir = pathlib.Path(a.log_dir) / stamp
    log_dir.mkdir(parents=True, exist_ok=True)
    meta: Dict[str, Any] = {
        "command": " ".join(shlex.quote(x) for x in [".venv/bin/python", "benchmarks/fleet.py", *a.argv]),
        "date": time.strftime("%Y-%m-%d %H:%M"), "git_head": git_head(), "preset": a.preset,
        "router": ROUTER_VERSION, "workers": WORKERS, "omp_threads": a.omp_threads,
        "eviction_interval": a.eviction_interval, "workload": wl.to_dict(),
        "pools": {p: pools[p] for p in a.pool_list},
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(terse=True),
                    "load_start": [round(x, 2) for x in os.getloadavg()]},
    }
    from islands_harness.tiny_model import build_tiny_model

    model_dir = build_tiny_model(window=admission_setup.CpuShape().window)
    log(f"{len(a.arm_list)} arms x {len(a.pool_list)} pools, {WORKERS} workers each, policies "
        f"{a.policy_list}, classes {a.class_list} ({a.preset}); logs in {log_dir}")
    t0 = time.monotonic()
    fleets: List[Dict[str, Any]] = []
    failed = False
    for pool_name in a.pool_list:
        for arm in a.arm_list:
            def on_class(policy, cls, r, tag=f"[{arm} @{pool_name}]"):
                log(f"{tag} {policy} {cls}: cached share {r['cached_share']:.3f} (expected "
                    f"{r['expected_share']:.3f}), running while queued {r['running_while_queued']}, "
                    f"retractions {r['retractions']}, requests per worker {r['requests_per_worker']}, "
                    f"{r['wall_s']:.0f} s")
            try:
                f = run_fleet(arm, pool_name, pools[pool_name], a.policy_list, scripts,
                              a.class_list, a, model_dir, log_dir, on_class)
            except Exception as e:  # noqa: BLE001 - record it, run the other fleets
                log(f"[{arm} @{pool_name}] FAILED: {type(e).__name__}: {e}")
                f, failed = {"arm": arm, "pool": pool_name, "error": f"{type(e).__name__}: {e}",
                             "policies": {}}, True
            fleets.append(f)
            (log_dir / f"{arm}_{pool_name}.json").write_text(json.dumps(f, indent=1))
            log(f"[{arm} @{pool_name}] done; {time.monotonic() - t0:.0f} s elapsed")
    meta["runtime_s"] = round(time.monotonic() - t0, 1)
    meta["machine"]["load_end"] = [round(x, 2) for x in os.getloadavg()]
    files = {k: f"{a.stem}.{k}" for k in ("json", "md", "png")}
    paths = output_paths(a, files, log_dir)
    result = assemble(fleets, meta)
    result["png"] = str(paths["png"]) if paths["png"] else None
    written = write_files(paths, {"json": write_json(result), "md": write_text(to_markdown(result)),
                                  "png": lambda p: plot(result, p)})
    s = result["comparison_summary"]
    log(f"wrote {', '.join(written)}; {meta['runtime_s'] / 60:.1f} min; {s['pass']} PASS / "
        f"{s['fail']} FAIL")
    return 1 if failed else 0
