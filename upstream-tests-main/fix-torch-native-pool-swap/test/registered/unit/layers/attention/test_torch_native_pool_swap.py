"""TorchNativeAttnBackend reads the KV pool it holds at forward time: the Frozen-KV MTP draft
builds its backend on the draft's own (non-SWA) pool and swaps the target's SWAKVPool in for each
forward (``frozen_kv_mtp_utils.target_kv_pool_view``). The full -> SWA slot translation must
follow the swap: without it a sliding layer read the SWA pool with full-pool slot ids (wrong rows,
then "index 1025 is out of bounds" once ids passed the SWA pool's size). No server, no model: a
tiny SWAKVPool on CPU (SGLANG_USE_CPU_ENGINE=1 on a machine without an accelerator)."""

import unittest
from types import SimpleNamespace as NS

import torch

from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend
from sglang.srt.layers.radix_attention import AttentionType
from sglang.srt.mem_cache.swa_memory_pool import SWAKVPool
from sglang.test.ci.ci_register import register_cpu_ci

try:
    from sglang.test.test_utils import CustomTestCase
except ImportError:  # test_utils needs the benchmark extras (e.g. datasets)
    CustomTestCase = unittest.TestCase

register_cpu_ci(est_time=5, suite="base-a-test-cpu")

H, D, W, N = 2, 8, 3, 6  # heads, head dim, window_left, tokens
SWA_LAYER, FULL_LAYER = 0, 1


class TestTorchNativePoolSwap(CustomTestCase):
    def setUp(self):
        torch.manual_seed(0)
        self.pool = SWAKVPool(
            size=64,
            size_swa=16,
            page_size=1,
            dtype=torch.float32,
            head_num=H,
            head_dim=D,
            swa_attention_layer_ids=[SWA_LAYER],
            full_attention_layer_ids=[FULL_LAYER],
            device="cpu",
        )
        mapping = torch.zeros(65, dtype=torch.int64)
        mapping[-1] = -1
        self.pool.register_mapping(mapping)
        self.full = torch.arange(40, 40 + N)  # full ids past the SWA pool's 16 rows
        mapping[self.full] = torch.arange(1, N + 1)
        req_to_token = torch.zeros(2, 32, dtype=torch.int64)
        req_to_token[1, :N] = self.full
        draft_pool = NS()  # the draft's own pool: not an SWAKVPool
        runner = NS(
            device="cpu",
            req_to_token_pool=NS(req_to_token=req_to_token),
            token_to_kv_pool=draft_pool,
        )
        self.backend = TorchNativeAttnBackend(runner)
        self.q = torch.randn(N, H, D)
        self.k, self.v = (torch.randn(N, H, D) for _ in range(2))

    def _extend(self):
        layer = NS(
            layer_id=SWA_LAYER,
            qk_head_dim=D,
            v_head_dim=D,
            tp_q_head_num=H,
            tp_k_head_num=H,
            is_cross_attention=False,
            attn_type=AttentionType.DECODER,
            scaling=D**-0.5,
            sliding_window_size=W,
            k_scale=None,
            v_scale=None,
        )
        fb = NS(
            out_cache_loc=self.full,
            encoder_out_cache_loc=None,
            encoder_lens=None,
            req_pool_indices=torch.tensor([1]),
            seq_lens=torch.tensor([N]),
            extend_prefix_lens=torch.tensor([0]),
            extend_seq_lens=torch.tensor([N]),
            forward_mode=NS(is_target_verify=lambda: False),
        )
        self.backend.init_forward_metadata(fb)
        return self.backend.forward_extend(
            self.q.reshape(N, -1), self.k, self.v, layer, fb
        ).view(N, H * D)

    def test_a_swapped_in_swa_pool_is_read_through_the_translation(self):
        self.backend.token_to_kv_pool = self.pool  # as target_kv_pool_view does
        self.assertTrue(self.backend.use_sliding_window_kv_pool)
        out = self._extend()
        rows = self.pool.swa_kv_pool.get_key_buffer(0)[1 : N + 1]
        torch.testing.assert_close(rows, self.k)  # written at the translated SWA rows
        expected = []
        for t in range(N):
            k, v = self.k[max(0, t - W) : t + 1], self.v[max(0, t - W) : t + 1]
            s = torch.einsum("hd,khd->hk", self.q[t], k) * D**-0.5
            expected.append(torch.einsum("hk,khd->hd", s.softmax(-1), v).reshape(-1))
        torch.testing.assert_close(out, torch.stack(expected), atol=1e-5, rtol=1e-5)

    def test_the_construction_pool_is_not_read_as_swa(self):
        self.assertFalse(self.backend.use_sliding_window_kv_pool)


if __name__ == "__main__":
    unittest.main()
