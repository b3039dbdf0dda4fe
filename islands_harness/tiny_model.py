"""A tiny, random-weight hybrid sliding-window model that the real SGLang server can serve on CPU.

`build_tiny_model()` writes a `LagunaForCausalLM` checkpoint (transformers' `LagunaConfig`) plus a
byte-level BPE tokenizer to a directory and returns its path. Everything is offline and
deterministic: the same arguments give the same weights and the same token ids.

Why Laguna: in sglang 0.5.15.post1 it is a hybrid-SWA architecture (`is_hybrid_swa_model`), so the
server builds the two-pool `SWAKVPool` and the `SWARadixCache`, and nothing in its server-args
overrides forces `disable_hybrid_swa_memory` or a GPU-only attention backend (Gemma 2/3/4 and
GPT-OSS do). With every `mlp_layer_types` entry "dense" there is no MoE, so no Triton kernel runs.

Model shape (defaults): 4 layers S F S F (every other layer sliding, the last one always full),
`sliding_window` 32 tokens (HF's inclusive window; SGLang's window_left is 31), hidden 128,
4 query heads / 2 KV heads, head_dim 32, fp32, about 3 MB of weights. Matrix weights are drawn from
N(0, 0.08^2) so the logits are peaky enough that greedy decoding does not collapse into a single
repeated token.

The checkpoint directory is built once and reused. A marker file (`MARKER`) is written last, after
a build into a temporary sibling directory that is then renamed into place, so an interrupted
build is never mistaken for a finished one.

CLI: `python -m islands_harness.tiny_model [--window 32] [--layers 4] [--out DIR]` prints the path.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import sys
import tempfile

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
DEFAULT_CACHE = REPO_ROOT / ".cache" / "models"
MARKER = ".tiny_model_complete.json"
WEIGHT_STD = 0.08

SPECIAL_TOKENS = ["<pad>", "<unk>", "<bos>", "<eos>"]  # ids 0..3 in this order

# A plain "role: content" template: enough for /v1/chat/completions, no special role tokens.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ message['role'] }}: {{ message['content'] }}\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)

_CORPUS_LINES = """\
The quick brown fox jumps over the lazy dog. A journey of a thousand miles begins with a single step.
To be or not to be, that is the question. All that glitters is not gold. Knowledge is power.
In the beginning the universe was created. This has made a lot of people very angry and been widely
regarded as a bad move. It was the best of times, it was the worst of times, it was the age of wisdom,
it was the age of foolishness. Call me Ishmael. Some years ago, never mind how long precisely, having
little or no money in my purse, and nothing particular to interest me on shore, I thought I would sail
about a little and see the watery part of the world. Radix trees share prefixes; sliding window attention
keeps only the most recent tokens; full attention layers keep every token in the cache.
user: Hello, can you tell me a story about the sea? assistant: Once upon a time a small boat sailed out.
user: What happens next? assistant: The wind rose, the waves grew, and the sailors held on to the ropes.
system: You are a helpful assistant. Answer briefly and clearly.
0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 one two three four five six seven eight nine ten
"""
CORPUS = _CORPUS_LINES.splitlines() * 4


def default_model_dir(*, window: int = 32, layers: int = 4, hidden: int = 128, vocab: int = 1024,
                      seed: int = 0) -> pathlib.Path:
    """`<repo>/.cache/models/tiny-laguna-w{window}-l{layers}-h{hidden}-v{vocab}-s{seed}`."""
    return DEFAULT_CACHE / f"tiny-laguna-w{window}-l{layers}-h{hidden}-v{vocab}-s{seed}"


def layer_types_for(layers: int) -> list[str]:
    """Every other layer sliding, starting with layer 0; the last layer is always full.

    layers=4 -> [S, F, S, F]; layers=3 -> [S, F, F]; layers=1 -> [F].
    """
    types = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(layers)]
    types[-1] = "full_attention"
    return types


def _build_tokenizer(out_dir: pathlib.Path, vocab: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<bos>",
        eos_token="<eos>",
        unk_token="<unk>",
        pad_token="<pad>",
    )
    fast.model_max_length = 4096
    fast.chat_template = CHAT_TEMPLATE
    # Keep the template inside tokenizer_config.json (one file, readable by any client).
    fast.save_pretrained(str(out_dir), save_jinja_files=False)
    return fast


def _build_weights(out_dir: pathlib.Path, fast, *, window: int, layers: int, hidden: int,
                   seed: int) -> dict:
    import torch
    from transformers import LagunaConfig, LagunaForCausalLM

    real_vocab = len(fast)
    padded_vocab = ((real_vocab + 63) // 64) * 64  # embedding rows padded to a multiple of 64
    heads, kv_heads = 4, 2
    if hidden % heads:
        raise ValueError(f"hidden={hidden} must be a multiple of {heads} heads")
    cfg = LagunaConfig(
        vocab_size=padded_vocab,
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=hidden // heads,
        max_position_embeddings=4096,
        sliding_window=window,
        layer_types=layer_types_for(layers),
        mlp_layer_types=["dense"] * layers,  # no MoE: no fused_moe / Triton kernels
        num_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size=32,
        shared_expert_intermediate_size=32,
        rope_parameters={
            "full_attention": {"rope_type": "default", "rope_theta": 500000.0,
                               "partial_rotary_factor": 0.5},
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0,
                                  "partial_rotary_factor": 1.0},
        },
        tie_word_embeddings=False,
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id,
    )
    cfg.architectures = ["LagunaForCausalLM"]
    torch.manual_seed(seed)
    model = LagunaForCausalLM(cfg).to(torch.float32).eval()
    randomize_weights(model, seed, WEIGHT_STD)
    model.save_pretrained(str(out_dir), safe_serialization=True)
    return {"real_vocab": real_vocab, "padded_vocab": padded_vocab,
            "layer_types": cfg.layer_types}


def randomize_weights(model, seed: int, std: float) -> None:
    """Seeded N(0, std) draws for every matrix parameter (dim >= 2), in sorted-name order so the
    draw does not depend on module registration order; vectors (norms, biases) keep their init."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        params = dict(model.named_parameters())
        for name in sorted(params):
            p = params[name]
            if p.dim() >= 2:
                p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float32).to(p.dtype)
                        * std)


def is_complete(path: pathlib.Path) -> bool:
    return (pathlib.Path(path) / MARKER).is_file()


def build_tiny_model(out_dir: str | os.PathLike | None = None, *, window: int = 32, layers: int = 4,
                     hidden: int = 128, vocab: int = 1024, seed: int = 0) -> pathlib.Path:
    """Build (or reuse) the tiny hybrid-SWA Laguna checkpoint and return its directory.

    `window` is HF's `sliding_window` in tokens, `vocab` the BPE training target (the trained
    vocabulary may be smaller on the embedded corpus; the embedding is padded to a multiple of 64).
    A directory that has the marker is returned as is; one without it is rebuilt from scratch.
    """
    if layers < 2:
        raise ValueError("layers must be >= 2 to mix sliding and full attention")
    out = pathlib.Path(out_dir) if out_dir is not None else default_model_dir(
        window=window, layers=layers, hidden=hidden, vocab=vocab, seed=seed)

    def write(tmp: pathlib.Path) -> dict:
        fast = _build_tokenizer(tmp, vocab)
        info = _build_weights(tmp, fast, window=window, layers=layers, hidden=hidden, seed=seed)
        return {"window": window, "layers": layers, "hidden": hidden, "vocab": vocab,
                "seed": seed, "weight_std": WEIGHT_STD, **info}

    return build_dir_atomically(out, write)


def build_dir_atomically(out: str | os.PathLike, write) -> pathlib.Path:
    """`out` as `write(tmp)` fills it: a directory with the marker is returned as is; else
    `write` fills a temporary sibling, whose returned dict becomes the marker (written last),
    and the sibling is renamed into place, so an interrupted build is never taken as done."""
    out = pathlib.Path(out).resolve()
    if is_complete(out):
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = pathlib.Path(tempfile.mkdtemp(prefix=f".{out.name}.building-", dir=out.parent))
    tmp.chmod(0o755)
    try:
        meta = write(tmp)
        (tmp / MARKER).write_text(json.dumps(meta, indent=1) + "\n")  # written last
        if out.exists() and not is_complete(out):
            shutil.rmtree(out)  # a half-built directory from an interrupted build
        try:
            os.rename(tmp, out)
        except OSError:
            if not is_complete(out):  # lost a race to a concurrent builder only if it finished
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m islands_harness.tiny_model",
                                 description="Build (or reuse) the tiny hybrid-SWA Laguna model and "
                                             "print its directory.")
    ap.add_argument("--window", type=int, default=32, help="HF sliding_window in tokens (default 32)")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=1024, help="BPE vocabulary target")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="output directory (default: under .cache/models)")
    a = ap.parse_args(argv)
    path = build_tiny_model(a.out, window=a.window, layers=a.layers, hidden=a.hidden,
                            vocab=a.vocab, seed=a.seed)
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
