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

Examples::

    .venv/bin/python benchmarks/swa_hold.py --quick --json benchmarks/results/swa_hold_quick.json \\
        --md benchmarks/results/swa_hold_quick.md
    .venv/bin/python benchmarks/swa_hold.py --production --timing-decode-tokens 8 --repeats 5 \\
        --json benchmarks/results/swa_hold_production.json --md benchmarks/results/swa_hold_production.md
"""

from __future__ import annotations

import os

# Must be set before anything imports triton or sglang.
os.environ.setdefault("SGLANG_USE_CPU_ENGINE", "1")
os.environ.setdefault("TRITON_INTERPRET", "1")

import argparse
import contextlib
import cProfile
import dataclasses
import gc
import json
import pstats
import random
import shlex
import statistics
import sys
import time
from typing import Dict, Iterator, List, Optional

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _REPO not in sys.path:
    sys.path.insert(0, _REPO)

from islands_harness.host_syncs import SYNC_KEYS, make_sync_counter  # noqa: E402
from islands_harness.knobs import UPSTREAM_KNOBS_ENV as KNOBS  # noqa: E402

ARMS = {
    # name: (islands, --swa-islands-reclaim, env while the arm runs)
    "upstream": (False, None, {}),
    "upstream_knobs": (False, None, dict(KNOBS)),
    "islands_eager": (True, "eager", {}),
    "islands": (True, "lazy", {}),  # the default policy
}
ARM_ORDER = ("upstream", "upstream_knobs", "islands_eager", "islands")
ISLAND_ARMS = tuple(a for a in ARM_ORDER if ARMS[a][0])


@dataclasses.dataclass
class Shape:
    window: int  # w as the cache counts it: tree.sliding_window_size + 1
    page: int
    chunk: int
    prompt: int
    n_requests: int
    decode_tokens: int
    decode_interval: Optional[int] = None  # islands only; None: the cache's default (cp/4)
    full_pool: Optional[int] = None  # None: everything fits (see pool_sizes)
    swa_pool: Optional[int] = None  # None: as large as the full pool (upstream never evicts)
    seed: int = 0

    def pool_sizes(self):
        need = self.n_requests * (self.prompt + self.decode_tokens + self.page) + 4 * self.chunk
        need = -(-need // self.page) * self.page
        full = self.full_pool or need
        swa = self.swa_pool or full
        return full, swa


QUICK = Shape(window=64, page=1, chunk=256, prompt=1024, n_requests=3, decode_tokens=150)
PRODUCTION = Shape(window=1024, page=64, chunk=16384, prompt=32768, n_requests=3, decode_tokens=4608)
TINY = Shape(window=16, page=1, chunk=64, prompt=256, n_requests=2, decode_tokens=40)


def log(msg: str) -> None:
    print(f"[swa_hold {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def arm_env(env: Dict[str, str]) -> Iterator[None]:
    """Set ``env`` and unset the knobs it does not name, restoring everything afterwards."""
    from islands_harness.stack import env_overrides

    removed = {k: os.environ.pop(k) for k in KNOBS if k not in env and k in os.environ}
    try:
        with env_overrides(env):
            yield
    finally:
        os.environ.update(removed)


# ---- one arm, one run -----------------------------------------------------------------------------


def _req_window_need(tree, running, w) -> Dict[int, List]:
    """id(node) -> [(lo, hi)] node-relative token ranges inside some running request's window."""
    need: Dict[int, List] = {}
    for r in running:
        if r.last_node is None:
            continue
        path, node = [], r.last_node
        while node is not None and node is not tree.root_node:
            path.append(node)
            node = node.parent
        L = r.kv_committed_len
        pos = 0
        for node in reversed(path):
            start, pos = pos, pos + len(node.value)
            lo, hi = max(start, L - w), min(pos, L)
            if lo < hi:
                need.setdefault(id(node), []).append((lo - start, hi - start))
    return need


def _covered(ranges) -> int:
    total, end = 0, -1
    for lo, hi in sorted(ranges):
        lo = max(lo, end)
        if hi > lo:
            total += hi - lo
            end = hi
    return total


def dead_swa(tree, running, w) -> int:
    """Live, SWA-unlocked tree tokens outside every running request's window."""
    from islands_harness.invariants import tree_nodes

    need = _req_window_need(tree, running, w)
    dead = 0
    for n in tree_nodes(tree):
        if n.swa_tombstone or n.swa_lock_ref > 0:
            continue
        dead += len(n.value) - _covered(need.get(id(n), ()))
    return dead


@dataclasses.dataclass
class RunResult:
    arm: str
    snapshots: Dict[str, List[dict]]
    commits: List[dict]
    decode_islands: List[dict]
    chunk_islands: int
    n_decode_islands: int
    wall_seconds: float
    steps: int
    reclaim_seconds: float = 0.0
    reclaimed_swa: int = 0


def run_arm(shape: Shape, arm: str, *, measure: bool = True, count_syncs: bool = False,
            decode_tokens: Optional[int] = None, profiler: Optional[cProfile.Profile] = None,
            check: bool = False) -> RunResult:
    """Build the stack for ``arm`` and run the workload once.

    ``measure``: take hold snapshots; ``count_syncs``: count sync ops inside commits (slows them,
    so timings of such a run are not reported); ``profiler``: enabled around each chunk commit
    (``cache_unfinished_req``) only; ``check``: ``check_invariants`` after every step."""
    islands, reclaim, env = ARMS[arm]
    decode_tokens = shape.decode_tokens if decode_tokens is None else decode_tokens
    # the production configuration: the allocators' debug checks (which synchronise) are off
    with arm_env({**env, "SGLANG_DEBUG_MEMORY_POOL": "0"}):
        from islands_harness.invariants import check_invariants, req_locked_swa, req_private_swa
        from islands_harness.sim import MiniScheduler, random_prompt
        from islands_harness.stack import build_stack

        full, swa = shape.pool_sizes()
        stack = build_stack(
            window=shape.window - 1,  # StackConfig.window is the config's sliding_window
            page=shape.page,
            chunk=shape.chunk,
            full_pool=full,
            swa_pool=swa,
            max_reqs=max(16, shape.n_requests + 1),
            islands=islands,
            reclaim=reclaim or "lazy",
            decode_interval=shape.decode_interval if islands else None,
            context_len=max(1 << 17, shape.prompt + shape.decode_tokens + shape.chunk),
        )
        tree = stack.tree
        w = tree.sliding_window_size + 1
        assert w == shape.window, (w, shape.window)
        alloc = stack.allocator
        sched = MiniScheduler(stack, max_running=shape.n_requests)
        rng = random.Random(shape.seed)
        vocab = stack.model_config.vocab_size
        for i in range(shape.n_requests):
            sched.submit(f"r{i}", random_prompt(rng, shape.prompt, vocab), decode_tokens)

        snaps: Dict[str, List[dict]] = {"commit": [], "inflight": [], "decode": []}
        commits: List[dict] = []
        dislands: List[dict] = []
        Counter = make_sync_counter() if count_syncs else None
        prof = profiler

        def snapshot(kind, running, extra=None):
            running = [r for r in running if r.req_pool_idx is not None and not r.finished()]
            if not running:
                return
            n = len(running)
            per = [(r.rid, req_locked_swa(stack, r), req_private_swa(stack, r)) for r in running]
            row = dict(
                n=n,
                rids=[rid for rid, _, _ in per],
                held=[lk + pv for _, lk, pv in per],
                locked=[lk for _, lk, _ in per],
                private=[pv for _, _, pv in per],
                evictable=tree.swa_evictable_size() / n,
                allocated=(alloc.size_swa - alloc.swa_available_size()) / n,
                dead=dead_swa(tree, running, w) / n,
            )
            if extra:
                row.update(extra)
            snaps[kind].append(row)
            if check:
                check_invariants(stack, running)

        def timed_call(fn, sink, info, profiled=False):
            counter = Counter() if Counter else None
            free_cpu[0] = 0.0
            gc_was = gc.isenabled()
            c0 = time.thread_time()
            t0 = time.perf_counter()
            if prof and profiled:
                prof.enable()
            if counter:
                with counter.active():
                    fn()
            else:
                fn()
            if prof and profiled:
                prof.disable()
            dt = time.perf_counter() - t0
            info["thread_cpu_seconds"] = time.thread_time() - c0
            info["seconds"] = dt
            if islands:
                info["free_thread_cpu_seconds"] = free_cpu[0]
            if counter:
                info["ops"] = counter.counts
            sink.append(info)
            assert gc.isenabled() == gc_was

        # Thread CPU inside the island SWA free (allocator.free_swa_pages) per commit: the part of the
        # commit that any design freeing SWA at commit time pays on top of upstream's commit.
        free_cpu = [0.0]

        orig_commit = tree.cache_unfinished_req

        def cache_unfinished_req(req, chunked=False, **kw):
            info = dict(rid=req.rid, chunked=bool(chunked), L=int(req.extend_range.end))
            timed_call(lambda: orig_commit(req, chunked=chunked, **kw), commits, info, profiled=True)

        tree.cache_unfinished_req = cache_unfinished_req
        if islands:
            orig_island = tree.insert_decode_island

            def insert_decode_island(req):
                info = dict(rid=req.rid, L=int(req.kv_committed_len))
                timed_call(lambda: orig_island(req), dislands, info)

            tree.insert_decode_island = insert_decode_island

        last_progress = [time.perf_counter()]
        decode_steps = [0]

        def on_event(label, reqs):
            if label in ("chunk_commit", "last_chunk_commit"):
                c = commits[-1]
                log(f"  {arm}: {label} {c['rid']} L={c['L']} {c['seconds'] * 1e3:.2f} ms")
                if measure:
                    snapshot("commit", sched.running + list(reqs),
                             dict(label=label, rid=c["rid"], L=c["L"]))
            elif label == "decode":
                decode_steps[0] += 1
                if measure:
                    snapshot("decode", sched.running)
                now = time.perf_counter()
                if now - last_progress[0] > 10:
                    last_progress[0] = now
                    log(f"  {arm}: decode step {decode_steps[0]}/{decode_tokens - 1}")

        sched.on_event = on_event

        orig_process_prefill = sched._process_prefill

        def process_prefill(batch):
            # The extend batch is allocated and "running": the chunk in flight is in the hold.
            if measure:
                snapshot("inflight", sched.running + [r for r in batch.reqs if r not in sched.running])
            orig_process_prefill(batch)

        sched._process_prefill = process_prefill

        gc.collect()
        t0 = time.perf_counter()
        with _timing_island_free(alloc, free_cpu) if islands else contextlib.nullcontext():
            steps = sched.run()
        wall = time.perf_counter() - t0
        assert len(sched.finished) == shape.n_requests, "not every request finished"
        assert sched.retractions == 0, "retractions: the pools are too small for this shape"
        # What the arm left for the tree's SWA eviction to reclaim once every request finished
        # (upstream defers to here the SWA freeing that islands does at commit).
        from sglang.srt.mem_cache.base_prefix_cache import EvictParams

        swa_left = tree.swa_evictable_size()
        free_before = alloc.swa_available_size()
        t_ev = time.perf_counter()
        tree.evict(EvictParams(num_tokens=0, swa_num_tokens=swa_left))
        reclaim_seconds = time.perf_counter() - t_ev
        reclaimed = alloc.swa_available_size() - free_before
        stats = getattr(tree, "stats", None)
        return RunResult(
            arm=arm,
            snapshots=snaps,
            commits=commits,
            decode_islands=dislands,
            chunk_islands=getattr(stats, "chunk_islands", 0),
            n_decode_islands=getattr(stats, "decode_islands", 0),
            wall_seconds=wall,
            steps=steps,
            reclaim_seconds=reclaim_seconds,
            reclaimed_swa=reclaimed,
        )


@contextlib.contextmanager
def _timing_island_free(alloc, acc: List[float]):
    """While active, every ``alloc.free_swa_pages`` call (the island cache's sync-free SWA free,
    at an eager reclaim or an eviction) adds its thread CPU seconds to ``acc[0]``; a wrapper on
    the allocator instance, observation only."""
    real_free = alloc.free_swa_pages

    def timed_free(*a, **k):
        c = time.thread_time()
        try:
            return real_free(*a, **k)
        finally:
            acc[0] += time.thread_time() - c

    alloc.free_swa_pages = timed_free
    try:
        yield
    finally:
        del alloc.free_swa_pages


def _profile_rows(prof, n_commits: int, top: int) -> List[dict]:
    """Top ``top`` functions of the commit path by cumulative time, in microseconds per commit."""
    st = pstats.Stats(prof)
    rows = []
    for (fname, line, func), (cc, nc, tt, ct, _callers) in st.stats.items():
        short = fname.split("site-packages/")[-1].replace(_REPO + "/", "")
        rows.append(dict(func=f"{short}:{line}({func})", ncalls=nc,
                         tottime_us_per_commit=tt / max(1, n_commits) * 1e6,
                         cumtime_us_per_commit=ct / max(1, n_commits) * 1e6))
    rows.sort(key=lambda r: -r["cumtime_us_per_commit"])
    return rows[:top]


# ---- aggregation ----------------------------------------------------------------------------------


def _pct(xs, q):
    xs = sorted(xs)
    if not xs:
        return None
    k = (len(xs) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def hold_summary(rows: List[dict]) -> dict:
    if not rows:
        return {}
    held = [h for r in rows for h in r["held"]]
    locked = [h for r in rows for h in r["locked"]]
    private = [h for r in rows for h in r["private"]]
    return {
        "snapshots": len(rows),
        "max_swa_held_per_running_req": max(held),
        "mean_swa_held_per_running_req": statistics.fmean(held),
        "max_swa_locked_per_running_req": max(locked),
        "mean_swa_locked_per_running_req": statistics.fmean(locked),
        "max_swa_private_per_running_req": max(private),
        "mean_swa_private_per_running_req": statistics.fmean(private),
        "max_swa_evictable_per_running_req": max(r["evictable"] for r in rows),
        "mean_swa_evictable_per_running_req": statistics.fmean(r["evictable"] for r in rows),
        "max_swa_allocated_per_running_req": max(r["allocated"] for r in rows),
        "mean_swa_allocated_per_running_req": statistics.fmean(r["allocated"] for r in rows),
        "max_dead_swa_per_running_req": max(r["dead"] for r in rows),
        "mean_dead_swa_per_running_req": statistics.fmean(r["dead"] for r in rows),
    }


def sync_summary(commits: List[dict]) -> dict:
    if not commits or "ops" not in commits[0]:
        return {}
    out = {}
    for k in SYNC_KEYS + ("aten_ops",) + (("cuda_sync",) if "cuda_sync" in commits[0]["ops"] else ()):
        vals = [c["ops"].get(k, 0) for c in commits]
        out[k] = {"per_commit_max": max(vals), "per_commit_mean": statistics.fmean(vals)}
    syncs = [sum(c["ops"].get(k, 0) for k in SYNC_KEYS) for c in commits]
    out["syncs_per_commit_max"] = max(syncs)
    out["syncs_per_commit_mean"] = statistics.fmean(syncs)
    out["per_commit"] = [
        dict(rid=c["rid"], L=c["L"], chunked=c.get("chunked"),
             syncs=sum(c["ops"].get(k, 0) for k in SYNC_KEYS),
             **{k: v for k, v in c["ops"].items() if v})
        for c in commits
    ]
    return out


def _device_label() -> str:
    """Where the KV tensors lived: ``cpu``, or the GPU's name (``ISLANDS_TEST_DEVICE=cuda``)."""
    import torch

    from islands_harness.stack import stack_device

    if stack_device() == "cuda":
        return f"cuda: {torch.cuda.get_device_name(0)}, torch {torch.__version__}"
    return f"cpu, torch {torch.__version__}"


def bench(shape: Shape, *, arms=ARM_ORDER, repeats: int = 3, timing_decode_tokens: Optional[int] = None,
          count_syncs: bool = True, profile_top: int = 0, profile_runs: int = 3,
          check: bool = False) -> dict:
    arms = list(arms)
    result = {
        "shape": {
            "window": shape.window,
            "page": shape.page,
            "chunk": shape.chunk,
            "prompt": shape.prompt,
            "n_requests": shape.n_requests,
            "decode_tokens": shape.decode_tokens,
            "decode_interval": None,
            "full_pool": shape.pool_sizes()[0],
            "swa_pool": shape.pool_sizes()[1],
            "seed": shape.seed,
        },
        "arms": {},
        "repeats": repeats,
        "profile_runs": profile_runs if profile_top else 0,
        "timing_decode_tokens": timing_decode_tokens,
        "device": _device_label(),
    }
    measured: Dict[str, RunResult] = {}
    for arm in arms:
        log(f"measurement run: arm={arm} (hold snapshots{', sync counting' if count_syncs else ''})")
        rr = run_arm(shape, arm, measure=True, count_syncs=count_syncs, check=check)
        log(f"  {arm}: {rr.steps} steps in {rr.wall_seconds:.1f} s")
        measured[arm] = rr
    timings: Dict[str, List[List[float]]] = {a: [] for a in arms}
    cpu_timings: Dict[str, List[List[float]]] = {a: [] for a in arms}
    free_timings: Dict[str, List[List[float]]] = {a: [] for a in arms}
    reclaims: Dict[str, List[float]] = {a: [] for a in arms}
    reclaimed: Dict[str, int] = {}
    for rep in range(repeats):
        for arm in arms:
            log(f"timing run {rep + 1}/{repeats}: arm={arm}")
            rr = run_arm(shape, arm, measure=False, decode_tokens=timing_decode_tokens)
            timings[arm].append([c["seconds"] for c in rr.commits])
            cpu_timings[arm].append([c["thread_cpu_seconds"] for c in rr.commits])
            free_timings[arm].append([c.get("free_thread_cpu_seconds", 0.0) for c in rr.commits])
            reclaims[arm].append(rr.reclaim_seconds)
            reclaimed[arm] = rr.reclaimed_swa
    profiles = {}
    if profile_top:
        # thread CPU clock: robust to other jobs preempting this one (wall time is not)
        profilers = {a: cProfile.Profile(time.thread_time) for a in arms}
        n_prof = {a: 0 for a in arms}
        for rep in range(profile_runs):
            for arm in arms:
                log(f"profile run {rep + 1}/{profile_runs}: arm={arm}")
                rr = run_arm(shape, arm, measure=False, decode_tokens=timing_decode_tokens,
                             profiler=profilers[arm])
                n_prof[arm] += len(rr.commits)
        profiles = {a: _profile_rows(profilers[a], n_prof[a], profile_top) for a in arms}

    for arm in arms:
        rr = measured[arm]
        if arm in ISLAND_ARMS:
            from sglang.srt.mem_cache.swa_island_radix_cache import decode_island_interval

            result["shape"]["decode_interval"] = shape.decode_interval or decode_island_interval(
                shape.chunk)
        all_t = [t for rep in timings[arm] for t in rep]
        all_c = [t for rep in cpu_timings[arm] for t in rep]
        a = {
            **hold_summary(rr.snapshots["commit"]),
            "commit_cpu_seconds_median": _pct(all_t, 0.5) if all_t else None,
            "commit_cpu_seconds_p90": _pct(all_t, 0.9) if all_t else None,
            "commit_cpu_seconds_mean": statistics.fmean(all_t) if all_t else None,
            "commit_cpu_seconds_per_repeat_median": [_pct(t, 0.5) for t in timings[arm]],
            "commit_thread_cpu_seconds_median": _pct(all_c, 0.5) if all_c else None,
            "commit_thread_cpu_seconds_p90": _pct(all_c, 0.9) if all_c else None,
            "commit_free_thread_cpu_seconds_median": (
                _pct([t for rep in free_timings[arm] for t in rep], 0.5)
                if arm in ISLAND_ARMS and all_c else None),
            "commits_per_run": len(rr.commits),
            "commit_cpu_seconds_per_run_median": (
                statistics.median(sum(t) for t in timings[arm]) if timings[arm] else None),
            "final_swa_reclaim_cpu_seconds_median": (
                statistics.median(reclaims[arm]) if reclaims[arm] else None),
            "final_swa_reclaimed_tokens": reclaimed.get(arm),
            "commit_timing_samples": len(all_t),
            "after_commit": hold_summary(rr.snapshots["commit"]),
            "with_chunk_in_flight": hold_summary(rr.snapshots["inflight"]),
            "decode": hold_summary(rr.snapshots["decode"]),
            "commit_rows": [
                dict(label=r["label"], rid=r["rid"], L=r["L"], n_running=r["n"],
                     committing_req_held=r["held"][r["rids"].index(r["rid"])]
                     if r["rid"] in r["rids"] else None,
                     max_held=max(r["held"]), max_locked=max(r["locked"]),
                     max_private=max(r["private"]), dead_per_req=r["dead"],
                     evictable_per_req=r["evictable"], allocated_per_req=r["allocated"])
                for r in rr.snapshots["commit"]
            ],
            "host_syncs": sync_summary(rr.commits),
            "chunk_islands": rr.chunk_islands,
            "decode_islands": rr.n_decode_islands,
            "decode_island_cpu_seconds": [d["seconds"] for d in rr.decode_islands],
            "decode_island_host_syncs": sync_summary(rr.decode_islands),
            "measurement_run_wall_seconds": rr.wall_seconds,
        }
        if arm in profiles:
            a["commit_profile"] = profiles[arm]
        result["arms"][arm] = a
    if "upstream" in result["arms"]:
        up = result["arms"]["upstream"]
        ratios = {}
        for arm, a in result["arms"].items():
            if arm == "upstream" or not up["commit_cpu_seconds_median"]:
                continue
            ratios[arm] = {
                "commit_cpu_median": a["commit_cpu_seconds_median"] / up["commit_cpu_seconds_median"],
                "commit_cpu_p90": a["commit_cpu_seconds_p90"] / up["commit_cpu_seconds_p90"],
                "commit_thread_cpu_median": (a["commit_thread_cpu_seconds_median"]
                                             / up["commit_thread_cpu_seconds_median"]),
                "commit_thread_cpu_p90": (a["commit_thread_cpu_seconds_p90"]
                                          / up["commit_thread_cpu_seconds_p90"]),
                "per_repeat_median": [
                    x / y for x, y in zip(a["commit_cpu_seconds_per_repeat_median"],
                                          up["commit_cpu_seconds_per_repeat_median"])
                ],
            }
            if a.get("commit_free_thread_cpu_seconds_median") is not None:
                # upstream's commit plus this arm's SWA free alone: what any commit that frees
                # the SWA it tombstones costs at least, with this free
                ratios[arm]["upstream_plus_free_thread_cpu_median"] = 1 + (
                    a["commit_free_thread_cpu_seconds_median"]
                    / up["commit_thread_cpu_seconds_median"])
        result["ratios_vs_upstream"] = ratios
    w, p = shape.window, shape.page
    acc = {"bound_w_plus_p": w + p, "bound_w_plus_2p": w + 2 * p}
    up = result["arms"].get("upstream")
    for arm in ISLAND_ARMS:
        if arm not in result["arms"]:
            continue
        a = result["arms"][arm]
        acc[f"{arm}_max_held_after_commit"] = a["max_swa_held_per_running_req"]
        acc[f"{arm}_held_le_w_plus_p"] = a["max_swa_held_per_running_req"] <= w + p
        acc[f"{arm}_dead_after_commit"] = a["max_dead_swa_per_running_req"]
        acc[f"{arm}_host_syncs_per_commit_max"] = (a["host_syncs"] or {}).get("syncs_per_commit_max")
        if up is not None and up["commit_cpu_seconds_per_run_median"] is not None:
            # every commit of a run plus the SWA reclaim at the end (what upstream defers to
            # eviction), against the same for upstream
            ours = a["commit_cpu_seconds_per_run_median"] + a["final_swa_reclaim_cpu_seconds_median"]
            theirs = (up["commit_cpu_seconds_per_run_median"]
                      + up["final_swa_reclaim_cpu_seconds_median"])
            acc[f"{arm}_commits_plus_reclaim_le_upstream"] = ours <= theirs
    result["acceptance"] = acc
    return result


# ---- reporting ------------------------------------------------------------------------------------


def _f(x, nd=1):
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.{nd}f}"
    return str(x)


def to_markdown(result: dict) -> str:
    s = result["shape"]
    arms = [a for a in ARM_ORDER if a in result["arms"]]
    A = result["arms"]
    lines = [
        f"### SWA hold per running request: w={s['window']} p={s['page']} cp={s['chunk']} "
        f"prompt={s['prompt']} n={s['n_requests']} decode={s['decode_tokens']}"
        f" (decode-island interval {s['decode_interval']})",
        "",
        f"KV device: {result.get('device', 'cpu')}.",
        "",
        "SWA tokens per running request (max / mean over snapshots and running requests).",
        "`after commit`: right after each `cache_unfinished_req`, before the next chunk is "
        "allocated; `chunk in flight`: after each extend step, including the next chunk's slots.",
        "",
        "| metric | " + " | ".join(arms) + " |",
        "|---|" + "---|" * len(arms),
    ]

    def row(label, fn):
        lines.append(f"| {label} | " + " | ".join(fn(A[a]) for a in arms) + " |")

    for phase, key in (("after commit", "after_commit"), ("chunk in flight", "with_chunk_in_flight"),
                       ("decode", "decode")):
        row(f"{phase}: held (locked + private) max / mean",
            lambda a: f"{_f(a[key].get('max_swa_held_per_running_req'))} / "
                      f"{_f(a[key].get('mean_swa_held_per_running_req'))}")
        row(f"{phase}: locked max / private max",
            lambda a: f"{_f(a[key].get('max_swa_locked_per_running_req'))} / "
                      f"{_f(a[key].get('max_swa_private_per_running_req'))}")
        row(f"{phase}: tree evictable max / mean",
            lambda a: f"{_f(a[key].get('max_swa_evictable_per_running_req'))} / "
                      f"{_f(a[key].get('mean_swa_evictable_per_running_req'))}")
        row(f"{phase}: dead max / mean",
            lambda a: f"{_f(a[key].get('max_dead_swa_per_running_req'))} / "
                      f"{_f(a[key].get('mean_dead_swa_per_running_req'))}")
        row(f"{phase}: SWA allocated max / mean",
            lambda a: f"{_f(a[key].get('max_swa_allocated_per_running_req'))} / "
                      f"{_f(a[key].get('mean_swa_allocated_per_running_req'))}")
    ratios = result.get("ratios_vs_upstream", {})
    row("commit CPU ms median / p90 (`perf_counter`)",
        lambda a: f"{_f(a['commit_cpu_seconds_median'] * 1e3, 3)} / "
                  f"{_f(a['commit_cpu_seconds_p90'] * 1e3, 3)}"
        if a["commit_cpu_seconds_median"] is not None else "-")
    lines.append(
        "| commit CPU ratio vs upstream (median / p90, perf_counter) | "
        + " | ".join(
            "1" if a == "upstream" else
            (f"{ratios[a]['commit_cpu_median']:.3f} / {ratios[a]['commit_cpu_p90']:.3f}"
             if a in ratios else "-")
            for a in arms)
        + " |")
    row("commit thread CPU ms median / p90 (`time.thread_time`)",
        lambda a: f"{_f(a['commit_thread_cpu_seconds_median'] * 1e3, 3)} / "
                  f"{_f(a['commit_thread_cpu_seconds_p90'] * 1e3, 3)}"
        if a["commit_thread_cpu_seconds_median"] is not None else "-")
    lines.append(
        "| commit thread CPU ratio vs upstream (median / p90) | "
        + " | ".join(
            "1" if a == "upstream" else
            (f"{ratios[a]['commit_thread_cpu_median']:.3f} / {ratios[a]['commit_thread_cpu_p90']:.3f}"
             if a in ratios else "-")
            for a in arms)
        + " |")
    if any(A[a].get("commit_free_thread_cpu_seconds_median") is not None for a in arms):
        row("of which the SWA free (`free_swa_pages`), thread CPU ms median",
            lambda a: _f(a["commit_free_thread_cpu_seconds_median"] * 1e3, 3)
            if a.get("commit_free_thread_cpu_seconds_median") is not None else "-")
        lines.append(
            "| upstream's commit + that free, thread CPU ratio vs upstream (a floor for freeing "
            "at commit) | " + " | ".join(
                _f(ratios[a]["upstream_plus_free_thread_cpu_median"], 3)
                if "upstream_plus_free_thread_cpu_median" in ratios.get(a, {}) else "-"
                for a in arms) + " |")
    lines.append(
        "| per-repeat median ratio vs upstream (perf_counter) | "
        + " | ".join(
            "1" if a == "upstream" else
            (", ".join(f"{x:.3f}" for x in ratios[a]["per_repeat_median"]) if a in ratios else "-")
            for a in arms)
        + " |")
    row("all commits of a run + final SWA reclaim, ms (reclaimed tokens)",
        lambda a: f"{_f(a['commit_cpu_seconds_per_run_median'] * 1e3, 2)} + "
                  f"{_f(a['final_swa_reclaim_cpu_seconds_median'] * 1e3, 2)} "
                  f"({a['final_swa_reclaimed_tokens']})"
        if a["commit_cpu_seconds_per_run_median"] is not None else "-")
    row("commit timing samples (commits x repeats)",
        lambda a: f"{a['commits_per_run']} x {result['repeats']}")
    row("host syncs per commit max / mean",
        lambda a: f"{_f(a['host_syncs'].get('syncs_per_commit_max'))} / "
                  f"{_f(a['host_syncs'].get('syncs_per_commit_mean'), 2)}" if a["host_syncs"] else "-")
    for k in SYNC_KEYS:
        if any(A[a]["host_syncs"] and A[a]["host_syncs"][k]["per_commit_max"] for a in arms):
            row(f"  `{k}` per commit max / mean",
                lambda a, k=k: f"{A_k(a, k, 'per_commit_max')} / {A_k(a, k, 'per_commit_mean', 2)}")
    if any(A[a]["host_syncs"] and "cuda_sync" in A[a]["host_syncs"] for a in arms):
        row("CUDA syncs per commit max / mean (torch sync debug mode)",
            lambda a: f"{A_k(a, 'cuda_sync', 'per_commit_max')} / "
                      f"{A_k(a, 'cuda_sync', 'per_commit_mean', 2)}")
        row("decode-island CUDA syncs max",
            lambda a: _f(((a.get("decode_island_host_syncs") or {}).get("cuda_sync") or {})
                         .get("per_commit_max")))
    row("aten ops per commit max / mean",
        lambda a: f"{A_k(a, 'aten_ops', 'per_commit_max')} / {A_k(a, 'aten_ops', 'per_commit_mean')}")
    row("chunk islands / decode islands", lambda a: f"{a['chunk_islands']} / {a['decode_islands']}")
    row("decode-island CPU ms median",
        lambda a: _f(statistics.median(a["decode_island_cpu_seconds"]) * 1e3, 3)
        if a["decode_island_cpu_seconds"] else "-")
    row("decode-island host syncs max",
        lambda a: _f((a.get("decode_island_host_syncs") or {}).get("syncs_per_commit_max")))
    row("measurement run wall s (full decode)", lambda a: _f(a["measurement_run_wall_seconds"]))
    lines += [
        "",
        f"Pools: full {s['full_pool']} / SWA {s['swa_pool']} tokens (no eviction pressure, no "
        "retractions: the natural hold is measured). `held` = SWA-locked tree nodes + live "
        "request-owned slots (`req_hold`); `tree evictable`, `dead` and `SWA allocated` are pool "
        "totals divided by the running requests; `dead` = live, unlocked tree SWA outside every "
        "running request's window `[L - w, L)` (during decode, islands' count includes the "
        "prompt's last island, kept live on purpose as the re-serve point; with lazy reclaim it "
        "is the cached SWA below islands, evictable: what `lazy`, the default, keeps until the pool needs it). "
        "Commit CPU: "
        "`time.perf_counter` (wall) and `time.thread_time` (this thread's CPU, less sensitive "
        "to other jobs on the machine) around `tree.cache_unfinished_req` "
        + ("(tensor ops are CUDA kernel launches: the thread time is the host's launch cost), "
           if str(result.get("device", "cpu")).startswith("cuda") else
           "(CPU harness: tensor ops run on CPU tensors), ")
        + "median / p90 over all commits of all timing repeats. Host syncs: aten ops "
        "that block the host on a CUDA tensor (see the module docstring), counted per commit"
        + ("; CUDA syncs: warnings of torch's sync debug mode, counted per commit."
           if str(result.get("device", "cpu")).startswith("cuda") else "."),
    ]
    acc = result.get("acceptance")
    if acc:
        lines += ["", "Acceptance: " + ", ".join(f"{k}={v}" for k, v in acc.items())]
    lines += ["", f"Command: `{result.get('command', '')}`"]
    env = result.get("environment")
    if env:
        lines += ["", f"Machine: {env['cpus']} CPUs, load average {env['loadavg_start'][0]:.1f} at "
                      f"start / {env['loadavg_end'][0]:.1f} at end (other jobs share it: timings are "
                      f"noisy; arms are interleaved per repeat); torch {env['torch']}, "
                      f"{env['torch_threads']} thread(s)."]
    lines.append("")
    return "\n".join(lines)


def A_k(a, k, field, nd=1):
    hs = a.get("host_syncs") or {}
    if k not in hs:
        return "-"
    return _f(hs[k][field], nd)


# ---- CLI ------------------------------------------------------------------------------------------


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
    ap.add_argument("--arms", default=",".join(ARM_ORDER), help="comma-separated arms to run")
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
              "full_pool", "swa_pool", "seed"):
        v = getattr(args, f, None)
        if v is not None:
            over[f] = v
    return dataclasses.replace(base, **over)


def main(argv=None) -> int:
    args = parse_args(argv)
    shape = shape_from_args(args)
    if args.timing_decode_tokens is not None and args.timing_decode_tokens < 2:
        raise SystemExit("--timing-decode-tokens must be >= 2 (else no last-chunk commit)")
    import torch

    torch.set_num_threads(args.threads)
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
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
            for arm, a in result["arms"].items():
                if a.get("commit_profile"):
                    f.write(f"\n<details><summary>cProfile of the commit path: {arm} "
                            f"(thread-CPU microseconds per commit, profiler overhead included, "
                            f"{result['profile_runs']} runs)</summary>\n\n"
                            "| cumulative | own | calls | function |\n|---:|---:|---:|---|\n")
                    for r in a["commit_profile"]:
                        f.write(f"| {r['cumtime_us_per_commit']:.1f} | {r['tottime_us_per_commit']:.1f}"
                                f" | {r['ncalls']} | `{r['func']}` |\n")
                    f.write("\n</details>\n")
        log(f"wrote {args.md}")
    log(f"done in {result['total_wall_seconds']:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
