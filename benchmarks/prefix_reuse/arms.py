"""Prefix reuse benchmark, the run matrix: the CPU shape, the arms (server arguments and
environment per cache variant), the SWA pools they run at, and picking a subset of either from a
comma list.

One server boot per (arm, pool); the arms differ only in ``ARMS[arm]["args"]`` and ``["env"]``.
Pools are in tokens of the SWA pool (``swa_pool``) and as ``--swa-full-tokens-ratio``
(``server_ratio``) of the shape's ``--max-total-tokens``.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

import _bench_path  # noqa: F401  (puts the repository root and benchmarks/ on sys.path)
from admission import setup as admission_setup
from islands_harness.main_arm import MAIN_FREE_OFF_ENV, MAIN_KNOBS_ENV, MAIN_RELEASE_PREFILL_ENV
from islands_harness.models import get_model

CPU = admission_setup.CpuShape()

HICACHE_ARGS = ("--enable-hierarchical-cache", "--hicache-io-backend", "direct")
"""HiCache's host tier (write_through, host pool twice the device pool: 0.5.23's defaults); the
direct io backend is the one that runs on CPU (``patches-main/0012``)."""

ARMS: Dict[str, Dict[str, Any]] = {
    "upstream": {"args": (), "env": {}},
    "upstream_knobs": {"args": (), "env": dict(admission_setup.KNOBS_ENV)},
    "islands_eager": {"args": ("--enable-swa-islands", "--swa-islands-reclaim", "eager"), "env": {}},
    "islands": {"args": ("--enable-swa-islands",), "env": {}},
    "islands_auto": {"args": ("--enable-swa-islands", "--swa-islands-reclaim", "auto"), "env": {}},
    "main": {"args": (), "env": {}, "main": True},
    "main_knobs": {"args": (), "env": dict(MAIN_KNOBS_ENV), "main": True},
    "main_free_off": {"args": (), "env": dict(MAIN_FREE_OFF_ENV), "main": True},
    "main_release_prefill": {"args": (), "env": dict(MAIN_RELEASE_PREFILL_ENV), "main": True},
    "main_islands": {"args": ("--enable-swa-islands",), "env": {}, "main_islands": True},
    "main_islands_auto": {"args": ("--enable-swa-islands", "--swa-islands-reclaim", "auto"),
                          "env": {}, "main_islands": True},
    "main_islands_window": {"args": ("--enable-swa-islands", "--swa-islands-eviction", "window"),
                            "env": {}, "main_islands": True},
    "main_hicache": {"args": HICACHE_ARGS, "env": {}, "main": True, "hicache": True},
    "main_islands_hicache": {"args": ("--enable-swa-islands", *HICACHE_ARGS), "env": {},
                             "main_islands": True, "hicache": True},
}
"""``main``: stock sglang 0.5.23 (``islands_harness.main_arm``), default settings; ``main_knobs``:
the same with main's two off-by-default SWA knobs (``MAIN_KNOBS_ENV``), ``main_free_off`` /
``main_release_prefill`` one of them each; ``main_islands``: 0.5.23 with the main islands series
(`.venv-main-islands`) and ``--enable-swa-islands`` (``main_islands_auto``: with
``--swa-islands-reclaim auto``; ``main_islands_window``: with ``--swa-islands-eviction window``,
the window-aware SWA eviction order on the Python tree core); ``main_hicache`` and
``main_islands_hicache``: ``main`` and ``main_islands`` with HiCache's host tier
(``HICACHE_ARGS``). Each runs when named in --arms."""
MAIN_ARMS = ("main", "main_knobs", "main_free_off", "main_release_prefill", "main_islands",
             "main_islands_auto", "main_islands_window", "main_hicache", "main_islands_hicache")
"""The arms on sglang 0.5.23."""
DEFAULT_ARMS = ("upstream", "upstream_knobs", "islands_eager", "islands")
"""The issue's four arms; ``islands_auto`` (eager below the watermark) runs when named in --arms."""
ISLAND_ARMS = ("islands_eager", "islands", "islands_auto")
DEFAULT_POOLS = ("ample", "0.17-eq", "0.10-eq")
"""The pools a run boots unless ``--pools`` says otherwise (the simulator's too)."""
POOLS = (*DEFAULT_POOLS, "lean-device")
"""Every pool, in report order; ``lean-device`` runs only when named."""
AMPLE_RATIO = 0.5
"""``--swa-full-tokens-ratio`` of the ``ample`` pool (every other pool is the planner's)."""
LEAN_DEVICE_TOKENS = 16_384
"""``--max-total-tokens`` of the ``lean-device`` pool: a quarter of the others', so a class's Full
KV does not fit on the device and a HiCache host tier's loads count; its SWA pool is 0.17-eq's
(the server ratio scaled by the same factor)."""


def pool_table(mapping: Optional[Dict[str, Any]] = None,
               cpu: admission_setup.CpuShape = CPU) -> Dict[str, Dict[str, Any]]:
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
    scale = cpu.max_total_tokens / LEAN_DEVICE_TOKENS
    out["lean-device"] = {**out["0.17-eq"], "max_total_tokens": LEAN_DEVICE_TOKENS,
                          "server_ratio": round(out["0.17-eq"]["server_ratio"] * scale, 8)}
    return out


def server_args(arm: str, pool: Dict[str, Any], cpu: admission_setup.CpuShape = CPU,
                model: str = "laguna") -> List[str]:
    """The server's command-line arguments for ``arm`` at ``pool`` (a ``pool_table`` row),
    serving ``model`` (``islands_harness.models``: its own arguments come last)."""
    device = (["--max-total-tokens", str(pool["max_total_tokens"])]
              if "max_total_tokens" in pool else [])
    return (admission_setup.common_server_args(cpu) + device
            + ["--swa-full-tokens-ratio", repr(pool["server_ratio"])] + list(ARMS[arm]["args"])
            + list(get_model(model).server_args))


def arm_target(arm: str) -> str:
    """The sglang release ``arm`` boots: 0.5.23 for the main arms, else 0.5.15.post1."""
    return "0.5.23" if arm in MAIN_ARMS else "0.5.15.post1"


def unserved_arms(arms: Sequence[str], model: str) -> List[str]:
    """The arms of ``arms`` whose release does not serve ``model``."""
    return [a for a in arms if not get_model(model).serves_on(arm_target(a))]


def server_env(arm: str, eviction_interval: int) -> Dict[str, str]:
    """The arm's environment plus ``SGLANG_SWA_EVICTION_INTERVAL`` (0 keeps sglang's default)."""
    return admission_setup.with_eviction_interval(ARMS[arm]["env"], eviction_interval)


def comma_choice(s: str, allowed: Sequence[str], what: str, ap) -> List[str]:
    """The names of the comma list ``s``, in ``allowed``'s order; ``ap.error`` (exit 2) if one is
    not in ``allowed`` or the list is empty."""
    xs = [x for x in s.split(",") if x]
    bad = [x for x in xs if x not in allowed]
    if bad or not xs:
        ap.error(f"unknown or no {what}: {bad}; choose from {','.join(allowed)}")
    return [x for x in allowed if x in xs]  # fixed order
