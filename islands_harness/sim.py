"""A model-free copy of the scheduler's event-loop glue that drives the real SGLang classes.

Follows ``Scheduler.event_loop_normal`` of sglang 0.5.15.post1 (no overlap):

- new and retracted requests join the waiting queue through the installed
  ``Scheduler._add_request_to_queue`` (which tells the tree cache, patch 0014);
- ``get_next_batch_to_run``: ``stash_chunked_request`` (``maybe_cache_unfinished_req(chunked=True)``),
  merge the last extend batch into the running batch, ``PrefillAdder`` (``add_chunked_req`` /
  ``add_one_req`` after ``Req.init_next_round_input(tree)``), ``ScheduleBatch.init_new`` and
  ``prepare_for_extend``; else ``update_running_batch`` (``check_decode_mem``, ``retract_decode``,
  ``prepare_for_decode``);
- ``run_batch``: only ``forward_iter`` is set; no model runs;
- ``process_batch_result``: prefill (``maybe_cache_unfinished_req`` for the last chunk,
  ``release_kv_cache`` on finish) and decode (inside ``free_group_begin/end``), including the
  decode-island hook that the scheduler patch calls.

Only the glue and the next token id are synthetic; every cache, pool, allocator, batch and policy
call is the installed (patched) SGLang code.
"""

from __future__ import annotations

import random
from typing import Callable, List, Optional

from islands_harness.sim_queue import WaitingQueueGlue


class MiniScheduler(WaitingQueueGlue):
    def __init__(
        self,
        stack,
        *,
        max_running: int = 8,
        next_token: Optional[Callable[[object], int]] = None,
        on_event: Optional[Callable[[str, list], None]] = None,
        accept_len: Optional[Callable[[object], int]] = None,
        swa_pressure: bool = False,
    ):
        """``swa_pressure``: after every step, evict all evictable SWA from the tree (what an
        allocation would do under a full SWA pool), so anything a running request still reads but
        no longer locks is freed at once and the invariants catch it."""
        from sglang.srt.managers.schedule_batch import ScheduleBatch
        from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

        self.s = stack
        self.tree = stack.tree
        self.max_running = max_running
        self.next_token = next_token or (lambda req: 5 + (len(req.output_ids) * 7) % 97)
        self.on_event = on_event or (lambda label, reqs: None)
        self.accept_len = accept_len
        self.swa_pressure = swa_pressure
        self._accepted = {}
        self.waiting: List = []
        self.running_batch = ScheduleBatch(reqs=[], batch_is_full=False)
        self.chunked_req = None
        self.last_batch = None
        self.processing = None  # the batch whose results are being processed (events fire inside)
        self.forward_ct = 0
        self.spec = SpeculativeAlgorithm.from_string(None)
        self.finished: List = []
        self.retractions = 0
        self.all_reqs: List = []

    # ---- requests -------------------------------------------------------------------------

    def submit(self, rid: str, input_ids, max_new_tokens: int):
        req = self.make_req(rid, input_ids, max_new_tokens)
        self._queue(req)
        self.all_reqs.append(req)
        return req

    @property
    def running(self) -> List:
        reqs = list(self.running_batch.reqs)
        if self.last_batch is not None and self.last_batch.forward_mode.is_extend():
            reqs += [r for r in self.last_batch.reqs if r not in reqs]
        if self.chunked_req is not None and self.chunked_req not in reqs:
            reqs.append(self.chunked_req)
        if self.processing is not None:
            reqs += [r for r in self.processing.reqs if r not in reqs]
        return [r for r in reqs if r.req_pool_idx is not None and not r.finished()]

    def idle(self) -> bool:
        return not self.waiting and self.chunked_req is None and not self.running

    # ---- one scheduler iteration ------------------------------------------------------------

    def _adder(self):
        from sglang.srt.managers.schedule_policy import PrefillAdder

        cfg = self.s.cfg
        return PrefillAdder(
            cfg.page,
            self.tree,
            self.s.allocator,
            self.running_batch,
            0.7,
            self.s.server_args.max_prefill_tokens,
            cfg.chunk,
            0,
            0,
            max_prefill_bs=0,
            max_running_requests=self.max_running,
            prefill_max_requests=None,
            prefill_delayer_single_pass=None,
            dllm_config=None,
            waiting_queue_len=len(self.waiting),
        )

    def _get_new_batch_prefill(self):
        from sglang.srt.managers.schedule_batch import ScheduleBatch

        n_running = len(self.running_batch.reqs) + (self.chunked_req is not None)
        if not self.waiting and self.chunked_req is None:
            return None
        adder = self._adder()
        if self.chunked_req is not None:
            self.chunked_req.init_next_round_input()
            self.chunked_req = adder.add_chunked_req(self.chunked_req)
        for req in list(self.waiting):
            if n_running + len(adder.can_run_list) >= self.max_running:
                break
            if len(adder.can_run_list) >= self.s.req_to_token_pool.available_size():
                break
            req.init_next_round_input(self.tree)
            res = adder.add_one_req(
                req, has_chunked_req=(self.chunked_req is not None), truncation_align_size=None
            )
            if res.name != "CONTINUE":
                break
        can_run = adder.can_run_list
        if not can_run:
            return None
        self.waiting = [x for x in self.waiting if x not in set(can_run)]
        if adder.new_chunked_req is not None:
            assert self.chunked_req is None
            self.chunked_req = adder.new_chunked_req
        if self.chunked_req is not None:
            self.chunked_req.inflight_middle_chunks += 1
        batch = ScheduleBatch.init_new(
            can_run,
            self.s.req_to_token_pool,
            self.s.allocator,
            self.tree,
            self.s.model_config,
            False,
            self.spec,
            chunked_req=self.chunked_req,
        )
        batch.prepare_for_extend()
        return batch

    def _update_running_batch(self):
        batch = self.running_batch
        batch.filter_batch()
        if batch.is_empty():
            return None
        if not batch.check_decode_mem():
            retracted, _, aborted = batch.retract_decode(self.s.server_args)
            self.retractions += len(retracted)
            for r in retracted:
                self._queue(r, is_retracted=True)
            self.on_event("retract", retracted)
            if batch.is_empty():
                return None
        if self.accept_len is None:
            batch.prepare_for_decode()
        else:
            self._spec_prepare_for_decode(batch)
        return batch

    def _spec_prepare_for_decode(self, batch) -> None:
        """Speculative-decoding bookkeeping at page size 1: each request commits a variable
        accept length per step (``eagle_prepare_for_decode`` runs the SWA evictor first, then the
        worker writes KV for the accepted run; without over-allocation here)."""
        import torch

        from sglang.srt.mem_cache.common import alloc_token_slots
        from sglang.srt.model_executor.forward_batch_info import ForwardMode

        assert self.s.cfg.page == 1, "speculative emulation supports page size 1"
        batch.forward_mode = ForwardMode.DECODE
        batch.maybe_evict_swa()
        locs = []
        for i, req in enumerate(batch.reqs):
            a = max(1, int(self.accept_len(req)))
            a = min(a, req.sampling_params.max_new_tokens - len(req.output_ids))
            a = max(a, 1)
            loc = alloc_token_slots(batch.tree_cache, a)
            start = req.kv_allocated_len
            self.s.req_to_token_pool.write(
                (req.req_pool_idx, slice(start, start + a)), loc.to(torch.int32)
            )
            req.kv_committed_len += a
            req.kv_allocated_len += a
            req.decode_batch_idx += 1
            batch.seq_lens[i] += a
            batch.seq_lens_cpu[i] += a
            self._accepted[req.rid] = a
            locs.append(loc)
        batch.out_cache_loc = torch.cat(locs)
        batch.seq_lens_sum = None

    def step(self) -> Optional[str]:
        kind = self._step()
        if self.swa_pressure:
            from sglang.srt.mem_cache.base_prefix_cache import EvictParams

            self.tree.evict(EvictParams(num_tokens=0, swa_num_tokens=1 << 40))
        return kind

    def _step(self) -> Optional[str]:
        from sglang.srt.mem_cache.common import maybe_cache_unfinished_req

        exclude = []
        if self.chunked_req is not None:
            exclude.append(self.chunked_req)
            if self.chunked_req.extend_range.end > len(self.chunked_req.prefix_indices):
                maybe_cache_unfinished_req(self.chunked_req, self.tree, chunked=True)
                self.on_event("chunk_commit", [self.chunked_req])
        if self.last_batch is not None and self.last_batch.forward_mode.is_extend():
            if self.last_batch.chunked_req is not None:
                exclude.append(self.last_batch.chunked_req)
            self.last_batch.filter_batch(chunked_req_to_exclude=exclude)
            if not self.last_batch.is_empty():
                if self.running_batch.is_empty():
                    self.running_batch = self.last_batch
                else:
                    self.running_batch.merge_batch(self.last_batch)
        self.running_batch.batch_is_full = False

        batch = self._get_new_batch_prefill()
        if batch is None and not self.running_batch.is_empty():
            batch = self._update_running_batch()
        if batch is None:
            self.last_batch = None
            return None

        self.forward_ct += 1
        batch.forward_iter = self.forward_ct
        self.processing = batch
        try:
            if batch.forward_mode.is_extend():
                self._process_prefill(batch)
            else:
                self._process_decode(batch)
        finally:
            self.processing = None
        self.last_batch = batch
        return "extend" if batch.forward_mode.is_extend() else "decode"

    def _process_prefill(self, batch):
        from sglang.srt.mem_cache.common import maybe_cache_unfinished_req, release_kv_cache

        for req in batch.reqs:
            if req.finished() or req.is_retracted:
                continue
            if req.inflight_middle_chunks > 0:
                req.inflight_middle_chunks -= 1
                continue
            req.output_ids.append(self.next_token(req))
            req.update_finish_state()
            if req.finished():
                release_kv_cache(req, self.tree)
                self.finished.append(req)
                self.on_event("finish", [req])
            else:
                maybe_cache_unfinished_req(req, self.tree)
                self.on_event("last_chunk_commit", [req])

    def _process_decode(self, batch):
        from sglang.srt.mem_cache.common import release_kv_cache

        allocator = self.s.allocator
        allocator.free_group_begin()
        for req in batch.reqs:
            if req.finished():
                continue
            accepted = self._accepted.pop(req.rid, 1)
            req.output_ids.extend([self.next_token(req) for _ in range(accepted)])
            req.update_finish_state(accepted)
            if req.finished():
                release_kv_cache(req, self.tree, is_insert=True)
                self.finished.append(req)
                self.on_event("finish", [req])
            else:
                self._after_decode_token(req, accepted)
        allocator.free_group_end()
        self.on_event("decode", [r for r in batch.reqs if not r.finished()])

    def _after_decode_token(self, req, accept_len: int) -> None:
        """What the scheduler patch calls after a request's tokens are committed."""
        self.tree.on_decode_progress(req, accept_len)

    # ---- failure paths ------------------------------------------------------------------------

    def abort_chunked(self) -> None:
        """``Scheduler.process_pending_chunked_abort`` for the request in chunked prefill."""
        from sglang.srt.managers.schedule_batch import FINISH_ABORT
        from sglang.srt.mem_cache.common import release_kv_cache

        req = self.chunked_req
        assert req is not None, "no chunked request to abort"
        req.to_finish = None
        req.finished_reason = FINISH_ABORT("Aborted")
        if req.req_pool_idx is not None and not req.kv_committed_freed:
            release_kv_cache(req, self.tree, is_insert=False)
        self.chunked_req = None
        if self.last_batch is not None and req in self.last_batch.reqs:
            self.last_batch.filter_batch(chunked_req_to_exclude=[req])
            if self.last_batch.is_empty():
                self.last_batch = None
        self.finished.append(req)

    def retract_all_but_one(self) -> int:
        """Force ``retract_decode`` on the running batch (as under pool exhaustion)."""
        batch = self.running_batch
        batch.filter_batch()
        if len(batch.reqs) < 2:
            return 0
        retracted, _, _ = batch.retract_decode(self.s.server_args)
        self.retractions += len(retracted)
        for r in retracted:
            self._queue(r, is_retracted=True)
        return len(retracted)

    def run(self, max_steps: int = 100000, after_step: Optional[Callable[[], None]] = None) -> int:
        steps = 0
        while steps < max_steps:
            kind = self.step()
            if after_step is not None:
                after_step()
            if kind is None and self.idle():
                break
            steps += 1
        return steps


def random_prompt(rng: random.Random, n: int, vocab: int = 1000) -> List[int]:
    return [rng.randrange(4, vocab) for _ in range(n)]
