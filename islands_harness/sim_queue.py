"""Requests made and queued as a scheduler does, with what ``Scheduler._add_request_to_queue``
reads on its scheduler, for the model-free glue of both targets (:mod:`islands_harness.sim` on 0.5.15.post1,
:mod:`islands_harness.sim_main` on 0.5.23): no disaggregation, priorities, queue limit or HiCache storage; the waiting queue is the
glue's ``waiting`` list and the tree cache its ``tree``. The installed scheduler's own method runs
on it, so a patch that makes it tell the tree cache is exercised as on a server."""

from __future__ import annotations

from typing import List


class WaitingQueueGlue:
    enable_priority_scheduling = False
    abort_on_priority_when_disabled = False
    max_queued_requests = None
    enable_hicache_storage = False
    enable_lmcache = False
    processed_tokens_counter = 0

    waiting: List
    tree: object
    s: object  # the stack (its model_config)

    def make_req(self, rid: str, input_ids, max_new_tokens: int):
        """A greedy ``Req`` of ``input_ids`` that generates exactly ``max_new_tokens``."""
        from array import array

        from sglang.srt.managers.schedule_batch import Req
        from sglang.srt.sampling.sampling_params import SamplingParams

        vocab = self.s.model_config.vocab_size
        sp = SamplingParams(max_new_tokens=max_new_tokens, ignore_eos=True)
        sp.normalize(None)
        sp.verify(vocab)
        req = Req(rid, "", array("q", input_ids), sp, eos_token_ids=None, vocab_size=vocab)
        req.tokenizer = None
        return req

    def _queue(self, req, is_retracted: bool = False) -> None:
        """The installed ``Scheduler._add_request_to_queue`` on this glue."""
        from sglang.srt.managers.scheduler import Scheduler

        Scheduler._add_request_to_queue(self, req, is_retracted=is_retracted)

    @property
    def disaggregation_mode(self):
        from sglang.srt.disaggregation.utils import DisaggregationMode

        return DisaggregationMode.NULL

    @property
    def waiting_queue(self) -> List:
        return self.waiting

    @property
    def tree_cache(self):
        return self.tree

    def _set_or_validate_priority(self, req) -> bool:
        from sglang.srt.managers.scheduler import Scheduler

        return Scheduler._set_or_validate_priority(self, req)

    def _abort_on_queued_limit(self, req) -> bool:
        from sglang.srt.managers.scheduler import Scheduler

        return Scheduler._abort_on_queued_limit(self, req)

    def _prefetch_kvcache(self, req) -> None:
        from sglang.srt.managers.scheduler import Scheduler

        return Scheduler._prefetch_kvcache(self, req)
