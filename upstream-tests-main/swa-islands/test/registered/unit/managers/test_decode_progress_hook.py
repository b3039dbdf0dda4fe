"""process_batch_result_decode tells the tree cache about each decode step
(patches-main 0006): ``tree_cache.on_decode_progress(req, accepted)`` once per request still
running after the step, with the tokens the step committed (1 for normal decode, the accept
length for speculative decode), after the finish-state handling; a request the step finished is
not reported. The scheduler's collaborators are stand-ins; the requests are real ``Req``s."""

import unittest
from array import array
from unittest import mock

from sglang.srt.managers.schedule_batch import Req
from sglang.srt.managers.scheduler_components.batch_result_processor import (
    SchedulerBatchResultProcessor,
)
from sglang.srt.sampling.sampling_params import SamplingParams
from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler
from sglang.test.ci.ci_register import register_cpu_ci

register_cpu_ci(est_time=5, suite="base-a-test-cpu")


def make_req(rid: str, max_new_tokens: int) -> Req:
    params = SamplingParams(
        temperature=0, max_new_tokens=max_new_tokens, ignore_eos=True
    )
    params.normalize(None)
    req = Req(
        rid=rid,
        origin_input_text="",
        origin_input_ids=array("q", [5, 6, 7]),
        sampling_params=params,
    )
    req.output_ids.append(9)  # the prefill's token
    return req


class TestDecodeProgressHook(unittest.TestCase):
    def setUp(self):
        set_global_server_args_for_scheduler(
            ServerArgs(model_path="dummy", page_size=1)
        )

    def run_step(self, reqs, accepted, *, spec: bool):
        calls = []
        processor = mock.MagicMock()
        processor.enable_overlap = processor.enable_overlap_mlx = False
        processor.beam_coordinator.commit_decode.return_value = set()
        processor.metrics_reporter.num_generated_tokens = 0
        processor.metrics_reporter.forward_ct_decode = 0
        processor.tree_cache.on_decode_progress.side_effect = (
            lambda req, n: calls.append((req.rid, n, req.finished()))
        )
        tokens = [[11 + j for j in range(n)] for n in accepted]
        processor._normalize_decode_outputs.return_value = (tokens, None)
        # the finish handling runs before the hook: it releases a finished request
        processor._handle_finish_state_updated_req.side_effect = (
            lambda req, *a: calls.append((req.rid, "finish-handling"))
        )
        batch = mock.MagicMock()
        batch.reqs = reqs
        batch.spec_algorithm.is_none.return_value = not spec
        batch.return_logprob = False
        result = mock.MagicMock()
        result.copy_done = None
        result.routed_experts_output = result.indexer_topk_output = None
        result.auxiliary_host_output = None
        SchedulerBatchResultProcessor.process_batch_result_decode(
            processor, batch, result
        )
        return calls

    def test_each_running_request_is_reported_once_with_its_accept_length(self):
        reqs = [make_req("a", 100), make_req("b", 100), make_req("c", 100)]
        calls = self.run_step(reqs, [3, 1, 8], spec=True)
        self.assertEqual(
            calls,
            [
                ("a", "finish-handling"),
                ("a", 3, False),
                ("b", "finish-handling"),
                ("b", 1, False),
                ("c", "finish-handling"),
                ("c", 8, False),
            ],
        )
        self.assertEqual([len(r.output_ids) for r in reqs], [4, 2, 9])

    def test_normal_decode_reports_one_token(self):
        calls = self.run_step([make_req("a", 100)], [1], spec=False)
        self.assertEqual(calls, [("a", "finish-handling"), ("a", 1, False)])

    def test_a_request_the_step_finished_is_not_reported(self):
        reqs = [make_req("done", 2), make_req("runs", 100)]
        calls = self.run_step(reqs, [1, 1], spec=False)
        self.assertTrue(reqs[0].finished())
        self.assertEqual(
            calls,
            [
                ("done", "finish-handling"),
                ("runs", "finish-handling"),
                ("runs", 1, False),
            ],
        )


if __name__ == "__main__":
    unittest.main()
