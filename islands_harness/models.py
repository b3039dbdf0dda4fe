"""The tiny models the harness serves, by name: how to build each, the server arguments it needs
and the targets that serve it. One module per architecture builds the checkpoint
(`tiny_model`: Laguna, `tiny_gemma4`: Gemma 4, `tiny_gpt_oss`: GPT-OSS); this table is the only
place that names them.

    from islands_harness.models import MODELS, model_names
    m = MODELS["gemma4"]
    path = m.build()                                   # the checkpoint directory
    SglangServer(path, [*m.server_args, ...], python=...)
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
from typing import Callable

from islands_harness import tiny_gemma4
from islands_harness.tiny_gpt_oss import build_tiny_gpt_oss
from islands_harness.tiny_model import MARKER, build_tiny_model

TARGETS = ("0.5.15.post1", "0.5.23")


@dataclasses.dataclass(frozen=True)
class TinyModel:
    """A tiny checkpoint: `build(window=...)` returns its directory; `server_args` go after the
    harness's BASE_ARGS (later arguments win); `targets` are the sglang releases that serve it."""

    name: str
    description: str
    build_fn: Callable[..., pathlib.Path]
    server_args: tuple[str, ...]
    targets: tuple[str, ...]

    def build(self, window: int = 32) -> pathlib.Path:
        return self.build_fn(window=window)

    def serves_on(self, target: str) -> bool:
        return target in self.targets


MODELS: dict[str, TinyModel] = {
    "laguna": TinyModel(
        "laguna", "LagunaForCausalLM, 4 layers S F S F, dense", build_tiny_model, (), TARGETS),
    "gemma4": TinyModel(
        "gemma4", "Gemma 4 (published layout), 5 sliding + 1 full, per-layer inputs, dense",
        lambda window: tiny_gemma4.build_tiny_gemma4("dense", window=window),
        tiny_gemma4.SERVER_ARGS, ("0.5.23",)),
    "gemma4-moe": TinyModel(
        "gemma4-moe", "Gemma 4 (published layout), 5 sliding + 1 full, 26B-A4B's MoE block",
        lambda window: tiny_gemma4.build_tiny_gemma4("moe", window=window),
        tiny_gemma4.SERVER_ARGS, ("0.5.23",)),
    "gpt-oss": TinyModel(
        "gpt-oss", "GptOssForCausalLM, 4 layers S F S F, window 128, sinks, MoE every layer",
        lambda window: build_tiny_gpt_oss(window=window),
        ("--attention-backend", "intel_amx", "--context-length", "2048"), ("0.5.23",)),
}


def model_names() -> list[str]:
    return list(MODELS)


def get_model(name: str) -> TinyModel:
    """The model called `name`; a clear error naming the choices otherwise."""
    try:
        return MODELS[name]
    except KeyError:
        raise ValueError(f"unknown model {name!r}; choose one of {', '.join(MODELS)}") from None


def real_vocab(model_dir: str | pathlib.Path) -> int:
    """The tokenizer's vocabulary (ids below it are real tokens), from the build's marker."""
    return int(json.loads((pathlib.Path(model_dir) / MARKER).read_text())["real_vocab"])
