"""The tiny Gemma 4 assistant drafter (islands_harness.tiny_gemma4_assistant; issue 58): the
published assistant layout sglang 0.5.23 promotes to Frozen-KV MTP, built by the environment
that serves it (transformers 5.19), owning no KV of its own, its attention geometry the target's,
and deterministic. No server."""

from __future__ import annotations

import json

import pytest
from safetensors import safe_open

from islands_harness import tiny_gemma4_assistant as assistant
from islands_harness.main_arm import MAIN_ISLANDS_PYTHON
from islands_harness.models import get_model
from islands_harness.speculative import build_assistant

pytestmark = pytest.mark.skipif(not MAIN_ISLANDS_PYTHON.exists(),
                                reason="no .venv-main-islands (scripts/setup_main.sh --islands)")


@pytest.fixture(scope="module")
def built():
    target = get_model("gemma4").build()
    return target, build_assistant(target, MAIN_ISLANDS_PYTHON)


def test_the_assistant_is_the_published_layout_sglang_promotes(built):
    target, path = built
    cfg = json.loads((path / "config.json").read_text())
    assert cfg["architectures"] == ["Gemma4AssistantForCausalLM"]
    assert cfg["model_type"] == "gemma4_assistant"
    tt = json.loads((target / "config.json").read_text())["text_config"]
    text = cfg["text_config"]
    assert cfg["backbone_hidden_size"] == tt["hidden_size"]
    assert text["model_type"] == "gemma4_text"
    # it owns no KV: every layer reads the target's last layer of its type
    assert text["num_kv_shared_layers"] == text["num_hidden_layers"]
    assert set(text["layer_types"]) <= set(tt["layer_types"][-2:])
    for key in ("head_dim", "num_key_value_heads", "sliding_window", "vocab_size"):
        assert text[key] == tt[key], key
    assert text["hidden_size_per_layer_input"] == 0 and not text["enable_moe_block"]


def test_the_weights_follow_the_target_and_have_no_kv_projections(built):
    target, path = built
    with safe_open(str(path / "model.safetensors"), "pt") as f, \
            safe_open(str(target / "model.safetensors"), "pt") as t:
        names = set(f.keys())
        assert {"pre_projection.weight", "post_projection.weight",
                "model.embed_tokens.weight", "model.norm.weight"} <= names
        assert not any(".k_proj." in n or ".v_proj." in n for n in names)
        last = len([n for n in names if n.endswith(".input_layernorm.weight")]) - 1
        q = f"model.layers.{last}.self_attn.q_proj.weight"
        src = f"model.language_model.layers.{last}.self_attn.q_proj.weight"
        assert f.get_tensor(q).equal(t.get_tensor(src))  # "derived": the target's last layer


def test_a_rebuild_is_the_same_directory_and_bad_input_is_refused(built, tmp_path):
    target, path = built
    assert build_assistant(target, MAIN_ISLANDS_PYTHON) == path
    with pytest.raises(ValueError, match="init must be one of"):
        assistant.build_tiny_gemma4_assistant(target, tmp_path / "x", init="trained")
    with pytest.raises(FileNotFoundError, match="not a finished tiny checkpoint"):
        assistant.build_tiny_gemma4_assistant(tmp_path, tmp_path / "y")


def test_the_assistant_is_the_same_whichever_transformers_wrote_the_target(tmp_path):
    """transformers 5.12 (.venv) saves the target's full-attention shape as `global_head_dim`,
    5.19 (.venv-main) as `per_layer_config`; CI builds the target with either. A drafter built
    from the 5.12 target once got the sliding head_dim on its full layer, kept random weights
    there, and crashed the Frozen-KV MTP boot."""
    import subprocess
    import sys

    made = {}
    for tag, python in (("5.12", sys.executable), ("5.19", str(MAIN_ISLANDS_PYTHON))):
        target = tmp_path / f"target-{tag}"
        subprocess.run([python, "-m", "islands_harness.tiny_gemma4", "--out", str(target)],
                       check=True, capture_output=True)
        made[tag] = assistant.build_tiny_gemma4_assistant(target, tmp_path / f"assistant-{tag}")
    versions = {json.loads((tmp_path / f"target-{t}" / "config.json").read_text())
                ["transformers_version"] for t in made}
    assert len(versions) == 2, versions  # the two writers really differ
    blobs = {t: (p / "model.safetensors").read_bytes() for t, p in made.items()}
    assert blobs["5.12"] == blobs["5.19"]
