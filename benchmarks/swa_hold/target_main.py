"""The SWA hold benchmark on sglang 0.5.23 (``benchmarks/swa_hold.py --target main``): runs the
0.5.23 driver (``swa_hold/main_driver.py``) in each arm's own environment and aggregates its runs into
the benchmark's JSON result (the schema of ``swa_hold.result``, one column per arm and tree core).

Arms and environments: ``main`` = stock 0.5.23 (``.venv-main``, ``scripts/setup_main.sh``);
``main_islands`` = 0.5.23 with the islands series, ``SWAIslandUnifiedRadixCache`` as the registry
builds it under ``--enable-swa-islands`` (``.venv-main-islands``, ``scripts/setup_main.sh
--islands``). Each runs on both tree cores (``rust``, the server's default, and ``python``); a
column is ``ARM/CORE``.

Schedule: ``repeats`` rounds of one driver process per arm, arms interleaved per round (their
order alternating) and cores alternating inside each process; the first round's processes first
make the measurement run of each core (hold snapshots and host-sync counts, full decode, timings
not used), then every process one timing run per core. Costs per run (seconds): the chunk commits
(``checkpoint_kv_cache``), every decode-progress call (``on_decode_progress``, islands only: stock
main has no hook, so it costs main nothing; the calls that laid a decode island are counted and
timed on their own too), the finishes (``release_kv_cache``) and the final SWA reclaim (``evict``
of everything evictable once all requests finished). The acceptance of issue 27 compares the
run's commits + reclaim (every insert into the tree: chunk commits, decode islands, finishes; and
the final reclaim) per core against ``main`` on the same core, in thread CPU
(``time.thread_time``: the machine is shared); the decode-progress calls that lay no island
(islands' per-step due check and window release) are reported beside it, and so is wall
(``perf_counter``). The timer's own cost (its median around an empty call, measured in every run)
is taken off every timed call.

Model shape (``model``, ``swa_hold.model_shape``): the pools' layers, KV heads, head dims and KV
dtype (default: the toy's). With one, the result carries ``model_shape`` (the geometry and the
bytes the pools took, read off the pools the measurement runs built) and, per column,
``hold_bytes``: every SWA token figure of the hold rows times the SWA pool's bytes per token.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from typing import Dict, List, Optional

import _bench_path
from _bench_path import ROOT as _ROOT
from swa_hold.result import _pct, hold_summary, sync_summary
from swa_hold.model_shape import GIB, ModelShape
from swa_hold.setup import Shape, log

ROOT = str(_ROOT)

ARMS = ("main", "main_islands")
CORES = ("rust", "python")
VENVS = {"main": ".venv-main", "main_islands": ".venv-main-islands"}
DRIVER = "swa_hold.main_driver"
"""The driver module, run as ``python -m`` in the arm's environment (``_bench_path.worker_env``)."""


def column(arm: str, core: str) -> str:
    return f"{arm}/{core}"


def venv_python(arm: str, root: str = ROOT) -> str:
    return os.path.join(root, VENVS[arm], "bin", "python")


def missing_envs(arms=ARMS, root: str = ROOT) -> List[str]:
    """The arms whose environment is not built (``scripts/setup_main.sh [--islands]``)."""
    return [a for a in arms if not os.access(venv_python(a, root), os.X_OK)]


def shape_json(shape: Shape, model: Optional[ModelShape] = None) -> dict:
    """The driver's ``--shape``: the workload, its pools in tokens and, with ``model``, the
    pools' geometry (``shape["model"]``; without, the driver builds the toy's)."""
    full, swa = shape.pool_sizes()
    out = dict(window=shape.window, page=shape.page, chunk=shape.chunk, prompt=shape.prompt,
               n_requests=shape.n_requests, decode_tokens=shape.decode_tokens,
               decode_interval=shape.decode_interval, full_pool=full, swa_pool=swa,
               seed=shape.seed)
    if shape.accept_max:
        out["accept_max"] = shape.accept_max
    if model is not None:
        out["model"] = model.to_json()
    return out


def run_driver(arm: str, shape: Shape, cores, *, runs: int = 1, measure: bool = False,
               count_syncs: bool = False, decode_tokens: Optional[int] = None,
               model: Optional[ModelShape] = None) -> dict:
    """One driver process in ``arm``'s environment; its JSON."""
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "runs.json")
        cmd = [venv_python(arm), "-m", DRIVER, "--arm", arm, "--cores", ",".join(cores),
               "--shape", json.dumps(shape_json(shape, model)), "--runs", str(runs), "--out", out]
        if measure:
            cmd.append("--measure")
        if count_syncs:
            cmd.append("--count-syncs")
        if decode_tokens:
            cmd += ["--decode-tokens", str(decode_tokens)]
        env = dict(os.environ, SGLANG_USE_CPU_ENGINE="1", OMP_NUM_THREADS="1",
                   SGLANG_DEBUG_MEMORY_POOL="0")  # production: the allocators' debug checks off
        env.pop("PYTHONPATH", None)
        env = _bench_path.worker_env(env)
        p = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
        if p.returncode != 0:
            raise RuntimeError(f"{arm} driver failed (exit {p.returncode}):\n{p.stderr[-4000:]}")
        for ln in p.stderr.splitlines():
            if ln.startswith("[swa_hold_main"):
                print(ln, file=sys.stderr, flush=True)
        with open(out) as f:
            return json.load(f)


def _secs(calls: List[dict], key: str, overhead: float) -> float:
    """Total of ``key`` over ``calls``, less the timer's own cost per call (at least 0 each)."""
    return sum(max(0.0, c[key] - overhead) for c in calls)


def _run_costs(run: dict) -> dict:
    """One run's costs (seconds), wall and thread CPU, the timer's overhead taken off each call:
    ``commits`` (chunk commits), ``islands`` (decode-progress calls that laid a decode island),
    ``hook_rest`` (the other decode-progress calls: the due check and the window release),
    ``finishes``, ``reclaim``; ``commit_reclaim`` = every insert into the tree (chunk commits,
    decode islands, finishes) + the final reclaim, issue 27's "commit + reclaim"; ``whole`` =
    that + ``hook_rest``."""
    out = {}
    for key, suffix in (("seconds", ""), ("thread_cpu_seconds", "_thread")):
        oh = run["timer_overhead"][key]
        commits = _secs(run["commits"], key, oh)
        islands = _secs([h for h in run["hooks"] if h.get("island")], key, oh)
        hook_rest = _secs([h for h in run["hooks"] if not h.get("island")], key, oh)
        finishes = _secs(run["finishes"], key, oh)
        reclaim = run["reclaim"][key]
        out[f"commits{suffix}"] = commits
        out[f"islands{suffix}"] = islands
        out[f"hook_rest{suffix}"] = hook_rest
        out[f"finishes{suffix}"] = finishes
        out[f"reclaim{suffix}"] = reclaim
        out[f"commit_reclaim{suffix}"] = commits + islands + finishes + reclaim
        out[f"whole{suffix}"] = commits + islands + finishes + reclaim + hook_rest
    return out


def _med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def _only(row: dict, rid: str) -> dict:
    """A snapshot row reduced to request ``rid`` (pool figures stay per running request)."""
    i = row["rids"].index(rid)
    return {**row, "rids": [rid], "held": [row["held"][i]], "locked": [row["locked"][i]],
            "private": [row["private"][i]]}


def column_summary(measured: dict, timed: List[dict]) -> dict:
    """One column of ``result["arms"]``: holds and sync counts from the measurement run,
    costs from the timing runs (medians over repeats; per-call medians over all calls)."""
    snaps = measured["snapshots"]
    def net(r, c, k):
        return max(0.0, c[k] - r["timer_overhead"][k])

    commit_t = [net(r, c, "seconds") for r in timed for c in r["commits"]]
    commit_c = [net(r, c, "thread_cpu_seconds") for r in timed for c in r["commits"]]
    island_t = [net(r, h, "thread_cpu_seconds") for r in timed for h in r["hooks"]
                if h.get("island")]
    hook_t = [net(r, h, "thread_cpu_seconds") for r in timed for h in r["hooks"]
              if not h.get("island")]
    costs = [_run_costs(r) for r in timed]
    per_run = {k: _med([c[k] for c in costs]) for k in (costs[0] if costs else {})}
    island_snaps = [r for r in snaps["commit"] if r.get("label") == "decode_island"]
    chunk_snaps = [r for r in snaps["commit"] if r.get("label") != "decode_island"]
    # After a commit: every running request after a chunk commit (during prefill the others
    # hold their last commit or nothing, as on 0.5.15), and the committing request after a
    # decode island; the other requests' decode tails at that moment (request-owned SWA since
    # their own last island, freed by main's decode evictor) are reported apart.
    after_commit = chunk_snaps + [_only(r, r["rid"]) for r in island_snaps]
    return {
        **hold_summary(after_commit),
        "after_commit": hold_summary(after_commit),
        "after_chunk_commit": hold_summary(chunk_snaps),
        "after_decode_island": hold_summary([_only(r, r["rid"]) for r in island_snaps]),
        "after_decode_island_all_running": hold_summary(island_snaps),
        "with_chunk_in_flight": hold_summary(snaps["inflight"]),
        "decode": hold_summary(snaps["decode"]),
        "commit_rows": [
            dict(label=r["label"], rid=r["rid"], L=r["L"], n_running=r["n"],
                 committing_req_held=(r["held"][r["rids"].index(r["rid"])]
                                      if r["rid"] in r["rids"] else None),
                 max_held=max(r["held"]), max_locked=max(r["locked"]),
                 max_private=max(r["private"]), evictable_per_req=r["evictable"],
                 allocated_per_req=r["allocated"])
            for r in snaps["commit"]],
        "commit_cpu_seconds_median": _pct(commit_t, 0.5),
        "commit_cpu_seconds_p90": _pct(commit_t, 0.9),
        "commit_thread_cpu_seconds_median": _pct(commit_c, 0.5),
        "commit_thread_cpu_seconds_p90": _pct(commit_c, 0.9),
        "commit_free_thread_cpu_seconds_median": None,
        "commits_per_run": len(measured["commits"]),
        "commit_timing_samples": len(commit_t),
        "decode_hook_calls_per_run": len(measured["hooks"]),
        "timer_overhead_thread_cpu_seconds_median": _med(
            [r["timer_overhead"]["thread_cpu_seconds"] for r in timed]),
        "decode_hook_thread_cpu_seconds_median": _pct(hook_t, 0.5),
        "decode_island_thread_cpu_seconds_median": _pct(island_t, 0.5),
        "per_run_median": per_run,
        "per_run": costs,
        "commit_cpu_seconds_per_run_median": per_run.get("commits"),
        "final_swa_reclaim_cpu_seconds_median": per_run.get("reclaim"),
        "final_swa_reclaimed_tokens": measured["reclaim"]["reclaimed"],
        "host_syncs": sync_summary(measured["commits"]),
        "decode_island_host_syncs": sync_summary([h for h in measured["hooks"]
                                                  if h.get("island")]),
        "decode_hook_host_syncs": sync_summary(measured["hooks"]),
        "finish_host_syncs": sync_summary(measured["finishes"]),
        "chunk_islands": 0,
        "decode_islands": measured["decode_islands"],
        "decode_islands_min_per_request": measured.get("decode_islands_min_per_request"),
        "accept_mean": measured.get("accept_mean"),
        "decode_island_cpu_seconds": [h["seconds"] for h in measured["hooks"]
                                      if h.get("island")],
        "measurement_run_wall_seconds": measured["wall_seconds"],
        "swa_protected_after_run": measured["swa_protected_after"],
    }


HOLD_BYTES_PHASES = ("after_commit", "after_chunk_commit", "after_decode_island",
                     "with_chunk_in_flight", "decode")
HOLD_BYTES_FIELDS = ("max_swa_held_per_running_req", "mean_swa_held_per_running_req",
                     "max_swa_allocated_per_running_req", "mean_swa_allocated_per_running_req")


def hold_bytes(col: dict, swa_bytes_per_token: int) -> dict:
    """A column's hold in bytes: ``{phase: {field: tokens x swa_bytes_per_token}}`` for the
    phases and SWA token fields above (a phase the column has no snapshot of is left out)."""
    return {phase: {f: col[phase][f] * swa_bytes_per_token for f in HOLD_BYTES_FIELDS}
            for phase in HOLD_BYTES_PHASES if col.get(phase)}


def model_shape_json(model: ModelShape, measured: Dict[str, dict]) -> dict:
    """``result["model_shape"]``: the geometry, and the pools as the measurement runs built them
    (the same in every column, and the same bytes per token as ``model`` computes)."""
    pools = [m["pools"] for m in measured.values()]
    assert all(p == pools[0] for p in pools), "the columns built different pools"
    pools = pools[0]
    full_bpt, swa_bpt = model.bytes_per_token()
    assert (pools["full"]["bytes_per_token"], pools["swa"]["bytes_per_token"]) == (
        full_bpt, swa_bpt), (pools, model)
    return {**model.to_json(), "pools": pools,
            "full_pool_gib": pools["full"]["pool_bytes"] / GIB,
            "swa_pool_gib": pools["swa"]["pool_bytes"] / GIB}


def ratios(arms: Dict[str, dict]) -> Dict[str, dict]:
    """``main_islands/CORE`` over ``main/CORE``: per-commit medians and whole-run medians, and the
    whole run's ratio per repeat (the arms are interleaved per repeat, so repeat k of both ran
    side by side)."""
    out = {}
    for core in CORES:
        isl, base = arms.get(column("main_islands", core)), arms.get(column("main", core))
        if not isl or not base or not base["per_run"]:
            continue
        pi, pb = isl["per_run_median"], base["per_run_median"]
        out[column("main_islands", core)] = {
            "baseline": column("main", core),
            "commit_cpu_median": isl["commit_cpu_seconds_median"]
            / base["commit_cpu_seconds_median"],
            "commit_cpu_p90": isl["commit_cpu_seconds_p90"] / base["commit_cpu_seconds_p90"],
            "commit_thread_cpu_median": (isl["commit_thread_cpu_seconds_median"]
                                         / base["commit_thread_cpu_seconds_median"]),
            "commit_thread_cpu_p90": (isl["commit_thread_cpu_seconds_p90"]
                                      / base["commit_thread_cpu_seconds_p90"]),
            "commit_reclaim_thread_cpu": pi["commit_reclaim_thread"] / pb["commit_reclaim_thread"],
            "commit_reclaim_wall": pi["commit_reclaim"] / pb["commit_reclaim"],
            "commit_reclaim_thread_cpu_per_repeat": [
                a["commit_reclaim_thread"] / b["commit_reclaim_thread"]
                for a, b in zip(isl["per_run"], base["per_run"])],
            "whole_run_thread_cpu": pi["whole_thread"] / pb["whole_thread"],
            "whole_run_wall": pi["whole"] / pb["whole"],
            "chunk_commits_plus_reclaim_thread_cpu": (
                (pi["commits_thread"] + pi["reclaim_thread"])
                / (pb["commits_thread"] + pb["reclaim_thread"])),
        }
    return out


def acceptance(shape: Shape, arms: Dict[str, dict], rat: Dict[str, dict]) -> dict:
    """Issue 27's done-when for the hold on main, per core: ``main_islands`` holds at most
    ``w + 2p`` per running request after every commit (chunk commits and decode islands), 0
    host syncs per commit (chunk commits, decode islands), and the run's commit + reclaim thread
    CPU (every insert into the tree: chunk commits, decode islands, finishes; and the final
    reclaim) at most 1.1x ``main``'s on the same core. The decode-progress calls that lay no
    island are reported beside it (``whole``), not in it."""
    w, p = shape.window, shape.page
    acc = {"bound_w_plus_2p": w + 2 * p}
    for core in CORES:
        col = column("main_islands", core)
        if col not in arms:
            continue
        a = arms[col]
        acc[f"{col}_max_held_after_commit"] = a["max_swa_held_per_running_req"]
        acc[f"{col}_held_le_w_plus_2p"] = a["max_swa_held_per_running_req"] <= w + 2 * p
        syncs = [s.get("syncs_per_commit_max") for s in (a["host_syncs"],
                                                          a["decode_island_host_syncs"]) if s]
        acc[f"{col}_host_syncs_per_commit_max"] = max(syncs) if syncs else None
        if col in rat:
            acc[f"{col}_commit_reclaim_thread_cpu_ratio"] = round(
                rat[col]["commit_reclaim_thread_cpu"], 3)
            acc[f"{col}_commit_reclaim_le_1.1x_main"] = rat[col]["commit_reclaim_thread_cpu"] <= 1.1
            acc[f"{col}_whole_run_incl_decode_hook_thread_cpu_ratio"] = round(
                rat[col]["whole_run_thread_cpu"], 3)
        base = arms.get(column("main", core))
        if base:
            acc[f"{column('main', core)}_max_held_after_commit"] = \
                base["max_swa_held_per_running_req"]
    return acc


def bench_main(shape: Shape, *, arms=ARMS, cores=CORES, repeats: int = 5,
               timing_decode_tokens: Optional[int] = None, count_syncs: bool = True,
               model: Optional[ModelShape] = None) -> dict:
    """Measurement processes, then ``repeats`` interleaved timing rounds; the JSON result
    (pools of ``model``'s geometry, the toy's without)."""
    arms, cores = list(arms), list(cores)
    missing = missing_envs(arms)
    if missing:
        raise SystemExit(f"swa_hold --target main: no environment for {', '.join(missing)} "
                         f"({', '.join(VENVS[a] for a in missing)}); build it with "
                         f"scripts/setup_main.sh (main) / scripts/setup_main.sh --islands")
    if repeats < 1:
        raise SystemExit("swa_hold --target main: --repeats must be >= 1")
    measured, versions, interval = {}, {}, None
    timed: Dict[str, List[dict]] = {column(a, c): [] for a in arms for c in cores}
    for rep in range(repeats):
        for arm in (arms if rep % 2 == 0 else arms[::-1]):
            first = rep == 0
            log(f"round {rep + 1}/{repeats}: arm={arm}" + (
                f" (measurement run{' with sync counting' if count_syncs else ''}, then "
                f"timing)" if first else " (timing)"))
            out = run_driver(arm, shape, cores, measure=first, count_syncs=count_syncs,
                             decode_tokens=timing_decode_tokens, model=model)
            if first:
                versions[arm] = {k: out[k] for k in ("sglang", "torch", "python")}
                if arm == "main_islands":
                    interval = out["shape"]["decode_interval"]  # the cache's default: cp / 4
                for core in cores:
                    measured[column(arm, core)] = out["measured"][core]
            for core in cores:
                timed[column(arm, core)] += out["runs"][core]
    order = [column(a, c) for c in cores for a in arms]
    result = {
        "target": "main",
        "shape": {**shape_json(shape), "decode_interval": interval},
        "arm_order": order,
        "arms": {col: column_summary(measured[col], timed[col]) for col in order},
        "repeats": repeats,
        "timing_decode_tokens": timing_decode_tokens,
        "device": "cpu, torch " + versions[arms[0]]["torch"],
        "versions": versions,
    }
    if model is not None:
        result["model_shape"] = model_shape_json(model, measured)
        bpt = result["model_shape"]["pools"]["swa"]["bytes_per_token"]
        for col in order:
            result["arms"][col]["hold_bytes"] = hold_bytes(result["arms"][col], bpt)
    result["ratios_vs_main"] = ratios(result["arms"])
    result["acceptance"] = acceptance(shape, result["arms"], result["ratios_vs_main"])
    return result
