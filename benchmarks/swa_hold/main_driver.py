#!/usr/bin/env python
"""The SWA hold benchmark's driver for sglang 0.5.23 (upstream main): one arm, one or both tree
cores, in the 0.5.23 environment of that arm (``benchmarks/swa_hold.py --target main`` runs it
with ``.venv-main/bin/python`` for ``main`` and ``.venv-main-islands/bin/python`` for
``main_islands``; it never runs in the pinned ``.venv``).

Arms: ``main``: stock ``UnifiedRadixCache`` (stock 0.5.23, its defaults: the out-of-window SWA
free at every chunk commit, ``SGLANG_SWA_EVICTION_INTERVAL`` 128); ``main_islands``:
``SWAIslandUnifiedRadixCache`` (what the registry builds under ``--enable-swa-islands``: decode
islands every ``cp/4`` computed tokens, their window lock released ``w + p`` later). Cores:
``rust`` (the default the server builds) and ``python`` (``CacheInitParams.tree_core_backend``).

The workload is the one of the 0.5.15 benchmark, driven the way 0.5.23's scheduler drives the
cache, on the real ``UnifiedRadixCache`` / ``SWATokenToKVPoolAllocator`` / ``SWAKVPool`` /
``ReqToTokenPool`` (no model runs; the toy's layers and head dims, or a model's: ``shape["model"]``,
``swa_hold.model_shape``): ``n`` requests admitted together (a
request-pool row each), prefilled one after the other in chunks of ``cp`` (prefill before
decode, as the scheduler's prefill priority does): each chunk's KV allocated
(``alloc`` / ``alloc_extend``), then committed with ``checkpoint_kv_cache`` (a middle chunk at
``stash_chunked_request``, the last chunk after its first token, ``batch_result_processor``);
then all decode together one token per step, or under speculative decoding
(``shape["accept_max"]``) a seeded 1 to ``accept_max`` tokens per request and step: the KV slots
of the accepted tokens (``alloc`` / batched ``alloc_decode``; the rejected drafts' slots, freed
within the step, are not modelled), main's decode SWA evictor (``evict_sliding_windows`` every
``SGLANG_SWA_EVICTION_INTERVAL`` tokens, as ``maybe_evict_swa``), the token appended and, where
the cache has it (islands series, patch 0006), ``on_decode_progress(req, accepted)`` as
``process_batch_result_decode`` calls it; a request that reaches ``max_new_tokens`` is finished
through ``release_kv_cache(checkpoint=True)``. At the end the tree's evictable SWA is evicted
(``evict``): the final reclaim.

Observed (instance wrappers, no behaviour change), SWA in tokens:

- per running request (a request that has KV and is not finished): ``locked`` (the SWA its
  ``req.lock`` holds: the rise of ``swa_protected_size()`` when ``lock`` took it, 0 once
  ``release_swa`` / ``unlock`` gave it back; exact because the requests' prompts share no
  token, so no two locks share a node: checked against ``swa_protected_size()`` at every
  snapshot), ``private`` (live request-owned SWA slots past ``cache_protected_len``),
  ``held = locked + private``; and pool figures per running request (``swa_evictable_size``,
  SWA allocated). Snapshots: ``commit`` after every chunk commit and every decode island,
  ``inflight`` after each chunk's allocation (the chunk in flight), ``decode`` after each decode
  step. Node-level figures (dead SWA) need the Python core's nodes and are not taken.
- per call, ``time.perf_counter`` and ``time.thread_time`` (and, once per run, the median of
  the same timer around an empty call: ``timer_overhead``): chunk commits
  (``checkpoint_kv_cache``), every ``on_decode_progress`` call (those that laid a decode island
  are marked), finishes (``release_kv_cache``), the final reclaim; with ``--count-syncs``, the
  host-sync op counts (``islands_harness.host_syncs``: the torch dispatcher's view; work the
  Rust core does on raw buffers is not visible to it).

Prints one JSON object ``{"arm", "sglang", "runs": {core: run}}`` (or writes it to ``--out``).
"""

from __future__ import annotations

import os

os.environ.setdefault("SGLANG_USE_CPU_ENGINE", "1")

import argparse  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import weakref  # noqa: E402
from array import array  # noqa: E402

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)  # islands_harness.host_syncs (torch only)

ARMS = ("main", "main_islands")
CORES = ("rust", "python")
TOY_MODEL = dict(swa_layers=[0], full_layers=[1], swa_kv_heads=1, swa_head_dim=8,
                 swa_v_head_dim=8, full_kv_heads=1, full_head_dim=8, full_v_head_dim=8,
                 kv_dtype="float32")
"""The pools without ``shape["model"]`` (``swa_hold.model_shape.toy``): one SWA layer, one full
layer, no model runs."""


def _log(msg: str) -> None:
    print(f"[swa_hold_main {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _i64(values):
    import torch

    return torch.tensor(values, dtype=torch.int64)


def cache_class(arm: str):
    """The arm's tree cache class. ``main`` imports it (and every module ``build_cache`` imports)
    before the first run builds its pools: some import on the islands path keeps the frames that
    imported it alive, ``build_cache``'s among them if it imported first, and with them that
    run's pools (at a model's shape, gigabytes held beside the next run's)."""
    import sglang.srt.mem_cache.allocator.swa  # noqa: F401
    import sglang.srt.mem_cache.cache_init_params  # noqa: F401
    import sglang.srt.mem_cache.memory_pool  # noqa: F401
    import sglang.srt.mem_cache.swa_memory_pool  # noqa: F401
    import sglang.srt.mem_cache.unified_cache.components  # noqa: F401
    import sglang.srt.server_args  # noqa: F401

    if arm == "main_islands":
        from sglang.srt.mem_cache.swa_island_radix_cache import SWAIslandUnifiedRadixCache

        return SWAIslandUnifiedRadixCache
    from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache

    return UnifiedRadixCache


def build_cache(arm: str, core: str, shape: dict):
    """The arm's cache on ``core`` over fresh pools sized so nothing is ever evicted."""
    import torch

    from sglang.srt.mem_cache.allocator.swa import SWATokenToKVPoolAllocator
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.memory_pool import ReqToTokenPool
    from sglang.srt.mem_cache.swa_memory_pool import SWAKVPool
    from sglang.srt.mem_cache.unified_cache.components import ComponentType
    from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler

    page = shape["page"]
    set_global_server_args_for_scheduler(ServerArgs(model_path="dummy", page_size=page))
    full, swa = shape["full_pool"], shape["swa_pool"]
    m = shape.get("model") or TOY_MODEL
    dtype = getattr(torch, m["kv_dtype"])
    # the keyword arguments 0.5.23's configurator passes for a model whose sliding and full
    # layers differ in shape (``_build_hybrid_swa_kv_pool``, ``is_hybrid_swa_compress``)
    kv_pool = SWAKVPool(
        size=full, size_swa=swa, page_size=page, dtype=dtype, head_num=m["full_kv_heads"],
        head_dim=m["full_head_dim"], v_head_dim=m["full_v_head_dim"],
        swa_head_num=m["swa_kv_heads"], swa_head_dim=m["swa_head_dim"],
        swa_v_head_dim=m["swa_v_head_dim"],
        swa_attention_layer_ids=list(m["swa_layers"]),
        full_attention_layer_ids=list(m["full_layers"]), device="cpu",
    )
    allocator = SWATokenToKVPoolAllocator(
        size=full, size_swa=swa, page_size=page, dtype=dtype, device="cpu",
        kvcache=kv_pool, need_sort=False,
    )
    ctx = shape["prompt"] + shape["decode_tokens"] + 2 * page + 8
    pool = ReqToTokenPool(size=shape["n_requests"] + 1, max_context_len=ctx, device="cpu",
                          enable_memory_saver=False)
    fields = dict(
        disable=False, req_to_token_pool=pool, token_to_kv_pool_allocator=allocator,
        page_size=page, sliding_window_size=shape["window"] - 1,  # the tree's window_left
        tree_components=(ComponentType.FULL, ComponentType.SWA),
        chunked_prefill_size=shape["chunk"], tree_core_backend=core,
    )
    if arm == "main_islands":
        # lru: the hold on the core asked for (``auto`` takes the window order, on the Python
        # core only, where the pool cannot keep a chunk per request; cache_cost_main measures it)
        fields.update(enable_swa_islands=True, swa_islands_reclaim="lazy",
                      swa_islands_eviction="lru",
                      swa_islands_decode_interval=shape.get("decode_interval"))
    cache = cache_class(arm)(CacheInitParams(**fields))
    assert cache._tree_core_backend == core, (cache._tree_core_backend, core)
    assert cache.swa_retain_window + 1 == shape["window"], (cache.swa_retain_window, shape)
    return cache


def pool_bytes(kv_pool) -> dict:
    """The KV bytes of the pools as built, per pool (``full``, ``swa``): ``bytes_per_token``, one
    token slot of every layer's K and V buffer; ``pool_bytes``, all of it
    (``get_kv_size_bytes``: ``size + page_size`` slots); ``store_dtype``, the buffers' dtype."""
    out = {}
    for name, p in (("full", kv_pool.full_kv_pool), ("swa", kv_pool.swa_kv_pool)):
        bufs = list(p.k_buffer) + list(p.v_buffer)
        k, v = p.get_kv_size_bytes()
        out[name] = dict(bytes_per_token=int(sum(b[0].numel() * b.element_size() for b in bufs)),
                         pool_bytes=int(k + v), slots=int(bufs[0].shape[0]), layers=len(p.k_buffer),
                         kv_heads=int(p.head_num), head_dim=int(p.head_dim),
                         v_head_dim=int(p.v_head_dim), store_dtype=str(p.store_dtype))
    return out


class _LockTracker:
    """SWA held by each TreeLock the cache hands out (instance wrappers on ``lock``,
    ``unlock``, ``release_swa``): the rise of ``swa_protected_size()`` when it was taken."""

    def __init__(self, cache):
        self.cache = cache
        self.size = {}  # id(TreeLock) -> SWA tokens it holds now
        real_lock, real_unlock, real_release = cache.lock, cache.unlock, cache.release_swa

        def lock(node_id, *a, **k):
            before = cache.swa_protected_size()
            lk = real_lock(node_id, *a, **k)
            if lk is not None:
                self.size[id(lk)] = cache.swa_protected_size() - before
            return lk

        def unlock(lk):
            if lk is not None:
                self.size.pop(id(lk), None)
            return real_unlock(lk)

        def release_swa(lk):
            out = real_release(lk)
            if lk is not None and lk.swa_released:
                self.size[id(lk)] = 0
            return out

        cache.lock, cache.unlock, cache.release_swa = lock, unlock, release_swa

    def locked(self, req) -> int:
        lk = req.lock
        return 0 if lk is None else self.size.get(id(lk), 0)


class Run:
    """One run of one arm on one core."""

    def __init__(self, arm, core, shape, *, measure, count_syncs, decode_tokens):
        self.arm, self.core, self.shape = arm, core, shape
        self.measure, self.decode_tokens = measure, decode_tokens
        self.cache = build_cache(arm, core, shape)
        self.page, self.w = shape["page"], shape["window"]
        self.alloc = self.cache.token_to_kv_pool_allocator
        self.pool = self.cache.req_to_token_pool
        self.tracker = _LockTracker(self.cache) if measure else None
        if count_syncs:
            from islands_harness.host_syncs import make_sync_counter

            self.counter_cls = make_sync_counter()
        else:
            self.counter_cls = None
        self.snaps = {"commit": [], "inflight": [], "decode": []}
        self.commits, self.hooks, self.finishes = [], [], []
        self.hook = getattr(self.cache, "on_decode_progress", None)
        from sglang.srt.environ import envs

        self.swa_eviction_interval = max(1, envs.SGLANG_SWA_EVICTION_INTERVAL.get())

    # ---- observation ----------------------------------------------------------------------------

    def timed(self, fn, sink, info):
        counter = self.counter_cls() if self.counter_cls else None
        c0, t0 = time.thread_time(), time.perf_counter()
        if counter:
            with counter.active():
                fn()
        else:
            fn()
        info["seconds"] = time.perf_counter() - t0
        info["thread_cpu_seconds"] = time.thread_time() - c0
        if counter:
            info["ops"] = counter.counts
        sink.append(info)
        return info

    def timer_overhead(self, n: int = 2000) -> dict:
        """Median cost of ``timed`` around an empty call (the clock reads and bookkeeping inside
        the timed window), subtracted per call by the aggregation: a decode-progress call that
        lays no island costs about as much as the timer."""
        sink = []
        for _ in range(n):
            self.timed(lambda: None, sink, {})
        med = lambda k: sorted(x[k] for x in sink)[n // 2]  # noqa: E731
        return dict(seconds=med("seconds"), thread_cpu_seconds=med("thread_cpu_seconds"))

    def private(self, req) -> int:
        lo, hi = req.kv.cache_protected_len, req.kv.kv_allocated_len
        if hi <= lo:
            return 0
        idx = self.pool.req_to_token[req.kv.req_pool_idx, lo:hi].to("cpu").long()
        return int((self.alloc.full_to_swa_index_mapping[idx] > 0).sum())

    def snapshot(self, kind, running, extra=None):
        if not self.measure:
            return
        running = [r for r in running if r.kv.holds_kv and not r.finished()]
        if not running:
            return
        cache, n = self.cache, len(running)
        locked = [self.tracker.locked(r) for r in running]
        private = [self.private(r) for r in running]
        assert sum(locked) == cache.swa_protected_size(), (
            "per-request lock attribution lost track", locked, cache.swa_protected_size())
        row = dict(n=n, rids=[r.rid for r in running],
                   held=[a + b for a, b in zip(locked, private)], locked=locked, private=private,
                   evictable=cache.swa_evictable_size() / n,
                   allocated=(self.alloc.size_swa - self.alloc.swa_available_size()) / n,
                   dead=None)
        if extra:
            row.update(extra)
        self.snaps[kind].append(row)

    # ---- the scheduler's steps ------------------------------------------------------------------

    def make_reqs(self):
        from sglang.srt.managers.schedule_batch import Req
        from sglang.srt.sampling.sampling_params import SamplingParams

        rng = random.Random(self.shape["seed"])
        vocab = 32000
        reqs = []
        for i in range(self.shape["n_requests"]):
            prompt = [rng.randrange(4, vocab) for _ in range(self.shape["prompt"])]
            req = Req(rid=f"r{i}", origin_input_text="", origin_input_ids=array("q", prompt),
                      sampling_params=SamplingParams(temperature=0,
                                                     max_new_tokens=self.decode_tokens))
            req.full_untruncated_fill_ids = array("q", prompt)
            req.last_node = self.cache.root_node_handle()
            req.lock = None
            req.extra_key = None
            req.prefix_len = 0
            reqs.append(req)
        assert len({r.origin_input_ids[0] for r in reqs}) == len(reqs), "prompts share a token"
        assert self.pool.alloc(reqs) is not None  # admitted together: one row each
        return reqs

    def alloc_chunk(self, req, s, e):
        idx = req.kv.req_pool_idx
        if self.page == 1:
            kv = self.alloc.alloc(e - s)
        else:
            last = self.pool.req_to_token[idx, s - 1].long().view(1) if s else _i64([-1])
            kv = self.alloc.alloc_extend(_i64([s]), _i64([s]), _i64([e]), _i64([e]), last, e - s)
        assert kv is not None, "the KV pool is too small for the shape"
        self.pool.write((idx, slice(s, e)), kv)
        req.kv.kv_committed_len = req.kv.kv_allocated_len = e

    def prefill(self, req, running, first_token):
        from sglang.srt.mem_cache.common import checkpoint_kv_cache

        L, cp = len(req.origin_input_ids), self.shape["chunk"]
        for s in range(0, L, cp):
            e = min(L, s + cp)
            self.alloc_chunk(req, s, e)
            self.snapshot("inflight", running)
            label = "chunk_commit" if e < L else "last_chunk_commit"
            if e == L:
                req.output_ids.append(first_token)  # the prefill's sampled token
            req.extend_end = e
            self.timed(lambda: checkpoint_kv_cache(req, self.cache), self.commits,
                       dict(rid=req.rid, L=e, label=label))
            self.snapshot("commit", running, dict(label=label, rid=req.rid, L=e))

    def alloc_decode_step(self, reqs):
        """One KV slot per request at position ``kv_allocated_len`` (the token this step's
        forward writes), as ``alloc_for_decode`` does for the batch."""
        pos = [r.kv.kv_allocated_len for r in reqs]
        if self.page == 1:
            kv = self.alloc.alloc(len(reqs))
        else:
            rows = _i64([r.kv.req_pool_idx for r in reqs])
            last = self.pool.req_to_token[rows, _i64(pos) - 1].long()
            seq = _i64([p + 1 for p in pos])
            kv = self.alloc.alloc_decode(seq, seq, last)
        assert kv is not None, "the KV pool is too small for the shape"
        for r, p, slot in zip(reqs, pos, kv):
            self.pool.write((r.kv.req_pool_idx, slice(p, p + 1)), slot.view(1))
            r.kv.kv_committed_len = r.kv.kv_allocated_len = p + 1

    def accepted(self, running) -> dict:
        """Tokens each request commits this step: 1, or under speculative decoding
        (``shape["accept_max"]``) a seeded draw from ``1..accept_max`` (uniform: mean
        ``(1 + accept_max) / 2``, 8.5 at 16), at most what is left to generate."""
        top = self.shape.get("accept_max") or 1
        return {r.rid: min(self.accept_rng.randint(1, top),
                           self.decode_tokens - len(r.output_ids)) for r in running}

    def decode(self, reqs, token):
        from sglang.srt.managers.schedule_batch import FINISH_LENGTH
        from sglang.srt.mem_cache.common import release_kv_cache
        from sglang.srt.mem_cache.unified_cache.components import ComponentType

        window_left = self.cache.swa_retain_window
        running = list(reqs)
        step = 0
        last_log = time.perf_counter()
        self.accept_rng = random.Random(self.shape.get("seed", 0))
        while running:
            step += 1
            k = self.accepted(running)
            for i in range(max(k.values())):  # the accepted tokens' slots (drafts rejected:
                self.alloc_decode_step([r for r in running if k[r.rid] > i])  # freed, unmodelled)
            for r in running:  # maybe_evict_swa (the step's batch, before the forward)
                end = len(r.origin_input_ids) + len(r.output_ids)
                if end - 1 - window_left >= (r.kv.get_evicted_seqlen(ComponentType.SWA)
                                             + self.swa_eviction_interval):
                    self.cache.evict_sliding_windows(r, end - 1)
            done = []
            for r in running:  # process_batch_result_decode
                for _ in range(k[r.rid]):
                    r.output_ids.append(token(r, len(r.output_ids)))
                if len(r.output_ids) >= self.decode_tokens:
                    r.finished_reason = FINISH_LENGTH(length=len(r.output_ids))
                    self.timed(lambda r=r: release_kv_cache(r, self.cache, checkpoint=True),
                               self.finishes, dict(rid=r.rid, L=r.kv.kv_committed_len))
                    done.append(r)
                elif self.hook is not None:
                    before = r.kv.cache_protected_len
                    info = self.timed(lambda r=r: self.hook(r, k[r.rid]), self.hooks,
                                      dict(rid=r.rid, L=len(r.origin_input_ids)
                                           + len(r.output_ids) - 1))
                    info["accepted"] = k[r.rid]
                    if r.kv.cache_protected_len != before:
                        info["island"] = True
                        self.snapshot("commit", running, dict(label="decode_island", rid=r.rid,
                                                              L=info["L"]))
            running = [r for r in running if r not in done]
            self.snapshot("decode", running)
            now = time.perf_counter()
            if now - last_log > 20:
                last_log = now
                _log(f"  {self.arm}/{self.core}: decode step {step}/{self.decode_tokens - 1}")

    def final_reclaim(self):
        from sglang.srt.mem_cache.base_prefix_cache import EvictParams

        left = self.cache.swa_evictable_size()
        free_before = self.alloc.swa_available_size()
        c0, t0 = time.thread_time(), time.perf_counter()
        self.cache.evict(EvictParams(num_tokens=0, swa_num_tokens=left))
        return dict(seconds=time.perf_counter() - t0, thread_cpu_seconds=time.thread_time() - c0,
                    reclaimed=self.alloc.swa_available_size() - free_before)

    def run(self) -> dict:
        def token(req, i):  # a fixed stream per request: no cross-request sharing
            return 100 + (int(req.rid[1:]) * 7919 + i * 104729) % 30000

        counter_cls, self.counter_cls = self.counter_cls, None
        overhead = self.timer_overhead()
        self.counter_cls = counter_cls
        gc.collect()
        t0 = time.perf_counter()
        reqs = self.make_reqs()
        started = []
        for r in reqs:
            started.append(r)
            self.prefill(r, started, first_token=token(r, 0))
        self.decode(reqs, token)
        wall = time.perf_counter() - t0
        assert all(not r.kv.holds_kv for r in reqs)
        reclaim = self.final_reclaim()
        return dict(arm=self.arm, core=self.core, snapshots=self.snaps, commits=self.commits,
                    hooks=self.hooks, finishes=self.finishes, reclaim=reclaim,
                    timer_overhead=overhead,
                    decode_islands=sum(1 for h in self.hooks if h.get("island")),
                    decode_islands_min_per_request=min(
                        (sum(1 for h in self.hooks if h.get("island") and h["rid"] == r.rid)
                         for r in reqs), default=0),
                    accept_mean=(sum(h["accepted"] for h in self.hooks) / len(self.hooks)
                                 if self.hooks else None),
                    wall_seconds=wall,
                    swa_protected_after=self.cache.swa_protected_size(),
                    full_protected_after=self.cache.full_protected_size(),
                    pools=pool_bytes(self.alloc.get_kvcache()))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arm", choices=ARMS, required=True)
    ap.add_argument("--cores", default="rust,python")
    ap.add_argument("--shape", required=True, help="the shape as JSON (swa_hold's Shape fields, "
                    "pools resolved)")
    ap.add_argument("--runs", type=int, default=1, help="timing runs per core (cores "
                    "alternate), after the measurement run of --measure")
    ap.add_argument("--measure", action="store_true", help="first one measurement run per "
                    "core: hold snapshots (and sync counts with --count-syncs); its timings "
                    "are not used")
    ap.add_argument("--count-syncs", action="store_true")
    ap.add_argument("--decode-tokens", type=int, default=None)
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    import sglang

    shape = json.loads(a.shape)
    cores = [c for c in a.cores.split(",") if c]
    decode_tokens = a.decode_tokens or shape["decode_tokens"]
    if a.arm == "main_islands":
        from sglang.srt.mem_cache.swa_island_formulas import decode_island_interval

        shape["decode_interval"] = decode_island_interval(shape["chunk"],
                                                          shape.get("decode_interval"))
    out = {"arm": a.arm, "sglang": sglang.__version__, "torch": torch.__version__,
           "python": sys.executable, "shape": shape, "measured": {}, "runs": {c: [] for c in cores}}
    plan = [(k, True) for k in range(1 if a.measure else 0)] + [(k, False) for k in range(a.runs)]
    cache_class(a.arm)  # every import before the first pools (see cache_class)
    for k, measure in plan:
        order = cores if k % 2 == 0 else cores[::-1]
        for core in order:
            _log(f"{a.arm}/{core}: " + ("measurement run" if measure else
                                        f"timing run {k + 1}/{a.runs}"))
            gc.collect()  # the last run's pools (its tree holds cycles) before the next ones
            run = Run(a.arm, core, shape, measure=measure, count_syncs=a.count_syncs and measure,
                      decode_tokens=shape["decode_tokens"] if measure else decode_tokens)
            pools = weakref.ref(run.alloc.get_kvcache())
            r = run.run()
            del run
            gc.collect()
            assert pools() is None, "a run's pools outlived it"
            _log(f"  {a.arm}/{core}: {len(r['commits'])} chunk commits, {r['decode_islands']} "
                 f"decode islands, {r['wall_seconds']:.1f} s")
            if measure:
                out["measured"][core] = r
            else:
                out["runs"][core].append(r)
    text = json.dumps(out)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
