"""TorchNativeAttnBackend with attention sinks (GPT-OSS): forward_extend and forward_decode take
``sinks`` (one logit per query head) and softmax over [scores, sink], dropping the sink column,
on sliding-window and full layers of a hybrid SWA pool, with GQA, across a chunked prefill.
No server, no model: a tiny SWAKVPool on CPU (SGLANG_USE_CPU_ENGINE=1 on a machine without an
accelerator, as in the CPU image)."""

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

HQ, HKV, D, W, N = (
    4,
    2,
    8,
    3,
    8,
)  # query heads, KV heads, head dim, window_left, prompt tokens
CHUNK = (
    5  # the prompt is prefilled in two extends: 5 tokens, then 3 on a 5-token prefix
)
SWA_LAYER, FULL_LAYER = 0, 1


def _layer(layer_id):
    return NS(
        layer_id=layer_id,
        qk_head_dim=D,
        v_head_dim=D,
        tp_q_head_num=HQ,
        tp_k_head_num=HKV,
        is_cross_attention=False,
        attn_type=AttentionType.DECODER,
        scaling=D**-0.5,
        sliding_window_size=W if layer_id == SWA_LAYER else -1,
        k_scale=None,
        v_scale=None,
    )


class TestTorchNativeAttentionSinks(CustomTestCase):
    def setUp(self):
        torch.manual_seed(0)
        self.pool = SWAKVPool(
            size=64,
            size_swa=16,
            page_size=1,
            dtype=torch.float32,
            head_num=HKV,
            head_dim=D,
            swa_attention_layer_ids=[SWA_LAYER],
            full_attention_layer_ids=[FULL_LAYER],
            device="cpu",
        )
        mapping = torch.zeros(65, dtype=torch.int64)
        mapping[-1] = -1
        self.pool.register_mapping(mapping)
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
        self.q = torch.randn(N + 1, HQ, D)
        self.k, self.v = (torch.randn(N + 1, HKV, D) for _ in range(2))
        self.sinks = torch.tensor([1.5, -0.5, 0.25, 3.0])

    def _reference(self, layer_id, t, sinks):
        """Token t attends to tokens max(0, t - W)..t on the SWA layer, 0..t on the full one;
        query head h reads KV head h // (HQ // HKV); the sink logit joins the softmax only.
        """
        k = self.k[: t + 1].repeat_interleave(HQ // HKV, dim=1)
        v = self.v[: t + 1].repeat_interleave(HQ // HKV, dim=1)
        s = torch.einsum("hd,khd->hk", self.q[t], k) * D**-0.5
        if layer_id == SWA_LAYER:
            s[:, : max(t - W, 0)] = -float("inf")
        if sinks is not None:
            s = torch.cat([s, sinks[:, None]], dim=-1)
        p = s.softmax(-1)[:, : t + 1]
        return torch.einsum("hk,khd->hd", p, v).reshape(-1)

    def _run(self, layer_id, **kwargs):
        outs = []
        for start, end in ((0, CHUNK), (CHUNK, N)):
            fb = NS(
                out_cache_loc=self.full[start:end],
                encoder_out_cache_loc=None,
                encoder_lens=None,
                req_pool_indices=torch.tensor([1]),
                seq_lens=torch.tensor([end]),
                extend_prefix_lens=torch.tensor([start]),
                extend_seq_lens=torch.tensor([end - start]),
            )
            self.backend.init_forward_metadata(fb)
            outs.append(
                self.backend.forward_extend(
                    self.q[start:end].reshape(end - start, -1),
                    self.k[start:end],
                    self.v[start:end],
                    _layer(layer_id),
                    fb,
                    **kwargs,
                )
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
            self.q[N:].reshape(1, -1),
            self.k[N:],
            self.v[N:],
            _layer(layer_id),
            fb,
            **kwargs,
        )
        return torch.cat(outs), decode[0]

    def _check(self, layer_id, sinks):
        kwargs = {} if sinks is None else {"sinks": sinks}
        extend, decode = self._run(layer_id, **kwargs)
        expected = torch.stack([self._reference(layer_id, t, sinks) for t in range(N)])
        torch.testing.assert_close(extend, expected, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(
            decode, self._reference(layer_id, N, sinks), atol=1e-5, rtol=1e-5
        )

    def test_swa_layer_with_sinks(self):
        self._check(SWA_LAYER, self.sinks)

    def test_full_layer_with_sinks(self):
        self._check(FULL_LAYER, self.sinks)

    def test_bf16_sinks(self):
        """GPT-OSS keeps its sinks in bf16 on this backend; the term is computed in fp32."""
        self._check(SWA_LAYER, self.sinks.to(torch.bfloat16))

    def test_without_sinks_unchanged(self):
        self._check(SWA_LAYER, None)
        self._check(FULL_LAYER, None)

    def test_sinks_change_the_output(self):
        with_sinks, _ = self._run(FULL_LAYER, sinks=self.sinks)
        without, _ = self._run(FULL_LAYER)
        self.assertGreater((with_sinks - without).abs().max().item(), 1e-2)


if __name__ == "__main__":
    unittest.main()
