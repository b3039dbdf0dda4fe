"""Bytes per token of the two hybrid-SWA KV pools: the capacity planner's cost model.

``c(r) = full + r * swa + draft`` bytes per token of index space (:func:`cost_per_token`), from the
KV bytes one layer stores per token (:func:`kv_bytes_per_layer`, K and V, per tensor-parallel rank)
summed over each kind of layer (:class:`HybridKVLayout`, SGLang's ``HybridSWAPoolConfigurator`` in
its own expression order, or :class:`KVBytesPerToken`, the totals). Units: bytes; head dims in
elements; every figure is one rank's. The words are ``pool_plan``'s; this module is the bottom of
the planner (``pool_plan_shape`` reads models into it, ``pool_plan`` sizes pools from it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional, Union

# Bytes per element of the KV cache, by the names SGLang's --kv-cache-dtype and this
# planner accept. ("auto" follows the model dtype, which a config alone cannot settle.)
DTYPE_BYTES = {
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "bf16": 2,
    "bfloat16": 2,
    "fp16": 2,
    "float16": 2,
    "half": 2,
    "fp32": 4,
    "float32": 4,
    "float": 4,
}


# --------------------------------------------------------------------------- validation


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _check_positive(name: str, value: Any, *, integer: bool = False) -> None:
    if integer:
        if not isinstance(value, int) or isinstance(value, bool):
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    elif not _is_number(value) or not math.isfinite(value):
        raise ValueError(f"{name} must be a positive number, got {value!r}")
    if value <= 0:
        raise ValueError(f"{name} must be positive, got {value!r}")


def _check_non_negative(name: str, value: Any, *, integer: bool = False) -> None:
    if integer:
        if not isinstance(value, int) or isinstance(value, bool):
            raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
    elif not _is_number(value) or not math.isfinite(value):
        raise ValueError(f"{name} must be a non-negative number, got {value!r}")
    if value < 0:
        raise ValueError(f"{name} must not be negative, got {value!r}")


def _check_ratio(ratio: Any) -> None:
    if not _is_number(ratio) or not (0 < ratio <= 1):
        raise ValueError(
            f"ratio (--swa-full-tokens-ratio) must be in (0, 1], got {ratio!r}: "
            "the SWA pool holds ratio x T tokens of the T-token index space"
        )


# --------------------------------------------------------------------- bytes per token


def dtype_bytes(kv_dtype: str) -> int:
    """Bytes per KV element: fp8 = 1, bf16/fp16 = 2, fp32 = 4 (SGLang's element size)."""
    try:
        return DTYPE_BYTES[str(kv_dtype).strip().lower()]
    except KeyError:
        raise ValueError(
            f"unknown KV dtype {kv_dtype!r}; use one of fp8, bf16, fp16, fp32 "
            f"(also accepted: {', '.join(sorted(DTYPE_BYTES))})"
        ) from None


def kv_heads_per_rank(num_kv_heads: int, tp_size: int) -> int:
    """KV heads one tensor-parallel rank stores: ``max(1, heads // tp)``, SGLang's
    ``ModelConfig.get_num_kv_heads(attention_tp_size)``. Fewer heads than ranks are replicated
    so each rank holds one. Examples: 8 heads, TP 4 -> 2; 2 heads, TP 8 -> 1 (each head on 4
    ranks)."""
    _check_positive("num_kv_heads", num_kv_heads, integer=True)
    _check_positive("tp_size", tp_size, integer=True)
    return max(1, num_kv_heads // tp_size)


def kv_bytes_per_layer(
    num_kv_heads: int,
    head_dim: int,
    dtype_nbytes: int,
    *,
    v_head_dim: Optional[int] = None,
    tp_size: int = 1,
) -> int:
    """Bytes one token costs in ONE attention layer: ``kv_heads * (head_dim + v_head_dim)
    * dtype_bytes``, i.e. K and V (``2 * kv_heads * head_dim * dtype`` when V matches K).

    Mirrors ``HybridSWAPoolConfigurator.__init__``, including the per-rank head count
    ``max(1, kv_heads // tp_size)`` of ``ModelConfig.get_num_kv_heads``.
    Example: Gemma-4 global layers, 2 KV heads x (512 + 512) x fp8 -> 2048 bytes.
    """
    _check_positive("num_kv_heads", num_kv_heads, integer=True)
    _check_positive("head_dim", head_dim, integer=True)
    _check_positive("dtype_nbytes", dtype_nbytes, integer=True)
    _check_positive("tp_size", tp_size, integer=True)
    if v_head_dim is None:
        v_head_dim = head_dim
    _check_positive("v_head_dim", v_head_dim, integer=True)
    return kv_heads_per_rank(num_kv_heads, tp_size) * (head_dim + v_head_dim) * dtype_nbytes


def cost_per_token(
    full_bytes: float, swa_bytes: float, draft_bytes: float, ratio: float
) -> float:
    """``c(r) = full + r * swa + draft``: bytes one token of index space costs.

    ``full``, ``swa`` and ``draft`` are bytes per token summed over all layers of that
    kind. Draft KV rides the full index space, so it is charged like full KV (SGLang
    budgets EAGLE/STANDALONE draft layers as full layers).
    Example: 9.5 KB + 0.17 * 95 KB + 10.24 KB = 35.89 KB.

    SGLang evaluates ``F*(n_full + n_draft) + r*S*n_swa``; for per-layer inputs
    ``HybridKVLayout.cell_size`` repeats that expression order exactly, this aggregate form
    can differ from it in the last floating-point digit only.
    """
    _check_positive("full_bytes (bytes per token in the full pool)", full_bytes)
    _check_positive("swa_bytes (bytes per token in the SWA pool)", swa_bytes)
    _check_non_negative("draft_bytes (bytes per token of draft KV)", draft_bytes)
    _check_ratio(ratio)
    return (full_bytes + draft_bytes) + ratio * swa_bytes


@dataclass(frozen=True)
class KVBytesPerToken:
    """Bytes per token of index space, summed over the layers of each kind."""

    full: float
    swa: float
    draft: float = 0.0

    def __post_init__(self) -> None:
        _check_positive("full bytes per token (all full-attention layers)", self.full)
        _check_positive("SWA bytes per token (all sliding-window layers)", self.swa)
        _check_non_negative("draft bytes per token", self.draft)

    @property
    def fixed(self) -> float:
        """Bytes per token that do not scale with the ratio: ``full + draft``."""
        return self.full + self.draft

    def cell_size(self, ratio: float) -> float:
        return cost_per_token(self.full, self.swa, self.draft, ratio)


def per_rank_bytes_per_token(
    kv: KVBytesPerToken, tp_size: int, kv_heads: int, swa_kv_heads: Optional[int] = None
) -> KVBytesPerToken:
    """Bytes per token on ONE tensor-parallel rank, from the whole model's (TP 1) totals.

    Each layer's K+V scales with the heads a rank stores (:func:`kv_heads_per_rank`):
    ``full * max(1, H // tp) / H`` with ``H = kv_heads``, SWA the same with ``swa_kv_heads``
    (default ``kv_heads``); draft KV is budgeted like full KV (SGLang's configurator charges
    draft layers at the full layers' per-rank bytes), so it scales with ``kv_heads`` too.
    Example: 9.5 KB full over 2 KV heads at TP 4 -> 1 head per rank (replicated) -> 4.75 KB.
    """
    _check_positive("tp_size", tp_size, integer=True)
    swa_kv_heads = kv_heads if swa_kv_heads is None else swa_kv_heads

    def scale(name: str, total: float, heads: int) -> float:
        per_rank = kv_heads_per_rank(heads, tp_size)
        if total % heads:
            raise ValueError(
                f"{name} bytes per token ({total:,.0f}) is not a multiple of its {heads} KV "
                "heads: give the whole model's bytes (TP 1) and its KV head count"
            )
        return total // heads * per_rank

    return KVBytesPerToken(
        full=scale("full", kv.full, kv_heads),
        swa=scale("SWA", kv.swa, swa_kv_heads),
        draft=scale("draft", kv.draft, kv_heads) if kv.draft else kv.draft,
    )


@dataclass(frozen=True)
class HybridKVLayout:
    """Per-layer form, exactly as ``HybridSWAPoolConfigurator`` holds it.

    ``full_bytes_per_layer`` is SGLang's ``_full_per_token`` (F), ``swa_bytes_per_layer``
    its ``_swa_per_token`` (S); draft layers are budgeted at F each.
    """

    full_layers: int
    swa_layers: int
    full_bytes_per_layer: int
    swa_bytes_per_layer: int
    draft_layers: int = 0

    def __post_init__(self) -> None:
        _check_non_negative("full_layers", self.full_layers, integer=True)
        if self.full_layers == 0:
            raise ValueError(
                "full_layers is 0: an all-SWA model has no full pool, and SGLang ignores "
                "--swa-full-tokens-ratio for it; there is no pool split to plan"
            )
        _check_positive("swa_layers (a hybrid model needs at least one)", self.swa_layers, integer=True)
        _check_positive("full_bytes_per_layer", self.full_bytes_per_layer, integer=True)
        _check_positive("swa_bytes_per_layer", self.swa_bytes_per_layer, integer=True)
        _check_non_negative("draft_layers", self.draft_layers, integer=True)

    @property
    def fixed(self) -> int:
        return self.full_bytes_per_layer * (self.full_layers + self.draft_layers)

    @property
    def bytes_per_token(self) -> KVBytesPerToken:
        return KVBytesPerToken(
            full=self.full_bytes_per_layer * self.full_layers,
            swa=self.swa_bytes_per_layer * self.swa_layers,
            draft=self.full_bytes_per_layer * self.draft_layers,
        )

    def cell_size(self, ratio: float) -> float:
        """SGLang's ``HybridSWAPoolConfigurator._cell_size``, same expression order."""
        _check_ratio(ratio)
        return (
            self.full_bytes_per_layer * (self.full_layers + self.draft_layers)
            + ratio * self.swa_bytes_per_layer * self.swa_layers
        )


KVCost = Union[KVBytesPerToken, HybridKVLayout]
