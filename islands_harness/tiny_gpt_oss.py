"""A tiny random-weight GPT-OSS (`GptOssForCausalLM`) that sglang 0.5.23 serves on CPU.

Shaped like the real checkpoints: layers alternating sliding / full from layer 0, window 128, one
attention sink per head, every layer MoE (clamped SwiGLU), YaRN RoPE and biases as in gpt-oss-20b;
tiny sizes (hidden 128, 4 query / 2 KV heads, 4 experts, top 2), fp32, unquantized (MXFP4 experts
need GPU kernels), the Laguna model's tokenizer. Sinks are rounded to bf16, the dtype sglang keeps
them in (and the real checkpoints store), so both engines hold the same values.
CLI: `python -m islands_harness.tiny_gpt_oss [--window 128] [--out DIR]` prints the path.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys

from islands_harness.tiny_model import (
    DEFAULT_CACHE,
    WEIGHT_STD,
    _build_tokenizer,
    build_dir_atomically,
    randomize_weights,
)

SINK_STD = 2.0
NUM_EXPERTS = 4
EXPERTS_PER_TOKEN = 2
# gpt-oss-20b's RoPE (config.json's rope_scaling), with its rope_theta and context length.
ROPE_PARAMETERS = {
    "rope_type": "yarn",
    "rope_theta": 150000.0,
    "factor": 32.0,
    "beta_fast": 32.0,
    "beta_slow": 1.0,
    "truncate": False,
    "original_max_position_embeddings": 4096,
}
MAX_POSITION_EMBEDDINGS = 131072


def default_model_dir(*, window: int = 128, layers: int = 4, hidden: int = 128, vocab: int = 1024,
                      seed: int = 0) -> pathlib.Path:
    """`<repo>/.cache/models/tiny-gpt-oss-w{window}-l{layers}-h{hidden}-v{vocab}-s{seed}`."""
    return DEFAULT_CACHE / f"tiny-gpt-oss-w{window}-l{layers}-h{hidden}-v{vocab}-s{seed}"


def layer_types_for(layers: int) -> list[str]:
    """GPT-OSS's own pattern: sliding on even layers, full on odd ones (S F S F ...)."""
    return ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(layers)]


def _build_weights(out_dir: pathlib.Path, fast, *, window: int, layers: int, hidden: int,
                   seed: int) -> dict:
    import torch
    from transformers import GptOssConfig, GptOssForCausalLM

    real_vocab = len(fast)
    padded_vocab = ((real_vocab + 63) // 64) * 64
    heads, kv_heads = 4, 2
    if hidden % heads:
        raise ValueError(f"hidden={hidden} must be a multiple of {heads} heads")
    cfg = GptOssConfig(
        vocab_size=padded_vocab,
        hidden_size=hidden,
        intermediate_size=hidden,  # the real models' expert width equals hidden (2880)
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=hidden // heads,
        sliding_window=window,
        layer_types=layer_types_for(layers),
        num_local_experts=NUM_EXPERTS,
        num_experts_per_tok=EXPERTS_PER_TOKEN,
        max_position_embeddings=MAX_POSITION_EMBEDDINGS,
        rope_parameters=dict(ROPE_PARAMETERS),
        attention_bias=True,
        tie_word_embeddings=False,
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id,
    )
    cfg.architectures = ["GptOssForCausalLM"]
    torch.manual_seed(seed)
    model = GptOssForCausalLM(cfg).to(torch.float32).eval()
    randomize_weights(model, seed, WEIGHT_STD)
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for i, layer in enumerate(model.model.layers):
            sinks = layer.self_attn.sinks
            draw = torch.randn(sinks.shape, generator=gen, dtype=torch.float32) * SINK_STD
            sinks.copy_(draw.to(torch.bfloat16).to(torch.float32))
    model.save_pretrained(str(out_dir), safe_serialization=True)
    return {"real_vocab": real_vocab, "padded_vocab": padded_vocab,
            "layer_types": cfg.layer_types}


def build_tiny_gpt_oss(out_dir: str | os.PathLike | None = None, *, window: int = 128,
                       layers: int = 4, hidden: int = 128, vocab: int = 1024,
                       seed: int = 0) -> pathlib.Path:
    """Build (or reuse) the tiny GPT-OSS checkpoint and return its directory."""
    if layers < 2:
        raise ValueError("layers must be >= 2 to mix sliding and full attention")
    out = pathlib.Path(out_dir) if out_dir is not None else default_model_dir(
        window=window, layers=layers, hidden=hidden, vocab=vocab, seed=seed)
    def write(tmp: pathlib.Path) -> dict:
        fast = _build_tokenizer(tmp, vocab)
        info = _build_weights(tmp, fast, window=window, layers=layers, hidden=hidden, seed=seed)
        return {"architecture": "GptOssForCausalLM", "window": window, "layers": layers,
                "hidden": hidden, "vocab": vocab, "seed": seed, "weight_std": WEIGHT_STD,
                "sink_std": SINK_STD, "experts": NUM_EXPERTS,
                "experts_per_token": EXPERTS_PER_TOKEN, **info}

    return build_dir_atomically(out, write)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m islands_harness.tiny_gpt_oss",
                                 description="Build (or reuse) the tiny GPT-OSS model and print "
                                             "its directory.")
    ap.add_argument("--window", type=int, default=128, help="HF sliding_window (default 128)")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=1024, help="BPE vocabulary target")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="output directory (default: under .cache/models)")
    a = ap.parse_args(argv)
    print(build_tiny_gpt_oss(a.out, window=a.window, layers=a.layers, hidden=a.hidden,
                             vocab=a.vocab, seed=a.seed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
