"""The seed table's run matrix: the production shape, the arms, and the planner's pools.

Shape (the seed deployment, ``admission.setup.Production``): window ``w`` 1024, page ``p`` 64,
chunk ``cp`` 16384, ``--max-running-requests`` 48. Pools: the planner's full and SWA pools at each
``--swa-full-tokens-ratio`` for the seed's bytes per token (full 9.5 KB, SWA 95 KB, draft 10.24 KB)
and budget (37 GB): 737,920 / 236,096 tokens at 0.32, 1,030,912 / 175,232 at 0.17. Arms: 0.5.15.post1
``upstream`` and ``islands`` (``prefix_reuse.replay.SIM_ARMS``: the flag off / on, reclaim ``lazy``),
0.5.23 ``main`` (stock) and ``main_islands`` (``--enable-swa-islands``, its defaults), each 0.5.23
arm by the server flags of ``prefix_reuse.arms.ARMS``. Token counts throughout.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Optional, Sequence

import _bench_path  # noqa: F401  (puts the repository root and benchmarks/ on sys.path)
from admission.setup import Production
from islands_tools import pool_plan as plan

PROD = Production()

ARMS: Dict[str, Dict[str, Any]] = {
    "upstream": {"target": "0.5.15.post1", "label": "0.5.15 upstream"},
    "islands": {"target": "0.5.15.post1", "label": "0.5.15 islands"},
    "main": {"target": "0.5.23", "label": "0.5.23 stock"},
    "main_islands": {"target": "0.5.23", "label": "0.5.23 islands"},
}
"""The arms, in report order; the 0.5.23 ones run in `.venv-main` / `.venv-main-islands`."""

RATIOS = (0.32, 0.17, 0.10)


@dataclasses.dataclass(frozen=True)
class Shape:
    """The scheduler's shape. ``window`` is the model's ``w`` (Gemma's ``sliding_window``); the
    tree's ``sliding_window_size`` is ``w - 1``, as SGLang sets it for Gemma."""

    window: int = PROD.window
    page: int = PROD.page
    chunk: int = PROD.chunk
    cap: int = PROD.cap


@dataclasses.dataclass(frozen=True)
class Budget:
    """What the planner sizes the pools from: bytes per token of index space and the budget.
    ``max_total_tokens``: a ``--max-total-tokens`` cap on the full pool (None: none)."""

    full_bytes: float = PROD.full_bytes
    swa_bytes: float = PROD.swa_bytes
    draft_bytes: float = PROD.draft_bytes
    budget_bytes: float = PROD.budget_bytes
    max_total_tokens: Optional[int] = None


def pools(ratios: Sequence[float], shape: Shape, budget: Budget) -> List[Dict[str, Any]]:
    """Per ratio: the planner's full and SWA pools (``solve_pool_sizes``), what its formulas
    expect (the bind without islands, ``swa_pool / cp``; the island floor at the cap), in order."""
    kv = plan.KVBytesPerToken(budget.full_bytes, budget.swa_bytes, budget.draft_bytes)
    hold = plan.hold_without_islands(shape.window, shape.page, shape.chunk)
    out = []
    for r in ratios:
        p = plan.solve_pool_sizes(kv, budget.budget_bytes, r, shape.page,
                                  max_total_tokens_cap=budget.max_total_tokens)
        out.append({"ratio": r, "full_pool": p.full_tokens, "swa_pool": p.swa_tokens,
                    "planner_bind_without_islands": round(plan.admission_bind(p.swa_tokens, hold), 2),
                    "island_floor": plan.island_floor(shape.cap, shape.window, shape.page,
                                                      shape.chunk)})
    return out


def worker_arm(arm: str, arms: Dict[str, Dict[str, Any]] = ARMS) -> Dict[str, Any]:
    """What a worker needs to build ``arm`` (a key of ``arms``): 0.5.15's by name (``SIM_ARMS``),
    0.5.23's by its server flags and environment (``prefix_reuse.arms.ARMS``)."""
    from prefix_reuse.arms import ARMS as PR_ARMS

    if arms[arm]["target"] == "0.5.23":
        return {"name": arm, "main": {"args": list(PR_ARMS[arm]["args"]),
                                      "env": dict(PR_ARMS[arm]["env"])}}
    return {"name": arm, "main": None}


def arm_python(arm: str, arms: Dict[str, Dict[str, Any]] = ARMS) -> str:
    """The interpreter whose sglang ``arm`` (a key of ``arms``) runs: this one for 0.5.15.post1's
    arms; `.venv-main-islands` for the 0.5.23 arms that ``prefix_reuse.arms.ARMS`` marks
    ``main_islands``, else `.venv-main`."""
    import sys

    from islands_harness.main_arm import main_islands_python, main_python
    from prefix_reuse.arms import ARMS as PR_ARMS

    if arms[arm]["target"] != "0.5.23":
        return sys.executable
    return main_islands_python() if PR_ARMS[arm].get("main_islands") else main_python()
