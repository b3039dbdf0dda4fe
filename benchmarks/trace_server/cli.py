"""The command line of ``benchmarks/trace_server.py``: the parser, ``main`` (write the slice, serve
it on each arm, replay it in process, compare, write the JSON and the markdown) and
``--from-json`` (render the markdown of a result)."""

from __future__ import annotations

import argparse
import json
import pathlib
import shlex
import sys
import time
from typing import Any, Dict, List, Optional

import _bench_path
from islands_harness.bench_outputs import (add_output_args, output_paths, write_files, write_json,
                                           write_text)
from islands_harness.provenance import git_head
from trace_replay import traces
from trace_server import compare, report
from trace_server import trace_slice as ts
from trace_server.serve import MODEL, SERVER_ARMS, log, serve_arm

OUTPUT_FILES = {"json": "trace_server.json", "md": "trace_server.md"}
POOLS = ("0.17-eq", "0.10-eq")
REPLAY_SPEED = 0.05
"""The replay's default step-time speed (``trace_replay.steptime``: 1 is the seed's GPU). The tiny
model on two shared cores prefills about 1,000 tokens/s and decodes a batch in tens of ms or more,
twenty or more times slower per step than the step-time model at the scaled lengths, so at 0.05
the replay is overloaded as the server is (its queue grows over the slice)."""
AUTO = "auto"
"""``--replay-speed auto``: the step-time speed at which the replay's stock arm is busy as long as
the server's stock arm served the traffic (``calibrate``)."""

DESCRIPTION = """\
The same traffic on a real server, scaled down (issue 60 item 3). A slice of a Mooncake-format
trace (default the committed conversation trace): whole conversations (1 in --thin by the second
block's hash id; every request shares the first block), the first --limit requests, lengths and
block divided by --scale (16: block 32 tokens, mean input about 900), outputs capped at
--output-cap tokens, arrival times divided by --time-factor. Served by stock sglang 0.5.23
(.venv-main) and 0.5.23 with islands (.venv-main-islands, --enable-swa-islands) on tiny Gemma 4
on CPU (window 32, page 1, chunk 512, --max-running-requests 16, full pool 65,536 tokens) at a lean
SWA pool (--pool: the production's ratio 0.17 or 0.10 carried to this shape by the planner, so
stock's SWA binds at the same share of the cap), every request on its own thread at its arrival
time, greedy. Records per request the output ids and cached tokens, and the running requests
(/metrics sampled every --sample-interval s). Checks the outputs equal between the arms, then
replays the same slice file at the same shape and pools in process (trace_replay's replay, each
arm's real tree cache, in its interpreter, model time at --replay-speed) and reports whether the
order of islands against stock on the cached share and on the mean running requests agrees
between the server and the replay.
"""

EPILOG = """\
Cost on 2 shared cores: about 30 s per boot, then the traffic (a few minutes per arm at the
default 96 requests), then about 15 s per replay cell.

  .venv/bin/python benchmarks/trace_server.py --out benchmarks/results
  .venv/bin/python benchmarks/trace_server.py --limit 24 --pool 0.10-eq
  .venv/bin/python benchmarks/trace_server.py --from-json RESULT.json --out DIR
"""


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    d = ts.SliceSpec()
    ap = argparse.ArgumentParser(prog="benchmarks/trace_server.py", description=DESCRIPTION,
                                 epilog=EPILOG,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", default=str(traces.CONVERSATION),
                    help="a trace in the Mooncake format (default the committed one)")
    ap.add_argument("--thin", type=int, default=d.thin,
                    help=f"keep the conversations whose second hash id is 0 mod this (default "
                         f"{d.thin})")
    ap.add_argument("--limit", type=int, default=d.limit,
                    help=f"requests (default {d.limit})")
    ap.add_argument("--scale", type=int, default=d.scale,
                    help=f"divide lengths by this, a divisor of 512 (default {d.scale}: block 32)")
    ap.add_argument("--time-factor", type=float, default=d.time_factor,
                    help=f"divide arrival times by this (default {d.time_factor:g})")
    ap.add_argument("--output-cap", type=int, default=d.output_cap,
                    help=f"scaled output tokens at most (default {d.output_cap})")
    ap.add_argument("--pool", default=POOLS[0], choices=POOLS,
                    help=f"the SWA pool (default {POOLS[0]})")
    ap.add_argument("--replay-speed", default=str(REPLAY_SPEED),
                    help=f"the replay's step-time speed (trace_replay.steptime: 1 is the seed's "
                         f"GPU; default {REPLAY_SPEED:g}), or auto: the speed at which the "
                         "replay's stock arm is busy as long as the server's stock arm took to "
                         "serve the slice")
    ap.add_argument("--seed", type=int, default=0, help="token-id seed (default 0)")
    ap.add_argument("--sample-interval", type=float, default=0.25,
                    help="seconds between /metrics samples (default 0.25)")
    ap.add_argument("--omp-threads", type=int, default=2, help="server OMP threads (default 2)")
    ap.add_argument("--boot-timeout", type=float, default=600.0, help="seconds (default 600)")
    ap.add_argument("--request-timeout", type=float, default=1800.0,
                    help="seconds per request (default 1800)")
    ap.add_argument("--from-json", metavar="PATH", default=None,
                    help="run nothing: render the markdown of this result")
    add_output_args(ap, OUTPUT_FILES)
    a = ap.parse_args(argv)
    if a.from_json is None:
        if traces.MOONCAKE_BLOCK % max(1, a.scale) or a.scale < 1:
            ap.error(f"--scale must divide {traces.MOONCAKE_BLOCK}")
        if a.replay_speed != AUTO:
            try:
                a.replay_speed = float(a.replay_speed)
            except ValueError:
                ap.error(f"--replay-speed: a number or {AUTO}, got {a.replay_speed!r}")
        if min(a.thin, a.limit, a.output_cap) < 1 or a.time_factor <= 0 or (
                a.replay_speed != AUTO and a.replay_speed <= 0):
            ap.error("--thin, --limit, --output-cap, --time-factor, --replay-speed: positive")
    return a


def spec_of(a: argparse.Namespace) -> ts.SliceSpec:
    return ts.SliceSpec(trace=a.trace, thin=a.thin, limit=a.limit, scale=a.scale,
                        time_factor=a.time_factor, output_cap=a.output_cap)


def _rel(path: pathlib.Path) -> str:
    path = path.resolve()
    return str(path.relative_to(_bench_path.ROOT) if path.is_relative_to(_bench_path.ROOT)
               else path)


def _run(a: argparse.Namespace, argv: List[str], run_dir: pathlib.Path) -> Dict[str, Any]:
    from admission.setup import CpuShape
    from islands_harness.models import get_model, real_vocab
    from prefix_reuse.arms import pool_table

    t0 = time.monotonic()
    spec = spec_of(a)
    path = ts.write_slice(spec, run_dir / "slice.jsonl")
    reqs = ts.scaled(path, spec.scale)
    stats = ts.stats(reqs, spec.block)
    log(f"slice {path}: {stats}")
    cpu = CpuShape()
    shape = {"window": cpu.window, "chunk": cpu.chunk, "page": cpu.page, "cap": cpu.cap}
    pool = {"name": a.pool, **pool_table()[a.pool], "full_pool": cpu.max_total_tokens}
    model_dir = get_model(MODEL).build(window=cpu.window)
    tokmap = ts.token_map(spec.block, real_vocab(model_dir), a.seed)
    server = {arm: serve_arm(arm, pool, reqs, tokmap, model_dir, run_dir,
                             sample_interval=a.sample_interval, omp_threads=a.omp_threads,
                             boot_timeout=a.boot_timeout, request_timeout=a.request_timeout)
              for arm in SERVER_ARMS}
    for arm, rec in server.items():
        if rec["swa_pool"] not in (None, pool["swa_pool"]):
            log(f"WARNING: {arm}'s SWA pool {rec['swa_pool']} != planned {pool['swa_pool']}")
    replay_pool = {"name": a.pool, "full_pool": server[SERVER_ARMS[0]]["full_pool"] or
                   pool["full_pool"], "swa_pool": server[SERVER_ARMS[0]]["swa_pool"] or
                   pool["swa_pool"]}
    calibration = None
    speed = a.replay_speed
    if speed == AUTO:
        calibration = calibrate(server[SERVER_ARMS[0]]["summary"]["wall_s"], replay_pool,
                                _rel(path), spec.scale, shape, a.seed)
        speed = calibration["speed"]
    log(f"replaying the slice in process (speed {speed:g})")
    replay = compare.run_replay(SERVER_ARMS, replay_pool, _rel(path), spec.scale, speed, shape,
                                a.seed)
    outputs = compare.outputs_equal(*(server[x]["per_request"] for x in SERVER_ARMS))
    orders = compare.orders({x: server[x]["summary"] for x in SERVER_ARMS}, replay)
    slice_spec = {"trace": _rel(pathlib.Path(spec.trace)), "thin": spec.thin,
                  "limit": spec.limit, "scale": spec.scale, "time_factor": spec.time_factor,
                  "output_cap": spec.output_cap, "seed": a.seed}
    return report.result_record(
        command=" ".join(shlex.quote(x) for x in [".venv/bin/python", "benchmarks/trace_server.py",
                                                  *argv]),
        date=time.strftime("%Y-%m-%d %H:%M"), git_head=git_head(),
        runtime_s=round(time.monotonic() - t0, 1), slice_spec=slice_spec, slice_stats=stats,
        shape=shape, pool=pool, replay_speed=speed, calibration=calibration, server=server,
        replay=replay, outputs=outputs, orders=orders)


def calibrate(server_wall_s: float, pool: Dict[str, Any], slice_path: str, scale: int,
              shape: Dict[str, int], seed: int) -> Dict[str, Any]:
    """The replay's speed for ``--replay-speed auto``: the stock arm replayed at speed 1, its busy
    model seconds over the server's stock traffic seconds (every step time scales as 1 / speed,
    so at that speed the replay's stock arm is busy as long as the server was; the slice keeps
    both loaded, so busy time is nearly all of it)."""
    log("calibrating the replay's speed: the stock arm at speed 1")
    busy = compare.run_replay([SERVER_ARMS[0]], pool, slice_path, scale, 1.0, shape,
                              seed)[SERVER_ARMS[0]]["busy_s"]
    return {"busy_s_at_speed_1": busy, "server_wall_s": server_wall_s,
            "speed": round(busy / server_wall_s, 4)}


def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    a = parse_args(argv)
    run_dir = _bench_path.ROOT / ".work" / "trace_server" / time.strftime("%Y%m%d-%H%M%S")
    result = (json.loads(pathlib.Path(a.from_json).read_text()) if a.from_json
              else _run(a, argv, run_dir))
    paths = output_paths(a, OUTPUT_FILES, run_dir)
    if (a.from_json and paths["json"] is not None
            and paths["json"].resolve() == pathlib.Path(a.from_json).resolve()):
        paths["json"] = None  # do not rewrite the result being rendered
    written = write_files(paths, {"json": write_json(result),
                                  "md": write_text(report.to_markdown(result))})
    log(f"wrote {', '.join(written)}")
    if not a.from_json:
        o = result["outputs"]
        log(f"outputs equal: {o['equal']}/{o['requests']}; orders: "
            + ", ".join(f"{m} server {x['server_order']} replay {x['replay_order']}"
                        for m, x in result["orders"].items()))
    return 0
