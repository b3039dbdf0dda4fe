"""Prefix reuse benchmark, workloads: the five seeded classes as token-id scripts, their sizes per
preset, and the expected-hit oracle (what a cache that forgets nothing could hit).

A script is data only (prompts' token ids and ``max_new_tokens``); how its requests are sent
(concurrency, waves, barriers) is ``prefix_reuse.clients``' business. Every divergence point is a
token drawn distinct from its siblings', so no two requests share a token more than the script
says. A class's seed is ``Workload.seed * 31 + CLASSES.index(class)``: the classes of one
workload are independent draws, and a class's script depends only on its own sizes and the seed.
"""

from __future__ import annotations

import dataclasses
import random
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import _bench_path  # noqa: F401  (puts the repository root and benchmarks/ on sys.path)
from admission import workloads as admission_workloads

CLASSES = ("shared_system", "fanout", "branch_edit", "agents", "no_reuse")


@dataclasses.dataclass(frozen=True)
class SharedSystem:
    users: int = 24
    turns: int = 3
    system_len: int = 1200
    msg_min: int = 150
    msg_max: int = 250
    reply_min: int = 48
    reply_max: int = 96


@dataclasses.dataclass(frozen=True)
class Fanout:
    docs: int = 4
    questions: int = 10
    doc_len: int = 1500
    q_min: int = 200
    q_max: int = 300
    answer_min: int = 48
    answer_max: int = 96


@dataclasses.dataclass(frozen=True)
class BranchEdit:
    convs: int = 12
    turns: int = 3
    opening_min: int = 600
    opening_max: int = 900
    msg_min: int = 100
    msg_max: int = 200
    reply_min: int = 48
    reply_max: int = 96
    edits: int = 3
    edit_min: int = 150
    edit_max: int = 250
    edit_reply_min: int = 48
    edit_reply_max: int = 96


@dataclasses.dataclass(frozen=True)
class Agents:  # fields of admission.workloads.WorkloadConfig
    convs: int = 24
    turns: int = 3
    system_len: int = 1000
    user_min: int = 100
    user_max: int = 200
    reply_min: int = 48
    reply_max: int = 96


@dataclasses.dataclass(frozen=True)
class NoReuse:
    requests: int = 40
    in_min: int = 1500
    in_max: int = 2500
    out_min: int = 48
    out_max: int = 96


@dataclasses.dataclass(frozen=True)
class Workload:
    shared_system: SharedSystem = SharedSystem()
    fanout: Fanout = Fanout()
    branch_edit: BranchEdit = BranchEdit()
    agents: Agents = Agents()
    no_reuse: NoReuse = NoReuse()
    seed: int = 20261201
    token_lo: int = 4  # first non-special id of the tiny tokenizer
    token_hi: int = 683  # its real vocabulary ends here (as admission.workloads.WorkloadConfig)
    context: int = 4096  # the tiny model's max positions

    def to_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)


PRESETS: Dict[str, Workload] = {
    "full": Workload(),
    "quick": Workload(
        shared_system=SharedSystem(users=20, turns=2, reply_min=24, reply_max=48),
        fanout=Fanout(docs=3, questions=8, answer_min=24, answer_max=48),
        branch_edit=BranchEdit(convs=8, turns=2, edits=3, reply_min=24, reply_max=48,
                               edit_reply_min=24, edit_reply_max=48),
        agents=Agents(convs=20, turns=2, system_len=800, reply_min=24, reply_max=48),
        no_reuse=NoReuse(requests=20, out_min=24, out_max=48),
    ),
    # the server test's size: seconds per class; the numbers mean nothing
    "smoke": Workload(
        shared_system=SharedSystem(users=3, turns=2, system_len=600, msg_min=40, msg_max=60,
                                   reply_min=8, reply_max=12),
        fanout=Fanout(docs=2, questions=3, doc_len=600, q_min=40, q_max=60, answer_min=8,
                      answer_max=12),
        branch_edit=BranchEdit(convs=2, turns=2, opening_min=300, opening_max=400, msg_min=40,
                               msg_max=60, reply_min=8, reply_max=12, edits=2, edit_min=40,
                               edit_max=60, edit_reply_min=8, edit_reply_max=12),
        agents=Agents(convs=2, turns=2, system_len=400, user_min=40, user_max=60, reply_min=8,
                      reply_max=12),
        no_reuse=NoReuse(requests=3, in_min=300, in_max=400, out_min=8, out_max=12),
    ),
}


def _ids(rng: random.Random, wl: Workload, n: int) -> List[int]:
    return [rng.randrange(wl.token_lo, wl.token_hi) for _ in range(n)]


def _distinct_firsts(rng: random.Random, wl: Workload, n: int, exclude: Sequence[int] = ()) -> List[int]:
    """``n`` different token ids, none in ``exclude``: the first tokens after a divergence point."""
    pool = [t for t in range(wl.token_lo, wl.token_hi) if t not in set(exclude)]
    if n > len(pool):
        raise ValueError(f"{n} distinct first tokens do not fit the vocabulary")
    return rng.sample(pool, n)


def _msg(rng: random.Random, wl: Workload, lo: int, hi: int, first: Optional[int] = None) -> List[int]:
    ids = _ids(rng, wl, rng.randint(lo, hi))
    if first is not None:
        ids[0] = first
    return ids


def _seed(wl: Workload, cls: str) -> int:
    return wl.seed * 31 + CLASSES.index(cls)


def build_shared_system(wl: Workload) -> Dict[str, Any]:
    c, rng = wl.shared_system, random.Random(_seed(wl, "shared_system"))
    system = _ids(rng, wl, c.system_len)
    firsts = _distinct_firsts(rng, wl, c.users)  # users diverge right after the system prompt
    users = []
    for u in range(c.users):
        turns = []
        for k in range(c.turns):
            turns.append({"user": _msg(rng, wl, c.msg_min, c.msg_max, firsts[u] if k == 0 else None),
                          "max_new_tokens": rng.randint(c.reply_min, c.reply_max)})
        users.append({"user": u, "turns": turns})
    return {"system": system, "users": users}


def build_fanout(wl: Workload) -> Dict[str, Any]:
    c, rng = wl.fanout, random.Random(_seed(wl, "fanout"))
    doc_firsts = _distinct_firsts(rng, wl, c.docs)
    docs = []
    for d in range(c.docs):
        doc = _ids(rng, wl, c.doc_len)
        doc[0] = doc_firsts[d]
        q_firsts = _distinct_firsts(rng, wl, c.questions)
        docs.append({"doc": doc, "questions": [
            {"q": _msg(rng, wl, c.q_min, c.q_max, q_firsts[q]),
             "max_new_tokens": rng.randint(c.answer_min, c.answer_max)}
            for q in range(c.questions)]})
    return {"docs": docs}


def build_branch_edit(wl: Workload) -> Dict[str, Any]:
    c, rng = wl.branch_edit, random.Random(_seed(wl, "branch_edit"))
    open_firsts = _distinct_firsts(rng, wl, c.convs)
    convs = []
    for i in range(c.convs):
        opening = _msg(rng, wl, c.opening_min, c.opening_max, open_firsts[i])
        turns = [{"user": _msg(rng, wl, c.msg_min, c.msg_max),
                  "max_new_tokens": rng.randint(c.reply_min, c.reply_max)} for _ in range(c.turns)]
        cuts = []
        for _ in range(c.edits):
            j = rng.randint(1, c.turns)  # the edited turn (1-based); later turns are dropped
            cuts.append((j, rng.randrange(len(turns[j - 1]["user"]))))  # kept tokens of its message
        # the new text differs from the old one at the cut and from every other edit's
        firsts = _distinct_firsts(rng, wl, c.edits,
                                  exclude=[turns[j - 1]["user"][o] for j, o in cuts])
        edits = [{"turn": j, "keep": o,
                  "user": _msg(rng, wl, c.edit_min, c.edit_max, firsts[e]),
                  "max_new_tokens": rng.randint(c.edit_reply_min, c.edit_reply_max)}
                 for e, (j, o) in enumerate(cuts)]
        convs.append({"conv": i, "opening": opening, "turns": turns, "edits": edits})
    return {"convs": convs}


def agents_config(wl: Workload) -> admission_workloads.WorkloadConfig:
    a = wl.agents
    return admission_workloads.WorkloadConfig(convs=a.convs, turns=a.turns, system_len=a.system_len,
                                              user_min=a.user_min, user_max=a.user_max,
                                              reply_min=a.reply_min, reply_max=a.reply_max,
                                              seed=_seed(wl, "agents"), token_lo=wl.token_lo,
                                              token_hi=wl.token_hi)


def build_agents(wl: Workload) -> List[Dict[str, Any]]:
    convs = admission_workloads.agent_script(agents_config(wl))
    firsts = _distinct_firsts(random.Random(_seed(wl, "agents") + 7), wl, len(convs))
    for c, f in zip(convs, firsts):  # conversations share no token, not even the first
        c["system"] = [f] + list(c["system"][1:])
    return convs


def no_reuse_config(wl: Workload) -> admission_workloads.WorkloadConfig:
    n = wl.no_reuse
    return admission_workloads.WorkloadConfig(requests=n.requests, clients=n.requests,
                                              in_min=n.in_min, in_max=n.in_max, out_min=n.out_min,
                                              out_max=n.out_max, seed=_seed(wl, "no_reuse"),
                                              token_lo=wl.token_lo, token_hi=wl.token_hi)


def build_no_reuse(wl: Workload) -> List[Dict[str, Any]]:
    reqs = admission_workloads.no_reuse_requests(no_reuse_config(wl))
    firsts = _distinct_firsts(random.Random(_seed(wl, "no_reuse") + 7), wl, len(reqs))
    for r, f in zip(reqs, firsts):
        r["input_ids"] = [f] + list(r["input_ids"][1:])
    return reqs


BUILDERS: Dict[str, Callable[[Workload], Any]] = {
    "shared_system": build_shared_system,
    "fanout": build_fanout,
    "branch_edit": build_branch_edit,
    "agents": build_agents,
    "no_reuse": build_no_reuse,
}


def build_scripts(wl: Workload, classes: Sequence[str] = CLASSES) -> Dict[str, Any]:
    """``{class: script}`` for ``classes`` (deterministic in ``wl``)."""
    return {c: BUILDERS[c](wl) for c in classes}


def max_context(wl: Workload) -> Dict[str, int]:
    """The longest prompt + output of each class (every output is exactly max_new_tokens)."""
    s, f, b, a, n = wl.shared_system, wl.fanout, wl.branch_edit, wl.agents, wl.no_reuse
    return {
        "shared_system": s.system_len + s.turns * (s.msg_max + s.reply_max),
        "fanout": f.doc_len + f.q_max + f.answer_max,
        "branch_edit": b.opening_max + b.turns * (b.msg_max + b.reply_max) + b.edit_max
        + b.edit_reply_max,
        "agents": a.system_len + a.turns * (a.user_max + a.reply_max),
        "no_reuse": n.in_max + n.out_max,
    }


def check_workload(wl: Workload) -> None:
    """Raise ValueError if a class's longest prompt + output (+ 8 spare) exceeds the context."""
    too_long = {k: v for k, v in max_context(wl).items() if v + 8 > wl.context}
    if too_long:
        raise ValueError(f"classes exceed the tiny model's {wl.context}-token context: {too_long}")



# ----------------------------------------------------------------------------- expected hits


def common_prefix_len(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix (binary search on slice equality: C-speed)."""
    a, b = list(a), list(b)
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def expected_shared_per_request(reqs: Sequence[Tuple[Sequence[int], Sequence[int]]],
                                page: int = 1) -> List[int]:
    """Per request (``(prompt, output)`` in script order): the tokens a cache that forgets nothing
    could hit, i.e. the longest prefix shared with an earlier request's prompt + output minus its
    last token (a finished request caches the KV it computed: the last output token has none),
    capped at the prompt length - 1 (the server computes at least one token) and page-floored."""
    earlier: List[List[int]] = []
    out = []
    for prompt, output in reqs:
        prompt = list(prompt)
        best = max((common_prefix_len(prompt, s) for s in earlier), default=0)
        best = max(0, min(best, len(prompt) - 1))
        out.append(best // page * page)
        earlier.append(prompt + list(output)[:-1] if output else prompt)
    return out


def expected_shared_tokens(reqs: Sequence[Tuple[Sequence[int], Sequence[int]]], page: int = 1) -> int:
    """The sum of ``expected_shared_per_request``."""
    return sum(expected_shared_per_request(reqs, page))


def in_script_order(rows: Sequence[Dict[str, Any]]) -> List[Tuple[List[int], List[int]]]:
    """``(prompt, output)`` of each row (``input_ids``, ``output_ids``), sorted by ``order``: the
    order the script defines, whatever order the requests finished in."""
    return [(r["input_ids"], r.get("output_ids") or [])
            for r in sorted(rows, key=lambda r: tuple(r["order"]))]
