#!/usr/bin/env python
"""Prefix reuse, replayed without a model and without timing: ``prefix_reuse.py``'s workloads
(same builders, presets, pools and arms) driven through ``islands_harness.sim.MiniScheduler``,
the scheduler's event-loop glue around the real ``Req`` / ``ScheduleBatch`` / ``PrefillAdder`` /
tree cache / pools / allocator of the installed (patched) SGLang. Only the next token id is
synthetic (a hash of request id and position, so outputs never collide).

Why next to the server benchmark: on the real server, which request is admitted before which
depends on thread timing, and at the lean pools one admission order can move a class's cached
tokens by 10%. Here each (arm, pool, class, seed) is deterministic, so differences between arms
are the cache's, and several seeds show which differences hold across workloads.

Clients behave as in ``prefix_reuse.py``: a group of requests is submitted at once; a client's
next group goes in when every request of its group finished (its outputs extend the transcript);
phases are barriers (fanout's second wave starts when the first finished; shared_system's users
start when user 0's first turn finished). Shape: window 32, page 1, chunk 512, cap 16, full pool
65,536, ``SGLANG_SWA_EVICTION_INTERVAL`` 34 (``admission_setup.CpuShape``, ``plan_mapping``).

Output: JSON (per arm, pool, class: cached tokens, expected shared tokens and retractions per
seed) and a markdown table of the sums over seeds, with islands (the default reclaim, ``lazy``)
against the better of the two upstream arms.

    .venv/bin/python benchmarks/prefix_reuse_sim.py                  # quick preset, seeds 0-2
    .venv/bin/python benchmarks/prefix_reuse_sim.py --seeds 0-4 --pools 0.17-eq,0.10-eq
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import os
import shlex
import sys
import time
from typing import Any, Dict, Iterator, List, Sequence, Tuple

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _bench_path  # noqa: E402  (puts the repository root and benchmarks/ on sys.path)
import admission_setup  # noqa: E402
from prefix_reuse_arms import ARMS, CPU, MAIN_ARMS, POOLS, comma_choice, pool_table  # noqa: E402
from prefix_reuse_workloads import (CLASSES, PRESETS, build_scripts,  # noqa: E402
                                    expected_shared_per_request, in_script_order)
from bench_outputs import add_output_args, output_paths, write_files, write_json, write_text  # noqa: E402,E501
from islands_harness.provenance import git_head  # noqa: E402

ROOT = _bench_path.ROOT
OUTPUT_FILES = {"json": "prefix_reuse_sim.json", "md": "prefix_reuse_sim.md"}

SIM_ARMS: Dict[str, Dict[str, Any]] = {
    # name: StackConfig fields and the environment while the arm runs
    "upstream": {"islands": False, "reclaim": "lazy", "env": {}},
    "upstream_knobs": {"islands": False, "reclaim": "lazy", "env": dict(admission_setup.KNOBS_ENV)},
    "islands_eager": {"islands": True, "reclaim": "eager", "env": {}},
    "islands": {"islands": True, "reclaim": "lazy", "env": {}},
    "islands_auto": {"islands": True, "reclaim": "auto", "env": {}},
}
# every server arm on 0.5.15 (the `main*` arms run another sglang release in its own environment:
# not simulable here)
assert set(SIM_ARMS) == set(ARMS) - set(MAIN_ARMS), "the simulated arms are the server benchmark's"

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
    """The class's clients, as barrier-separated phases (``prefix_reuse_clients.run_*`` in order)."""
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
                         "output_ids": list(req.output_ids), "cached_tokens": int(req.cached_tokens)})
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


# ----------------------------------------------------------------------------- runs


def run_one(arm: str, swa_pool: int, cls: str, script: Any, eviction_interval: int,
            latency: int = 0) -> Dict[str, Any]:
    from islands_harness.sim import MiniScheduler
    from islands_harness.stack import build_stack, env_overrides

    a, cpu = SIM_ARMS[arm], CPU
    env = {**a["env"], "SGLANG_SWA_EVICTION_INTERVAL": str(eviction_interval)}
    with env_overrides(env):
        stack = build_stack(window=cpu.window, page=cpu.page, chunk=cpu.chunk,
                            full_pool=cpu.max_total_tokens, swa_pool=swa_pool, max_reqs=cpu.cap + 1,
                            islands=a["islands"], reclaim=a["reclaim"], ratio=0.5)
        sched = MiniScheduler(stack, max_running=cpu.cap, next_token=next_token)
        rows = run_class(sched, cls, script, latency)
    exp = expected_shared_per_request(in_script_order(rows), cpu.page)
    return {"cached_tokens": sum(r["cached_tokens"] for r in rows), "expected_shared_tokens": sum(exp),
            "prompt_tokens": sum(len(r["input_ids"]) for r in rows), "requests": len(rows),
            "retractions": sched.retractions}


def _seeds(s: str) -> List[int]:
    out: List[int] = []
    for part in s.split(","):
        lo, _, hi = part.partition("-")
        out += list(range(int(lo), int(hi or lo) + 1))
    return out


def parse_args(argv=None):
    ap = argparse.ArgumentParser(
        prog="benchmarks/prefix_reuse_sim.py",
        description=__doc__.split("\n\n")[0].replace("\n", " "),
        epilog="arms: " + ", ".join(SIM_ARMS) + "; pools: " + ", ".join(POOLS)
               + "; classes: " + ", ".join(CLASSES),
    )
    ap.add_argument("--preset", choices=sorted(PRESETS), default="quick",
                    help="workload sizes (prefix_reuse.py's presets; default quick)")
    ap.add_argument("--seeds", default="0-2", help="workload seeds, e.g. 0-4 or 0,3 (default 0-2)")
    ap.add_argument("--arms", default=",".join(SIM_ARMS), help="comma list (default all)")
    ap.add_argument("--pools", default=",".join(POOLS), help="comma list (default all)")
    ap.add_argument("--classes", default=",".join(CLASSES), help="comma list (default all)")
    ap.add_argument("--latency-steps", type=int, default=0,
                    help="scheduler steps between a client's finished group and its next group "
                         "joining the queue, as the server's HTTP round trip delays it (default 0)")
    add_output_args(ap, OUTPUT_FILES)
    a = ap.parse_args(argv)
    a.seed_list = _seeds(a.seeds)
    a.arm_list = comma_choice(a.arms, list(SIM_ARMS), "arms", ap)
    a.pool_list = comma_choice(a.pools, POOLS, "pools", ap)
    a.class_list = comma_choice(a.classes, CLASSES, "classes", ap)
    return a


def summarize(result: Dict[str, Any]) -> List[Dict[str, Any]]:
    """Per pool and class: islands' cached tokens summed over seeds against the better upstream
    arm's sum, and in how many seeds islands is at least as good as both upstream arms."""
    out = []
    arms = result["arms"]
    for pool in result["pools"]:
        for cls in result["classes"]:
            isl = arms.get("islands", {}).get(pool, {}).get(cls)
            refs = {n: arms[n][pool][cls] for n in ("upstream", "upstream_knobs")
                    if cls in arms.get(n, {}).get(pool, {})}
            if isl is None or not refs:
                continue
            best = max(refs, key=lambda n: sum(refs[n]["cached_tokens"]))
            n_seeds = len(isl["cached_tokens"])
            wins = sum(isl["cached_tokens"][i] >= max(r["cached_tokens"][i] for r in refs.values())
                       for i in range(n_seeds))
            out.append({"pool": pool, "class": cls, "islands": sum(isl["cached_tokens"]),
                        "best_upstream_arm": best, "best_upstream": sum(refs[best]["cached_tokens"]),
                        "seeds_at_least_as_good": wins, "seeds": n_seeds})
    return out


def to_markdown(result: Dict[str, Any]) -> str:
    L = ["# Prefix reuse, replayed in the scheduler glue (no model, no timing)\n",
         f"Generated by `benchmarks/prefix_reuse_sim.py` on {result['date']} (HEAD {result['git_head']}); "
         f"preset `{result['preset']}`, seeds {result['seeds']}, {result['runtime_s'] / 60:.1f} min.\n",
         "Command:\n", "```", result["command"], "```\n",
         "Real SGLang tree cache, pools, allocator, `Req`, `ScheduleBatch` and `PrefillAdder` driven by "
         "`islands_harness.sim.MiniScheduler`; the workloads, pools and arms of `prefix_reuse.py` "
         "(`islands` = the default reclaim, `lazy`; `islands_auto` = `--swa-islands-reclaim auto`). "
         "Deterministic: a rerun gives the same numbers. Cells: cached tokens summed over the seeds "
         "(share of what a cache that forgets nothing could hit).\n"]
    arms = [a for a in SIM_ARMS if a in result["arms"]]
    for pool in result["pools"]:
        L.append(f"## {pool} (SWA pool {result['swa_pools'][pool]:,} tokens)\n")
        L.append("| class | " + " | ".join(f"`{a}`" for a in arms) + " | expected |")
        L.append("|---|" + "---|" * (len(arms) + 1))
        for cls in result["classes"]:
            cells, exp = [], None
            for a in arms:
                r = result["arms"][a].get(pool, {}).get(cls)
                if r is None:
                    cells.append("–")
                    continue
                exp = sum(r["expected_shared_tokens"])
                c = sum(r["cached_tokens"])
                retr = sum(r["retractions"])
                cells.append(f"{c:,} ({c / exp:.3f})" + (f", {retr} retr." if retr else "") if exp else f"{c:,}")
            L.append(f"| {cls} | " + " | ".join(cells) + f" | {exp:,} |" if exp is not None else "")
        L.append("")
    L.append("## islands against the better upstream arm\n")
    L.append("| pool | class | islands | better upstream arm | islands / it | seeds where islands >= both |")
    L.append("|---|---|---|---|---|---|")
    for s in result["summary"]:
        ratio = f"{s['islands'] / s['best_upstream']:.3f}" if s["best_upstream"] else "–"
        L.append(f"| {s['pool']} | {s['class']} | {s['islands']:,} | `{s['best_upstream_arm']}` "
                 f"{s['best_upstream']:,} | {ratio} | {s['seeds_at_least_as_good']} / {s['seeds']} |")
    return "\n".join(L) + "\n"


def main(argv=None) -> int:
    a = parse_args(argv)
    mapping = admission_setup.plan_mapping()
    pools = pool_table(mapping)
    evict = mapping["cpu"]["eviction_interval"]
    t0 = time.monotonic()
    arms: Dict[str, Dict[str, Dict[str, Dict[str, List[int]]]]] = {}
    n, total = 0, len(a.seed_list) * len(a.arm_list) * len(a.pool_list) * len(a.class_list)
    for seed in a.seed_list:
        wl = dataclasses.replace(PRESETS[a.preset], seed=seed)
        scripts = build_scripts(wl, a.class_list)
        for pool in a.pool_list:
            for arm in a.arm_list:
                for cls in a.class_list:
                    r = run_one(arm, pools[pool]["swa_pool"], cls, scripts[cls], evict,
                                a.latency_steps)
                    rec = arms.setdefault(arm, {}).setdefault(pool, {}).setdefault(
                        cls, {"cached_tokens": [], "expected_shared_tokens": [], "retractions": [],
                              "prompt_tokens": [], "requests": []})
                    for k in rec:
                        rec[k].append(r[k])
                    n += 1
                    print(f"[prefix_reuse_sim {n}/{total}] seed {seed} {pool} {arm} {cls}: cached "
                          f"{r['cached_tokens']:,} of {r['expected_shared_tokens']:,} expected, "
                          f"retractions {r['retractions']} ({time.monotonic() - t0:.0f} s)",
                          file=sys.stderr, flush=True)
    command = " ".join(shlex.quote(x) for x in [".venv/bin/python", "benchmarks/prefix_reuse_sim.py",
                                                 *(sys.argv[1:] if argv is None else argv)])
    result = {"command": command, "date": time.strftime("%Y-%m-%d %H:%M"), "git_head": git_head(),
              "preset": a.preset, "latency_steps": a.latency_steps, "seeds": a.seed_list, "pools": a.pool_list, "classes": a.class_list,
              "swa_pools": {p: pools[p]["swa_pool"] for p in a.pool_list},
              "runtime_s": round(time.monotonic() - t0, 1), "arms": arms}
    result["summary"] = summarize(result)
    run_dir = ROOT / ".work" / "prefix_reuse_sim" / time.strftime("%Y%m%d-%H%M%S")
    written = write_files(output_paths(a, OUTPUT_FILES, run_dir),
                          {"json": write_json(result), "md": write_text(to_markdown(result))})
    print(f"[prefix_reuse_sim] wrote {', '.join(written)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
