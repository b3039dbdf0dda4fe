"""Cache cost benchmark, the measurement tools: a timer, observation wrappers on the real tree's
bound methods, a clone of a built tree (so every timed eviction starts from the same state), the
facts of a tree's size, and the eviction that drains the cold tier.

Every timed call is the real method of the installed (patched) SGLang cache; the wrappers only
observe (they call the bound method and record ``perf_counter_ns`` around it). The garbage
collector is off inside every timed region (as ``timeit`` does), so a collection triggered by the
benchmark's own garbage is not charged to the cache.
"""

from __future__ import annotations

import contextlib
import copy
import gc
import statistics
import sys
import threading
import time
import types
import weakref
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional

import _bench_path  # noqa: F401  (puts the repository root and benchmarks/ on sys.path)


def timed_us(fn: Callable[[], Any]) -> float:
    """Microseconds of one call of ``fn`` (garbage collector off during the call)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        t0 = time.perf_counter_ns()
        fn()
        return (time.perf_counter_ns() - t0) / 1e3
    finally:
        if enabled:
            gc.enable()


def summary(samples: List[float]) -> Optional[Dict[str, Any]]:
    """``{median_us, p90_us, n}`` of ``samples`` (None when there are none)."""
    if not samples:
        return None
    xs = sorted(samples)
    p90 = xs[min(len(xs) - 1, int(round(0.9 * (len(xs) - 1))))]
    return {"median_us": round(statistics.median(xs), 3), "p90_us": round(p90, 3), "n": len(xs)}


@contextlib.contextmanager
def recording(obj: Any, names: Iterable[str],
              gc_off: bool = True) -> Iterator[Dict[str, List[float]]]:
    """While active, each ``obj.NAME`` (a bound method, where ``obj`` has one) is replaced on the
    instance by a wrapper that calls it and appends its microseconds to ``rec[NAME]``. Nested
    calls (a refresh inside a commit) are recorded in both lists. The garbage collector is off
    while recording, unless ``gc_off`` is False. Instance attributes are removed on exit, so the
    class's methods return."""
    rec: Dict[str, List[float]] = {}
    installed = []
    for name in names:
        method = getattr(obj, name, None)
        if method is None or name in vars(obj):
            continue
        rec[name] = []

        def wrapper(*args, _m=method, _out=rec[name], **kw):
            t0 = time.perf_counter_ns()
            try:
                return _m(*args, **kw)
            finally:
                _out.append((time.perf_counter_ns() - t0) / 1e3)

        setattr(obj, name, wrapper)
        installed.append(name)
    enabled = gc.isenabled()
    if gc_off:
        gc.disable()
    try:
        yield rec
    finally:
        for name in installed:
            delattr(obj, name)
        if enabled:
            gc.enable()


@contextlib.contextmanager
def frozen_heap() -> Iterator[None]:
    """Everything alive now moves to the collector's permanent generation while the block runs,
    so the collections between samples scan only what the block makes (a full collection of
    sglang's and torch's heap takes most of a second). The block's garbage is collected before
    the heap thaws; what it keeps alive is the caller's to drop."""
    gc.freeze()
    try:
        yield
    finally:
        gc.collect()
        gc.unfreeze()


def tree_nodes(tree) -> List[Any]:
    """Every node but the root (iterative: deep transcripts would overflow a recursion)."""
    out, stack = [], list(tree.root_node.children.values())
    while stack:
        node = stack.pop()
        out.append(node)
        stack.extend(node.children.values())
    return out


def size_facts(tree) -> Dict[str, int]:
    """Nodes, nodes with live SWA (not ``swa_tombstone``), tokens cached (full KV in the tree)
    and SWA tokens live in the tree."""
    nodes = tree_nodes(tree)
    live = [x for x in nodes if not x.swa_tombstone]
    return {"nodes": len(nodes), "live_swa_nodes": len(live),
            "tokens_cached": sum(len(x.value) for x in nodes),
            "swa_tokens_live": sum(len(x.value) for x in live)}


def clone_tree(tree, kv_pool, req_to_token_pool, shared: Iterable[Any] = ()):
    """A copy of ``tree`` and its allocator that evicts, splits, locks and inserts on its own.

    Shared with the original (never mutated in place by the cache): the KV pools' tensors, the
    request-to-token pool, every node's ``key`` and ``value`` (splits and evictions replace them,
    never write into them) and the objects in ``shared`` (the requests a queued-hit index names).
    ``copy.deepcopy`` keeps a ``WeakKeyDictionary``'s keys and a ``WeakSet``'s members as they
    were (its state is a set of weak references, which deepcopy treats as atoms), so the clone's
    weak indexes are re-keyed to the copied nodes afterwards.
    """
    from sglang.srt.mem_cache.memory_pool import KVCache

    alloc = tree.token_to_kv_pool_allocator
    memo: Dict[int, Any] = {}
    for obj in (kv_pool, req_to_token_pool, *shared):
        memo[id(obj)] = obj
    for holder in (kv_pool, alloc, *(getattr(alloc, a, None) for a in
                                     ("full_attn_allocator", "swa_attn_allocator"))):
        for v in vars(holder).values() if holder is not None else ():
            if isinstance(v, KVCache):
                memo[id(v)] = v
    for node in tree_nodes(tree):
        memo[id(node.key)] = node.key
        memo[id(node.value)] = node.value
    copy._deepcopy_dispatch.setdefault(types.ModuleType, copy._deepcopy_atomic)
    clone = _deep_copy(tree, memo)
    for name, v in list(vars(clone).items()):
        if isinstance(v, weakref.WeakSet):
            setattr(clone, name, weakref.WeakSet(memo.get(id(k), k) for k in v))
        elif isinstance(v, weakref.WeakKeyDictionary):
            setattr(clone, name, weakref.WeakKeyDictionary(
                {memo.get(id(k), k): val for k, val in v.items()}))
        elif isinstance(v, weakref.WeakValueDictionary):
            setattr(clone, name, weakref.WeakValueDictionary(
                {k: memo.get(id(val), val) for k, val in v.items()}))
    return clone


def _deep_copy(obj, memo):
    """``copy.deepcopy`` in a thread with a 512 MiB stack and a recursion limit to match: the
    copy recurses along the LRU lists' links, one level per node."""
    out: Dict[str, Any] = {}

    def work():
        try:
            out["copy"] = copy.deepcopy(obj, memo)
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller
            out["error"] = e

    limit, size = sys.getrecursionlimit(), threading.stack_size()
    sys.setrecursionlimit(max(limit, 2_000_000))
    threading.stack_size(512 << 20)
    try:
        t = threading.Thread(target=work)
        t.start()
        t.join()
    finally:
        threading.stack_size(size)
        sys.setrecursionlimit(limit)
    if "error" in out:
        raise out["error"]
    return out["copy"]


def reclaimed_window(tree) -> Optional[int]:
    """Islands' ``stats.reclaimed_window`` (window tokens eviction took), None upstream."""
    stats = getattr(tree, "stats", None)
    return getattr(stats, "reclaimed_window", None)


def evict_swa(tree, k: int):
    from sglang.srt.mem_cache.base_prefix_cache import EvictParams

    return tree.evict(EvictParams(num_tokens=0, swa_num_tokens=k))


def drain_cold(tree, step: int, total: Optional[int] = None) -> Dict[str, int]:
    """Evict SWA ``step`` tokens at a time until the cache starts taking window tokens
    (``stats.reclaimed_window`` grows: no cold SWA is left), or, with ``total`` (upstream, which
    has no cold tier), until ``total`` tokens are evicted. Returns what it took."""
    start = reclaimed_window(tree)
    evicted = steps = 0
    while tree.swa_evictable_size() > step:
        if total is not None and evicted >= total:
            break
        res = evict_swa(tree, step if total is None else min(step, total - evicted))
        evicted += res.swa_num_tokens_evicted
        steps += 1
        if res.swa_num_tokens_evicted == 0:
            break
        if total is None and start is not None and reclaimed_window(tree) > start:
            break
    now = reclaimed_window(tree)
    return {"evicted": evicted, "steps": steps,
            "window_tokens_taken": (now - start) if start is not None else 0}


def time_on_clones(make: Callable[[], Any], op: Callable[[Any], Any], reps: int) -> List[float]:
    """``op(clone)`` timed once on each of ``reps`` fresh clones (``make()``, not timed): every
    sample starts from the same state. One more clone first, untimed: the first call of a code
    path in a process costs more than the next (lazy imports, caches)."""
    op(make())
    out = []
    for _ in range(reps):
        c = make()
        gc.collect()
        out.append(timed_us(lambda: op(c)))
        del c
    return out
