"""Reference greedy decoding with transformers (fp32, CPU): the oracle for server end-to-end tests.

    from islands_harness.hf_oracle import greedy_decode
    refs = greedy_decode(model_dir, [[5, 6, 7], [8, 9]], max_new_tokens=16)
    # refs[i] is the list of exactly 16 generated token ids for prompt i

Each prompt is decoded on its own (batch 1, no padding), with the KV cache on
(`use_cache=True`), `do_sample=False`, and EOS disabled so that exactly `max_new_tokens` ids come
back; this matches a server request with `temperature=0, ignore_eos=True`. The model is loaded
once per (directory, dtype) and kept for the life of the process.
"""

from __future__ import annotations

import functools
import os
import pathlib
from typing import Sequence


@functools.lru_cache(maxsize=4)
def load_model(model_dir: str, dtype: str = "float32"):
    """The transformers model for `model_dir` in eval mode on CPU (cached)."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, dtype))
    return model.eval()


def greedy_decode_one(model_dir: str | os.PathLike, input_ids: Sequence[int],
                      max_new_tokens: int, *, dtype: str = "float32") -> list[int]:
    """Exactly `max_new_tokens` greedy ids following `input_ids` (EOS does not stop it)."""
    import torch

    if not input_ids:
        raise ValueError("input_ids must not be empty")
    model = load_model(str(pathlib.Path(model_dir).resolve()), dtype)
    x = torch.tensor([list(input_ids)], dtype=torch.long)
    with torch.no_grad():
        out = model.generate(
            x,
            attention_mask=torch.ones_like(x),
            max_new_tokens=max_new_tokens,
            min_new_tokens=max_new_tokens,
            do_sample=False,
            use_cache=True,
            eos_token_id=None,
            pad_token_id=model.config.pad_token_id or 0,
        )
    return out[0, x.shape[1]:].tolist()


def next_token_margin(model_dir: str | os.PathLike, input_ids: Sequence[int], *,
                      dtype: str = "float32") -> dict:
    """The next-token logits after ``input_ids`` (one forward, batch 1): ``top`` and
    ``runner_up`` ids, and ``margin``, the gap between their logits. A tiny margin is a near-tie
    that a different summation order (another batch shape) can flip; a large one cannot flip."""
    import torch

    if not input_ids:
        raise ValueError("input_ids must not be empty")
    model = load_model(str(pathlib.Path(model_dir).resolve()), dtype)
    x = torch.tensor([list(input_ids)], dtype=torch.long)
    with torch.no_grad():
        logits = model(x, attention_mask=torch.ones_like(x)).logits[0, -1].float()
    top2 = torch.topk(logits, 2)
    return {"top": int(top2.indices[0]), "runner_up": int(top2.indices[1]),
            "margin": float(top2.values[0] - top2.values[1])}


def greedy_decode(model_dir: str | os.PathLike, prompts: Sequence[Sequence[int]],
                  max_new_tokens: int | Sequence[int], *, dtype: str = "float32") -> list[list[int]]:
    """Greedy continuations for each prompt; `max_new_tokens` is one int or one per prompt."""
    if isinstance(max_new_tokens, int):
        budgets = [max_new_tokens] * len(prompts)
    else:
        budgets = list(max_new_tokens)
        if len(budgets) != len(prompts):
            raise ValueError("max_new_tokens has a different length than prompts")
    return [greedy_decode_one(model_dir, p, n, dtype=dtype) for p, n in zip(prompts, budgets)]
