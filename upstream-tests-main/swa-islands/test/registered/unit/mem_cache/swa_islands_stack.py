"""A hybrid sliding-window KV stack on CPU for the SWA-island unit tests of sglang 0.5.23, as
build_kv_cache makes it (page 1, fp32, 4 layers, the last one full attention; 256 tokens in each
of the full and the SWA pool), and a request committed chunk by chunk through
``checkpoint_kv_cache``, the scheduler's own commit. No model runs. (Upstream's
``sglang/test/kits/unified_radix_cache`` imports ``sglang.test.test_utils``, which needs the
benchmark extras, so these tests build the stack themselves.)"""

import dataclasses
from array import array

import torch

from sglang.srt.managers.schedule_batch import Req
from sglang.srt.mem_cache.allocator.swa import SWATokenToKVPoolAllocator
from sglang.srt.mem_cache.base_prefix_cache import MatchPrefixParams
from sglang.srt.mem_cache.cache_init_params import CacheInitParams
from sglang.srt.mem_cache.common import checkpoint_kv_cache
from sglang.srt.mem_cache.memory_pool import ReqToTokenPool
from sglang.srt.mem_cache.radix_cache import RadixKey
from sglang.srt.mem_cache.swa_memory_pool import SWAKVPool
from sglang.srt.mem_cache.unified_cache.components import ComponentType
from sglang.srt.sampling.sampling_params import SamplingParams
from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler

WINDOW_LEFT = 31  # the tree's sliding_window_size; the window w is 32 tokens
KV_SIZE = 256  # tokens in each of the full and the SWA pool
LAYERS, FULL_LAYERS = 4, (3,)
TREE_CORES = ("python", "rust")


def build_params(*, max_num_reqs=10, **fields) -> CacheInitParams:
    """The stack, and the CacheInitParams of its tree cache (``fields`` override them)."""
    set_global_server_args_for_scheduler(ServerArgs(model_path="dummy", page_size=1))
    kv_pool = SWAKVPool(
        size=KV_SIZE, size_swa=KV_SIZE, page_size=1, dtype=torch.float32, head_num=2,
        head_dim=16, swa_attention_layer_ids=[i for i in range(LAYERS) if i not in FULL_LAYERS],
        full_attention_layer_ids=list(FULL_LAYERS), device="cpu",
    )
    allocator = SWATokenToKVPoolAllocator(
        size=KV_SIZE, size_swa=KV_SIZE, page_size=1, dtype=torch.float32, device="cpu",
        kvcache=kv_pool, need_sort=False,
    )
    pool = ReqToTokenPool(size=max_num_reqs, max_context_len=512, device="cpu",
                          enable_memory_saver=False)
    params = CacheInitParams(
        disable=False, req_to_token_pool=pool, token_to_kv_pool_allocator=allocator,
        page_size=1, sliding_window_size=WINDOW_LEFT,
        tree_components=(ComponentType.FULL, ComponentType.SWA),
    )
    return dataclasses.replace(params, **fields)


def match_prefix(cache, tokens):
    return cache.match_prefix(MatchPrefixParams(key=RadixKey(array("q", tokens))))


def make_prefilling_req(cache, prompt, rid="r0") -> Req:
    """A request whose whole prompt has KV slots of its own, nothing committed to the tree yet."""
    params_pool = cache.req_to_token_pool
    req = Req(rid=rid, origin_input_text="", origin_input_ids=array("q", prompt),
              sampling_params=SamplingParams(temperature=0, max_new_tokens=1))
    params_pool.alloc([req])
    req.full_untruncated_fill_ids = array("q", prompt)
    kv = cache.token_to_kv_pool_allocator.alloc(len(prompt))
    params_pool.write((req.kv.req_pool_idx, slice(0, len(prompt))), kv)
    req.kv.kv_committed_len = req.kv.kv_allocated_len = len(prompt)
    req.last_node = cache.root_node_handle()
    req.lock = None
    req.extra_key = None
    req.prefix_len = 0
    return req


def commit_chunk(cache, req, end: int) -> None:
    """The scheduler's commit of a prefill chunk that ends at ``end``."""
    req.extend_end = end
    checkpoint_kv_cache(req, cache)
