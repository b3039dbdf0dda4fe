"""DFLASH spec-v2 decode frees out-of-window SWA KV like the EAGLE path.

`DFlashDraftInputV2.prepare_for_decode` on a real ScheduleBatch over a real hybrid SWA pool,
allocator, req-to-token pool and SWARadixCache, on CPU (SGLANG_USE_CPU_ENGINE=1 on a machine
without an accelerator). No drafter and no model run: DFLASH end to end needs a GPU drafter."""

import unittest
from array import array
from types import SimpleNamespace
from unittest.mock import patch

import torch

from sglang.srt.managers.schedule_batch import Req, ScheduleBatch
from sglang.srt.mem_cache.allocator.swa import SWATokenToKVPoolAllocator
from sglang.srt.mem_cache.cache_init_params import CacheInitParams
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, ReqToTokenPool
from sglang.srt.mem_cache.swa_memory_pool import SWAKVPool
from sglang.srt.mem_cache.swa_radix_cache import SWARadixCache
from sglang.srt.model_executor.forward_batch_info import ForwardMode
from sglang.srt.sampling.sampling_params import SamplingParams
from sglang.srt.speculative.dflash_info_v2 import DFlashDraftInputV2
from sglang.test.ci.ci_register import register_cpu_ci

try:
    from sglang.test.test_utils import CustomTestCase
except ImportError:  # test_utils needs the benchmark extras (e.g. datasets)
    CustomTestCase = unittest.TestCase

register_cpu_ci(est_time=5, suite="base-a-test-cpu")

WINDOW, PROMPT, BLOCK = 8, 64, 4  # sliding window, prompt tokens, DFLASH verify block
FULL_POOL, SWA_POOL = 512, 256
SERVER_ARGS = SimpleNamespace(speculative_num_draft_tokens=BLOCK)


class TestDFlashPrepareForDecodeEvictsSWA(CustomTestCase):
    def setUp(self):
        self.req_to_token_pool = ReqToTokenPool(
            size=2, max_context_len=FULL_POOL, device="cpu", enable_memory_saver=False
        )
        kv_pool = SWAKVPool(
            size=FULL_POOL,
            size_swa=SWA_POOL,
            page_size=1,
            dtype=torch.float32,
            head_num=1,
            head_dim=8,
            swa_attention_layer_ids=[0],
            full_attention_layer_ids=[1],
            device="cpu",
            enable_kv_cache_copy=False,
            token_to_kv_pool_class=MHATokenToKVPool,
        )
        self.allocator = SWATokenToKVPoolAllocator(
            FULL_POOL,
            SWA_POOL,
            page_size=1,
            dtype=torch.float32,
            device="cpu",
            kvcache=kv_pool,
            need_sort=False,
        )
        self.tree = SWARadixCache(
            params=CacheInitParams(
                disable=False,
                req_to_token_pool=self.req_to_token_pool,
                token_to_kv_pool_allocator=self.allocator,
                page_size=1,
                sliding_window_size=WINDOW,
            )
        )
        self.req = self._decoding_req()
        self.batch = ScheduleBatch(
            reqs=[self.req],
            req_to_token_pool=self.req_to_token_pool,
            token_to_kv_pool_allocator=self.allocator,
            tree_cache=self.tree,
            forward_mode=ForwardMode.DECODE,
            device="cpu",
            req_pool_indices=torch.tensor([self.req.req_pool_idx], dtype=torch.int64),
        )

    def _decoding_req(self):
        """A request past prefill (one token out) whose KV covers the next verify block."""
        sp = SamplingParams(max_new_tokens=64, ignore_eos=True)
        sp.normalize(None)
        req = Req("r0", "", array("q", range(4, 4 + PROMPT)), sp, vocab_size=1024)
        req.output_ids = [5]
        req.req_pool_idx = 1
        reserved = PROMPT + 2 * BLOCK
        loc = self.allocator.alloc(reserved)
        self.req_to_token_pool.write((req.req_pool_idx, slice(0, reserved)), loc.to(torch.int32))
        req.kv_committed_len = PROMPT
        req.kv_allocated_len = reserved
        return req

    def prepare_for_decode(self):
        with patch(
            "sglang.srt.speculative.dflash_info_v2.get_global_server_args",
            return_value=SERVER_ARGS,
        ), patch(
            "sglang.srt.managers.schedule_batch.get_global_server_args",
            return_value=SERVER_ARGS,
        ):
            DFlashDraftInputV2.create_idle_input("cpu").prepare_for_decode(self.batch)

    def test_second_decode_frees_the_swa_kv_before_the_window(self):
        free_swa = self.allocator.swa_available_size()
        # First decode after prefill: the evictor skips it (decode_batch_idx 0), as for EAGLE.
        self.prepare_for_decode()
        self.assertEqual(self.req.decode_batch_idx, 1)
        self.assertEqual(self.allocator.swa_available_size(), free_swa)
        # Second decode: SWA KV of tokens [0, seqlen - 1 - window) is out of the window.
        self.prepare_for_decode()
        self.assertEqual(self.req.decode_batch_idx, 2)
        freed = PROMPT - WINDOW
        self.assertEqual(self.req.swa_evicted_seqlen, freed)
        self.assertEqual(self.allocator.swa_available_size(), free_swa + freed)
        # Full-attention KV stays: the full pool gave nothing back.
        self.assertEqual(self.allocator.full_available_size(), FULL_POOL - PROMPT - 2 * BLOCK)

    def test_verify_block_reservation_is_unchanged(self):
        self.prepare_for_decode()
        self.assertEqual(self.req.kv_allocated_len, PROMPT + 2 * BLOCK)
        self.assertEqual(self.batch.seq_lens_sum, PROMPT)


if __name__ == "__main__":
    unittest.main()
