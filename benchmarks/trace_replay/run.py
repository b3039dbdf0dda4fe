"""The trace replay's cells, one after the other, each in a fresh worker process
(``python -m trace_replay.replay``) of its arm's interpreter (``seed_table.run.run_worker``): a
cell's pools and sglang's global server arguments go with its process. One worker at a time; its
progress lines go to this process's stderr. The grid: every pool of ``pools`` at the first speed,
and ``other_pools`` at every further speed, each on every arm.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable, Dict, List, Sequence, Tuple

import _bench_path  # noqa: F401  (puts the repository root and benchmarks/ on sys.path)
from seed_table.run import log, run_worker
from seed_table.setup import Shape
from trace_replay import traces
from trace_replay.replay import block_of, load_slice
from trace_replay.setup import ARMS, Sizes, arm_python, pools, worker_arm
from trace_replay.steptime import StepTime

Cell = Tuple[float, str, str]  # (speed, pool name, arm)


def cell_key(speed: float, pool: str, arm: str) -> str:
    return f"{speed:g}/{pool}/{arm}"


def grid(speeds: Sequence[float], pool_names: Sequence[str], other_pools: Sequence[str],
         arms: Sequence[str]) -> List[Cell]:
    """``pool_names`` at ``speeds[0]``, ``other_pools`` at each later speed; every arm."""
    return [(s, p, a) for k, s in enumerate(speeds)
            for p in (pool_names if k == 0 else other_pools) for a in arms]


def worker(arm: str, spec: Dict[str, Any]) -> Dict[str, Any]:
    return run_worker(arm, spec, module="trace_replay.replay", python=arm_python(arm))


def trace_stats(trace: Dict[str, Any]) -> Dict[str, Any]:
    """The slice's requests, tokens, span and no-forget bound (``traces.no_forget_bound`` at the
    slice's block; tails past the last full block are each request's own, as replayed)."""
    reqs = load_slice(trace)
    n = len(reqs)
    return {"requests": n, "input_tokens": sum(r.input_len for r in reqs),
            "output_tokens": sum(r.output_len for r in reqs),
            "span_s": round((reqs[-1].t_ms - reqs[0].t_ms) / 1000.0, 3),
            "no_forget_bound": round(traces.no_forget_bound(reqs, block=block_of(trace)), 4)}


def run_cells(cells: Sequence[Cell], shape: Shape, sizes: Sizes, trace: Dict[str, Any],
              steptime: StepTime, seed: int = 0,
              run: Callable[[str, Dict[str, Any]], Dict[str, Any]] = worker) -> Dict[str, Any]:
    """Every cell: ``{"pools", "trace", "steptime", "cells": {key: summary}, "cell_wall_s"}``.
    ``trace``: ``{path, limit, minutes, scale}``; ``run``: how one cell runs (default: a worker
    process in the arm's interpreter)."""
    names = list(dict.fromkeys(p for _, p, _ in cells))
    rows = {p["name"]: p for p in pools(names, shape, sizes)}
    stats = trace_stats(trace)
    out: Dict[str, Any] = {}
    walls: Dict[str, float] = {}
    t0 = time.monotonic()
    for k, (speed, p, a) in enumerate(cells, 1):
        label = f"speed {speed:g} {p} {a}"
        log(f"[trace_replay {k}/{len(cells)}] {label}: full pool {rows[p]['full_pool']:,}, SWA "
            f"pool {rows[p]['swa_pool']:,}, {stats['requests']:,} requests "
            f"({time.monotonic() - t0:.0f} s)")
        spec = {"arm": worker_arm(a), "shape": dataclasses.asdict(shape), "pool": rows[p],
                "trace": trace, "steptime": dataclasses.replace(steptime, speed=speed).constants(),
                "seed": seed, "label": label}
        t = time.monotonic()
        out[cell_key(speed, p, a)] = run(a, spec)
        walls[cell_key(speed, p, a)] = round(time.monotonic() - t, 1)
    return {"pools": [rows[p] for p in names], "trace": stats, "steptime": steptime.constants(),
            "cells": out, "cell_wall_s": walls,
            "arm_targets": {a: ARMS[a]["target"] for a in dict.fromkeys(a for _, _, a in cells)}}
