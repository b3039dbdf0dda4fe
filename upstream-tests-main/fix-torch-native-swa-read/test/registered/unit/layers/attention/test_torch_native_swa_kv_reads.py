"""TorchNativeAttnBackend on a hybrid SWA pool: sliding-window layers must read their K/V through
the full-to-SWA slot mapping, like the writes. No server, no model: a tiny SWAKVPool on CPU
(SGLANG_USE_CPU_ENGINE=1 on a machine without an accelerator, as in the CPU image)."""

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

H, D, W, N = 2, 8, 3, 8  # heads, head dim, sliding window, prompt tokens
SWA_LAYER, FULL_LAYER = 0, 1


def _layer(layer_id):
    return NS(
        layer_id=layer_id,
        qk_head_dim=D,
        v_head_dim=D,
        tp_q_head_num=H,
        tp_k_head_num=H,
        is_cross_attention=False,
        attn_type=AttentionType.DECODER,
        scaling=D**-0.5,
        sliding_window_size=W if layer_id == SWA_LAYER else -1,
        k_scale=None,
        v_scale=None,
    )


class TestTorchNativeSWAKVReads(CustomTestCase):
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
        # Full-pool slot ids beyond the 16-slot SWA buffer: an untranslated read is out of range.
        self.full = torch.arange(40, 40 + N + 1)
        mapping[self.full] = torch.arange(1, N + 2)
        req_to_token = torch.zeros(2, 32, dtype=torch.int64)
        req_to_token[1, : N + 1] = self.full
        runner = NS(
            device="cpu",
            req_to_token_pool=NS(req_to_token=req_to_token),
            token_to_kv_pool=self.pool,
        )
        self.backend = TorchNativeAttnBackend(runner)
        self.q, self.k, self.v = (torch.randn(N + 1, H, D) for _ in range(3))

    def _reference(self, layer_id, t):
        """Token t attends to tokens max(0, t - W)..t on the SWA layer, 0..t on the full one."""
        s = torch.einsum("hd,khd->hk", self.q[t], self.k[: t + 1]) * D**-0.5
        if layer_id == SWA_LAYER:
            s[:, : max(t - W, 0)] = -float("inf")
        return torch.einsum("hk,khd->hd", s.softmax(-1), self.v[: t + 1]).reshape(-1)

    def _extend_then_decode(self, layer_id):
        fb = NS(
            out_cache_loc=self.full[:N],
            encoder_out_cache_loc=None,
            encoder_lens=None,
            req_pool_indices=torch.tensor([1]),
            seq_lens=torch.tensor([N]),
            extend_prefix_lens=torch.tensor([0]),
            extend_seq_lens=torch.tensor([N]),
        )
        self.backend.init_forward_metadata(fb)
        extend = self.backend.forward_extend(
            self.q[:N].reshape(N, -1), self.k[:N], self.v[:N], _layer(layer_id), fb
        )
        fb = NS(
            out_cache_loc=self.full[N:],
            encoder_out_cache_loc=None,
            encoder_lens=None,
            req_pool_indices=torch.tensor([1]),
            seq_lens=torch.tensor([N + 1]),
        )
        self.backend.init_forward_metadata(fb)
        decode = self.backend.forward_decode(
            self.q[N:].reshape(1, -1), self.k[N:], self.v[N:], _layer(layer_id), fb
        )
        return extend, decode[0]

    def test_swa_layer_reads_through_the_mapping(self):
        extend, decode = self._extend_then_decode(SWA_LAYER)
        expected = torch.stack([self._reference(SWA_LAYER, t) for t in range(N)])
        torch.testing.assert_close(extend, expected, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(
            decode, self._reference(SWA_LAYER, N), atol=1e-5, rtol=1e-5
        )

    def test_full_layer_is_unchanged(self):
        extend, decode = self._extend_then_decode(FULL_LAYER)
        expected = torch.stack([self._reference(FULL_LAYER, t) for t in range(N)])
        torch.testing.assert_close(extend, expected, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(
            decode, self._reference(FULL_LAYER, N), atol=1e-5, rtol=1e-5
        )


if __name__ == "__main__":
    unittest.main()
