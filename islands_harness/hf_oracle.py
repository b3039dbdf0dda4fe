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


NEAR_TIE_LOGITS = 1e-3
"""An HF next-token margin (top-1 minus top-2 logit) below this is a near-tie that the engine's
float32 arithmetic may decide either way: a server that takes HF's runner-up there is not wrong.
Measured server-vs-HF log-probability differences on the CPU server: GPT-OSS within 3.3e-6
(Laguna's flips in the soak had margins of 2e-7 to 2e-6); tiny Gemma 4 up to 2.7e-4 (mean 5.1e-5, the top two of 29 steps after a 600-token prompt;
sglang's and transformers' Gemma 4 compute norms, softcap and per-layer inputs in other orders),
and the flips seen there had margins of 1.9e-5 and 1.1e-4. The soak keeps its own, stricter
bound (`NEAR_TIE_LOGITS` in benchmarks/soak/report.py, 1e-5, Laguna only)."""


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


def parts_at_near_tie(served: Sequence[int], reference: Sequence[int], prompt: Sequence[int],
                      margin_of) -> bool:
    """Whether `served` parts from the greedy `reference` only at a near-tie: at the first
    difference HF's margin is below NEAR_TIE_LOGITS and `served` took HF's runner-up (what
    follows a flip is a different continuation). `margin_of(ids)` is `next_token_margin` or
    `OracleWorker.margin`. Equal outputs are not a near-tie."""
    i = next((k for k, (a, b) in enumerate(zip(served, reference)) if a != b), None)
    if i is None:
        return False
    m = margin_of(list(prompt) + list(reference[:i]))
    return m["margin"] < NEAR_TIE_LOGITS and served[i] == m["runner_up"]


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


class OracleWorker:
    """`greedy_decode_one` run by another interpreter (its transformers and torch), one process
    kept for many calls: a model whose checkpoint the caller's transformers cannot load (tiny
    Gemma 4's vision tower needs transformers >= 5.19, `.venv` has 5.12) is decoded by the
    environment that serves it. JSON lines on the worker's stdin/stdout; `versions` is what the
    worker reported at start."""

    def __init__(self, python: str, model_dir: str | os.PathLike, *, threads: int = 2):
        import json
        import subprocess
        import sys

        root = pathlib.Path(__file__).resolve().parent.parent
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            [str(root), *filter(None, [os.environ.get("PYTHONPATH")])])}
        self.model_dir = str(pathlib.Path(model_dir).resolve())
        self.proc = subprocess.Popen(
            [python, "-m", "islands_harness.hf_oracle", "--serve", self.model_dir,
             "--threads", str(threads)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=sys.stderr, text=True, env=env, cwd=str(root))
        self.versions = json.loads(self._line())

    def _line(self) -> str:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the oracle worker exited (code {self.proc.poll()})")
        return line

    def __call__(self, input_ids: Sequence[int], max_new_tokens: int) -> list[int]:
        import json

        self.proc.stdin.write(json.dumps([list(input_ids), max_new_tokens]) + "\n")
        self.proc.stdin.flush()
        return json.loads(self._line())

    def margin(self, input_ids: Sequence[int]) -> dict:
        """`next_token_margin` of `input_ids`, computed by the worker."""
        import json

        self.proc.stdin.write(json.dumps(["margin", list(input_ids)]) + "\n")
        self.proc.stdin.flush()
        return json.loads(self._line())

    def greedy_decode(self, prompts: Sequence[Sequence[int]],
                      max_new_tokens: int | Sequence[int]) -> list[list[int]]:
        budgets = ([max_new_tokens] * len(prompts) if isinstance(max_new_tokens, int)
                   else list(max_new_tokens))
        return [self(p, n) for p, n in zip(prompts, budgets)]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=60)

    def __enter__(self) -> "OracleWorker":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _serve(model_dir: str, threads: int) -> int:
    """The worker's loop: a versions line, then one output line per input line: `[ids, n]`
    (greedy ids) or `["margin", ids]` (`next_token_margin`)."""
    import json
    import sys

    import torch
    import transformers

    torch.set_num_threads(threads)
    load_model(str(pathlib.Path(model_dir).resolve()), "float32")
    print(json.dumps({"transformers": transformers.__version__, "torch": torch.__version__}),
          flush=True)
    for line in sys.stdin:
        a, b = json.loads(line)
        out = next_token_margin(model_dir, b) if a == "margin" else greedy_decode_one(model_dir, a, b)
        print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    import argparse
    import sys

    ap = argparse.ArgumentParser(prog="python -m islands_harness.hf_oracle",
                                 description="Serve greedy_decode_one over JSON lines "
                                             "(OracleWorker's other end).")
    ap.add_argument("--serve", required=True, metavar="MODEL_DIR")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    sys.exit(_serve(a.serve, a.threads))
