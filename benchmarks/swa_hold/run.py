"""One arm, one run of the SWA hold benchmark (``benchmarks/swa_hold.py``).

``run_arm`` builds the real stack for an arm (``islands_harness.stack.build_stack``), submits the
seeded prompts to ``islands_harness.sim.MiniScheduler`` and runs it to completion with
observation-only hooks (``_ArmProbe``): hold snapshots of the running requests, timing and sync
counting around every chunk commit (``tree.cache_unfinished_req``) and decode island, and the
thread CPU of the islands' SWA free. SWA sizes are in tokens; times in seconds.
"""

from __future__ import annotations

import contextlib
import cProfile
import dataclasses
import gc
import os
import pstats
import random
import time
from typing import Dict, List, Optional

from swa_hold.setup import ARMS, ISLAND_FREE_FUNCTION, Shape, arm_env, log

from islands_harness.host_syncs import make_sync_counter

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


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


def _build(shape: Shape, islands: bool, reclaim: Optional[str], decode_tokens: int):
    """The arm's stack and a scheduler with the shape's seeded prompts submitted."""
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
    w = stack.tree.sliding_window_size + 1
    assert w == shape.window, (w, shape.window)
    sched = MiniScheduler(stack, max_running=shape.n_requests)
    rng = random.Random(shape.seed)
    vocab = stack.model_config.vocab_size
    for i in range(shape.n_requests):
        sched.submit(f"r{i}", random_prompt(rng, shape.prompt, vocab), decode_tokens)
    return stack, sched


class _ArmProbe:
    """Observation hooks on one arm's tree and scheduler (instance wrappers; no behaviour change).

    ``snaps[kind]``: hold snapshots (``commit``, ``inflight``, ``decode``), taken when ``measure``;
    ``commits`` / ``dislands``: one dict per chunk commit / decode island with its ``seconds``
    (``perf_counter``), ``thread_cpu_seconds``, on island arms ``free_thread_cpu_seconds`` (the
    SWA free inside it, accumulated in ``free_cpu[0]`` by ``_timing_island_free``) and, with
    ``count_syncs``, the op counts ``ops``."""

    def __init__(self, stack, sched, arm: str, islands: bool, decode_tokens: int, *,
                 measure: bool, count_syncs: bool, profiler: Optional[cProfile.Profile],
                 check: bool):
        self.stack, self.sched, self.arm, self.islands = stack, sched, arm, islands
        self.tree, self.alloc = stack.tree, stack.allocator
        self.w = self.tree.sliding_window_size + 1
        self.decode_tokens = decode_tokens
        self.measure, self.profiler, self.check = measure, profiler, check
        self.snaps: Dict[str, List[dict]] = {"commit": [], "inflight": [], "decode": []}
        self.commits: List[dict] = []
        self.dislands: List[dict] = []
        self.counter_cls = make_sync_counter() if count_syncs else None
        # Thread CPU inside the island SWA free (allocator.free_swa_pages) per commit: the part of
        # the commit that any design freeing SWA at commit time pays on top of upstream's commit.
        self.free_cpu = [0.0]
        self.last_progress = time.perf_counter()
        self.decode_steps = 0

    def snapshot(self, kind, running, extra=None):
        from islands_harness.invariants import check_invariants, req_locked_swa, req_private_swa

        running = [r for r in running if r.req_pool_idx is not None and not r.finished()]
        if not running:
            return
        stack, tree, alloc = self.stack, self.tree, self.alloc
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
            dead=dead_swa(tree, running, self.w) / n,
        )
        if extra:
            row.update(extra)
        self.snaps[kind].append(row)
        if self.check:
            check_invariants(stack, running)

    def timed_call(self, fn, sink, info, profiled=False):
        counter = self.counter_cls() if self.counter_cls else None
        prof = self.profiler if profiled else None
        self.free_cpu[0] = 0.0
        gc_was = gc.isenabled()
        c0 = time.thread_time()
        t0 = time.perf_counter()
        if prof:
            prof.enable()
        if counter:
            with counter.active():
                fn()
        else:
            fn()
        if prof:
            prof.disable()
        dt = time.perf_counter() - t0
        info["thread_cpu_seconds"] = time.thread_time() - c0
        info["seconds"] = dt
        if self.islands:
            info["free_thread_cpu_seconds"] = self.free_cpu[0]
        if counter:
            info["ops"] = counter.counts
        sink.append(info)
        assert gc.isenabled() == gc_was

    def on_event(self, label, reqs):
        arm, sched = self.arm, self.sched
        if label in ("chunk_commit", "last_chunk_commit"):
            c = self.commits[-1]
            log(f"  {arm}: {label} {c['rid']} L={c['L']} {c['seconds'] * 1e3:.2f} ms")
            if self.measure:
                self.snapshot("commit", sched.running + list(reqs),
                              dict(label=label, rid=c["rid"], L=c["L"]))
        elif label == "decode":
            self.decode_steps += 1
            if self.measure:
                self.snapshot("decode", sched.running)
            now = time.perf_counter()
            if now - self.last_progress > 10:
                self.last_progress = now
                log(f"  {arm}: decode step {self.decode_steps}/{self.decode_tokens - 1}")

    def install(self) -> None:
        """Wrap the tree's commit (and decode island) and the scheduler's prefill step."""
        tree, sched = self.tree, self.sched
        orig_commit = tree.cache_unfinished_req

        def cache_unfinished_req(req, chunked=False, **kw):
            info = dict(rid=req.rid, chunked=bool(chunked), L=int(req.extend_range.end))
            self.timed_call(lambda: orig_commit(req, chunked=chunked, **kw), self.commits, info,
                            profiled=True)

        tree.cache_unfinished_req = cache_unfinished_req
        if self.islands:
            orig_island = tree.insert_decode_island

            def insert_decode_island(req):
                info = dict(rid=req.rid, L=int(req.kv_committed_len))
                self.timed_call(lambda: orig_island(req), self.dislands, info)

            tree.insert_decode_island = insert_decode_island
        sched.on_event = self.on_event
        orig_process_prefill = sched._process_prefill

        def process_prefill(batch):
            # The extend batch is allocated and "running": the chunk in flight is in the hold.
            if self.measure:
                self.snapshot("inflight",
                              sched.running + [r for r in batch.reqs if r not in sched.running])
            orig_process_prefill(batch)

        sched._process_prefill = process_prefill


def _final_swa_reclaim(tree, alloc):
    """Evict all the tree's evictable SWA once every request finished: (seconds, tokens freed).

    What the arm left for the tree's SWA eviction to reclaim (upstream defers to here the SWA
    freeing that islands does at commit)."""
    from sglang.srt.mem_cache.base_prefix_cache import EvictParams

    swa_left = tree.swa_evictable_size()
    free_before = alloc.swa_available_size()
    t_ev = time.perf_counter()
    tree.evict(EvictParams(num_tokens=0, swa_num_tokens=swa_left))
    reclaim_seconds = time.perf_counter() - t_ev
    return reclaim_seconds, alloc.swa_available_size() - free_before


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
        stack, sched = _build(shape, islands, reclaim, decode_tokens)
        probe = _ArmProbe(stack, sched, arm, islands, decode_tokens, measure=measure,
                          count_syncs=count_syncs, profiler=profiler, check=check)
        probe.install()
        gc.collect()
        t0 = time.perf_counter()
        with (_timing_island_free(stack.allocator, probe.free_cpu) if islands
              else contextlib.nullcontext()):
            steps = sched.run()
        wall = time.perf_counter() - t0
        assert len(sched.finished) == shape.n_requests, "not every request finished"
        assert sched.retractions == 0, "retractions: the pools are too small for this shape"
        reclaim_seconds, reclaimed = _final_swa_reclaim(stack.tree, stack.allocator)
        stats = getattr(stack.tree, "stats", None)
        return RunResult(
            arm=arm,
            snapshots=probe.snaps,
            commits=probe.commits,
            decode_islands=probe.dislands,
            chunk_islands=getattr(stats, "chunk_islands", 0),
            n_decode_islands=getattr(stats, "decode_islands", 0),
            wall_seconds=wall,
            steps=steps,
            reclaim_seconds=reclaim_seconds,
            reclaimed_swa=reclaimed,
        )


@contextlib.contextmanager
def _timing_island_free(alloc, acc: List[float]):
    """While active, every ``alloc.free_swa_pages`` call (``ISLAND_FREE_FUNCTION``: the island
    cache's sync-free SWA free, at an eager reclaim or an eviction) adds its thread CPU seconds to
    ``acc[0]``; a wrapper on the allocator instance, observation only."""
    real_free = getattr(alloc, ISLAND_FREE_FUNCTION)

    def timed_free(*a, **k):
        c = time.thread_time()
        try:
            return real_free(*a, **k)
        finally:
            acc[0] += time.thread_time() - c

    setattr(alloc, ISLAND_FREE_FUNCTION, timed_free)
    try:
        yield
    finally:
        delattr(alloc, ISLAND_FREE_FUNCTION)


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
