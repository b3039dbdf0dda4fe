#!/usr/bin/env python3
"""Tiny random-weight hybrid sliding-window models for the GPU equality gate, built offline.

    python scripts/gpu_tiny_models.py --arch gemma4 --out DIR [--window 128]
    python scripts/gpu_tiny_models.py --arch gpt-oss --out DIR

The GPU machine has no network, so the checkpoints are built on the spot with transformers'
own config and model classes and random weights on every matrix, N(0, std^2) with the std per
architecture chosen so that greedy decoding does not collapse into one repeated token (checked
with transformers on CPU: Gemma 4 at 0.08 repeats one token from the first step, its scaled
embeddings make the logits too peaky; 0.02 gives 20 distinct tokens in 24; GPT-OSS is diverse
at 0.08, as islands_harness.tiny_model uses).
The tokenizer is the tiny CPU model's byte-level BPE (islands_harness.tiny_model), copied in.

- ``gemma4``: ``Gemma4TextConfig`` / ``Gemma4ForCausalLM`` (model_type ``gemma4_text``), the
  seed's family. SGLang 0.5.15.post1 serves it as ``Gemma4ForCausalLM`` (models/gemma4_causal.py),
  a hybrid-SWA architecture, and accepts only the ``triton`` attention backend for it on Hopper
  (``trtllm_mha`` needs SM100). Shape: 6 layers, 5 sliding + 1 full (Gemma 4's 5:1 pattern),
  hidden 256, 4 query / 2 KV heads. ``head_dim == global_head_dim`` (64): SGLang swaps Gemma 4's
  head-dim convention (base = sliding, ``global_*`` = full) only for ``model_type == "gemma4"``
  (the multimodal wrapper), so a ``gemma4_text`` checkpoint with different sliding and global head
  dims would be read with the wrong one. No per-layer embeddings (``hidden_size_per_layer_input
  = 0``), no MoE, no KV sharing, no k_eq_v: the plain 26B-A4B-style text stack, scaled down.
- ``gpt-oss``: ``GptOssConfig`` / ``GptOssForCausalLM``, 4 layers alternating sliding / full,
  4 experts (top 2), attention sinks, unquantized weights (SGLang's fa3 backend on Hopper).

Both use ``sliding_window`` = ``--window`` (HF's inclusive window; SGLang's window_left is one
less for both architectures).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import shutil
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

WEIGHT_STD = {"gemma4": 0.02, "gpt-oss": 0.08}
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                   "chat_template.jinja")
MARKER = ".gpu_tiny_model.json"


def _tokenizer_source() -> tuple[pathlib.Path, dict]:
    from islands_harness.tiny_model import build_tiny_model

    src = build_tiny_model(window=32)
    meta = json.loads((src / ".tiny_model_complete.json").read_text())
    return src, meta


def gemma4_config(vocab: int, window: int, special: dict):
    from transformers import Gemma4TextConfig

    layers = 6
    cfg = Gemma4TextConfig(
        vocab_size=vocab,
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        global_head_dim=64,
        num_global_key_value_heads=None,
        max_position_embeddings=32768,
        sliding_window=window,
        layer_types=["sliding_attention"] * (layers - 1) + ["full_attention"],
        hidden_size_per_layer_input=0,
        vocab_size_per_layer_input=vocab,
        num_kv_shared_layers=0,
        attention_k_eq_v=False,
        enable_moe_block=False,
        final_logit_softcapping=30.0,
        tie_word_embeddings=True,
        **special,
    )
    cfg.architectures = ["Gemma4ForCausalLM"]
    # SGLang's SWA KV pool reads hf_text_config.swa_num_key_value_heads for Gemma 4 without a
    # default (model_runner_kv_cache_mixin); transformers 5.12's config has no such field, so the
    # first H200 boot stopped there. The model itself falls back to num_key_value_heads: same value.
    cfg.swa_num_key_value_heads = cfg.num_key_value_heads
    return cfg


def gpt_oss_config(vocab: int, window: int, special: dict):
    from transformers import GptOssConfig

    layers = 4
    cfg = GptOssConfig(
        vocab_size=vocab,
        hidden_size=256,
        intermediate_size=256,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        num_local_experts=4,
        num_experts_per_tok=2,
        sliding_window=window,
        layer_types=["sliding_attention" if i % 2 == 0 else "full_attention"
                     for i in range(layers)],
        tie_word_embeddings=False,
        **special,
    )
    cfg.architectures = ["GptOssForCausalLM"]
    return cfg


def build(arch: str, out: pathlib.Path, window: int = 128, seed: int = 0) -> pathlib.Path:
    """Build (or reuse, when the marker matches) the tiny `arch` checkpoint in `out`."""
    import torch

    out = out.resolve()
    want = {"arch": arch, "window": window, "seed": seed, "weight_std": WEIGHT_STD[arch]}
    if (out / MARKER).is_file() and json.loads((out / MARKER).read_text()).get("want") == want:
        return out
    src, meta = _tokenizer_source()
    vocab = ((meta["real_vocab"] + 63) // 64) * 64
    special = {"bos_token_id": 2, "eos_token_id": 3, "pad_token_id": 0}  # tiny_model's ids
    if arch == "gemma4":
        from transformers import Gemma4ForCausalLM as cls

        cfg = gemma4_config(vocab, window, special)
    elif arch == "gpt-oss":
        from transformers import GptOssForCausalLM as cls

        cfg = gpt_oss_config(vocab, window, special)
    else:
        raise ValueError(f"unknown arch {arch!r}")
    torch.manual_seed(seed)
    model = cls(cfg).to(torch.float32).eval()
    from islands_harness.tiny_model import randomize_weights

    randomize_weights(model, seed, WEIGHT_STD[arch])
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    model.save_pretrained(str(out), safe_serialization=True)
    for f in TOKENIZER_FILES:
        if (src / f).is_file():
            shutil.copy2(src / f, out / f)
    # The gate reads the real vocabulary from here (token ids it may draw).
    (out / ".tiny_model_complete.json").write_text(json.dumps(
        {"real_vocab": meta["real_vocab"], "padded_vocab": vocab, "window": window,
         "arch": arch}, indent=1) + "\n")
    (out / MARKER).write_text(json.dumps({"want": want}) + "\n")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="scripts/gpu_tiny_models.py",
                                 description="Build a tiny random-weight hybrid-SWA checkpoint "
                                             "(Gemma 4 text or GPT-OSS) offline; print its path.")
    ap.add_argument("--arch", choices=("gemma4", "gpt-oss"), required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--window", type=int, default=128, help="HF sliding_window (default 128)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--check", action="store_true",
                    help="also run 8 greedy tokens with transformers (CPU) as a smoke test")
    a = ap.parse_args(argv)
    path = build(a.arch, pathlib.Path(a.out), a.window, a.seed)
    if a.check:
        from islands_harness.hf_oracle import greedy_decode_one

        print("greedy:", greedy_decode_one(path, list(range(4, 4 + 3 * a.window)), 8))
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
