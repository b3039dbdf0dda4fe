#!/usr/bin/env python3
"""Config-only model directories of the seed's model, Gemma 4 26B-A4B (text), for dummy weights.

    python scripts/gpu_seed_model.py --size full --out DIR      # the 26B-A4B text stack
    python scripts/gpu_seed_model.py --size tiny --out DIR      # the same config, scaled down
    python scripts/gpu_seed_model.py --size full --published --out DIR

SGLang's ``--load-format dummy`` builds the model from ``config.json`` alone and fills every
weight with random values; with ``--skip-tokenizer-init`` and token-id prompts nothing else is
read. Throughput, admission and pool sizes do not depend on the weights' values, so a directory
holding only ``config.json`` serves the seed's capacity benchmark on a GPU with no network
(``benchmarks/seed_shape.py``). Nothing is downloaded: the file is written by transformers'
``Gemma4TextConfig`` (so transformers can parse it) from the fields below.

Where each field of the full size comes from
--------------------------------------------
[C] transformers' own Gemma 4 conversion script, the ``gemma-4-26b-a4b`` variant
    (``src/transformers/models/gemma4/convert_gemma4_weights.py``, ``_VARIANTS``, huggingface/
    transformers commit 0f3f0632a38798af2adf264adc752130ecc5fa66): hidden_size 2816,
    hidden_size_per_layer_input 0, intermediate_size 2112 ("Shared expert FFW"),
    num_hidden_layers 30, layer_types = 5 x (5 sliding_attention + 1 full_attention),
    num_attention_heads 16, num_key_value_heads 8, num_global_key_value_heads 2,
    attention_k_eq_v true, use_bidirectional_attention "vision", num_kv_shared_layers 0,
    enable_moe_block true, num_experts 128, moe_intermediate_size 704, top_k_experts 8,
    sliding_window 1024, final_logit_softcapping 30.0, max_position_embeddings 262144,
    rope_parameters {full_attention: proportional, theta 1e6, partial_rotary_factor 0.25;
    sliding_attention: default, theta 1e4}.
[D] fields that variant leaves at ``Gemma4TextConfig``'s defaults (transformers 5.12.1, the
    version installed here, configuration_gemma4.py): vocab_size 262144, head_dim 256,
    global_head_dim 512, rms_norm_eps 1e-6, hidden_activation gelu_pytorch_tanh,
    attention_bias false, use_double_wide_mlp false, tie_word_embeddings true, pad/eos/bos
    token ids 0/1/2.
[H] the published checkpoint's ``config.json`` (google/gemma-4-26B-A4B: ``Gemma4ForConditional
    Generation``, model_type ``gemma4``, these fields under ``text_config``), read here only through
    public copies, as cross-checks: a Hugging Face copy of that layout
    (huggingface.co/LetheanNetwork/lemmy-pt, config.json: hidden_size 2816, intermediate_size
    2112, enable_moe_block true, head_dim 256, global_head_dim 512, attention_k_eq_v true,
    hidden_size_per_layer_input 0, final_logit_softcapping 30.0, the 5:1 layer pattern), and the
    26B config fixtures in the tests of independent Gemma 4 ports (a Go/MLX one and a Rust one:
    num_attention_heads 16, num_key_value_heads 8, num_global_key_value_heads 2, num_experts 128,
    top_k_experts 8, moe_intermediate_size 704, sliding_window 1024, vocab_size 262144, rope
    theta 1e6 / 1e4, partial_rotary_factor 0.25). They agree with [C] and [D] on every field
    but one: the Go fixture has max_position_embeddings 131072 where [C] has 262144 (the model
    card's 256K context); [C] is used. dtype bfloat16 is the published checkpoint's.

Why the file is written in SGLang's head-dim convention
-------------------------------------------------------
Gemma 4 names the sliding layers' shape with the base fields (head_dim 256, 8 KV heads) and the
full-attention layers' with ``global_*`` (512, 2 KV heads). SGLang 0.5.15.post1 expects the
opposite (base = full attention, ``swa_*`` = sliding) and swaps them while parsing the config,
but only for model_type ``gemma4`` (the multimodal wrapper; ``utils/hf_transformers/config.py``).
The published wrapper is served by ``Gemma4ForConditionalGeneration``, which loads a vision tower
and a multimodal processor (tokenizer and image processor files) even with
``--skip-tokenizer-init``; the text-only ``Gemma4ForCausalLM`` (model_type ``gemma4_text``) needs
neither, and is not swapped. So the full-size file holds the published text_config AFTER exactly
SGLang's swap: head_dim = v_head_dim = 512 and num_key_value_heads = 2 (full attention),
swa_head_dim = swa_v_head_dim = 256 and swa_num_key_value_heads = 8 (sliding), global_* as
published. ``--published`` writes the published layout instead (model_type ``gemma4``,
Gemma 4's convention, no vision config), so a test can check through SGLang's own ``ModelConfig``
that both give the same KV shapes, layer ids and window (test/tools/test_gpu_seed_shape.py). A
transformers model built from the SGLang-form file would read head_dim as the sliding layers';
nothing here builds one (the weights are SGLang's dummy init). With dummy weights the full layers'
V projection is not tied to K (SGLang ties them when loading a checkpoint, attention_k_eq_v);
the shapes, and so the cost and the KV, are the same.

Per token of KV (fp8): full 5 layers x 2 heads x (512 + 512) B = 10,240 B; sliding 25 x 8 x
(256 + 256) B = 102,400 B (``scripts/swa_pool_plan.py --model-config DIR --kv-dtype fp8``).

The tiny size keeps the structure (gemma4_text in SGLang's convention, different sliding/full
head dims and KV heads, k_eq_v on full layers, the 5:1 pattern, proportional RoPE on full
layers) at 6 layers, hidden 128, window 64 and a 1024-token vocabulary, for CPU smoke runs of the
same bench. Two things are off in it because SGLang 0.5.15.post1 cannot run them on CPU: the MoE
block (its CPU MoE path accepts only silu experts; Gemma 4's are gelu) and the logits softcap (a
Triton kernel whose libdevice.tanh the CPU run's Triton interpreter cannot execute). Neither
changes the KV pools or admission.
"""

from __future__ import annotations

import argparse
import copy
import json
import pathlib
import shutil
import sys

MARKER = ".gpu_seed_model.json"

ROPE = {
    "full_attention": {"rope_type": "proportional", "rope_theta": 1_000_000.0,
                       "partial_rotary_factor": 0.25},
    "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
}

# The published text_config of google/gemma-4-26B-A4B, in Gemma 4's own convention (base fields =
# sliding layers, global_* = full-attention layers). [C]/[D]: see the module docstring.
PUBLISHED_TEXT = {
    "vocab_size": 262_144,                      # [D]
    "hidden_size": 2816,                        # [C]
    "hidden_size_per_layer_input": 0,           # [C]
    "vocab_size_per_layer_input": 262_144,      # [D] (unused: no per-layer input)
    "intermediate_size": 2112,                  # [C] shared-expert (dense) MLP
    "num_hidden_layers": 30,                    # [C]
    "layer_types": (["sliding_attention"] * 5 + ["full_attention"]) * 5,  # [C]
    "num_attention_heads": 16,                  # [C]
    "num_key_value_heads": 8,                   # [C] sliding layers
    "head_dim": 256,                            # [D] sliding layers
    "num_global_key_value_heads": 2,            # [C] full-attention layers
    "global_head_dim": 512,                     # [D] full-attention layers
    "attention_k_eq_v": True,                   # [C] full-attention layers: V = K
    "use_bidirectional_attention": "vision",    # [C] (vision tokens only; none here)
    "num_kv_shared_layers": 0,                  # [C]
    "use_double_wide_mlp": False,               # [D]
    "enable_moe_block": True,                   # [C]
    "num_experts": 128,                         # [C]
    "top_k_experts": 8,                         # [C]
    "moe_intermediate_size": 704,               # [C]
    "sliding_window": 1024,                     # [C]
    "final_logit_softcapping": 30.0,            # [C]
    "max_position_embeddings": 262_144,         # [C]
    "rope_parameters": ROPE,                    # [C]
    "rms_norm_eps": 1e-6,                       # [D]
    "hidden_activation": "gelu_pytorch_tanh",   # [D]
    "attention_bias": False,                    # [D]
    "tie_word_embeddings": True,                # [D]
    "pad_token_id": 0, "eos_token_id": 1, "bos_token_id": 2,  # [D]
}

# The same structure, scaled down for CPU runs (not a published model).
TINY_TEXT = dict(
    PUBLISHED_TEXT,
    vocab_size=1024,
    vocab_size_per_layer_input=1024,
    hidden_size=128,
    intermediate_size=128,
    num_hidden_layers=6,
    layer_types=["sliding_attention"] * 5 + ["full_attention"],
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=32,
    num_global_key_value_heads=1,
    global_head_dim=64,
    # SGLang 0.5.15.post1's CPU MoE path (UnquantizedFusedMoEMethod.forward_cpu) accepts only
    # silu experts; Gemma 4's are gelu, so the CPU variant runs the shared dense MLP alone (the
    # expert fields stay set, scaled: SGLang reads moe_intermediate_size either way).
    enable_moe_block=False,
    num_experts=8,
    top_k_experts=2,
    moe_intermediate_size=32,
    sliding_window=64,
    max_position_embeddings=8192,
    # The logits softcap is a Triton kernel (layers/triton_ops/softcap.py) whose libdevice.tanh
    # the CPU run's Triton interpreter cannot execute; it changes logit values, not capacity.
    final_logit_softcapping=None,
)

SIZES = {"full": PUBLISHED_TEXT, "tiny": TINY_TEXT}


def sglang_form(text: dict) -> dict:
    """A Gemma 4 text_config in SGLang 0.5.15.post1's convention: what its config parser makes
    of a model_type ``gemma4`` config (base = full attention, ``swa_*`` = sliding layers)."""
    out = copy.deepcopy(text)
    out["swa_head_dim"] = text["head_dim"]
    out["swa_v_head_dim"] = text["head_dim"]
    out["swa_num_key_value_heads"] = text["num_key_value_heads"]
    out["head_dim"] = text["global_head_dim"]
    out["v_head_dim"] = text["global_head_dim"]
    out["num_key_value_heads"] = text["num_global_key_value_heads"]
    return out


def config_dict(size: str, published: bool = False) -> dict:
    """The config.json contents for `size` (written through transformers, so every field it
    normalises is as transformers writes it)."""
    from transformers import Gemma4Config, Gemma4TextConfig

    text = copy.deepcopy(SIZES[size])
    if published:
        cfg = Gemma4Config(text_config=Gemma4TextConfig(**text).to_dict(), vision_config=None,
                           audio_config=None)
        cfg.architectures = ["Gemma4ForConditionalGeneration"]
    else:
        form = sglang_form(text)
        extra = {k: form.pop(k) for k in ("swa_head_dim", "swa_v_head_dim",
                                          "swa_num_key_value_heads", "v_head_dim")}
        cfg = Gemma4TextConfig(**form)
        for k, v in extra.items():
            setattr(cfg, k, v)
        cfg.architectures = ["Gemma4ForCausalLM"]
    cfg.dtype = "bfloat16"
    return cfg.to_dict()


def build(size: str, out: pathlib.Path, published: bool = False) -> pathlib.Path:
    """Write (or reuse, when the marker matches) the config-only directory; return its path."""
    out = pathlib.Path(out).resolve()
    want = {"size": size, "published": published, "config": config_dict(size, published)}
    want["config"].pop("transformers_version", None)
    marker = out / MARKER
    if marker.is_file() and json.loads(marker.read_text()).get("want") == want:
        return out
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    cfg = config_dict(size, published)
    (out / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    marker.write_text(json.dumps({"want": want}) + "\n")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        prog="scripts/gpu_seed_model.py",
        description="Write a config-only Gemma 4 26B-A4B (text) model directory for SGLang's "
                    "--load-format dummy (or its tiny CPU variant); print its path.")
    ap.add_argument("--size", choices=sorted(SIZES), default="full")
    ap.add_argument("--out", required=True)
    ap.add_argument("--published", action="store_true",
                    help="the published multimodal layout (model_type gemma4, Gemma 4's head-dim "
                         "convention) instead of the servable text-only SGLang form")
    a = ap.parse_args(argv)
    print(build(a.size, pathlib.Path(a.out), a.published))
    return 0


if __name__ == "__main__":
    sys.exit(main())
