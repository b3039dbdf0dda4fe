#!/usr/bin/env python
"""Cache cost on sglang 0.5.23 (upstream main): per-operation time of the tree cache, islands
against stock main on the same tree core, as the tree grows.

Runs in ``.venv-main-islands`` (``scripts/setup_main.sh --islands``): it holds stock
``UnifiedRadixCache`` (the ``main`` arms; the islands series only names a decision there, which
its unit tests show answers as stock) and ``SWAIslandUnifiedRadixCache``. Arms:

- ``main_rust`` / ``main_python``: ``UnifiedRadixCache`` on the Rust / Python tree core;
- ``islands_rust``: ``SWAIslandUnifiedRadixCache`` (``--enable-swa-islands``, defaults: reclaim
  ``auto``, eviction ``lru``) on the Rust core;
- ``islands_window``: the same with ``--swa-islands-eviction window`` (``SWAIslandComponent``),
  which runs on the Python core.

Workload (deterministic, ``--seed``; window 32, page 1, chunk ``cp`` 128 (``--chunk``), ample
pools): clients in groups of 8 share a 128-token system prompt; each sends one prompt (system +
``cp`` to ``3 cp`` tokens of its own) committed chunk by chunk through ``checkpoint_kv_cache``,
decodes 48 tokens one step at a time (``on_decode_progress`` after each, main's decode SWA
evictor every 34 tokens) and finishes through ``release_kv_cache``; one client after the other. Then, on the built tree (every call
the real method, ``time.perf_counter``, garbage collector off, median microseconds):

- ``match_continue`` / ``match_diverge``: ``match_prefix`` of a cached transcript + one new token,
  and of a cached prompt cut at a random point + one new token;
- ``commit_chunk``, ``decode_hook``, ``finish``: 32 probe requests that continue a cached
  transcript with 128 new tokens: the commit, 8 decode steps' ``on_decode_progress``, the finish;
- ``queue``: ``on_request_queued`` of 64 waiting requests that continue a cached transcript (the
  scheduler's hook: stock main does nothing there, the window order matches once);
  ``commit_chunk_q64``, ``finish_q64``: 32 more probes while those 64 wait (the window order
  re-matches the waiting requests that continue along a committed path); then they leave;
- ``request``: one request's whole cache work, 32 probes: it joins the queue
  (``on_request_queued``), admission matches it, its chunks commit, it decodes ``DECODE`` tokens
  (hook and main's decode SWA evictor) and finishes; the sum of those calls' times. The
  per-request price of the island hooks that have no stock counterpart (``queue``,
  ``decode_hook``) shows here against the cache work stock main does for the same request;
- ``evict_64_first``: the first 16 ``evict(swa_num_tokens=64)`` calls; ``evict_64_q64``: the next
  16 while 64 requests that continue cached transcripts wait (queued, then they leave; the window
  order keeps their hits' windows last and checks what its walk passes); ``evict_64_late``: 16 calls
  once half of the tree's live SWA is gone; ``evict_64_drain``: 16 calls once 90% is gone (the
  window arm has no cold SWA left there: it takes windows). A call that takes a leaf's SWA
  deletes the leaf with its Full KV, so the eviction rows count the tokens freed in both pools,
  and the upstream steps a call took (``_apply_eviction_result``: each step of main's walk drains
  its own frees before the next one decides), so a call's time splits into steps per call and
  time per step.

``--repeats R`` measures every (size, arm) R times, the arms in a rotated order each round, and
reports the median of the R medians (each run's own medians stay in the JSON): one run's
microsecond medians on a shared 2-core machine move by up to 1.8x between neighbouring cells.

``--chunk`` sets ``cp``, and with it a running request's decode-island cadence (``cp / 4`` decode
tokens) and the prompts and probes, which scale with ``cp``. At the default 128 the cadence is one
window (32), so nearly every window a finished transcript keeps spans two nodes (its last decode
island and the leaf after it), which an eviction takes in two upstream steps or more; 256 gives a
cadence of two windows, and the seed's deployment (``cp`` 16384, ``w`` 1024) four.
``--decode-interval`` sets the cadence alone, as the server's ``--swa-islands-decode-interval``
does (the island arms only: stock main has no decode islands).

Usage::

    .venv-main-islands/bin/python benchmarks/cache_cost_main.py --out benchmarks/results/cache_cost_main
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import time
from array import array
from pathlib import Path
from typing import Optional

import _bench_path  # noqa: F401

ARMS = {  # name: (island cache, eviction order, tree core)
    "main_rust": (False, None, "rust"),
    "main_python": (False, None, "python"),
    "islands_rust": (True, "lru", "rust"),
    "islands_window": (True, "window", "python"),
}
PAIRS = (("islands_rust", "main_rust"), ("islands_window", "main_python"))
"""Each island arm against stock main on the same tree core."""
WINDOW, PAGE, CHUNK, DECODE, GROUP, SYSTEM = 32, 1, 128, 48, 8, 128
OPS = ("match_continue", "match_diverge", "commit_chunk", "decode_hook", "finish", "queue",
       "commit_chunk_q64", "finish_q64", "request", "evict_64_first", "evict_64_q64",
       "evict_64_late", "evict_64_drain")
PROBES = 32
QUEUED = 64
EVICT_CALLS = 16
EVICT_OPS = ("evict_64_first", "evict_64_q64", "evict_64_late", "evict_64_drain")
"""The eviction calls, whose rows also carry the Full tokens they freed (``full_work_tokens``: a
leaf that loses its SWA is deleted with its Full KV) and the time per token freed in both pools
(``us_per_kv_token``), and the upstream steps they took (``evict_steps``: calls of main's
``_apply_eviction_result``, which drains one step's frees) and the time per step (``us_per_step``)."""
WORK_OPS = ("match_continue", "match_diverge") + EVICT_OPS
"""The operations whose work varies with the tree: the tokens a match returns, the SWA tokens an
eviction call frees (a 64-token request frees whole nodes, so at least 64). Their rows also carry
the tokens over all timed calls (``work_tokens``) and the time per token (``us_per_token``: the
calls' summed microseconds over their summed tokens)."""


def log(msg: str) -> None:
    print(f"[cache_cost_main {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def build_cache(arm: str, kv: int, max_reqs: int, ctx: int, chunk: int = CHUNK,
                decode_interval: Optional[int] = None):
    import torch

    from sglang.srt.mem_cache.allocator.swa import SWATokenToKVPoolAllocator
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.memory_pool import ReqToTokenPool
    from sglang.srt.mem_cache.swa_memory_pool import SWAKVPool
    from sglang.srt.mem_cache.unified_cache.components import ComponentType
    from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler

    islands, order, core = ARMS[arm]
    set_global_server_args_for_scheduler(ServerArgs(model_path="dummy", page_size=PAGE))
    kv_pool = SWAKVPool(size=kv, size_swa=kv, page_size=PAGE, dtype=torch.float32, head_num=1,
                        head_dim=8, swa_attention_layer_ids=[0, 1, 2],
                        full_attention_layer_ids=[3], device="cpu")
    allocator = SWATokenToKVPoolAllocator(size=kv, size_swa=kv, page_size=PAGE,
                                          dtype=torch.float32, device="cpu", kvcache=kv_pool,
                                          need_sort=False)
    pool = ReqToTokenPool(size=max_reqs, max_context_len=ctx, device="cpu",
                          enable_memory_saver=False)
    fields = dict(disable=False, req_to_token_pool=pool, token_to_kv_pool_allocator=allocator,
                  page_size=PAGE, sliding_window_size=WINDOW - 1,
                  tree_components=(ComponentType.FULL, ComponentType.SWA),
                  chunked_prefill_size=chunk, tree_core_backend=core)
    if islands:
        from sglang.srt.mem_cache.swa_island_radix_cache import SWAIslandUnifiedRadixCache

        cache = SWAIslandUnifiedRadixCache(CacheInitParams(
            **fields, enable_swa_islands=True, swa_islands_eviction=order,
            swa_islands_decode_interval=decode_interval))
    else:
        from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache

        cache = UnifiedRadixCache(CacheInitParams(**fields))
    assert cache._tree_core_backend == core, (arm, cache._tree_core_backend)
    return cache


class Driver:
    """Requests driven the way 0.5.23's scheduler drives the cache (no model runs)."""

    def __init__(self, cache, chunk: int = CHUNK):
        self.cache = cache
        self.chunk = chunk  # the cache's chunked prefill size: a prompt commits every chunk
        self.rid = 0

    def new_req(self, prompt, req=None):
        """``req`` (a waiting request, ``waiting_req``) or a new one, admitted: a pool row and KV
        for the whole prompt."""
        if req is None:
            req = self.waiting_req(prompt, prefix="r")
        pool = self.cache.req_to_token_pool
        pool.alloc([req])
        req.full_untruncated_fill_ids = array("q", prompt)
        kv = self.cache.token_to_kv_pool_allocator.alloc(len(prompt))
        assert kv is not None, "the benchmark's KV pool is too small"
        pool.write((req.kv.req_pool_idx, slice(0, len(prompt))), kv)
        req.kv.kv_committed_len = req.kv.kv_allocated_len = len(prompt)
        req.last_node = self.cache.root_node_handle()
        req.lock = None
        req.extra_key = None
        req.prefix_len = 0
        return req

    def commit(self, req, end):
        from sglang.srt.mem_cache.common import checkpoint_kv_cache

        req.extend_end = end
        checkpoint_kv_cache(req, self.cache)

    def decode(self, req, token, hook_times=None, evict_times=None):
        from sglang.srt.mem_cache.unified_cache.components import ComponentType

        cache, pool = self.cache, self.cache.req_to_token_pool
        pos = len(req.origin_input_ids) + len(req.output_ids) - 1
        kv = cache.token_to_kv_pool_allocator.alloc(1)
        assert kv is not None, "the benchmark's KV pool is too small"
        pool.write((req.kv.req_pool_idx, slice(pos, pos + 1)), kv)
        req.kv.kv_committed_len = req.kv.kv_allocated_len = pos + 1
        interval = int(os.environ["SGLANG_SWA_EVICTION_INTERVAL"])
        if pos - cache.swa_retain_window >= req.kv.get_evicted_seqlen(ComponentType.SWA) + interval:
            t0 = time.perf_counter()
            cache.evict_sliding_windows(req, pos)
            if evict_times is not None:
                evict_times.append((time.perf_counter() - t0) * 1e6)
        req.output_ids.append(token)
        t0 = time.perf_counter()
        cache.on_decode_progress(req, 1)
        if hook_times is not None:
            hook_times.append((time.perf_counter() - t0) * 1e6)

    def waiting_req(self, prompt, prefix="w"):
        """A request as it joins the waiting queue: tokens only, no KV row."""
        from sglang.srt.managers.schedule_batch import Req
        from sglang.srt.sampling.sampling_params import SamplingParams

        self.rid += 1
        return Req(rid=f"{prefix}{self.rid}", origin_input_text="",
                   origin_input_ids=array("q", prompt),
                   sampling_params=SamplingParams(temperature=0, max_new_tokens=DECODE))

    def serve(self, prompt, rng) -> float:
        """One request as the scheduler drives it: queued, matched at admission, prefilled in
        chunks, ``DECODE`` tokens decoded, finished. Returns the microseconds spent in the tree
        cache's calls (the hooks, match, commits, decode SWA evictor, finish), not the driver's
        own allocation and bookkeeping."""
        from sglang.srt.mem_cache.base_prefix_cache import MatchPrefixParams
        from sglang.srt.mem_cache.radix_cache import RadixKey

        req = self.waiting_req(prompt)
        t0 = time.perf_counter()
        self.cache.on_request_queued(req)
        self.cache.match_prefix(MatchPrefixParams(key=RadixKey(array("q", prompt))))
        spent = (time.perf_counter() - t0) * 1e6
        times = {"commit_chunk": [], "decode_hook": [], "decode_evict": [], "finish": []}
        self.run(prompt, rng, times, req=req, steps=DECODE - 1)
        return spent + sum(sum(v) for v in times.values())

    def run(self, prompt, rng, times=None, suffix="", req=None, steps=None):
        """Prefill in chunks, decode ``steps`` tokens (default ``DECODE - 1``, 8 when timed),
        finish; the transcript (``times``: the commits, decode hooks (and, under
        ``decode_evict``, the decode SWA evictor) and finish, under their op names + ``suffix``;
        ``req``: a waiting request to admit)."""
        from sglang.srt.managers.schedule_batch import FINISH_LENGTH
        from sglang.srt.mem_cache.common import release_kv_cache

        req = self.new_req(prompt, req)
        for end in range(self.chunk, len(prompt) + self.chunk, self.chunk):
            t0 = time.perf_counter()
            self.commit(req, min(end, len(prompt)))
            if times is not None:
                times["commit_chunk" + suffix].append((time.perf_counter() - t0) * 1e6)
        req.output_ids.append(rng.randrange(50_000, 60_000))
        if steps is None:
            steps = DECODE - 1 if times is None else 8
        for _ in range(steps):
            self.decode(req, rng.randrange(50_000, 60_000),
                        None if times is None else times.get("decode_hook" + suffix),
                        None if times is None else times.get("decode_evict" + suffix))
        req.finished_reason = FINISH_LENGTH(length=len(req.output_ids))
        t0 = time.perf_counter()
        release_kv_cache(req, self.cache, checkpoint=True)
        if times is not None:
            times["finish" + suffix].append((time.perf_counter() - t0) * 1e6)
        return list(prompt) + list(req.output_ids[:-1])


def measure(arm: str, clients: int, seed: int, samples: int, chunk: int = CHUNK,
            decode_interval: Optional[int] = None) -> dict:
    from sglang.srt.mem_cache.base_prefix_cache import EvictParams, MatchPrefixParams
    from sglang.srt.mem_cache.radix_cache import RadixKey

    rng = random.Random(seed)
    prompts = []
    for c in range(clients):
        system = [1_000 + (c // GROUP) * SYSTEM + i for i in range(SYSTEM)]
        own = [rng.randrange(100_000, 900_000) for _ in range(rng.randint(chunk, 3 * chunk))]
        prompts.append(system + own)
    ctx = SYSTEM + 3 * chunk + chunk + DECODE + 8
    kv = sum(len(p) + DECODE for p in prompts) + 64 * ctx
    cache = build_cache(arm, kv, max_reqs=4, ctx=ctx + chunk, chunk=chunk,
                        decode_interval=decode_interval)
    drv = Driver(cache, chunk)
    t0 = time.perf_counter()
    transcripts = [drv.run(p, rng) for p in prompts]
    build_s = time.perf_counter() - t0
    times = {op: [] for op in OPS}
    work = {op: [] for op in WORK_OPS}  # tokens each timed call matched or freed
    swa_free = cache.token_to_kv_pool_allocator.swa_available_size
    full_free = cache.token_to_kv_pool_allocator.full_available_size
    full_work = {op: [] for op in EVICT_OPS}  # Full tokens each timed eviction call freed
    steps = {op: [] for op in EVICT_OPS}  # upstream steps each timed eviction call took
    gc.disable()
    try:
        for _ in range(samples):
            t = transcripts[rng.randrange(clients)]
            key = RadixKey(array("q", t + [7]))
            t0 = time.perf_counter()
            hit = cache.match_prefix(MatchPrefixParams(key=key))
            times["match_continue"].append((time.perf_counter() - t0) * 1e6)
            work["match_continue"].append(hit.device_prefix_len)
            p = prompts[rng.randrange(clients)]
            key = RadixKey(array("q", p[: rng.randrange(SYSTEM, len(p))] + [7]))
            t0 = time.perf_counter()
            hit = cache.match_prefix(MatchPrefixParams(key=key))
            times["match_diverge"].append((time.perf_counter() - t0) * 1e6)
            work["match_diverge"].append(hit.device_prefix_len)
        for _ in range(32):
            t = transcripts[rng.randrange(clients)]
            drv.run(t + [rng.randrange(100_000, 900_000) for _ in range(chunk)], rng, times)
        waiting = []
        for _ in range(QUEUED):
            t = transcripts[rng.randrange(clients)]
            req = drv.waiting_req(t + [rng.randrange(100_000, 900_000) for _ in range(chunk)])
            t0 = time.perf_counter()
            cache.on_request_queued(req)
            times["queue"].append((time.perf_counter() - t0) * 1e6)
            waiting.append(req)
        for _ in range(32):
            t = transcripts[rng.randrange(clients)]
            drv.run(t + [rng.randrange(100_000, 900_000) for _ in range(chunk)], rng, times,
                    suffix="_q64")
        del req  # the loop's last waiting request: it leaves with the others
        waiting.clear()  # admitted elsewhere: the queue lets go of them (weak references)
        gc.collect()
        component = getattr(cache, "_swa_island_component", None)  # the window order's
        for _ in range(PROBES):
            t = transcripts[rng.randrange(clients)]
            prompt = t + [rng.randrange(100_000, 900_000) for _ in range(chunk)]
            times["request"].append(drv.serve(prompt, rng))
        live = cache.swa_evictable_size()
        if component is not None:
            component.queued.hits.reap()
        queued_at_evict = 0 if component is None else len(component.queued.hits)
        queued_at_q64 = 0
        step_count = count_eviction_steps(cache)
        for op, left in (("evict_64_first", live), ("evict_64_q64", None),
                         ("evict_64_late", live // 2), ("evict_64_drain", live // 10)):
            if left is None:  # no drain: 64 requests join the queue instead
                for _ in range(QUEUED):
                    t = transcripts[rng.randrange(clients)]
                    waiting.append(drv.waiting_req(
                        t + [rng.randrange(100_000, 900_000) for _ in range(chunk)]))
                    cache.on_request_queued(waiting[-1])
                queued_at_q64 = 0 if component is None else len(component.queued.hits)
            while left is not None and cache.swa_evictable_size() > left:  # drain, untimed
                cache.evict(EvictParams(num_tokens=0, swa_num_tokens=64))
            for _ in range(EVICT_CALLS):
                free, full, taken = swa_free(), full_free(), step_count[0]
                t0 = time.perf_counter()
                cache.evict(EvictParams(num_tokens=0, swa_num_tokens=64))
                times[op].append((time.perf_counter() - t0) * 1e6)
                work[op].append(swa_free() - free)
                full_work[op].append(full_free() - full)
                steps[op].append(step_count[0] - taken)
            waiting.clear()  # the q64 phase's requests leave (weak references in the queue)
    finally:
        gc.enable()
    return {"arm": arm, "clients": clients, "chunk": chunk,
            # the island cache's decode-island cadence (decode tokens; None: stock main has none)
            "decode_interval": getattr(cache, "decode_island_interval", None),
            "build_s": round(build_s, 2),
            "tokens_cached": sum(len(t) for t in transcripts), "live_swa_before_evict": live,
            "queued_at_evict": queued_at_evict, "queued_at_q64": queued_at_q64,
            "median_us": {op: round(statistics.median(v), 2) for op, v in times.items() if v},
            "p90_us": {op: round(sorted(v)[int(0.9 * (len(v) - 1))], 2)
                       for op, v in times.items() if v},
            "n": {op: len(v) for op, v in times.items()},
            "work_tokens": {op: sum(v) for op, v in work.items()},
            "us_per_token": {op: round(sum(times[op]) / sum(v), 4)
                             for op, v in work.items() if sum(v)},
            "full_work_tokens": {op: sum(v) for op, v in full_work.items()},
            "us_per_kv_token": {op: round(sum(times[op]) / (sum(work[op]) + sum(v)), 4)
                                for op, v in full_work.items() if sum(work[op]) + sum(v)},
            "evict_steps": {op: sum(v) for op, v in steps.items()},
            "us_per_step": {op: round(sum(times[op]) / sum(v), 4)
                            for op, v in steps.items() if sum(v)}}


def count_eviction_steps(cache) -> list:
    """Count the upstream eviction steps of ``cache`` from now on: a one-element list whose
    element grows by one per call of main's ``_apply_eviction_result`` (it drains one step's
    frees, a tombstone's or a deleted leaf's, on either tree core). The counter wraps the
    instance's method, so every arm pays the same few hundred nanoseconds per step."""
    count, apply = [0], cache._apply_eviction_result

    def counted(result):
        count[0] += 1
        return apply(result)

    cache._apply_eviction_result = counted
    return count


def by_cell(rows: list) -> dict:
    """(arm, clients) -> that cell's runs, in round order (one run without ``--repeats``)."""
    cells: dict = {}
    for r in rows:
        cells.setdefault((r["arm"], r["clients"]), []).append(r)
    return cells


def cell_median(runs: list, op: str, field: str = "median_us"):
    """The median over a cell's runs of their per-run ``field`` of ``op`` (default: the medians;
    None if never timed)."""
    vals = [r[field][op] for r in runs if op in r.get(field, {})]
    return statistics.median(vals) if vals else None


def ratio_cell(xs: list, ys: list, op: str, field: str = "median_us") -> str:
    """``x / y`` of the cells' medians of ``field``; with repeats, the range of the round-by-round
    ratios."""
    x, y = cell_median(xs, op, field), cell_median(ys, op, field)
    if not x or not y:
        return "–"
    if len(xs) == 1:
        return f"{x / y:.2f}"
    per = sorted(a[field][op] / b[field][op] for a, b in zip(xs, ys))
    return f"{x / y:.2f} ({per[0]:.2f}–{per[-1]:.2f})"


def _per_call(runs: list, op: str, field: str) -> float:
    """The median over a cell's runs of ``field`` (tokens over all timed calls) per call."""
    return statistics.median(r[field][op] / r["n"][op] for r in runs)


def _token_table(cells: dict, sizes: list, arms: list, ratios: list, *, needs: str, intro: str,
                 column: str, per: str, ops: tuple, cell, field: str) -> list:
    """A table per unit of work (runs that recorded ``needs``): ``cell(runs, op)`` per arm under
    ``column``, and each island arm's ``field`` (time per token or per step) over stock main's."""
    if not all(needs in r for runs in cells.values() for r in runs):
        return []
    L = [intro, "",
         "| op | clients | " + " | ".join(f"`{a}` {column}" for a in arms) + " | "
         + " | ".join(f"{x} / {y} {per}" for x, y in ratios) + " |",
         "|---|---|" + "---|" * (len(arms) + len(ratios))]
    for op in ops:
        for n in sizes:
            cols = [cell(cells[(a, n)], op) for a in arms]
            rs = [ratio_cell(cells[(x, n)], cells[(y, n)], op, field) for x, y in ratios]
            L.append(f"| {op} | {n} | " + " | ".join(cols) + " | " + " | ".join(rs) + " |")
    return L + [""]


def work_table(cells: dict, sizes: list, arms: list, ratios: list) -> list:
    """The per-token table (runs that recorded ``work_tokens``): the tokens per call each arm's
    calls matched or freed, and each island arm's time per token over stock main's."""
    return _token_table(
        cells, sizes, arms, ratios, needs="work_tokens", ops=WORK_OPS, field="us_per_token",
        intro="Per token of work (the operations whose work depends on the tree): a match returns "
              "a longer prefix where islands keep the SWA behind it live, and a 64-token eviction "
              "frees whole nodes, so the calls of two arms do different amounts of work. Tokens "
              "per call: the mean over the timed calls (median over the runs); ratios: time per "
              "token (the calls' summed microseconds over their summed tokens), island arm over "
              "stock main on the same core.",
        column="tokens per call", per="per token",
        cell=lambda runs, op: f"{_per_call(runs, op, 'work_tokens'):,.1f}")


def kv_table(cells: dict, sizes: list, arms: list, ratios: list) -> list:
    """The evictions per token freed in both pools (runs that recorded ``full_work_tokens``): the
    SWA and Full tokens per call each arm freed, and each island arm's time per token freed over
    stock main's."""
    return _token_table(
        cells, sizes, arms, ratios, needs="full_work_tokens", ops=EVICT_OPS,
        field="us_per_kv_token",
        intro="Evictions per token freed in both pools: an `evict(swa_num_tokens=64)` call that "
              "takes a leaf's SWA deletes the leaf, so it frees the leaf's Full KV as well "
              "(upstream's `_delete_unbacked_device_leaf`). Tokens per call: SWA + Full freed, the "
              "mean over the timed calls (median over the runs); ratios: time per token freed in "
              "either pool, island arm over stock main on the same core.",
        column="SWA + Full per call", per="per token freed",
        cell=lambda runs, op: (f"{_per_call(runs, op, 'work_tokens'):,.1f} + "
                               f"{_per_call(runs, op, 'full_work_tokens'):,.1f}"))


def step_table(cells: dict, sizes: list, arms: list, ratios: list) -> list:
    """The evictions per upstream step (runs that recorded ``evict_steps``): the steps per call
    and SWA tokens per step each arm took, and each island arm's time per step over stock
    main's: how much of a call's time is more steps (smaller victims) and how much each step
    costs."""
    return _token_table(
        cells, sizes, arms, ratios, needs="evict_steps", ops=EVICT_OPS, field="us_per_step",
        intro="Evictions per upstream step: main's walk takes one node per step and drains that "
              "step's frees before the next step decides (`_apply_eviction_result`), so a call "
              "costs its steps times what a step costs. Steps per call: the mean over the timed "
              "calls (median over the runs), with the SWA tokens freed per step; ratios: time per "
              "step (the calls' summed microseconds over their summed steps), island arm over "
              "stock main on the same core.",
        column="steps per call (SWA per step)", per="per step",
        cell=lambda runs, op: (f"{_per_call(runs, op, 'evict_steps'):,.2f} "
                               f"({_per_step(runs, op):,.1f})"))


def _per_step(runs: list, op: str) -> float:
    """The median over a cell's runs of the SWA tokens freed per upstream step."""
    vals = [r["work_tokens"][op] / r["evict_steps"][op] for r in runs if r["evict_steps"][op]]
    return statistics.median(vals) if vals else 0.0


def report(result: dict) -> str:
    rows = result["rows"]
    sizes = sorted({r["clients"] for r in rows})
    (chunk,) = {r.get("chunk", CHUNK) for r in rows}  # one run, one chunk size
    cadence = {r["decode_interval"] for r in rows if r.get("decode_interval")}  # island arms
    arms = [a for a in ARMS if any(r["arm"] == a for r in rows)]
    cells = by_cell(rows)
    by = {k: v[0] for k, v in cells.items()}
    repeats = max(len(v) for v in cells.values())
    L = ["# Cache cost on sglang 0.5.23: islands against stock main on the same tree core", "",
         f"Generated by `benchmarks/cache_cost_main.py` on {result['date']} (HEAD "
         f"{result['git_head']}); {result['runtime_s']:.0f} s on {result['machine']}.", "",
         "Command:", "", "```", result["command"], "```", "",
         "Median microseconds per call (p90 and sample counts in the JSON); window 32, page 1, "
         f"chunk {chunk}"
         + "".join(f", decode islands every {n} decode tokens" for n in sorted(cadence))
         + ", ample pools; see the module docstring for the workload. Ratios: each island "
         "arm over stock main on the same core (`islands_rust / main_rust`, "
         "`islands_window / main_python`); `main_python / main_rust` is the price of the Python "
         "core itself." + (f" Each cell is the median of {repeats} runs' medians, the arms "
                            "measured in a rotated order each round; a ratio's brackets give the "
                            "lowest and highest of its round-by-round ratios." if repeats > 1
                            else ""), ""]
    L.append("| clients | tokens cached | " + " | ".join(f"`{a}` live SWA before the evictions" for a in arms) + " |")
    L.append("|---|---|" + "---|" * len(arms))
    for n in sizes:
        L.append(f"| {n} | {by[(arms[0], n)]['tokens_cached']:,} | "
                 + " | ".join(f"{by[(a, n)]['live_swa_before_evict']:,}" for a in arms) + " |")
    L.append("")
    head = " | ".join(f"`{a}`" for a in arms)
    ratios = [(x, y) for x, y in PAIRS if x in arms and y in arms]
    extra = [("main_python", "main_rust")] if {"main_python", "main_rust"} <= set(arms) else []
    L.append(f"| op | clients | {head} | " + " | ".join(f"{x} / {y}" for x, y in ratios + extra)
             + " |")
    L.append("|---|---|" + "---|" * (len(arms) + len(ratios) + len(extra)))
    for op in OPS:
        for n in sizes:
            med = {a: cell_median(cells[(a, n)], op) for a in arms}
            if all(v is None for v in med.values()):
                continue  # an op the run did not time (results from before it existed)
            txt = [f"{med[a]:,.1f}" if med[a] is not None else "–" for a in arms]
            rs = [ratio_cell(cells[(x, n)], cells[(y, n)], op) for x, y in ratios + extra]
            L.append(f"| {op} | {n} | " + " | ".join(txt + rs) + " |")
    L.append("")
    L += work_table(cells, sizes, arms, ratios)
    L += kv_table(cells, sizes, arms, ratios)
    L += step_table(cells, sizes, arms, ratios)
    return "\n".join(L) + "\n"


def main(argv=None) -> int:
    # Before sglang is first imported (every sglang import here is inside a function); set in the
    # command only, never at import: a test process importing this module keeps its own interval.
    os.environ.setdefault("SGLANG_USE_CPU_ENGINE", "1")
    os.environ.setdefault("SGLANG_SWA_EVICTION_INTERVAL", "34")
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", default="64,256,1024",
                    help="tree sizes: clients (one finished transcript each), comma-separated")
    ap.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated, of {', '.join(ARMS)}")
    ap.add_argument("--samples", type=int, default=200, help="match samples per size and arm")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=1,
                    help="runs per size and arm, the arms rotated each round; the table gives the "
                         "median of the runs' medians and the range of round-by-round ratios")
    ap.add_argument("--chunk", type=int, default=CHUNK,
                    help="the chunked prefill size cp (tokens, at least 8): prompts commit "
                         "every cp tokens and decode islands come every cp/4 decode tokens; the "
                         "prompts "
                         "(system + cp to 3cp tokens) and the probes (cp new tokens) scale with it "
                         f"(default {CHUNK}: a cadence of one window, {WINDOW})")
    ap.add_argument("--decode-interval", type=int, default=None, metavar="TOKENS",
                    help="the island arms' decode-island cadence, as the server's "
                         "--swa-islands-decode-interval sets it (default: cp/4)")
    ap.add_argument("--quick", action="store_true", help="clients 32,128 and 100 samples")
    ap.add_argument("--out", type=Path, help="write OUT.json and OUT.md (default: print the table)")
    a = ap.parse_args(argv)
    if a.quick:
        a.clients, a.samples = "32,128", 100
    arms = a.arms.split(",")
    unknown = set(arms) - set(ARMS)
    if unknown:
        ap.error(f"unknown arm(s): {', '.join(sorted(unknown))}")
    import torch

    torch.set_num_threads(1)
    start = time.time()
    rows = []
    if a.repeats < 1:
        ap.error("--repeats must be at least 1")
    if a.chunk < 8:
        ap.error(f"--chunk must be at least 8 tokens (a decode island every cp/4), not {a.chunk}")
    if a.decode_interval is not None and a.decode_interval < 1:
        ap.error(f"--decode-interval must be at least 1 token, not {a.decode_interval}")
    sizes = [int(x) for x in a.clients.split(",")]
    for i, n in enumerate(sizes):
        for rnd in range(a.repeats):
            for arm in arms[rnd % len(arms):] + arms[:rnd % len(arms)]:
                log(f"[{i * a.repeats + rnd + 1}/{len(sizes) * a.repeats}] {arm} @ {n} clients"
                    + (f", round {rnd + 1} of {a.repeats}" if a.repeats > 1 else "") + " ...")
                r = measure(arm, n, a.seed, a.samples, chunk=a.chunk,
                            decode_interval=a.decode_interval)
                if a.repeats > 1:
                    r["round"] = rnd
                rows.append(r)
                log(f"{arm} @ {n}: built in {r['build_s']} s, live SWA "
                    f"{r['live_swa_before_evict']:,}; "
                    + ", ".join(f"{k} {v:.0f}" for k, v in r["median_us"].items()) + " us")
    rows.sort(key=lambda r: (sizes.index(r["clients"]), r.get("round", 0), arms.index(r["arm"])))
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True, cwd=_bench_path.ROOT).stdout.strip()
    result = {"command": " ".join([Path(sys.executable).relative_to(_bench_path.ROOT).as_posix()
                                   if str(sys.executable).startswith(str(_bench_path.ROOT))
                                   else sys.executable, "benchmarks/cache_cost_main.py"]
                                  + (argv if argv is not None else sys.argv[1:])),
              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "git_head": head,
              "runtime_s": time.time() - start,
              "machine": f"{os.cpu_count()} CPUs ({platform.platform()}), load average "
                         f"{[round(x, 1) for x in os.getloadavg()]} at the end",
              "rows": rows}
    text = report(result)
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
        a.out.with_suffix(".md").write_text(text)
        log(f"wrote {a.out.with_suffix('.json')} and {a.out.with_suffix('.md')}")
    else:
        print(text)
    return 0
