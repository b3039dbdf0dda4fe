#!/usr/bin/env python
"""One cell of the seed table (arm, workload, pool), replayed in the scheduler glue of the arm's own
sglang (``prefix_reuse.replay._scheduler``: ``islands_harness.sim.MiniScheduler`` on 0.5.15.post1,
``islands_harness.sim_main.MainMiniScheduler`` on 0.5.23), in this interpreter. Every request is
queued before the first iteration; the scheduler then runs until every request finished, one
iteration per prefill batch (a chunk) or decode step, no model. Per iteration it records the
requests holding a request-pool row (running: the decoding ones and the one in chunked prefill),
the queue, the SWA and full tokens held (allocated and not evictable: what admission cannot use),
and the prefill tokens computed. ``seed_table.run`` starts it per cell as

    PYTHONPATH=benchmarks:. PYTHON -m seed_table.replay '{"arm": ..., "pool": ..., ...}'

which prints one JSON line (the cell's summary and series, ``seed_table.series``); progress on stderr.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from typing import Any, Dict

import _bench_path  # noqa: F401  (puts the repository root and benchmarks/ on sys.path)
from seed_table import series
from seed_table.workload import prompt

PROGRESS_S = 15.0


def _build(spec: Dict[str, Any]):
    from prefix_reuse.replay import Shape, _scheduler

    sh, pool, arm = spec["shape"], spec["pool"], spec["arm"]
    # prefix_reuse's Shape.window is the HF config's sliding_window: the tree's window, w - 1
    shape = Shape(window=sh["window"] - 1, page=sh["page"], chunk=sh["chunk"], cap=sh["cap"],
                  max_total_tokens=pool["full_pool"])
    main_args = None if arm["main"] is None else arm["main"]["args"]
    sched = _scheduler(arm["name"], shape, pool["swa_pool"], main_args, pool["full_pool"])
    assert sched.tree.sliding_window_size == sh["window"] - 1, sched.tree.sliding_window_size
    return sched


def run_cell(spec: Dict[str, Any], log=None) -> Dict[str, Any]:
    """The cell of ``spec`` (``arm`` {name, main}, ``shape``, ``pool`` {ratio, full_pool,
    swa_pool}, ``lengths`` {input, output}, ``seed``, ``label``), replayed here."""
    from islands_harness.stack import env_overrides

    log = log or (lambda m: print(m, file=sys.stderr, flush=True))
    arm, pool, lens = spec["arm"], spec["pool"], spec["lengths"]
    env = {} if arm["main"] is None else arm["main"]["env"]
    with env_overrides(env), _kernels(arm):
        sched = _build(spec)
        alloc, tree = sched.s.allocator, sched.tree
        rows = sched.s.req_to_token_pool
        n = len(lens["input"])
        for i in range(n):
            sched.submit(f"r{i}", prompt(spec["seed"], i, lens["input"][i]), lens["output"][i])
        rec = series.Recorder()
        t0 = last = time.monotonic()
        idle = 0
        while True:
            kind = sched.step()
            if kind is None:
                if sched.idle():
                    break
                idle += 1
                if idle > 3:
                    raise RuntimeError(f"{spec['label']}: no batch with {len(sched.waiting)} "
                                       "requests waiting and none running")
                continue
            idle = 0
            b = sched.last_batch
            rec.add(extend=kind == "extend",
                    running=rows.size - rows.available_size(),
                    waiting=len(sched.waiting),
                    swa_held=pool["swa_pool"] - alloc.swa_available_size() - tree.swa_evictable_size(),
                    full_held=pool["full_pool"] - alloc.full_available_size()
                    - tree.full_evictable_size(),
                    prefill_tokens=int(b.extend_num_tokens) if kind == "extend" else 0)
            now = time.monotonic()
            if now - last > PROGRESS_S:
                last = now
                log(f"[seed_table] {spec['label']}: iteration {rec.iterations:,}, running "
                    f"{rec.running[-1]}, waiting {rec.waiting[-1]}, finished "
                    f"{len(sched.finished)}/{n}, retractions {sched.retractions} "
                    f"({now - t0:.0f} s)")
        wall = time.monotonic() - t0
        assert len(sched.finished) == n, f"{len(sched.finished)} of {n} requests finished"
        swa_left = pool["swa_pool"] - alloc.swa_available_size() - tree.swa_evictable_size()
        full_left = pool["full_pool"] - alloc.full_available_size() - tree.full_evictable_size()
        assert swa_left == 0 and full_left == 0, ("held after the run", swa_left, full_left)
        out = rec.summary(cap=spec["shape"]["cap"])
        out.update(retractions=sched.retractions, requests=n,
                   input_tokens=sum(lens["input"]), output_tokens=sum(lens["output"]),
                   cached_tokens=sum(int(r.cached_tokens) for r in sched.finished),
                   generated_tokens=sum(len(r.output_ids) for r in sched.finished),
                   wall_s=round(wall, 1))
        log(f"[seed_table] {spec['label']}: {rec.iterations:,} iterations, running mean "
            f"{out['running_mean']:.1f} (while requests wait {out['running_mean_waiting']:.1f}), "
            f"max {out['running_max']}, retractions {sched.retractions} ({wall:.0f} s)")
        return out


def _kernels(arm: Dict[str, Any]):
    """0.5.15.post1's paged allocator launches Triton kernels, interpreted on CPU: their torch
    equivalents instead (``seed_table.alloc_kernels``); 0.5.23 runs its own torch path."""
    if arm["main"] is not None:
        return contextlib.nullcontext()
    from seed_table.alloc_kernels import native_alloc_kernels

    return native_alloc_kernels()


def worker(spec_json: str) -> int:
    print(json.dumps(run_cell(json.loads(spec_json))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(worker(sys.argv[1]))
