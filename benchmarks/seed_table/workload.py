"""The seed table's requests: SGLang ``bench_serving``'s random dataset, and its fixed-length variant.

``random`` draws the lengths as ``sglang.benchmark.serving --dataset-name random`` does (0.5.15.post1
and 0.5.23 alike: ``benchmark/datasets/random.py`` ``sample_random_requests`` ->
``common.compute_random_lens``): ``np.random.seed(seed)`` (``--seed``, default 42), then input lengths
``np.random.randint(max(int(in_len * rr), 1), in_len + 1, n)``, then output lengths the same way;
at its default ``--random-range-ratio`` 0.0 both are uniform on ``[1, len]``. bench_serving sends
text and first takes the tokenizer's special tokens off each input length; the server's tokenizer
puts them back, so a prompt is the drawn length (to within the re-tokenisation of the text, which
is not modelled). ``fixed``: every request exactly ``in_len`` in and ``out_len`` out (``--random-range-ratio 1``).

Prompt tokens: seeded per request, in ``[4, 1000)``; no two prompts share a page, as
bench_serving's prompts (different ShareGPT texts) share none, so nothing is a prefix hit.
"""

from __future__ import annotations

import dataclasses
import random
from typing import Dict, List

WORKLOADS = ("random", "fixed")


@dataclasses.dataclass(frozen=True)
class Draw:
    n: int = 96
    input_len: int = 32768
    output_len: int = 16384
    seed: int = 42  # bench_serving's --seed default
    range_ratio: float = 0.0  # bench_serving's --random-range-ratio default


def random_lens(full_len: int, range_ratio: float, num: int) -> List[int]:
    """``compute_random_lens`` of sglang's benchmark datasets (the global numpy state, seeded)."""
    import numpy as np

    if full_len <= 0:
        return [0] * num
    return np.random.randint(max(int(full_len * range_ratio), 1), full_len + 1, size=num).tolist()


def lengths(workload: str, d: Draw) -> Dict[str, List[int]]:
    """``{"input": [...], "output": [...]}``, one entry per request in submission order."""
    if workload == "fixed":
        return {"input": [d.input_len] * d.n, "output": [d.output_len] * d.n}
    if workload != "random":
        raise ValueError(workload)
    import numpy as np

    state = np.random.get_state()
    try:
        np.random.seed(d.seed)
        ins = random_lens(d.input_len, d.range_ratio, d.n)
        outs = random_lens(d.output_len, d.range_ratio, d.n)
    finally:
        np.random.set_state(state)
    return {"input": ins, "output": outs}


def prompt(seed: int, i: int, n: int) -> List[int]:
    """Request ``i``'s ``n`` prompt tokens."""
    rng = random.Random(seed * 1_000_003 + i)
    return rng.choices(range(4, 1000), k=n)
