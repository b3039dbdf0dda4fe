"""The scheduler-side memory stack of a hybrid SWA model, built as the scheduler builds it.

``build_stack`` makes real ``ServerArgs`` + ``ModelConfig`` (from a tiny Laguna ``config.json``,
no weights), a ``ReqToTokenPool``, an ``SWAKVPool``, an ``SWATokenToKVPoolAllocator`` and the tree
cache from ``create_tree_cache``: ``SWARadixCache`` upstream, ``SWAIslandRadixCache`` with
``islands=True``. Page sizes > 1 need ``TRITON_INTERPRET=1`` on CPU (the paged allocator launches
Triton kernels); ``build_stack`` sets it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import tempfile
import warnings
from typing import Dict, Iterator, Optional

_CONFIG_DIRS: Dict[int, str] = {}


def laguna_config_dir(window: int) -> str:
    """A directory with a tiny hybrid ``LagunaForCausalLM`` config.json (window = model window)."""
    if window not in _CONFIG_DIRS:
        d = tempfile.mkdtemp(prefix=f"tiny-laguna-cfg-w{window}-")
        cfg = {
            "architectures": ["LagunaForCausalLM"],
            "model_type": "laguna",
            "vocab_size": 1024,
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 4,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "head_dim": 32,
            "max_position_embeddings": 1 << 17,
            "sliding_window": window,
            "layer_types": [
                "sliding_attention",
                "full_attention",
                "sliding_attention",
                "full_attention",
            ],
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
        _CONFIG_DIRS[window] = d
    return _CONFIG_DIRS[window]


@dataclasses.dataclass
class StackConfig:
    # HF config's sliding_window. Laguna has no get_attention_sliding_window_size, so the cache's
    # sliding_window_size equals it and the cache's model window is window + 1 (one token more
    # than needed, as on a real Laguna server); Gemma/GPT-OSS runners pass window - 1 instead.
    window: int = 32
    page: int = 1
    chunk: int = 256
    full_pool: int = 16384
    swa_pool: int = 8192
    max_reqs: int = 16
    islands: bool = True
    reclaim: str = "eager"  # --swa-islands-reclaim
    decode_interval: Optional[int] = None  # --swa-islands-decode-interval
    context_len: int = 1 << 17
    ratio: float = 0.8  # --swa-full-tokens-ratio as the startup checks see it (pools are explicit)
    enable_metrics: bool = False
    # the paged allocators' release_pages path (PD modes build them with need_sort=True)
    need_sort: bool = False
    env: Dict[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Stack:
    cfg: StackConfig
    server_args: object
    model_config: object
    req_to_token_pool: object
    kv_pool: object
    allocator: object
    tree: object

    @property
    def initial_free(self):
        return (self.allocator.size_full, self.allocator.size_swa)

    def free_sizes(self):
        return (self.allocator.full_available_size(), self.allocator.swa_available_size())


@contextlib.contextmanager
def env_overrides(env: Dict[str, str]) -> Iterator[None]:
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def stack_device() -> str:
    """Device of the KV tensors :func:`build_stack` builds: ``cpu``, or ``cuda`` with
    ``ISLANDS_TEST_DEVICE=cuda`` (``scripts/gpu_check.sh``)."""
    return os.environ.get("ISLANDS_TEST_DEVICE", "cpu")


def _prepare_process(cfg: StackConfig, device: str) -> None:
    """Process settings the stack needs before sglang is imported: on CPU the CPU engine, and the
    Triton interpreter for page sizes > 1 (the paged allocator launches Triton kernels); sglang's
    logging at WARNING and warnings ignored."""
    if device == "cpu":
        if cfg.page > 1:
            os.environ.setdefault("TRITON_INTERPRET", "1")
        os.environ.setdefault("SGLANG_USE_CPU_ENGINE", "1")
    logging.getLogger("sglang").setLevel(logging.WARNING)
    warnings.filterwarnings("ignore")


def _server_args(cfg: StackConfig, device: str):
    """The ``ServerArgs`` of a scheduler serving the tiny Laguna config with ``cfg``'s page,
    chunk, islands flags, context length and SWA ratio; installed as the scheduler's global
    server args."""
    from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler

    sa = ServerArgs(
        model_path=laguna_config_dir(cfg.window),
        device=device,
        attention_backend="torch_native",
        page_size=cfg.page,
        chunked_prefill_size=cfg.chunk,
        disable_overlap_schedule=True,
        skip_tokenizer_init=True,
        enable_swa_islands=cfg.islands,
        swa_islands_reclaim=cfg.reclaim if cfg.islands else "auto",
        swa_islands_decode_interval=cfg.decode_interval if cfg.islands else None,
        context_length=cfg.context_len,
        swa_full_tokens_ratio=cfg.ratio,
    )
    set_global_server_args_for_scheduler(sa)
    return sa


def _memory_pools(cfg: StackConfig, sa, mc, device: str):
    """``(req_to_token_pool, kv_pool, allocator)``: ``cfg.max_reqs`` request rows, an
    ``SWAKVPool`` of ``cfg.full_pool`` full and ``cfg.swa_pool`` SWA token slots (float32) and
    the ``SWATokenToKVPoolAllocator`` over it."""
    import torch

    from sglang.srt.mem_cache.allocator.swa import SWATokenToKVPoolAllocator
    from sglang.srt.mem_cache.common import get_req_to_token_extra_context_len
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, ReqToTokenPool
    from sglang.srt.mem_cache.swa_memory_pool import SWAKVPool

    req_to_token_pool = ReqToTokenPool(
        size=cfg.max_reqs,
        max_context_len=mc.context_len + get_req_to_token_extra_context_len(sa),
        device=device,
        enable_memory_saver=False,
    )
    kv_pool = SWAKVPool(
        size=cfg.full_pool,
        size_swa=cfg.swa_pool,
        page_size=cfg.page,
        dtype=torch.float32,
        head_num=mc.get_num_kv_heads(1),
        head_dim=mc.head_dim,
        swa_attention_layer_ids=mc.swa_attention_layer_ids,
        full_attention_layer_ids=mc.full_attention_layer_ids,
        device=device,
        enable_kv_cache_copy=False,
        token_to_kv_pool_class=MHATokenToKVPool,
    )
    allocator = SWATokenToKVPoolAllocator(
        cfg.full_pool,
        cfg.swa_pool,
        page_size=cfg.page,
        dtype=torch.float32,
        device=device,
        kvcache=kv_pool,
        need_sort=cfg.need_sort,
    )
    return req_to_token_pool, kv_pool, allocator


def _tree_cache(cfg: StackConfig, sa, mc, req_to_token_pool, allocator):
    """The tree cache ``create_tree_cache`` makes for this hybrid SWA scheduler (tp 1, no
    hierarchical cache): ``SWAIslandRadixCache`` with islands on, ``SWARadixCache`` without."""
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.registry import TreeCacheBuildContext, create_tree_cache

    params = CacheInitParams(
        disable=False,
        req_to_token_pool=req_to_token_pool,
        token_to_kv_pool_allocator=allocator,
        page_size=cfg.page,
        eviction_policy=sa.radix_eviction_policy,
        chunked_prefill_size=cfg.chunk,
        sliding_window_size=mc.sliding_window_size,
        enable_metrics=cfg.enable_metrics,
        enable_overlap_schedule=not sa.disable_overlap_schedule,
        swa_islands_decode_interval=sa.swa_islands_decode_interval,
        swa_islands_reclaim=sa.swa_islands_reclaim,
    )
    return create_tree_cache(
        TreeCacheBuildContext(
            server_args=sa,
            params=params,
            is_hybrid_swa=True,
            is_hybrid_ssm=False,
            enable_hierarchical_cache=False,
            disable_radix_cache=False,
            effective_chunked_prefill_size=cfg.chunk,
            tp_worker=None,
            model_config=mc,
            tp_size=1,
            tp_rank=0,
            tp_group=None,
            full_tokens_per_layer=cfg.full_pool,
        )
    )


def build_stack(cfg: Optional[StackConfig] = None, **kw) -> Stack:
    """The stack for ``cfg`` (or ``StackConfig(**kw)``), built in the scheduler's order: server
    args, model config (must be hybrid SWA), pools and allocator, tree cache.
    ``ISLANDS_TEST_DEVICE=cuda`` builds the same stack on a GPU (``scripts/gpu_check.sh``)."""
    cfg = cfg or StackConfig(**kw)
    device = stack_device()
    _prepare_process(cfg, device)
    from sglang.srt.configs.model_config import ModelConfig

    sa = _server_args(cfg, device)
    mc = ModelConfig.from_server_args(sa)
    assert mc.is_hybrid_swa, "tiny Laguna config must be hybrid SWA"
    req_to_token_pool, kv_pool, allocator = _memory_pools(cfg, sa, mc, device)
    tree = _tree_cache(cfg, sa, mc, req_to_token_pool, allocator)
    return Stack(cfg, sa, mc, req_to_token_pool, kv_pool, allocator, tree)
