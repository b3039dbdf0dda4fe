#!/usr/bin/env python
"""Prefix reuse, replayed without a model and without timing: ``prefix_reuse.py``'s workloads
(same builders, presets, pools and arms) driven through ``islands_harness.sim.MiniScheduler``,
the scheduler's event-loop glue around the real ``Req`` / ``ScheduleBatch`` / ``PrefillAdder`` /
tree cache / pools / allocator of the installed (patched) SGLang. Only the next token id is
synthetic (a hash of request id and position, so outputs never collide).

Why next to the server benchmark: on the real server, which request is admitted before which
depends on thread timing, and at the lean pools one admission order can move a class's cached
tokens by 10%. Here each (arm, pool, class, seed) is deterministic, so differences between arms
are the cache's, and several seeds show which differences hold across workloads.

Clients behave as in ``prefix_reuse.py``: a group of requests is submitted at once; a client's
next group goes in when every request of its group finished (its outputs extend the transcript);
phases are barriers (fanout's second wave starts when the first finished; shared_system's users
start when user 0's first turn finished). Shape: window 32, page 1, chunk 512, cap 16, full pool
65,536, ``SGLANG_SWA_EVICTION_INTERVAL`` 34 (``admission.setup.CpuShape``, ``plan_mapping``).

Output: JSON (per arm, pool, class: cached tokens, expected shared tokens and retractions per
seed) and a markdown table of the sums over seeds, with islands (the default reclaim, ``lazy``)
against the better of the two upstream arms.

    .venv/bin/python benchmarks/prefix_reuse_sim.py                  # quick preset, seeds 0-2
    .venv/bin/python benchmarks/prefix_reuse_sim.py --seeds 0-4 --pools 0.17-eq,0.10-eq
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pathlib
import shlex
import statistics
import subprocess
import sys
import time
from typing import Any, Dict, Iterator, List, Optional, Tuple

import _bench_path  # noqa: E402  (puts the repository root and benchmarks/ on sys.path)
from admission import setup as admission_setup  # noqa: E402
from prefix_reuse.arms import ARMS, CPU, MAIN_ARMS, comma_choice, pool_table  # noqa: E402
from prefix_reuse.arms import DEFAULT_POOLS, POOLS  # noqa: E402  (the simulator models these)
from islands_harness.main_arm import main_islands_python, main_python  # noqa: E402
from prefix_reuse.replay import (SIM_ARMS, Shape, _branch_conv, _turns, drive,  # noqa: E402,F401
                                 next_token, run_class)
from prefix_reuse.workloads import CLASSES, PRESETS  # noqa: E402
from prefix_reuse import replay  # noqa: E402
from islands_harness.bench_outputs import add_output_args, output_paths, write_files, write_json, write_text  # noqa: E402,E501
from islands_harness.provenance import git_head  # noqa: E402
from sglang.srt.mem_cache.swa_island_formulas import EVICTION_ORDERS  # noqa: E402

ROOT = _bench_path.ROOT
OUTPUT_FILES = {"json": "prefix_reuse_sim.json", "md": "prefix_reuse_sim.md"}

# every arm of the server benchmark: 0.5.15's by their stack settings, 0.5.23's by their flags
assert set(SIM_ARMS) | set(MAIN_ARMS) == set(ARMS), "the simulated arms are the server benchmark's"
ALL_ARMS = list(SIM_ARMS) + list(MAIN_ARMS)
TARGET_ARMS = {
    "0.5.15": ("upstream", "upstream_knobs", "islands_eager", "islands", "islands_auto"),
    "main": ("islands", "main", "main_knobs", "main_islands", "main_islands_window"),
    "main_hicache": ("main_hicache", "main_islands", "main_islands_hicache"),
}
"""``--target``'s default arms; ``main`` also runs 0.5.15's ``islands``, the bar main's islands
are held to; ``main_hicache``: islands with HiCache's host tier against the better of the host
tier alone and islands alone (issue 50)."""

# ----------------------------------------------------------------------------- runs


def arm_python(arm: str) -> str:
    """The interpreter whose sglang the arm runs: this one for 0.5.15's arms, `.venv-main`'s for
    stock 0.5.23, `.venv-main-islands`' for the 0.5.23 island arms."""
    if arm not in MAIN_ARMS:
        return sys.executable
    return main_islands_python() if ARMS[arm].get("main_islands") else main_python()


SHAPE = Shape(**dataclasses.asdict(CPU))


def run_one(arm: str, swa_pool: int, cls: str, script: Any, eviction_interval: int,
            latency: int = 0) -> Dict[str, Any]:
    """One (arm, pool, class) replay at the CPU shape, in this interpreter (0.5.15's arms)."""
    return replay.run_one(arm, SHAPE, swa_pool, cls, script, eviction_interval, latency)


def run_cells(arm: str, cells: List[replay.Cell], a, swa_pools: Dict[str, int],
              evict: int, full_pools: Optional[Dict[str, int]] = None
              ) -> Iterator[Tuple[replay.Cell, Dict[str, Any]]]:
    """Each cell's result, replayed here or, for an arm of another sglang, by a worker
    (``prefix_reuse/replay.py``) in its interpreter: one process per arm, a JSON line per cell.
    ``full_pools``: a pool's full tokens where they are not the shape's (``lean-device``)."""
    spec = {"cells": cells, "shape": dataclasses.asdict(SHAPE), "preset": a.preset,
            "classes": a.class_list, "swa_pools": swa_pools, "full_pools": full_pools or {},
            "eviction_interval": evict,
            "latency": a.latency_steps,
            "main": {arm: {"args": list(ARMS[arm]["args"]), "env": ARMS[arm]["env"]}}
            if arm in MAIN_ARMS else {}}
    py = arm_python(arm)
    if py == sys.executable:
        yield from replay.run_cells(spec)
        return
    proc = subprocess.Popen([py, "-m", "prefix_reuse.replay", json.dumps(spec)],
                            stdout=subprocess.PIPE, text=True, cwd=str(ROOT), env=_bench_path.worker_env())
    for line in proc.stdout:
        rec = json.loads(line)
        yield tuple(rec["cell"]), rec["result"]
    if proc.wait() != 0:
        raise SystemExit(f"the {arm} worker ({py}) failed with exit code {proc.returncode}")


def _seeds(s: str) -> List[int]:
    out: List[int] = []
    for part in s.split(","):
        lo, _, hi = part.partition("-")
        out += list(range(int(lo), int(hi or lo) + 1))
    return out


def output_files(target: str) -> Dict[str, str]:
    return OUTPUT_FILES if target == "0.5.15" else {k: v.replace("_sim.", f"_sim_{target}.")
                                                   for k, v in OUTPUT_FILES.items()}


def parse_args(argv=None):
    ap = argparse.ArgumentParser(
        prog="benchmarks/prefix_reuse_sim.py",
        description=__doc__.split("\n\n")[0].replace("\n", " "),
        epilog="arms: " + ", ".join(ALL_ARMS) + "; pools: " + ", ".join(POOLS)
               + "; classes: " + ", ".join(CLASSES),
    )
    ap.add_argument("--target", choices=sorted(TARGET_ARMS), default="0.5.15",
                    help="which arms run by default and where the files go: 0.5.15 (its five arms, "
                         "prefix_reuse_sim.*) or main (0.5.23's main, main_knobs, main_islands, "
                         "main_islands_window and 0.5.15's islands, prefix_reuse_sim_main.*; needs "
                         "scripts/setup_main.sh and scripts/setup_main.sh --islands)")
    ap.add_argument("--preset", choices=sorted(PRESETS), default="quick",
                    help="workload sizes (prefix_reuse.py's presets; default quick)")
    ap.add_argument("--seeds", default="0-2", help="workload seeds, e.g. 0-4 or 0,3 (default 0-2)")
    ap.add_argument("--arms", default=None, help="comma list (default: the target's arms)")
    ap.add_argument("--pools", default=",".join(DEFAULT_POOLS),
                    help=f"comma list (default {','.join(DEFAULT_POOLS)}; lean-device: a quarter "
                         "of the full pool, where a host tier's full-KV loads count)")
    ap.add_argument("--classes", default=",".join(CLASSES), help="comma list (default all)")
    ap.add_argument("--latency-steps", type=int, default=0,
                    help="scheduler steps between a client's finished group and its next group "
                         "joining the queue, as the server's HTTP round trip delays it (default 0)")
    add_output_args(ap, OUTPUT_FILES)
    ap.add_argument("--rows", metavar="PATH", default=None,
                    help="also write every cell's requests, in script order (order, prompt tokens, "
                         "cached, expected shared tokens), as JSON keyed 'seed/pool/arm/class': "
                         "which request of a class lost its hit, to diff two arms by")
    a = ap.parse_args(argv)
    a.seed_list = _seeds(a.seeds)
    a.arm_list = comma_choice(a.arms or ",".join(TARGET_ARMS[a.target]), ALL_ARMS, "arms", ap)
    a.pool_list = comma_choice(a.pools, POOLS, "pools", ap)
    a.class_list = comma_choice(a.classes, CLASSES, "classes", ap)
    return a


COMPARISONS = (
    # (candidate, reference arms, what the reference is called)
    ("islands", ("upstream", "upstream_knobs"), "better upstream arm"),
    ("main_islands", ("main", "main_knobs"), "better main arm"),
    ("main_islands_window", ("main", "main_knobs"), "better main arm"),
    ("main_islands", ("islands",), "0.5.15 islands"),
    ("main_islands_window", ("islands",), "0.5.15 islands"),
    ("main_islands_hicache", ("main_hicache", "main_islands"),
     "better of `main_hicache` and `main_islands`"),
)


def summarize(result: Dict[str, Any]) -> List[Dict[str, Any]]:
    """Per comparison, pool and class: the candidate's cached tokens summed over seeds against the
    best reference arm's sum, in how many seeds the candidate is at least as good as every
    reference arm, and the per-seed difference (candidate less the best reference arm of that
    seed, tokens): its mean and the mean's standard error (None with one seed), the noise a sum
    over seeds is read against."""
    out = []
    arms = result["arms"]
    for cand, ref_arms, ref_name in COMPARISONS:
        for pool in result["pools"]:
            for cls in result["classes"]:
                c = arms.get(cand, {}).get(pool, {}).get(cls)
                refs = {n: arms[n][pool][cls] for n in ref_arms
                        if cls in arms.get(n, {}).get(pool, {})}
                if c is None or not refs:
                    continue
                best = max(refs, key=lambda n: sum(refs[n]["cached_tokens"]))
                n_seeds = len(c["cached_tokens"])
                diffs = [c["cached_tokens"][i] - max(r["cached_tokens"][i] for r in refs.values())
                         for i in range(n_seeds)]
                wins = sum(d >= 0 for d in diffs)
                out.append({"candidate": cand, "reference": ref_name, "pool": pool, "class": cls,
                            "cached": sum(c["cached_tokens"]), "best_reference_arm": best,
                            "best_reference": sum(refs[best]["cached_tokens"]),
                            "seeds_at_least_as_good": wins, "seeds": n_seeds,
                            "mean_seed_difference": round(statistics.fmean(diffs), 1),
                            "seed_difference_se": (round(statistics.stdev(diffs) / n_seeds ** 0.5, 1)
                                                   if n_seeds > 1 else None),
                            "retractions": sum(c["retractions"])})
    return out


GAP_CLOSED = ("main_islands_hicache",)
"""Candidates whose comparison also reports the share of the reference's gap to the no-forget
bound they close (issue 50's done-when)."""


def _gap_closed(result: Dict[str, Any], s: Dict[str, Any]) -> str:
    """(candidate - best reference) / (bound - best reference), summed over seeds; "–" where the
    reference is at the bound."""
    bound = sum(result["arms"][s["candidate"]][s["pool"]][s["class"]]["expected_shared_tokens"])
    gap = bound - s["best_reference"]
    return f"{(s['cached'] - s['best_reference']) / gap:.3f}" if gap > 0 else "–"


def to_markdown(result: Dict[str, Any]) -> str:
    L = ["# Prefix reuse, replayed in the scheduler glue (no model, no timing)\n",
         f"Generated by `benchmarks/prefix_reuse_sim.py` on {result['date']} (HEAD {result['git_head']}); "
         f"preset `{result['preset']}`, seeds {result['seeds']}, {result['runtime_s'] / 60:.1f} min.\n",
         "Command:\n", "```", result["command"], "```\n",
         "Real SGLang tree cache, pools, allocator, `Req`, `ScheduleBatch` and `PrefillAdder` driven by "
         "the scheduler's glue (`islands_harness.sim.MiniScheduler` on sglang 0.5.15.post1, "
         "`islands_harness.sim_main.MainMiniScheduler` on 0.5.23 for the `main*` arms, each in its own "
         "environment); the workloads, pools and arms of `prefix_reuse.py` "
         "(`islands` = the default reclaim, `lazy`; `islands_auto` = `--swa-islands-reclaim auto`; "
         "`main_islands_window` = `--swa-islands-eviction window`"
         + ("; `main_islands` = `--enable-swa-islands` with its defaults: eviction `auto`, `window` "
            "at both lean pools and `lru` at the ample one, and the reclaim that order defaults to"
            if result.get("main_islands_eviction") == "auto" else "") + "). "
         "Deterministic: a rerun gives the same numbers. Cells: cached tokens summed over the seeds "
         "(share of what a cache that forgets nothing could hit)"
         + ("; with a host tier (`main_hicache`, `main_islands_hicache`: HiCache's controller and "
            "host pools, loads admitted by `PrefillAdder`), how many of them were loaded back from "
            "the host" if "host_cached_tokens" in result else "") + ".\n"]
    arms = [a for a in ALL_ARMS if a in result["arms"]]
    for pool in result["pools"]:
        full = result.get("full_pools", {}).get(pool)
        L.append(f"## {pool} (SWA pool {result['swa_pools'][pool]:,} tokens"
                 + (f", full pool {full:,}" if full else "") + ")\n")
        L.append("| class | " + " | ".join(f"`{a}`" for a in arms) + " | expected |")
        L.append("|---|" + "---|" * (len(arms) + 1))
        for cls in result["classes"]:
            cells, exp = [], None
            for a in arms:
                r = result["arms"][a].get(pool, {}).get(cls)
                if r is None:
                    cells.append("–")
                    continue
                exp = sum(r["expected_shared_tokens"])
                c = sum(r["cached_tokens"])
                retr = sum(r["retractions"])
                hosted = sum(result.get("host_cached_tokens", {}).get(a, {}).get(pool, {})
                             .get(cls, []))
                cells.append((f"{c:,} ({c / exp:.3f})" + (f", {retr} retr." if retr else "")
                              if exp else f"{c:,}")
                             + (f", {hosted:,} from the host" if hosted else ""))
            L.append(f"| {cls} | " + " | ".join(cells) + f" | {exp:,} |" if exp is not None else "")
        L.append("")
    for cand, ref_name in dict.fromkeys((s["candidate"], s["reference"]) for s in result["summary"]):
        rows = [s for s in result["summary"] if (s["candidate"], s["reference"]) == (cand, ref_name)]
        gap = cand in GAP_CLOSED  # the share of the reference's gap to the bound it closes
        L.append(f"## `{cand}` against the {ref_name}\n")
        L.append(f"| pool | class | `{cand}` | {ref_name} | ratio | seeds where `{cand}` >= it "
                 "| per-seed difference, mean ± SE |" + (" gap to the bound closed |" if gap else ""))
        L.append("|---|---|---|---|---|---|---|" + ("---|" if gap else ""))
        for s in rows:
            ratio = f"{s['cached'] / s['best_reference']:.3f}" if s["best_reference"] else "–"
            se = s["seed_difference_se"]
            spread = f"{s['mean_seed_difference']:+,.1f}" + (f" ± {se:,.1f}" if se is not None else "")
            L.append(f"| {s['pool']} | {s['class']} | {s['cached']:,} | `{s['best_reference_arm']}` "
                     f"{s['best_reference']:,} | {ratio} | {s['seeds_at_least_as_good']} / {s['seeds']} "
                     f"| {spread} |" + (f" {_gap_closed(result, s)} |" if gap else ""))
        L.append("")
    return "\n".join(L).rstrip("\n") + "\n"


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    a = parse_args(argv)
    mapping = admission_setup.plan_mapping()
    pools = pool_table(mapping)
    swa_pools = {p: pools[p]["swa_pool"] for p in a.pool_list}
    full_pools = {p: pools[p]["max_total_tokens"] for p in a.pool_list
                  if "max_total_tokens" in pools[p]}
    evict = mapping["cpu"]["eviction_interval"]
    t0 = time.monotonic()
    arms: Dict[str, Dict[str, Dict[str, Dict[str, List[int]]]]] = {}
    for arm in a.arm_list:  # results are filled in seed order, whatever the arms' order
        for pool in a.pool_list:
            for cls in a.class_list:
                arms.setdefault(arm, {}).setdefault(pool, {})[cls] = {
                    "cached_tokens": [], "expected_shared_tokens": [], "retractions": [],
                    "prompt_tokens": [], "requests": []}
    rows: Dict[str, List[Dict[str, Any]]] = {}
    host: Dict[Tuple[str, str, str], List[int]] = {}  # per seed: tokens hit on the host tier
    n, total = 0, len(a.seed_list) * len(a.arm_list) * len(a.pool_list) * len(a.class_list)
    for arm in a.arm_list:
        cells = [(seed, pool, arm, cls) for seed in a.seed_list for pool in a.pool_list
                 for cls in a.class_list]
        for (seed, pool, _, cls), r in run_cells(arm, cells, a, swa_pools, evict, full_pools):
            rec = arms[arm][pool][cls]
            for k in rec:
                rec[k].append(r[k])
            host.setdefault((arm, pool, cls), []).append(r.get("host_cached_tokens", 0))
            rows[f"{seed}/{pool}/{arm}/{cls}"] = r["rows"]
            n += 1
            print(f"[prefix_reuse_sim {n}/{total}] seed {seed} {pool} {arm} {cls}: cached "
                  f"{r['cached_tokens']:,} of {r['expected_shared_tokens']:,} expected, "
                  f"retractions {r['retractions']} ({time.monotonic() - t0:.0f} s)",
                  file=sys.stderr, flush=True)
    command = " ".join(shlex.quote(x) for x in [".venv/bin/python", "benchmarks/prefix_reuse_sim.py",
                                                 *argv])
    result = {"command": command, "date": time.strftime("%Y-%m-%d %H:%M"), "git_head": git_head(),
              "target": a.target, "preset": a.preset, "latency_steps": a.latency_steps,
              "seeds": a.seed_list, "pools": a.pool_list, "classes": a.class_list,
              "swa_pools": swa_pools, "runtime_s": round(time.monotonic() - t0, 1), "arms": arms}
    if full_pools:
        result["full_pools"] = full_pools
    if any(ARMS[x].get("hicache") for x in a.arm_list):
        result["host_cached_tokens"] = {
            arm: {pool: {cls: host[(arm, pool, cls)] for cls in a.class_list}
                  for pool in a.pool_list} for arm in a.arm_list if ARMS[arm].get("hicache")}
    if "main_islands" in arms:
        result["main_islands_eviction"] = EVICTION_ORDERS[0]  # the default it ran with
    result["summary"] = summarize(result)
    run_dir = ROOT / ".work" / "prefix_reuse_sim" / time.strftime("%Y%m%d-%H%M%S")
    written = write_files(output_paths(a, output_files(a.target), run_dir),
                          {"json": write_json(result), "md": write_text(to_markdown(result))})
    if a.rows:
        written += write_files({"rows": pathlib.Path(a.rows)}, {"rows": write_json(rows)})
    print(f"[prefix_reuse_sim] wrote {', '.join(written)}", file=sys.stderr)
    return 0
