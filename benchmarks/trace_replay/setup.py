"""The trace replay's run matrix: the production shape, the arms, the pools.

Shape: the seed's (``seed_table.setup.Shape``: window ``w`` 1024, page ``p`` 64, chunk ``cp``
16384, ``--max-running-requests`` 48). Arms: the seed table's four (0.5.15.post1 ``upstream`` and
``islands``; 0.5.23 ``main`` and ``main_islands``) and 0.5.23 with HiCache's host tier, stock
(``main_hicache``) and with islands (``main_islands_hicache``), each 0.5.23 arm by the server flags
of ``prefix_reuse.arms.ARMS`` (the host tier: ``--enable-hierarchical-cache`` with 0.5.23's
defaults, write-through, a host pool twice the device pool). Pools, in tokens: the planner's full
and SWA pools at ``--swa-full-tokens-ratio`` 0.32, 0.17 and 0.10 for the seed's bytes per token and
37 GB (``seed_table.setup.pools``), and ``lean``: the full pool capped at ``--max-total-tokens``
400,000 at ratio 0.32 (SWA 128,000), see :data:`LEAN_MAX_TOTAL_TOKENS`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Sequence

import _bench_path  # noqa: F401  (puts the repository root and benchmarks/ on sys.path)
from seed_table import setup as st

ARMS: Dict[str, Dict[str, Any]] = {
    **st.ARMS,
    "main_hicache": {"target": "0.5.23", "label": "0.5.23 stock + HiCache"},
    "main_islands_hicache": {"target": "0.5.23", "label": "0.5.23 islands + HiCache"},
}
"""The arms, in report order; the 0.5.23 ones run in `.venv-main` / `.venv-main-islands`."""

ARM_DESCRIPTIONS = {
    "upstream": "sglang 0.5.15.post1, `SWARadixCache` (islands off)",
    "islands": "sglang 0.5.15.post1 + islands, `--enable-swa-islands` (reclaim `lazy`)",
    "main": "stock sglang 0.5.23, `UnifiedRadixCache` with its defaults",
    "main_islands": "sglang 0.5.23 + islands, `--enable-swa-islands` with its defaults",
    "main_hicache": "stock sglang 0.5.23 with HiCache's host tier (`--enable-hierarchical-cache "
                    "--hicache-io-backend direct`: write-through, host pool twice the device pool)",
    "main_islands_hicache": "sglang 0.5.23 + islands, `--enable-swa-islands` with the same host "
                            "tier",
}

RATIOS = st.RATIOS
LEAN = "lean"
POOLS = tuple(f"{r:.2f}" for r in RATIOS) + (LEAN,)
"""Pool names in report order: the planner's ratios, then ``lean``."""

LEAN_MAX_TOTAL_TOKENS = 400_000
"""The ``lean`` pool's ``--max-total-tokens`` (at ratio 0.32: SWA 128,000). 400,000 full tokens
are the KV of 32 of the trace's requests at its mean length (12,035 in + 343 out), fewer than the
cap of 48: the running requests' own KV and the cached prefixes overrun the full pool, so the full
pool evicts prefixes, while the SWA pool (128,000) still carries an island arm's ``w + p`` per
running request (about 50,000 at the cap). Every other pool is the planner's at the 37 GB budget,
where the SWA pool is the scarce one."""
LEAN_RATIO = 0.32


@dataclasses.dataclass(frozen=True)
class Sizes:
    """Where the pools come from: the seed table's ``Budget`` (bytes per token and the budget)
    and the ``lean`` pool's cap and ratio."""

    budget: st.Budget = st.Budget()
    lean_max_total_tokens: int = LEAN_MAX_TOTAL_TOKENS
    lean_ratio: float = LEAN_RATIO


def pools(names: Sequence[str], shape: st.Shape, sizes: Sizes) -> List[Dict[str, Any]]:
    """Per pool name, in order: ``seed_table.setup.pools``'s row with ``name`` added (the lean
    pool's also with ``max_total_tokens``)."""
    out = []
    for name in names:
        if name == LEAN:
            b = dataclasses.replace(sizes.budget, max_total_tokens=sizes.lean_max_total_tokens)
            (row,) = st.pools([sizes.lean_ratio], shape, b)
            row = {"name": name, **row, "max_total_tokens": sizes.lean_max_total_tokens}
        else:
            (row,) = st.pools([float(name)], shape, sizes.budget)
            row = {"name": name, **row}
        out.append(row)
    return out


def worker_arm(arm: str) -> Dict[str, Any]:
    return st.worker_arm(arm, ARMS)


def arm_python(arm: str) -> str:
    return st.arm_python(arm, ARMS)
