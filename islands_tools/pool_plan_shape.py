"""Model shapes for the capacity planner: what the KV pools of a hybrid-SWA model depend on.

:func:`read_model_shape` reads a model directory (or its ``config.json``) through SGLang's
``ModelConfig``, the object the server sizes its pools from; only where ``ModelConfig`` cannot load
the config does :func:`model_shape_from_hf_config` read the file itself. ``kv_layout_from_*`` turn
a shape into per-layer KV bytes (``pool_plan_bytes.HybridKVLayout``). Head counts are per GPU at
one attention-TP size; dims are per head, in elements.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import warnings
from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Optional

from islands_tools.pool_plan_bytes import (
    HybridKVLayout,
    _check_positive,
    dtype_bytes,
    kv_bytes_per_layer,
    kv_heads_per_rank,
)


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
