"""Tiny random-weight Gemma 4 checkpoints in a published checkpoint's layout, served on CPU by
sglang 0.5.23 (stock and islands) and checked against transformers' own Gemma 4.

`build_tiny_gemma4(variant)` writes config.json, model.safetensors and the harness's byte-level
BPE tokenizer (`tiny_model`) and returns the directory; offline and deterministic.

Layout: as google/gemma-4-* publish it (model_type `gemma4`, `Gemma4ForConditionalGeneration`, a
`text_config` whose base fields are the sliding layers' shape and whose full-attention layers
override it, a vision tower), so sglang derives its SWA shapes itself. One key is added:
`language_model_only: true`, the checkpoint's text-only declaration: without it sglang loads the
multimodal processor (image, video and audio preprocessors no tiny checkpoint ships), and its
`--language-model-only` flag refuses Gemma 4.

Shape (both variants): the seed's 5 : 1 pattern in 6 layers, window 32, sliding layers head_dim
32 x 4 KV heads, the full layer head_dim 64 x 2 KV heads (26B-A4B's count: TP 2 divides it; sglang
pads unaligned CPU TP heads, and that path fails on Gemma 4's per-layer config) with V = K
(`attention_k_eq_v`),
proportional RoPE there, logit softcap 30, tied embeddings, fp32. `dense`: per-layer inputs (the
E2B/E4B feature). `moe`: 26B-A4B's block, a dense MLP beside 4 experts (top 2) in every layer, no
per-layer inputs (26B-A4B has none). Matrices N(0, 0.08^2), the embedding N(0, 0.04^2): with the
head tied to it, a larger one makes greedy decoding repeat the last token.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys

from islands_harness.tiny_model import (DEFAULT_CACHE, WEIGHT_STD, _build_tokenizer,
                                        build_dir_atomically, randomize_weights)

VARIANTS = ("dense", "moe")
EMBED_STD = 0.04
SERVER_ARGS = ("--attention-backend", "intel_amx")
"""Gemma 4 accepts no `torch_native` by name (model_hook's assert); `intel_amx` passes it and,
on a CPU without AMX, sglang falls back to torch_native itself."""

ROPE = {
    "full_attention": {"rope_type": "proportional", "rope_theta": 1_000_000.0,
                       "partial_rotary_factor": 0.25},
    "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
}


def text_config(variant: str, *, window: int, vocab: int, special: dict) -> dict:
    """The tiny `text_config` fields of `variant` (Gemma 4's convention: base = sliding)."""
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    text = dict(
        vocab_size=vocab, vocab_size_per_layer_input=vocab, hidden_size=128,
        intermediate_size=256, num_hidden_layers=6,
        layer_types=["sliding_attention"] * 5 + ["full_attention"],
        num_attention_heads=4, num_key_value_heads=4, head_dim=32,
        num_global_key_value_heads=2, global_head_dim=64, attention_k_eq_v=True,
        sliding_window=window, final_logit_softcapping=30.0, max_position_embeddings=4096,
        rope_parameters=ROPE, hidden_activation="gelu_pytorch_tanh", tie_word_embeddings=True,
        use_bidirectional_attention="vision", num_kv_shared_layers=0, **special)
    if variant == "moe":
        text.update(enable_moe_block=True, num_experts=4, top_k_experts=2,
                    moe_intermediate_size=32, hidden_size_per_layer_input=0)
    else:
        text.update(enable_moe_block=False, hidden_size_per_layer_input=16)
    return text


VISION = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
              num_key_value_heads=2, head_dim=16, patch_size=16, position_embedding_size=64)
"""A one-layer vision tower: the published layout has one; no request here uses it."""


def shape_digest(variant: str, window: int, vocab: int) -> str:
    """8 hex digits over everything that shapes the checkpoint, so a changed shape builds anew."""
    import hashlib
    import json

    spec = [text_config(variant, window=window, vocab=vocab, special={}), VISION, WEIGHT_STD,
            EMBED_STD]
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:8]


def default_model_dir(variant: str = "dense", *, window: int = 32, vocab: int = 1024,
                      seed: int = 0) -> pathlib.Path:
    """`<repo>/.cache/models/tiny-gemma4-{variant}-w{window}-s{seed}-{shape digest}`."""
    return DEFAULT_CACHE / (f"tiny-gemma4-{variant}-w{window}-s{seed}-"
                            f"{shape_digest(variant, window, vocab)}")


def _write(tmp: pathlib.Path, variant: str, window: int, vocab: int, seed: int) -> dict:
    import torch
    from transformers import Gemma4Config, Gemma4ForConditionalGeneration

    fast = _build_tokenizer(tmp, vocab)
    padded = ((len(fast) + 63) // 64) * 64
    special = {"pad_token_id": fast.pad_token_id, "bos_token_id": fast.bos_token_id,
               "eos_token_id": fast.eos_token_id}
    cfg = Gemma4Config(text_config=text_config(variant, window=window, vocab=padded,
                                               special=special),
                       vision_config=dict(VISION), audio_config=None, **special)
    cfg.architectures = ["Gemma4ForConditionalGeneration"]
    cfg.language_model_only = True
    torch.manual_seed(seed)
    model = Gemma4ForConditionalGeneration(cfg).to(torch.float32).eval()
    randomize_weights(model, seed, WEIGHT_STD)
    with torch.no_grad():
        model.get_input_embeddings().weight.mul_(EMBED_STD / WEIGHT_STD)
    model.save_pretrained(str(tmp), safe_serialization=True)
    return {"variant": variant, "window": window, "vocab": vocab, "seed": seed,
            "weight_std": WEIGHT_STD, "embed_std": EMBED_STD, "real_vocab": len(fast),
            "padded_vocab": padded}


def build_tiny_gemma4(variant: str = "dense", out_dir: str | os.PathLike | None = None, *,
                      window: int = 32, vocab: int = 1024, seed: int = 0) -> pathlib.Path:
    """Build (or reuse) the tiny Gemma 4 checkpoint of `variant` and return its directory.

    `window` is Gemma 4's `sliding_window` in tokens; `vocab` the BPE training target (the
    embedding is padded to a multiple of 64)."""
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    out = pathlib.Path(out_dir) if out_dir is not None else default_model_dir(
        variant, window=window, vocab=vocab, seed=seed)
    return build_dir_atomically(out, lambda tmp: _write(tmp, variant, window, vocab, seed))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m islands_harness.tiny_gemma4",
        description="Build (or reuse) a tiny random-weight Gemma 4 checkpoint in the published "
                    "layout and print its directory. Serve it on sglang 0.5.23 with "
                    + " ".join(SERVER_ARGS) + ".")
    ap.add_argument("--variant", choices=VARIANTS, default="dense",
                    help="dense: per-layer inputs; moe: 26B-A4B's dense MLP + experts block")
    ap.add_argument("--window", type=int, default=32, help="sliding_window in tokens (default 32)")
    ap.add_argument("--vocab", type=int, default=1024, help="BPE vocabulary target")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="output directory (default: under .cache/models)")
    a = ap.parse_args(argv)
    print(build_tiny_gemma4(a.variant, a.out, window=a.window, vocab=a.vocab, seed=a.seed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
