#!/usr/bin/env python
"""SWA hold benchmark: how much sliding-window KV each running request keeps, and what a chunk
commit costs, for upstream SGLang, upstream with its two SWA knobs, and SWA islands (eager reclaim
and the default policy).

The workload is a chunked prefill of ``--n-requests`` random prompts (admitted together) followed
by decode, driven by ``islands_harness.sim.MiniScheduler``: the scheduler's event-loop glue around
the real ``Req`` / ``ScheduleBatch`` / ``PrefillAdder`` / tree cache / SWA pools and allocator
built by ``islands_harness.stack.build_stack`` (tiny layer/head dims; no model runs). Three arms
run in one process:

- ``upstream``: ``SWARadixCache`` with its defaults;
- ``upstream_knobs``: ``SWARadixCache`` with ``SGLANG_OPT_SWA_SPLIT_LEAF_ON_INSERT=1`` and
  ``SGLANG_OPT_SWA_RELEASE_LEAF_LOCK_AFTER_WINDOW=1`` (read through ``envs.X.get()`` at call time;
  set only while that arm runs and unset for the others);
- ``islands_eager``: ``SWAIslandRadixCache`` (``--enable-swa-islands --swa-islands-reclaim eager``):
  the SWA below each island is freed at the insert;
- ``islands``: ``SWAIslandRadixCache`` with the default reclaim policy (``lazy``: the SWA below
  islands stays cached and evictable; with these ample pools ``auto`` does the same).

What is measured (SWA slots are counted in tokens; ``w`` is the window as the cache counts it,
``tree.sliding_window_size + 1``; ``p`` the page size):

- snapshots of every running request (a request with a ``req_pool_idx`` that is not finished):

  * ``commit``: right after every ``cache_unfinished_req`` (middle-chunk stash and last-chunk
    commit), before the next chunk is allocated: the chunk in flight is NOT included;
  * ``inflight``: after every extend step, when the next middle chunk has been allocated and
    "computed": the hold including the one chunk in flight;
  * ``decode``: after every decode step.

  Per snapshot and request: ``locked`` (its SWA-locked tree nodes, ``req_locked_swa``),
  ``private`` (its live request-owned slots past ``cache_protected_len``, ``req_private_swa``),
  ``held = locked + private`` (``req_hold``); per running request: the tree's SWA-evictable size,
  the SWA pool's allocated size (``size_swa - swa_available_size()``) and the dead SWA (live,
  unlocked tree SWA that lies in no running request's window ``[L - w, L)`` on its path), each
  divided by the number of running requests.
- commit CPU time: ``time.perf_counter`` (wall) and ``time.thread_time`` (the thread's CPU time,
  less sensitive to other jobs sharing the machine) around ``tree.cache_unfinished_req`` (a thin
  wrapper installed on the instance, so ``maybe_cache_unfinished_req`` goes through it), over
  ``--repeats`` timing runs, arms interleaved; median and p90 over all commits of all repeats.
  Decode islands (``insert_decode_island``) are timed separately.
- host synchronisations per commit, in the measurement run only: a ``TorchDispatchMode`` counts
  the aten ops that synchronise the host with a CUDA device (``nonzero``, ``unique``,
  boolean-mask ``index`` / ``index_put_``, ``masked_select``, ``_local_scalar_dense`` i.e.
  ``item()`` / ``int()`` / ``bool()``, ``repeat_interleave`` without ``output_size``) and a
  ``TorchFunctionMode`` counts ``tolist`` / ``cpu`` / ``numpy``; every tensor the commit path
  touches (``req_to_token``, node values, the full->SWA mapping, free lists) lives on the KV device
  in production, so on CUDA each of these is a sync. All aten ops are counted too (a proxy for
  kernel launches).

Timing runs may stop decode early (``--timing-decode-tokens``): every request is admitted at once
and prefill has priority, so all chunk commits happen before the first decode step and their cost
does not depend on the decode length. Hold numbers and sync counts come from the measurement run,
which runs the full decode.

``--target main`` measures the same on sglang 0.5.23 (upstream main): arms ``main`` (stock
``UnifiedRadixCache``, ``.venv-main``) and ``main_islands`` (``SWAIslandUnifiedRadixCache``,
``.venv-main-islands``) on both tree cores (Rust, the default, and Python), each arm run by
``swa_hold/main_driver.py`` in its own environment and aggregated by ``swa_hold.target_main`` (its
docstring says what is timed); the decode phase is included in every run (decode islands and the
decode-progress hook are part of the whole-run cost), and this command itself may run under any
of the environments.

``--model-shape NAME`` (``--target main``) builds those pools with a model's layer count, KV
heads, head dims and KV dtype (``swa_hold.model_shape``: ``toy``, the default, and
``gemma4-26b-a4b``, the seed's model, its fields read from ``scripts/gpu_seed_model.py``, fp8 KV)
and reports the hold also in bytes per running request and the pools in GiB. The pools are then
real memory (``--production`` with ``gemma4-26b-a4b``: 112,640 B per token slot of both pools):
unless ``--full-pool`` is given they default to what the driver can allocate at most
(``n x (prompt + decode + p)``, ``model_shape.tight_pool``; the toy keeps its ``4 x cp``
slack), and the command refuses, naming the number of requests that would fit, pools larger
than ``--max-pool-gib`` or than 70% of the memory available at start.

Modules: ``swa_hold.setup`` (arms, shapes, the arm's environment), ``swa_hold.run`` (one arm, one
run, and its observation hooks), ``swa_hold.result`` (the run schedule and the JSON result),
``swa_hold.report`` (the markdown); this file is the command line.

Examples::

    .venv/bin/python benchmarks/swa_hold.py --quick --json benchmarks/results/swa_hold_quick.json \\
        --md benchmarks/results/swa_hold_quick.md
    .venv/bin/python benchmarks/swa_hold.py --production --timing-decode-tokens 8 --repeats 5 \\
        --json benchmarks/results/swa_hold_production.json --md benchmarks/results/swa_hold_production.md
    .venv/bin/python benchmarks/swa_hold.py --target main --production --repeats 5 \\
        --json benchmarks/results/swa_hold_main_production.json \\
        --md benchmarks/results/swa_hold_main_production.md
    .venv/bin/python benchmarks/swa_hold.py --target main --production \\
        --model-shape gemma4-26b-a4b --n-requests 2 --repeats 11 \\
        --json benchmarks/results/swa_hold_main_production_gemma4.json \\
        --md benchmarks/results/swa_hold_main_production_gemma4.md
"""

from __future__ import annotations

import os

# Must be set before anything imports triton or sglang.
os.environ.setdefault("SGLANG_USE_CPU_ENGINE", "1")
os.environ.setdefault("TRITON_INTERPRET", "1")

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import json  # noqa: E402
import shlex  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from typing import Optional  # noqa: E402

import _bench_path  # noqa: E402,F401  (puts the repository root on sys.path)
from swa_hold.model_shape import (GIB, MODEL_SHAPES, mem_available_bytes,  # noqa: E402
                                  model_shape, tight_pool)
from swa_hold.report import to_markdown  # noqa: E402
from swa_hold.result import bench, hold_summary, sync_summary  # noqa: E402
from swa_hold.run import RunResult, dead_swa, run_arm  # noqa: E402
from swa_hold.setup import (ARM_ORDER, ARMS, ISLAND_ARMS, KNOBS, PRODUCTION, QUICK,  # noqa: E402
                            TINY, Shape, arm_env, log)

__all__ = ["ARMS", "ARM_ORDER", "ISLAND_ARMS", "KNOBS", "PRODUCTION", "QUICK", "TINY", "RunResult",
           "Shape", "arm_env", "bench", "dead_swa", "hold_summary", "log", "main", "parse_args",
           "run_arm", "shape_from_args", "sync_summary", "to_markdown"]



def parse_args(argv=None):
    ap = argparse.ArgumentParser(
        description=(
            "Measure SWA KV held per running request and chunk-commit CPU cost for four arms "
            "(upstream, upstream_knobs, islands_eager, islands) on the real SGLang scheduler "
            "helpers (CPU "
            "harness). Prints a markdown table to stdout; progress goes to stderr."
        ),
        epilog=(
            "Shapes: --quick = w 64, p 1, cp 256, prompt 1024, 3 requests, 150 decode tokens "
            "(about a minute); --production = the article's w 1024, p 64, cp 16384, prompt 32768, "
            "3 requests, 4608 decode tokens (crosses one cp/4 = 4096 decode-island interval; "
            "several minutes per arm on CPU, the page-64 decode allocator runs under the Triton "
            "interpreter). Any shape field can be overridden."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--quick", action="store_true", help="CPU-sized shape (default)")
    g.add_argument("--production", action="store_true", help="the article's production shape")
    g.add_argument("--tiny", action="store_true", help="a seconds-long shape for tests")
    ap.add_argument("--window", type=int, help="SWA window w in tokens as the cache counts it "
                    "(tree.sliding_window_size + 1); the tiny config gets sliding_window = w - 1, "
                    "as Gemma 4's model runner passes window - 1 to the cache")
    ap.add_argument("--page", type=int, help="page size p")
    ap.add_argument("--chunk", type=int, help="chunked prefill size cp")
    ap.add_argument("--prompt", type=int, help="prompt length per request")
    ap.add_argument("--n-requests", type=int, help="concurrent requests (all admitted together)")
    ap.add_argument("--decode-tokens", type=int, help="max_new_tokens per request")
    ap.add_argument("--decode-interval", type=int,
                    help="islands' decode-island interval (--swa-islands-decode-interval; "
                         "default: the cache's own, cp/4)")
    ap.add_argument("--full-pool", type=int, help="full pool tokens (default: all requests fit)")
    ap.add_argument("--swa-pool", type=int, help="SWA pool tokens (default: = full pool, so "
                    "upstream never has to evict and its natural hold is measured)")
    ap.add_argument("--seed", type=int, default=0, help="prompt RNG seed")
    ap.add_argument("--accept-max", type=int, default=None, metavar="N",
                    help="--target main: speculative decoding, each decode step commits a seeded "
                         "1..N tokens per request (uniform, mean (1 + N) / 2: 16 for the seed's "
                         "8.5) and tells the cache the accept length")
    ap.add_argument("--target", choices=("0.5.15", "main"), default="0.5.15",
                    help="0.5.15: this process's .venv (sglang 0.5.15.post1, arms upstream, "
                         "upstream_knobs, islands_eager, islands); main: sglang 0.5.23, arms "
                         "main (.venv-main) and main_islands (.venv-main-islands), each run in "
                         "its own environment, on the tree cores of --cores")
    ap.add_argument("--cores", default="rust,python",
                    help="--target main: tree cores (rust = the server's default, python)")
    ap.add_argument("--model-shape", choices=sorted(MODEL_SHAPES), default=None,
                    help="--target main: the pools' layers, KV heads, head dims and KV dtype "
                         "(default: toy, one SWA and one full layer of one 8-dim head, float32; "
                         "gemma4-26b-a4b: the seed's model, fp8 KV); the report adds the hold "
                         "in bytes and the pools in GiB")
    ap.add_argument("--max-pool-gib", type=float, default=10.0,
                    help="with --model-shape: refuse pools larger than this (GiB, both pools)")
    ap.add_argument("--arms", default=None, help="comma-separated arms to run (default: all "
                    "of the target's)")
    ap.add_argument("--repeats", type=int, default=3, help="timing runs per arm (interleaved)")
    ap.add_argument("--timing-decode-tokens", type=int, default=None,
                    help="max_new_tokens in timing runs (>= 2; default: --decode-tokens). All "
                         "chunk commits precede decode, so this only shortens the runs")
    ap.add_argument("--no-sync-count", action="store_true",
                    help="skip host-sync op counting in the measurement run")
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="extra runs per arm (--profile-runs) with cProfile on the chunk-commit "
                         "path; keep the top N entries (by cumulative time) in the JSON and md")
    ap.add_argument("--profile-runs", type=int, default=3,
                    help="runs per arm aggregated into the --profile statistics")
    ap.add_argument("--check", action="store_true",
                    help="check_invariants at every snapshot of the measurement run (slow)")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    ap.add_argument("--json", metavar="PATH", help="write the full result as JSON")
    ap.add_argument("--md", metavar="PATH", help="write the markdown table")
    return ap.parse_args(argv)


def shape_from_args(args) -> Shape:
    base = PRODUCTION if args.production else TINY if args.tiny else QUICK
    over = {}
    for f in ("window", "page", "chunk", "prompt", "n_requests", "decode_tokens", "decode_interval",
              "full_pool", "swa_pool", "seed", "accept_max"):
        v = getattr(args, f, None)
        if v is not None:
            over[f] = v
    return dataclasses.replace(base, **over)


def main(argv=None) -> int:
    args = parse_args(argv)
    shape = shape_from_args(args)
    if args.timing_decode_tokens is not None and args.timing_decode_tokens < 2:
        raise SystemExit("--timing-decode-tokens must be >= 2 (else no last-chunk commit)")
    if args.target == "main":
        return _main_target(args, shape, argv)
    if args.accept_max is not None:
        raise SystemExit("--accept-max is --target main only: no drafter runs on 0.5.15.post1's "
                         "CPU harness, and its hold driver decodes one token a step")
    if args.model_shape is not None:
        raise SystemExit("--model-shape is --target main only: the 0.5.15 arms build their pools "
                         "from the tiny Laguna config (islands_harness.stack)")
    import torch

    torch.set_num_threads(args.threads)
    arms = [a.strip() for a in (args.arms or ",".join(ARM_ORDER)).split(",") if a.strip()]
    for a in arms:
        if a not in ARMS:
            raise SystemExit(f"unknown arm {a!r}; choose from {', '.join(ARM_ORDER)}")
    argv_list = sys.argv[1:] if argv is None else list(argv)
    command = "python benchmarks/swa_hold.py " + " ".join(shlex.quote(x) for x in argv_list)
    log(f"shape {dataclasses.asdict(shape)}; arms {arms}; repeats {args.repeats}")
    load_start = list(os.getloadavg())
    t0 = time.perf_counter()
    result = bench(shape, arms=arms, repeats=args.repeats,
                   timing_decode_tokens=args.timing_decode_tokens,
                   count_syncs=not args.no_sync_count, profile_top=args.profile,
                   profile_runs=args.profile_runs, check=args.check)
    result["command"] = command
    result["total_wall_seconds"] = time.perf_counter() - t0
    result["environment"] = {
        "torch_threads": args.threads,
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "cpus": os.cpu_count(),
        "loadavg_start": load_start,
        "loadavg_end": list(os.getloadavg()),
    }
    _write(result, args)
    return 0


def _main_target(args, shape: Shape, argv) -> int:
    """``--target main``: the 0.5.23 arms, each in its own environment (``swa_hold.target_main``)."""
    from swa_hold.target_main import ARMS as MAIN_ARMS
    from swa_hold.target_main import CORES, bench_main

    arms = [a.strip() for a in (args.arms or ",".join(MAIN_ARMS)).split(",") if a.strip()]
    cores = [c.strip() for c in args.cores.split(",") if c.strip()]
    for a in arms:
        if a not in MAIN_ARMS:
            raise SystemExit(f"unknown arm {a!r} for --target main; choose from "
                             f"{', '.join(MAIN_ARMS)}")
    for c in cores:
        if c not in CORES:
            raise SystemExit(f"unknown core {c!r}; choose from {', '.join(CORES)}")
    argv_list = sys.argv[1:] if argv is None else list(argv)
    model, memory = None, None
    if args.model_shape is not None:
        model = model_shape(args.model_shape)
        shape, memory = fit_model_pools(shape, model, args.max_pool_gib,
                                        explicit_pool=args.full_pool is not None)
    log(f"target main; shape {dataclasses.asdict(shape)}; arms {arms}; cores {cores}; "
        f"repeats {args.repeats}" + (f"; model shape {model.name}, pools "
                                     f"{memory['pool_bytes_estimate'] / GIB:.2f} GiB" if model
                                     else ""))
    load_start = list(os.getloadavg())
    t0 = time.perf_counter()
    result = bench_main(shape, arms=arms, cores=cores, repeats=args.repeats,
                        timing_decode_tokens=args.timing_decode_tokens,
                        count_syncs=not args.no_sync_count, model=model)
    if memory is not None:
        result["memory"] = memory
    result["command"] = "python benchmarks/swa_hold.py " + " ".join(
        shlex.quote(x) for x in argv_list)
    result["total_wall_seconds"] = time.perf_counter() - t0
    result["environment"] = {
        "torch_threads": 1, "python": sys.version.split()[0], "cpus": os.cpu_count(),
        "loadavg_start": load_start, "loadavg_end": list(os.getloadavg()),
    }
    _write(result, args)
    return 0


def fit_model_pools(shape: Shape, model, max_pool_gib: float, *, explicit_pool: bool = False,
                    available: Optional[int] = None):
    """``(shape, memory)``: the shape with ``model``'s pools (``tight_pool`` unless
    ``explicit_pool``), checked before anything is allocated: their bytes
    (``model.pool_bytes``) at most ``max_pool_gib`` and 70% of ``available`` (default:
    ``MemAvailable`` now). Refuses (``SystemExit``) a shape that does not fit, naming the most
    requests that would (the shape is kept: fewer requests, not smaller layers)."""
    if model.window is not None and shape.window != model.window:
        raise SystemExit(f"--model-shape {model.name}: the model's window is {model.window}, "
                         f"the shape's {shape.window} (--window)")

    def sized(n):
        s = dataclasses.replace(shape, n_requests=n)
        return s if explicit_pool else dataclasses.replace(s, full_pool=tight_pool(
            n, s.prompt, s.decode_tokens, s.page))

    def need(s):
        return sum(model.pool_bytes(*s.pool_sizes(), s.page))

    shape = sized(shape.n_requests)
    available = mem_available_bytes() if available is None else available
    limit = max_pool_gib * GIB
    if available is not None:
        limit = min(limit, 0.7 * available)
    est = need(shape)
    if est > limit:
        fits = [n for n in range(1, shape.n_requests) if need(sized(n)) <= limit]
        raise SystemExit(
            f"--model-shape {model.name}: the pools would take {est / GIB:.2f} GiB, over the "
            f"limit of {limit / GIB:.2f} GiB (--max-pool-gib {max_pool_gib:g}"
            + (f", 70% of {available / GIB:.1f} GiB available" if available else "") + "); "
            + (f"--n-requests {max(fits)} fits" if fits else "not even one request fits"))
    memory = dict(pool_bytes_estimate=est, limit_bytes=limit, max_pool_gib=max_pool_gib,
                  mem_available_bytes_at_start=available)
    return shape, memory


def _write(result: dict, args) -> None:
    md = to_markdown(result)
    print(md)
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
        log(f"wrote {args.json}")
    if args.md:
        os.makedirs(os.path.dirname(os.path.abspath(args.md)), exist_ok=True)
        with open(args.md, "w") as f:
            f.write(md)
        log(f"wrote {args.md}")
    log(f"done in {result['total_wall_seconds']:.1f} s")
