#!/usr/bin/env python
"""Soak: the real CPU server (the tiny hybrid-SWA model) under a seeded random mix of traffic and
faults for a fixed time; every greedy output checked against transformers, pools, tree, log, RSS
and throughput checked at idle points in between.

    .venv/bin/python benchmarks/soak.py --quick                  # about 4 minutes (CI: test/server/test_soak.py)
    .venv/bin/python benchmarks/soak.py --minutes 30 --json benchmarks/results/soak_30min.json
    .venv/bin/python benchmarks/soak.py --quick --islands off    # the same soak with islands off
    .venv/bin/python benchmarks/soak.py --quick --target main    # islands on sglang 0.5.23

Targets: ``0.5.15`` (default: the server runs in this interpreter, `.venv`) and ``main`` (sglang
0.5.23: islands on run in `.venv-main-islands`, islands off is stock 0.5.23 in `.venv-main`;
``--eviction window`` adds ``--swa-islands-eviction window``).

Server: page 1, chunked prefill 128, the tiny model's context (4096), ``--max-running-requests 8``
(clients: 12), a full pool of 2,400 tokens and an SWA pool of 20% of it (480 tokens: a chunk plus
eight islands fit; upstream's hold of a chunk per request does not), ``--swa-full-tokens-ratio 0.2``,
``SGLANG_INIT_NEW_TOKEN_RATIO=0.05`` (admission over-commits, so decode runs out of KV and
retracts), ``SGLANG_DEBUG_MEMORY_POOL=1`` (the allocator's double-free and bounds checks),
``SGLANG_REQUEST_STATE_WAIT_TIMEOUT=1``, ``--enable-metrics``; ``--enable-swa-islands`` (default
reclaim) unless ``--islands off``. Upstream's KV canary (``--kv-canary``) is not run: its kernels
are triton / CUDA JIT (``sglang/jit_kernel/kv_canary``), which do not run on CPU.

Traffic: each client thread draws one action at a time (weights in ``ACTIONS``) from its own seeded
generator: a question on one of four shared documents (fan-out), the next turn of its own
conversation (multi-turn transcripts), an edit of a finished transcript cut at a random point
(branch), a prompt of several chunks, a streaming request read to the end, a streaming request
whose connection is killed after 0..8 events (client disconnect, mid-prefill or mid-decode), a
request aborted by rid (``/abort_request``) after a random delay, a plain ``/flush_cache`` (400
while busy, 200 when idle), or a malformed request (ids outside the vocabulary, negative, empty or
non-integer ids, a prompt longer than the context, a negative or absurd ``max_new_tokens``), which
must get 400.

Checks, each a failure of the run (exit 1) when violated:

- every request that finished has exactly the output transformers' greedy decoding gives for its
  ids (``islands_harness.hf_oracle``, computed at each idle point for the requests since the last,
  while traffic is paused: wall time is about twice the traffic time); an aborted one, a prefix;
- every malformed request got 400; no answer was a 5xx; the server never died;
- at every idle point (traffic paused, the scheduler idle): nothing in use (``/get_load``, ``/v1/loads`` on 0.5.23), and
  after ``/flush_cache`` the pool gauges equal the ones read the same way after boot (both pools
  back to the baseline: the tree evicts to empty);
- the server log has no traceback;
- RSS at the last idle point is within 10% (plus 64 MiB) of the first.

Reported per idle point: requests by kind, retractions (``sglang:num_retracted_requests_total``),
cached tokens of the tree before the flush, RSS, and the interval's tokens (prompt + completion) per
server CPU-second, which should stay flat.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
import random
import re
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Optional

import requests

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from islands_harness.client import StreamingRequest, generate_body  # noqa: E402
from sglang.srt.mem_cache.swa_island_formulas import EVICTION_ORDERS  # noqa: E402
from islands_harness.ops import (  # noqa: E402
    flush,
    flush_ok,
    kill_connection,
    mval,
    open_request,
    pool_snapshot,
    read_events,
    scrape,
    wait_idle,
)
from islands_harness.server import (  # noqa: E402
    ServerError,
    SglangServer,
    drop_benign_warnings,
    process_tree_cpu_seconds,
    raise_keyboard_interrupt_on_signals,
)

WINDOW = 32
NEAR_TIE_LOGITS = 1e-5
"""A differing output is a near-tie flip, not a mismatch, when at its first difference the
reference's two best next tokens are less than this many logits apart (float32 summation noise:
the flips seen measured 2e-7 to 2e-6, and transformers' own ``generate`` and single forward pass
disagreed on two of them) and ours is one of the two. Any other difference fails the soak."""
FULL_POOL = 2400
SWA_RATIO = 0.2
MAX_RUNNING = 8
CONTEXT = 4096
SERVER_ARGS = [
    "--page-size", "1", "--chunked-prefill-size", "128", "--max-running-requests",
    str(MAX_RUNNING), "--max-total-tokens", str(FULL_POOL), "--swa-full-tokens-ratio",
    str(SWA_RATIO), "--enable-metrics", "--decode-log-interval", "1", "--sleep-on-idle",
]
SERVER_ENV = {
    "SGLANG_DEBUG_MEMORY_POOL": "1",
    "SGLANG_INIT_NEW_TOKEN_RATIO": "0.05",
    "SGLANG_REQUEST_STATE_WAIT_TIMEOUT": "1",
}
ACTIONS = {  # action: weight
    "fanout": 20, "turn": 20, "edit": 10, "long": 8, "stream": 8, "disconnect": 10,
    "abort": 8, "flush": 4, "malformed": 8,
}
MAX_TRANSCRIPT = 1800  # a conversation longer than this starts over
RETRACTED = "sglang:num_retracted_requests_total"
REQUEST_TIMEOUT_S = 900
TRACEBACK = re.compile(r"^Traceback \(most recent call last\)", re.M)
def count_tracebacks(log: str) -> tuple[int, dict[str, int]]:
    """Tracebacks in a server log, and, apart, those of upstream's benign warnings
    (``islands_harness.server.drop_benign_warnings``)."""
    rest, benign = drop_benign_warnings(log)
    return len(TRACEBACK.findall(rest)), benign


@dataclasses.dataclass
class SoakConfig:
    minutes: float = 30.0
    idle_every_s: float = 120.0
    clients: int = 12
    seed: int = 0
    islands: bool = True
    target: str = "0.5.15"
    eviction: Optional[str] = None  # main only: --swa-islands-eviction
    boot_timeout_s: float = 900.0


TARGETS = ("0.5.15", "main")
TARGET_VERSION = {"0.5.15": "0.5.15.post1", "main": "0.5.23"}


def server_command(cfg: SoakConfig) -> tuple[list[str], Optional[str]]:
    """The soak server's extra arguments and interpreter (None: this one) for ``cfg``."""
    args = list(SERVER_ARGS) + (["--enable-swa-islands"] if cfg.islands else [])
    if cfg.eviction is not None:
        if cfg.target != "main" or not cfg.islands:
            raise SystemExit("--eviction needs --target main with islands on")
        args += ["--swa-islands-eviction", cfg.eviction]
    if cfg.target == "0.5.15":
        return args, None
    from islands_harness.main_arm import main_islands_python, main_python

    return args, main_islands_python() if cfg.islands else main_python()


QUICK = dict(minutes=1.5, idle_every_s=30.0)


@dataclasses.dataclass
class Outcome:
    """One request's result as the client saw it."""

    kind: str
    ids: list[int]
    max_new: int
    status: Optional[int] = None  # HTTP status (None: no answer read, e.g. a killed connection)
    output_ids: Optional[list[int]] = None
    finish: Optional[str] = None  # finish_reason type
    error: Optional[str] = None


class Traffic:
    """The seeded request generator and everything the clients record (thread-safe)."""

    def __init__(self, vocab_hi: int, seed: int):
        self.vocab_hi = vocab_hi
        rng = random.Random(f"{seed}-docs")
        self.docs = [self._ids(rng, rng.randint(200, 700)) for _ in range(4)]
        self.lock = threading.Lock()
        self.transcripts: list[list[int]] = []  # finished prompt + output, the latest 50
        self.outcomes: list[Outcome] = []
        self.counts: Counter = Counter()
        self.tokens = 0  # prompt + completion tokens of finished requests

    def _ids(self, rng: random.Random, n: int) -> list[int]:
        return [rng.randrange(4, self.vocab_hi) for _ in range(n)]

    def record(self, o: Outcome) -> None:
        with self.lock:
            self.outcomes.append(o)
            self.counts[o.kind] += 1
            if o.status is not None and o.status >= 500:
                self.counts["http_5xx"] += 1
            if o.finish == "length" and o.output_ids is not None:
                self.tokens += len(o.ids) + len(o.output_ids)
                if o.kind in ("turn", "edit", "fanout"):
                    self.transcripts.append(o.ids + o.output_ids)
                    del self.transcripts[:-50]

    def pick_transcript(self, rng: random.Random) -> Optional[list[int]]:
        with self.lock:
            return list(rng.choice(self.transcripts)) if self.transcripts else None


def malformed_payloads(vocab: int) -> list[tuple[str, dict]]:
    return [
        ("id_at_vocab_size", generate_body([5, 6, vocab], 4)),
        ("negative_id", generate_body([5, -1, 7], 4)),
        ("empty_ids", generate_body([], 4)),
        ("string_ids", generate_body(["a", "b"], 4)),
        ("longer_than_context", generate_body([5] * (CONTEXT + 100), 4)),
        ("negative_max_new_tokens", generate_body([5, 6, 7], -5)),
        ("absurd_max_new_tokens", generate_body([5, 6, 7], 10**9)),
    ]


class Client:
    """One client thread: draws actions until `stop` is set, waits while `pause` is set."""

    def __init__(self, soak: "Soak", index: int):
        self.soak, self.index = soak, index
        self.rng = random.Random(f"{soak.cfg.seed}-client-{index}")
        self.conversation: list[int] = []
        self.n = 0

    def run(self) -> None:
        s = self.soak
        kinds, weights = zip(*ACTIONS.items())
        while not s.stop.is_set():
            if s.pause.is_set():
                s.paused(self.index)
                continue
            s.resume(self.index)
            kind = self.rng.choices(kinds, weights)[0]
            self.n += 1
            try:
                getattr(self, f"do_{kind}")()
            except Exception as e:  # a client-side failure is a finding, not a crash of the soak
                s.traffic.record(Outcome(kind, [], 0, error=f"{type(e).__name__}: {e}"))
        s.resume(self.index)

    # ---- helpers ---------------------------------------------------------------------------
    @property
    def url(self) -> str:
        return self.soak.srv.base_url

    def rid(self) -> str:
        return f"soak-{self.index}-{self.n}"

    def ids(self, n: int) -> list[int]:
        return self.soak.traffic._ids(self.rng, n)

    def generate(self, kind: str, ids: list[int], n: int, rid: Optional[str] = None) -> Outcome:
        extra = {"rid": rid} if rid else {}
        r = requests.post(f"{self.url}/generate", json=generate_body(ids, n, **extra),
                          timeout=REQUEST_TIMEOUT_S)
        o = Outcome(kind, list(ids), n, status=r.status_code)
        if r.status_code == 200:
            j = r.json()
            o.output_ids = list(j.get("output_ids") or [])
            o.finish = ((j.get("meta_info") or {}).get("finish_reason") or {}).get("type")
        else:
            o.error = r.text[:300]
        self.soak.traffic.record(o)
        return o

    # ---- actions ---------------------------------------------------------------------------
    def do_fanout(self) -> None:
        doc = self.rng.choice(self.soak.traffic.docs)
        self.generate("fanout", doc + self.ids(self.rng.randint(16, 64)), self.rng.randint(8, 32))

    def do_turn(self) -> None:
        if not self.conversation or len(self.conversation) > MAX_TRANSCRIPT:
            self.conversation = self.ids(self.rng.randint(100, 400))
        ids = self.conversation + self.ids(self.rng.randint(20, 100))
        o = self.generate("turn", ids, self.rng.randint(8, 32))
        if o.finish == "length":
            self.conversation = ids + o.output_ids
        else:
            self.conversation = []

    def do_edit(self) -> None:
        t = self.soak.traffic.pick_transcript(self.rng)
        if t is None or len(t) < 2:
            return self.do_turn()
        cut = self.rng.randrange(1, len(t))
        self.generate("edit", t[:cut] + self.ids(self.rng.randint(20, 120)),
                      self.rng.randint(8, 32))

    def do_long(self) -> None:
        self.generate("long", self.ids(self.rng.randint(500, 1500)), self.rng.randint(4, 16))

    def do_stream(self) -> None:
        ids, n = self.ids(self.rng.randint(40, 400)), self.rng.randint(64, 256)
        req = StreamingRequest(self.url, ids, n, timeout=REQUEST_TIMEOUT_S, name=self.rid())
        o = Outcome("stream", ids, n)
        try:
            res = req.start().wait(REQUEST_TIMEOUT_S)
            o.status, o.output_ids = 200, list(res.output_ids)
            o.finish = ((res.meta_info or {}).get("finish_reason") or {}).get("type")
        except ServerError as e:
            o.error = str(e)[:300]
            m = re.search(r"returned (\d{3})", o.error)
            o.status = int(m.group(1)) if m else None
        self.soak.traffic.record(o)

    def do_disconnect(self) -> None:
        shared = self.rng.random() < 0.5
        ids = (self.rng.choice(self.soak.traffic.docs) if shared else []) + self.ids(
            self.rng.randint(50, 600))
        k = self.rng.randint(0, 8)
        s = open_request(self.soak.srv, ids, self.rng.randint(64, 200), self.rid(), stream=True)
        try:
            if k:
                read_events(s, k)
        except (ServerError, OSError):
            pass  # finished or refused before k events: still a disconnect
        finally:
            kill_connection(s)
        self.soak.traffic.record(Outcome("disconnect", ids, 0))

    def do_abort(self) -> None:
        ids, n, rid = self.ids(self.rng.randint(40, 600)), self.rng.randint(100, 300), self.rid()
        delay = self.rng.uniform(0.05, 1.5)
        with ThreadPoolExecutor(1) as ex:
            fut = ex.submit(self.generate, "abort", ids, n, rid)
            time.sleep(delay)
            r = requests.post(f"{self.url}/abort_request", json={"rid": rid}, timeout=60)
            if r.status_code >= 500:
                self.soak.traffic.record(Outcome("abort_call", [], 0, status=r.status_code))
            fut.result()

    def do_flush(self) -> None:
        r = flush(self.soak.srv)
        self.soak.traffic.record(Outcome(f"flush_{r.status_code}", [], 0, status=r.status_code))

    def do_malformed(self) -> None:
        name, payload = self.rng.choice(self.soak.malformed)
        r = requests.post(f"{self.url}/generate", json=payload, timeout=REQUEST_TIMEOUT_S)
        self.soak.traffic.record(Outcome(f"malformed_{r.status_code}", [], 0,
                                         status=r.status_code, error=name))


class Soak:
    def __init__(self, cfg: SoakConfig, model_dir: pathlib.Path, vocab: int, real_vocab: int,
                 log_path: pathlib.Path, progress: Callable[[str], None]):
        self.cfg, self.model_dir, self.progress = cfg, model_dir, progress
        args, python = server_command(cfg)
        self.srv = SglangServer(model_dir, args, env=SERVER_ENV, log_path=log_path,
                                boot_timeout_s=cfg.boot_timeout_s, sample_rss=True,
                                python=python)
        self.traffic = Traffic(real_vocab, cfg.seed)
        self.malformed = malformed_payloads(vocab)
        self.stop, self.pause = threading.Event(), threading.Event()
        self._idle_clients: set[int] = set()
        self._cv = threading.Condition()
        self.idle_points: list[dict[str, Any]] = []
        self.failures: list[str] = []
        self._checked_upto = 0  # outcomes[:n] compared with the oracle
        self._ref: dict[tuple, list[int]] = {}
        self._check = {"mismatches": [], "checked": 0, "prefixes": 0}

    def paused(self, index: int) -> None:
        with self._cv:
            self._idle_clients.add(index)
            self._cv.notify_all()
        time.sleep(0.05)

    def resume(self, index: int) -> None:
        with self._cv:
            self._idle_clients.discard(index)

    def _wait_clients_paused(self) -> None:
        with self._cv:
            while len(self._idle_clients) < self.cfg.clients:
                self._cv.wait(0.5)

    def idle_point(self, label: str, t0: float, last: dict[str, Any]) -> dict[str, Any]:
        """Traffic paused: everything idle, then the checks (see the module docstring)."""
        load = wait_idle(self.srv, timeout=REQUEST_TIMEOUT_S)
        samples = scrape(self.srv)
        cached = mval(samples, "sglang:kv_evictable_tokens", 0.0)
        flush_ok(self.srv)
        snap = pool_snapshot(self.srv)
        if self.baseline is None:
            self.baseline = snap
        cpu = process_tree_cpu_seconds(self.srv.pid) or 0.0
        with self.traffic.lock:
            tokens, counts = self.traffic.tokens, dict(self.traffic.counts)
        point = {
            "label": label, "t_s": round(time.monotonic() - t0, 1),
            "tokens_in_use": load.get("num_tokens"), "cached_tokens_before_flush": cached,
            "pools_at_baseline": snap == self.baseline,
            "retractions": mval(samples, RETRACTED, 0.0),
            "rss_mib": round(self.srv.tree_rss_bytes() / 2**20, 1),
            "server_cpu_s": round(cpu, 1), "tokens": tokens, "counts": counts,
        }
        d_cpu = cpu - last.get("server_cpu_s", 0.0)
        d_tok = tokens - last.get("tokens", 0)
        point["tok_per_cpu_s"] = round(d_tok / d_cpu, 1) if last and d_cpu > 0 else None
        if load.get("num_tokens"):
            self.failures.append(f"{label}: {load['num_tokens']} tokens in use once idle")
        if not point["pools_at_baseline"]:
            self.failures.append(f"{label}: pools after flush {snap} != boot {self.baseline}")
        point["outputs_checked"] = self.check_new_outputs()
        point["mismatches"] = len(self._check["mismatches"])
        self.idle_points.append(point)
        served = sum(v for k, v in counts.items() if not k.startswith(("flush", "malformed")))
        self.progress(f"[{label} {point['t_s']:.0f} s] {served} requests, "
                      f"{point['retractions']:.0f} retractions, pools "
                      f"{'at baseline' if point['pools_at_baseline'] else 'LEAKED'}, "
                      f"RSS {point['rss_mib']:.0f} MiB, {point['tok_per_cpu_s']} tok/CPU-s, "
                      f"{point['outputs_checked']} outputs checked, {point['mismatches']} mismatches")
        return point

    def run(self) -> dict[str, Any]:
        self.srv.start()
        self.progress(f"server healthy in {self.srv.boot_s:.0f} s (islands "
                      f"{'on' if self.cfg.islands else 'off'}); log {self.srv.log_path}")
        t0 = time.monotonic()
        self.baseline = None
        last = self.idle_point("boot", t0, {})  # its pool snapshot is the baseline
        threads = [threading.Thread(target=Client(self, i).run, name=f"client-{i}", daemon=True)
                   for i in range(self.cfg.clients)]
        for t in threads:
            t.start()
        traffic_s, k = 0.0, 0  # seconds of traffic so far (idle points excluded)
        try:
            while traffic_s < self.cfg.minutes * 60 and self.srv.proc.poll() is None:
                run_s = min(self.cfg.idle_every_s, self.cfg.minutes * 60 - traffic_s)
                time.sleep(run_s)
                traffic_s += run_s
                self.pause.set()
                self._wait_clients_paused()
                if self.srv.proc.poll() is not None or traffic_s >= self.cfg.minutes * 60:
                    break
                k += 1
                last = self.idle_point(f"idle {k}", t0, last)
                self.pause.clear()
        finally:
            self.stop.set()
            self.pause.clear()
            for t in threads:
                t.join(timeout=REQUEST_TIMEOUT_S)
        alive = self.srv.proc.poll() is None
        if alive:
            self.idle_point("end", t0, last)
        else:
            self.failures.append(f"the server died (exit {self.srv.proc.returncode})")
        log = self.srv.log_path.read_text(errors="replace")
        self.srv.stop()
        return self.report(alive, log, time.monotonic() - t0)

    def report(self, alive: bool, log: str, wall_s: float) -> dict[str, Any]:
        tb, known_tb = count_tracebacks(log)
        if tb:
            self.failures.append(f"{tb} traceback(s) in the server log")
        outs = self.traffic.outcomes
        self.check_new_outputs()
        ties, mismatches = [], []
        for m in self._check["mismatches"]:
            (ties if is_near_tie(m) else mismatches).append(m)
        checked, prefixes = self._check["checked"], self._check["prefixes"]
        if mismatches:
            self.failures.append(f"{len(mismatches)} output(s) differ from transformers")
        counts = Counter(o.kind for o in outs)
        bad = [o for o in outs if o.kind.startswith("malformed_") and o.status != 400]
        if bad:
            self.failures.append(f"{len(bad)} malformed request(s) not answered 400: "
                                 f"{sorted({(o.error, o.status) for o in bad})}")
        errors = [o for o in outs if o.error and not o.kind.startswith(("malformed", "flush"))
                  and o.status not in (400,)]
        if errors:
            self.failures.append(f"{len(errors)} request(s) failed: {errors[0].kind}: "
                                 f"{errors[0].error}")
        fivexx = sum(1 for o in outs if o.status is not None and o.status >= 500)
        if fivexx:
            self.failures.append(f"{fivexx} 5xx answer(s)")
        rss = [p["rss_mib"] for p in self.idle_points]
        if len(rss) >= 2 and rss[-1] > rss[0] * 1.10 + 64:
            self.failures.append(f"RSS grew from {rss[0]} to {rss[-1]} MiB")
        aborted = sum(1 for o in outs if o.kind == "abort" and o.finish == "abort")
        return {
            "config": dataclasses.asdict(self.cfg), "server_args": self.srv.extra_args,
            "server_env": SERVER_ENV, "wall_s": round(wall_s, 1), "alive": alive,
            "requests": counts, "aborted_before_finishing": aborted,
            "outputs_checked": checked, "abort_prefixes_checked": prefixes,
            "mismatches": mismatches[:20], "mismatch_count": len(mismatches),
            "near_ties": ties[:20], "near_tie_count": len(ties),
            "leaks": sum(1 for p in self.idle_points if not p["pools_at_baseline"]),
            "tracebacks": tb, "known_warning_tracebacks": known_tb, "http_5xx": fivexx,
            "retractions": self.idle_points[-1]["retractions"] if self.idle_points else None,
            "peak_rss_mib": round(self.srv.peak_rss_bytes / 2**20, 1),
            "idle_points": self.idle_points, "failures": self.failures,
            "passed": not self.failures,
        }

    def check_new_outputs(self) -> int:
        """Compare the outcomes recorded since the last call with transformers' greedy decoding
        (every finished request exactly, every aborted one as a prefix), while traffic is paused.
        Returns how many were compared."""
        from islands_harness.hf_oracle import greedy_decode_one, next_token_margin

        with self.traffic.lock:
            new = self.traffic.outcomes[self._checked_upto:]
            self._checked_upto += len(new)
        todo = [o for o in new if o.output_ids is not None and o.status == 200
                and o.finish in ("length", "abort")]
        for o in todo:
            key = (tuple(o.ids), o.max_new)
            if key not in self._ref:
                self._ref[key] = greedy_decode_one(self.model_dir, o.ids, o.max_new)
            want = self._ref[key]
            if o.finish == "length":
                self._check["checked"] += 1
                ok = o.output_ids == want
            else:
                self._check["prefixes"] += 1
                ok = o.output_ids == want[: len(o.output_ids)]
            if not ok:
                first = next((i for i, (a, b) in enumerate(zip(o.output_ids, want)) if a != b),
                             min(len(o.output_ids), len(want)))
                # the reference's next-token margin where the outputs part: a near-tie (a margin
                # of float noise) points at summation order, a wide one at wrong KV
                tie = (next_token_margin(self.model_dir, list(o.ids) + want[:first])
                       if first < min(len(o.output_ids), len(want)) else None)
                self._check["mismatches"].append({
                    "kind": o.kind, "prompt_tokens": len(o.ids), "max_new": o.max_new,
                    "finish": o.finish, "first_diff": first, "reference_next": tie,
                    "prompt_ids": list(o.ids), "output_ids": list(o.output_ids),
                    "reference_ids": list(want)})
        return len(todo)


def is_near_tie(m: dict[str, Any]) -> bool:
    """Whether the differing output ``m`` (a ``mismatches`` entry) parts from the reference at a
    near-tie (:data:`NEAR_TIE_LOGITS`) by taking one of the reference's two best tokens."""
    tie, first = m.get("reference_next"), m["first_diff"]
    return (tie is not None and tie["margin"] < NEAR_TIE_LOGITS
            and first < len(m.get("output_ids", ()))
            and m["output_ids"][first] in (tie["top"], tie["runner_up"]))


def to_markdown(rep: dict[str, Any], command: Optional[str] = None) -> str:
    """The soak's markdown from its JSON report alone: the target, the date and the command are
    the report's own (``config.target``, ``date``, ``command``); ``notes``, paragraphs added by
    hand after the run, close it. Reports from before these were recorded (2026-12-05): the title
    names no target where ``config`` has none (those runs were all sglang 0.5.15.post1), the date
    is said to be unrecorded, and the command is ``command`` if given."""
    c = rep["config"]
    target = c.get("target")
    date = rep.get("date")
    command = rep.get("command") or command or "(not recorded)"
    lines = [
        "# Soak: " + (f"sglang {TARGET_VERSION[target]}, " if target else "") + "islands "
        f"{'on' if c['islands'] else 'off'}"
        + (f" (eviction {c['eviction']})" if c.get("eviction") else "")
        + f", {c['minutes']} min, seed {c['seed']}",
        "", f"Generated by `benchmarks/soak.py` "
        + (f"on {date}." if date else "(date not recorded)."), "",
        "Command:", "", "```", command, "```", "",
        f"Server arguments: `{' '.join(rep['server_args'])}`; environment: "
        f"`{' '.join(f'{k}={v}' for k, v in rep['server_env'].items())}`.", "",
        f"**{'PASS' if rep['passed'] else 'FAIL'}**: {rep['mismatch_count']} mismatches, "
        f"{rep['leaks']} leaks, {rep['tracebacks']} tracebacks, {rep['http_5xx']} 5xx, server "
        f"{'alive' if rep['alive'] else 'DEAD'}; {rep['outputs_checked']} finished outputs and "
        f"{rep['abort_prefixes_checked']} aborted ones checked against transformers"
        + (f"; {rep['near_tie_count']} near-tie flip(s) apart (at their first difference the "
           f"reference's two best tokens lie less than {NEAR_TIE_LOGITS:g} logits apart and ours "
           "is one of them)" if rep.get("near_tie_count") else "") + ".", "",
    ]
    for warning, n in rep.get("known_warning_tracebacks", {}).items():
        lines += [f"Not counted: {n} traceback(s) in the server's `{warning}` warning (sglang "
                  "0.5.23 posts /freeze_gc at boot, before its port accepts connections; "
                  "`islands_harness.server.BENIGN_TRACEBACK_WARNINGS`).", ""]
    if rep["failures"]:
        lines += ["Failures:", ""] + [f"- {f}" for f in rep["failures"]] + [""]
    differing = rep.get("mismatches", []) + rep.get("near_ties", [])
    if differing:
        lines += ["| differing output | prompt tokens | max new | finish | first difference | "
                  "reference's next-token margin there |", "|---|---|---|---|---|---|"]
        for m in differing:
            tie = m.get("reference_next")
            margin = "–" if tie is None else f"{tie['margin']:.3g}"
            kind = f"{m['kind']} (near tie)" if is_near_tie(m) else m["kind"]
            lines.append(f"| {kind} | {m['prompt_tokens']} | {m['max_new']} | {m['finish']} "
                         f"| {m['first_diff']} | {margin} |")
        lines.append("")
    lines += ["| requests | count |", "|---|---|"]
    for k, v in sorted(rep["requests"].items()):
        lines.append(f"| {k} | {v} |")
    lines += ["", f"Aborted before finishing: {rep['aborted_before_finishing']}; retractions: "
              f"{rep['retractions']:.0f}; peak RSS {rep['peak_rss_mib']} MiB.", "",
              "| idle point | t (s) | finished tokens | retractions | cached before flush | "
              "pools at baseline | RSS (MiB) | tokens / server CPU-s (interval) |",
              "|---|---|---|---|---|---|---|---|"]
    for p in rep["idle_points"]:
        lines.append(f"| {p['label']} | {p['t_s']} | {p['tokens']} | {p['retractions']:.0f} | "
                     f"{p['cached_tokens_before_flush']:.0f} | {p['pools_at_baseline']} | "
                     f"{p['rss_mib']} | {p['tok_per_cpu_s']} |")
    for note in rep.get("notes", []):
        lines += ["", note]
    return "\n".join(lines) + "\n"


def write_md(rep: dict[str, Any], path: pathlib.Path, command: Optional[str] = None) -> None:
    """Write :func:`to_markdown` of ``rep`` to ``path`` (``command``: only for a report that does
    not record its own)."""
    path.write_text(to_markdown(rep, command))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        prog="benchmarks/soak.py", description="\n\n".join(__doc__.split("\n\n")[:2]),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Exit status 1 when a check fails (the report's `failures` say which).")
    ap.add_argument("--quick", action="store_true",
                    help=f"about 4 minutes: {QUICK['minutes']} min of traffic, an idle point "
                         f"every {QUICK['idle_every_s']:.0f} s (CI)")
    ap.add_argument("--minutes", type=float, default=None, help="traffic time (default 30)")
    ap.add_argument("--idle-every", type=float, default=None,
                    help="seconds of traffic between idle points (default 120)")
    ap.add_argument("--clients", type=int, default=SoakConfig.clients,
                    help=f"client threads (default {SoakConfig.clients}; the cap is {MAX_RUNNING})")
    ap.add_argument("--islands", choices=("on", "off"), default="on")
    ap.add_argument("--target", choices=TARGETS, default="0.5.15",
                    help="0.5.15 (default, this interpreter) or main (sglang 0.5.23: "
                         ".venv-main-islands, or .venv-main with --islands off)")
    ap.add_argument("--eviction", choices=EVICTION_ORDERS, default=None,
                    help="main with islands on: --swa-islands-eviction (default: the server's)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None, help="report (default .work/soak/<stamp>.json)")
    ap.add_argument("--md", default=None, help="markdown report (default next to the JSON)")
    a = ap.parse_args(argv)
    cfg = SoakConfig(clients=a.clients, seed=a.seed, islands=a.islands == "on", target=a.target,
                     eviction=a.eviction)
    server_command(cfg)  # a bad combination or a missing venv fails before the model is built
    if a.quick:
        cfg = dataclasses.replace(cfg, **QUICK)
    if a.minutes is not None:
        cfg.minutes = a.minutes
    if a.idle_every is not None:
        cfg.idle_every_s = a.idle_every
    raise_keyboard_interrupt_on_signals()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out_json = pathlib.Path(a.json) if a.json else ROOT / ".work" / "soak" / f"{stamp}.json"
    out_json.parent.mkdir(parents=True, exist_ok=True)
    out_md = pathlib.Path(a.md) if a.md else out_json.with_suffix(".md")
    log_path = ROOT / ".work" / "soak" / f"server-{a.target}-{a.islands}-{stamp}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)

    def progress(msg: str) -> None:
        print(f"[soak {time.strftime('%H:%M:%S')}] {msg}", flush=True)

    from islands_harness.tiny_model import MARKER, build_tiny_model

    model = build_tiny_model(window=WINDOW)
    vocab = json.loads((model / "config.json").read_text())["vocab_size"]
    real_vocab = json.loads((model / MARKER).read_text())["real_vocab"]
    progress(f"sglang {TARGET_VERSION[cfg.target]}, {cfg.minutes} min, {cfg.clients} clients, "
             f"idle point every {cfg.idle_every_s:.0f} s, islands {a.islands}, seed {cfg.seed}")
    soak = Soak(cfg, model, vocab, real_vocab, log_path, progress)
    try:
        rep = soak.run()
    finally:
        soak.srv.stop()
    # what the markdown says of the run is the report's own: the markdown renders from it alone
    rep["command"] = " ".join([".venv/bin/python", "benchmarks/soak.py", *(argv or sys.argv[1:])])
    rep["date"] = time.strftime("%Y-%m-%d %H:%M")
    out_json.write_text(json.dumps(rep, indent=1) + "\n")
    write_md(rep, out_md)
    progress(f"{'PASS' if rep['passed'] else 'FAIL'}: {rep['mismatch_count']} mismatches, "
             f"{rep['leaks']} leaks, {rep['tracebacks']} tracebacks; wrote {out_json}, {out_md}")
    for f in rep["failures"]:
        progress(f"failure: {f}")
    return 0 if rep["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
