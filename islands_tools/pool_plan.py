"""Capacity plan for the two hybrid-SWA KV pools of SGLang 0.5.15.post1 (radix cache).

How ``--swa-full-tokens-ratio`` trades total KV capacity against the SWA pool, how large the SWA
pool must be once islands free the out-of-window SWA KV eagerly, and how many requests it admits
without islands. The pool formulas the server itself checks at startup (island floor, island
capacity, hold without islands, admission bind, SWA pool size) have one definition, in
``sglang.srt.mem_cache.swa_island_guard``; this module imports them and adds what only a plan
needs: bytes per token from a model's shape, the memory budget, the ratio search and the table.
``scripts/swa_pool_plan.py`` (``pool_plan_cli``) is its command line.

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

import contextlib
import json
import logging
import math
import os
import warnings
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, List, Mapping, Optional, Union

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


# ------------------------------------------------------------------------ model shapes


@dataclass(frozen=True)
class ModelShape:
    """What the KV pools of a hybrid-SWA model depend on, per GPU at one attention-TP size.

    Head counts are per GPU (``max(1, heads // tp_size)``); dims are per head, in elements.
    ``reader`` says where it came from: ``"ModelConfig"`` or ``"config.json"``.
    """

    full_layers: int
    swa_layers: int
    kv_heads: int
    head_dim: int
    v_head_dim: int
    swa_kv_heads: int
    swa_head_dim: int
    swa_v_head_dim: int
    sliding_window: Optional[int]
    reader: str


def model_shape_from_model_config(model_config: Any, *, tp_size: int = 1) -> ModelShape:
    """The shape SGLang sizes the pools from: the ``ModelConfig`` attributes that
    ``HybridSWAPoolConfigurator`` reads (layer ids, ``get_num_kv_heads``,
    ``get_swa_num_kv_heads``, head dims) and ``sliding_window_size`` (the model's ``w``)."""
    _check_positive("tp_size", tp_size, integer=True)
    if not model_config.is_hybrid_swa:
        raise ValueError(
            "SGLang does not run this model with hybrid SWA memory (ModelConfig.is_hybrid_swa "
            "is False): it has one KV pool and no --swa-full-tokens-ratio to plan"
        )
    swa_ids = getattr(model_config, "swa_attention_layer_ids", None)
    full_ids = getattr(model_config, "full_attention_layer_ids", None)
    if swa_ids is None or full_ids is None:
        raise ValueError(
            "SGLang's ModelConfig gives no SWA/full layer ids for this model "
            f"({', '.join(model_config.hf_config.architectures or [])}); pass "
            "--full-bytes-per-token and --swa-bytes-per-token instead"
        )
    if not swa_ids:
        raise ValueError("the config has no sliding-window layer: not a hybrid SWA model")
    window = model_config.sliding_window_size
    return ModelShape(
        full_layers=len(full_ids),
        swa_layers=len(swa_ids),
        kv_heads=int(model_config.get_num_kv_heads(tp_size)),
        head_dim=int(model_config.head_dim),
        v_head_dim=int(model_config.v_head_dim),
        swa_kv_heads=int(model_config.get_swa_num_kv_heads(tp_size)),
        swa_head_dim=int(model_config.swa_head_dim),
        swa_v_head_dim=int(model_config.swa_v_head_dim),
        sliding_window=int(window) if window is not None else None,
        reader="ModelConfig",
    )


def _text_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    text = config.get("text_config")
    return text if isinstance(text, Mapping) else config


def _first(cfg: Mapping[str, Any], *keys: str) -> Any:
    for key in keys:
        if cfg.get(key) is not None:
            return cfg[key]
    return None


def model_shape_from_hf_config(config: Mapping[str, Any], *, tp_size: int = 1) -> ModelShape:
    """The shape from an HF ``config.json`` dict, without SGLang: :func:`read_model_shape`'s
    fallback where ``ModelConfig`` cannot load the config. Reads what ``ModelConfig`` reads, for
    the hybrid layouts it knows:

    * the text config (``text_config`` when present, else the top level);
    * layer kinds from ``layer_types`` (``"sliding_attention"`` / ``"full_attention"``),
      else ``hybrid_layer_pattern`` (1 = SWA, 0 = full), else Llama-4's every-4th-layer;
    * full layers: ``num_key_value_heads`` x (``head_dim`` + ``v_head_dim``); SWA layers:
      ``swa_num_key_value_heads`` / ``swa_head_dim`` / ``swa_v_head_dim`` when set, else the
      full-layer values. Gemma-4 names it the other way round (base = sliding,
      ``global_*`` = full) and SGLang swaps them; so does this function;
    * ``head_dim`` defaults to ``hidden_size // num_attention_heads``.
    """
    if not isinstance(config, Mapping):
        raise ValueError("model config must be a JSON object (the contents of config.json)")
    _check_positive("tp_size", tp_size, integer=True)
    cfg = dict(_text_config(config))
    model_type = str(config.get("model_type") or cfg.get("model_type") or "")
    architectures = list(config.get("architectures") or [])

    if model_type.startswith("gemma4"):
        # Base attributes describe the SWA layers, global_* the full-attention layers.
        cfg.setdefault("swa_head_dim", cfg.get("head_dim"))
        cfg.setdefault("swa_v_head_dim", cfg.get("head_dim"))
        cfg.setdefault("swa_num_key_value_heads", cfg.get("num_key_value_heads"))
        if cfg.get("global_head_dim") is not None:
            cfg["head_dim"] = cfg["global_head_dim"]
            cfg.pop("v_head_dim", None)
        if cfg.get("num_global_key_value_heads") is not None:
            cfg["num_key_value_heads"] = cfg["num_global_key_value_heads"]

    n_layers = cfg.get("num_hidden_layers")
    layer_types = cfg.get("layer_types")
    pattern = cfg.get("hybrid_layer_pattern")
    if layer_types:
        if n_layers is not None:
            layer_types = list(layer_types)[: int(n_layers)]
        n_swa = sum(1 for t in layer_types if t == "sliding_attention")
        n_full = sum(1 for t in layer_types if t == "full_attention")
    elif pattern is not None:
        if n_layers is not None:
            pattern = list(pattern)[: int(n_layers)]
        n_swa = sum(1 for t in pattern if t == 1)
        n_full = sum(1 for t in pattern if t == 0)
    elif "Llama4ForConditionalGeneration" in architectures and n_layers:
        n_full = int(n_layers) // 4
        n_swa = int(n_layers) - n_full
    else:
        raise ValueError(
            "cannot tell which layers use sliding-window attention: the config has neither "
            "'layer_types' nor 'hybrid_layer_pattern'; pass --full-bytes-per-token and "
            "--swa-bytes-per-token instead"
        )
    if n_swa == 0:
        raise ValueError("the config has no sliding-window layer: not a hybrid SWA model")

    num_heads = cfg.get("num_attention_heads")
    head_dim = cfg.get("head_dim")
    if head_dim is None:
        if not cfg.get("hidden_size") or not num_heads:
            raise ValueError("config has no head_dim and no hidden_size/num_attention_heads")
        head_dim = int(cfg["hidden_size"]) // int(num_heads)
    v_head_dim = cfg.get("v_head_dim") or head_dim
    kv_heads = _first(cfg, "n_head_kv", "num_kv_heads", "num_key_value_heads") or num_heads
    if kv_heads is None:
        raise ValueError("config has no num_key_value_heads (nor num_attention_heads)")
    swa_head_dim = cfg.get("swa_head_dim") or head_dim
    swa_v_head_dim = cfg.get("swa_v_head_dim") or swa_head_dim
    swa_kv_heads = cfg.get("swa_num_key_value_heads") or kv_heads
    window = _first(cfg, "sliding_window", "sliding_window_size")
    return ModelShape(
        full_layers=n_full,
        swa_layers=n_swa,
        kv_heads=kv_heads_per_rank(int(kv_heads), tp_size),
        head_dim=int(head_dim),
        v_head_dim=int(v_head_dim),
        swa_kv_heads=kv_heads_per_rank(int(swa_kv_heads), tp_size),
        swa_head_dim=int(swa_head_dim),
        swa_v_head_dim=int(swa_v_head_dim),
        sliding_window=int(window) if window is not None else None,
        reader="config.json",
    )


# What ModelConfig raises for a config it cannot load (ImportError: SGLang's runtime is not
# installed; ValueError/KeyError: transformers does not know the model; TypeError/AttributeError:
# a shape-only config without architectures).
_MODEL_CONFIG_ERRORS = (ImportError, OSError, ValueError, KeyError, TypeError, AttributeError)


@contextlib.contextmanager
def _quiet_sglang() -> Iterator[None]:
    """Silence import-time warnings and ModelConfig's log lines (e.g. no generation_config.json)."""
    loggers = [logging.getLogger(name) for name in ("sglang", "transformers")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def _load_model_config(model_dir: str) -> Any:
    with _quiet_sglang():
        from sglang.srt.configs.model_config import ModelConfig

        return ModelConfig(model_path=model_dir, trust_remote_code=False)


def read_model_shape(
    path: str, *, tp_size: int = 1, config: Optional[Mapping[str, Any]] = None
) -> ModelShape:
    """The shape of the model at ``path``: a model directory, or the ``config.json`` in one.

    Read through SGLang's ``ModelConfig``, the object the server sizes its pools from (with
    ``trust_remote_code=False``). Only where ``ModelConfig`` cannot load the config is the file
    read directly (:func:`model_shape_from_hf_config`): a file not named ``config.json``, a
    config without ``model_type`` or ``architectures``, a model type this transformers does not
    know, or no SGLang runtime installed. ``config`` is the file's parsed contents, if the
    caller has them.
    """
    if os.path.isdir(path):
        model_dir, config_path = path, os.path.join(path, "config.json")
    else:
        model_dir, config_path = os.path.dirname(path) or ".", path
    if os.path.basename(config_path) == "config.json":
        try:
            model_config = _load_model_config(model_dir)
        except _MODEL_CONFIG_ERRORS:
            pass
        else:
            return model_shape_from_model_config(model_config, tp_size=tp_size)
    if config is None:
        with open(config_path, encoding="utf-8") as f:
            config = json.load(f)
    return model_shape_from_hf_config(config, tp_size=tp_size)


def kv_layout_from_shape(
    shape: ModelShape, kv_dtype: str, *, draft_layers: int = 0
) -> HybridKVLayout:
    """Per-layer KV bytes of a model shape; draft layers (EAGLE/STANDALONE) cost a full layer."""
    nbytes = dtype_bytes(kv_dtype)
    return HybridKVLayout(
        full_layers=shape.full_layers,
        swa_layers=shape.swa_layers,
        full_bytes_per_layer=kv_bytes_per_layer(
            shape.kv_heads, shape.head_dim, nbytes, v_head_dim=shape.v_head_dim
        ),
        swa_bytes_per_layer=kv_bytes_per_layer(
            shape.swa_kv_heads, shape.swa_head_dim, nbytes, v_head_dim=shape.swa_v_head_dim
        ),
        draft_layers=draft_layers,
    )


def kv_layout_from_model_config(
    model_config: Any, kv_dtype: str, *, draft_layers: int = 0, tp_size: int = 1
) -> HybridKVLayout:
    """Per-layer KV bytes from SGLang's ``ModelConfig``."""
    shape = model_shape_from_model_config(model_config, tp_size=tp_size)
    return kv_layout_from_shape(shape, kv_dtype, draft_layers=draft_layers)


def kv_layout_from_hf_config(
    config: Mapping[str, Any], kv_dtype: str, *, draft_layers: int = 0, tp_size: int = 1
) -> HybridKVLayout:
    """Per-layer KV bytes from an HF ``config.json`` dict (:func:`model_shape_from_hf_config`)."""
    if not isinstance(config, Mapping):
        raise ValueError("model config must be a JSON object (the contents of config.json)")
    dtype_bytes(kv_dtype)  # an unknown dtype is reported before a bad config
    shape = model_shape_from_hf_config(config, tp_size=tp_size)
    return kv_layout_from_shape(shape, kv_dtype, draft_layers=draft_layers)


def sliding_window_from_hf_config(config: Mapping[str, Any]) -> Optional[int]:
    """The model window ``w`` (``sliding_window``) of an HF config dict, or None."""
    w = _first(_text_config(config), "sliding_window", "sliding_window_size")
    return int(w) if w is not None else None


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
