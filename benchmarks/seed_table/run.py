"""The seed table's cells, run one after the other, each in a fresh worker process
(``python -m seed_table.replay``) of its arm's interpreter: a cell's pools (about 0.5 GB of KV
tensors on 0.5.15.post1's stack at 1M tokens) and sglang's global server arguments go with its
process. One worker at a time; its progress lines go to this process's stderr.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import _bench_path
from seed_table.setup import ARMS, Budget, Shape, arm_python, pools, worker_arm
from seed_table.workload import Draw, lengths

Cell = Tuple[str, float, str]  # (workload, ratio, arm)


def cell_key(workload: str, ratio: float, arm: str) -> str:
    return f"{workload}/{ratio}/{arm}"


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def run_worker(arm: str, spec: Dict[str, Any], module: str = "seed_table.replay",
               python: Optional[str] = None) -> Dict[str, Any]:
    """One cell as ``python -m module '<spec>'`` in ``python`` (default ``arm``'s interpreter):
    its last JSON line, parsed."""
    py = python or arm_python(arm)
    proc = subprocess.run([py, "-m", module, json.dumps(spec)], stdout=subprocess.PIPE,
                          text=True, cwd=str(_bench_path.ROOT), env=_bench_path.worker_env())
    if proc.returncode != 0:
        raise SystemExit(f"the {arm} worker ({py}) failed on {spec['label']} "
                         f"(exit code {proc.returncode})")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run_cells(workloads: Sequence[str], ratios: Sequence[float], arms: Sequence[str], shape: Shape,
              budget: Budget, draw: Draw,
              run: Callable[[str, Dict[str, Any]], Dict[str, Any]] = run_worker) -> Dict[str, Any]:
    """Every (workload, ratio, arm) cell: ``{"pools", "lengths", "cells": {key: summary}}``.
    ``run``: how one cell runs (default: a worker process)."""
    pool_rows = {p["ratio"]: p for p in pools(ratios, shape, budget)}
    lens = {w: lengths(w, draw) for w in workloads}
    cells: Dict[str, Any] = {}
    todo: List[Cell] = [(w, r, a) for w in workloads for r in ratios for a in arms]
    t0 = time.monotonic()
    for k, (w, r, a) in enumerate(todo, 1):
        label = f"{w} r={r} {a}"
        log(f"[seed_table {k}/{len(todo)}] {label}: full pool {pool_rows[r]['full_pool']:,}, "
            f"SWA pool {pool_rows[r]['swa_pool']:,} ({time.monotonic() - t0:.0f} s)")
        spec = {"arm": worker_arm(a), "shape": dataclasses.asdict(shape), "pool": pool_rows[r],
                "lengths": lens[w], "seed": draw.seed, "label": label}
        cells[cell_key(w, r, a)] = run(a, spec)
    return {"pools": [pool_rows[r] for r in ratios], "lengths": lens, "cells": cells,
            "arm_targets": {a: ARMS[a]["target"] for a in arms}}
