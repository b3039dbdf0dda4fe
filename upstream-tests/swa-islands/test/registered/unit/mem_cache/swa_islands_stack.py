"""The scheduler-side memory stack of a tiny hybrid SWA model, built as the scheduler builds it
(for the SWA island tests; no weights, no model run).

Real ServerArgs and ModelConfig from a tiny Laguna config.json, ReqToTokenPool, SWAKVPool,
SWATokenToKVPoolAllocator and the tree cache from `create_tree_cache`; `prefill` drives one
request's chunked prefill through the scheduler's calls (PrefillAdder, ScheduleBatch,
maybe_cache_unfinished_req). On CPU run with SGLANG_USE_CPU_ENGINE=1."""

import json
import os
import tempfile
from array import array
from types import SimpleNamespace

import torch

from sglang.srt.configs.model_config import ModelConfig
from sglang.srt.managers.schedule_batch import Req, ScheduleBatch
from sglang.srt.managers.schedule_policy import PrefillAdder
from sglang.srt.mem_cache.allocator.swa import SWATokenToKVPoolAllocator
from sglang.srt.mem_cache.cache_init_params import CacheInitParams
from sglang.srt.mem_cache.common import (
    get_req_to_token_extra_context_len,
    maybe_cache_unfinished_req,
    release_kv_cache,
)
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, ReqToTokenPool
from sglang.srt.mem_cache.registry import TreeCacheBuildContext, create_tree_cache
from sglang.srt.mem_cache.swa_memory_pool import SWAKVPool
from sglang.srt.sampling.sampling_params import SamplingParams
from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

VOCAB = 1024


def tiny_laguna_dir(window: int) -> str:
    """A directory holding the config.json of a 4-layer hybrid Laguna (2 SWA, 2 full layers)."""
    d = tempfile.mkdtemp(prefix=f"tiny-laguna-w{window}-")
    cfg = {
        "architectures": ["LagunaForCausalLM"],
        "model_type": "laguna",
        "vocab_size": VOCAB,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 4,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": 32,
        "max_position_embeddings": 1 << 17,
        "sliding_window": window,
        "layer_types": ["sliding_attention", "full_attention"] * 2,
        "mlp_layer_types": ["dense"] * 4,
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 32,
        "shared_expert_intermediate_size": 32,
        "torch_dtype": "float32",
        "bos_token_id": 2,
        "eos_token_id": 3,
    }
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f)
    return d


def build_stack(*, islands, window=64, page=1, chunk=256, full_pool=16384, swa_pool=8192,
                max_reqs=16, ratio=0.8):
    sa = ServerArgs(
        model_path=tiny_laguna_dir(window),
        device="cpu",
        attention_backend="torch_native",
        page_size=page,
        chunked_prefill_size=chunk,
        disable_overlap_schedule=True,
        skip_tokenizer_init=True,
        enable_swa_islands=islands,
        swa_islands_reclaim="eager" if islands else "lazy",
        context_length=1 << 17,
        swa_full_tokens_ratio=ratio,
    )
    set_global_server_args_for_scheduler(sa)
    mc = ModelConfig.from_server_args(sa)
    req_to_token_pool = ReqToTokenPool(
        size=max_reqs,
        max_context_len=mc.context_len + get_req_to_token_extra_context_len(sa),
        device="cpu",
        enable_memory_saver=False,
    )
    kv_pool = SWAKVPool(
        size=full_pool,
        size_swa=swa_pool,
        page_size=page,
        dtype=torch.float32,
        head_num=mc.get_num_kv_heads(1),
        head_dim=mc.head_dim,
        swa_attention_layer_ids=mc.swa_attention_layer_ids,
        full_attention_layer_ids=mc.full_attention_layer_ids,
        device="cpu",
        enable_kv_cache_copy=False,
        token_to_kv_pool_class=MHATokenToKVPool,
    )
    allocator = SWATokenToKVPoolAllocator(
        full_pool, swa_pool, page_size=page, dtype=torch.float32, device="cpu",
        kvcache=kv_pool, need_sort=False,
    )
    params = CacheInitParams(
        disable=False,
        req_to_token_pool=req_to_token_pool,
        token_to_kv_pool_allocator=allocator,
        page_size=page,
        eviction_policy=sa.radix_eviction_policy,
        chunked_prefill_size=chunk,
        sliding_window_size=mc.sliding_window_size,
        enable_overlap_schedule=False,
        swa_islands_decode_interval=sa.swa_islands_decode_interval,
        swa_islands_reclaim=sa.swa_islands_reclaim,
    )
    tree = create_tree_cache(
        TreeCacheBuildContext(
            server_args=sa, params=params, is_hybrid_swa=mc.is_hybrid_swa,
            is_hybrid_ssm=False, enable_hierarchical_cache=False, disable_radix_cache=False,
            effective_chunked_prefill_size=chunk, tp_worker=None, model_config=mc,
            tp_size=1, tp_rank=0, tp_group=None, full_tokens_per_layer=full_pool,
        )
    )
    return SimpleNamespace(server_args=sa, model_config=mc, req_to_token_pool=req_to_token_pool,
                           allocator=allocator, tree=tree, page=page, chunk=chunk)


def make_req(rid, input_ids, max_new_tokens=1):
    sp = SamplingParams(max_new_tokens=max_new_tokens, ignore_eos=True)
    sp.normalize(None)
    sp.verify(VOCAB)
    req = Req(rid, "", array("q", input_ids), sp, eos_token_ids=None, vocab_size=VOCAB)
    req.tokenizer = None
    return req


def prefill(stack, req, on_commit=lambda req: None):
    """Chunked prefill of one request, as the scheduler runs it without overlap: every middle
    chunk is committed (maybe_cache_unfinished_req(chunked=True)) before the next is admitted,
    the last chunk after its token; `on_commit(req)` runs after each commit. Then finish it."""
    running = ScheduleBatch(reqs=[], batch_is_full=False)

    def adder():
        return PrefillAdder(
            stack.page, stack.tree, stack.allocator, running, 0.7,
            stack.server_args.max_prefill_tokens, stack.chunk, 0, 0, max_prefill_bs=0,
            max_running_requests=8,
        )

    req.init_next_round_input(stack.tree)
    a = adder()
    a.add_one_req(req, has_chunked_req=False, truncation_align_size=None)
    assert a.can_run_list == [req], "the request was not admitted"
    chunked = a.new_chunked_req
    while True:
        batch = ScheduleBatch.init_new(
            [req], stack.req_to_token_pool, stack.allocator, stack.tree, stack.model_config,
            False, SpeculativeAlgorithm.from_string(None), chunked_req=chunked,
        )
        batch.prepare_for_extend()
        if chunked is None:
            break
        maybe_cache_unfinished_req(req, stack.tree, chunked=True)
        on_commit(req)
        req.init_next_round_input()
        chunked = adder().add_chunked_req(req)
    req.output_ids.append(5)
    req.update_finish_state()
    maybe_cache_unfinished_req(req, stack.tree)
    on_commit(req)
    release_kv_cache(req, stack.tree)
