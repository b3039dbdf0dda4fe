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

Workload (deterministic, ``--seed``; window 32, page 1, chunk 128, ample pools): clients in
groups of 8 share a 128-token system prompt; each sends one prompt (system + 128 to 384 tokens of
its own) committed chunk by chunk through ``checkpoint_kv_cache``, decodes 48 tokens one step at a
time (``on_decode_progress`` after each, main's decode SWA evictor every 34 tokens) and finishes
through ``release_kv_cache``; one client after the other. Then, on the built tree (every call
the real method, ``time.perf_counter``, garbage collector off, median microseconds):

- ``match_continue`` / ``match_diverge``: ``match_prefix`` of a cached transcript + one new token,
  and of a cached prompt cut at a random point + one new token;
- ``commit_chunk``, ``decode_hook``, ``finish``: 32 probe requests that continue a cached
  transcript with 128 new tokens: the commit, 8 decode steps' ``on_decode_progress``, the finish;
- ``queue``: ``on_request_queued`` of 64 waiting requests that continue a cached transcript (the
  scheduler's hook: stock main does nothing there, the window order matches once);
  ``commit_chunk_q64``, ``finish_q64``: 32 more probes while those 64 wait (the window order
  re-matches the waiting requests that continue along a committed path); then they leave;
- ``evict_64_first``: the first 16 ``evict(swa_num_tokens=64)`` calls; ``evict_64_late``: 16 calls
  once half of the tree's live SWA is gone; ``evict_64_drain``: 16 calls once 90% is gone (the
  window arm has no cold SWA left there: it takes windows).

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
       "commit_chunk_q64", "finish_q64", "evict_64_first", "evict_64_late", "evict_64_drain")
QUEUED = 64
EVICT_CALLS = 16


def log(msg: str) -> None:
    print(f"[cache_cost_main {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def build_cache(arm: str, kv: int, max_reqs: int, ctx: int):
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
                  chunked_prefill_size=CHUNK, tree_core_backend=core)
    if islands:
        from sglang.srt.mem_cache.swa_island_radix_cache import SWAIslandUnifiedRadixCache

        cache = SWAIslandUnifiedRadixCache(CacheInitParams(
            **fields, enable_swa_islands=True, swa_islands_eviction=order))
    else:
        from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache

        cache = UnifiedRadixCache(CacheInitParams(**fields))
    assert cache._tree_core_backend == core, (arm, cache._tree_core_backend)
    return cache


class Driver:
    """Requests driven the way 0.5.23's scheduler drives the cache (no model runs)."""

    def __init__(self, cache):
        self.cache = cache
        self.rid = 0

    def new_req(self, prompt):
        from sglang.srt.managers.schedule_batch import Req
        from sglang.srt.sampling.sampling_params import SamplingParams

        self.rid += 1
        req = Req(rid=f"r{self.rid}", origin_input_text="", origin_input_ids=array("q", prompt),
                  sampling_params=SamplingParams(temperature=0, max_new_tokens=DECODE))
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

    def decode(self, req, token, hook_times=None):
        from sglang.srt.mem_cache.unified_cache.components import ComponentType

        cache, pool = self.cache, self.cache.req_to_token_pool
        pos = len(req.origin_input_ids) + len(req.output_ids) - 1
        kv = cache.token_to_kv_pool_allocator.alloc(1)
        assert kv is not None, "the benchmark's KV pool is too small"
        pool.write((req.kv.req_pool_idx, slice(pos, pos + 1)), kv)
        req.kv.kv_committed_len = req.kv.kv_allocated_len = pos + 1
        interval = int(os.environ["SGLANG_SWA_EVICTION_INTERVAL"])
        if pos - cache.swa_retain_window >= req.kv.get_evicted_seqlen(ComponentType.SWA) + interval:
            cache.evict_sliding_windows(req, pos)
        req.output_ids.append(token)
        t0 = time.perf_counter()
        cache.on_decode_progress(req, 1)
        if hook_times is not None:
            hook_times.append((time.perf_counter() - t0) * 1e6)

    def waiting_req(self, prompt):
        """A request as it joins the waiting queue: tokens only, no KV row."""
        from sglang.srt.managers.schedule_batch import Req
        from sglang.srt.sampling.sampling_params import SamplingParams

        self.rid += 1
        return Req(rid=f"w{self.rid}", origin_input_text="", origin_input_ids=array("q", prompt),
                   sampling_params=SamplingParams(temperature=0, max_new_tokens=DECODE))

    def run(self, prompt, rng, times=None, suffix=""):
        """Prefill in chunks, decode ``DECODE`` tokens, finish; the transcript (``times``: the
        commits, decode hooks and finish, under their op names + ``suffix``)."""
        from sglang.srt.managers.schedule_batch import FINISH_LENGTH
        from sglang.srt.mem_cache.common import release_kv_cache

        req = self.new_req(prompt)
        for end in range(CHUNK, len(prompt) + CHUNK, CHUNK):
            t0 = time.perf_counter()
            self.commit(req, min(end, len(prompt)))
            if times is not None:
                times["commit_chunk" + suffix].append((time.perf_counter() - t0) * 1e6)
        req.output_ids.append(rng.randrange(50_000, 60_000))
        for _ in range(DECODE - 1 if times is None else 8):
            self.decode(req, rng.randrange(50_000, 60_000),
                        None if times is None else times.get("decode_hook" + suffix))
        req.finished_reason = FINISH_LENGTH(length=len(req.output_ids))
        t0 = time.perf_counter()
        release_kv_cache(req, self.cache, checkpoint=True)
        if times is not None:
            times["finish" + suffix].append((time.perf_counter() - t0) * 1e6)
        return list(prompt) + list(req.output_ids[:-1])


def measure(arm: str, clients: int, seed: int, samples: int) -> dict:
    from sglang.srt.mem_cache.base_prefix_cache import EvictParams, MatchPrefixParams
    from sglang.srt.mem_cache.radix_cache import RadixKey

    rng = random.Random(seed)
    prompts = []
    for c in range(clients):
        system = [1_000 + (c // GROUP) * SYSTEM + i for i in range(SYSTEM)]
        own = [rng.randrange(100_000, 900_000) for _ in range(rng.randint(CHUNK, 3 * CHUNK))]
        prompts.append(system + own)
    ctx = SYSTEM + 3 * CHUNK + CHUNK + DECODE + 8
    kv = sum(len(p) + DECODE for p in prompts) + 64 * ctx
    cache = build_cache(arm, kv, max_reqs=4, ctx=ctx + CHUNK)
    drv = Driver(cache)
    t0 = time.perf_counter()
    transcripts = [drv.run(p, rng) for p in prompts]
    build_s = time.perf_counter() - t0
    times = {op: [] for op in OPS}
    gc.disable()
    try:
        for _ in range(samples):
            t = transcripts[rng.randrange(clients)]
            key = RadixKey(array("q", t + [7]))
            t0 = time.perf_counter()
            cache.match_prefix(MatchPrefixParams(key=key))
            times["match_continue"].append((time.perf_counter() - t0) * 1e6)
            p = prompts[rng.randrange(clients)]
            key = RadixKey(array("q", p[: rng.randrange(SYSTEM, len(p))] + [7]))
            t0 = time.perf_counter()
            cache.match_prefix(MatchPrefixParams(key=key))
            times["match_diverge"].append((time.perf_counter() - t0) * 1e6)
        for _ in range(32):
            t = transcripts[rng.randrange(clients)]
            drv.run(t + [rng.randrange(100_000, 900_000) for _ in range(CHUNK)], rng, times)
        waiting = []
        for _ in range(QUEUED):
            t = transcripts[rng.randrange(clients)]
            req = drv.waiting_req(t + [rng.randrange(100_000, 900_000) for _ in range(CHUNK)])
            t0 = time.perf_counter()
            cache.on_request_queued(req)
            times["queue"].append((time.perf_counter() - t0) * 1e6)
            waiting.append(req)
        for _ in range(32):
            t = transcripts[rng.randrange(clients)]
            drv.run(t + [rng.randrange(100_000, 900_000) for _ in range(CHUNK)], rng, times,
                    suffix="_q64")
        waiting.clear()  # admitted elsewhere: the queue lets go of them (weak references)
        gc.collect()
        live = cache.swa_evictable_size()
        for op, left in (("evict_64_first", live), ("evict_64_late", live // 2),
                         ("evict_64_drain", live // 10)):
            while cache.swa_evictable_size() > left:  # drain to the phase, untimed
                cache.evict(EvictParams(num_tokens=0, swa_num_tokens=64))
            for _ in range(EVICT_CALLS):
                t0 = time.perf_counter()
                cache.evict(EvictParams(num_tokens=0, swa_num_tokens=64))
                times[op].append((time.perf_counter() - t0) * 1e6)
    finally:
        gc.enable()
    return {"arm": arm, "clients": clients, "build_s": round(build_s, 2),
            "tokens_cached": sum(len(t) for t in transcripts), "live_swa_before_evict": live,
            "median_us": {op: round(statistics.median(v), 2) for op, v in times.items() if v},
            "p90_us": {op: round(sorted(v)[int(0.9 * (len(v) - 1))], 2)
                       for op, v in times.items() if v},
            "n": {op: len(v) for op, v in times.items()}}


def report(result: dict) -> str:
    rows = result["rows"]
    sizes = sorted({r["clients"] for r in rows})
    arms = [a for a in ARMS if any(r["arm"] == a for r in rows)]
    by = {(r["arm"], r["clients"]): r for r in rows}
    L = ["# Cache cost on sglang 0.5.23: islands against stock main on the same tree core", "",
         f"Generated by `benchmarks/cache_cost_main.py` on {result['date']} (HEAD "
         f"{result['git_head']}); {result['runtime_s']:.0f} s on {result['machine']}.", "",
         "Command:", "", "```", result["command"], "```", "",
         "Median microseconds per call (p90 and sample counts in the JSON); window 32, page 1, "
         "chunk 128, ample pools; see the module docstring for the workload. Ratios: each island "
         "arm over stock main on the same core (`islands_rust / main_rust`, "
         "`islands_window / main_python`); `main_python / main_rust` is the price of the Python "
         "core itself.", ""]
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
            med = {a: by[(a, n)]["median_us"].get(op) for a in arms}
            cells = [f"{med[a]:,.1f}" if med[a] is not None else "–" for a in arms]
            rs = [f"{med[x] / med[y]:.2f}" if med[x] and med[y] else "–"
                  for x, y in ratios + extra]
            L.append(f"| {op} | {n} | " + " | ".join(cells + rs) + " |")
    L.append("")
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
    for n in (int(x) for x in a.clients.split(",")):
        for arm in arms:
            log(f"{arm} @ {n} clients ...")
            rows.append(measure(arm, n, a.seed, a.samples))
            r = rows[-1]
            log(f"{arm} @ {n}: built in {r['build_s']} s, live SWA {r['live_swa_before_evict']:,}; "
                + ", ".join(f"{k} {v:.0f}" for k, v in r["median_us"].items()) + " us")
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
