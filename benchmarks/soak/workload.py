"""The soak's traffic: each client thread draws one action at a time (weights in ``ACTIONS``) from
its own seeded generator and records what it saw (``Outcome``) in the shared ``Traffic``."""

from __future__ import annotations

import dataclasses
import random
import re
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Optional, Protocol

import requests

import _bench_path  # noqa: F401  (the repository root and benchmarks/ on sys.path)
from islands_harness.client import StreamingRequest, generate_body
from islands_harness.ops import flush, kill_connection, open_request, read_events
from islands_harness.server import ServerError, SglangServer
from soak.setup import CONTEXT, REQUEST_TIMEOUT_S

ACTIONS = {  # action: weight
    "fanout": 20, "turn": 20, "edit": 10, "long": 8, "stream": 8, "disconnect": 10,
    "abort": 8, "flush": 4, "malformed": 8,
}
MAX_TRANSCRIPT = 1800  # a conversation longer than this starts over
ABORT_DELAY_MAX_S = {"laguna": 1.5, "gemma4": 6.0}
"""An abort by rid follows its request after ``uniform(0.05, max)`` seconds: Gemma 4 (with a
drafter, on the shared CPU) queues and prefills for longer than 1.5 s, so a shorter reach never
cuts its decode (mid-verify under speculative decoding)."""


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
    events: Optional[int] = None  # a disconnect: stream events read before the kill (0: none)


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


UNCHECKED_IDS = ("id_at_vocab_size", "negative_id")
"""The malformed requests a server without a vocabulary check (stock sglang 0.5.23: its fix is
``patches-main/0002``, islands series only) does not refuse: the id reaches ``F.embedding``,
whose ``IndexError`` takes the whole server down. Not sent to stock main."""


def malformed_payloads(vocab: int, *, vocab_checked: bool = True) -> list[tuple[str, dict]]:
    """The malformed requests (each must get 400): ``vocab`` is the embedding's rows (the first
    id out of vocabulary); without ``vocab_checked``, none of ``UNCHECKED_IDS``."""
    payloads = [
        ("id_at_vocab_size", generate_body([5, 6, vocab], 4)),
        ("negative_id", generate_body([5, -1, 7], 4)),
        ("empty_ids", generate_body([], 4)),
        ("string_ids", generate_body(["a", "b"], 4)),
        ("longer_than_context", generate_body([5] * (CONTEXT + 100), 4)),
        ("negative_max_new_tokens", generate_body([5, 6, 7], -5)),
        ("absurd_max_new_tokens", generate_body([5, 6, 7], 10**9)),
    ]
    return [p for p in payloads if vocab_checked or p[0] not in UNCHECKED_IDS]


class SoakState(Protocol):
    """What a client reads of the running soak (`soak.run.Soak` is one): its configuration (the
    seed), server, traffic record and malformed payloads."""

    cfg: Any
    srv: SglangServer
    traffic: Traffic
    malformed: list[tuple[str, dict]]


class Client:
    """One client thread: draws actions until `stop` is set, waits while `pause` is set."""

    def __init__(self, soak: SoakState, index: int):
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
        events = 0  # each event carries new tokens: after one, the request is decoding
        try:
            if k:
                events = read_events(s, k)
        except (ServerError, OSError):
            pass  # finished or refused before k events: still a disconnect (counted as 0)
        finally:
            kill_connection(s)
        self.soak.traffic.record(Outcome("disconnect", ids, 0, events=events))

    def do_abort(self) -> None:
        ids, n, rid = self.ids(self.rng.randint(40, 600)), self.rng.randint(100, 300), self.rid()
        delay = self.rng.uniform(0.05, ABORT_DELAY_MAX_S[self.soak.cfg.model])
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
