"""Scheduler._add_request_to_queue tells the tree cache when a request joins the waiting queue
(patches-main 0010): ``tree_cache.on_request_queued(req)`` once, right after the request is
appended (so it is in the queue when the cache is told), for new and for retracted requests; a
request refused on the way in (its priority, the queued-request limit) is not reported. The
scheduler's collaborators are stand-ins; the requests are real ``Req``s."""

import unittest
from array import array
from unittest import mock

from sglang.srt.disaggregation.utils import DisaggregationMode
from sglang.srt.managers.schedule_batch import Req
from sglang.srt.managers.scheduler import Scheduler
from sglang.srt.sampling.sampling_params import SamplingParams
from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler
from sglang.test.ci.ci_register import register_cpu_ci

register_cpu_ci(est_time=5, suite="base-a-test-cpu")


def make_req(rid: str) -> Req:
    params = SamplingParams(temperature=0, max_new_tokens=4)
    params.normalize(None)
    return Req(
        rid=rid,
        origin_input_text="",
        origin_input_ids=array("q", [5, 6, 7]),
        sampling_params=params,
    )


class TestRequestQueuedHook(unittest.TestCase):
    def setUp(self):
        set_global_server_args_for_scheduler(
            ServerArgs(model_path="dummy", page_size=1)
        )
        self.calls = []
        self.sched = mock.MagicMock()
        self.sched.disaggregation_mode = DisaggregationMode.NULL
        self.sched.waiting_queue = []
        self.sched._set_or_validate_priority.return_value = True
        self.sched._abort_on_queued_limit.return_value = False
        self.sched.tree_cache.on_request_queued.side_effect = (
            lambda req: self.calls.append(
                (req.rid, [r.rid for r in self.sched.waiting_queue])
            )
        )

    def test_a_new_request_is_reported_once_after_it_joined_the_queue(self):
        Scheduler._add_request_to_queue(self.sched, make_req("a"))
        Scheduler._add_request_to_queue(self.sched, make_req("b"))
        self.assertEqual(self.calls, [("a", ["a"]), ("b", ["a", "b"])])

    def test_a_retracted_request_is_reported_again(self):
        req = make_req("a")
        Scheduler._add_request_to_queue(self.sched, req)
        self.sched.waiting_queue.clear()  # admitted
        Scheduler._add_request_to_queue(self.sched, req, is_retracted=True)
        self.assertEqual(self.calls, [("a", ["a"]), ("a", ["a"])])

    def test_a_refused_request_is_not_reported(self):
        self.sched._set_or_validate_priority.return_value = False
        Scheduler._add_request_to_queue(self.sched, make_req("bad-priority"))
        self.sched._set_or_validate_priority.return_value = True
        self.sched._abort_on_queued_limit.return_value = True
        Scheduler._add_request_to_queue(self.sched, make_req("over-limit"))
        self.assertEqual(self.calls, [])
        self.assertEqual(self.sched.waiting_queue, [])


if __name__ == "__main__":
    unittest.main()
