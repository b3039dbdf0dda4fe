"""The SWA hold benchmark's run schedule and its JSON result (``benchmarks/swa_hold.py``).

``bench`` runs every arm once with hold snapshots (the measurement run), then ``repeats`` timing
runs with the arms interleaved, then optional cProfile runs, and aggregates them: per arm the hold
summaries of each phase (SWA tokens per running request), commit CPU median / p90 (seconds), host
syncs per commit; the ratios against ``upstream``; and the acceptance checks against ``w + p``.
"""

from __future__ import annotations

import cProfile
import dataclasses
import statistics
import time
from typing import Dict, List, Optional

from swa_hold.run import RunResult, _profile_rows, run_arm
from swa_hold.setup import ARM_ORDER, ARMS, ISLAND_ARMS, ISLAND_FREE_FUNCTION, Shape, log

from islands_harness.host_syncs import SYNC_KEYS


def _pct(xs, q):
    xs = sorted(xs)
    if not xs:
        return None
    k = (len(xs) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def hold_summary(rows: List[dict]) -> dict:
    if not rows:
        return {}
    held = [h for r in rows for h in r["held"]]
    locked = [h for r in rows for h in r["locked"]]
    private = [h for r in rows for h in r["private"]]
    return {
        "snapshots": len(rows),
        "max_swa_held_per_running_req": max(held),
        "mean_swa_held_per_running_req": statistics.fmean(held),
        "max_swa_locked_per_running_req": max(locked),
        "mean_swa_locked_per_running_req": statistics.fmean(locked),
        "max_swa_private_per_running_req": max(private),
        "mean_swa_private_per_running_req": statistics.fmean(private),
        "max_swa_evictable_per_running_req": max(r["evictable"] for r in rows),
        "mean_swa_evictable_per_running_req": statistics.fmean(r["evictable"] for r in rows),
        "max_swa_allocated_per_running_req": max(r["allocated"] for r in rows),
        "mean_swa_allocated_per_running_req": statistics.fmean(r["allocated"] for r in rows),
        # None where the run could not see nodes (the 0.5.23 driver: no dead-SWA figure)
        "max_dead_swa_per_running_req": (None if any(r["dead"] is None for r in rows)
                                         else max(r["dead"] for r in rows)),
        "mean_dead_swa_per_running_req": (None if any(r["dead"] is None for r in rows)
                                          else statistics.fmean(r["dead"] for r in rows)),
    }


def sync_summary(commits: List[dict]) -> dict:
    if not commits or "ops" not in commits[0]:
        return {}
    out = {}
    for k in SYNC_KEYS + ("aten_ops",) + (("cuda_sync",) if "cuda_sync" in commits[0]["ops"] else ()):
        vals = [c["ops"].get(k, 0) for c in commits]
        out[k] = {"per_commit_max": max(vals), "per_commit_mean": statistics.fmean(vals)}
    syncs = [sum(c["ops"].get(k, 0) for k in SYNC_KEYS) for c in commits]
    out["syncs_per_commit_max"] = max(syncs)
    out["syncs_per_commit_mean"] = statistics.fmean(syncs)
    out["per_commit"] = [
        dict(rid=c["rid"], L=c["L"], chunked=c.get("chunked"),
             syncs=sum(c["ops"].get(k, 0) for k in SYNC_KEYS),
             **{k: v for k, v in c["ops"].items() if v})
        for c in commits
    ]
    return out


def _device_label() -> str:
    """Where the KV tensors lived: ``cpu``, or the GPU's name (``ISLANDS_TEST_DEVICE=cuda``)."""
    import torch

    from islands_harness.stack import stack_device

    if stack_device() == "cuda":
        return f"cuda: {torch.cuda.get_device_name(0)}, torch {torch.__version__}"
    return f"cpu, torch {torch.__version__}"


@dataclasses.dataclass
class Timings:
    """Per arm, one list per timing repeat: commit wall seconds (``commit``), commit thread CPU
    seconds (``cpu``), the SWA free's thread CPU inside each commit (``free``); the final SWA
    reclaim's seconds per repeat (``reclaims``) and the tokens it freed (``reclaimed``)."""

    commit: Dict[str, List[List[float]]]
    cpu: Dict[str, List[List[float]]]
    free: Dict[str, List[List[float]]]
    reclaims: Dict[str, List[float]]
    reclaimed: Dict[str, int]


def _measurement_runs(shape: Shape, arms, count_syncs: bool, check: bool) -> Dict[str, RunResult]:
    measured: Dict[str, RunResult] = {}
    for arm in arms:
        log(f"measurement run: arm={arm} (hold snapshots{', sync counting' if count_syncs else ''})")
        rr = run_arm(shape, arm, measure=True, count_syncs=count_syncs, check=check)
        log(f"  {arm}: {rr.steps} steps in {rr.wall_seconds:.1f} s")
        measured[arm] = rr
    return measured


def _timing_runs(shape: Shape, arms, repeats: int, timing_decode_tokens: Optional[int]) -> Timings:
    t = Timings({a: [] for a in arms}, {a: [] for a in arms}, {a: [] for a in arms},
                {a: [] for a in arms}, {})
    for rep in range(repeats):
        for arm in arms:
            log(f"timing run {rep + 1}/{repeats}: arm={arm}")
            rr = run_arm(shape, arm, measure=False, decode_tokens=timing_decode_tokens)
            t.commit[arm].append([c["seconds"] for c in rr.commits])
            t.cpu[arm].append([c["thread_cpu_seconds"] for c in rr.commits])
            t.free[arm].append([c.get("free_thread_cpu_seconds", 0.0) for c in rr.commits])
            t.reclaims[arm].append(rr.reclaim_seconds)
            t.reclaimed[arm] = rr.reclaimed_swa
    return t


def _profile_runs(shape: Shape, arms, profile_top: int, profile_runs: int,
                  timing_decode_tokens: Optional[int]) -> Dict[str, List[dict]]:
    # thread CPU clock: robust to other jobs preempting this one (wall time is not)
    profilers = {a: cProfile.Profile(time.thread_time) for a in arms}
    n_prof = {a: 0 for a in arms}
    for rep in range(profile_runs):
        for arm in arms:
            log(f"profile run {rep + 1}/{profile_runs}: arm={arm}")
            rr = run_arm(shape, arm, measure=False, decode_tokens=timing_decode_tokens,
                         profiler=profilers[arm])
            n_prof[arm] += len(rr.commits)
    return {a: _profile_rows(profilers[a], n_prof[a], profile_top) for a in arms}


def _commit_rows(snapshots: List[dict]) -> List[dict]:
    return [
        dict(label=r["label"], rid=r["rid"], L=r["L"], n_running=r["n"],
             committing_req_held=r["held"][r["rids"].index(r["rid"])]
             if r["rid"] in r["rids"] else None,
             max_held=max(r["held"]), max_locked=max(r["locked"]),
             max_private=max(r["private"]), dead_per_req=r["dead"],
             evictable_per_req=r["evictable"], allocated_per_req=r["allocated"])
        for r in snapshots
    ]


def arm_summary(arm: str, rr: RunResult, t: Timings) -> dict:
    """One arm's entry of ``result["arms"]``: holds from the measurement run ``rr``, costs from
    the timing runs ``t``."""
    all_t = [x for rep in t.commit[arm] for x in rep]
    all_c = [x for rep in t.cpu[arm] for x in rep]
    return {
        **hold_summary(rr.snapshots["commit"]),
        "commit_cpu_seconds_median": _pct(all_t, 0.5) if all_t else None,
        "commit_cpu_seconds_p90": _pct(all_t, 0.9) if all_t else None,
        "commit_cpu_seconds_mean": statistics.fmean(all_t) if all_t else None,
        "commit_cpu_seconds_per_repeat_median": [_pct(x, 0.5) for x in t.commit[arm]],
        "commit_thread_cpu_seconds_median": _pct(all_c, 0.5) if all_c else None,
        "commit_thread_cpu_seconds_p90": _pct(all_c, 0.9) if all_c else None,
        "commit_free_thread_cpu_seconds_median": (
            _pct([x for rep in t.free[arm] for x in rep], 0.5)
            if arm in ISLAND_ARMS and all_c else None),
        "commits_per_run": len(rr.commits),
        "commit_cpu_seconds_per_run_median": (
            statistics.median(sum(x) for x in t.commit[arm]) if t.commit[arm] else None),
        "final_swa_reclaim_cpu_seconds_median": (
            statistics.median(t.reclaims[arm]) if t.reclaims[arm] else None),
        "final_swa_reclaimed_tokens": t.reclaimed.get(arm),
        "commit_timing_samples": len(all_t),
        "after_commit": hold_summary(rr.snapshots["commit"]),
        "with_chunk_in_flight": hold_summary(rr.snapshots["inflight"]),
        "decode": hold_summary(rr.snapshots["decode"]),
        "commit_rows": _commit_rows(rr.snapshots["commit"]),
        "host_syncs": sync_summary(rr.commits),
        "chunk_islands": rr.chunk_islands,
        "decode_islands": rr.n_decode_islands,
        "decode_island_cpu_seconds": [d["seconds"] for d in rr.decode_islands],
        "decode_island_host_syncs": sync_summary(rr.decode_islands),
        "measurement_run_wall_seconds": rr.wall_seconds,
    }


def ratios_vs_upstream(arms: Dict[str, dict]) -> Dict[str, dict]:
    """Each arm's commit cost over ``upstream``'s (``arms`` must hold ``upstream``)."""
    up = arms["upstream"]
    ratios = {}
    for arm, a in arms.items():
        if arm == "upstream" or not up["commit_cpu_seconds_median"]:
            continue
        ratios[arm] = {
            "commit_cpu_median": a["commit_cpu_seconds_median"] / up["commit_cpu_seconds_median"],
            "commit_cpu_p90": a["commit_cpu_seconds_p90"] / up["commit_cpu_seconds_p90"],
            "commit_thread_cpu_median": (a["commit_thread_cpu_seconds_median"]
                                         / up["commit_thread_cpu_seconds_median"]),
            "commit_thread_cpu_p90": (a["commit_thread_cpu_seconds_p90"]
                                      / up["commit_thread_cpu_seconds_p90"]),
            "per_repeat_median": [
                x / y for x, y in zip(a["commit_cpu_seconds_per_repeat_median"],
                                      up["commit_cpu_seconds_per_repeat_median"])
            ],
        }
        if a.get("commit_free_thread_cpu_seconds_median") is not None:
            # upstream's commit plus this arm's SWA free alone: what any commit that frees
            # the SWA it tombstones costs at least, with this free
            ratios[arm]["upstream_plus_free_thread_cpu_median"] = 1 + (
                a["commit_free_thread_cpu_seconds_median"]
                / up["commit_thread_cpu_seconds_median"])
    return ratios


def acceptance(shape: Shape, arms: Dict[str, dict]) -> dict:
    """The island arms' hold against ``w + p``, their dead SWA and syncs after a commit, and
    whether their commits plus the final reclaim cost no more than upstream's."""
    w, p = shape.window, shape.page
    acc = {"bound_w_plus_p": w + p, "bound_w_plus_2p": w + 2 * p}
    up = arms.get("upstream")
    for arm in ISLAND_ARMS:
        if arm not in arms:
            continue
        a = arms[arm]
        acc[f"{arm}_max_held_after_commit"] = a["max_swa_held_per_running_req"]
        acc[f"{arm}_held_le_w_plus_p"] = a["max_swa_held_per_running_req"] <= w + p
        acc[f"{arm}_dead_after_commit"] = a["max_dead_swa_per_running_req"]
        acc[f"{arm}_host_syncs_per_commit_max"] = (a["host_syncs"] or {}).get("syncs_per_commit_max")
        if up is not None and up["commit_cpu_seconds_per_run_median"] is not None:
            # every commit of a run plus the SWA reclaim at the end (what upstream defers to
            # eviction), against the same for upstream
            ours = a["commit_cpu_seconds_per_run_median"] + a["final_swa_reclaim_cpu_seconds_median"]
            theirs = (up["commit_cpu_seconds_per_run_median"]
                      + up["final_swa_reclaim_cpu_seconds_median"])
            acc[f"{arm}_commits_plus_reclaim_le_upstream"] = ours <= theirs
    return acc


def bench(shape: Shape, *, arms=ARM_ORDER, repeats: int = 3, timing_decode_tokens: Optional[int] = None,
          count_syncs: bool = True, profile_top: int = 0, profile_runs: int = 3,
          check: bool = False) -> dict:
    """Run the measurement, timing and profile runs of ``arms`` and return the JSON result."""
    arms = list(arms)
    result = {
        "shape": {
            "window": shape.window,
            "page": shape.page,
            "chunk": shape.chunk,
            "prompt": shape.prompt,
            "n_requests": shape.n_requests,
            "decode_tokens": shape.decode_tokens,
            "decode_interval": None,
            "full_pool": shape.pool_sizes()[0],
            "swa_pool": shape.pool_sizes()[1],
            "seed": shape.seed,
        },
        "arms": {},
        "repeats": repeats,
        "profile_runs": profile_runs if profile_top else 0,
        "timing_decode_tokens": timing_decode_tokens,
        "device": _device_label(),
        # what the report names, stored as run (the markdown renders from the JSON alone)
        "arm_reclaim": {arm: ARMS[arm][1] for arm in arms},
        "island_free_function": ISLAND_FREE_FUNCTION,
    }
    measured = _measurement_runs(shape, arms, count_syncs, check)
    timings = _timing_runs(shape, arms, repeats, timing_decode_tokens)
    profiles = (_profile_runs(shape, arms, profile_top, profile_runs, timing_decode_tokens)
                if profile_top else {})
    for arm in arms:
        if arm in ISLAND_ARMS:
            from sglang.srt.mem_cache.swa_island_radix_cache import decode_island_interval

            result["shape"]["decode_interval"] = shape.decode_interval or decode_island_interval(
                shape.chunk)
        a = arm_summary(arm, measured[arm], timings)
        if arm in profiles:
            a["commit_profile"] = profiles[arm]
        result["arms"][arm] = a
    if "upstream" in result["arms"]:
        result["ratios_vs_upstream"] = ratios_vs_upstream(result["arms"])
    result["acceptance"] = acceptance(shape, result["arms"])
    return result
