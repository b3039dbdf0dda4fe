"""The command line of ``benchmarks/seed_table.py``: the parser, ``main`` (run the cells, write the
JSON, the markdown and the plot) and ``--from-json`` (render the markdown and plot of a result)."""

from __future__ import annotations

import argparse
import json
import pathlib
import shlex
import sys
import time
from typing import Any, Callable, Dict, List, Optional

import _bench_path
from islands_harness.bench_outputs import add_output_args, output_paths, write_files, write_json, write_text
from islands_harness.provenance import git_head
from seed_table import report
from seed_table.run import log, run_cells
from seed_table.setup import ARMS, PROD, RATIOS, Budget, Shape
from seed_table.workload import WORKLOADS, Draw

OUTPUT_FILES = {"json": "seed_table.json", "md": "seed_table.md", "png": "seed_table_running.png"}

DESCRIPTION = """\
The seed's pool-bound table, replayed without a model on the real tree cache, pools, allocator and
PrefillAdder of each arm's sglang (the scheduler glue of islands_harness.sim / sim_main): N requests
(default 96) all queued at once, --max-running-requests 48, chunk 16384, window 1024, page 64, and
the planner's pools for the seed deployment at each --swa-full-tokens-ratio (0.32: 737,920 tokens,
SWA 236,096; 0.17: 1,030,912 / 175,232; 0.10: 1,265,344 / 126,528). Workloads: `random`, lengths as
SGLang's bench_serving random dataset draws them (32k in, 16k out, --random-range-ratio 0.0: uniform
on [1, len], --seed 42), and `fixed` (every request 32k in, 16k out). The scheduler runs until every
request finished, one iteration per prefill chunk or decode step. Reports, per arm, workload and
ratio: running requests (mean while requests wait, mean, max, and a plot over the iterations),
retractions, SWA held per running request, prefill tokens computed.
"""

EPILOG = """\
Arms: upstream, islands (sglang 0.5.15.post1, .venv); main, main_islands (0.5.23, .venv-main and
.venv-main-islands: scripts/setup_main.sh [--islands]). Cost: about an hour for the full table on
2 cores (each cell a worker process; 0.5.15's paged-allocator kernels run as torch code,
seed_table.alloc_kernels, instead of under the Triton interpreter).

  .venv/bin/python benchmarks/seed_table.py --out benchmarks/results      # the committed table
  .venv/bin/python benchmarks/seed_table.py --arms upstream,islands --ratios 0.17 --workloads fixed
  .venv/bin/python benchmarks/seed_table.py --from-json benchmarks/results/seed_table.json --out DIR
"""


def _comma(kind, allowed, text: str, ap) -> list:
    xs = [kind(x) for x in text.split(",") if x]
    bad = [x for x in xs if x not in allowed]
    if bad or not xs:
        ap.error(f"unknown or no values {bad}; choose from {','.join(map(str, allowed))}")
    return [x for x in allowed if x in xs]


def add_shape_args(ap: argparse.ArgumentParser) -> None:
    """The production shape's options (``--cap``, ``--chunk``, ``--window``, ``--page``) and the
    planner's ``--budget``, defaults the seed deployment's."""
    ap.add_argument("--cap", type=int, default=PROD.cap, help="--max-running-requests (default 48)")
    ap.add_argument("--chunk", type=int, default=PROD.chunk, help="--chunked-prefill-size (16384)")
    ap.add_argument("--window", type=int, default=PROD.window, help="model window w (1024)")
    ap.add_argument("--page", type=int, default=PROD.page, help="--page-size (64)")
    ap.add_argument("--budget", type=float, default=PROD.budget_bytes,
                    help="bytes for KV the planner sizes the pools from (default 37e9)")


def write_result(a: argparse.Namespace, files: Dict[str, str], run_dir: pathlib.Path,
                 result: Dict[str, Any], to_markdown: Callable[[Dict[str, Any]], str],
                 plot: Callable[[Dict[str, Any], pathlib.Path], None], tag: str) -> None:
    """Write ``result``'s JSON, markdown and plot where ``a`` (``add_output_args``'s options)
    says; a fresh run's markdown links the plot it wrote, and ``--from-json`` does not rewrite
    the result it renders."""
    paths = output_paths(a, files, run_dir)
    if not a.from_json and paths["png"] is not None:
        result["plot"] = paths["png"].name  # the markdown links the plot this run wrote
    if (a.from_json and paths["json"] is not None
            and paths["json"].resolve() == pathlib.Path(a.from_json).resolve()):
        paths["json"] = None  # do not rewrite the result being rendered
    written = write_files(paths, {"json": write_json(result),
                                  "md": write_text(to_markdown(result)),
                                  "png": lambda p: plot(result, p)})
    log(f"[{tag}] wrote {', '.join(written)}")


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="benchmarks/seed_table.py", description=DESCRIPTION,
                                 epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arms", default=",".join(ARMS), help=f"comma list (default {','.join(ARMS)})")
    ap.add_argument("--workloads", default=",".join(WORKLOADS),
                    help="comma list of random, fixed (default both)")
    ap.add_argument("--ratios", default=",".join(map(str, RATIOS)),
                    help="comma list of --swa-full-tokens-ratio values (default 0.32,0.17,0.10)")
    ap.add_argument("--requests", type=int, default=Draw.n, help="requests (default 96)")
    ap.add_argument("--input-len", type=int, default=Draw.input_len, help="default 32768")
    ap.add_argument("--output-len", type=int, default=Draw.output_len, help="default 16384")
    ap.add_argument("--seed", type=int, default=Draw.seed, help="bench_serving's --seed (default 42)")
    ap.add_argument("--range-ratio", type=float, default=Draw.range_ratio,
                    help="bench_serving's --random-range-ratio for `random` (default 0.0)")
    add_shape_args(ap)
    ap.add_argument("--max-total-tokens", type=int, default=None,
                    help="cap the full pool as --max-total-tokens does (default none)")
    ap.add_argument("--from-json", metavar="PATH", default=None,
                    help="run nothing: render the markdown and plot of this result")
    add_output_args(ap, OUTPUT_FILES)
    a = ap.parse_args(argv)
    a.arm_list = _comma(str, list(ARMS), a.arms, ap)
    a.workload_list = _comma(str, list(WORKLOADS), a.workloads, ap)
    a.ratio_list = sorted(set(float(x) for x in a.ratios.split(",") if x), reverse=True)
    return a


def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    a = parse_args(argv)
    run_dir = _bench_path.ROOT / ".work" / "seed_table" / time.strftime("%Y%m%d-%H%M%S")
    if a.from_json:
        result = json.loads(pathlib.Path(a.from_json).read_text())
    else:
        shape = Shape(window=a.window, page=a.page, chunk=a.chunk, cap=a.cap)
        budget = Budget(budget_bytes=a.budget, max_total_tokens=a.max_total_tokens)
        draw = Draw(n=a.requests, input_len=a.input_len, output_len=a.output_len, seed=a.seed,
                    range_ratio=a.range_ratio)
        t0 = time.monotonic()
        out = run_cells(a.workload_list, a.ratio_list, a.arm_list, shape, budget, draw)
        result = report.result_record(
            command=" ".join(shlex.quote(x) for x in [".venv/bin/python", "benchmarks/seed_table.py",
                                                      *argv]),
            date=time.strftime("%Y-%m-%d %H:%M"), git_head=git_head(),
            runtime_s=round(time.monotonic() - t0, 1), shape=shape, budget=budget, draw=draw,
            workloads=a.workload_list, ratios=a.ratio_list, arms=a.arm_list, out=out)
    write_result(a, OUTPUT_FILES, run_dir, result, report.to_markdown, report.plot_running,
                 "seed_table")
    return 0
