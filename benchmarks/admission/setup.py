"""Admission benchmark, setup: the production deployment, the CPU shape, the pool mapping between
them (``plan_mapping``), and the arms with their server arguments and environment.

Pool sizes are tokens. ``plan_mapping`` is the one place the production pools at a ratio are
scaled to the CPU pools (``benchmarks/admission.py --plan-only`` prints it).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Optional, Sequence, Tuple

import _bench_path  # noqa: F401  (puts the repository root on sys.path)
from islands_harness.knobs import UPSTREAM_KNOBS_ENV as KNOBS_ENV
from islands_harness.main_arm import MAIN_KNOBS_ENV
from islands_harness.models import get_model
from islands_tools import pool_plan as plan

@dataclasses.dataclass(frozen=True)
class Production:
    """The deployment of the spec (planner docstring's worked example)."""

    full_bytes: float = 9500.0  # per token, all 5 full layers, fp8
    swa_bytes: float = 95000.0  # per token, all 25 SWA layers, fp8
    draft_bytes: float = 10240.0  # per token, speculative draft KV
    budget_bytes: float = 37e9
    page: int = 64
    chunk: int = 16384
    window: int = 1024
    cap: int = 48
    accept_len: float = 8.5  # mean speculative accept length
    eviction_interval: int = 128  # SGLANG_SWA_EVICTION_INTERVAL default


@dataclasses.dataclass(frozen=True)
class CpuShape:
    window: int = 32
    page: int = 1
    chunk: int = 512
    cap: int = 16
    max_total_tokens: int = 65536


RATIO_EQUIVALENTS = (0.32, 0.17, 0.10)


def server_ratio_for_pool(pool: int, max_total_tokens: int) -> float:
    """The ``--swa-full-tokens-ratio`` whose SWA pool is exactly ``pool`` tokens at page 1.

    SGLang computes ``floor_p(int(T * r))`` (``swa_island_guard.swa_pool_tokens``); half a token of
    slack keeps float rounding from landing one token short.
    """
    r = round((pool + 0.5) / max_total_tokens, 8)
    if plan.swa_pool_tokens(max_total_tokens, r, 1) != pool:  # pragma: no cover (sanity)
        raise AssertionError(f"ratio {r} does not give a pool of {pool}")
    return r


def equivalent_ratio(fraction: float, prod: Production = Production()) -> float:
    """The production ratio whose SWA pool is ``fraction`` x cap x cp (bisection on the planner)."""
    kv = plan.KVBytesPerToken(prod.full_bytes, prod.swa_bytes, prod.draft_bytes)
    target = fraction * prod.cap * prod.chunk
    lo, hi = 1e-4, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if plan.solve_pool_sizes(kv, prod.budget_bytes, mid, prod.page).swa_tokens < target:
            lo = mid
        else:
            hi = mid
    return round(hi, 4)


@dataclasses.dataclass(frozen=True)
class _Holds:
    """One shape's per-request hold and island floors, in tokens."""

    hold: int  # hold_without_islands: one chunk
    unit: int  # cap x hold
    floor: int  # island floor
    tail: int  # decode tail
    floor_tail: int  # island floor with the decode tail


def _holds(shape, tail: int) -> _Holds:
    hold = plan.hold_without_islands(shape.window, shape.page, shape.chunk)
    return _Holds(
        hold=hold,
        unit=shape.cap * hold,
        floor=plan.island_floor(shape.cap, shape.window, shape.page, shape.chunk),
        tail=tail,
        floor_tail=plan.island_floor(shape.cap, shape.window, shape.page, shape.chunk,
                                     decode_tail=tail),
    )


def _shape_summary(shape, h: _Holds, **after_tail: int) -> Dict[str, Any]:
    return {
        **dataclasses.asdict(shape),
        "hold_without_islands": h.hold,
        "cap_x_hold": h.unit,
        "island_floor": h.floor,
        "island_floor_fraction": round(h.floor / h.unit, 5),
        "decode_tail": h.tail,
        **after_tail,
        "island_floor_with_tail": h.floor_tail,
        "cp_over_w_plus_p": round(shape.chunk / (shape.window + shape.page), 2),
    }


def _pool_row(r_eq: float, pool_prod: Optional[int], fraction: float, prod: Production,
              cpu: CpuShape, kv, hp: _Holds, hc: _Holds) -> Dict[str, Any]:
    """One pool: the production pool at ``r_eq`` (None for the floor row) scaled to the CPU."""
    pool_cpu = int(round(fraction * hc.unit))
    return {
        "ratio_equivalent": r_eq,
        "prod_swa_pool": pool_prod,
        "prod_full_pool": (
            plan.solve_pool_sizes(kv, prod.budget_bytes, r_eq, prod.page).full_tokens
            if pool_prod is not None
            else None
        ),
        "fraction_of_cap_x_hold": round(fraction, 5),
        "prod_bind_without_islands": (
            round(plan.admission_bind(pool_prod, hp.hold), 2) if pool_prod else None
        ),
        "swa_pool": pool_cpu,
        "server_ratio": server_ratio_for_pool(pool_cpu, cpu.max_total_tokens),
        "bind_without_islands": round(plan.admission_bind(pool_cpu, hc.hold), 2),
        "island_capacity": plan.island_capacity(pool_cpu, cpu.window, cpu.page, cpu.chunk),
        "island_capacity_with_tail": plan.island_capacity(
            pool_cpu, cpu.window, cpu.page, cpu.chunk, decode_tail=hc.tail
        ),
        "floor_margin": round(pool_cpu / hc.floor - 1, 4),
        "floor_with_tail_margin": round(pool_cpu / hc.floor_tail - 1, 4),
        "floor_fits": pool_cpu >= hc.floor,
    }


def plan_mapping(
    ratios: Sequence[float] = RATIO_EQUIVALENTS,
    prod: Production = Production(),
    cpu: CpuShape = CpuShape(),
) -> Dict[str, Any]:
    """Production pools at each ratio -> the CPU pools, server ratios and predicted binds.

    ``fraction(r) = pool_prod(r) / (cap_prod x H_prod)`` with ``H_prod = hold_without_islands``
    (one chunk); ``pool_cpu = round(fraction x cap_cpu x H_cpu)``; ``server ratio = pool_cpu /
    --max-total-tokens``. Also the island floors and the decode-tail scaling.
    """
    kv = plan.KVBytesPerToken(prod.full_bytes, prod.swa_bytes, prod.draft_bytes)
    tail_prod = plan.decode_tail_tokens(
        prod.accept_len, eviction_interval=prod.eviction_interval, decode_interval=prod.chunk // 4
    )
    hp = _holds(prod, tail_prod)
    hc = _holds(cpu, max(1, round(tail_prod / prod.chunk * cpu.chunk)))

    pools: Dict[str, Dict[str, Any]] = {}
    for r in ratios:
        p = plan.solve_pool_sizes(kv, prod.budget_bytes, r, prod.page)
        pools[_ratio_key(r)] = _pool_row(r, p.swa_tokens, p.swa_tokens / hp.unit, prod, cpu, kv,
                                         hp, hc)
    # The leanest islands arm: the CPU pool at the CPU island floor itself.
    frac_floor = hc.floor / hc.unit
    pools["floor"] = _pool_row(equivalent_ratio(frac_floor, prod), None, frac_floor, prod, cpu,
                               kv, hp, hc)

    return {
        "production": _shape_summary(prod, hp),
        # accept length 1 on CPU: tail tokens == steps
        "cpu": _shape_summary(cpu, hc, eviction_interval=hc.tail),
        "pools": pools,
    }


def _ratio_key(r: float) -> str:
    return f"{r:.2f}"


@dataclasses.dataclass(frozen=True)
class Arm:
    name: str
    pool_key: Optional[str]  # key into plan_mapping()["pools"]; None: the server sizes the pool
    args: Tuple[str, ...] = ()
    env: Tuple[Tuple[str, str], ...] = ()
    baseline: bool = False  # the arm ratios are taken against
    main: bool = False  # stock sglang 0.5.23 in .venv-main (islands_harness.main_arm)
    main_islands: bool = False  # 0.5.23 + the main islands series in .venv-main-islands


ARMS: Dict[str, Arm] = {
    a.name: a
    for a in (
        Arm("chunk_cache", None, ("--disable-radix-cache",)),
        Arm("upstream_0.32", "0.32"),
        Arm("upstream_0.17", "0.17", baseline=True),
        Arm("upstream_knobs_0.17", "0.17", (), tuple(KNOBS_ENV.items())),
        Arm("islands_0.17", "0.17", ("--enable-swa-islands",)),
        Arm("islands_0.10", "0.10", ("--enable-swa-islands",)),
        Arm("upstream_knobs_0.10", "0.10", (), tuple(KNOBS_ENV.items())),
        Arm("islands_floor", "floor", ("--enable-swa-islands",)),
        Arm("upstream_knobs_floor", "floor", (), tuple(KNOBS_ENV.items())),
        Arm("main_0.17", "0.17", main=True),
        Arm("main_0.10", "0.10", main=True),
        Arm("main_knobs_0.17", "0.17", (), tuple(MAIN_KNOBS_ENV.items()), main=True),
        Arm("main_knobs_0.10", "0.10", (), tuple(MAIN_KNOBS_ENV.items()), main=True),
        Arm("main_islands_0.17", "0.17", ("--enable-swa-islands",), main_islands=True),
        Arm("main_islands_0.10", "0.10", ("--enable-swa-islands",), main_islands=True),
    )
}


QUICK_ARMS = [
    "chunk_cache",
    "upstream_0.32",
    "upstream_0.17",
    "upstream_knobs_0.17",
    "islands_0.17",
    "islands_0.10",
]


DEFAULT_ARMS = QUICK_ARMS + ["upstream_knobs_0.10"]


BASELINE_ARM = "upstream_0.17"


def common_server_args(cpu: CpuShape) -> List[str]:
    return [
        "--page-size", str(cpu.page),
        "--chunked-prefill-size", str(cpu.chunk),
        "--max-total-tokens", str(cpu.max_total_tokens),
        "--max-running-requests", str(cpu.cap),
        "--enable-metrics",
        "--decode-log-interval", "1",
        "--log-level", "info",
    ]


def arm_server_args(arm: Arm, mapping: Dict[str, Any], cpu: CpuShape,
                    model: str = "laguna") -> List[str]:
    """``arm``'s server arguments serving ``model`` (``islands_harness.models``: its own
    arguments come last)."""
    args = common_server_args(cpu)
    if arm.pool_key is not None:
        args += ["--swa-full-tokens-ratio", repr(mapping["pools"][arm.pool_key]["server_ratio"])]
    return args + list(arm.args) + list(get_model(model).server_args)


def arm_target(arm: Arm) -> str:
    """The sglang release ``arm`` boots: 0.5.23 for the main arms, else 0.5.15.post1."""
    return "0.5.23" if arm.main or arm.main_islands else "0.5.15.post1"


def arm_env(arm: Arm, eviction_interval: int) -> Dict[str, str]:
    return with_eviction_interval(arm.env, eviction_interval)


def with_eviction_interval(env: Dict[str, str], eviction_interval: int) -> Dict[str, str]:
    """A copy of ``env`` plus ``SGLANG_SWA_EVICTION_INTERVAL`` (0 keeps sglang's default)."""
    env = dict(env)
    if eviction_interval > 0:
        env["SGLANG_SWA_EVICTION_INTERVAL"] = str(eviction_interval)
    return env
