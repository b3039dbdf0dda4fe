"""Cache cost benchmark, workload: traffic shaped like a server's, built into a real cache.

Four client kinds, interleaved round robin so the tree mixes them in least-recently-used order
(lengths in units of the window ``w``; chunk ``cp = 4w``):

- ``system``: new users of a shared system prompt (``8w`` tokens, one per 64 clients: 16 users
  each), each one request of a ``w..2w`` message: many requests share a long prefix, then diverge;
- ``turns``: a multi-turn transcript, 4 turns; turn 1 is a ``2w..4w`` opening, each later turn
  re-sends the previous transcript + its output + a new ``w/2..w`` message;
- ``fanout``: questions (``w/2..w``) over a few long documents (``12w``: three chunks, one per 32
  clients: 8 questions each);
- ``long``: a unique prompt of ``8w..16w`` tokens (two to four chunks).

Outputs are ``w/4..w/2`` tokens, at most ``64..128``; decode islands (islands arms) every
``cp/4 = w`` decode tokens, the cache's default. Token ids come from ``random.Random(seed)``; the
next token is a hash of request id and position (``next_token``), so every arm sees the same
requests in the same order, and a rerun the same cache. :func:`drive` runs the clients through
``islands_harness.sim.MiniScheduler`` (the real ``Req`` / ``ScheduleBatch`` / ``PrefillAdder`` /
tree cache / pools / allocator), keeping at most ``2 * max_running`` requests waiting, the way a
server's clients trickle in rather than queue thousands at once. :class:`Probes` draws the keys
and requests the timed operations use from what the build cached.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import random
from typing import Any, Dict, Iterator, List, Optional, Tuple

import _bench_path  # noqa: F401  (puts the repository root and benchmarks/ on sys.path)

TOKEN_LO, TOKEN_HI = 4, 1000  # ids the tiny config's vocabulary (1024) holds; 0..3 are special
KINDS = ("system", "turns", "fanout", "long")
Spec = Tuple[List[int], int]  # (input ids, max new tokens)
Client = Iterator[Spec]  # yields a request, receives its output ids (None: the client is done)


def next_token(req) -> int:
    """The synthetic next token: a hash of the request id and position (deterministic)."""
    h = hashlib.blake2b(f"{req.rid}:{len(req.output_ids)}".encode(), digest_size=4).digest()
    return TOKEN_LO + int.from_bytes(h, "little") % (TOKEN_HI - TOKEN_LO)


@dataclasses.dataclass(frozen=True)
class Shape:
    """One cache shape: the window as the cache counts it (``w``), page 1, chunk ``4w``."""

    window: int

    @property
    def chunk(self) -> int:
        return 4 * self.window

    @property
    def decode_interval(self) -> int:
        """Decode tokens between decode islands: the cache's default, ``cp/4`` (= ``w``)."""
        return self.chunk // 4

    @property
    def hf_window(self) -> int:
        """The tiny Laguna config's ``sliding_window``: the cache's window is one more."""
        return self.window - 1


class Traffic:
    """The token ids of one workload (seeded), and its clients."""

    def __init__(self, shape: Shape, n_clients: int, seed: int):
        self.w = shape.window
        self.n = n_clients
        self.rng = random.Random(seed * 1_000_003 + shape.window)
        self.systems = [self.ids(8 * self.w) for _ in range(max(1, n_clients // 64))]
        self.docs = [self.ids(12 * self.w) for _ in range(max(1, n_clients // 32))]

    def ids(self, n: int) -> List[int]:
        return [self.rng.randrange(TOKEN_LO, TOKEN_HI) for _ in range(n)]

    def span(self, lo_w: float, hi_w: float) -> int:
        return self.rng.randint(max(1, int(lo_w * self.w)), max(1, int(hi_w * self.w)))

    def out_len(self) -> int:
        return self.rng.randint(min(self.w // 4, 64), min(self.w // 2, 128))

    def clients(self) -> List[Client]:
        """``n_clients`` clients, kinds round robin (the draws happen here, in client order)."""
        out: List[Client] = []
        for i in range(self.n):
            kind = KINDS[i % len(KINDS)]
            if kind == "system":
                sys_ids = self.systems[(i // len(KINDS)) % len(self.systems)]
                out.append(_one(sys_ids + self.ids(self.span(1, 2)), self.out_len()))
            elif kind == "turns":
                msgs = [self.ids(self.span(2, 4))] + [self.ids(self.span(0.5, 1)) for _ in range(3)]
                out.append(_turns(msgs, [self.out_len() for _ in msgs]))
            elif kind == "fanout":
                doc = self.docs[(i // len(KINDS)) % len(self.docs)]
                out.append(_one(doc + self.ids(self.span(0.5, 1)), self.out_len()))
            else:
                out.append(_one(self.ids(self.span(8, 16)), self.out_len()))
        return out


def _one(prompt: List[int], max_new: int) -> Client:
    yield (prompt, max_new)


def _turns(msgs: List[List[int]], outs: List[int]) -> Client:
    transcript: List[int] = []
    for msg, max_new in zip(msgs, outs):
        prompt = transcript + msg
        output = yield (prompt, max_new)
        transcript = prompt + list(output)


def _start(client: Client, output: Optional[List[int]]) -> Optional[Spec]:
    try:
        return next(client) if output is None else client.send(output)
    except StopIteration:
        return None


def drive(sched, clients: List[Client], prefix: str, max_waiting: int) -> List[Dict[str, Any]]:
    """Run ``clients`` to completion through ``sched``; a row per finished request (rid, kind
    index, input and output ids). A client's next request joins the queue when its previous one
    finished; at most ``max_waiting`` requests wait at a time."""
    ready = collections.deque((c, None, k) for k, c in enumerate(clients))
    pending: Dict[str, Tuple[Client, int]] = {}
    rows: List[Dict[str, Any]] = []
    seen, n_sub = len(sched.finished), 0
    while ready or pending:
        while ready and len(sched.waiting) < max_waiting:
            client, output, k = ready.popleft()
            spec = _start(client, output)
            if spec is None:
                continue
            rid = f"{prefix}{k}.{n_sub}"
            n_sub += 1
            sched.submit(rid, spec[0], spec[1])
            pending[rid] = (client, k)
        if not pending:
            break
        if sched.step() is None and sched.idle() and not ready:
            raise RuntimeError(f"the scheduler went idle with {len(pending)} requests pending")
        while seen < len(sched.finished):
            req = sched.finished[seen]
            seen += 1
            client, k = pending.pop(req.rid)
            out = list(req.output_ids)
            rows.append({"rid": req.rid, "kind": KINDS[k % len(KINDS)],
                         "input_ids": list(req.origin_input_ids), "output_ids": out})
            ready.append((client, out, k))
    sched.finished.clear()
    sched.all_reqs.clear()
    return rows


def pool_tokens(estimate: int, window: int) -> int:
    """A pool that holds ``estimate`` tokens (everything the build caches) and the probes."""
    return int(estimate * 1.1) + 256 * window + 8192


def estimate_tokens(shape: Shape, n_clients: int) -> int:
    """An upper bound on the distinct tokens ``n_clients`` clients leave cached (for pool sizes)."""
    w = shape.window
    out = min(w / 2, 128)
    per = {"system": 2 * w + out, "turns": 4 * w + 3 * w + 4 * out, "fanout": w + out,
           "long": 16 * w + out}
    total = sum(per[KINDS[i % len(KINDS)]] for i in range(n_clients))
    total += max(1, n_clients // 64) * 8 * w + max(1, n_clients // 32) * 12 * w
    return int(total)


class Probes:
    """The requests and keys the timed operations use, drawn (seeded) from a built cache's
    finished requests, so they continue or diverge from what the cache holds."""

    def __init__(self, traffic: Traffic, rows: List[Dict[str, Any]], seed: int):
        self.t = traffic
        self.w = traffic.w
        self.rng = random.Random(seed * 7_919 + traffic.w)
        self.by_kind = {k: [r for r in rows if r["kind"] == k] for k in KINDS}
        self.transcripts = self.by_kind["turns"] or rows
        self.long = self.by_kind["long"] or rows

    def fresh(self, n: int) -> List[int]:
        return [self.rng.randrange(TOKEN_LO, TOKEN_HI) for _ in range(n)]

    def pick(self, rows: List[Dict[str, Any]]) -> Dict[str, Any]:
        return rows[self.rng.randrange(len(rows))]

    def continue_key(self) -> List[int]:
        """A cached transcript (prompt + output) and a new ``w``-token message."""
        r = self.pick(self.transcripts)
        return r["input_ids"] + r["output_ids"] + self.fresh(self.w)

    def transcript(self) -> List[int]:
        r = self.pick(self.transcripts)
        return r["input_ids"] + r["output_ids"]

    def diverge_key(self) -> List[int]:
        """A cached long prompt cut at a random point past its first window, then new tokens."""
        ids = self.pick(self.long)["input_ids"]
        cut = self.rng.randrange(min(self.w, len(ids) - 1), len(ids))
        return ids[:cut] + self.fresh(self.w)

    def queued(self) -> List[int]:
        """A request a server's queue holds: a new user of a shared system prompt, the next turn
        of a cached transcript, or a new question on a cached document (in turn)."""
        k = self.rng.randrange(3)
        if k == 0:
            return self.t.systems[self.rng.randrange(len(self.t.systems))] + self.fresh(self.w)
        if k == 1:
            return self.continue_key()
        return self.t.docs[self.rng.randrange(len(self.t.docs))] + self.fresh(self.w // 2)

    def commit_probes(self) -> List[Spec]:
        """Requests whose commits and decode islands are timed: 4 next turns of cached transcripts
        with a two-chunk message, 4 new questions on cached documents, 2 new four-chunk prompts;
        each decodes two decode-island intervals and a bit."""
        out_len = 2 * Shape(self.w).decode_interval + 2
        cp = Shape(self.w).chunk
        specs = [(self.transcript() + self.fresh(2 * cp), out_len) for _ in range(4)]
        specs += [(self.t.docs[self.rng.randrange(len(self.t.docs))] + self.fresh(self.w), out_len)
                  for _ in range(4)]
        specs += [(self.fresh(4 * cp), out_len) for _ in range(2)]
        return specs

    def sibling_probe(self) -> Tuple[List[int], List[List[int]]]:
        """A new user of a shared system prompt with a two-chunk message, and two requests that
        share the message's first chunk and a window, then diverge (the next edits of the same
        message): queued behind it, they continue along every path it commits."""
        system = self.t.systems[self.rng.randrange(len(self.t.systems))]
        msg = self.fresh(2 * Shape(self.w).chunk)
        keep = Shape(self.w).chunk + self.w
        return system + msg, [system + msg[:keep] + self.fresh(self.w) for _ in range(2)]
