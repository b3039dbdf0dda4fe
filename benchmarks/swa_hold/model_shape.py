"""The model shapes the 0.5.23 hold benchmark builds its pools with (``--model-shape``): which
layers are sliding and which full, their KV heads and head dims, and the KV dtype.

The tree counts the hold in tokens; the pools turn a token into bytes. One token of the SWA pool
costs, over the sliding layers, ``kv_heads x (head_dim + v_head_dim) x dtype bytes`` each; one of
the full pool the same over the full-attention layers. For Gemma 4 26B-A4B with fp8 KV:

    SWA:  25 layers x 8 heads x (256 + 256) x 1 B = 102,400 B per token
    full:  5 layers x 2 heads x (512 + 512) x 1 B =  10,240 B per token

so a hold of 1,024 SWA tokens per running request is 100 MiB of SWA KV, and 16,384 tokens (one
prefill chunk) 1.56 GiB. The bytes the benchmark reports are read off the pools it built
(``main_driver.pool_bytes``), and checked there against ``ModelShape.bytes_per_token``.

The table:

- ``toy``: the pools the benchmark always had (one SWA layer, one full layer, 1 KV head of dim
  8, float32): the default, so every earlier result's pools are unchanged;
- ``gemma4-26b-a4b``: the seed's model, every field read from ``scripts/gpu_seed_model.py``'s
  ``PUBLISHED_TEXT`` through ``sglang_form`` (the config SGLang parses: base fields = full
  attention, ``swa_*`` = sliding), the same source as the full-size dummy-weight checkpoint of
  the GPU bench. Its full layers have ``attention_k_eq_v`` (V = K); SGLang 0.5.23's KV pool has
  no such notion (``mem_cache`` never reads it) and keeps a V buffer for them, so the full pool
  is built, and counted, as SGLang builds it. KV dtype ``float8_e4m3fn``: the seed deployment's
  fp8-e4m3 KV (``--kv-cache-dtype fp8_e4m3``, ``benchmarks/seed_shape/setup.py``'s h200
  profile); the CPU pool stores it as uint8, one byte per element, as on a GPU.
"""

from __future__ import annotations

import dataclasses
import pathlib
import sys
from typing import Callable, Dict, Optional, Tuple

GIB = 1 << 30

_SCRIPTS = pathlib.Path(__file__).resolve().parents[2] / "scripts"

_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "float8_e4m3fn": 1,
                "float8_e5m2": 1}


@dataclasses.dataclass(frozen=True)
class ModelShape:
    """The pools' geometry: layer ids of each kind, and per kind KV heads and K / V head dims.
    ``window`` is the model's sliding window as its config states it (for Gemma 4 also the
    cache's ``w``: the runner passes ``window - 1`` as the tree's ``sliding_window_size``);
    ``None`` where there is no model."""

    name: str
    source: str
    swa_layers: Tuple[int, ...]
    full_layers: Tuple[int, ...]
    swa_kv_heads: int
    swa_head_dim: int
    swa_v_head_dim: int
    full_kv_heads: int
    full_head_dim: int
    full_v_head_dim: int
    kv_dtype: str  # a torch dtype name
    window: Optional[int] = None

    @property
    def dtype_bytes(self) -> int:
        return _DTYPE_BYTES[self.kv_dtype]

    def bytes_per_token(self) -> Tuple[int, int]:
        """``(full, swa)``: bytes of KV one token slot takes in each pool, all layers."""
        b = self.dtype_bytes
        full = len(self.full_layers) * self.full_kv_heads * (self.full_head_dim
                                                              + self.full_v_head_dim) * b
        swa = len(self.swa_layers) * self.swa_kv_heads * (self.swa_head_dim
                                                          + self.swa_v_head_dim) * b
        return full, swa

    def pool_bytes(self, full_pool: int, swa_pool: int, page: int) -> Tuple[int, int]:
        """``(full, swa)`` bytes the pools of ``full_pool`` / ``swa_pool`` token slots allocate
        (each pool keeps ``page`` slots more: slot 0's page, never handed out)."""
        full_bpt, swa_bpt = self.bytes_per_token()
        return (full_pool + page) * full_bpt, (swa_pool + page) * swa_bpt

    def to_json(self) -> dict:
        out = dataclasses.asdict(self)
        out["swa_layers"], out["full_layers"] = list(self.swa_layers), list(self.full_layers)
        return out


def toy() -> ModelShape:
    return ModelShape(
        name="toy", source="the benchmark's own pools (no model): one SWA and one full layer",
        swa_layers=(0,), full_layers=(1,), swa_kv_heads=1, swa_head_dim=8, swa_v_head_dim=8,
        full_kv_heads=1, full_head_dim=8, full_v_head_dim=8, kv_dtype="float32")


def seed_text_config() -> dict:
    """Gemma 4 26B-A4B's text config in SGLang's convention, from ``scripts/gpu_seed_model.py``."""
    if str(_SCRIPTS) not in sys.path:
        sys.path.insert(0, str(_SCRIPTS))
    import gpu_seed_model

    return gpu_seed_model.sglang_form(gpu_seed_model.PUBLISHED_TEXT)


def gemma4_26b_a4b() -> ModelShape:
    t = seed_text_config()
    types = t["layer_types"]
    return ModelShape(
        name="gemma4-26b-a4b",
        source="scripts/gpu_seed_model.py: sglang_form(PUBLISHED_TEXT); KV dtype: the seed "
               "deployment's fp8_e4m3",
        swa_layers=tuple(i for i, k in enumerate(types) if k == "sliding_attention"),
        full_layers=tuple(i for i, k in enumerate(types) if k == "full_attention"),
        swa_kv_heads=t["swa_num_key_value_heads"], swa_head_dim=t["swa_head_dim"],
        swa_v_head_dim=t["swa_v_head_dim"],
        full_kv_heads=t["num_key_value_heads"], full_head_dim=t["head_dim"],
        full_v_head_dim=t["v_head_dim"],
        kv_dtype="float8_e4m3fn", window=t["sliding_window"])


MODEL_SHAPES: Dict[str, Callable[[], ModelShape]] = {
    "toy": toy,
    "gemma4-26b-a4b": gemma4_26b_a4b,
}


def model_shape(name: str) -> ModelShape:
    if name not in MODEL_SHAPES:
        raise SystemExit(f"unknown model shape {name!r}; choose from {', '.join(MODEL_SHAPES)}")
    return MODEL_SHAPES[name]()


def tight_pool(n_requests: int, prompt: int, decode_tokens: int, page: int) -> int:
    """The token slots the 0.5.23 driver can allocate at most: every request's prompt and decode
    tokens, each request's last page partly filled (``n x (prompt + decode + p)``, page-rounded).
    The SWA pool needs no more (a live SWA slot always has its full slot)."""
    need = n_requests * (prompt + decode_tokens + page)
    return -(-need // page) * page


def mem_available_bytes() -> Optional[int]:
    """``MemAvailable`` of ``/proc/meminfo`` (None where there is none)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None
