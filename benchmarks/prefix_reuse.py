#!/usr/bin/env python
"""Prefix reuse under SWA-pool pressure on the real SGLang server (CPU, tiny hybrid-SWA model).

The question: with SWA islands on (``--enable-swa-islands``, default reclaim ``lazy``), does the
radix cache keep every prefix hit upstream keeps, across the ways real traffic shares prefixes,
at an ample SWA pool and at the lean pools islands are meant for, and does admission still reach
the concurrency cap there? One run boots the real ``sglang.launch_server`` once per (arm, pool)
and runs five seeded workload classes on it, one after the other, with ``/flush_cache`` between
them (classes never share cache).

Machinery comes from ``benchmarks/admission.py`` (imported as a module): the CPU shape
(``CpuShape``: window 32, page 1, chunk 512, cap 16, ``--max-total-tokens`` 65536), the pools
(``plan_mapping``: the planner's 0.17- and 0.10-equivalent SWA pools; ``ample`` is ratio 0.5),
the server arguments, the scaled decode-evictor interval (``SGLANG_SWA_EVICTION_INTERVAL``, 34
for every arm), ``run_phase`` (log slice, ``/metrics`` deltas, running samples, server CPU
seconds), the request helpers, ``run_agent`` / ``run_no_reuse`` and the tiny model.

Arms (same arguments otherwise):

* ``upstream``: stock ``SWARadixCache``;
* ``upstream_knobs``: plus ``SGLANG_OPT_SWA_SPLIT_LEAF_ON_INSERT=1`` and
  ``SGLANG_OPT_SWA_RELEASE_LEAF_LOCK_AFTER_WINDOW=1`` (``islands_harness.knobs``);
* ``islands_eager``: ``--enable-swa-islands --swa-islands-reclaim eager`` (SWA below a new island
  freed at the commit);
* ``islands``: ``--enable-swa-islands`` (reclaim ``lazy``, the default: SWA below an island stays
  cached and evictable, cold tokens least recently used first);
* ``islands_auto`` (only when named in ``--arms``): ``--swa-islands-reclaim auto`` (lazy while
  one prefill chunk of SWA is free, else eager).

Classes (token-id prompts from the tiny model's vocabulary; temperature 0, ``ignore_eos``, so
every output is exactly ``max_new_tokens`` long; every divergence point is a different token, so
no two requests share a token more than the script says):

* ``shared_system``: U users x T turns; turn k = one shared system prompt + the user's own
  history (messages and replies) + a new message. Users run concurrently (U > cap), each user's
  turns in sequence. User 0's first turn goes alone first (it opens the system prompt), so every
  later hit is decided by what the cache keeps, not by an arrival race.
* ``fanout``: D documents, each read by K requests = document + an own question. The first
  question per document goes first (wave 1, one per document), then all the others at once.
* ``branch_edit``: C conversations, each an own opening + T turns built in sequence, then E
  re-sends of the transcript edited at an earlier turn (cut inside turn j's message, which is
  replaced by a new one: the branch point lies inside the cached path, mid-node), sent at once.
* ``agents``: ``admission_workloads.agent_script`` (own system prompt per conversation; turn k+1 re-sends
  the transcript + a new user message, sent when turn k finished), run by ``admission_workloads.run_agent``.
* ``no_reuse``: ``admission_workloads.no_reuse_requests`` (random prompts), all sent at once.

Measured per (arm, pool, class): requests, cached tokens (``meta_info.cached_tokens``) and their
share of prompt tokens, ``expected_shared_tokens`` (what a cache that forgets nothing could have
hit: per request, the longest prefix shared with any earlier request of the class in script
order, that request's prompt + output minus its last token (whose KV is never computed), capped
at the prompt length - 1 and page-floored), prefill tokens computed (``#new-token`` of the
scheduler log), running requests (time-weighted mean of ``sglang:num_running_reqs``, mean over
decode steps, and ``mean_running_queued``: the mean ``#running-req`` over the decode steps with a
non-empty queue, i.e. while demand exceeded what ran), max running, retractions, peak SWA used
(``#swa token`` of the decode lines: locked + request-owned, not evictable), the largest SWA hold
of one running request (islands' ``swa held/req: MEAN (max MAX)``; None for upstream arms),
decode steps, wall seconds, and output tokens / requests per server CPU second.

Acceptance (the issue's "done when"), per class: at ``ample``, islands' cached tokens >=
upstream's - one page per request; at ``0.17-eq`` and ``0.10-eq``, >= the better of upstream and
upstream_knobs, and where upstream binds (its ``mean_running_queued`` < cap - 1) islands'
``mean_running_queued`` >= cap - 1 (or no step ever queued) with 0 retractions. ``mean running``
is judged while requests queue, because a finite workload ramps up and drains below the cap in
every arm; the time-weighted mean is reported next to it.

Examples::

    .venv/bin/python benchmarks/prefix_reuse.py --plan-only
    .venv/bin/python benchmarks/prefix_reuse.py --quick          # results/prefix_reuse_quick.*
    .venv/bin/python benchmarks/prefix_reuse.py                  # full run, results/prefix_reuse.*
    .venv/bin/python benchmarks/prefix_reuse.py --quick --pools 0.17-eq --arms upstream,islands \\
        --classes fanout,branch_edit --json /tmp/p.json --md /tmp/p.md --png /tmp/p.png
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import dataclasses
import itertools
import json
import os
import pathlib
import platform
import random
import shlex
import statistics
import sys
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import _bench_path  # noqa: E402  (puts the repository root and benchmarks/ on sys.path)
import admission_run  # noqa: E402
import admission_setup  # noqa: E402
import admission_workloads  # noqa: E402
from bench_outputs import add_output_args, output_paths, write_files, write_json, write_text  # noqa: E402,E501
from islands_harness import sched_log  # noqa: E402
from islands_harness.client import generate, thread_session  # noqa: E402
from islands_harness.main_arm import main_python  # noqa: E402
from islands_harness.provenance import git_head  # noqa: E402

ROOT = _bench_path.ROOT
CPU = admission_setup.CpuShape()

CLASSES = ("shared_system", "fanout", "branch_edit", "agents", "no_reuse")
ARMS: Dict[str, Dict[str, Any]] = {
    "upstream": {"args": (), "env": {}},
    "upstream_knobs": {"args": (), "env": dict(admission_setup.KNOBS_ENV)},
    "islands_eager": {"args": ("--enable-swa-islands", "--swa-islands-reclaim", "eager"), "env": {}},
    "islands": {"args": ("--enable-swa-islands",), "env": {}},
    "islands_auto": {"args": ("--enable-swa-islands", "--swa-islands-reclaim", "auto"), "env": {}},
    "main": {"args": (), "env": {}, "main": True},
}
"""``main``: stock sglang 0.5.23 (``islands_harness.main_arm``), default settings; run when named."""
DEFAULT_ARMS = ("upstream", "upstream_knobs", "islands_eager", "islands")
"""The issue's four arms; ``islands_auto`` (eager below the watermark) runs when named in --arms."""
ISLAND_ARMS = ("islands_eager", "islands", "islands_auto")
POOLS = ("ample", "0.17-eq", "0.10-eq")
AMPLE_RATIO = 0.5


# ----------------------------------------------------------------------------- pools


def pool_table(mapping: Optional[Dict[str, Any]] = None, cpu: admission_setup.CpuShape = CPU) -> Dict[str, Dict[str, Any]]:
    """``{pool: {ratio, server_ratio, swa_pool, bind_without_islands, island_capacity...}}``."""
    from islands_tools import pool_plan as plan

    mapping = mapping or admission_setup.plan_mapping()
    hold = plan.hold_without_islands(cpu.window, cpu.page, cpu.chunk)
    ample_pool = plan.swa_pool_tokens(cpu.max_total_tokens, AMPLE_RATIO, cpu.page)
    out = {"ample": {
        "ratio_equivalent": AMPLE_RATIO, "server_ratio": AMPLE_RATIO, "swa_pool": ample_pool,
        "bind_without_islands": round(plan.admission_bind(ample_pool, hold), 2),
        "island_capacity": plan.island_capacity(ample_pool, cpu.window, cpu.page, cpu.chunk),
        "island_capacity_with_tail": plan.island_capacity(
            ample_pool, cpu.window, cpu.page, cpu.chunk, decode_tail=mapping["cpu"]["decode_tail"]),
    }}
    for key in ("0.17", "0.10"):
        p = mapping["pools"][key]
        out[f"{key}-eq"] = {k: p[k] for k in (
            "ratio_equivalent", "server_ratio", "swa_pool", "bind_without_islands",
            "island_capacity", "island_capacity_with_tail")}
    return out


def server_args(arm: str, pool: Dict[str, Any], cpu: admission_setup.CpuShape = CPU) -> List[str]:
    return (admission_setup.common_server_args(cpu)
            + ["--swa-full-tokens-ratio", repr(pool["server_ratio"])] + list(ARMS[arm]["args"]))


def server_env(arm: str, eviction_interval: int) -> Dict[str, str]:
    return admission_setup.with_eviction_interval(ARMS[arm]["env"], eviction_interval)


# ----------------------------------------------------------------------------- workloads


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
class Agents:  # fields of admission_workloads.WorkloadConfig
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
    token_hi: int = 683  # its real vocabulary ends here (as admission_workloads.WorkloadConfig)
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
    return admission_workloads.WorkloadConfig(requests=n.requests, clients=n.requests, in_min=n.in_min,
                                    in_max=n.in_max, out_min=n.out_min, out_max=n.out_max,
                                    seed=_seed(wl, "no_reuse"), token_lo=wl.token_lo,
                                    token_hi=wl.token_hi)


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
    return sum(expected_shared_per_request(reqs, page))


def _by_order(rows: Sequence[Dict[str, Any]]) -> List[Tuple[List[int], List[int]]]:
    return [(r["input_ids"], r.get("output_ids") or [])
            for r in sorted(rows, key=lambda r: tuple(r["order"]))]


# ----------------------------------------------------------------------------- runners

Send = Callable[[List[int], int, Tuple], Dict[str, Any]]


def http_sender(base_url: str, timeout: float) -> Send:
    """One greedy ``/generate`` request: a row with ids, cached tokens, latency."""
    def send(ids: List[int], max_new: int, order: Tuple) -> Dict[str, Any]:
        t0 = time.monotonic()
        g = generate(base_url, ids, max_new, timeout=timeout, session=thread_session())
        t1 = time.monotonic()
        return {"order": list(order), "t_send": t0, "t_done": t1, "latency_s": t1 - t0,
                "prompt_tokens": len(ids), "completion_tokens": g.completion_tokens,
                "cached_tokens": g.cached_tokens, "input_ids": list(ids),
                "output_ids": g.output_ids}
    return send


def fake_sender() -> Send:
    """No server: outputs of exactly ``max_new`` fresh negative ids (they match nothing), 0 cached."""
    counter = itertools.count(1)
    lock = threading.Lock()

    def send(ids: List[int], max_new: int, order: Tuple) -> Dict[str, Any]:
        with lock:
            base = -next(counter) * 100_000
        out = [base - i for i in range(max_new)]
        return {"order": list(order), "t_send": 0.0, "t_done": 0.0, "latency_s": 0.0,
                "prompt_tokens": len(ids), "completion_tokens": max_new, "cached_tokens": 0,
                "input_ids": list(ids), "output_ids": out}
    return send


def _pool_map(fn, items, workers: int) -> List[Any]:
    items = list(items)
    if not items:
        return []
    with cf.ThreadPoolExecutor(max_workers=max(1, min(workers, len(items)))) as ex:
        return list(ex.map(fn, items))


def run_shared_system(script: Dict[str, Any], send: Send, progress: Callable[[str], None],
                      timeout: float = 3600.0) -> List[Dict[str, Any]]:
    """Users concurrently, turns in sequence; user 0's first turn opens the system prompt alone."""
    opened = threading.Event()

    def user(u: Dict[str, Any]) -> List[Dict[str, Any]]:
        uid = u["user"]
        if uid != 0 and not opened.wait(timeout):
            raise TimeoutError("the opening request did not finish")
        rows = []
        transcript = list(script["system"])
        try:
            for k, t in enumerate(u["turns"]):
                prompt = transcript + t["user"]
                order = (0,) if (uid == 0 and k == 0) else (1, k, uid)
                r = send(prompt, t["max_new_tokens"], order)
                rows.append(r)
                if uid == 0 and k == 0:
                    opened.set()
                transcript = prompt + r["output_ids"]
        finally:
            opened.set()
        return rows

    out = [r for rows in _pool_map(user, script["users"], len(script["users"])) for r in rows]
    progress(f"shared_system: {len(out)} requests done")
    return out


def run_fanout(script: Dict[str, Any], send: Send, progress: Callable[[str], None]) -> List[Dict[str, Any]]:
    """Wave 1: the first question of every document; wave 2: every other question at once."""
    docs = script["docs"]
    wave1 = [(d, 0) for d in range(len(docs))]
    wave2 = [(d, q) for q in range(1, max(len(x["questions"]) for x in docs))
             for d in range(len(docs)) if q < len(docs[d]["questions"])]

    def one(dq):
        d, q = dq
        qq = docs[d]["questions"][q]
        return send(list(docs[d]["doc"]) + qq["q"], qq["max_new_tokens"],
                    (0, d) if q == 0 else (1, q, d))

    rows = _pool_map(one, wave1, len(wave1))
    rows += _pool_map(one, wave2, len(wave2))
    progress(f"fanout: {len(rows)} requests done")
    return rows


def run_branch_edit(script: Dict[str, Any], send: Send, progress: Callable[[str], None]) -> List[Dict[str, Any]]:
    """Per conversation (concurrently): the turns in sequence, then its edits at once."""
    def conv(c: Dict[str, Any]) -> List[Dict[str, Any]]:
        rows = []
        transcript = list(c["opening"])
        turn_start = []  # transcript length before turn j's message
        for k, t in enumerate(c["turns"]):
            turn_start.append(len(transcript))
            prompt = transcript + t["user"]
            r = send(prompt, t["max_new_tokens"], (0, k, c["conv"]))
            rows.append(r)
            transcript = prompt + r["output_ids"]

        def edit(ie):
            i, e = ie
            cut = turn_start[e["turn"] - 1] + e["keep"]
            return send(transcript[:cut] + e["user"], e["max_new_tokens"], (1, c["conv"], i))

        rows += _pool_map(edit, list(enumerate(c["edits"])), len(c["edits"]))
        return rows

    out = [r for rows in _pool_map(conv, script["convs"], len(script["convs"])) for r in rows]
    progress(f"branch_edit: {len(out)} requests done")
    return out


def run_agents_real(base_url: str, convs: List[Dict[str, Any]], timeout: float,
                    progress: Callable[[str], None]) -> List[Dict[str, Any]]:
    rows = admission_workloads.run_agent(base_url, convs, timeout, lambda m: None, mode="after_finish",
                               keep_ids=True)
    for r in rows:
        r["order"] = [r["turn"], r["conv"]]
    progress(f"agents: {len(rows)} requests done")
    return rows


def run_agents_fake(convs: List[Dict[str, Any]], send: Send) -> List[Dict[str, Any]]:
    """``admission_workloads.run_agent``'s transcript rule with ``send`` (plan and tests)."""
    rows = []
    for c in convs:
        transcript = list(c["system"])
        for k, t in enumerate(c["turns"]):
            prompt = transcript + t["user"]
            r = send(prompt, t["max_new_tokens"], (k + 1, c["conv"]))
            rows.append(r)
            transcript = prompt + r["output_ids"]
    return rows


def run_no_reuse_real(base_url: str, reqs: List[Dict[str, Any]], timeout: float,
                      progress: Callable[[str], None]) -> List[Dict[str, Any]]:
    rows = admission_workloads.run_no_reuse(base_url, reqs, len(reqs), timeout, lambda m: None)
    by_i = {r["i"]: r for r in reqs}
    for row in rows:  # the ids come from the script (the outputs cannot matter: no shared token)
        row["order"] = [row["i"]]
        row["input_ids"] = by_i[row["i"]]["input_ids"]
    progress(f"no_reuse: {len(rows)} requests done")
    return rows


def run_class(cls: str, script: Any, send: Send, progress: Callable[[str], None] = lambda m: None,
              base_url: Optional[str] = None, timeout: float = 3600.0) -> List[Dict[str, Any]]:
    """Run one class. With ``base_url`` agents and no_reuse go through admission's runners;
    without it (plan, tests) every class goes through ``send``."""
    if cls == "shared_system":
        return run_shared_system(script, send, progress, timeout)
    if cls == "fanout":
        return run_fanout(script, send, progress)
    if cls == "branch_edit":
        return run_branch_edit(script, send, progress)
    if cls == "agents":
        if base_url is not None:
            return run_agents_real(base_url, script, timeout, progress)
        return run_agents_fake(script, send)
    if cls == "no_reuse":
        if base_url is not None:
            return run_no_reuse_real(base_url, script, timeout, progress)
        return [send(r["input_ids"], r["max_new_tokens"], (r["i"],)) for r in script]
    raise ValueError(f"unknown class {cls!r}")


def plan_classes(wl: Workload, classes: Sequence[str] = CLASSES, page: int = CPU.page) -> Dict[str, Any]:
    """Per class without a server (outputs of their exact length, matching nothing): requests,
    prompt tokens, expected shared tokens and the longest context."""
    out = {}
    scripts = build_scripts(wl, classes)
    ctx = max_context(wl)
    for c in classes:
        rows = run_class(c, scripts[c], fake_sender())
        exp = expected_shared_tokens(_by_order(rows), page)
        prompt = sum(r["prompt_tokens"] for r in rows)
        out[c] = {"requests": len(rows), "prompt_tokens": prompt, "expected_shared_tokens": exp,
                  "expected_share": round(exp / prompt, 4) if prompt else 0.0,
                  "output_tokens": sum(r["completion_tokens"] for r in rows),
                  "max_context": ctx[c], "sizes": dataclasses.asdict(getattr(wl, c))}
    return out


# ----------------------------------------------------------------------------- measuring

KEEP_ROW_KEYS = ("order", "prompt_tokens", "completion_tokens", "cached_tokens", "latency_s",
                 "t_send", "t_done")


def class_extra(parsed: Dict[str, Any], rows: List[Dict[str, Any]], page: int = CPU.page) -> Dict[str, Any]:
    """run_phase's ``extra`` hook: expected hits, running while queued, per-request SWA."""
    per_exp = expected_shared_per_request(_by_order(rows), page)
    dec = parsed["decode"]
    queued = [d["run"] for d in dec if d.get("queue", 0) > 0]
    per_run = [d["swa_tok"] / d["run"] for d in dec if d["run"] > 0]
    ordered = sorted(rows, key=lambda r: tuple(r["order"]))
    return {
        "expected_shared_tokens": sum(per_exp),
        # [order, prompt tokens, cached tokens, expected shared] per request, in script order
        "per_request": [[r["order"], r["prompt_tokens"], r["cached_tokens"], e]
                        for r, e in zip(ordered, per_exp)],
        "mean_running_queued": round(statistics.mean(queued), 3) if queued else None,
        "queued_steps": len(queued),
        "max_swa_used_per_running": round(max(per_run), 1) if per_run else None,
    }


def finish_class(res: Dict[str, Any], islands: bool) -> Dict[str, Any]:
    """run_phase's result -> the per-class record (the issue's keys first)."""
    n = res["n_requests"]
    prompt, cached = res["prompt_tokens"], res["cached_tokens"]
    exp = res["expected_shared_tokens"]
    cpu_s = res.get("server_cpu_s")
    rec = {
        "requests": n,
        "cached_tokens": cached,
        "cached_share": round(cached / prompt, 4) if prompt else 0.0,
        "prefill_tokens": res["prefill_tokens"],
        "mean_running": res["mean_running"],
        "max_running": res["max_running"],
        "retractions": int(res["retractions"]),
        "peak_swa_used": res["max_swa_used_tokens"],
        "max_swa_held_per_running_req": res.get("held_per_req_max") if islands else None,
        "expected_shared_tokens": exp,
        "expected_share": round(exp / prompt, 4) if prompt else 0.0,
        "cached_of_expected": round(cached / exp, 4) if exp else None,
        "prompt_tokens": prompt,
        "output_tokens": res["output_tokens"],
        "mean_running_step": res["mean_running_step"],
        "mean_running_queued": res["mean_running_queued"],
        "queued_steps": res["queued_steps"],
        "frac_steps_at_cap": res["frac_steps_at_cap"],
        "decode_steps": res["decode_steps"],
        "wall_s": res["wall_s"],
        "server_cpu_s": cpu_s,
        "tok_per_cpu_s": res.get("tok_per_cpu_s"),
        "req_per_cpu_s": round(n / cpu_s, 4) if cpu_s else None,
        "max_swa_used_per_running": res["max_swa_used_per_running"],
        "held_per_req_mean": res.get("held_per_req_mean") if islands else None,
        "evicted_tokens": res.get("evicted_tokens"),
        "island_freed_tokens": res.get("island_freed_tokens"),
        "island_reclaimed_cold_tokens": res.get("island_reclaimed_cold_tokens"),
        "island_reclaimed_window_tokens": res.get("island_reclaimed_window_tokens"),
        "retractions_log": res.get("retractions_log"),
        "latency_mean_s": res["latency_mean_s"],
        "throughput_tok_s": res["throughput_tok_s"],
    }
    if "agent_hit_rate" in res:
        rec["agent_hit_rate"] = res["agent_hit_rate"]
    return rec


def log(msg: str) -> None:
    print(f"[prefix_reuse {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def run_boot(arm: str, pool_name: str, pool: Dict[str, Any], scripts: Dict[str, Any],
             classes: Sequence[str], a, model_dir: pathlib.Path, log_dir: pathlib.Path) -> Dict[str, Any]:
    """One server boot: the classes in order, the cache flushed between them."""
    from islands_harness.server import SglangServer

    args = server_args(arm, pool)
    env = server_env(arm, a.eviction_interval)
    tag = f"[{arm} @{pool_name}]"
    log_path = log_dir / f"{arm}_{pool_name}.log"
    out: Dict[str, Any] = {"arm": arm, "pool": pool_name, "server_args": args, "env": env,
                           "log": str(log_path), "classes": {}}
    t0 = time.monotonic()
    log(f"{tag} booting (SWA pool {pool['swa_pool']}, ratio {pool['server_ratio']})"
        + (f", env {' '.join(f'{k}={v}' for k, v in env.items())}" if env else ""))
    islands = arm in ISLAND_ARMS
    python = main_python() if ARMS[arm].get("main") else None
    with SglangServer(model_dir, args, env=env, omp_threads=a.omp_threads, log_path=log_path,
                      boot_timeout_s=a.boot_timeout, python=python) as srv:
        out["boot_s"] = round(srv.boot_s, 1)
        out.update(sched_log.parse_boot(srv.log_path.read_text(errors="replace")))
        if out.get("swa_pool_log") not in (None, pool["swa_pool"]):
            log(f"{tag} WARNING: SWA pool {out['swa_pool_log']} != planned {pool['swa_pool']}")
        log(f"{tag} healthy in {srv.boot_s:.0f} s (SWA pool {out.get('swa_pool_log')})")
        send = http_sender(srv.base_url, a.request_timeout)
        for i, cls in enumerate(classes):
            if i:
                srv.flush_cache()
            script = scripts[cls]
            body = lambda: run_class(cls, script, send, lambda m: None,  # noqa: E731
                                     base_url=srv.base_url, timeout=a.request_timeout)
            res = admission_run.run_phase(srv, "agent" if cls == "agents" else cls, CPU.cap,
                                      a.sample_interval, body, extra=class_extra,
                                      lead_s=a.lead, settle_s=a.settle)
            rec = finish_class(res, islands)
            out["classes"][cls] = rec
            out.setdefault("series", {})[cls] = res.get("series")
            out.setdefault("per_request", {})[cls] = res.get("per_request")
            q = rec["mean_running_queued"]
            log(f"{tag} {cls}: {rec['requests']} req in {rec['wall_s']:.0f} s; cached share "
                f"{rec['cached_share']:.3f} (expected {rec['expected_share']:.3f}); running mean "
                f"{_fmt(rec['mean_running'])}, while queued {_fmt(q)}, max {rec['max_running']}; "
                f"retractions {rec['retractions']}; peak SWA used {rec['peak_swa_used']}")
    out["boot_total_s"] = round(time.monotonic() - t0, 1)
    return out


def _fmt(x, nd=1) -> str:
    return "–" if x is None else f"{x:.{nd}f}"


# ----------------------------------------------------------------------------- acceptance


def acceptance(arms: Dict[str, Dict[str, Dict[str, Dict[str, Any]]]], cap: int, page: int,
               pools: Sequence[str] = POOLS, classes: Sequence[str] = CLASSES) -> List[Dict[str, Any]]:
    """The issue's done-when, per pool and class, on the measured numbers.

    * ample: islands cached >= upstream cached - page x requests;
    * lean pools: islands cached >= max(upstream, upstream_knobs) cached; and where upstream
      binds (``mean_running_queued`` < cap - 1): islands ``mean_running_queued`` >= cap - 1 (or
      no queued decode step) and 0 retractions.
    ``pass`` is None (n/a) where an arm or class was not run or upstream does not bind."""
    checks: List[Dict[str, Any]] = []

    def rec(arm, pool, cls):
        return arms.get(arm, {}).get(pool, {}).get(cls)

    def add(pool, cls, criterion, ok, islands, reference, detail):
        checks.append({"pool": pool, "class": cls, "criterion": criterion,
                       "pass": None if ok is None else bool(ok), "islands": islands,
                       "reference": reference, "detail": detail})

    for pool in pools:
        for cls in classes:
            isl = rec("islands", pool, cls)
            up = rec("upstream", pool, cls)
            if pool == "ample":
                crit = "cached tokens >= upstream's - 1 page/request"
                if isl is None or up is None:
                    add(pool, cls, crit, None, None, None, "islands or upstream not run")
                    continue
                slack = page * isl["requests"]
                ok = isl["cached_tokens"] >= up["cached_tokens"] - slack
                add(pool, cls, crit, ok, isl["cached_tokens"], up["cached_tokens"],
                    f"islands {isl['cached_tokens']} vs upstream {up['cached_tokens']} "
                    f"(slack {slack}; expected {isl['expected_shared_tokens']})")
                continue
            crit = "cached tokens >= max(upstream, upstream_knobs)"
            refs = {n: rec(n, pool, cls) for n in ("upstream", "upstream_knobs")}
            refs = {n: r for n, r in refs.items() if r is not None}
            if isl is None or not refs:
                add(pool, cls, crit, None, None, None, "islands or both upstream arms not run")
            else:
                best_name = max(refs, key=lambda n: refs[n]["cached_tokens"])
                best = refs[best_name]["cached_tokens"]
                add(pool, cls, crit, isl["cached_tokens"] >= best, isl["cached_tokens"], best,
                    f"islands {isl['cached_tokens']} vs " + ", ".join(
                        f"{n} {r['cached_tokens']}" for n, r in refs.items())
                    + f" (expected {isl['expected_shared_tokens']})")
            crit = "where upstream binds: running at the cap while queued, 0 retractions"
            if isl is None or up is None:
                add(pool, cls, crit, None, None, None, "islands or upstream not run")
                continue
            uq = up.get("mean_running_queued")
            if uq is None or uq >= cap - 1:
                add(pool, cls, crit, None, isl.get("mean_running_queued"), uq,
                    f"n/a: upstream does not bind (running while queued {_fmt(uq, 2)}, "
                    f"mean {_fmt(up.get('mean_running'), 2)}, max {up.get('max_running')})")
                continue
            iq = isl.get("mean_running_queued")
            ok = (iq is None or iq >= cap - 1) and isl["retractions"] == 0
            add(pool, cls, crit, ok, iq, uq,
                f"islands running while queued {_fmt(iq, 2)} (mean {_fmt(isl.get('mean_running'), 2)}, "
                f"max {isl.get('max_running')}), retractions {isl['retractions']}; upstream while "
                f"queued {_fmt(uq, 2)} (mean {_fmt(up.get('mean_running'), 2)}, max "
                f"{up.get('max_running')}), retractions {up['retractions']}")
    return checks


# ----------------------------------------------------------------------------- output

CLASS_KEYS = ("requests", "cached_tokens", "cached_share", "prefill_tokens", "mean_running",
              "max_running", "retractions", "peak_swa_used", "max_swa_held_per_running_req",
              "expected_shared_tokens", "decode_steps", "wall_s", "tok_per_cpu_s")


def validate_result(result: Dict[str, Any]) -> None:
    """Raise ValueError unless ``result`` has the committed JSON's shape."""
    for k in ("cap", "page"):
        if not isinstance(result.get(k), int) or result[k] <= 0:
            raise ValueError(f"{k} must be a positive integer")
    arms = result.get("arms")
    if not isinstance(arms, dict) or not arms:
        raise ValueError("arms must be a non-empty object")
    for arm, pools in arms.items():
        if arm not in ARMS:
            raise ValueError(f"unknown arm {arm}")
        for pool, classes in pools.items():
            if pool not in POOLS:
                raise ValueError(f"{arm}: unknown pool {pool}")
            for cls, r in classes.items():
                if cls not in CLASSES:
                    raise ValueError(f"{arm}/{pool}: unknown class {cls}")
                missing = [k for k in CLASS_KEYS if k not in r]
                if missing:
                    raise ValueError(f"{arm}/{pool}/{cls}: missing {missing}")
                if arm not in ISLAND_ARMS and r["max_swa_held_per_running_req"] is not None:
                    raise ValueError(f"{arm}/{pool}/{cls}: held per request is islands-only")


ROWS = [  # (label, key, digits)
    ("requests", "requests", 0),
    ("cached tokens", "cached_tokens", 0),
    ("cached share", "cached_share", 3),
    ("expected shared (share)", "expected_share", 3),
    ("cached / expected", "cached_of_expected", 3),
    ("prefill tokens computed", "prefill_tokens", 0),
    ("mean running (time)", "mean_running", 2),
    ("mean running while queued", "mean_running_queued", 2),
    ("max running", "max_running", 0),
    ("retractions", "retractions", 0),
    ("peak SWA used", "peak_swa_used", 0),
    ("SWA held / running req (max)", "max_swa_held_per_running_req", 0),
    ("decode steps", "decode_steps", 0),
    ("requests / server CPU-s", "req_per_cpu_s", 3),
    ("output tok / server CPU-s", "tok_per_cpu_s", 1),
    ("wall s", "wall_s", 1),
]


def _f(x, nd=2) -> str:
    if x is None:
        return "–"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int) or nd == 0:
        return f"{int(round(x)):,}"
    return f"{x:.{nd}f}"


def to_markdown(result: Dict[str, Any]) -> str:
    arms = result["arms"]
    arm_names = [a for a in ARMS if a in arms]
    pools = [p for p in POOLS if any(p in arms[a] for a in arm_names)]
    classes = [c for c in CLASSES if any(c in arms[a].get(p, {}) for a in arm_names for p in pools)]
    cap, page = result["cap"], result["page"]
    L: List[str] = []
    L.append("# Prefix reuse under SWA-pool pressure (real SGLang server, CPU, tiny model)\n")
    rt = result.get("runtime_s")
    L.append(f"Generated by `benchmarks/prefix_reuse.py` on {result.get('date', '?')} (HEAD "
             f"{result.get('git_head') or '?'}); preset `{result.get('preset', '?')}`, total runtime "
             f"{(rt or 0) / 60:.1f} min for {result.get('boots', '?')} server boots.\n")
    L.append("Command:\n\n```\n" + result.get("command", "(not recorded)") + "\n```\n")
    if result.get("rebuilt_by"):
        L.append("These files were written from that run's per-boot files by:\n\n```\n"
                 + result["rebuilt_by"] + "\n```\n")
    m = result.get("machine") or {}
    if m:
        L.append(f"Machine: {m.get('cpus')} CPUs ({m.get('platform')}); load average "
                 f"{m.get('load_start')} at the start, {m.get('load_end')} at the end. Other jobs "
                 "shared the cores, so wall seconds are noisy; token counts, decode steps, running "
                 "counts and the per-server-CPU-second figures much less so.\n")
    L.append("## Setup\n")
    L.append(f"Shape (`admission_setup.CpuShape`): window {result.get('window')}, page {page}, chunk "
             f"{result.get('chunk')}, cap `--max-running-requests {cap}`, `--max-total-tokens "
             f"{result.get('max_total_tokens', 65536):,}`, `SGLANG_SWA_EVICTION_INTERVAL="
             f"{result.get('eviction_interval')}` for every arm. One boot per (arm, pool); the "
             "classes run in the order below on it, `/flush_cache` between them.\n")
    pt = result.get("pools") or {}
    if pt:
        L.append("| pool | ratio (equivalent) | server ratio | SWA pool tokens | upstream bind "
                 "(pool / chunk) | island capacity (with decode tail) |")
        L.append("|---|---|---|---|---|---|")
        for p in pools:
            x = pt.get(p, {})
            L.append(f"| {p} | {x.get('ratio_equivalent')} | {x.get('server_ratio')} | "
                     f"{_f(x.get('swa_pool'), 0)} | {_f(x.get('bind_without_islands'))} | "
                     f"{x.get('island_capacity')} ({x.get('island_capacity_with_tail')}) |")
        L.append("")
    L.append("Arms: `upstream` (stock), `upstream_knobs` (+ `SGLANG_OPT_SWA_SPLIT_LEAF_ON_INSERT=1 "
             "SGLANG_OPT_SWA_RELEASE_LEAF_LOCK_AFTER_WINDOW=1`), `islands_eager` "
             "(`--enable-swa-islands --swa-islands-reclaim eager`), `islands` "
             "(`--enable-swa-islands`, default reclaim `lazy`)"
             + (", `islands_auto` (`--swa-islands-reclaim auto`)" if "islands_auto" in result.get("arms", {}) else "")
             + (", `main` (stock sglang 0.5.23, upstream main, default settings: its own cache, "
                "`UnifiedRadixCache`, and pool sizing)" if "main" in result.get("arms", {}) else "")
             + ".\n")
    L.append("## Workloads\n")
    wl = result.get("workload") or {}
    plan = result.get("plan") or {}
    desc = {
        "shared_system": lambda s: (
            f"{s['users']} users × {s['turns']} turns; every turn = one shared system prompt of "
            f"{s['system_len']} tokens + the user's history + a new message of "
            f"U[{s['msg_min']}, {s['msg_max']}] tokens; replies U[{s['reply_min']}, {s['reply_max']}]. "
            "Users concurrently, turns in sequence; user 0's first turn goes alone first."),
        "fanout": lambda s: (
            f"{s['docs']} documents of {s['doc_len']} tokens × {s['questions']} questions of "
            f"U[{s['q_min']}, {s['q_max']}] tokens; answers U[{s['answer_min']}, {s['answer_max']}]. "
            "The first question per document first, then all the others at once."),
        "branch_edit": lambda s: (
            f"{s['convs']} conversations: an opening of U[{s['opening_min']}, {s['opening_max']}] "
            f"tokens + {s['turns']} turns (messages U[{s['msg_min']}, {s['msg_max']}], replies "
            f"U[{s['reply_min']}, {s['reply_max']}]) in sequence, then {s['edits']} re-sends of the "
            "transcript cut inside an earlier turn's message (a random turn and position) + a new "
            f"message of U[{s['edit_min']}, {s['edit_max']}] tokens, sent at once; conversations "
            "concurrently."),
        "agents": lambda s: (
            f"`admission_workloads.agent_script`: {s['convs']} conversations × {s['turns']} turns, own system "
            f"prompt of {s['system_len']} tokens, user messages U[{s['user_min']}, {s['user_max']}], "
            f"replies U[{s['reply_min']}, {s['reply_max']}]; turn k+1 re-sends the transcript when "
            "turn k finished (`admission_workloads.run_agent`)."),
        "no_reuse": lambda s: (
            f"`admission_workloads.no_reuse_requests`: {s['requests']} random prompts of U[{s['in_min']}, "
            f"{s['in_max']}] tokens (first tokens all different), U[{s['out_min']}, {s['out_max']}] "
            "output tokens, all at once."),
    }
    for c in classes:
        extra = ""
        if c in plan:
            extra = (f" {plan[c]['requests']} requests, {plan[c]['prompt_tokens']:,} prompt tokens; "
                     f"a cache that forgets nothing hits about {plan[c]['expected_share']:.0%}.")
        L.append(f"* **{c}**: " + (desc[c](wl[c]) if c in wl else "") + extra)
    L.append("\nEvery output is exactly its `max_new_tokens` (`ignore_eos`); every divergence point "
             "is a different token. *expected shared* = per request the longest prefix shared with "
             "an earlier request's prompt + output (minus its last token) in script order, capped "
             "at prompt - 1, page-floored: an upper bound no arm can beat.\n")
    L.append("## Acceptance (the issue's done-when)\n")
    L.append(f"At `ample`: islands' cached tokens ≥ upstream's − one page ({page}) per request. At "
             "`0.17-eq` / `0.10-eq`: ≥ the better of `upstream` and `upstream_knobs`; and where "
             f"upstream binds (its mean running while requests queue < cap − 1 = {cap - 1}), islands "
             f"run ≥ {cap - 1} while requests queue, with 0 retractions. 'While queued' = the mean "
             "`#running-req` over the decode steps whose `#queue-req` > 0: a finite workload ramps "
             "up and drains below the cap in every arm, so the time mean (in the tables) cannot "
             "reach the cap.\n")
    checks = result.get("acceptance") or []
    L.append("| pool | class | criterion | islands | reference | result | detail |")
    L.append("|---|---|---|---|---|---|---|")
    for c in checks:
        mark = {True: "**PASS**", False: "**FAIL**", None: "n/a"}[c["pass"]]
        L.append(f"| {c['pool']} | {c['class']} | {c['criterion']} | {_f(c['islands'])} | "
                 f"{_f(c['reference'])} | {mark} | {c['detail']} |")
    n_pass = sum(c["pass"] is True for c in checks)
    n_fail = sum(c["pass"] is False for c in checks)
    L.append(f"\n{n_pass} PASS, {n_fail} FAIL, {sum(c['pass'] is None for c in checks)} n/a.\n")
    L.append("## Results per pool\n")
    L.append("Rows: class × metric; columns: arms. *mean running (time)* is time-weighted over "
             "`sglang:num_running_reqs` samples; *peak SWA used* is the max `#swa token` of the "
             "decode log lines (locked + request-owned SWA; evictable excluded); *SWA held / "
             "running req* is islands' `swa held/req (max ...)` (– for upstream arms); CPU-s = "
             "CPU seconds of the server's process tree.\n")
    for p in pools:
        x = pt.get(p, {})
        L.append(f"### {p} (SWA pool {_f(x.get('swa_pool'), 0)} tokens)\n")
        L.append("| class | metric | " + " | ".join(f"`{a}`" for a in arm_names) + " |")
        L.append("|---|---|" + "---|" * len(arm_names))
        for c in classes:
            for label, key, nd in ROWS:
                cells = []
                for a in arm_names:
                    r = arms[a].get(p, {}).get(c)
                    cells.append(_f(r.get(key), nd) if r else "not run")
                L.append(f"| {c} | {label} | " + " | ".join(cells) + " |")
        L.append("")
    errors = result.get("errors") or {}
    if errors:
        L.append("## Errors\n")
        for k, v in errors.items():
            L.append(f"* `{k}`: {v}")
        L.append("")
    if result.get("png"):
        L.append(f"Plot: `{pathlib.Path(result['png']).name}` (cached share per class and arm with "
                 "the expected share; mean running while queued and time-weighted).\n")
    bt = result.get("boot_times_s") or {}
    if bt:
        L.append("Per boot wall time (boot + classes, s): " + ", ".join(
            f"`{k}` {v}" for k, v in bt.items()) + ".\n")
    return "\n".join(L) + "\n"


COLORS = {"upstream": "#d62728", "upstream_knobs": "#ff7f0e", "islands_eager": "#17becf",
          "islands": "#2ca02c", "islands_auto": "#9467bd", "main": "#7f7f7f"}


def plot(result: Dict[str, Any], png: pathlib.Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    arms = result["arms"]
    arm_names = [a for a in ARMS if a in arms]
    pools = [p for p in POOLS if any(p in arms[a] for a in arm_names)]
    classes = [c for c in CLASSES if any(c in arms[a].get(p, {}) for a in arm_names for p in pools)]
    cap = result["cap"]
    fig, axes = plt.subplots(2, len(pools), figsize=(5.2 * len(pools), 8.2), squeeze=False)
    width = 0.8 / max(1, len(arm_names))
    xs = range(len(classes))
    for col, p in enumerate(pools):
        ax0, ax1 = axes[0, col], axes[1, col]
        for i, a in enumerate(arm_names):
            off = [x - 0.4 + width * (i + 0.5) for x in xs]
            recs = [arms[a].get(p, {}).get(c) for c in classes]
            ax0.bar(off, [r["cached_share"] if r else 0 for r in recs], width, color=COLORS[a],
                    label=a)
            ax1.bar(off, [(r.get("mean_running_queued") or 0) if r else 0 for r in recs], width,
                    color=COLORS[a], label=a if col == 0 else None)
            ax1.scatter(off, [(r.get("mean_running") or 0) if r else 0 for r in recs], marker="_",
                        s=120, color="black", zorder=3)
        for x, c in zip(xs, classes):
            exp = [arms[a][p][c]["expected_share"] for a in arm_names if c in arms[a].get(p, {})]
            if exp:
                ax0.hlines(max(exp), x - 0.42, x + 0.42, colors="black", linestyles="dotted")
        ax1.axhline(cap, ls="--", color="black", lw=1)
        pool_tokens = (result.get("pools") or {}).get(p, {}).get("swa_pool")
        ax0.set_title(f"{p}: SWA pool {pool_tokens:,} tokens" if pool_tokens else p, fontsize=10)
        ax0.set_ylim(0, 1.0)
        ax1.set_ylim(0, cap + 2)
        for ax in (ax0, ax1):
            ax.set_xticks(list(xs))
            ax.set_xticklabels(classes, rotation=20, fontsize=8)
            ax.grid(alpha=0.3, axis="y")
        if col == 0:
            ax0.set_ylabel("cached / prompt tokens\n(dotted: a cache that forgets nothing)")
            ax1.set_ylabel(f"running while queued (bars)\ntime mean (black ticks); cap {cap}")
    h, lab = axes[0, 0].get_legend_handles_labels()
    fig.legend(h, lab, loc="lower center", ncol=len(arm_names), fontsize=9, frameon=False)
    fig.suptitle("Prefix reuse per class, arm and SWA pool (tiny model on CPU, w=32, cp=512, "
                 f"cap {cap})", fontsize=11)
    fig.tight_layout(rect=(0, 0.04, 1, 0.97))
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=90)
    plt.close(fig)


# ----------------------------------------------------------------------------- CLI


def _csv(s: str, allowed: Sequence[str], what: str, ap) -> List[str]:
    xs = [x for x in s.split(",") if x]
    bad = [x for x in xs if x not in allowed]
    if bad or not xs:
        ap.error(f"unknown or no {what}: {bad}; choose from {','.join(allowed)}")
    return [x for x in allowed if x in xs]  # fixed order


def parse_args(argv=None):
    ap = argparse.ArgumentParser(
        prog="benchmarks/prefix_reuse.py",
        description=(
            "Prefix reuse under SWA-pool pressure on the real SGLang server (CPU, tiny hybrid-SWA "
            "model; window 32, chunk 512, page 1, cap 16; admission.py's shape and pools). Boots "
            "one server per (arm, pool) and runs five seeded workload classes on it in a fixed "
            "order with /flush_cache between them: shared_system (users x turns behind one "
            "system prompt), fanout (documents x questions), branch_edit (transcripts re-sent "
            "edited at an earlier turn), agents (admission's multi-turn agents), no_reuse "
            "(random prompts). Reports per (arm, pool, class) cached tokens and share, what a "
            "cache that forgets nothing could hit, prefill tokens computed, mean/max running, "
            "retractions, peak SWA used, SWA held per running request, and requests per server "
            "CPU second; evaluates the issue's acceptance criteria (PASS/FAIL) and writes JSON, "
            "markdown and a plot. The module docstring has the definitions."),
        epilog=(
            "arms: upstream (stock), upstream_knobs (+ upstream's split-leaf and release-after-"
            "window env knobs), islands_eager (--enable-swa-islands --swa-islands-reclaim "
            "eager), islands (--enable-swa-islands, default reclaim lazy); islands_auto "
            "(--swa-islands-reclaim auto: eager below one chunk of free SWA) runs only when named in "
            "--arms\n"
            "pools: ample (--swa-full-tokens-ratio 0.5), 0.17-eq and 0.10-eq (the planner's "
            "production pools scaled to the CPU shape: admission_setup.plan_mapping)\n"
            "presets: full (default, ~45 min on 2 quiet cores), --quick (< 10 min), --smoke "
            "(seconds per class; for the server test, numbers mean nothing)\n\n"
            "examples:\n"
            "  .venv/bin/python benchmarks/prefix_reuse.py --plan-only\n"
            "  .venv/bin/python benchmarks/prefix_reuse.py --quick\n"
            "  .venv/bin/python benchmarks/prefix_reuse.py --pools 0.17-eq --arms upstream,islands "
            "--classes fanout\n"
            "  .venv/bin/python benchmarks/prefix_reuse.py --from-runs .work/prefix_reuse/STAMP"),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    size = ap.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true",
                      help="the quick preset (fewer users, documents, conversations and shorter "
                           "replies): under 10 minutes for all 12 boots on 2 cores")
    size.add_argument("--smoke", action="store_true",
                      help="tiny workloads (the server test's size; numbers mean nothing)")
    ap.add_argument("--classes", default=",".join(CLASSES),
                    help=f"comma list, run in this fixed order: {','.join(CLASSES)} (default all)")
    ap.add_argument("--arms", default=",".join(DEFAULT_ARMS),
                    help=f"comma list of arms: {','.join(ARMS)} (default {','.join(DEFAULT_ARMS)})")
    ap.add_argument("--pools", default=",".join(POOLS),
                    help=f"comma list of pools: {','.join(POOLS)} (default all)")
    ap.add_argument("--seed", type=int, default=Workload().seed, help="workload seed")
    ap.add_argument("--plan-only", action="store_true",
                    help="print the pools, arms and per-class workload sizes (requests, prompt "
                         "tokens, expected shared tokens) as JSON; no server")
    add_output_args(ap, output_files("prefix_reuse[_quick|_smoke]"))
    ap.add_argument("--log-dir", default=str(ROOT / ".work" / "prefix_reuse"),
                    help="server logs and raw per-boot JSON, one STAMP folder per run (not committed)")
    ap.add_argument("--from-runs", metavar="DIR", default=None,
                    help="no server: rebuild JSON, markdown and plot from the raw per-boot files of "
                         "an earlier run (a --log-dir/STAMP folder)")
    ap.add_argument("--eviction-interval", type=int, default=None,
                    help="SGLANG_SWA_EVICTION_INTERVAL for every arm (default: admission's scaled "
                         "decode tail, 34; 0 keeps sglang's 128)")
    ap.add_argument("--sample-interval", type=float, default=0.25, help="/metrics sampling period, s")
    ap.add_argument("--lead", type=float, default=0.3, help="pause before each class, s")
    ap.add_argument("--settle", type=float, default=0.7,
                    help="pause after each class for its last log lines and gauges, s")
    ap.add_argument("--omp-threads", type=int, default=2, help="OMP threads of each server")
    ap.add_argument("--boot-timeout", type=float, default=600.0, help="server boot timeout, s")
    ap.add_argument("--request-timeout", type=float, default=3600.0, help="per request timeout, s")
    a = ap.parse_args(argv)
    a.argv = list(sys.argv[1:] if argv is None else argv)
    a.class_list = _csv(a.classes, CLASSES, "classes", ap)
    a.arm_list = _csv(a.arms, list(ARMS), "arms", ap)
    a.pool_list = _csv(a.pools, POOLS, "pools", ap)
    a.preset = "quick" if a.quick else "smoke" if a.smoke else "full"
    a.stem = {"full": "prefix_reuse", "quick": "prefix_reuse_quick",
              "smoke": "prefix_reuse_smoke"}[a.preset]
    return a


def output_files(stem: str) -> Dict[str, str]:
    return {"json": f"{stem}.json", "md": f"{stem}.md", "png": f"{stem}.png"}


def workload_from_args(a) -> Workload:
    wl = dataclasses.replace(PRESETS[a.preset], seed=a.seed)
    check_workload(wl)
    return wl


def _machine() -> Dict[str, Any]:
    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load = None
    return {"cpus": os.cpu_count(), "platform": platform.platform(terse=True), "load": load}


def main(argv=None) -> int:
    a = parse_args(argv)
    mapping = admission_setup.plan_mapping()
    if a.eviction_interval is None:
        a.eviction_interval = mapping["cpu"]["eviction_interval"]
    pools = pool_table(mapping)
    wl = workload_from_args(a)
    if a.plan_only:
        print(json.dumps({
            "cap": CPU.cap, "page": CPU.page, "window": CPU.window, "chunk": CPU.chunk,
            "preset": a.preset, "eviction_interval": a.eviction_interval,
            "pools": {p: pools[p] for p in a.pool_list},
            "arms": {n: {"args": list(ARMS[n]["args"]), "env": ARMS[n]["env"]} for n in a.arm_list},
            "boots": len(a.arm_list) * len(a.pool_list),
            "classes": plan_classes(wl, a.class_list),
        }, indent=1))
        return 0
    if a.from_runs:
        return rebuild(pathlib.Path(a.from_runs), a)
    command = " ".join(shlex.quote(x) for x in [".venv/bin/python", "benchmarks/prefix_reuse.py",
                                                 *(sys.argv[1:] if argv is None else argv)])
    stamp = time.strftime("%Y%m%d-%H%M%S")
    log_dir = pathlib.Path(a.log_dir) / stamp
    log_dir.mkdir(parents=True, exist_ok=True)
    scripts = build_scripts(wl, a.class_list)
    m = _machine()
    meta = {"command": command, "date": time.strftime("%Y-%m-%d %H:%M"), "git_head": git_head(),
            "preset": a.preset, "eviction_interval": a.eviction_interval,
            "workload": wl.to_dict(), "classes": a.class_list, "arm_order": a.arm_list,
            "pool_order": a.pool_list, "pools": pools,
            "plan": plan_classes(wl, a.class_list),
            "machine": {"cpus": m["cpus"], "platform": m["platform"], "load_start": m["load"]}}
    (log_dir / "meta.json").write_text(json.dumps(meta, indent=1))
    log(f"{len(a.arm_list)} arms x {len(a.pool_list)} pools = {len(a.arm_list) * len(a.pool_list)} "
        f"boots, classes {a.class_list} ({a.preset}); logs in {log_dir}")
    for c in a.class_list:
        p = meta["plan"][c]
        log(f"  {c}: {p['requests']} requests, {p['prompt_tokens']:,} prompt tokens, expected "
            f"share {p['expected_share']:.2f}")

    from islands_harness.tiny_model import build_tiny_model

    model_dir = build_tiny_model(window=CPU.window)
    t_start = time.monotonic()
    boots: List[Dict[str, Any]] = []
    for pool_name in a.pool_list:  # pools outer: the arms of one pool run close in time
        for arm in a.arm_list:
            try:
                b = run_boot(arm, pool_name, pools[pool_name], scripts, a.class_list, a, model_dir,
                             log_dir)
            except Exception as e:  # noqa: BLE001 - record it, run the other boots
                log(f"[{arm} @{pool_name}] FAILED: {type(e).__name__}: {e}")
                b = {"arm": arm, "pool": pool_name, "error": f"{type(e).__name__}: {e}",
                     "classes": {}}
            boots.append(b)
            (log_dir / f"{arm}_{pool_name}.json").write_text(json.dumps(b, indent=1))
            log(f"[{arm} @{pool_name}] done in {b.get('boot_total_s', 0):.0f} s; "
                f"{time.monotonic() - t_start:.0f} s elapsed")
    meta["runtime_s"] = round(time.monotonic() - t_start, 1)
    meta["machine"]["load_end"] = _machine()["load"]
    (log_dir / "meta.json").write_text(json.dumps(meta, indent=1))
    rc = write_outputs(boots, meta, a, log_dir)
    return rc if not any("error" in b for b in boots) else 1


def rebuild(run_dir: pathlib.Path, a) -> int:
    meta_path = run_dir / "meta.json"
    if not meta_path.exists():
        raise SystemExit(f"no meta.json in {run_dir}")
    meta = json.loads(meta_path.read_text())
    boots = [json.loads(f.read_text()) for f in sorted(run_dir.glob("*.json")) if f.name != "meta.json"]
    if not boots:
        raise SystemExit(f"no per-boot files in {run_dir}")
    meta.setdefault("runtime_s", round(sum(b.get("boot_total_s", 0) for b in boots), 1))
    meta["rebuilt_by"] = " ".join(shlex.quote(x) for x in [".venv/bin/python", "benchmarks/prefix_reuse.py", *a.argv])
    log(f"rebuilding from {len(boots)} boots in {run_dir}")
    return write_outputs(boots, meta, a, run_dir)


def assemble(boots: List[Dict[str, Any]], meta: Dict[str, Any]) -> Dict[str, Any]:
    arms: Dict[str, Dict[str, Dict[str, Any]]] = {}
    for b in boots:
        if b.get("classes"):
            arms.setdefault(b["arm"], {})[b["pool"]] = b["classes"]
    order = {n: i for i, n in enumerate(ARMS)}
    arms = {k: arms[k] for k in sorted(arms, key=order.get)}
    result = {
        "cap": CPU.cap, "page": CPU.page, "window": CPU.window, "chunk": CPU.chunk,
        "max_total_tokens": CPU.max_total_tokens,
        **{k: meta.get(k) for k in ("command", "date", "git_head", "preset", "runtime_s",
                                    "eviction_interval", "machine", "pools", "workload", "plan",
                                    "rebuilt_by")},
        "boots": len(boots),
        "boot_times_s": {f"{b['arm']}@{b['pool']}": b.get("boot_total_s") for b in boots},
        "boot_s": {f"{b['arm']}@{b['pool']}": b.get("boot_s") for b in boots},
        "errors": {f"{b['arm']}@{b['pool']}": b["error"] for b in boots if "error" in b},
        "arms": arms,
    }
    pools = [p for p in POOLS if any(p in v for v in arms.values())]
    classes = [c for c in CLASSES if any(c in v.get(p, {}) for v in arms.values() for p in pools)]
    result["acceptance"] = acceptance(arms, CPU.cap, CPU.page, pools, classes)
    checks = [c["pass"] for c in result["acceptance"] if c["pass"] is not None]
    result["acceptance_summary"] = {"pass": sum(checks), "fail": len(checks) - sum(checks),
                                    "all_pass": bool(checks) and all(checks)}
    return result


def write_outputs(boots: List[Dict[str, Any]], meta: Dict[str, Any], a,
                  run_dir: pathlib.Path) -> int:
    """Assemble, check and write the files asked for (``bench_outputs``)."""
    paths = output_paths(a, output_files(a.stem), run_dir)
    result = assemble(boots, meta)
    result["png"] = str(paths["png"]) if paths["png"] else None
    if not result["arms"]:
        log("no boot produced results; nothing to write")
        return 1
    validate_result(result)
    md = to_markdown(result)
    written = write_files(paths, {"json": write_json(result), "md": write_text(md),
                                  "png": lambda p: plot(result, p)})
    s = result["acceptance_summary"]
    log(f"wrote {', '.join(written) or 'nothing'}; runtime {(result['runtime_s'] or 0) / 60:.1f} "
        f"min; acceptance {s['pass']} PASS / {s['fail']} FAIL")
    return 0


if __name__ == "__main__":
    sys.exit(main())
