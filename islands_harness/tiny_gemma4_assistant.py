"""A tiny Gemma 4 MTP "assistant" drafter for the tiny Gemma 4 target, in the layout of Google's
published assistant checkpoints (google/gemma-4-*-it-assistant), so sglang 0.5.23 serves it as
FROZEN_KV_MTP (`--speculative-algorithm EAGLE|NEXTN --speculative-draft-model-path <this dir>`
is promoted to FROZEN_KV_MTP by `_resolve_speculative_algorithm_alias`).

`build_tiny_gemma4_assistant(target_dir)` writes config.json (`Gemma4AssistantForCausalLM`,
model_type `gemma4_assistant`, `backbone_hidden_size` = the target's hidden size, a
`text_config` of model_type `gemma4_text` whose every layer is KV-shared), model.safetensors
(HF names: `model.*`, `pre_projection.weight`, `post_projection.weight`, and with ordered
embeddings `masked_embedding.centroids.weight` / `masked_embedding.token_ordering`) and a copy of
the target's tokenizer; offline, deterministic, built once (the `tiny_model` marker).

The assistant reads the target's KV (no k/v projections of its own): its sliding layers attend
to the target's last sliding layer's cache and its full layer to the target's last full layer's,
so head_dim / KV heads per layer type, window, RoPE and vocab are the target's.

Weights (`init`):
- "random": N(0, 0.08^2) matrices like the target; accepts ~nothing.
- "derived" (default): the drafter is made to follow the target. Its hidden size is the
  target's; its last two layers are copies of the target's last two layers (4: sliding, 5: full),
  so their queries meet the exact K/V they were trained against; its earlier layers copy the
  target's earlier layers' MLPs with the attention switched off (o_proj 0: their own K/V is not
  readable); the token embedding / LM head are the target's; pre_projection feeds the target
  token embedding (x sqrt(H), as the target does) and post_projection is the identity, so the
  recurrent state is a target-like final hidden state. What it cannot reproduce: the attention of
  layers 0-3, the new token attending to itself (frozen KV holds only the committed prefix) and
  the target's per-layer inputs.

CLI: `python -m islands_harness.tiny_gemma4_assistant [--target DIR]` prints the directory.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import pathlib
import shutil
import sys

from islands_harness.tiny_model import DEFAULT_CACHE, MARKER, WEIGHT_STD, build_dir_atomically

INITS = ("derived", "random")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


def _target_text(target_dir: pathlib.Path) -> dict:
    cfg = json.loads((target_dir / "config.json").read_text())
    return cfg.get("text_config", cfg)


def assistant_text_config(target_text: dict, *, hidden: int, layer_types: list[str]) -> dict:
    """The assistant's `text_config`: the target's attention geometry, no per-layer inputs, no
    MoE, every layer KV-shared (the assistant owns no KV)."""
    keys = ("vocab_size", "num_attention_heads", "num_key_value_heads", "head_dim",
            "num_global_key_value_heads", "global_head_dim", "attention_k_eq_v", "sliding_window",
            "final_logit_softcapping", "max_position_embeddings", "rope_parameters",
            "hidden_activation", "rms_norm_eps", "pad_token_id", "bos_token_id", "eos_token_id")
    text = {k: target_text[k] for k in keys if k in target_text}
    # The target's full-attention shape: transformers 5.12 saves `global_head_dim` /
    # `num_global_key_value_heads`, 5.19 consumes them into `per_layer_config` overrides; the
    # target may have been written by either, so read both.
    full = [i for i, t in enumerate(target_text["layer_types"]) if t == "full_attention"]
    over = (target_text.get("per_layer_config") or {}).get(str(full[-1]), {})
    text["global_head_dim"] = over.get(
        "head_dim", target_text.get("global_head_dim") or target_text["head_dim"])
    text["num_global_key_value_heads"] = over.get(
        "num_key_value_heads",
        target_text.get("num_global_key_value_heads") or target_text["num_key_value_heads"])
    text.update(model_type="gemma4_text", hidden_size=hidden, intermediate_size=2 * hidden
                if hidden != target_text["hidden_size"] else target_text["intermediate_size"],
                num_hidden_layers=len(layer_types), layer_types=list(layer_types),
                num_kv_shared_layers=len(layer_types), hidden_size_per_layer_input=0,
                vocab_size_per_layer_input=0, enable_moe_block=False, use_double_wide_mlp=False,
                tie_word_embeddings=True, use_bidirectional_attention=None)
    return text


def _layer_types(target_text: dict, init: str) -> list[str]:
    if init == "derived":  # one assistant layer per target layer, same types
        return list(target_text["layer_types"])
    return ["sliding_attention", "sliding_attention", "sliding_attention", "full_attention"]


def shape_digest(target_dir: pathlib.Path, init: str, hidden: int, ordered: bool,
                 centroids: int, top_k: int, seed: int) -> str:
    marker = json.loads((target_dir / MARKER).read_text())
    spec = [_target_text(target_dir), marker, init, hidden, ordered, centroids, top_k, seed,
            WEIGHT_STD, 4]
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:8]


def default_model_dir(target_dir: pathlib.Path, *, init: str, hidden: int, ordered: bool,
                      centroids: int, top_k: int, seed: int) -> pathlib.Path:
    """`<repo>/.cache/models/<target name>-assistant-{init}[-ord]-s{seed}-{digest}`."""
    tag = f"{init}{'-ord' if ordered else ''}"
    return DEFAULT_CACHE / (f"{target_dir.name}-assistant-{tag}-s{seed}-"
                            f"{shape_digest(target_dir, init, hidden, ordered, centroids, top_k, seed)}")


def _derive(model, target_dir: pathlib.Path) -> None:
    """Copy the target's weights into the assistant (see the module docstring)."""
    import torch
    from safetensors.torch import load_file

    sd = load_file(str(target_dir / "model.safetensors"))
    pre = "model.language_model."
    n_target = sum(1 for k in sd if k.startswith(pre) and k.endswith(".input_layernorm.weight"))
    n = len(model.model.layers)
    assert n == n_target, (n, n_target)
    hidden = model.config.get_text_config().hidden_size
    with torch.no_grad():
        own = dict(model.named_parameters())
        own.update(dict(model.named_buffers()))
        for name, t in own.items():
            if not name.startswith("model."):
                continue
            src = pre + name[len("model."):]
            if src in sd:
                if sd[src].shape != t.shape:  # a geometry the config did not carry over
                    raise ValueError(f"{name}: {tuple(t.shape)} != the target's "
                                     f"{tuple(sd[src].shape)}")
                t.copy_(sd[src])
        for i, layer in enumerate(model.model.layers):
            if i < n - 2:  # their own K/V is not readable: attention off, MLP kept
                layer.self_attn.o_proj.weight.zero_()
        model.lm_head.weight.copy_(sd[pre + "embed_tokens.weight"])
        eye = torch.eye(hidden)
        model.pre_projection.weight.copy_(torch.cat([eye, torch.zeros_like(eye)], dim=1))
        model.post_projection.weight.copy_(eye)


def _write(tmp: pathlib.Path, target_dir: pathlib.Path, init: str, hidden: int, ordered: bool,
           centroids: int, top_k: int, seed: int) -> dict:
    import torch
    from transformers import Gemma4AssistantConfig, Gemma4AssistantForCausalLM

    from islands_harness.tiny_model import randomize_weights

    tt = _target_text(target_dir)
    text = assistant_text_config(tt, hidden=hidden, layer_types=_layer_types(tt, init))
    special = {k: tt[k] for k in ("pad_token_id", "bos_token_id", "eos_token_id") if k in tt}
    cfg = Gemma4AssistantConfig(text_config=text, backbone_hidden_size=tt["hidden_size"],
                                use_ordered_embeddings=ordered, num_centroids=centroids,
                                centroid_intermediate_top_k=top_k, tie_word_embeddings=True,
                                **special)
    cfg.architectures = ["Gemma4AssistantForCausalLM"]
    torch.manual_seed(seed)
    model = Gemma4AssistantForCausalLM(cfg).to(torch.float32).eval()
    randomize_weights(model, seed, WEIGHT_STD)
    if init == "derived":
        _derive(model, target_dir)
    if ordered:
        # A fixed permutation of the vocabulary into equal clusters (the published E2B/E4B
        # heads are trained; here a seeded shuffle), centroid i = the mean of its members'
        # LM-head rows, so the top clusters of a hidden state hold its best tokens.
        vocab = text["vocab_size"]
        gen = torch.Generator().manual_seed(seed)
        order = torch.randperm(vocab, generator=gen)
        with torch.no_grad():
            model.masked_embedding.token_ordering.copy_(order)
            w = model.lm_head.weight[order].view(centroids, vocab // centroids, -1)
            model.masked_embedding.centroids.weight.copy_(w.mean(1))
    model.save_pretrained(str(tmp), safe_serialization=True)
    for f in TOKENIZER_FILES:
        if (target_dir / f).exists():
            shutil.copy(target_dir / f, tmp / f)
    return {"target": str(target_dir), "init": init, "hidden": hidden, "ordered": ordered,
            "num_centroids": centroids, "centroid_top_k": top_k, "seed": seed,
            "layer_types": text["layer_types"]}


def build_tiny_gemma4_assistant(target_dir: str | os.PathLike, out_dir: str | os.PathLike |
                                None = None, *, init: str = "derived", hidden: int | None = None,
                                ordered: bool = False, num_centroids: int = 32,
                                centroid_top_k: int = 8, seed: int = 0) -> pathlib.Path:
    """Build (or reuse) the assistant drafter for the tiny Gemma 4 target at `target_dir` and
    return its directory.

    `init`: "derived" (follows the target; hidden must be the target's) or "random". `hidden`:
    the assistant's hidden size (default: the target's for "derived", half of it for "random").
    `ordered`: the E2B/E4B centroid-masked LM head (`use_ordered_embeddings`), `num_centroids`
    clusters (must divide the vocab), `centroid_top_k` of them kept per token."""
    if init not in INITS:
        raise ValueError(f"init must be one of {INITS}, got {init!r}")
    target_dir = pathlib.Path(target_dir).resolve()
    if not (target_dir / MARKER).is_file():
        raise FileNotFoundError(f"{target_dir} is not a finished tiny checkpoint (no {MARKER})")
    tt = _target_text(target_dir)
    if hidden is None:
        hidden = tt["hidden_size"] if init == "derived" else tt["hidden_size"] // 2
    if init == "derived" and hidden != tt["hidden_size"]:
        raise ValueError("init='derived' needs the target's hidden size")
    if ordered and tt["vocab_size"] % num_centroids:
        raise ValueError(f"num_centroids {num_centroids} must divide vocab {tt['vocab_size']}")
    out = pathlib.Path(out_dir) if out_dir is not None else default_model_dir(
        target_dir, init=init, hidden=hidden, ordered=ordered, centroids=num_centroids,
        top_k=centroid_top_k, seed=seed)
    return build_dir_atomically(out, lambda tmp: _write(tmp, target_dir, init, hidden, ordered,
                                                        num_centroids, centroid_top_k, seed))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m islands_harness.tiny_gemma4_assistant",
                                 description="Build (or reuse) a tiny Gemma 4 assistant drafter "
                                             "(FROZEN_KV_MTP) and print its directory.")
    ap.add_argument("--target", default=None,
                    help="the tiny Gemma 4 target (default: build_tiny_gemma4('dense', window=32))")
    ap.add_argument("--init", choices=INITS, default="derived")
    ap.add_argument("--hidden", type=int, default=None)
    ap.add_argument("--ordered", action="store_true", help="centroid-masked LM head")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    target = a.target
    if target is None:
        from islands_harness.tiny_gemma4 import build_tiny_gemma4
        target = build_tiny_gemma4("dense", window=32)
    print(build_tiny_gemma4_assistant(target, a.out, init=a.init, hidden=a.hidden,
                                      ordered=a.ordered, seed=a.seed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
