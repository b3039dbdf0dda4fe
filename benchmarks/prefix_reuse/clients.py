"""Prefix reuse benchmark, clients: how each class's script is sent (concurrency, waves, turns
in sequence), through a ``Send`` (one greedy ``/generate`` request, or a fake one without a
server), and the per-class plan a fake run gives (requests, prompt tokens, expected hits).

Every runner returns one row per request with ``order`` (its place in the script: sorting by it
gives script order, see ``prefix_reuse.workloads.in_script_order``), ``input_ids``,
``output_ids``, ``prompt_tokens``, ``completion_tokens`` and ``cached_tokens``.
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import itertools
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import _bench_path  # noqa: F401  (puts the repository root and benchmarks/ on sys.path)
from admission import workloads as admission_workloads
from islands_harness.client import generate, thread_session
from prefix_reuse.arms import CPU
from prefix_reuse.workloads import (CLASSES, Workload, build_scripts, expected_shared_tokens,
                                    in_script_order, max_context)

Send = Callable[[List[int], int, Tuple], Dict[str, Any]]
"""``send(input_ids, max_new_tokens, order)`` -> the request's row."""


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
    """``[fn(x) for x in items]`` on up to ``workers`` threads at once (results in input order)."""
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


def run_branch_edit(script: Dict[str, Any], send: Send,
                    progress: Callable[[str], None]) -> List[Dict[str, Any]]:
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
    """``admission.workloads.run_agent`` on the server (turn k+1 sent when turn k finished)."""
    rows = admission_workloads.run_agent(base_url, convs, timeout, lambda m: None,
                                         mode="after_finish", keep_ids=True)
    for r in rows:
        r["order"] = [r["turn"], r["conv"]]
    progress(f"agents: {len(rows)} requests done")
    return rows


def run_agents_fake(convs: List[Dict[str, Any]], send: Send) -> List[Dict[str, Any]]:
    """``admission.workloads.run_agent``'s transcript rule with ``send`` (plan and tests)."""
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
    """``admission.workloads.run_no_reuse`` on the server: every request at once."""
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
        exp = expected_shared_tokens(in_script_order(rows), page)
        prompt = sum(r["prompt_tokens"] for r in rows)
        out[c] = {"requests": len(rows), "prompt_tokens": prompt, "expected_shared_tokens": exp,
                  "expected_share": round(exp / prompt, 4) if prompt else 0.0,
                  "output_tokens": sum(r["completion_tokens"] for r in rows),
                  "max_context": ctx[c], "sizes": dataclasses.asdict(getattr(wl, c))}
    return out
