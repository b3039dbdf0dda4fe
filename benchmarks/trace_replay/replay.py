#!/usr/bin/env python
"""One cell of the trace replay (arm, pool, speed): a trace's requests arriving at their
timestamps, run by the scheduler glue of the arm's own sglang (``seed_table.replay._build``:
``islands_harness.sim.MiniScheduler`` on 0.5.15.post1,
``islands_harness.sim_main.MainMiniScheduler`` on 0.5.23, HiCache's host tier included where the
arm's flags ask for it), in this interpreter.

The scheduler runs in model time (seconds from the trace's first request): before each iteration
every request whose arrival time has passed is queued; each iteration (a prefill batch or a decode
step) advances the clock by ``trace_replay.steptime``; when nothing runs or waits, the clock jumps
to the next arrival. A request's time to first token is the end of the iteration that produced its
first token minus its arrival (queueing and prefill, in model seconds). ``trace_replay.run`` starts
it per cell as

    PYTHONPATH=benchmarks:. PYTHON -m trace_replay.replay '{"arm": ..., "pool": ..., ...}'

which prints one JSON line (the cell's summary); progress on stderr every 15 s.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any, Callable, Dict, List, Optional

import _bench_path  # noqa: F401  (puts the repository root and benchmarks/ on sys.path)
from trace_replay import traces
from trace_replay.steptime import StepTime

PROGRESS_S = 15.0
BIN_S = 10.0
"""Model seconds per bin of the running-requests series the plot draws."""
VOCAB = (4, 1000)
"""Token ids drawn from ``[4, 1000)``: under the tiny configs' vocabulary, as the seed table's."""


def load_slice(tr: Dict[str, Any]) -> List[traces.TraceRequest]:
    """The requests of ``tr`` (``path``, ``limit``, ``minutes``, ``scale``), lengths scaled."""
    reqs = traces.load(tr["path"], limit=tr.get("limit"), minutes=tr.get("minutes"))
    return traces.scale(reqs, tr["scale"]) if tr.get("scale", 1) != 1 else reqs


def block_of(tr: Dict[str, Any]) -> int:
    return traces.MOONCAKE_BLOCK // tr.get("scale", 1)


def _percentile(xs: List[float], q: float) -> float:
    """The ``q``-quantile (0..1) by the nearest rank; 0 when ``xs`` is empty."""
    if not xs:
        return 0.0
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, int(round(q * len(s) + 0.5)) - 1))]


class Clock:
    """Model time and the time-weighted running / waiting record. ``running`` is the request
    rows held after an iteration, counted over that iteration's duration (0 over idle gaps)."""

    def __init__(self):
        self.t = 0.0
        self.busy = 0.0
        self.run_area = 0.0
        self.wait_time = 0.0
        self.run_area_waiting = 0.0
        self.running_max = 0
        self.waiting_max = 0
        self.bins: List[float] = []  # running x seconds per BIN_S

    def _bin(self, t0: float, dt: float, running: int) -> None:
        while dt > 0:
            k = int(t0 // BIN_S)
            while len(self.bins) <= k:
                self.bins.append(0.0)
            step = min(dt, (k + 1) * BIN_S - t0)
            self.bins[k] += running * step
            t0, dt = t0 + step, dt - step

    def advance(self, dt: float, running: int, waiting: int) -> None:
        self._bin(self.t, dt, running)
        self.t += dt
        self.busy += dt
        self.run_area += running * dt
        if waiting:
            self.wait_time += dt
            self.run_area_waiting += running * dt
        self.running_max = max(self.running_max, running)
        self.waiting_max = max(self.waiting_max, waiting)

    def jump(self, t: float) -> None:
        """Idle until ``t`` (nothing runs)."""
        self._bin(self.t, t - self.t, 0)
        self.t = max(self.t, t)

    def summary(self) -> Dict[str, Any]:
        T = self.t or 1.0
        return {"model_time_s": round(self.t, 3), "busy_s": round(self.busy, 3),
                "running_mean": round(self.run_area / T, 2),
                "running_mean_waiting": round(self.run_area_waiting / self.wait_time, 2)
                if self.wait_time else 0.0,
                "waiting_time_s": round(self.wait_time, 3),
                "running_max": self.running_max, "waiting_max": self.waiting_max,
                "running_bins": [round(b / BIN_S, 2) for b in self.bins], "bin_s": BIN_S}


def _step_seconds(model: StepTime, kind: str, batch) -> float:
    if kind == "extend":
        return model.prefill(list(batch.extend_lens), list(batch.prefix_lens))
    return model.decode(batch.seq_lens_cpu.tolist())


def run_cell(spec: Dict[str, Any], log: Optional[Callable[[str], None]] = None) -> Dict[str, Any]:
    """The cell of ``spec`` (``arm`` {name, main}, ``shape``, ``pool``, ``trace`` {path, limit,
    minutes, scale}, ``steptime`` (``StepTime``'s fields, ``speed`` included), ``seed``,
    ``label``; ``per_request``: also return each request's arrival, first token and cached
    tokens), replayed here."""
    from islands_harness.stack import env_overrides
    from seed_table.replay import _build, _kernels

    import torch

    torch.set_num_threads(1)  # small tensors: more threads only contend on a shared machine
    log = log or (lambda m: print(m, file=sys.stderr, flush=True))
    arm, pool, label = spec["arm"], spec["pool"], spec["label"]
    reqs = load_slice(spec["trace"])
    tokmap = traces.TokenMap(block=block_of(spec["trace"]), low=VOCAB[0], high=VOCAB[1],
                             seed=spec["seed"])
    model = StepTime(**spec["steptime"])
    env = {} if arm["main"] is None else arm["main"]["env"]
    with env_overrides(env), _kernels(arm):
        sched = _build(spec)
        alloc, tree, rows = sched.s.allocator, sched.tree, sched.s.req_to_token_pool
        n = len(reqs)
        arrival = [r.t_ms / 1000.0 for r in reqs]
        first: Dict[int, float] = {}
        done: List[Optional[Dict[str, Any]]] = [None] * n
        clock = Clock()
        prefill_tokens = extend_it = decode_it = 0
        nxt = stalls = 0
        t0 = last = time.monotonic()
        while True:
            while nxt < n and arrival[nxt] <= clock.t:
                r = reqs[nxt]
                sched.submit(str(nxt), tokmap.tokens(r), r.output_len)
                nxt += 1
            if hasattr(sched, "all_reqs"):
                sched.all_reqs.clear()  # 0.5.15's glue keeps every request; a trace is long
            kind = sched.step()
            if kind is None:
                if sched.idle() and nxt == n:
                    break
                if sched.idle() or stalls > 3:
                    if nxt == n:
                        raise RuntimeError(f"{label}: no batch with {len(sched.waiting)} requests "
                                           "waiting and none arriving")
                    clock.jump(arrival[nxt])
                    stalls = 0
                else:
                    stalls += 1
                continue
            stalls = 0
            b = sched.last_batch
            running = rows.size - rows.available_size()
            clock.advance(_step_seconds(model, kind, b), running, len(sched.waiting))
            if kind == "extend":
                extend_it += 1
                prefill_tokens += int(b.extend_num_tokens)
                for r in b.reqs:
                    k = int(r.rid)
                    if r.output_ids and k not in first:
                        first[k] = clock.t
            else:
                decode_it += 1
            for r in sched.finished:
                k = int(r.rid)
                done[k] = {"cached": int(r.cached_tokens),
                           "host": int(getattr(r, "cached_tokens_host", 0) or 0),
                           "swa_cut": getattr(r, "cached_tokens_swa_cut", None),
                           "out": len(r.output_ids)}
            sched.finished.clear()  # the finished requests' tokens go with them
            now = time.monotonic()
            if now - last > PROGRESS_S:
                last = now
                log(f"[trace_replay] {label}: iteration {extend_it + decode_it:,}, model time "
                    f"{clock.t:,.0f} s, finished {sum(d is not None for d in done):,}/{n:,}, "
                    f"running {running}, waiting {len(sched.waiting)} ({now - t0:.0f} s)")
        wall = time.monotonic() - t0
        missing = [k for k in range(n) if done[k] is None or k not in first]
        assert not missing, f"{label}: {len(missing)} of {n} requests did not finish"
        swa_left = pool["swa_pool"] - alloc.swa_available_size() - tree.swa_evictable_size()
        full_left = pool["full_pool"] - alloc.full_available_size() - tree.full_evictable_size()
        assert swa_left == 0 and full_left == 0, ("held after the run", swa_left, full_left)
        assert rows.available_size() == rows.size, "request rows held after the run"
        ttft = [first[k] - arrival[k] for k in range(n)]
        cuts = [d["swa_cut"] for d in done]
        out = clock.summary()
        out.update(
            requests=n, input_tokens=sum(r.input_len for r in reqs),
            output_tokens=sum(r.output_len for r in reqs),
            generated_tokens=sum(d["out"] for d in done),
            cached_tokens=sum(d["cached"] for d in done),
            host_cached_tokens=sum(d["host"] for d in done),
            swa_cut_tokens=None if any(c is None for c in cuts) else sum(cuts),
            prefill_tokens=prefill_tokens, extend_iterations=extend_it,
            decode_iterations=decode_it, retractions=sched.retractions,
            ttft_mean_s=round(sum(ttft) / n, 4), ttft_p50_s=round(_percentile(ttft, 0.5), 4),
            ttft_p99_s=round(_percentile(ttft, 0.99), 4), ttft_max_s=round(max(ttft), 4),
            wall_s=round(wall, 1))
        if spec.get("per_request"):
            out["per_request"] = [{"arrival_s": arrival[k], "first_token_s": first[k],
                                   "cached": done[k]["cached"], "input": reqs[k].input_len}
                                  for k in range(n)]
        log(f"[trace_replay] {label}: {n:,} requests in {out['model_time_s']:,.0f} model s, "
            f"cached {out['cached_tokens'] / out['input_tokens']:.3f}, running mean "
            f"{out['running_mean']:.1f} max {out['running_max']}, TTFT p50 {out['ttft_p50_s']:.2f}"
            f" s p99 {out['ttft_p99_s']:.2f} s, retractions {sched.retractions} ({wall:.0f} s)")
        return out


def worker(spec_json: str) -> int:
    """Run the cell of ``spec_json`` (or each cell of a JSON list of specs, in order, in this one
    process), printing a JSON line per cell."""
    spec = json.loads(spec_json)
    for s in spec if isinstance(spec, list) else [spec]:
        print(json.dumps(run_cell(s)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(worker(sys.argv[1]))
