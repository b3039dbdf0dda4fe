"""Cache cost benchmark, one arm on one built cache: build it through the scheduler glue, then time
every operation of the size sweep (``measure_size``) or of the queue sweep (``queue_sweep``).

Operations (microseconds per call; ``n`` samples; every call is the real method):

- ``match_continue`` / ``match_diverge``: ``match_prefix`` of a cached transcript + a new message,
  and of a cached long prompt cut at a random point + new tokens (the split included: every
  sample diverges at a new point);
- ``commit_chunk`` / ``insert_finished``: ``cache_unfinished_req`` / ``cache_finished_req`` as the
  scheduler glue calls them for a probe workload (``Probes.commit_probes``);
- ``queued_refresh``: islands' ``_refresh_queued_hits``, inside those commits;
- ``decode_hook``: every ``on_decode_progress`` call (upstream: the base class's no-op);
  ``decode_island``: the calls that inserted a decode island (islands only);
- ``evict_64_cold`` / ``evict_window_cold``: ``evict(EvictParams(swa_num_tokens=k))`` right after
  the build, and ``..._nocold`` after evicting until islands take window tokens (no cold SWA left;
  upstream: after evicting the same total as ``islands_lazy``); each sample is the first eviction
  on a fresh clone of that state;
- ``lock_inc`` / ``lock_dec``: ``inc_lock_ref`` / ``dec_lock_ref`` on the end of a cached
  transcript; ``match_lock``: ``inc_match_lock_ref`` there (admission's lock);
- ``on_request_queued``: the hook ``Scheduler._add_request_to_queue`` calls (upstream: no-op).
"""

from __future__ import annotations

import dataclasses
from array import array
import gc
import sys
import time
from typing import Any, Dict, List, Optional

import _bench_path  # noqa: F401  (puts the repository root and benchmarks/ on sys.path)
from cache_cost.ops import (clone_tree, drain_cold, evict_swa, recording, size_facts, summary,
                            time_on_clones, timed_us)
from cache_cost.workload import (Probes, Shape, Traffic, drive, estimate_tokens, next_token,
                                 pool_tokens)

ARMS: Dict[str, Dict[str, Any]] = {  # name: StackConfig fields
    "upstream": {"islands": False, "reclaim": "auto"},
    "islands_lazy": {"islands": True, "reclaim": "lazy"},
    "islands_eager": {"islands": True, "reclaim": "eager"},
    "islands_auto": {"islands": True, "reclaim": "auto"},
}
# islands_lazy runs first: upstream's no-cold state evicts the total it evicted
ARM_ORDER = ("islands_lazy", "islands_eager", "islands_auto", "upstream")
MAX_RUNNING = 32
TREE_METHODS = ("cache_unfinished_req", "cache_finished_req", "_refresh_queued_hits",
                "on_decode_progress")


def log(msg: str) -> None:
    print(f"[cache_cost {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


@dataclasses.dataclass
class Built:
    stack: Any
    sched: Any
    traffic: Traffic
    rows: List[Dict[str, Any]]
    build_s: float
    build_evictions: int  # tree.evict calls during the build (pools hold it all: 0)


def build(arm: str, shape: Shape, n_clients: int, seed: int) -> Built:
    """The arm's stack (pools hold the whole workload: the build evicts nothing) with
    ``n_clients`` clients' traffic run through ``MiniScheduler``."""
    from islands_harness.sim import MiniScheduler
    from islands_harness.stack import StackConfig, build_stack

    pool = pool_tokens(estimate_tokens(shape, n_clients), shape.window)
    a = ARMS[arm]
    stack = build_stack(StackConfig(
        window=shape.hf_window, page=1, chunk=shape.chunk, full_pool=pool, swa_pool=pool,
        max_reqs=MAX_RUNNING + 8, islands=a["islands"], reclaim=a["reclaim"], ratio=0.5))
    sched = MiniScheduler(stack, max_running=MAX_RUNNING, next_token=next_token)
    traffic = Traffic(shape, n_clients, seed)
    t0 = time.perf_counter()
    with recording(stack.tree, ["evict"], gc_off=False) as rec:
        rows = drive(sched, traffic.clients(), "b", 2 * MAX_RUNNING)
    return Built(stack, sched, traffic, rows, time.perf_counter() - t0, len(rec["evict"]))


def clone_of(built: Built, tree=None, shared=()):
    s = built.stack
    return clone_tree(tree if tree is not None else s.tree, s.kv_pool, s.req_to_token_pool, shared)


def time_evictions(built: Built, tree, window: int, reps: int, state: str,
                   shared=()) -> Dict[str, Dict[str, Any]]:
    """``evict_64_<state>`` and ``evict_window_<state>``, each on ``reps`` fresh clones of
    ``tree``."""
    out = {}
    for name, k in (("64", 64), ("window", window)):
        xs = time_on_clones(lambda: clone_of(built, tree, shared), lambda t: evict_swa(t, k), reps)
        out[f"evict_{name}_{state}"] = summary(xs)
    return out


def time_matches(tree, probes: Probes, reps: int) -> Dict[str, Dict[str, Any]]:
    from sglang.srt.mem_cache.base_prefix_cache import MatchPrefixParams
    from sglang.srt.mem_cache.radix_cache import RadixKey

    out = {}
    for name, make in (("match_continue", probes.continue_key),
                       ("match_diverge", probes.diverge_key)):
        params = [MatchPrefixParams(key=RadixKey(array("q", make()), None)) for _ in range(reps)]
        out[name] = summary([timed_us(lambda p=p: tree.match_prefix(p)) for p in params])
    return out


def path_nodes(tree, nodes) -> float:
    """Mean number of nodes from the root (exclusive) to each of ``nodes``: what a lock, a match
    or an MRU reset of a path walks (islands split a transcript's path at its islands)."""
    total = 0
    for x in nodes:
        while x is not tree.root_node:
            total += 1
            x = x.parent
    return round(total / max(1, len(nodes)), 2)


def time_locks(tree, probes: Probes, reps: int) -> Dict[str, Dict[str, Any]]:
    """``lock_inc`` / ``lock_dec`` and ``match_lock`` on the ends of cached transcripts (each
    lock released before the next); ``path_nodes``: the mean path length of those ends."""
    from sglang.srt.mem_cache.base_prefix_cache import DecLockRefParams, MatchPrefixParams
    from sglang.srt.mem_cache.radix_cache import RadixKey

    nodes = [tree.match_prefix(MatchPrefixParams(key=RadixKey(array("q", probes.transcript()))))
             .last_device_node for _ in range(reps)]
    inc, dec, mlock = [], [], []
    for node in nodes:
        res = []
        inc.append(timed_us(lambda: res.append(tree.inc_lock_ref(node))))
        params = DecLockRefParams(swa_uuid_for_lock=res[0].swa_uuid_for_lock)
        dec.append(timed_us(lambda: tree.dec_lock_ref(node, params)))
    for node in nodes:
        res = []
        mlock.append(timed_us(lambda: res.append(tree.inc_match_lock_ref(node))))
        tree.dec_lock_ref(node, DecLockRefParams(swa_uuid_for_lock=res[0].swa_uuid_for_lock))
    return {"lock_inc": summary(inc), "lock_dec": summary(dec), "match_lock": summary(mlock),
            "path_nodes": path_nodes(tree, nodes)}


def queue_requests(sched, keys: List[List[int]], prefix: str) -> List[Any]:
    """``keys`` as requests joining the waiting queue through ``Scheduler._add_request_to_queue``
    (``MiniScheduler._queue``), which calls ``tree.on_request_queued``."""
    reqs = []
    for i, ids in enumerate(keys):
        req = sched.make_req(f"{prefix}{i}", ids, 8)
        sched._queue(req)
        reqs.append(req)
    return reqs


def time_queued_hook(built: Built, probes: Probes, n: int) -> Dict[str, Dict[str, Any]]:
    """``on_request_queued`` for ``n`` requests joining the queue; then they leave it."""
    sched = built.sched
    keys = [probes.queued() for _ in range(n)]
    with recording(sched.tree, ["on_request_queued"]) as rec:
        reqs = queue_requests(sched, keys, "q")
    sched.waiting.clear()
    del reqs
    gc.collect()  # the queued-hit index holds its requests weakly (cheap in a frozen_heap)
    return {"on_request_queued": summary(rec.get("on_request_queued", []))}


def run_probes(built: Built, probes: Probes) -> Dict[str, Dict[str, Any]]:
    """The commit probes through the scheduler glue, with the tree's commit and refresh recorded
    and its decode hook observed (a call that raised ``stats.decode_islands`` inserted a decode
    island)."""
    sched, tree = built.sched, built.stack.tree
    for i, (ids, max_new) in enumerate(probes.commit_probes()):
        sched.submit(f"p{i}", ids, max_new)
    stats = getattr(tree, "stats", None)
    hook: List[float] = []
    island: List[float] = []
    inner = tree.on_decode_progress

    def observe(req, accepted):
        before = getattr(stats, "decode_islands", 0)
        t0 = time.perf_counter_ns()
        inner(req, accepted)
        dt = (time.perf_counter_ns() - t0) / 1e3
        hook.append(dt)
        if getattr(stats, "decode_islands", 0) > before:
            island.append(dt)

    with recording(tree, TREE_METHODS[:3]) as rec:
        tree.on_decode_progress = observe
        try:
            sched.run()
        finally:
            del tree.on_decode_progress
    out = {"commit_chunk": summary(rec["cache_unfinished_req"]),
           "insert_finished": summary(rec["cache_finished_req"]),
           "decode_hook": summary(hook),
           "decode_island": summary(island) if stats is not None else None}
    if "_refresh_queued_hits" in rec:
        out["queued_refresh"] = summary(rec["_refresh_queued_hits"])
    sched.finished.clear()
    sched.all_reqs.clear()
    return out


@dataclasses.dataclass
class Reps:
    """Samples per operation: ``evict`` clones per eviction, ``op`` calls of the cheap ones,
    ``queued`` requests queued for the ``on_request_queued`` sample."""

    evict: int = 5
    op: int = 50
    queued: int = 64


def measure_size(arm: str, shape: Shape, n_clients: int, seed: int, reps: Reps,
                 drain_total: Optional[int]) -> Dict[str, Any]:
    """Build the cache, then time every operation of the size sweep on it. ``drain_total``: for
    upstream, the SWA tokens ``islands_lazy`` evicted to reach its no-cold state.
    Returns ``{facts, facts_nocold, drain, build_s, ops}``; ``built`` is kept for the queue
    sweep under ``"_built"`` with the no-cold tree under ``"_nocold"``."""
    built = build(arm, shape, n_clients, seed)
    tree = built.stack.tree
    facts = dict(size_facts(tree), requests=len(built.rows), clients=n_clients,
                 build_evictions=built.build_evictions)
    ops: Dict[str, Any] = {}
    ops.update(time_evictions(built, tree, shape.window, reps.evict, "cold"))
    nocold = clone_of(built)
    step = max(64, tree.swa_evictable_size() // 32)
    if not ARMS[arm]["islands"] and drain_total is None:  # run without islands_lazy: half
        drain_total = tree.swa_evictable_size() // 2
    drain = drain_cold(nocold, step, total=drain_total if not ARMS[arm]["islands"] else None)
    ops.update(time_evictions(built, nocold, shape.window, reps.evict, "nocold"))
    probes = Probes(built.traffic, built.rows, seed)
    ops.update(time_matches(tree, probes, reps.op))
    locks = time_locks(tree, probes, reps.op)
    facts["path_nodes"] = locks.pop("path_nodes")
    ops.update(locks)
    ops.update(time_queued_hook(built, probes, reps.queued))
    ops.update(run_probes(built, probes))
    if not ARMS[arm]["islands"]:
        ops["decode_island"] = None
        ops["queued_refresh"] = None
    return {"facts": facts, "facts_nocold": size_facts(nocold), "drain": drain,
            "build_s": round(built.build_s, 2), "ops": ops, "_built": built, "_nocold": nocold}


def _on_clone(built: Built, tree):
    """A clone of ``tree`` and a ``MiniScheduler`` driving it (same pools and server args)."""
    from islands_harness.sim import MiniScheduler

    c = clone_of(built, tree)
    view = dataclasses.replace(built.stack, tree=c, allocator=c.token_to_kv_pool_allocator)
    return c, MiniScheduler(view, max_running=MAX_RUNNING, next_token=next_token)


def _commit_behind_queue(sched, tree, probe_ids: List[int]) -> Dict[str, List[float]]:
    """Admit ``probe_ids`` alone ahead of the waiting queue (max_running 1) and run it to its
    finish, recording its commits and the queued-hit refresh inside them."""
    probe = sched.make_req(f"probe{len(sched.finished)}", probe_ids, 2)
    sched._queue(probe)
    sched.waiting.remove(probe)
    sched.waiting.insert(0, probe)
    sched.max_running = 1
    with recording(tree, TREE_METHODS[:3]) as rec:
        for _ in range(1000):
            sched.step()
            if probe.finished():
                break
    assert probe.finished(), "the probe did not finish"
    return rec


def queue_point(arm: str, built: Built, nocold, q: int, seed: int,
                reps: Reps) -> Dict[str, Any]:
    """Queue ``q`` requests on clones of the built and the no-cold trees, then time
    ``on_request_queued``, ``evict_*`` (each on fresh clones that share the queued requests) and,
    on the built state, the commits of probes admitted ahead of the queue."""
    probes = Probes(built.traffic, built.rows, seed)  # the same probes at every queue length
    ops: Dict[str, Any] = {}
    for state, src in (("cold", built.stack.tree), ("nocold", nocold)):
        tree, sched = _on_clone(built, src)
        sib_probes = [probes.sibling_probe() for _ in range(2)]
        sibs = [s for _, ss in sib_probes for s in ss][:q]
        keys = sibs + [probes.queued() for _ in range(q - len(sibs))]
        with recording(tree, ["on_request_queued"]) as rec:
            reqs = queue_requests(sched, keys, "w")
        if state == "cold":
            ops["on_request_queued"] = summary(rec.get("on_request_queued", []))
        ev = time_evictions(built, tree, built.traffic.w, reps.evict, state, shared=reqs)
        ops[f"evict_64_{state}"] = ev[f"evict_64_{state}"]
        if state == "cold":
            commits: List[float] = []
            refresh: List[float] = []
            for probe_ids, _ in sib_probes:
                rec = _commit_behind_queue(sched, tree, probe_ids)
                commits += rec["cache_unfinished_req"]
                refresh += rec.get("_refresh_queued_hits", [])
            ops["commit_chunk"] = summary(commits)
            ops["queued_refresh"] = summary(refresh) if ARMS[arm]["islands"] else None
        sched.waiting.clear()
        del tree, sched, reqs
        gc.collect()
    if not ARMS[arm]["islands"]:
        ops["queued_refresh"] = None
    return ops
