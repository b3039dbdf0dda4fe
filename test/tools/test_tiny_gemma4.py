"""The tiny Gemma 4 checkpoints (islands_harness.tiny_gemma4), the model table
(islands_harness.models) and the oracle worker (hf_oracle.OracleWorker): the published layout,
the seed's structure, SWA shapes as sglang 0.5.23's own config parser derives them, and
transformers 5.19 decoding them in another interpreter. No server."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from islands_harness import tiny_gemma4
from islands_harness.main_arm import MAIN_PYTHON
from islands_harness.models import MODELS, get_model, real_vocab

ROOT = tiny_gemma4.DEFAULT_CACHE.parent.parent
needs_main = pytest.mark.skipif(not MAIN_PYTHON.exists(),
                                reason="no .venv-main (scripts/setup_main.sh)")
sys.path.insert(0, str(ROOT / "scripts"))
import gpu_seed_model  # noqa: E402  (the published 26B-A4B text config, sourced in its docstring)

SEED = gpu_seed_model.PUBLISHED_TEXT


def _text(variant):
    return tiny_gemma4.text_config(variant, window=32, vocab=704,
                                   special={"pad_token_id": 0, "bos_token_id": 2,
                                            "eos_token_id": 3})


@pytest.mark.parametrize("variant", tiny_gemma4.VARIANTS)
def test_the_tiny_text_config_keeps_the_seed_models_structure(variant):
    t = _text(variant)
    for key in ("attention_k_eq_v", "rope_parameters", "final_logit_softcapping",
                "hidden_activation", "tie_word_embeddings", "use_bidirectional_attention",
                "num_kv_shared_layers"):
        assert t[key] == SEED[key], key
    # the seed's 5 : 1 pattern, the last layer full
    assert t["layer_types"] == SEED["layer_types"][:6]
    # a global head_dim unlike the sliding one, fewer global KV heads, as in 26B-A4B
    assert t["global_head_dim"] == 2 * t["head_dim"]
    assert SEED["global_head_dim"] == 2 * SEED["head_dim"]
    assert t["num_global_key_value_heads"] < t["num_key_value_heads"]
    assert t["num_global_key_value_heads"] == SEED["num_global_key_value_heads"]  # TP 2 divides it
    if variant == "moe":
        assert t["enable_moe_block"] and SEED["enable_moe_block"]
        assert 1 < t["top_k_experts"] < t["num_experts"]
        assert t["hidden_size_per_layer_input"] == SEED["hidden_size_per_layer_input"] == 0
    else:
        assert not t["enable_moe_block"] and t["hidden_size_per_layer_input"] > 0


def test_an_unknown_variant_or_model_is_refused_with_the_choices():
    with pytest.raises(ValueError, match="dense"):
        tiny_gemma4.text_config("sparse", window=32, vocab=64, special={})
    with pytest.raises(ValueError, match="laguna, gemma4, gemma4-moe, gpt-oss"):
        get_model("gemma5")
    assert get_model("gemma4").serves_on("0.5.23") and not get_model("gemma4").serves_on(
        "0.5.15.post1")
    assert all(get_model("laguna").serves_on(t) for t in ("0.5.15.post1", "0.5.23"))
    assert "--attention-backend" in MODELS["gemma4-moe"].server_args


@pytest.fixture(scope="module")
def built():
    return {v: get_model("gemma4" if v == "dense" else "gemma4-moe").build()
            for v in tiny_gemma4.VARIANTS}


@needs_main
@pytest.mark.parametrize("variant", tiny_gemma4.VARIANTS)
def test_the_checkpoint_has_the_published_layout_and_sglang_derives_the_swa_shapes(built,
                                                                                  variant):
    path = built[variant]
    cfg = json.loads((path / "config.json").read_text())
    assert cfg["model_type"] == "gemma4" and cfg["architectures"] == [
        "Gemma4ForConditionalGeneration"]
    assert cfg["language_model_only"] is True and cfg["vision_config"]
    text = cfg["text_config"]
    assert text["model_type"] == "gemma4_text"
    assert not {"swa_head_dim", "swa_num_key_value_heads", "swa_v_head_dim"} & set(text)
    assert real_vocab(path) < text["vocab_size"] <= 1024
    code = ("import json, sys\n"
            "from sglang.srt.utils.hf_transformers.config import get_config\n"
            "t = get_config(sys.argv[1], trust_remote_code=False).text_config\n"
            "print(json.dumps([t.head_dim, t.num_key_value_heads, t.swa_head_dim, "
            "t.swa_v_head_dim, t.swa_num_key_value_heads, t.sliding_window]))")
    p = subprocess.run([str(MAIN_PYTHON), "-c", code, str(path)], capture_output=True, text=True,
                       env={"SGLANG_USE_CPU_ENGINE": "1", "PATH": "/usr/bin:/bin"}, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    # sglang's convention: base = full attention (64 x 2, V = K), swa_* = sliding (32 x 4)
    assert json.loads(p.stdout.strip().splitlines()[-1]) == [64, 2, 32, 32, 4, 32]


def test_a_second_build_reuses_the_directory_and_a_new_shape_gets_its_own(built):
    again = tiny_gemma4.build_tiny_gemma4("dense")
    assert again == built["dense"]
    assert tiny_gemma4.default_model_dir("dense", window=64) != again
    assert tiny_gemma4.shape_digest("dense", 32, 1024) in again.name
    meta = json.loads((again / ".tiny_model_complete.json").read_text())
    assert meta["variant"] == "dense" and meta["embed_std"] == tiny_gemma4.EMBED_STD


@needs_main
def test_the_oracle_worker_decodes_with_the_other_interpreters_transformers(built):
    from islands_harness.hf_oracle import OracleWorker, greedy_decode
    from islands_harness.tiny_model import build_tiny_model

    laguna = build_tiny_model(window=32)
    prompts = [[5, 6, 7, 8], list(range(10, 60))]
    with OracleWorker(str(MAIN_PYTHON), laguna) as w:
        assert w.versions["transformers"].startswith("5.19")
        # transformers 5.19 there, this process's here: the same greedy ids on the Laguna model
        assert w.greedy_decode(prompts, 6) == greedy_decode(laguna, prompts, 6)
    with OracleWorker(str(MAIN_PYTHON), built["moe"]) as w:
        out = w.greedy_decode(prompts, 12)
    assert all(len(o) == 12 for o in out) and len(set(out[1])) > 4  # not one repeated token
