"""Capacity plan for the two hybrid-SWA KV pools of SGLang 0.5.15.post1 (radix cache).

How ``--swa-full-tokens-ratio`` trades total KV capacity against the SWA pool, how large the SWA
pool must be once islands free the out-of-window SWA KV eagerly, and how many requests it admits
without islands. The pool formulas the server itself checks at startup (island floor, island
capacity, hold without islands, admission bind, SWA pool size) have one definition, in
``sglang.srt.mem_cache.swa_island_guard``; this module imports them and adds what only a plan
needs: bytes per token from a model's shape, the memory budget, the ratio search and the table.
``scripts/swa_pool_plan.py`` (``pool_plan_cli``) is its command line. Bytes per token live in
``pool_plan_bytes``, model shapes in ``pool_plan_shape``; this module re-exports both (``__all__``).

Vocabulary (token counts unless a name ends in ``bytes``):

  index space  The token index space shared by both pools. Its size ``T`` is SGLang's
               ``max_total_num_tokens`` (== ``full_max_total_num_tokens``): the full pool
               holds all ``T`` tokens for the full-attention layers.
  ratio ``r``  ``--swa-full-tokens-ratio``, in (0, 1]. The SWA pool holds
               ``floor_p(int(T * r))`` tokens for the sliding-window layers.
  bytes/token  What one token of index space costs in a pool, summed over that pool's
               layers: ``full`` (all full-attention layers), ``swa`` (all SWA layers,
               if that token were SWA-resident), ``draft`` (speculative-decoding draft KV
               that shares the index space).
  ``c(r)``     All-in cost of one token of index space: ``full + r*swa + draft`` bytes.
  budget ``B`` Bytes left for KV after weights and activations: SGLang's
               ``available_bytes`` (``ModelRunner._profile_available_bytes``). Per GPU.
  window ``w`` The MODEL's sliding window (config.json ``sliding_window``, e.g. 1024).
               NOT SGLang's ``window_left``: for Gemma ``tree_cache.sliding_window_size``
               is ``w - 1``. Using ``w`` makes every floor below one token per request
               conservative.
  page ``p``   ``--page-size``. chunk ``cp``: ``--chunked-prefill-size``.
  hold ``H``   SWA tokens one running request keeps unavailable to the admission check.
  island floor The SWA tokens ``N`` running requests need once islands free eagerly.
  admission bind  How many running requests the SWA pool admits: ``swa_pool / H``.
  rank         One GPU's scheduler and pools; every figure above is one rank's. Under tensor
               parallelism each rank of a replica holds the same tokens with
               ``max(1, kv_heads // tp)`` KV heads per layer (:func:`kv_heads_per_rank`), so
               bytes per token are per rank; under data parallelism each replica carries
               its share of the requests (:class:`Parallelism`).

Worked example (the seed deployment; SI units, KB = 1000 B): full 9.5 KB, swa 95 KB, draft
10.24 KB per token, B = 37 GB, p = 64:

  c(0.32) = 9.5 + 0.32*95 + 10.24 = 50.14 KB  ->  T = 737,920, SWA pool 236,096
  c(0.17) = 9.5 + 0.17*95 + 10.24 = 35.89 KB  ->  T = 1,030,912, SWA pool 175,232
  island floor, N = 48, w = 1024, cp = 16384:  16384 + 48*(1024 + 64) = 68,608
  bind without islands at r = 0.17, H = cp:    175,232 / 16,384 = 10.7 requests

Scope: the radix-cache case, ``HybridSWAPoolConfigurator``. SGLang uses
``SWAChunkCapPoolConfigurator`` instead only with ``--disable-radix-cache`` AND an explicit
``--max-running-requests`` AND ``--chunked-prefill-size``: it sizes the SWA pool from a
per-request cap and ignores the ratio. Islands live in the radix cache, so that configurator
never applies to them. All-SWA models (no full layer) have no ratio either and are rejected here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, List, Optional

from islands_tools.pool_plan_bytes import (
    DTYPE_BYTES,
    HybridKVLayout,
    KVBytesPerToken,
    KVCost,
    _check_non_negative,
    _check_positive,
    _is_number,
    cost_per_token,
    dtype_bytes,
    kv_bytes_per_layer,
    kv_heads_per_rank,
    per_rank_bytes_per_token,
)
from islands_tools.pool_plan_shape import (
    ModelShape,
    kv_layout_from_hf_config,
    kv_layout_from_model_config,
    kv_layout_from_shape,
    model_shape_from_hf_config,
    model_shape_from_model_config,
    read_model_shape,
    sliding_window_from_hf_config,
)
from sglang.srt.mem_cache.swa_island_guard import (
    admission_bind,
    hold_without_islands,
    island_capacity,
    island_floor,
    swa_pool_tokens,
)

__all__ = [
    "DTYPE_BYTES",
    "KVBytesPerToken",
    "HybridKVLayout",
    "ModelShape",
    "Workload",
    "PoolSizes",
    "RatioRecommendation",
    "PlanRow",
    "Parallelism",
    "dtype_bytes",
    "kv_heads_per_rank",
    "kv_bytes_per_layer",
    "per_rank_bytes_per_token",
    "model_shape_from_model_config",
    "model_shape_from_hf_config",
    "read_model_shape",
    "kv_layout_from_shape",
    "kv_layout_from_model_config",
    "kv_layout_from_hf_config",
    "sliding_window_from_hf_config",
    "cost_per_token",
    "max_total_tokens",
    "swa_pool_tokens",
    "solve_pool_sizes",
    "island_floor",
    "island_capacity",
    "hold_without_islands",
    "admission_bind",
    "decode_tail_tokens",
    "pool_floor_ratio",
    "recommend_ratio",
    "plan_table",
]


@dataclass(frozen=True)
class Parallelism:
    """Tensor and data parallelism of a deployment: what one rank's pools carry.

    Every TP rank of a replica runs its own scheduler and pools, with the same token counts
    (the same requests) and its share of the KV heads; ``--budget`` is per GPU, so one rank's
    pools are the plan's pools. Each of ``dp_size`` replicas (plain ``--dp-size``, or
    ``--enable-dp-attention`` with ``tp_size`` its attention-TP size) has its own pools and its
    own share of the requests: ``ceil(n_running / dp_size)``.
    Example: TP 2 x DP 2 = 4 GPUs; 48 running in all -> 24 per replica.
    """

    tp_size: int = 1
    dp_size: int = 1

    def __post_init__(self) -> None:
        _check_positive("tp_size (--tp-size)", self.tp_size, integer=True)
        _check_positive("dp_size (--dp-size)", self.dp_size, integer=True)

    @property
    def gpus(self) -> int:
        return self.tp_size * self.dp_size

    def requests_per_replica(self, n_running: int) -> int:
        _check_positive("n_running (--max-running-requests)", n_running, integer=True)
        return -(-n_running // self.dp_size)


# ------------------------------------------------------------------------- pool sizes


def max_total_tokens(
    budget_bytes: float, c: float, page: int, max_total_tokens_cap: Optional[int] = None
) -> int:
    """``T_max``: SGLang's ``max_total_num_tokens``, the full pool, for a budget and c(r).

    Same arithmetic and rounding as ``HybridSWAPoolConfigurator.calculate_pool_sizes`` and
    ``ModelRunner``'s ``--max-total-tokens`` constraint:

      T = int(available_bytes // cell_size)
      full = (T // page) * page
      if --max-total-tokens < full:  full = (cap // page) * page

    Example: 37e9 // 35890.0 = 1,030,928 -> 1,030,912 tokens at p = 64.
    """
    _check_positive("budget_bytes", budget_bytes)
    _check_positive("c (bytes per token of index space)", c)
    _check_positive("page", page, integer=True)
    full = int(budget_bytes // c)
    full = (full // page) * page
    if max_total_tokens_cap is not None:
        _check_positive("max_total_tokens_cap (--max-total-tokens)", max_total_tokens_cap, integer=True)
        constrained = min(full, max_total_tokens_cap)
        if constrained != full:
            full = (constrained // page) * page
    if full <= 0:
        raise ValueError(
            f"a budget of {budget_bytes:,.0f} bytes at {c:,.1f} bytes/token holds no whole "
            f"page of {page} tokens (SGLang would refuse to boot: 'Not enough memory')"
        )
    return full


@dataclass(frozen=True)
class PoolSizes:
    """Both pools at one ratio, as SGLang would allocate them."""

    ratio: float
    cost_per_token: float  # c(r), bytes
    full_tokens: int  # T_max(r): max_total_num_tokens == full pool
    swa_tokens: int  # SWA pool


def solve_pool_sizes(
    kv: KVCost,
    budget_bytes: float,
    ratio: float,
    page: int,
    *,
    max_total_tokens_cap: Optional[int] = None,
) -> PoolSizes:
    """Full and SWA pool sizes for a ratio: ``HybridSWAPoolConfigurator.calculate_pool_sizes``
    followed by the ``--max-total-tokens`` constraint."""
    c = kv.cell_size(ratio)
    full = max_total_tokens(budget_bytes, c, page, max_total_tokens_cap)
    return PoolSizes(
        ratio=ratio,
        cost_per_token=c,
        full_tokens=full,
        swa_tokens=swa_pool_tokens(full, ratio, page),
    )


# --------------------------------------------------------------------- holds and floors


@dataclass(frozen=True)
class Workload:
    """What the SWA pool must carry: ``n_running`` requests of a model with window ``w``.

    ``chunks_in_flight`` un-stashed prefill chunks are counted whole (1 under the normal
    scheduler; the overlap scheduler can have a second). ``decode_tail`` is extra
    request-owned SWA tokens per request between two frees (:func:`decode_tail_tokens`);
    0 counts the steady state.
    """

    n_running: int
    window: int
    page: int
    chunk: int
    chunks_in_flight: int = 1
    decode_tail: int = 0

    def __post_init__(self) -> None:
        _check_positive("n_running (--max-running-requests)", self.n_running, integer=True)
        _check_positive("window (model sliding window, tokens)", self.window, integer=True)
        _check_positive("page (--page-size)", self.page, integer=True)
        _check_positive("chunk (--chunked-prefill-size)", self.chunk, integer=True)
        _check_non_negative("chunks_in_flight", self.chunks_in_flight, integer=True)
        _check_non_negative("decode_tail", self.decode_tail, integer=True)

    @property
    def floor(self) -> int:
        return island_floor(
            self.n_running,
            self.window,
            self.page,
            self.chunk,
            chunks_in_flight=self.chunks_in_flight,
            decode_tail=self.decode_tail,
        )


def decode_tail_tokens(
    mean_accept_len: float, *, eviction_interval: int = 128, decode_interval: Optional[int] = None
) -> int:
    """Request-owned SWA a decoding request accrues before it is freed again (tokens).

    Upstream's decode evictor runs every ``SGLANG_SWA_EVICTION_INTERVAL`` (128) forward steps and
    a step commits ``mean_accept_len`` tokens (1 without speculative decoding); with islands a
    decode island frees it at least every ``decode_interval`` (cp/4) tokens, whichever is first.
    Example: accept 8.5, cp=16384 -> min(ceil(128 * 8.5), 4096) = 1088.
    """
    _check_positive("mean_accept_len", mean_accept_len)
    _check_positive("eviction_interval", eviction_interval, integer=True)
    tail = int(math.ceil(eviction_interval * mean_accept_len))
    if decode_interval is not None:
        _check_positive("decode_interval", decode_interval, integer=True)
        tail = min(tail, decode_interval)
    return tail


# ----------------------------------------------------------------------- choosing a ratio


def _ratio_cap_floor(max_total_tokens_cap: Optional[int], floor: int) -> float:
    return 0.0 if max_total_tokens_cap is None else floor / max_total_tokens_cap


def pool_floor_ratio(
    kv: KVCost,
    budget_bytes: float,
    workload: Workload,
    *,
    max_total_tokens_cap: Optional[int] = None,
) -> float:
    """The ratio below which the island floor cannot fit the SWA pool.

    Solves ``r * B / c(r) = floor`` with ``c(r) = a + r*s`` (``a = full + draft``,
    ``s = swa``):  ``r* = floor * a / (B - floor * s)``; with ``--max-total-tokens`` the
    pool is also at most ``r * cap``, so ``r >= floor / cap`` too.

    Page rounding only ever shrinks the SWA pool below ``r * B / c(r)``, so any
    ``--swa-full-tokens-ratio`` below this value is infeasible and safe to reject at boot;
    at or just above it, rounding can still leave the pool a page or two short (compare
    ``solve_pool_sizes(...).swa_tokens`` with ``workload.floor`` for the exact check).

    Example (seed deployment): 68,608 * 19,740 / (37e9 - 68,608 * 95,000) = 0.0444.
    Raises ValueError when the floor does not fit even at ratio 1.
    """
    _check_positive("budget_bytes", budget_bytes)
    floor = workload.floor
    bpt = kv.bytes_per_token if isinstance(kv, HybridKVLayout) else kv
    denom = budget_bytes - floor * bpt.swa
    r_star = floor * bpt.fixed / denom if denom > 0 else math.inf
    r_star = max(r_star, _ratio_cap_floor(max_total_tokens_cap, floor))
    if r_star > 1:
        best = solve_pool_sizes(kv, budget_bytes, 1.0, workload.page, max_total_tokens_cap=max_total_tokens_cap)
        raise ValueError(
            f"the island floor of {floor:,} tokens (cp + N x (w + p) = {workload.chunk} + "
            f"{workload.n_running} x ({workload.window} + {workload.page})) does not fit: "
            f"even at ratio 1.0 the budget holds an SWA pool of only {best.swa_tokens:,} "
            "tokens; lower --max-running-requests or --chunked-prefill-size, or raise the budget"
        )
    return r_star


@dataclass(frozen=True)
class RatioRecommendation:
    ratio: float  # smallest ratio on the step grid meeting floor * (1 + margin)
    pool: PoolSizes  # both pools at that ratio
    floor: int  # island floor, tokens
    margin_target: float  # requested head-room over the floor
    margin: float  # achieved: pool.swa_tokens / floor - 1
    pool_floor_ratio: float  # below this no ratio fits the floor at all


def recommend_ratio(
    kv: KVCost,
    budget_bytes: float,
    workload: Workload,
    *,
    margin: float = 0.25,
    step: float = 0.01,
    max_total_tokens_cap: Optional[int] = None,
) -> RatioRecommendation:
    """Smallest ``--swa-full-tokens-ratio`` (a multiple of ``step``, i.e. rounded up to
    0.01) whose SWA pool, as SGLang rounds it, holds ``floor * (1 + margin)`` tokens.

    The smaller the ratio, the larger ``T_max``; ``margin`` (default 25%) is head-room for
    what the floor leaves out (at the seed deployment it covers a second in-flight chunk).
    Example (seed deployment): margin 0.25 -> r = 0.06, SWA pool 87,232 (+27.1%).
    """
    _check_non_negative("margin", margin)
    if not _is_number(step) or not (0 < step <= 1):
        raise ValueError(f"step must be in (0, 1], got {step!r}")
    r_min = pool_floor_ratio(kv, budget_bytes, workload, max_total_tokens_cap=max_total_tokens_cap)
    floor = workload.floor
    need = floor * (1 + margin)
    n_steps = int(math.floor(1 / step + 1e-9))
    ratios = [round(k * step, 10) for k in range(1, n_steps + 1)]
    if ratios[-1] < 1.0:
        ratios.append(1.0)
    for r in ratios:
        if r < r_min:
            continue
        pool = solve_pool_sizes(kv, budget_bytes, r, workload.page, max_total_tokens_cap=max_total_tokens_cap)
        if pool.swa_tokens >= need:
            return RatioRecommendation(
                ratio=r,
                pool=pool,
                floor=floor,
                margin_target=margin,
                margin=pool.swa_tokens / floor - 1 if floor else math.inf,
                pool_floor_ratio=r_min,
            )
    best = solve_pool_sizes(kv, budget_bytes, 1.0, workload.page, max_total_tokens_cap=max_total_tokens_cap)
    raise ValueError(
        f"no ratio up to 1.0 gives the island floor of {floor:,} tokens a {margin:.0%} margin: "
        f"the largest SWA pool is {best.swa_tokens:,} tokens (margin "
        f"{best.swa_tokens / floor - 1:.1%}); lower --margin or --max-running-requests, or "
        "raise the budget"
    )


@dataclass(frozen=True)
class PlanRow:
    ratio: float
    cost_per_token: float  # c(r), bytes
    full_tokens: int  # T_max(r)
    swa_tokens: int  # SWA pool
    floor_margin: float  # swa_tokens / island floor - 1 (negative: floor does not fit)
    island_capacity: int  # running requests the island floor admits
    bind_without_islands: float  # swa_tokens / hold


def plan_table(
    kv: KVCost,
    budget_bytes: float,
    workload: Workload,
    ratios: Iterable[float],
    *,
    hold: Optional[float] = None,
    max_total_tokens_cap: Optional[int] = None,
) -> List[PlanRow]:
    """One row per ratio: cost, both pools, the floor's margin, and both admission limits.
    ``hold`` defaults to ``hold_without_islands(w, p, cp)``."""
    if hold is None:
        hold = hold_without_islands(workload.window, workload.page, workload.chunk)
    floor = workload.floor
    rows = []
    for r in ratios:
        pool = solve_pool_sizes(kv, budget_bytes, r, workload.page, max_total_tokens_cap=max_total_tokens_cap)
        rows.append(
            PlanRow(
                ratio=r,
                cost_per_token=pool.cost_per_token,
                full_tokens=pool.full_tokens,
                swa_tokens=pool.swa_tokens,
                floor_margin=pool.swa_tokens / floor - 1 if floor else math.inf,
                island_capacity=island_capacity(
                    pool.swa_tokens,
                    workload.window,
                    workload.page,
                    workload.chunk,
                    chunks_in_flight=workload.chunks_in_flight,
                    decode_tail=workload.decode_tail,
                ),
                bind_without_islands=admission_bind(pool.swa_tokens, hold),
            )
        )
    return rows
