"""The command line of ``benchmarks/trace_replay.py``: the parser, ``main`` (run the cells, write
the JSON, the markdown and the plot) and ``--from-json`` (render the markdown and plot of a
result)."""

from __future__ import annotations

import argparse
import json
import pathlib
import shlex
import sys
import time
from typing import Any, Dict, List, Optional

import _bench_path
from islands_harness.bench_outputs import add_output_args
from islands_harness.provenance import git_head
from seed_table.cli import _comma, add_shape_args, write_result
from seed_table.setup import Budget, Shape
from trace_replay import report, traces
from trace_replay.run import grid, run_cells
from trace_replay.setup import ARMS, LEAN, LEAN_MAX_TOTAL_TOKENS, LEAN_RATIO, POOLS, Sizes
from trace_replay.steptime import StepTime

OUTPUT_FILES = {"json": "trace_replay.json", "md": "trace_replay.md", "png": report.PLOT}

DESCRIPTION = """\
A production trace (the Mooncake FAST'25 format; default the committed conversation trace: one
hour, 12,031 requests, mean input 12,035 tokens, output 343) replayed without a model on the real
tree cache, pools, allocator and PrefillAdder of each arm's sglang (the scheduler glue of
islands_harness.sim / sim_main), at the seed's shape: window 1024, page 64, chunk 16384,
--max-running-requests 48. Requests arrive at their timestamps; the scheduler runs in model time,
each prefill batch or decode step advancing the clock by a step-time model of the seed's
deployment on one H100/H200-class GPU (trace_replay/steptime.py: decode by batch size and KV
tokens read, prefill by new tokens and their context), every time divided by --speeds (2: twice as
fast). Pools: the planner's at --swa-full-tokens-ratio 0.32, 0.17, 0.10 (37 GB) and `lean` (the
full pool capped at --lean-max-total-tokens 400,000, ratio 0.32, so the full pool evicts
prefixes). Reports per arm, pool and speed: the cached share of input tokens against the trace's
no-forget bound, the SWA-cut counter's share (0.5.23 islands arms), HiCache's host hits, prefill
tokens computed, running requests (mean, max, a plot over model time), time to first token in
model time (mean, p50, p99), retractions, and each cell's wall time.
"""

EPILOG = """\
Arms: upstream, islands (sglang 0.5.15.post1, .venv); main, main_islands, main_hicache,
main_islands_hicache (0.5.23, .venv-main and .venv-main-islands: scripts/setup_main.sh
[--islands]). The grid: every --pools at the first of --speeds, --other-speed-pools at the others.
Cost on 2 shared cores: about 1 s of wall time per 8 s of model time per cell at speed 1 (about
10 s of interpreter start per 0.5.23 cell); the whole hour is about 8 minutes a cell.

  .venv/bin/python benchmarks/trace_replay.py --minutes 10 --speeds 1 --out benchmarks/results
  .venv/bin/python benchmarks/trace_replay.py --arms upstream,islands --pools lean --limit 500
  .venv/bin/python benchmarks/trace_replay.py --from-json RESULT.json --out DIR
"""


def _speeds(text: str, ap) -> List[float]:
    try:
        xs = [float(x) for x in text.split(",") if x]
    except ValueError:
        ap.error(f"--speeds: not numbers: {text!r}")
    if not xs or any(x <= 0 for x in xs) or len(set(xs)) != len(xs):
        ap.error(f"--speeds: positive, distinct numbers, got {text!r}")
    return xs


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="benchmarks/trace_replay.py", description=DESCRIPTION,
                                 epilog=EPILOG,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", default=str(traces.CONVERSATION),
                    help="a trace in the Mooncake format, .jsonl or .jsonl.gz (default the "
                         "committed conversation trace)")
    ap.add_argument("--minutes", type=float, default=None,
                    help="only the requests arriving in the first M minutes")
    ap.add_argument("--limit", type=int, default=None, help="only the first N requests")
    ap.add_argument("--scale", type=int, default=1,
                    help="divide every length by this factor (a divisor of 512; default 1)")
    ap.add_argument("--arms", default=",".join(ARMS), help=f"comma list (default {','.join(ARMS)})")
    ap.add_argument("--pools", default=",".join(POOLS),
                    help=f"pools at the first speed (default {','.join(POOLS)})")
    ap.add_argument("--other-speed-pools", default=f"0.10,{LEAN}",
                    help="pools at the other speeds (default 0.10,lean)")
    ap.add_argument("--speeds", default="1,0.5,2",
                    help="step-time model speeds, the first for --pools (default 1,0.5,2)")
    ap.add_argument("--seed", type=int, default=0, help="token-id seed (default 0)")
    add_shape_args(ap)
    ap.add_argument("--lean-max-total-tokens", type=int, default=LEAN_MAX_TOTAL_TOKENS,
                    help=f"the lean pool's --max-total-tokens (default {LEAN_MAX_TOTAL_TOKENS:,})")
    ap.add_argument("--lean-ratio", type=float, default=LEAN_RATIO,
                    help=f"the lean pool's --swa-full-tokens-ratio (default {LEAN_RATIO:g})")
    ap.add_argument("--from-json", metavar="PATH", default=None,
                    help="run nothing: render the markdown and plot of this result")
    add_output_args(ap, OUTPUT_FILES)
    a = ap.parse_args(argv)
    a.arm_list = _comma(str, list(ARMS), a.arms, ap)
    names = list(POOLS)
    norm = (lambda x: x if x == LEAN else f"{float(x):.2f}")
    try:
        a.pool_list = _comma(norm, names, a.pools, ap)
        a.other_pool_list = _comma(norm, names, a.other_speed_pools, ap)
    except ValueError:
        ap.error(f"pools are ratios of {','.join(POOLS)}")
    a.speed_list = _speeds(a.speeds, ap)
    if a.from_json is None:
        try:
            traces.load(a.trace, limit=a.limit, minutes=a.minutes)  # every line checked
        except (OSError, traces.TraceError) as e:
            ap.error(f"--trace {a.trace}: {e}")
    return a


def _run(a: argparse.Namespace, argv: List[str]) -> Dict[str, Any]:
    """Run the grid ``a`` asks for; the result's JSON record."""
    shape = Shape(window=a.window, page=a.page, chunk=a.chunk, cap=a.cap)
    sizes = Sizes(budget=Budget(budget_bytes=a.budget),
                  lean_max_total_tokens=a.lean_max_total_tokens, lean_ratio=a.lean_ratio)
    path = pathlib.Path(a.trace).resolve()
    if path.is_relative_to(_bench_path.ROOT):
        path = path.relative_to(_bench_path.ROOT)  # the workers run in the repository root
    trace = {"path": str(path), "limit": a.limit, "minutes": a.minutes, "scale": a.scale}
    t0 = time.monotonic()
    out = run_cells(grid(a.speed_list, a.pool_list, a.other_pool_list, a.arm_list), shape, sizes,
                    trace, StepTime(window=a.window), seed=a.seed)
    return report.result_record(
        command=" ".join(shlex.quote(x) for x in [".venv/bin/python", "benchmarks/trace_replay.py",
                                                  *argv]),
        date=time.strftime("%Y-%m-%d %H:%M"), git_head=git_head(),
        runtime_s=round(time.monotonic() - t0, 1), shape=shape, sizes=sizes, trace=trace,
        speeds=a.speed_list, arms=a.arm_list, out=out)


def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    a = parse_args(argv)
    result = json.loads(pathlib.Path(a.from_json).read_text()) if a.from_json else _run(a, argv)
    run_dir = _bench_path.ROOT / ".work" / "trace_replay" / time.strftime("%Y%m%d-%H%M%S")
    write_result(a, OUTPUT_FILES, run_dir, result, report.to_markdown, report.plot_running,
                 "trace_replay")
    return 0
