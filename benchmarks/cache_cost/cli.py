#!/usr/bin/env python
"""Cache cost benchmark: per-operation CPU time of the tree cache's own work, SWA islands (each
reclaim policy) against upstream ``SWARadixCache``, as the cache grows and as the waiting queue
grows.

Each arm builds the same deterministic workload (``cache_cost.workload``: shared system prompts,
multi-turn transcripts, fan-out over documents, chunked long prompts) through
``islands_harness.sim.MiniScheduler`` (the scheduler's glue around the real ``Req``,
``ScheduleBatch``, ``PrefillAdder``, tree cache, pools and allocator; page 1, chunk ``4w``, pools
that hold the whole workload), then times each operation on the built cache
(``cache_cost.run``: what each operation is, and how it is sampled). Arms: ``upstream``
(``SWARadixCache``), ``islands_lazy`` / ``islands_eager`` / ``islands_auto``
(``SWAIslandRadixCache`` with ``--swa-islands-reclaim``).

Two sweeps:

- size: per window, a series of client counts, so the tokens cached span about 10^3 to 10^6 and
  the nodes with live SWA reach about 10^4; every operation at every size;
- queue: at a middle size of the first window, 1 to 4,096 requests waiting (not admitted) whose
  prompts share prefixes with cached transcripts and shared system prompts (two of them follow
  each probe's message: they have queued hits its commits move); then ``on_request_queued``,
  ``evict_64_*`` and the commits of probes admitted ahead of the queue.

Times are medians (and p90) in microseconds of wall time (``perf_counter_ns``), torch on one
thread, the garbage collector off in timed regions. Evictions are timed as the first eviction on
fresh clones of one state, so every sample sees the same tree. The machine's load moves single
samples: compare medians, and the shape of a curve more than one point.

Outputs (``islands_harness.bench_outputs``: ``--out DIR``, default the run's folder under ``.work/``):
``cache_cost.json`` (per arm, window, size, op: ``median_us``, ``p90_us``, ``n``; the size facts;
the queue sweep; ratios and growth slopes against upstream), ``cache_cost.md`` (one table per
window and a queue table, with the command, git head and date) and ``cache_cost.png`` (log-log:
each operation against nodes with live SWA, one line per arm; and against queue length).

    .venv/bin/python benchmarks/cache_cost.py --quick            # 1-2 minutes
    .venv/bin/python benchmarks/cache_cost.py --out /tmp/cost    # the full run, 11 minutes on 2
                                                                 # shared cores
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import os
import shlex
import sys
import time
from typing import Any, Dict, List

os.environ.setdefault("SGLANG_USE_CPU_ENGINE", "1")
import _bench_path  # noqa: E402  (puts the repository root and benchmarks/ on sys.path)
from islands_harness.bench_outputs import (add_output_args, output_paths, write_files, write_json,  # noqa: E402
                           write_text)
from cache_cost.ops import frozen_heap  # noqa: E402
from cache_cost.report import analyse, plot, to_markdown  # noqa: E402
from cache_cost.run import ARM_ORDER, ARMS, Reps, log, measure_size, queue_point  # noqa: E402
from cache_cost.workload import Shape  # noqa: E402

ROOT = _bench_path.ROOT
OUTPUT_FILES = {"json": "cache_cost.json", "md": "cache_cost.md", "png": "cache_cost.png"}


@dataclasses.dataclass(frozen=True)
class Preset:
    sizes: Dict[int, List[int]]  # window -> client counts
    queue_window: int
    queue_clients: int
    queue: List[int]
    reps: Reps


PRESETS = {
    "full": Preset(sizes={32: [8, 32, 128, 512, 2048], 128: [4, 16, 64, 256, 1024],
                          1024: [1, 4, 16, 64, 128]},
                   queue_window=32, queue_clients=128, queue=[1, 4, 16, 64, 256, 1024, 4096],
                   reps=Reps(evict=5, op=50, queued=64)),
    "quick": Preset(sizes={32: [8, 64, 512]}, queue_window=32, queue_clients=64,
                    queue=[1, 64, 256], reps=Reps(evict=3, op=20, queued=16)),
}


def parse_args(argv=None):
    ap = argparse.ArgumentParser(
        prog="benchmarks/cache_cost.py",
        description=__doc__.split("\n\n")[0].replace("\n", " "),
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true",
                    help="window 32, 3 sizes, queue 1/64/256, fewer samples (1-2 minutes)")
    ap.add_argument("--windows", default=None,
                    help="comma list of the preset's windows to run (default all: full "
                         "32,128,1024; quick 32)")
    ap.add_argument("--arms", default=",".join(ARM_ORDER),
                    help=f"comma list (default all: {', '.join(ARM_ORDER)}); upstream's no-cold "
                         "state evicts what islands_lazy evicted to reach its own (without "
                         "islands_lazy: half of what is evictable)")
    ap.add_argument("--no-queue", action="store_true", help="skip the queue sweep")
    ap.add_argument("--seed", type=int, default=0, help="workload seed (default 0)")
    add_output_args(ap, OUTPUT_FILES)
    a = ap.parse_args(argv)
    a.preset = PRESETS["quick" if a.quick else "full"]
    a.window_list = ([int(x) for x in a.windows.split(",")] if a.windows
                     else list(a.preset.sizes))
    if set(a.window_list) - set(a.preset.sizes):
        ap.error(f"--windows: choose from {sorted(a.preset.sizes)} (the preset's)")
    a.arm_list = [x for x in ARM_ORDER if x in a.arms.split(",")]
    bad = set(a.arms.split(",")) - set(ARMS)
    if bad or not a.arm_list:
        ap.error(f"unknown arms {sorted(bad)}; choose from {', '.join(ARM_ORDER)}")
    return a


def size_sweep(a, result: Dict[str, Any], t0: float) -> Dict[str, Any]:
    """Every arm at every (window, size); keeps the queue sweep's base (built + no-cold trees)."""
    p, keep = a.preset, {}
    total = sum(len(p.sizes[w]) for w in a.window_list)
    done = 0
    for w in a.window_list:
        for n in p.sizes[w]:
            done += 1
            drain_total = None
            for arm in a.arm_list:
                with frozen_heap():
                    r = measure_size(arm, Shape(w), n, a.seed, p.reps, drain_total)
                if arm == "islands_lazy":
                    drain_total = r["drain"]["evicted"]
                built, nocold = r.pop("_built"), r.pop("_nocold")
                if (w, n) == (p.queue_window, p.queue_clients) and not a.no_queue:
                    keep[arm] = (built, nocold)
                del built, nocold
                gc.collect()
                result["size_sweep"].setdefault(arm, {}).setdefault(str(w), {})[str(n)] = r
                f = r["facts"]
                log(f"size {done}/{total} w {w} clients {n} {arm}: {f['tokens_cached']:,} tokens, "
                    f"{f['live_swa_nodes']:,} live-SWA nodes; evict_64_nocold "
                    f"{r['ops']['evict_64_nocold']['median_us']:,.0f} us "
                    f"({time.monotonic() - t0:.0f} s)")
    return keep


def queue_sweep(a, keep: Dict[str, Any], result: Dict[str, Any], t0: float) -> None:
    p = a.preset
    for arm in a.arm_list:
        if arm not in keep:
            continue
        built, nocold = keep.pop(arm)
        for q in p.queue:
            with frozen_heap():
                ops = queue_point(arm, built, nocold, q, a.seed, p.reps)
            result["queue_sweep"].setdefault(arm, {})[str(q)] = {"ops": ops}
            log(f"queue {q} {arm}: evict_64_nocold {ops['evict_64_nocold']['median_us']:,.0f} us, "
                f"commit {ops['commit_chunk']['median_us']:,.0f} us "
                f"({time.monotonic() - t0:.0f} s)")
        del built, nocold
        gc.collect()


def main(argv=None) -> int:
    a = parse_args(argv)
    import torch

    from islands_harness.provenance import code_version, git_head

    torch.set_num_threads(1)
    t0 = time.monotonic()
    argv_list = sys.argv[1:] if argv is None else list(argv)
    command = " ".join(shlex.quote(x) for x in
                       [".venv/bin/python", "benchmarks/cache_cost.py", *argv_list])
    p = a.preset
    result: Dict[str, Any] = {
        "command": command, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "git_head": git_head(), "code": code_version(), "preset": "quick" if a.quick else "full",
        "seed": a.seed, "arms": a.arm_list, "windows": a.window_list,
        "sizes": {str(w): p.sizes[w] for w in a.window_list},
        "queue": {"window": p.queue_window, "clients": p.queue_clients,
                  "lengths": [] if a.no_queue else p.queue},
        "reps": dataclasses.asdict(p.reps),
        "environment": {"cpus": os.cpu_count(), "loadavg_start": list(os.getloadavg()),
                        "python": sys.version.split()[0], "torch": torch.__version__,
                        "torch_threads": 1},
        "size_sweep": {}, "queue_sweep": {}}
    keep = size_sweep(a, result, t0)
    queue_sweep(a, keep, result, t0)
    result["environment"]["loadavg_end"] = list(os.getloadavg())
    result["code_end"] = code_version()  # a change here means someone re-applied the patches
    result["runtime_s"] = round(time.monotonic() - t0, 1)
    result["analysis"] = analyse(result)
    run_dir = ROOT / ".work" / "cache_cost" / time.strftime("%Y%m%d-%H%M%S")
    written = write_files(output_paths(a, OUTPUT_FILES, run_dir),
                          {"json": write_json(result), "md": write_text(to_markdown(result)),
                           "png": lambda path: plot(result, path)})
    log(f"wrote {', '.join(written)} in {result['runtime_s'] / 60:.1f} min")
    return 0
