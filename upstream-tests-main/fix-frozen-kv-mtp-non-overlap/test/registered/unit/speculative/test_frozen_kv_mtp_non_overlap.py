"""Frozen-KV MTP (Gemma 4's assistant drafter) on the non-overlap scheduler: on CPU the argument
resolution turns the overlap schedule off, as it does for EAGLE and NGRAM (the overlap loop runs
a Triton kernel, gather_spec_extras, that has no CPU driver), and the worker takes the
``pp_proxy_tensors`` keyword the non-overlap scheduler passes to every speculative worker (it
raised "unexpected keyword argument 'pp_proxy_tensors'" on the first prefill). No server, no
model (SGLANG_USE_CPU_ENGINE=1 on a machine without an accelerator, as in the CPU image)."""

import inspect
import unittest
from types import SimpleNamespace as NS

from sglang.srt.arg_groups.speculative_hook import _handle_frozen_kv_mtp, resolving_view
from sglang.srt.speculative.frozen_kv_mtp_worker_v2 import FrozenKVMTPWorkerV2
from sglang.test.ci.ci_register import register_cpu_ci

try:
    from sglang.test.test_utils import CustomTestCase
except ImportError:  # test_utils needs the benchmark extras (e.g. datasets)
    CustomTestCase = unittest.TestCase

register_cpu_ci(est_time=5, suite="base-a-test-cpu")


def _args(device):
    return NS(
        device=device,
        disable_overlap_schedule=False,
        max_running_requests=None,
        enable_mixed_chunk=False,
    )


class TestFrozenKVMTPNonOverlap(CustomTestCase):
    def test_cpu_resolution_disables_the_overlap_schedule(self):
        args = _args("cpu")
        _handle_frozen_kv_mtp(args)
        view = resolving_view(args)
        self.assertTrue(view.disable_overlap_schedule)
        self.assertEqual(view.max_running_requests, 48)

    def test_a_gpu_keeps_the_overlap_schedule(self):
        args = _args("cuda")
        _handle_frozen_kv_mtp(args)
        self.assertFalse(resolving_view(args).disable_overlap_schedule)

    def test_the_worker_takes_the_non_overlap_schedulers_keyword(self):
        params = inspect.signature(
            FrozenKVMTPWorkerV2.forward_batch_generation
        ).parameters
        self.assertIn("pp_proxy_tensors", params)
        self.assertIsNone(params["pp_proxy_tensors"].default)


if __name__ == "__main__":
    unittest.main()
