"""A hybrid sliding-window KV stack on CPU for the SWA-island unit tests of sglang 0.5.23, as
build_kv_cache makes it (page 1 unless asked, fp32, 4 layers, the last one full attention; 256 tokens in each
of the full and the SWA pool), a request committed chunk by chunk through
``checkpoint_kv_cache``, the scheduler's own commit, then decoded step by step as
``process_batch_result_decode`` commits tokens and finished through ``release_kv_cache``. No model
runs. (Upstream's
``sglang/test/kits/unified_radix_cache`` imports ``sglang.test.test_utils``, which needs the
benchmark extras, so these tests build the stack themselves.)"""

import dataclasses
from array import array

import torch

from sglang.srt.managers.schedule_batch import Req
from sglang.srt.mem_cache.allocator.swa import SWATokenToKVPoolAllocator
from sglang.srt.mem_cache.base_prefix_cache import MatchPrefixParams
from sglang.srt.mem_cache.cache_init_params import CacheInitParams
from sglang.srt.mem_cache.common import checkpoint_kv_cache, release_kv_cache
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


def build_params(
    *, max_num_reqs=10, kv_size=KV_SIZE, page_size=1, **fields
) -> CacheInitParams:
    """The stack, and the CacheInitParams of its tree cache (``fields`` override them)."""
    set_global_server_args_for_scheduler(
        ServerArgs(model_path="dummy", page_size=page_size)
    )
    kv_pool = SWAKVPool(
        size=kv_size,
        size_swa=kv_size,
        page_size=page_size,
        dtype=torch.float32,
        head_num=2,
        head_dim=16,
        swa_attention_layer_ids=[i for i in range(LAYERS) if i not in FULL_LAYERS],
        full_attention_layer_ids=list(FULL_LAYERS),
        device="cpu",
    )
    allocator = SWATokenToKVPoolAllocator(
        size=kv_size,
        size_swa=kv_size,
        page_size=page_size,
        dtype=torch.float32,
        device="cpu",
        kvcache=kv_pool,
        need_sort=False,
    )
    pool = ReqToTokenPool(
        size=max_num_reqs, max_context_len=512, device="cpu", enable_memory_saver=False
    )
    params = CacheInitParams(
        disable=False,
        req_to_token_pool=pool,
        token_to_kv_pool_allocator=allocator,
        page_size=page_size,
        sliding_window_size=WINDOW_LEFT,
        tree_components=(ComponentType.FULL, ComponentType.SWA),
    )
    return dataclasses.replace(params, **fields)


def match_prefix(cache, tokens):
    return cache.match_prefix(MatchPrefixParams(key=RadixKey(array("q", tokens))))


def make_prefilling_req(cache, prompt, rid="r0") -> Req:
    """A request whose whole prompt has KV slots of its own, nothing committed to the tree yet."""
    params_pool = cache.req_to_token_pool
    req = Req(
        rid=rid,
        origin_input_text="",
        origin_input_ids=array("q", prompt),
        sampling_params=SamplingParams(temperature=0, max_new_tokens=1),
    )
    params_pool.alloc([req])
    req.full_untruncated_fill_ids = array("q", prompt)
    kv = alloc_extend(cache, len(prompt))
    params_pool.write((req.kv.req_pool_idx, slice(0, len(prompt))), kv)
    req.kv.kv_committed_len = req.kv.kv_allocated_len = len(prompt)
    req.last_node = cache.root_node_handle()
    req.lock = None
    req.extra_key = None
    req.prefix_len = 0
    return req


def _i64(values):
    return torch.tensor(values, dtype=torch.int64)


def alloc_extend(cache, n: int):
    """KV slots for an n-token prompt with nothing cached, as the scheduler allocates them."""
    allocator = cache.token_to_kv_pool_allocator
    if allocator.page_size == 1:
        return allocator.alloc(n)
    zero, seq = _i64([0]), _i64([n])
    return allocator.alloc_extend(zero, zero, seq, seq, _i64([-1]), n)


def alloc_decode(cache, req, pos: int):
    """The KV slot of position ``pos`` (``alloc_for_decode``: the next slot of the last page)."""
    allocator = cache.token_to_kv_pool_allocator
    if allocator.page_size == 1:
        return allocator.alloc(1)
    last = cache.req_to_token_pool.req_to_token[req.kv.req_pool_idx, pos - 1 : pos].to(
        torch.int64
    )
    return allocator.alloc_decode(_i64([pos + 1]), _i64([pos + 1]), last)


def commit_chunk(cache, req, end: int) -> None:
    """The scheduler's commit of a prefill chunk that ends at ``end``."""
    req.extend_end = end
    checkpoint_kv_cache(req, cache)


def computed_len(req) -> int:
    """Tokens whose KV is written once a step's tokens are committed (not the newest)."""
    return len(req.origin_input_ids) + len(req.output_ids) - 1


def decode_step(
    cache, req, tokens, *, swa_eviction_interval=None, overlap=False
) -> None:
    """One decode step that committed ``tokens`` (1, or a speculative accept length), as the
    scheduler runs it: the step's KV slots (the positions it computed), main's decode SWA evictor
    (``maybe_evict_swa`` -> ``evict_sliding_windows``, every ``swa_eviction_interval`` tokens, off
    with None), the tokens appended (``process_batch_result_decode``), then the tree cache told
    (``on_decode_progress``; a no-op on stock main). ``overlap``: the overlap scheduler's order
    for one-token steps, where the next step is allocated (``alloc_for_decode`` raises
    ``kv_committed_len``) and launched before this step's result is processed."""
    pool = cache.req_to_token_pool
    end = computed_len(req) + len(tokens)  # the step computed KV for [computed, end)
    start = req.kv.kv_allocated_len
    for pos in range(start, end):
        kv = alloc_decode(cache, req, pos)
        assert kv is not None, "the test's KV pool is too small"
        pool.write((req.kv.req_pool_idx, slice(pos, pos + 1)), kv)
        req.kv.kv_committed_len = req.kv.kv_allocated_len = pos + 1
    if swa_eviction_interval is not None:
        from sglang.srt.mem_cache.unified_cache.components import ComponentType

        window_left = cache.swa_retain_window
        if end - 1 - window_left >= (
            req.kv.get_evicted_seqlen(ComponentType.SWA) + swa_eviction_interval
        ):
            cache.evict_sliding_windows(req, end - 1)
    req.output_ids.extend(tokens)
    if overlap:
        pos = (
            req.kv.kv_allocated_len
        )  # the newest token's position: the launched step's
        pool.write(
            (req.kv.req_pool_idx, slice(pos, pos + 1)), alloc_decode(cache, req, pos)
        )
        req.kv.kv_committed_len = req.kv.kv_allocated_len = pos + 1
    cache.on_decode_progress(req, len(tokens))


def finish_prefill(req, first_token) -> None:
    """The prefill's result: the whole prompt computed, its first output token sampled."""
    req.output_ids.append(first_token)


def release(cache, req, how: str) -> None:
    """Give the request back as the scheduler does: ``finish`` (length, inserted),
    ``abort`` (not inserted) or ``retract`` (preempted, not inserted, reset to re-run).
    """
    from sglang.srt.managers.schedule_batch import FINISH_ABORT, FINISH_LENGTH

    if how == "finish":
        req.finished_reason = FINISH_LENGTH(length=len(req.output_ids))
        release_kv_cache(req, cache, checkpoint=True)
    elif how == "abort":
        req.finished_reason = FINISH_ABORT()
        release_kv_cache(req, cache, checkpoint=False)
    elif how == "retract":
        release_kv_cache(req, cache, checkpoint=False)
        req.reset_for_retract()
    else:
        raise ValueError(how)
