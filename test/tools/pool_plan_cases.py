"""What the capacity planner's tests share: the seed deployment of the design note (bytes per
token, budget, workload) and two tiny hybrid-SWA configs that SGLang's ``ModelConfig`` loads
without weights (Gemma 4's naming, and the generic ``hybrid_layer_pattern`` opt-in).

Units as in the design note: SI, KB = 1000 bytes and GB = 10**9 bytes (``test_swa_pool_plan``
says why).
"""

from __future__ import annotations

import os
import pathlib

from islands_tools import pool_plan as plan

ROOT = str(pathlib.Path(__file__).resolve().parents[2])
SCRIPT = os.path.join(ROOT, "scripts", "swa_pool_plan.py")

KB = 1000
GB = 10**9
SPEC_KV = plan.KVBytesPerToken(full=9500, swa=95000, draft=10240)  # 9.5 KB, 95 KB, 10.24 KB
SPEC_BUDGET = 37 * GB
W, P, CP, N = 1024, 64, 16384, 48
SPEC_LOAD = plan.Workload(n_running=N, window=W, page=P, chunk=CP)


def spec_pool(ratio):
    return plan.solve_pool_sizes(SPEC_KV, SPEC_BUDGET, ratio, P)


GEMMA4_LIKE = {
    # Gemma-4 naming: base attributes describe the SWA layers, global_* the full layers.
    "architectures": ["Gemma4ForConditionalGeneration"],
    "model_type": "gemma4",
    "text_config": {
        "model_type": "gemma4_text",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 6,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "num_global_key_value_heads": 1,
        "global_head_dim": 64,
        "sliding_window": 128,
        "vocab_size": 1000,
        "max_position_embeddings": 4096,
        "layer_types": ["sliding_attention", "sliding_attention", "full_attention",
                        "sliding_attention", "sliding_attention", "full_attention"],
    },
}

HYBRID_PATTERN_LLAMA = {
    # The generic opt-in: is_hybrid_swa + hybrid_layer_pattern (1 = SWA), with swa_* overrides.
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "vocab_size": 1000,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 5,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "swa_num_key_value_heads": 4,
    "swa_head_dim": 24,
    "max_position_embeddings": 4096,
    "sliding_window": 64,
    "is_hybrid_swa": True,
    "hybrid_layer_pattern": [1, 1, 0, 1, 0],
    "torch_dtype": "bfloat16",
    "eos_token_id": 999,
    "bos_token_id": 1,
}

CONFIGS = {"gemma4": (GEMMA4_LIKE, "triton"), "hybrid_pattern": (HYBRID_PATTERN_LLAMA, "torch_native")}
