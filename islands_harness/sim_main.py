"""The model-free scheduler glue of :mod:`islands_harness.sim`, for sglang 0.5.23 (upstream main).

Runs only in a 0.5.23 environment (`.venv-main` for the stock arms, `.venv-main-islands` for the
island arms). Follows ``Scheduler.event_loop_normal`` of 0.5.23 without overlap, speculative
decoding, mixed chunks, priorities, LoRA, L3 storage or disaggregation:

- new and retracted requests join the waiting queue through the installed
  ``Scheduler._add_request_to_queue`` (with the islands series it tells the tree cache, patch
  0010);
- ``get_next_batch_to_run``: ``stash_chunked_request`` (``checkpoint_kv_cache`` when the chunk
  computed new KV), the last extend batch filtered and merged into the running batch, then
  ``_get_new_batch_prefill_raw`` (``PrefillAdder``: ``add_chunked_req`` after
  ``init_next_round_input()``, ``add_one_req`` after ``init_next_round_input(tree)``, the
  request-row budget of ``get_num_allocatable_reqs``), ``ScheduleBatch.init_new`` and
  ``prepare_for_extend``; else ``update_running_batch`` (``check_decode_mem``,
  ``retract_decode``, ``prepare_for_decode``, which runs main's decode SWA evictor);
- with ``--enable-hierarchical-cache`` in the args, HiCache's host tier as the server builds it
  (``create_tree_cache`` -> ``init_hicache``: the controller and host pools; patches-main/0012
  runs it on a CPU device pool): ``check_hicache_events`` at the start of each iteration (as
  ``get_next_batch_to_run``), ``ready_to_load_host_cache`` before ``prepare_for_extend``, and the
  load-backs ``PrefillAdder`` admits;
- ``run_batch``: no model runs; only ``forward_iter`` is set;
- ``process_batch_result_prefill`` / ``_decode`` (inside ``free_group_begin/end``): the token
  appended, ``update_finish_state``, ``release_kv_cache(checkpoint=True)`` on finish,
  ``checkpoint_kv_cache`` after a last chunk, and ``on_decode_progress`` for a request still
  running (patch 0006; stock 0.5.23 has no such call).

The new-token ratio is fixed (0.7, as in the 0.5.15 glue) so both targets admit by the same
estimate. Only the glue and the next token id are synthetic; every cache, pool, allocator, batch
and policy call is the installed SGLang code.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import warnings
from typing import Callable, List, Optional, Tuple

from islands_harness.sim_queue import WaitingQueueGlue
from islands_harness.stack import laguna_config_dir

NEW_TOKEN_RATIO = 0.7


@dataclasses.dataclass
class MainStackConfig:
    """The server a 0.5.23 scheduler runs for: the tiny Laguna config (``window`` = the HF config's
    ``sliding_window``), the shape, and ``args``, extra server flags exactly as a server boot takes
    them (``("--enable-swa-islands", "--swa-islands-eviction", "window")``)."""

    window: int = 32
    page: int = 1
    chunk: int = 512
    full_pool: int = 65536
    swa_pool: int = 8192
    max_reqs: int = 17
    args: Tuple[str, ...] = ()
    context_len: int = 1 << 17


@dataclasses.dataclass
class MainStack:
    cfg: MainStackConfig
    server_args: object
    model_config: object
    req_to_token_pool: object
    allocator: object
    tree: object


def main_server_args(cfg: MainStackConfig):
    """``ServerArgs`` as ``sglang serve`` resolves them (``prepare_server_args``: the CLI parser,
    then every resolution hook, so an island flag is checked and defaulted as on a server)."""
    from sglang.srt.server_args import prepare_server_args

    return prepare_server_args([
        "--model-path", laguna_config_dir(cfg.window), "--device", "cpu",
        "--attention-backend", "torch_native", "--page-size", str(cfg.page),
        "--chunked-prefill-size", str(cfg.chunk), "--disable-overlap-schedule",
        "--skip-tokenizer-init", "--context-length", str(cfg.context_len), *cfg.args,
    ])


def build_main_stack(cfg: Optional[MainStackConfig] = None, **kw) -> MainStack:
    """Server args (published for the scheduler), model config, pools and allocator, and the tree
    cache the 0.5.23 registry builds for them (``create_tree_cache``: ``UnifiedRadixCache``, or
    ``SWAIslandUnifiedRadixCache`` under ``--enable-swa-islands``), in the scheduler's order."""
    cfg = cfg or MainStackConfig(**kw)
    os.environ.setdefault("SGLANG_USE_CPU_ENGINE", "1")
    if cfg.page > 1:
        os.environ.setdefault("TRITON_INTERPRET", "1")
    logging.getLogger("sglang").setLevel(logging.WARNING)
    warnings.filterwarnings("ignore")
    import torch

    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.mem_cache.allocator.swa import SWATokenToKVPoolAllocator
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.memory_pool import ReqToTokenPool
    from sglang.srt.mem_cache.registry import TreeCacheBuildContext, create_tree_cache
    from sglang.srt.mem_cache.swa_memory_pool import SWAKVPool
    from sglang.srt.mem_cache.unified_cache.components import ComponentType
    from sglang.srt.runtime_context import get_memory
    from sglang.srt.server_args import set_global_server_args_for_scheduler

    sa = main_server_args(cfg)
    set_global_server_args_for_scheduler(sa)
    mc = ModelConfig.from_server_args(sa)
    assert mc.is_hybrid_swa, "the tiny Laguna config must be hybrid SWA"
    req_to_token_pool = ReqToTokenPool(size=cfg.max_reqs, max_context_len=mc.context_len + 8,
                                       device="cpu", enable_memory_saver=False)
    kv_pool = SWAKVPool(
        size=cfg.full_pool, size_swa=cfg.swa_pool, page_size=cfg.page, dtype=torch.float32,
        head_num=1, head_dim=8, swa_attention_layer_ids=mc.swa_attention_layer_ids,
        full_attention_layer_ids=mc.full_attention_layer_ids, device="cpu",
    )
    allocator = SWATokenToKVPoolAllocator(
        size=cfg.full_pool, size_swa=cfg.swa_pool, page_size=cfg.page, dtype=torch.float32,
        device="cpu", kvcache=kv_pool, need_sort=False,
    )
    memory = get_memory()  # the resolved settings, as kv_cache_builder reads them
    island = {k: getattr(memory, k) for k in ("enable_swa_islands", "swa_islands_reclaim",
                                              "swa_islands_decode_interval", "swa_islands_eviction")
              if hasattr(memory, k)}  # the series' CacheInitParams fields (stock 0.5.23 has none)
    params = CacheInitParams(
        disable=False, req_to_token_pool=req_to_token_pool, token_to_kv_pool_allocator=allocator,
        page_size=cfg.page, eviction_policy=sa.radix_eviction_policy,
        chunked_prefill_size=cfg.chunk, sliding_window_size=mc.sliding_window_size,
        tree_components=(ComponentType.FULL, ComponentType.SWA), **island,
    )
    hicache = bool(memory.enable_hierarchical_cache)
    tree = create_tree_cache(TreeCacheBuildContext(
        server_args=sa, params=params, is_hybrid_swa=True, is_hybrid_ssm=False,
        enable_hierarchical_cache=hicache, disable_radix_cache=False,
        tp_worker=_NoModelWorker() if hicache else None,
        model_config=mc, tp_size=1, tp_rank=0, tp_group=None, full_tokens_per_layer=cfg.full_pool,
    ))
    return MainStack(cfg, sa, mc, req_to_token_pool, allocator, tree)


class _NoModelWorker:
    """The tp worker a host tier registers its per-layer load counter with; no forward waits on
    it here (a load copies at submission on a CPU device pool, ``patches-main/0012``)."""

    layer_transfer_counter = None

    def register_hicache_layer_transfer_counter(self, counter) -> None:
        self.layer_transfer_counter = counter


class MainMiniScheduler(WaitingQueueGlue):
    """One scheduler iteration per :meth:`step`, as 0.5.23's normal event loop runs it (see the
    module docstring); ``finished`` lists requests in finishing order, ``retractions`` counts
    ``retract_decode``'s victims."""

    def __init__(self, stack: MainStack, *, max_running: int = 8,
                 next_token: Optional[Callable[[object], int]] = None):
        from sglang.srt.managers.schedule_batch import ScheduleBatch
        from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

        self.s = stack
        self.tree = stack.tree
        self.max_running = max_running
        self.next_token = next_token or (lambda req: 5 + (len(req.output_ids) * 7) % 97)
        self.waiting: List = []
        self.running_batch = ScheduleBatch(reqs=[], batch_is_full=False)
        self.chunked_req = None
        self.last_batch = None
        self.forward_ct = 0
        self.spec = SpeculativeAlgorithm.from_string(None)
        self.finished: List = []
        self.retractions = 0
        self.hicache = getattr(self.tree, "cache_controller", None) is not None

    # ---- requests -------------------------------------------------------------------------

    def submit(self, rid: str, input_ids, max_new_tokens: int):
        req = self.make_req(rid, input_ids, max_new_tokens)
        self._queue(req)
        return req

    def idle(self) -> bool:
        return (not self.waiting and self.chunked_req is None and self.running_batch.is_empty()
                and (self.last_batch is None or self.last_batch.is_empty()))

    # ---- one scheduler iteration ------------------------------------------------------------

    def _adder(self):
        from sglang.srt.managers.schedule_policy import PrefillAdder

        cfg = self.s.cfg
        return PrefillAdder(
            cfg.page, self.tree, self.s.allocator, self.running_batch, NEW_TOKEN_RATIO,
            self.s.server_args.max_prefill_tokens, cfg.chunk, 0, 0, max_prefill_bs=0,
            max_running_requests=self.max_running, prefill_max_requests=None,
            prefill_delayer_single_pass=None, dllm_config=None,
            waiting_queue_len=len(self.waiting),
        )

    def _allocatable_reqs(self, num_held_rows: int = 0) -> int:
        """``Scheduler.get_num_allocatable_reqs`` on one pipeline stage without beams: free
        request rows (plus those the counted requests already hold), at most the running cap."""
        rows = self.s.req_to_token_pool.available_size() + num_held_rows
        return max(0, min(self.max_running - len(self.running_batch.reqs), rows))

    def _get_new_batch_prefill(self):
        from sglang.srt.managers.schedule_batch import ScheduleBatch
        from sglang.srt.managers.schedule_policy import AddReqResult

        rb = self.running_batch
        rb.batch_is_full = False  # hybrid SWA: admission is retried every pass
        if not self.waiting and self.chunked_req is None:
            return None
        if self._allocatable_reqs() <= 0 and self.chunked_req is None:
            rb.batch_is_full = True
            return None
        adder = self._adder()
        if self.chunked_req is not None:
            self.chunked_req.init_next_round_input()
            self.chunked_req = adder.add_chunked_req(self.chunked_req)
        for req in list(self.waiting):
            if adder.budget_state() == AddReqResult.OTHER:
                break
            held = sum(r.kv.holds_kv for r in adder.can_run_list)
            if len(adder.can_run_list) >= self._allocatable_reqs(held):
                rb.batch_is_full = True
            if rb.batch_is_full:
                break
            req.init_next_round_input(self.tree)
            res = adder.add_one_req(req, has_chunked_req=(self.chunked_req is not None),
                                    truncation_align_size=None)
            if res != AddReqResult.CONTINUE:
                if res == AddReqResult.NO_TOKEN:
                    rb.batch_is_full = len(adder.can_run_list) > 0 or not rb.is_empty()
                break
        can_run = adder.can_run_list
        if not can_run:
            return None
        chosen = set(can_run)
        self.waiting = [x for x in self.waiting if x not in chosen]
        if adder.new_chunked_req is not None:
            assert self.chunked_req is None
            self.chunked_req = adder.new_chunked_req
        if self.chunked_req is not None:
            self.chunked_req.inflight_middle_chunks += 1
        batch = ScheduleBatch.init_new(can_run, self.s.req_to_token_pool, self.s.allocator,
                                       self.tree, self.s.model_config, False, self.spec,
                                       chunked_req=self.chunked_req)
        batch.contains_last_prefill_chunk = self.chunked_req is None or len(can_run) != 1
        if self.hicache:
            batch.hicache_consumer_index = self.tree.ready_to_load_host_cache()
        batch.prepare_for_extend()
        batch.decoding_reqs = None
        return batch

    def _update_running_batch(self):
        batch = self.running_batch
        initial = batch.batch_size()
        if not batch.check_decode_mem():
            retracted, _, _ = batch.retract_decode()
            self.retractions += len(retracted)
            for r in retracted:
                self._queue(r, is_retracted=True)
        if batch.batch_size() < initial:
            batch.batch_is_full = False
        if batch.is_empty():
            return None
        batch.prepare_for_decode()
        return batch

    def step(self) -> Optional[str]:
        from sglang.srt.mem_cache.common import checkpoint_kv_cache

        if self.hicache:  # get_next_batch_to_run's _process_hicache_events
            self.tree.check_hicache_events()
        exclude = set()
        if self.chunked_req is not None:
            exclude.add(self.chunked_req)
            if self.chunked_req.extend_end > self.chunked_req.prefix_len:
                checkpoint_kv_cache(self.chunked_req, self.tree)  # stash_chunked_request
        lb = self.last_batch
        if lb is not None and lb.forward_mode.is_extend():
            if lb.chunked_req is not None:
                exclude.add(lb.chunked_req)
            lb.filter_batch(reqs_to_exclude=list(exclude))
            if not lb.is_empty() and lb is not self.running_batch:
                if self.running_batch.is_empty():
                    self.running_batch = lb
                else:
                    self.running_batch.merge_batch(lb)
        self.running_batch.filter_batch()

        batch = self._get_new_batch_prefill()
        if batch is None and not self.running_batch.is_empty():
            batch = self._update_running_batch()
        if batch is None:
            self.last_batch = None
            return None
        self.forward_ct += 1
        batch.forward_iter = self.forward_ct
        if batch.forward_mode.is_extend():
            self._process_prefill(batch)
        else:
            self._process_decode(batch)
        self.last_batch = batch
        return "extend" if batch.forward_mode.is_extend() else "decode"

    def _process_prefill(self, batch) -> None:
        from sglang.srt.mem_cache.common import checkpoint_kv_cache, release_kv_cache

        allocator = self.s.allocator
        allocator.free_group_begin()
        for req in batch.reqs:
            if (req.finished() and req.inflight_middle_chunks <= 0) or req.is_retracted:
                continue
            if req.inflight_middle_chunks > 0:
                req.inflight_middle_chunks -= 1
                continue
            req.output_ids.append(self.next_token(req))
            req.update_finish_state()
            if req.finished():
                release_kv_cache(req, self.tree, checkpoint=True)
                self.finished.append(req)
            else:
                checkpoint_kv_cache(req, self.tree)
        allocator.free_group_end()

    def _process_decode(self, batch) -> None:
        from sglang.srt.mem_cache.common import release_kv_cache

        allocator = self.s.allocator
        allocator.free_group_begin()
        progress = getattr(self.tree, "on_decode_progress", None)  # patch 0006
        for req in batch.reqs:
            if req.finished():
                continue
            req.output_ids.append(self.next_token(req))
            req.update_finish_state(1)
            if req.finished():
                release_kv_cache(req, self.tree, checkpoint=True)
                self.finished.append(req)
            elif progress is not None:
                progress(req, 1)
        allocator.free_group_end()

    def run(self, max_steps: int = 100000) -> int:
        steps = 0
        while steps < max_steps:
            if self.step() is None and self.idle():
                break
            steps += 1
        return steps
