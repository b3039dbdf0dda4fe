"""GPT-OSS on sglang 0.5.23 (stock arm, CPU): greedy outputs equal transformers' token for token.

The tiny random-weight `GptOssForCausalLM` of `islands_harness.tiny_gpt_oss` (S F S F layers,
window 128, attention sinks, every layer MoE with the clamped SwiGLU, YaRN RoPE) is served by the
stock arm's interpreter (`.venv-main`; `SWA_GPT_OSS_PYTHON` names another) with the harness-only
torch_native sink patch installed. One boot: fp32, page 1, chunked prefill 64, and a small KV
budget (`--max-total-tokens 4096 --swa-full-tokens-ratio 0.25`: a 1024-token SWA pool, less than
the workload's distinct tokens, so SWA slots are evicted and recycled while full slots stay).

`--attention-backend intel_amx`: GPT-OSS's model hook refuses `torch_native` by name (it has no
sinks upstream); without an AMX kernel (`has_amx` is False with the harness's `sgl_kernel`
stand-in) upstream falls back to torch_native, which the test checks in the log.

Prompts: seeded random ids of 5 to 520 tokens (several longer than the window, so chunks and
decode steps cross it), 24 greedy tokens each, sent one by one and then all at once (batched
extend/decode, radix-cache hits). Reference: transformers' own GptOssForCausalLM (fp32, KV cache
on, `islands_harness.hf_oracle`). Negative control: the same model with every sink set to -inf
(what an attention without the sink term computes) must differ from the server on every prompt.
"""

from __future__ import annotations

import os
import pathlib
import random
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from islands_harness.main_arm import MAIN_PYTHON
from islands_harness.server import SglangServer, drop_benign_warnings

pytestmark = pytest.mark.server

PYTHON = pathlib.Path(os.environ.get("SWA_GPT_OSS_PYTHON") or MAIN_PYTHON)
SERVER_ARGS = [
    "--attention-backend", "intel_amx",  # GPT-OSS's assert allows it; falls back to torch_native
    "--page-size", "1",
    "--chunked-prefill-size", "64",
    "--context-length", "2048",
    "--max-total-tokens", "4096",
    "--swa-full-tokens-ratio", "0.25",
]
PROMPT_LENGTHS = {"p5": 5, "p60": 60, "p120": 120, "p150": 150, "p300": 300, "p520": 520}
NEW_TOKENS = 24
FALLBACK_LINE = "will fallback to torch_native backend"
SINK_MARKER = "_sdpa_with_sinks"  # the sink patch's helper in torch_native_backend.py


def _installed_backend(python: pathlib.Path) -> pathlib.Path | None:
    venv = python.parent.parent
    hits = sorted(venv.glob("lib/python3*/site-packages/sglang/srt/layers/attention/"
                            "torch_native_backend.py"))
    return hits[0] if hits else None


def first_difference(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def make_prompts(real_vocab: int) -> dict[str, list[int]]:
    rng = random.Random(49)
    return {name: [rng.randrange(4, real_vocab) for _ in range(n)]
            for name, n in PROMPT_LENGTHS.items()}


def hf_greedy(model_dir: pathlib.Path, prompts: dict[str, list[int]], *, sinks: bool) -> dict:
    """transformers greedy per prompt; ``sinks=False``: every layer's sinks at -inf meanwhile."""
    import torch

    from islands_harness.hf_oracle import greedy_decode_one, load_model

    model = load_model(str(model_dir.resolve()), "float32")
    saved = [layer.self_attn.sinks.detach().clone() for layer in model.model.layers]
    try:
        if not sinks:
            with torch.no_grad():
                for layer in model.model.layers:
                    layer.self_attn.sinks.fill_(float("-inf"))
        return {k: greedy_decode_one(model_dir, p, NEW_TOKENS) for k, p in prompts.items()}
    finally:
        with torch.no_grad():
            for layer, s in zip(model.model.layers, saved):
                layer.self_attn.sinks.copy_(s)


@pytest.fixture(scope="module")
def served():
    if not PYTHON.exists():
        pytest.skip(f"{PYTHON.parent.parent} does not exist (scripts/setup_main.sh)")
    backend = _installed_backend(PYTHON)
    if backend is None or SINK_MARKER not in backend.read_text():
        pytest.skip(f"the torch_native sink patch is not installed in {PYTHON.parent.parent} "
                    "(patches-main/0013-harness-only-torch-native-attention-sinks.patch; "
                    "re-run scripts/setup_main.sh)")
    import json

    from islands_harness.tiny_gpt_oss import build_tiny_gpt_oss
    from islands_harness.tiny_model import MARKER

    model_dir = build_tiny_gpt_oss()
    meta = json.loads((model_dir / MARKER).read_text())
    prompts = make_prompts(meta["real_vocab"])
    t0 = time.monotonic()
    ref = hf_greedy(model_dir, prompts, sinks=True)
    ref_nosinks = hf_greedy(model_dir, prompts, sinks=False)
    oracle_s = time.monotonic() - t0
    with SglangServer(model_dir, SERVER_ARGS, python=str(PYTHON), omp_threads=1,
                      boot_timeout_s=600) as srv:
        seq = {k: srv.generate(p, NEW_TOKENS, timeout=300) for k, p in prompts.items()}
        with ThreadPoolExecutor(len(prompts)) as pool:
            futures = {k: pool.submit(srv.generate, p, NEW_TOKENS, timeout=300)
                       for k, p in prompts.items()}
            conc = {k: f.result() for k, f in futures.items()}
        log = srv.log_path.read_text(errors="replace")
    return {"prompts": prompts, "ref": ref, "ref_nosinks": ref_nosinks, "seq": seq,
            "conc": conc, "log": log, "oracle_s": oracle_s}


def test_served_by_torch_native_on_a_hybrid_swa_pool(served):
    log = served["log"]
    assert FALLBACK_LINE in log, "the server did not fall back to torch_native"
    assert "Use sliding window memory pool" in log, "no hybrid SWA pool"
    assert "Traceback" not in drop_benign_warnings(log)[0]


@pytest.mark.parametrize("name", list(PROMPT_LENGTHS))
def test_sequential_greedy_equals_transformers(served, name):
    got, want = served["seq"][name].output_ids, served["ref"][name]
    assert got == want, (f"{name} ({PROMPT_LENGTHS[name]} tokens): first difference at "
                         f"{first_difference(got, want)}: server {got} vs transformers {want}")


@pytest.mark.parametrize("name", list(PROMPT_LENGTHS))
def test_concurrent_greedy_equals_transformers(served, name):
    """All prompts at once, after the sequential pass: batched extend and decode, cache hits."""
    got, want = served["conc"][name].output_ids, served["ref"][name]
    assert got == want, (f"{name}: first difference at {first_difference(got, want)}: "
                         f"server {got} vs transformers {want}")


def test_cache_hits_happened(served):
    hits = {k: r.cached_tokens for k, r in served["conc"].items()}
    assert any(hits.values()), f"no radix-cache hit on the re-sent prompts: {hits}"


def test_negative_control_without_sinks_differs(served):
    """transformers with the sinks at -inf (no sink term) differs from the server on every
    prompt: the equality above depends on the sink term being right."""
    same = [k for k in PROMPT_LENGTHS
            if served["seq"][k].output_ids == served["ref_nosinks"][k]]
    assert not same, f"the server equals the sink-less model on {same}"
