"""The checks between the arms and between the server and the replay: outputs equal per request,
and the order of the arms (islands against stock) on each metric, on the server and in the
in-process replay (``trace_replay.replay`` run on the same slice file and shape in each arm's
interpreter, with the server's pools).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Optional, Sequence

import _bench_path  # noqa: F401  (puts the repository root and benchmarks/ on sys.path)

METRICS = {"cached_share": 0.002, "running_mean": 0.05, "running_mean_waiting": 0.05}
"""The metrics whose order is compared, each with its tie tolerance (absolute: a share of input
tokens; requests): a difference within it orders the arms as equal. ``running_mean`` is over the
whole run (an arm that finishes sooner has a shorter tail of few running); ``running_mean_waiting``
over the time some request waits, where admission, not the arrivals, sets it."""
STOCK, ISLANDS = "main", "main_islands"


def outputs_equal(a: Sequence[Sequence[Any]], b: Sequence[Sequence[Any]]) -> Dict[str, Any]:
    """Per-request ``[cached, output_ids]`` rows of two arms (slice order): how many requests'
    output ids are equal, and the slice indices of those that are not (and the first token
    where each differs)."""
    if len(a) != len(b):
        raise ValueError(f"{len(a)} against {len(b)} requests")
    diff = []
    for i, (ra, rb) in enumerate(zip(a, b)):
        oa, ob = list(ra[1]), list(rb[1])
        if oa != ob:
            at = next((k for k, (x, y) in enumerate(zip(oa, ob)) if x != y), min(len(oa), len(ob)))
            diff.append([i, at])
    return {"requests": len(a), "equal": len(a) - len(diff), "all_equal": not diff,
            "differ": diff}


def order(islands: float, stock: float, tol: float) -> str:
    """``">"`` when islands exceed stock by more than ``tol``, ``"<"`` when they trail by more,
    else ``"="``."""
    d = islands - stock
    return ">" if d > tol else "<" if d < -tol else "="


def orders(server: Dict[str, Dict[str, Any]], replay: Dict[str, Dict[str, Any]]) -> Dict[str, Any]:
    """Per metric of ``METRICS``: each side's values ``{arm: value}``, the order of islands
    against stock on each side, and whether they agree. ``server`` / ``replay``: per arm, the
    summary (the replay's cached share computed from its tokens)."""
    out = {}
    for m, tol in METRICS.items():
        sv = {a: server[a][m] for a in (STOCK, ISLANDS)}
        rv = {a: replay[a][m] for a in (STOCK, ISLANDS)}
        so, ro = order(sv[ISLANDS], sv[STOCK], tol), order(rv[ISLANDS], rv[STOCK], tol)
        out[m] = {"server": sv, "replay": rv, "server_order": so, "replay_order": ro,
                  "agree": so == ro, "tolerance": tol}
    return out


def replay_spec(arm: str, pool: Dict[str, Any], slice_path: str, scale: int, speed: float,
                window: int, chunk: int, page: int, cap: int, seed: int) -> Dict[str, Any]:
    """The spec of one ``trace_replay.replay`` cell: ``arm`` at the server's ``pool``
    (``full_pool``, ``swa_pool`` tokens), the slice file at ``scale``, the CPU shape, the
    step-time model at ``window`` and ``speed``."""
    from seed_table.setup import Shape
    from trace_replay.setup import worker_arm
    from trace_replay.steptime import StepTime

    shape = Shape(window=window, page=page, chunk=chunk, cap=cap)
    return {"arm": worker_arm(arm), "shape": dataclasses.asdict(shape),
            "pool": {"name": pool["name"], "full_pool": pool["full_pool"],
                     "swa_pool": pool["swa_pool"]},
            "trace": {"path": slice_path, "limit": None, "minutes": None, "scale": scale},
            "steptime": StepTime(window=window, speed=speed).constants(), "seed": seed,
            "label": f"replay {pool['name']} speed {speed:g} {arm}"}


REPLAY_KEYS = ("requests", "input_tokens", "cached_tokens", "running_mean", "running_max",
               "running_mean_waiting", "waiting_max", "retractions", "prefill_tokens",
               "model_time_s", "busy_s", "ttft_p50_s", "ttft_p99_s", "swa_cut_tokens", "wall_s")


def replay_summary(cell: Dict[str, Any]) -> Dict[str, Any]:
    """A replay cell's summary, cut to ``REPLAY_KEYS`` plus ``cached_share``."""
    out = {k: cell.get(k) for k in REPLAY_KEYS}
    out["cached_share"] = round(cell["cached_tokens"] / cell["input_tokens"], 4)
    return out


def run_replay(arms: Sequence[str], pool: Dict[str, Any], slice_path: str, scale: int,
               speed: float, shape: Dict[str, int], seed: int,
               run: Optional[Any] = None) -> Dict[str, Dict[str, Any]]:
    """Each arm's replay cell (``trace_replay.run.worker``: a process in its interpreter),
    summarized; ``shape``: ``{window, chunk, page, cap}``; ``run(arm, spec)`` replaces the worker
    (tests)."""
    if run is None:
        from trace_replay.run import worker as run
    out: Dict[str, Dict[str, Any]] = {}
    for a in arms:
        spec = replay_spec(a, pool, slice_path, scale, speed, seed=seed, **shape)
        out[a] = replay_summary(run(a, spec))
    return out


def list_differ(diff: List[List[int]], at_most: int = 10) -> str:
    """``i@k`` for the first ``at_most`` differing requests (``k`` the first differing token)."""
    s = ", ".join(f"{i}@{k}" for i, k in diff[:at_most])
    return s + (f" (+{len(diff) - at_most} more)" if len(diff) > at_most else "")
