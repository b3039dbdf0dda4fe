#!/usr/bin/env python
"""One cell of ``prefix_reuse_sim.py`` (arm, SWA pool, class, seed), replayed in the scheduler glue
of the arm's own sglang: ``islands_harness.sim.MiniScheduler`` on 0.5.15.post1,
``islands_harness.sim_main.MainMiniScheduler`` on 0.5.23. Holds only what a replay needs (the
clients, the driver, the arms), so it imports in every environment: ``prefix_reuse_sim.py`` runs the
0.5.23 arms as a worker of this module in `.venv-main` / `.venv-main-islands`:

    PYTHONPATH=benchmarks:. .venv-main/bin/python -m prefix_reuse.replay '{"arm": "main", "cells": [...], ...}'

prints one JSON line per cell (``{"cell": [seed, pool, arm, class], "result": {...}}``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import _bench_path  # noqa: F401  (puts the repository root and benchmarks/ on sys.path)
from islands_harness.knobs import UPSTREAM_KNOBS_ENV
from prefix_reuse.workloads import PRESETS, build_scripts, expected_shared_per_request, in_script_order

SIM_ARMS: Dict[str, Dict[str, Any]] = {
    # name: StackConfig fields and the environment while the arm runs
    "upstream": {"islands": False, "reclaim": "lazy", "env": {}},
    "upstream_knobs": {"islands": False, "reclaim": "lazy", "env": dict(UPSTREAM_KNOBS_ENV)},
    "islands_eager": {"islands": True, "reclaim": "eager", "env": {}},
    "islands": {"islands": True, "reclaim": "lazy", "env": {}},
    "islands_auto": {"islands": True, "reclaim": "auto", "env": {}},
}
# every arm of the server benchmark, on the same target
"""The arms on sglang 0.5.15.post1. An arm on 0.5.23 is given by its server flags and
environment instead (``prefix_reuse.arms.ARMS``), which the replay boots its stack with."""


@dataclasses.dataclass(frozen=True)
class Shape:
    """The server shape a replay runs at (``admission.setup.CpuShape``'s fields)."""

    window: int
    page: int
    chunk: int
    cap: int
    max_total_tokens: int


Spec = Tuple[List[int], int, Tuple]  # (input ids, max new tokens, order)
Client = Iterator[List[Spec]]  # yields a group of requests, receives their outputs


def next_token(req) -> int:
    h = hashlib.blake2b(f"{req.rid}:{len(req.output_ids)}".encode(), digest_size=4).digest()
    return 4 + int.from_bytes(h, "little") % 1000


# ----------------------------------------------------------------------------- clients


def _one(spec: Spec) -> Client:
    yield [spec]


def _turns(transcript: List[int], turns: Sequence[Dict[str, Any]], order, k0: int = 0) -> Client:
    """Turns in sequence: each prompt = transcript + the turn's user tokens; the reply extends it."""
    for k in range(k0, len(turns)):
        prompt = transcript + list(turns[k]["user"])
        (out,) = yield [(prompt, turns[k]["max_new_tokens"], order(k))]
        transcript = prompt + out


def _branch_conv(c: Dict[str, Any]) -> Client:
    transcript, turn_start = list(c["opening"]), []
    for k, t in enumerate(c["turns"]):
        turn_start.append(len(transcript))
        prompt = transcript + t["user"]
        (out,) = yield [(prompt, t["max_new_tokens"], (0, k, c["conv"]))]
        transcript = prompt + out
    yield [(transcript[: turn_start[e["turn"] - 1] + e["keep"]] + e["user"], e["max_new_tokens"],
            (1, c["conv"], i)) for i, e in enumerate(c["edits"])]


def phases(cls: str, script: Any) -> List[List[Client]]:
    """The class's clients, as barrier-separated phases (``prefix_reuse.clients.run_*`` in order)."""
    if cls == "fanout":
        docs = script["docs"]

        def q(d, k):
            qq = docs[d]["questions"][k]
            return (list(docs[d]["doc"]) + qq["q"], qq["max_new_tokens"], (0, d) if k == 0 else (1, k, d))
        return [[_one(q(d, 0)) for d in range(len(docs))],
                [_one(q(d, k)) for k in range(1, max(len(x["questions"]) for x in docs))
                 for d in range(len(docs)) if k < len(docs[d]["questions"])]]
    if cls == "branch_edit":
        return [[_branch_conv(c) for c in script["convs"]]]
    if cls == "agents":
        return [[_turns(list(c["system"]), c["turns"], lambda k, c=c: (k, c["conv"]))
                 for c in script]]
    if cls == "no_reuse":
        return [[_one((list(r["input_ids"]), r["max_new_tokens"], (i,))) for i, r in enumerate(script)]]
    if cls == "shared_system":
        return []  # needs user 0's first output: see run_class
    raise ValueError(cls)


def drive(sched, clients: List[Client], latency: int = 0) -> List[Dict[str, Any]]:
    """Run ``clients`` to completion; a row per finished request. ``latency``: scheduler steps
    between a group's last finish and the client's next group joining the queue (the server's
    detokenizer, HTTP and tokenizer round trip; 0: the same step)."""
    rows: List[Dict[str, Any]] = []
    pending: Dict[str, Tuple[int, int, Tuple]] = {}
    groups: Dict[int, list] = {}
    gid = [0]
    later: List[Tuple[int, Client, list]] = []  # (due step, client, outputs)
    step = 0

    def start(client, outputs=None):
        try:
            specs = next(client) if outputs is None else client.send(outputs)
        except StopIteration:
            return
        g = gid[0]
        gid[0] += 1
        groups[g] = [client, [None] * len(specs), len(specs)]
        for i, (ids, max_new, order) in enumerate(specs):
            rid = f"g{g}.{i}:" + ".".join(map(str, order))
            sched.submit(rid, ids, max_new)
            pending[rid] = (g, i, order)

    for c in clients:
        start(c)
    seen = len(sched.finished)
    while pending or later:
        due = [x for x in later if x[0] <= step]
        later = [x for x in later if x[0] > step]
        for _, client, outputs in due:
            start(client, outputs)
        if not pending and not later:
            break
        step += 1
        if sched.step() is None and sched.idle() and not later:
            raise RuntimeError(f"the scheduler went idle with {len(pending)} requests pending")
        while seen < len(sched.finished):
            req = sched.finished[seen]
            seen += 1
            if req.rid not in pending:
                continue
            g, i, order = pending.pop(req.rid)
            rows.append({"order": list(order), "input_ids": list(req.origin_input_ids),
                         "output_ids": list(req.output_ids), "cached_tokens": int(req.cached_tokens),
                         "host_cached_tokens": int(getattr(req, "cached_tokens_host", 0))})
            grp = groups[g]
            grp[1][i] = list(req.output_ids)
            grp[2] -= 1
            if grp[2] == 0:
                del groups[g]
                later.append((step + latency, grp[0], grp[1]))
    return rows


def run_class(sched, cls: str, script: Any, latency: int = 0) -> List[Dict[str, Any]]:
    if cls == "shared_system":
        system, users = list(script["system"]), script["users"]
        t0 = users[0]["turns"][0]
        rows = drive(sched, [_one((system + t0["user"], t0["max_new_tokens"], (0,)))], latency)
        tr0 = system + t0["user"] + rows[0]["output_ids"]
        clients = [_turns(tr0, users[0]["turns"], lambda k: (1, k, 0), k0=1)]
        clients += [_turns(list(system), u["turns"], lambda k, u=u: (1, k, u["user"])) for u in users[1:]]
        return rows + drive(sched, clients, latency)
    rows: List[Dict[str, Any]] = []
    for clients in phases(cls, script):
        rows += drive(sched, clients, latency)
    return rows



# ----------------------------------------------------------------------------- one cell


def _scheduler(arm: str, shape: Shape, swa_pool: int, main_args: Optional[Sequence[str]],
               full_pool: Optional[int] = None):
    """The arm's stack and scheduler glue at ``swa_pool`` SWA tokens and ``full_pool`` full ones
    (None: the shape's), in this interpreter: 0.5.23's booted with ``main_args`` (its server
    flags, a host tier's included) when given, else 0.5.15's."""
    full_pool = full_pool or shape.max_total_tokens
    if main_args is not None:
        from islands_harness.sim_main import MainMiniScheduler, build_main_stack

        stack = build_main_stack(window=shape.window, page=shape.page, chunk=shape.chunk,
                                 full_pool=full_pool, swa_pool=swa_pool,
                                 max_reqs=shape.cap + 1, args=tuple(main_args))
        return MainMiniScheduler(stack, max_running=shape.cap, next_token=next_token)
    from islands_harness.sim import MiniScheduler
    from islands_harness.stack import build_stack

    a = SIM_ARMS[arm]
    stack = build_stack(window=shape.window, page=shape.page, chunk=shape.chunk,
                        full_pool=full_pool, swa_pool=swa_pool, max_reqs=shape.cap + 1,
                        islands=a["islands"], reclaim=a["reclaim"], ratio=0.5)
    return MiniScheduler(stack, max_running=shape.cap, next_token=next_token)


def run_one(arm: str, shape: Shape, swa_pool: int, cls: str, script: Any, eviction_interval: int,
            latency: int = 0, main: Optional[Dict[str, Any]] = None,
            full_pool: Optional[int] = None) -> Dict[str, Any]:
    """One (arm, pool, class) replay in this interpreter, which must hold the arm's sglang.
    ``main``: a 0.5.23 arm's ``{"args": server flags, "env": environment}``; ``full_pool``: the
    pool's full tokens where they are not the shape's (``lean-device``)."""
    from islands_harness.stack import env_overrides

    env = main["env"] if main is not None else SIM_ARMS[arm]["env"]
    with env_overrides({**env, "SGLANG_SWA_EVICTION_INTERVAL": str(eviction_interval)}):
        sched = _scheduler(arm, shape, swa_pool, None if main is None else main["args"],
                           full_pool)
        rows = run_class(sched, cls, script, latency)
    exp = expected_shared_per_request(in_script_order(rows), shape.page)
    ordered = sorted(rows, key=lambda r: tuple(r["order"]))
    return {"cached_tokens": sum(r["cached_tokens"] for r in rows), "expected_shared_tokens": sum(exp),
            "host_cached_tokens": sum(r["host_cached_tokens"] for r in rows),
            "prompt_tokens": sum(len(r["input_ids"]) for r in rows), "requests": len(rows),
            "retractions": sched.retractions,
            "rows": [{"order": r["order"], "prompt_tokens": len(r["input_ids"]),
                      "cached_tokens": r["cached_tokens"], "expected_shared_tokens": e}
                     for r, e in zip(ordered, exp)]}


Cell = Tuple[int, str, str, str]  # (seed, pool, arm, class)


def run_cells(spec: Dict[str, Any]) -> Iterator[Tuple[Cell, Dict[str, Any]]]:
    """Each cell of ``spec`` (``cells``, ``shape``, ``preset``, ``classes``, ``swa_pools``,
    ``full_pools`` (optional: a pool's full tokens where they are not the shape's),
    ``eviction_interval``, ``latency``; ``main``: the 0.5.23 arms' flags and environment by name)
    replayed in this interpreter, in order."""
    shape = Shape(**spec["shape"])
    scripts: Dict[int, Dict[str, Any]] = {}
    for seed, pool, arm, cls in spec["cells"]:
        if seed not in scripts:
            wl = dataclasses.replace(PRESETS[spec["preset"]], seed=seed)
            scripts[seed] = build_scripts(wl, spec["classes"])
        yield (seed, pool, arm, cls), run_one(arm, shape, spec["swa_pools"][pool], cls,
                                              scripts[seed][cls], spec["eviction_interval"],
                                              spec["latency"], spec.get("main", {}).get(arm),
                                              spec.get("full_pools", {}).get(pool))


def worker(spec_json: str) -> int:
    """Run the cells of ``spec_json`` here, printing a JSON line per cell."""
    for cell, r in run_cells(json.loads(spec_json)):
        print(json.dumps({"cell": list(cell), "result": r}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(worker(sys.argv[1]))
