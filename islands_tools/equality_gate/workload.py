"""Equality gate, workload: the requests both boots serve, in order, and its hash.

A workload is a list of steps; each step is one or more /generate calls (greedy, ignore_eos, on
token ids). Lengths are tokens and scale with the chunked-prefill size (the CPU shape is chunk
512, window 32, decode interval 64). The classes, and why each exists, are in the docstring of
scripts/equality_gate.py. Every prompt comes from one seeded ``random.Random``, drawn in the order
the classes appear, so a (vocab, quick, interval, chunk, seed) tuple gives the same workload.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
from typing import Optional

CPU_WINDOW = 32
CPU_CHUNK = 512
CPU_DECODE_INTERVAL = 64

CLASSES = ("cold", "reserve", "extension", "concurrent", "multiturn", "junction",
           "junction_pressure")


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


class PromptSource:
    """The workload's random token ids (range [4, vocab_hi)) and its length scale."""

    def __init__(self, vocab_hi: int, chunk: int, seed: int):
        self.rng = random.Random(seed)
        self.vocab_hi = vocab_hi
        self.scale = chunk / CPU_CHUNK
        self.used_first: set[int] = set()

    def ln(self, x: int) -> int:
        """A CPU-shape length ``x`` scaled to the chunk size (at least 8 tokens)."""
        return max(8, int(round(x * self.scale)))

    def toks(self, k: int) -> list[int]:
        return [self.rng.randrange(4, self.vocab_hi) for _ in range(k)]

    def root_prompt(self, k: int) -> list[int]:
        """``k`` tokens with a first token no other root prompt has: a prompt that starts at the
        tree root never matches another's."""
        first = self.rng.randrange(4, self.vocab_hi)
        while first in self.used_first:
            first = self.rng.randrange(4, self.vocab_hi)
        self.used_first.add(first)
        return [first] + self.toks(k - 1)


def cold_and_reserve_steps(src: PromptSource, quick: bool) -> tuple[list[Step], dict]:
    """Cold serves of distinct prompts, then cache-hit re-serves of the same prompts; also
    returns the cold prompts by length."""
    ln = src.ln
    cold_lens = [40, ln(300), ln(1100)] if quick else [20, 33, ln(300), ln(700), ln(1100),
                                                       ln(1600)]
    cold_n = 16 if quick else 24
    cold = {k: src.root_prompt(k) for k in cold_lens}
    steps = [Step("seq", [Req(f"cold_len{k}", "cold", "cold", cold_n, ids=cold[k])])
             for k in cold_lens]
    steps += [Step("seq", [Req(f"reserve_len{k}", "reserve", "hit", cold_n, ids=cold[k])])
              for k in cold_lens]
    return steps, cold


def extension_steps(src: PromptSource, quick: bool, interval: int) -> list[Step]:
    """Extensions. Each link generates 4 decode intervals (+8); the next link's prompt is its
    prompt + output; probes re-send prompt + output[:k] while the link still runs, k just past its
    j-th decode island (islands end near prompt + j*interval), sent 8 tokens later, long before
    island j+1 would tombstone island j."""
    steps: list[Step] = []
    link_n = 4 * interval + 8
    n_links = 1 if quick else 2
    probe_islands = (2, 3)  # two chances: on a fast GPU a probe can miss its island's window
    prev = Req("ext_base", "extension", "cold", link_n, ids=src.root_prompt(src.ln(600)))
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
    return steps


def concurrent_steps(src: PromptSource, quick: bool, shared: list[int]) -> list[Step]:
    """Requests sharing the cached prefix ``shared``, fired together, then re-served together."""
    suffix_lens = [8, 40, 90, 200] if quick else [8, 25, 40, 60, 90, 130, 200, 330]
    conc_n = 16 if quick else 24
    conc = [Req(f"conc_s{s}", "concurrent", "hit", conc_n, ids=shared + src.toks(s))
            for s in suffix_lens]
    return [Step("conc", conc),
            Step("conc", [dataclasses.replace(r, name=r.name.replace("conc_", "conc_re_"))
                          for r in conc])]


def multiturn_steps(src: PromptSource, quick: bool, interval: int) -> list[Step]:
    """Multi-turn transcripts (distinct system prompts: a branch point inside another
    conversation's tombstones is not a match end with islands, by design)."""
    steps: list[Step] = []
    turn_ns = [interval + 8, interval + 8, 32] if quick else [interval + 8] * 3 + [32]
    for c in range(1 if quick else 2):
        prev_turn: Optional[Req] = None
        for t, n in enumerate(turn_ns):
            if prev_turn is None:
                r = Req(f"chat{c}_turn0", "multiturn", "cold", n,
                        ids=src.root_prompt(src.ln(200)) + src.toks(30))
            else:
                r = Req(f"chat{c}_turn{t}", "multiturn", "hit", n, parent=prev_turn.name,
                        extra=src.toks(30))
            steps.append(Step("seq", [r]))
            prev_turn = r
    return steps


def junction_steps(src: PromptSource, quick: bool) -> list[Step]:
    """Junctions, then the same junction after pool pressure.

    Three requests share a prefix S and diverge after it. The second one's insert creates the
    branch point at |S| (its SWA revives S's last window if it was reclaimed); the third hits
    exactly |S|, ending its match at the junction, in both boots. Then distinct cold prompts
    whose SWA, once they finish, exceeds the SWA pool, so eviction reclaims the cold tier
    (upstream: LRU over everything), and a fourth request on S: the islands boot must still hit
    |S| (the junction window is the last thing reclaimed); upstream may have lost it, so its
    status is not compared ("hit_on"), only its output (CPU fp32 computes cached and recomputed
    tokens alike)."""
    ln = src.ln
    steps: list[Step] = []
    shared_s = src.root_prompt(ln(700))
    for j, name in enumerate(("j_base", "j_branch", "j_probe")):
        steps.append(Step("seq", [Req(name, "junction", "cold" if j == 0 else "hit", 16,
                                      ids=shared_s + src.toks(ln(150)))]))
    n_fill = 6 if quick else 10
    fill = [Req(f"jp_fill{i}", "junction_pressure", "cold", 8, ids=src.root_prompt(ln(2900)))
            for i in range(n_fill)]
    for i in range(0, n_fill, 3):
        steps.append(Step("conc", fill[i:i + 3]))
    steps.append(Step("seq", [Req("jp_probe", "junction_pressure", "hit_on", 16,
                                  ids=shared_s + src.toks(ln(150)))]))
    return steps


def build_workload(vocab_hi: int, quick: bool, interval: int, chunk: int = CPU_CHUNK,
                   seed: int = 20261129) -> list[Step]:
    """The workload; lengths scale with the chunk size (the CPU shape is chunk 512)."""
    src = PromptSource(vocab_hi, chunk, seed)
    steps, cold = cold_and_reserve_steps(src, quick)
    steps += extension_steps(src, quick, interval)
    steps += concurrent_steps(src, quick, shared=cold[src.ln(1100)])
    steps += multiturn_steps(src, quick, interval)
    steps += junction_steps(src, quick)
    return steps


def all_reqs(steps: list[Step]) -> list[Req]:
    return [r for s in steps for r in s.reqs]


def workload_hash(steps: list[Step]) -> str:
    h = hashlib.sha256()
    for s in steps:
        h.update(json.dumps([s.kind, [dataclasses.asdict(r) for r in s.reqs]]).encode())
    return h.hexdigest()[:16]
