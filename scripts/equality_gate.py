#!/usr/bin/env python3
"""Two-boot equality gate: SWA islands must be invisible in the outputs.

Boots the real SGLang server (CPU, tiny random-weight hybrid-SWA model from
islands_harness.tiny_model) twice per page size, once with ``--enable-swa-islands`` and once
without, every other argument and environment variable identical, runs the same temperature-0
workload on both, and demands byte-identical output token ids request by request.
``--device cuda`` is the same gate on a GPU (scripts/gpu_gate.sh drives it).

Shape (like production, scaled down): sliding window w=32, chunked prefill cp=512 (cp/(w+p) is
15.5 at page 1, as 16384/1088 is in production), decode islands every 64 committed tokens
(``--swa-islands-decode-interval 64``), page 1 and, in the full run, page 16 (the CPU path
needs TRITON_INTERPRET=1 for the paged allocator; the gate sets it for page > 1 in both boots).

Workload classes (each request is one /generate call on token ids, ignore_eos, greedy):
  cold        distinct prompts, several longer than one chunk (chunk islands fire), nothing cached
  reserve     the same prompts again: cache-hit re-serves
  extension   a base request generating 4 decode islands' worth (4 x interval + 8 tokens);
              mid-run probes that re-send the base prompt plus the output streamed so far WHILE
              the base is still generating, just past its 2nd and its 3rd decode island
              (their cached prefix can only come from a decode island); links whose prompt is
              the previous link's prompt + output and that generate further (the prefix they
              reuse holds >= 4 decode islands, and its last window is island data)
  concurrent  requests sharing a cached prefix, fired together from threads, then re-served
              together
  multiturn   transcripts: each turn re-sends the whole conversation plus new user text
Chained prompts (links, probes, later turns) are built in each boot from that boot's own outputs
(as a client would), so nothing depends on HF agreeing with the server; a chained prompt that
differs between the boots is reported as a consequence of an earlier difference.

Comparisons. Across the two boots, request by request, only like with like: cold against cold
and cache-hit against cache-hit (a request's status is cached_tokens > 0 in meta_info; a pair
whose status differs between the boots is a workload error, never compared as if equal).
Cache-hit against cold is never compared: a cache-hit serve recomputes only the suffix past the
cached prefix, under different kernel tiling, and may flip a borderline argmax on an unmodified
engine. Every output is also compared with transformers' fp32 greedy decoding (hf_oracle) as an
independent witness. Policy:
  - off != on                       FAIL (islands visible); the report says which side matches HF
  - off == on != HF, cold serve     FAIL (the engine's simplest path disagrees with the oracle:
                                    the harness, not islands, is broken, and nothing is proven)
  - off == on != HF, cache-hit      reported as an ENGINE PROPERTY note (same flip with islands off
                                    and on, so not islands); not a failure
Evidence (the gate proves nothing if islands never did anything): in the islands boot, the
cache-hit classes must have cached_tokens > 0, at least one mid-run probe must have
cached_tokens beyond the running request's prompt and beyond what an earlier probe of the same
request inserted when it finished (a decode-island hit), extension links must reach at least
four decode intervals past the base prompt, and, where the server exports them
(sglang:swa_island_chunk_inserts / _decode_inserts), chunk and decode island counters must be > 0.

Conservation, read from the server itself: the ``--enable-metrics`` gauges
sglang:{kv,swa}_{available,evictable,used}_tokens (full and SWA pool; available = the allocator's
free slots, evictable = the tree's unlocked cached tokens, used = pool - both), which the
scheduler refreshes at every decode step (``--decode-log-interval 1``) and every 30 s when idle.
Three readings per boot, each pool:
  boot     right after boot; the boot's /health_generate probe (input_ids [0], one token) has
           run, so a token or two may be cached; used must be 0
  end      after the workload, from the decode step that finished the last request (or the idle
           log): used == 0 and available + evictable == pool size, i.e. every slot is either free
           or owned by the tree: no leak (used > 0) and no double free (used < 0)
  flushed  after /flush_cache and the same /health_generate probe again: exactly the boot reading
/flush_cache clears the allocator wholesale, so "flushed == boot" mostly shows that the flush and
the pools' bookkeeping work; "end" is the reading that can catch an islands leak or double free.
Both boots also run with the server's per-step pool invariant assertion
(SGLANG_ENABLE_STRICT_MEM_CHECK_DURING_BUSY=1; strict idle check too) and its per-step free-list
double-free / use-after-free check (SGLANG_CHECK_KV_PAGE_INVARIANTS=1); the server log is scanned
for their messages.

Negative control (``--negative-control``): the islands boot gets test/shims/wrong_frontier on its
PYTHONPATH (a sitecustomize that frees SWA KV a window past the frontier, see its docstring), with
the server's own invariant checks off so that the run completes; the gate must then FAIL on the
outputs. ``--save-reference FILE`` / ``--reference FILE`` reuse the islands-off boot of an
earlier run (same workload and arguments, checked by fingerprint) so the control boots once.

Exit status: 0 pass; 1 the gate failed (difference, conservation, missing evidence); 2 the gate
could not run (server did not boot, request error, bad reference, shim not active).

Examples:
  scripts/equality_gate.sh --quick                      # page 1, ~1-2 min on 2 idle cores
  scripts/equality_gate.sh                              # full: pages 1 and 16
  scripts/equality_gate.sh --quick --save-reference /tmp/ref.json
  scripts/equality_gate.sh --quick --negative-control --reference /tmp/ref.json   # must exit 1
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import pathlib
import random
import shlex
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Optional

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from islands_harness.client import Metrics, StreamingRequest, fetch_metrics  # noqa: E402
from islands_harness.server import SglangServer  # noqa: E402

SHIM_DIR = ROOT / "test" / "shims" / "wrong_frontier"
SHIM_MARKER = "[wrong_frontier shim]"
WORK_DIR = ROOT / ".work" / "equality-gate"
DEFAULT_ORACLE_CACHE = WORK_DIR / "oracle-cache.json"

CPU_WINDOW = 32
CPU_CHUNK = 512
CPU_DECODE_INTERVAL = 64
CUDA_BASE_ARGS = ("--device", "cuda", "--random-seed", "0", "--skip-server-warmup")

# Server-log lines that mean the server's own accounting checks fired.
LOG_ALARMS = (
    "memory leak detected",
    "Mem Leak Detected",
    "KV double free",
    "use-after-free",
    "Traceback (most recent call last)",
)

T0 = time.monotonic()


def say(msg: str) -> None:
    print(f"[gate {time.monotonic() - T0:6.1f}s] {msg}", flush=True)


# ---------------------------------------------------------------------------------------------
# Workload


@dataclasses.dataclass
class Req:
    """One /generate call. Its prompt is either fixed (`ids`) or built in each boot from that
    boot's own results: the prompt of `parent` + the parent's output (`take` tokens, all if None)
    + `extra`. A probe (`trigger` set) is sent while its parent is still generating, as soon as
    the parent has streamed `trigger` tokens."""

    name: str
    cls: str  # cold | reserve | extension | concurrent | multiturn
    expect: str  # "cold" or "hit": the status it must have in BOTH boots; "hit_on": a hit in
    #              the islands boot, either status in the off boot
    n: int
    ids: Optional[list[int]] = None
    parent: Optional[str] = None
    take: Optional[int] = None
    extra: list[int] = dataclasses.field(default_factory=list)
    trigger: Optional[int] = None
    depth_from: Optional[str] = None  # extension links: the chain's base request
    min_islands: int = 0  # ... and how many decode intervals past its prompt they reach


@dataclasses.dataclass
class Step:
    kind: str  # seq | conc | midrun (first request streamed, the others are its probes)
    reqs: list[Req]


CLASSES = ("cold", "reserve", "extension", "concurrent", "multiturn", "junction",
           "junction_pressure")


def build_workload(vocab_hi: int, quick: bool, interval: int, chunk: int = CPU_CHUNK,
                   seed: int = 20261129) -> list[Step]:
    """The workload; lengths scale with the chunk size (the CPU shape is chunk 512)."""
    rng = random.Random(seed)
    used_first: set[int] = set()
    scale = chunk / CPU_CHUNK

    def ln(x: int) -> int:
        return max(8, int(round(x * scale)))

    def toks(k: int) -> list[int]:
        return [rng.randrange(4, vocab_hi) for _ in range(k)]

    def root_prompt(k: int) -> list[int]:
        # Distinct first tokens: a prompt that starts at the tree root never matches another's.
        first = rng.randrange(4, vocab_hi)
        while first in used_first:
            first = rng.randrange(4, vocab_hi)
        used_first.add(first)
        return [first] + toks(k - 1)

    steps: list[Step] = []
    cold_lens = [40, ln(300), ln(1100)] if quick else [20, 33, ln(300), ln(700), ln(1100),
                                                       ln(1600)]
    cold_n = 16 if quick else 24
    cold = {k: root_prompt(k) for k in cold_lens}

    # 1. cold serves, 2. cache-hit re-serves of the same prompts
    for k in cold_lens:
        steps.append(Step("seq", [Req(f"cold_len{k}", "cold", "cold", cold_n, ids=cold[k])]))
    for k in cold_lens:
        steps.append(Step("seq", [Req(f"reserve_len{k}", "reserve", "hit", cold_n, ids=cold[k])]))

    # 3. extensions. Each link generates 4 decode intervals (+8); the next link's prompt is its
    #    prompt + output; probes re-send prompt + output[:k] while the link still runs, k just
    #    past its j-th decode island (islands end near prompt + j*interval), sent 8 tokens later,
    #    long before island j+1 would tombstone island j.
    link_n = 4 * interval + 8
    n_links = 1 if quick else 2
    probe_islands = (2, 3)  # two chances: on a fast GPU a probe can miss its island's window
    prev = Req("ext_base", "extension", "cold", link_n, ids=root_prompt(ln(600)))
    for li in range(1, n_links + 2):
        last = li == n_links + 1
        if li > 1:
            prev = Req(f"ext_link{li - 1}", "extension", "hit", 64 if last else link_n,
                       parent=prev.name, depth_from="ext_base", min_islands=4 * (li - 1))
        if last:
            steps.append(Step("seq", [prev]))
            break
        probes = [Req(f"ext_probe{li - 1}_{j}", "extension", "hit", 16, parent=prev.name,
                      take=j * interval + 16, trigger=j * interval + 24) for j in probe_islands]
        steps.append(Step("midrun", [prev] + probes))

    # 4. concurrent: requests sharing a cached prefix (the longest quick cold prompt), fired
    #    together, then re-served together
    shared = cold[ln(1100)]
    suffix_lens = [8, 40, 90, 200] if quick else [8, 25, 40, 60, 90, 130, 200, 330]
    conc_n = 16 if quick else 24
    conc = [Req(f"conc_s{s}", "concurrent", "hit", conc_n, ids=shared + toks(s))
            for s in suffix_lens]
    steps.append(Step("conc", conc))
    steps.append(Step("conc", [dataclasses.replace(r, name=r.name.replace("conc_", "conc_re_"))
                               for r in conc]))

    # 5. multi-turn transcripts (distinct system prompts: a branch point inside another
    #    conversation's tombstones is not a match end with islands, by design)
    turn_ns = [interval + 8, interval + 8, 32] if quick else [interval + 8] * 3 + [32]
    for c in range(1 if quick else 2):
        prev_turn: Optional[Req] = None
        for t, n in enumerate(turn_ns):
            if prev_turn is None:
                r = Req(f"chat{c}_turn0", "multiturn", "cold", n,
                        ids=root_prompt(ln(200)) + toks(30))
            else:
                r = Req(f"chat{c}_turn{t}", "multiturn", "hit", n, parent=prev_turn.name,
                        extra=toks(30))
            steps.append(Step("seq", [r]))
            prev_turn = r

    # 6. junctions: three requests share a prefix S and diverge after it. The second one's insert
    #    creates the branch point at |S| (its SWA revives S's last window if it was reclaimed);
    #    the third hits exactly |S|, ending its match at the junction, in both boots.
    shared_s = root_prompt(ln(700))
    for j, name in enumerate(("j_base", "j_branch", "j_probe")):
        steps.append(Step("seq", [Req(name, "junction", "cold" if j == 0 else "hit", 16,
                                      ids=shared_s + toks(ln(150)))]))
    # 7. ... and after pressure: distinct cold prompts whose SWA, once they finish, exceeds the
    #    SWA pool, so eviction reclaims the cold tier (upstream: LRU over everything). Then a
    #    fourth request on S: the islands boot must still hit |S| (the junction window is the
    #    last thing reclaimed); upstream may have lost it, so its status is not compared
    #    ("hit_on"), only its output (CPU fp32 computes cached and recomputed tokens alike).
    n_fill = 6 if quick else 10
    fill = [Req(f"jp_fill{i}", "junction_pressure", "cold", 8, ids=root_prompt(ln(2900)))
            for i in range(n_fill)]
    for i in range(0, n_fill, 3):
        steps.append(Step("conc", fill[i:i + 3]))
    steps.append(Step("seq", [Req("jp_probe", "junction_pressure", "hit_on", 16,
                                  ids=shared_s + toks(ln(150)))]))
    return steps


def all_reqs(steps: list[Step]) -> list[Req]:
    return [r for s in steps for r in s.reqs]


def workload_hash(steps: list[Step]) -> str:
    h = hashlib.sha256()
    for s in steps:
        h.update(json.dumps([s.kind, [dataclasses.asdict(r) for r in s.reqs]]).encode())
    return h.hexdigest()[:16]


class Oracle:
    """transformers fp32 greedy (islands_harness.hf_oracle), cached on disk by content hash."""

    def __init__(self, model_dir: pathlib.Path, cache_path: Optional[pathlib.Path], threads: int,
                 device: str = "cpu"):
        self.model_dir = model_dir
        self.cache_path = cache_path
        self.threads = threads
        self.device = device
        self.calls = 0
        self.hits = 0
        self.seconds = 0.0
        self.fingerprint = self._fingerprint()
        self._cache: dict[str, list[int]] = {}
        if cache_path and cache_path.exists():
            try:
                data = json.loads(cache_path.read_text())
                if data.get("fingerprint") == self.fingerprint:
                    self._cache = data.get("entries", {})
            except (OSError, ValueError):
                self._cache = {}

    def _fingerprint(self) -> str:
        import torch
        import transformers

        h = hashlib.sha256(model_hash(self.model_dir).encode())
        h.update(f"transformers={transformers.__version__} torch={torch.__version__} "
                 f"device={self.device}".encode())
        return h.hexdigest()

    def __call__(self, ids: list[int], n: int) -> list[int]:
        key = hashlib.sha256(json.dumps([list(ids), n]).encode()).hexdigest()
        if key in self._cache:
            self.hits += 1
            return list(self._cache[key])
        import torch

        from islands_harness.hf_oracle import greedy_decode_one

        torch.set_num_threads(self.threads)
        t = time.monotonic()
        if self.device == "cpu":
            out = greedy_decode_one(self.model_dir, ids, n)
        else:
            out = self._greedy_on_device(ids, n)
        self.seconds += time.monotonic() - t
        self.calls += 1
        self._cache[key] = list(out)
        self._save()
        return list(out)

    def _greedy_on_device(self, ids: list[int], n: int) -> list[int]:
        """hf_oracle.greedy_decode_one's computation (fp32, KV cache, EOS off) on another device
        (the GPU gate: long prompts, fast enough there)."""
        import torch

        from islands_harness.hf_oracle import load_model

        model = load_model(str(self.model_dir.resolve()), "float32").to(self.device)
        x = torch.tensor([list(ids)], dtype=torch.long, device=self.device)
        with torch.no_grad():
            out = model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=n,
                                 min_new_tokens=n, do_sample=False, use_cache=True,
                                 eos_token_id=None, pad_token_id=model.config.pad_token_id or 0)
        return out[0, x.shape[1]:].tolist()

    def _save(self) -> None:
        if not self.cache_path:
            return
        self.cache_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.cache_path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps({"fingerprint": self.fingerprint, "entries": self._cache}))
        os.replace(tmp, self.cache_path)


# ---------------------------------------------------------------------------------------------
# Server side


@dataclasses.dataclass
class Served:
    output_ids: list[int]
    cached_tokens: int
    prompt_tokens: int
    sent_at_completion: Optional[int] = None  # probes: the parent's streamed tokens when sent


class DeviceServer(SglangServer):
    """islands_harness.server.SglangServer with another fixed argument set in place of its
    CPU-only BASE_ARGS (which include --disable-cuda-graph and --device cpu, and cannot be undone
    by later arguments): the GPU gate's launcher. The lifecycle (free port, health wait, process
    group stop) is SglangServer's."""

    def __init__(self, *a, base_args: tuple[str, ...] = CUDA_BASE_ARGS, **kw):
        super().__init__(*a, **kw)
        self.base_args = list(base_args)

    def command(self) -> list[str]:
        assert self.port is not None
        return [self.python, "-m", "sglang.launch_server", "--model-path", self.model_path,
                *self.base_args, "--host", self.host, "--port", str(self.port), *self.extra_args]


def gauge(metrics: Metrics, name: str, default: Optional[float] = None) -> Optional[float]:
    return metrics.value(name, default=default)


POOL_GAUGES = {
    "full": ("sglang:kv_available_tokens", "sglang:kv_evictable_tokens", "sglang:kv_used_tokens"),
    "swa": ("sglang:swa_available_tokens", "sglang:swa_evictable_tokens", "sglang:swa_used_tokens"),
}


def pool_reading(metrics) -> dict[str, Any]:
    r: dict[str, Any] = {"running": gauge(metrics, "sglang:num_running_reqs", 0.0)}
    for pool, (a, e, u) in POOL_GAUGES.items():
        r[pool] = {"available": gauge(metrics, a), "evictable": gauge(metrics, e),
                   "used": gauge(metrics, u)}
    return r


def fmt_pool(p: dict[str, Any]) -> str:
    return f"avail {p['available']:.0f} + evictable {p['evictable']:.0f} + used {p['used']:.0f}"


def stream_generate(base_url: str, ids: list[int], n: int,
                    on_progress: Callable[[list[int]], None], timeout: float) -> Served:
    """Streaming greedy /generate; `on_progress(output_ids_so_far)` after every chunk."""
    res = StreamingRequest(base_url, ids, n, timeout=timeout, on_progress=on_progress,
                           name="base").start().wait(timeout)
    return Served(res.output_ids, res.cached_tokens, res.prompt_tokens)


def common_server_args(args: argparse.Namespace, page: int) -> list[str]:
    return [
        "--page-size", str(page),
        "--chunked-prefill-size", str(args.chunk),
        "--swa-islands-decode-interval", str(args.decode_interval),  # unused with islands off
        "--max-total-tokens", str(args.max_total_tokens),
        "--swa-full-tokens-ratio", str(args.swa_ratio),
        "--enable-metrics",
        "--decode-log-interval", "1",  # pool gauges refreshed at every decode step
        "--sleep-on-idle",  # an idle boot must not eat the CPU of the one running its workload
        *shlex.split(args.server_args or ""),
    ]


def common_env(device: str, page: int, page_invariants: bool) -> dict[str, str]:
    env = {
        "SGLANG_ENABLE_STRICT_MEM_CHECK_DURING_BUSY": "1",  # assert the pool invariant each step
        "SGLANG_ENABLE_STRICT_MEM_CHECK_DURING_IDLE": "1",
    }
    if page_invariants:
        # Free lists without duplicates (double free) and no owner page in them (use-after-free),
        # every step: cheap at the default pool size, but its CPU cost is steeply non-linear in it
        # (measured here: +13% scheduler CPU at 32768 full-pool tokens, +480% at 65536).
        env["SGLANG_CHECK_KV_PAGE_INVARIANTS"] = "1"
    if device == "cpu" and page > 1:
        env["TRITON_INTERPRET"] = "1"  # the paged allocator launches Triton kernels on CPU tensors
    if device != "cpu":
        env["SGLANG_USE_CPU_ENGINE"] = "0"  # SglangServer sets it to 1 for its CPU boots
    return env


class Boot:
    """One server boot: start, workload, conservation readings, stop."""

    def __init__(self, label: str, model_dir: pathlib.Path, page: int, islands: bool,
                 args: argparse.Namespace, shim: bool = False):
        self.label = label
        self.page = page
        self.islands = islands
        self.shim = shim
        self.server_args = common_server_args(args, page) + (
            ["--enable-swa-islands"] if islands else [])
        self.env = common_env(args.device, page, args.kv_page_invariants)
        if shim:
            # Control only: the shim, and the server's own checks off (they would stop the server
            # at the first accounting mismatch, before the outputs can be compared).
            pp = os.environ.get("PYTHONPATH", "")
            self.env["PYTHONPATH"] = str(SHIM_DIR) + (os.pathsep + pp if pp else "")
            self.env["SGLANG_ENABLE_STRICT_MEM_CHECK_DURING_BUSY"] = "0"
            self.env["SGLANG_ENABLE_STRICT_MEM_CHECK_DURING_IDLE"] = "0"
            self.env["SGLANG_CHECK_KV_PAGE_INVARIANTS"] = "0"
            if args.wrong_frontier_shift is not None:
                self.env["SWA_WRONG_FRONTIER_SHIFT"] = str(args.wrong_frontier_shift)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        log = pathlib.Path(args.log_dir) / f"{stamp}-{args.device}-p{page}-{label}.log"
        kw = dict(env=self.env, omp_threads=args.omp_threads, log_path=log,
                  boot_timeout_s=args.boot_timeout)
        if args.device == "cpu":
            self.srv: SglangServer = SglangServer(model_dir, self.server_args, **kw)
        else:
            self.srv = DeviceServer(model_dir, self.server_args, **kw)
        self.request_timeout = args.request_timeout
        self.prompts: dict[str, list[int]] = {}
        self.results: dict[str, Served] = {}
        self.readings: dict[str, Any] = {}
        self.error: Optional[str] = None
        self.metrics_end = Metrics([])
        self.work_s = 0.0

    # -- lifecycle
    def start(self) -> None:
        try:
            self.srv.start()
        except Exception as e:  # noqa: BLE001
            self.error = f"boot failed: {e}"

    def stop(self) -> None:
        try:
            self.srv.stop()
        except Exception as e:  # noqa: BLE001
            self.error = self.error or f"stop failed: {e}"

    def metrics(self) -> Metrics:
        return fetch_metrics(self.srv.base_url)

    # -- workload
    def resolve(self, r: Req, partial: Optional[list[int]] = None) -> list[int]:
        if r.ids is not None:
            return list(r.ids)
        out = partial if partial is not None else self.results[r.parent].output_ids
        take = list(out) if r.take is None else list(out[:r.take])
        if r.take is not None and len(take) < r.take:
            raise RuntimeError(f"{r.name}: parent {r.parent} has only {len(take)} tokens")
        return self.prompts[r.parent] + take + list(r.extra)

    def _generate(self, r: Req, ids: list[int]) -> Served:
        self.prompts[r.name] = ids
        g = self.srv.generate(ids, r.n, timeout=self.request_timeout)
        return Served(g.output_ids, g.cached_tokens, g.prompt_tokens)

    def run(self, steps: list[Step]) -> None:
        t = time.monotonic()
        self.readings["boot"] = pool_reading(self.metrics())
        done = 0
        total = len(all_reqs(steps))
        try:
            for st in steps:
                if st.kind == "seq":
                    r = st.reqs[0]
                    self.results[r.name] = self._generate(r, self.resolve(r))
                elif st.kind == "conc":
                    barrier = threading.Barrier(len(st.reqs))
                    prompts = {r.name: self.resolve(r) for r in st.reqs}

                    def go(r):
                        barrier.wait()
                        return self._generate(r, prompts[r.name])

                    with ThreadPoolExecutor(len(st.reqs)) as ex:
                        futs = {r.name: ex.submit(go, r) for r in st.reqs}
                        for name, f in futs.items():
                            self.results[name] = f.result()
                elif st.kind == "midrun":
                    self._midrun(st)
                done += len(st.reqs)
                names = ", ".join(f"{r.name}(cached {self.results[r.name].cached_tokens})"
                                  for r in st.reqs)
                say(f"  [{self.label} p{self.page}] {done}/{total}: {names}")
        except Exception as e:  # noqa: BLE001
            self.error = (f"request failed after {done}/{total} requests: {e!r}; "
                          f"server log {self.srv.log_path}:\n{self.srv.log_tail(15)}")
        self.work_s = time.monotonic() - t

    def _midrun(self, st: Step) -> None:
        base, probes = st.reqs[0], st.reqs[1:]
        pending = sorted(probes, key=lambda p: p.trigger)
        ex = ThreadPoolExecutor(max(1, len(probes)))
        futs: dict[str, Any] = {}
        sent_at: dict[str, int] = {}

        def send(p: Req, so_far: list[int]) -> None:
            sent_at[p.name] = len(so_far)
            ids = self.resolve(p, partial=so_far)
            futs[p.name] = ex.submit(self._generate, p, ids)

        def on_progress(so_far: list[int]) -> None:
            while pending and len(so_far) >= pending[0].trigger:
                send(pending.pop(0), so_far)

        try:
            base_ids = self.resolve(base)
            self.prompts[base.name] = base_ids
            res = stream_generate(self.srv.base_url, base_ids, base.n, on_progress,
                                  self.request_timeout)
            self.results[base.name] = res
            while pending:  # not triggered (trigger >= n): send after the fact
                send(pending.pop(0), res.output_ids)
            for name, f in futs.items():
                s = f.result()
                s.sent_at_completion = sent_at[name]
                self.results[name] = s
        finally:
            ex.shutdown(wait=True)

    # -- conservation
    def end_of_workload_and_flush(self) -> None:
        """Reading with nothing running (the decode log of the step that finished the last
        request, or the idle log if that one is not clean yet), then /flush_cache."""
        m = self.metrics()
        self.metrics_end = m
        r = pool_reading(m)
        if not all(r[p]["used"] == 0 for p in POOL_GAUGES):
            say(f"  [{self.label} p{self.page}] end-of-workload gauges not clean yet "
                f"(running {r['running']:.0f}); waiting for the scheduler's idle log (<= 40 s)")
            deadline = time.monotonic() + 40
            while time.monotonic() < deadline:
                time.sleep(2)
                r = pool_reading(self.metrics())
                if r["running"] == 0 or all(r[p]["used"] == 0 for p in POOL_GAUGES):
                    break
        self.readings["end"] = r
        self.flush_cache()

    def flush_cache(self, tries: int = 40) -> None:
        """/flush_cache, retried: the scheduler refuses it ("pending requests") until it has
        retired the last request, which can lag the HTTP response by a scheduler step."""
        for i in range(tries):
            try:
                self.srv.flush_cache()
                return
            except Exception:  # noqa: BLE001  (ServerError: 400 "Flush cache failed")
                if i == tries - 1:
                    raise
                time.sleep(0.25)

    def after_flush(self) -> None:
        """Reading after /flush_cache. Right after boot the pools had served exactly one request,
        the server's own /health_generate probe (input_ids [0], one token), which may leave a
        token or two cached. So the gate sends that same probe again and expects the gauges to
        read exactly as right after boot; if they do not within 15 s, it waits (up to 45 s) for
        the scheduler's idle log and keeps what that one says."""
        import requests

        requests.get(f"{self.srv.base_url}/health_generate", timeout=60)
        boot = self.readings.get("boot")
        t = time.monotonic()
        while True:
            r = pool_reading(self.metrics())
            if boot and all(r[p] == boot[p] for p in POOL_GAUGES):
                break
            if time.monotonic() - t > 15 and (r["running"] == 0 or time.monotonic() - t > 45):
                break
            time.sleep(1)
        self.readings["flushed"] = r

    def _log_lines(self, pred) -> list[str]:
        try:
            text = pathlib.Path(self.srv.log_path).read_text(errors="replace")
        except OSError:
            return []
        return [ln.strip()[:300] for ln in text.splitlines() if pred(ln)]

    def log_alarms(self) -> list[str]:
        return self._log_lines(lambda ln: any(a in ln for a in LOG_ALARMS))

    def shim_lines(self) -> list[str]:
        return self._log_lines(lambda ln: SHIM_MARKER in ln)


# ---------------------------------------------------------------------------------------------
# Comparison and report


def first_diff(a: list[int], b: list[int]) -> int:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b)) if len(a) != len(b) else -1


def status(s: Served) -> str:
    return "hit" if s.cached_tokens > 0 else "cold"


def conservation_check(boot_label: str, readings: dict[str, Any]) -> list[str]:
    """Per pool, from the server's gauges (see the module docstring)."""
    problems = []
    b, e, f = readings.get("boot"), readings.get("end"), readings.get("flushed")
    if not b or not e:
        return [f"{boot_label}: no pool reading"]
    for pool in POOL_GAUGES:
        bp, ep = b[pool], e[pool]
        size = bp["available"] + bp["evictable"]
        if bp["used"] != 0:
            problems.append(f"{boot_label}: {pool} pool right after boot: {fmt_pool(bp)}")
        if ep["used"] != 0 or ep["available"] + ep["evictable"] != size:
            problems.append(f"{boot_label}: {pool} pool after the workload: {fmt_pool(ep)} "
                            f"(pool {size:.0f}; nothing runs, so used must be 0)")
        fp = f[pool] if f else None
        if fp is None:
            problems.append(f"{boot_label}: no reading after /flush_cache")
        elif fp != bp:
            problems.append(f"{boot_label}: {pool} pool after /flush_cache + health probe: "
                            f"{fmt_pool(fp)}; right after boot: {fmt_pool(bp)}")
    return problems


def print_conservation(label: str, readings: dict[str, Any]) -> None:
    for pool in POOL_GAUGES:
        parts = []
        for when in ("boot", "end", "flushed"):
            r = readings.get(when)
            parts.append(f"{when}: " + (fmt_pool(r[pool]) if r else "not read"))
        say(f"  conservation [{label}] {pool:4s} | " + " | ".join(parts))


def island_counters(metrics: Metrics) -> Optional[dict[str, float]]:
    """Island inserts by kind (``sglang:swa_island_{chunk,decode}_inserts``); None if absent."""
    out = {kind: metrics.value(f"sglang:swa_island_{kind}_inserts", default=None)
           for kind in ("chunk", "decode")}
    return {k: v for k, v in out.items() if v is not None} or None


def expected_status(r: Req, prompt_len: int, page: int) -> str:
    """The cache status ``r`` must have at page size ``page``: a prompt of at most one page cannot
    hit (the tree caches whole pages, and a match leaves at least one token to compute)."""
    return "cold" if r.expect == "hit" and prompt_len <= page else r.expect


def evaluate(page: int, steps: list[Step], off: "BootData", on: "BootData",
             oracle: Callable[[list[int], int], list[int]], strict_oracle: bool,
             on_label: str) -> tuple[list[str], list[str], dict]:
    """Per-class report; returns (failures, engine notes, summary)."""
    failures: list[str] = []
    notes: list[str] = []
    first: Optional[dict] = None
    per_class: dict[str, dict[str, int]] = {}
    for r in all_reqs(steps):
        c = per_class.setdefault(r.cls, {"n": 0, "identical": 0, "hf_off": 0, "hf_on": 0})
        c["n"] += 1
        a, b = off.results[r.name], on.results[r.name]
        pa, pb = off.prompts[r.name], on.prompts[r.name]
        ref_a = oracle(pa, r.n)
        ref_b = ref_a if pb == pa else oracle(pb, r.n)
        c["hf_off"] += a.output_ids == ref_a
        c["hf_on"] += b.output_ids == ref_b
        if pa != pb:
            i = first_diff(pa, pb)
            failures.append(f"{r.name}: prompt differs from token {i} (built from an earlier "
                            f"request's output, which differed)")
            if first is None:
                first = {"page": page, "request": r.name, "class": r.cls,
                         "token_index": f"prompt {i}"}
            continue
        sa, sb = status(a), status(b)
        expect = expected_status(r, len(pa), page)
        if expect == "hit_on":
            # the islands boot must hit; the off boot's status is not compared (see the workload)
            if sb != "hit":
                failures.append(f"{r.name}: served cold in the {on_label} boot ({b.cached_tokens} "
                                f"cached), expected a hit")
                continue
            expect = sb
        elif sa != sb or sa != expect:
            failures.append(f"{r.name}: cache status off={sa} ({a.cached_tokens}) {on_label}="
                            f"{sb} ({b.cached_tokens}), expected {expect} in both: not a "
                            f"like-for-like pair")
            continue
        if a.output_ids == b.output_ids:
            c["identical"] += 1
            if a.output_ids != ref_a:
                i = first_diff(a.output_ids, ref_a)
                msg = (f"{r.name} ({expect}): off and {on_label} agree but differ from HF at "
                       f"token {i} (server {a.output_ids[i:i + 4]}, HF {ref_a[i:i + 4]}; cached "
                       f"off {a.cached_tokens}, on {b.cached_tokens})")
                if expect == "cold" and strict_oracle:
                    failures.append("cold serve differs from HF in both boots: " + msg)
                else:
                    notes.append("ENGINE PROPERTY (same in both boots, not islands): " + msg)
            continue
        i = first_diff(a.output_ids, b.output_ids)
        side = ("off matches HF, on does not" if a.output_ids == ref_a else
                "on matches HF, off does not" if b.output_ids == ref_b else "neither matches HF")
        lo = max(0, i - 2)
        d = {"page": page, "request": r.name, "class": r.cls, "token_index": i,
             "off": a.output_ids[lo:i + 4], "on": b.output_ids[lo:i + 4],
             "cached_off": a.cached_tokens, "cached_on": b.cached_tokens,
             "prompt_len": len(pa), "hf": side}
        if first is None:
            first = d
        failures.append(f"{r.name}: outputs differ at token {i} (from token {lo}: off "
                        f"{d['off']} vs {on_label} {d['on']}; cached off {a.cached_tokens}, "
                        f"{on_label} {b.cached_tokens}; {side})")
    for cls in CLASSES:
        if cls not in per_class:
            continue
        c = per_class[cls]
        mark = "identical" if c["identical"] == c["n"] else "identical  <-- DIFFERENCES"
        say(f"  page {page:<2} {cls:11s} {c['identical']}/{c['n']} {mark:12s}  "
            f"HF: off {c['hf_off']}/{c['n']}, {on_label} {c['hf_on']}/{c['n']}")
    return failures, notes, {"per_class": per_class, "first_difference": first}


def evidence(page: int, steps: list[Step], on: "BootData", counters, interval: int,
             label: str, off: Optional["BootData"] = None) -> list[str]:
    """What the islands boot must show, or the gate proved nothing."""
    problems = []
    reqs = all_reqs(steps)
    hits = [r for r in reqs
            if expected_status(r, len(on.prompts[r.name]), page) in ("hit", "hit_on")]
    say(f"  evidence [{label} p{page}] cache hits (cached_tokens / prompt): " + ", ".join(
        f"{r.name} {on.results[r.name].cached_tokens}/{len(on.prompts[r.name])}" for r in hits))
    if not hits or any(on.results[r.name].cached_tokens == 0 for r in hits):
        problems.append(f"page {page}: a cache-hit request was served cold in the islands boot")
    probes = [r for r in reqs if r.trigger is not None]
    island_hits = []
    parts = []
    for r in probes:
        # Only a decode island of the running parent can hold more of its sequence than its
        # prompt, except for an earlier probe of the same parent: greedy, it generated the
        # parent's own continuation, and its finished insert is reusable. So the bar is past both.
        s = on.results[r.name]
        bar = max([len(on.prompts[r.parent])] + [
            len(on.prompts[q.name]) + q.n for q in probes
            if q.parent == r.parent and q.trigger < r.trigger])
        off_cached = off.results[r.name].cached_tokens if off else None
        vs_off = f", off boot {off_cached}" if off else ""
        if s.cached_tokens > bar:
            island_hits.append(r)
            parts.append(f"{r.name} cached {s.cached_tokens} > {bar}{vs_off} (sent at the "
                         f"parent's token {s.sent_at_completion})")
        else:
            parts.append(f"{r.name} cached {s.cached_tokens} <= {bar}{vs_off}: NO island hit "
                         f"(sent at the parent's token {s.sent_at_completion})")
    say(f"  evidence [{label} p{page}] decode-island hits (mid-run probes; cached_tokens past "
        f"the running parent's prompt and past earlier probes' own inserts): " + "; ".join(parts))
    if not island_hits:
        problems.append(f"page {page}: no mid-run probe hit a decode island in the islands boot")
    for r in reqs:
        if not r.depth_from:
            continue
        s, base = on.results[r.name], len(on.prompts[r.depth_from])
        deep = (s.cached_tokens - base) / interval
        say(f"  evidence [{label} p{page}] {r.name}: cached {s.cached_tokens} of "
            f"{len(on.prompts[r.name])}, {deep:.1f} decode intervals past the base prompt")
        if deep < r.min_islands - 0.5:
            problems.append(f"page {page}: {r.name} reaches only {deep:.1f} decode intervals "
                            f"deep (< {r.min_islands})")
    # junction hits end exactly at the branch point, also after pressure reclaimed the cold tier
    names = {r.name: r for r in reqs}
    if "j_probe" in names and "j_base" in names:
        shared = 0
        pa, pb = on.prompts["j_base"], on.prompts["j_probe"]
        while shared < min(len(pa), len(pb)) and pa[shared] == pb[shared]:
            shared += 1
        junction = shared // page * page
        for name in ("j_probe", "jp_probe"):
            if name not in names:
                continue
            got = on.results[name].cached_tokens
            off_got = off.results[name].cached_tokens if off is not None else None
            say(f"  evidence [{label} p{page}] {name}: cached {got} at a junction of {junction} "
                f"tokens" + (f" (off boot {off_got})" if off_got is not None else ""))
            if got < junction:
                problems.append(f"page {page}: {name} hit {got} < the junction at {junction}")
    if counters is None:
        say(f"  evidence [{label} p{page}] island counters: not exported by this build")
    else:
        say(f"  evidence [{label} p{page}] island counters (sglang:swa_island_*_inserts): "
            + ", ".join(f"{k} {v:.0f}" for k, v in sorted(counters.items())))
        if counters.get("chunk", 0) <= 0 or counters.get("decode", 0) < 4:
            problems.append(f"page {page}: island counters {counters}: expected chunk > 0 and "
                            f"decode >= 4")
    return problems


@dataclasses.dataclass
class BootData:
    prompts: dict[str, list[int]]
    results: dict[str, Served]


# ---------------------------------------------------------------------------------------------


def model_hash(model_dir: pathlib.Path) -> str:
    h = hashlib.sha256()
    for f in sorted(model_dir.iterdir()):
        if f.is_file():
            h.update(f.name.encode())
            h.update(hashlib.sha256(f.read_bytes()).digest())
    return h.hexdigest()


def model_window(model_dir: pathlib.Path) -> Optional[int]:
    try:
        cfg = json.loads((model_dir / "config.json").read_text())
    except (OSError, ValueError):
        return None
    cfg = cfg.get("text_config", cfg)
    return cfg.get("sliding_window")


def fingerprint(page: int, steps: list[Step], args, mhash: str) -> dict:
    """What an islands-off reference must have been recorded with to stand in for a boot."""
    return {"page": page, "device": args.device, "workload": workload_hash(steps),
            "server_args": common_server_args(args, page),
            "env": common_env(args.device, page, args.kv_page_invariants), "model": mhash}


def make_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="scripts/equality_gate.sh",
        description="Two-boot equality gate: boot the real SGLang server with and without "
                    "--enable-swa-islands (everything else identical), run the same greedy "
                    "workload (cold, cache-hit re-serves, extensions >= 4 decode islands deep "
                    "with mid-run decode-island probes, concurrent shared prefixes, multi-turn), "
                    "require byte-identical outputs, check them against transformers' fp32 "
                    "greedy, and check KV pool conservation from the server's own gauges.",
        epilog="Exit 0: pass. 1: the gate failed (first differing request and token printed). "
               "2: it could not run. The module docstring (scripts/equality_gate.py) explains "
               "the comparison policy, the evidence and the conservation readings.",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true",
                    help="small workload, page 1 only (~1 min on 2 idle cores, plus ~1 min "
                         "for the HF oracle when its cache is cold)")
    ap.add_argument("--pages", default=None,
                    help="comma-separated page sizes (default: 1 with --quick, else 1,16)")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                    help="cpu (default): SglangServer's CPU boot (torch_native, fp32, no graphs). "
                         "cuda: the GPU gate's boot (scripts/gpu_gate.sh); give the backend, "
                         "graphs, KV dtype and speculative mode with --server-args")
    ap.add_argument("--model", default=None, help="model directory (default: the tiny CPU model, "
                    f"window {CPU_WINDOW})")
    ap.add_argument("--chunk", type=int, default=CPU_CHUNK,
                    help=f"--chunked-prefill-size (default {CPU_CHUNK}); prompt lengths scale "
                         f"with it")
    ap.add_argument("--decode-interval", type=int, default=CPU_DECODE_INTERVAL,
                    help=f"--swa-islands-decode-interval for both boots (default "
                         f"{CPU_DECODE_INTERVAL}; the flag's own default would be chunk/4)")
    ap.add_argument("--max-total-tokens", type=int, default=32768,
                    help="full pool size (default 32768, SWA pool 16384 at ratio 0.5: no pool "
                         "pressure for either workload, so a request's cache status is the same "
                         "in both boots)")
    ap.add_argument("--swa-ratio", type=float, default=0.5,
                    help="--swa-full-tokens-ratio (default 0.5)")
    ap.add_argument("--server-args", default="",
                    help="more sglang arguments for both boots (one shell-quoted string)")
    ap.add_argument("--oracle-policy", choices=("strict", "report"), default=None,
                    help="strict: a cold serve that differs from HF (identically in both boots) "
                         "fails the gate; report: it is only noted. Default: strict on cpu (fp32 "
                         "like HF), report on cuda (bf16 weights, fp8 KV)")
    ap.add_argument("--oracle-device", default="cpu",
                    help="device for the HF oracle (default cpu, as islands_harness.hf_oracle; "
                         "the GPU gate uses cuda)")
    ap.add_argument("--omp-threads", type=int, default=2,
                    help="OMP threads per CPU server and for the HF oracle (default 2)")
    ap.add_argument("--negative-control", action="store_true",
                    help="islands boot with the wrong-frontier shim (test/shims/wrong_frontier); "
                         "the gate must FAIL (exit 1)")
    ap.add_argument("--wrong-frontier-shift", type=int, default=None,
                    help="with --negative-control: tokens past the frontier the shim frees "
                         "(default: the cache's window)")
    ap.add_argument("--save-reference", default=None, metavar="FILE",
                    help="write the islands-off boot's prompts and outputs (per page) to FILE")
    ap.add_argument("--reference", default=None, metavar="FILE",
                    help="use FILE (from --save-reference, same workload and arguments) instead "
                         "of booting islands off")
    ap.add_argument("--oracle-cache", default=str(DEFAULT_ORACLE_CACHE),
                    help="HF oracle results cache, keyed by model files and library versions "
                         "('' to disable)")
    ap.add_argument("--kv-page-invariants", action=argparse.BooleanOptionalAction, default=True,
                    help="run the server's per-step free-list double-free / use-after-free check "
                         "(SGLANG_CHECK_KV_PAGE_INVARIANTS=1) in both boots (default on; on CPU it "
                         "adds ~15%% scheduler CPU at a 32768-token pool, but ~5x at 65536)")
    ap.add_argument("--sequential-boots", action="store_true",
                    help="boot one server at a time (default: both start together; the "
                         "workloads always run one boot at a time, and --sleep-on-idle keeps the "
                         "idle one off the CPU)")
    ap.add_argument("--boot-timeout", type=float, default=400.0)
    ap.add_argument("--request-timeout", type=float, default=600.0)
    ap.add_argument("--log-dir", default=str(WORK_DIR / "logs"), help="server logs")
    ap.add_argument("--json-out", default=None, help="write a machine-readable summary here")
    ap.add_argument("--print-commands", action="store_true",
                    help="print each boot's server command line and environment, run nothing")
    return ap


def main(argv: Optional[list[str]] = None) -> int:
    args = make_parser().parse_args(argv)
    pages = [int(p) for p in (args.pages or ("1" if args.quick else "1,16")).split(",")]
    if args.oracle_policy is None:
        args.oracle_policy = "strict" if args.device == "cpu" else "report"
    on_label = "on+shim" if args.negative_control else "on"
    if args.negative_control and not (SHIM_DIR / "sitecustomize.py").is_file():
        print(f"equality gate: error: shim missing: {SHIM_DIR}/sitecustomize.py", file=sys.stderr)
        return 2
    reference = None
    if args.reference:
        try:
            reference = json.loads(pathlib.Path(args.reference).read_text())
        except (OSError, ValueError) as e:
            print(f"equality gate: error: cannot read --reference: {e}", file=sys.stderr)
            return 2

    if args.model:
        model_dir = pathlib.Path(args.model).resolve()
    else:
        from islands_harness.tiny_model import build_tiny_model

        model_dir = build_tiny_model(window=CPU_WINDOW)
    marker = model_dir / ".tiny_model_complete.json"
    vocab_hi = json.loads(marker.read_text()).get("real_vocab", 256) if marker.exists() else 256
    window = model_window(model_dir)
    steps = build_workload(vocab_hi, args.quick, args.decode_interval, args.chunk)
    reqs = all_reqs(steps)
    if args.print_commands:
        for page in pages:
            for label, islands, shim in (("off", False, False),
                                         (on_label, True, args.negative_control)):
                b = Boot(label, model_dir, page, islands, args, shim=shim)
                b.srv.port = 30000
                print(f"# page {page}, islands {label}: "
                      + " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(b.env.items())))
                print(" ".join(shlex.quote(c) for c in b.srv.command()))
        return 0
    say(f"model {model_dir} (window {window}, vocab {vocab_hi}); device {args.device}; pages "
        f"{pages}; chunk {args.chunk}, decode interval {args.decode_interval}; "
        f"{'quick' if args.quick else 'full'} workload {workload_hash(steps)}: {len(reqs)} "
        f"requests, {sum(r.n for r in reqs)} tokens to generate"
        + (f"; NEGATIVE CONTROL (shift {args.wrong_frontier_shift or 'w'})"
           if args.negative_control else ""))
    oracle = Oracle(model_dir, pathlib.Path(args.oracle_cache) if args.oracle_cache else None,
                    args.omp_threads, args.oracle_device)

    failures: list[str] = []
    notes: list[str] = []
    summary: dict[str, Any] = {"pages": {}, "negative_control": args.negative_control,
                               "quick": args.quick, "device": args.device}
    saved_ref: dict[str, Any] = {}
    setup_error: Optional[str] = None
    shim_active = None
    reqs_compared = 0

    for page in pages:
        fp = fingerprint(page, steps, args, model_hash(model_dir)[:16])
        boots: list[Boot] = []
        off: Optional[BootData] = None
        if reference is not None:
            entry = reference.get("pages", {}).get(str(page))
            if not entry or entry.get("fingerprint") != fp:
                print(f"equality gate: error: --reference has no matching islands-off run for "
                      f"page {page} (different workload, arguments or model)", file=sys.stderr)
                return 2
            off = BootData(entry["prompts"],
                           {k: Served(**v) for k, v in entry["results"].items()})
            say(f"page {page}: islands-off prompts and outputs from {args.reference} "
                f"(recorded by an earlier boot; fingerprint matches)")
        else:
            boots.append(Boot("off", model_dir, page, False, args))
        on = Boot(on_label.replace("+", "-"), model_dir, page, True, args,
                  shim=args.negative_control)
        boots.append(on)

        say(f"page {page}: booting {', '.join(b.label for b in boots)} "
            f"({'one at a time' if args.sequential_boots else 'together'}); the only difference: "
            f"--enable-swa-islands" + (" + the wrong-frontier shim" if on.shim else ""))
        say(f"  server args: {' '.join(on.server_args)}")
        say(f"  server env:  {' '.join(f'{k}={v}' for k, v in sorted(on.env.items()))}")
        try:
            if args.sequential_boots:
                for b in boots:
                    b.start()
            else:
                ths = [threading.Thread(target=b.start) for b in boots]
                [th.start() for th in ths]
                [th.join() for th in ths]
            for b in boots:
                if b.error:
                    setup_error = f"[{b.label} p{page}] {b.error}"
                    break
                say(f"  [{b.label} p{page}] up in {b.srv.boot_s:.1f} s, log {b.srv.log_path}")
            if setup_error is None:
                for b in boots:
                    say(f"  [{b.label} p{page}] workload ...")
                    b.run(steps)
                    if b.error:
                        setup_error = f"[{b.label} p{page}] {b.error}"
                        break
                    b.end_of_workload_and_flush()
                    b.after_flush()
                    say(f"  [{b.label} p{page}] workload done in {b.work_s:.1f} s; flushed, "
                        f"pools read")
        finally:
            for b in boots:
                b.stop()
        if setup_error:
            break

        if off is None:
            off = BootData(boots[0].prompts, boots[0].results)
            saved_ref[str(page)] = {"fingerprint": fp, "prompts": off.prompts, "results": {
                k: dataclasses.asdict(v) for k, v in off.results.items()}}
        on_data = BootData(on.prompts, on.results)

        t = time.monotonic()
        say(f"page {page}: HF oracle (transformers fp32 greedy) ...")
        for r in reqs:  # warm the cache (and the timing) before the report
            oracle(off.prompts[r.name], r.n)
            if on_data.prompts[r.name] != off.prompts[r.name]:
                oracle(on_data.prompts[r.name], r.n)
        say(f"page {page}: HF oracle ready in {time.monotonic() - t:.1f} s ({oracle.calls} "
            f"computed so far, {oracle.hits} from the cache)")
        say(f"page {page}: results (off vs {on_label}, like-for-like cache status; HF = "
            f"transformers fp32 greedy, policy {args.oracle_policy})")
        f_page, n_page, s_page = evaluate(page, steps, off, on_data, oracle,
                                          args.oracle_policy == "strict", on_label)
        reqs_compared += len(reqs)
        failures += f_page
        notes += n_page
        counters = island_counters(on.metrics_end)
        failures += evidence(page, steps, on_data, counters, args.decode_interval, on_label,
                             off)
        for b in boots:
            print_conservation(f"{b.label} p{page}", b.readings)
            failures += conservation_check(f"{b.label} p{page}", b.readings)
            alarms = b.log_alarms()
            if alarms:
                failures.append(f"{b.label} p{page}: the server's own checks fired "
                                f"({len(alarms)} log lines), first: {alarms[0]}")
        if len(boots) == 2 and all(b.readings.get("end") for b in boots):
            ends = [b.readings["end"] for b in boots]
            say(f"  KV the tree keeps after the workload: SWA off {ends[0]['swa']['evictable']:.0f}"
                f" vs {on_label} {ends[1]['swa']['evictable']:.0f} tokens; full off "
                f"{ends[0]['full']['evictable']:.0f} vs {on_label} "
                f"{ends[1]['full']['evictable']:.0f} tokens")
        if on.shim:
            lines = on.shim_lines()
            shim_active = any("installed" in ln for ln in lines) and any(
                "freed SWA" in ln for ln in lines)
            say(f"  shim: {len(lines)} log lines; " + (lines[-1] if lines else "NOT ACTIVE"))
        summary["pages"][str(page)] = {
            **s_page, "cached_on": {k: v.cached_tokens for k, v in on.results.items()},
            "cached_off": {k: v.cached_tokens for k, v in off.results.items()},
            "conservation": {b.label: b.readings for b in boots},
            "island_counters": counters,
            "boot_s": {b.label: b.srv.boot_s for b in boots},
            "workload_s": {b.label: b.work_s for b in boots}}

    if args.save_reference and saved_ref and setup_error is None:
        p = pathlib.Path(args.save_reference)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps({"pages": saved_ref}))
        say(f"islands-off prompts and outputs saved to {p}")

    for n in notes:
        say("NOTE " + n)
    if setup_error is None and args.negative_control and not shim_active:
        setup_error = "negative control: the wrong-frontier shim did not run in the server"
    summary.update({"failures": failures, "notes": notes, "setup_error": setup_error,
                    "shim_active": shim_active, "seconds": round(time.monotonic() - T0, 1),
                    "oracle": {"computed": oracle.calls, "cached": oracle.hits,
                               "seconds": round(oracle.seconds, 1)}})
    if args.json_out:
        pathlib.Path(args.json_out).parent.mkdir(parents=True, exist_ok=True)
        pathlib.Path(args.json_out).write_text(json.dumps(summary, indent=1, default=str))

    same = sum(c["identical"] for pg in summary["pages"].values()
               for c in pg["per_class"].values())
    ctl = " (negative control)" if args.negative_control else ""
    if setup_error:
        say(f"ERROR {setup_error}")
        print(f"EQUALITY GATE: ERROR{ctl}: could not run: {setup_error.splitlines()[0]}",
              flush=True)
        return 2
    if failures:
        for f in failures[:25]:
            say("FAIL " + f)
        if len(failures) > 25:
            say(f"FAIL ... and {len(failures) - 25} more")
        first = next((pg["first_difference"] for pg in summary["pages"].values()
                      if pg["first_difference"]), None)
        where = (f"; first difference: page {first['page']} request {first['request']} "
                 f"token {first['token_index']}" if first else "")
        print(f"EQUALITY GATE: FAIL{ctl}: {same}/{reqs_compared} requests identical across "
              f"boots, {len(failures)} problem(s){where} [{time.monotonic() - T0:.0f} s]",
              flush=True)
        return 1
    print(f"EQUALITY GATE: PASS: {same}/{reqs_compared} requests identical across boots "
          f"(pages {','.join(map(str, pages))}), islands hit, conservation ok, "
          f"{len(notes)} engine-property note(s) [{time.monotonic() - T0:.0f} s]", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
