"""TorchNativeAttnBackend.forward_extend on a speculative TARGET_VERIFY batch: each draft token
attends to the committed prefix and to itself and its ancestors among the drafts (the tree mask
of ``spec_info.custom_mask``), on sliding-window and full layers of a hybrid SWA pool, with GQA;
a sliding window counts a draft's depth in the tree, not its index. No server, no model: a tiny
SWAKVPool on CPU (SGLANG_USE_CPU_ENGINE=1 on a machine without an accelerator)."""

import unittest
from types import SimpleNamespace as NS

import torch

from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend
from sglang.srt.layers.radix_attention import AttentionType
from sglang.srt.mem_cache.memory_pool import KVWriteLoc
from sglang.srt.mem_cache.swa_memory_pool import SWAKVPool
from sglang.test.ci.ci_register import register_cpu_ci

try:
    from sglang.test.test_utils import CustomTestCase
except ImportError:  # test_utils needs the benchmark extras (e.g. datasets)
    CustomTestCase = unittest.TestCase

register_cpu_ci(est_time=5, suite="base-a-test-cpu")

HQ, HKV, D, W, P = (
    4,
    2,
    8,
    3,
    8,
)  # query heads, KV heads, head dim, window_left, prefix tokens
SWA_LAYER, FULL_LAYER = 0, 1
# Drafts: 0 -> 1 -> 3 -> 5, 0 -> 2, 1 -> 4. Row i marks i and its ancestors.
PARENT = [-1, 0, 0, 1, 1, 3]
N = len(PARENT)


def _path(i):
    """Node i and its ancestors, root first."""
    path = []
    while i >= 0:
        path.insert(0, i)
        i = PARENT[i]
    return path


TREE = torch.zeros(N, N, dtype=torch.bool)
for _i in range(N):
    TREE[_i, _path(_i)] = True


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


class TestTorchNativeTargetVerify(CustomTestCase):
    def setUp(self):
        torch.manual_seed(0)
        self.pool = SWAKVPool(
            size=64,
            size_swa=32,
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
        self.full = torch.arange(30, 30 + P + N)
        mapping[self.full] = torch.arange(1, P + N + 1)
        req_to_token = torch.zeros(2, 32, dtype=torch.int64)
        req_to_token[1, : P + N] = self.full
        runner = NS(
            device="cpu",
            req_to_token_pool=NS(req_to_token=req_to_token),
            token_to_kv_pool=self.pool,
        )
        self.backend = TorchNativeAttnBackend(runner)
        self.q = torch.randn(N, HQ, D)
        self.k, self.v = (torch.randn(P + N, HKV, D) for _ in range(2))

    def _verify(self, layer_id, tree_topk=-1, mask=TREE):
        layer = _layer(layer_id)
        # The committed prefix, written as a prefill would.
        loc = self.full[:P]
        swa_loc = self.pool.translate_loc_from_full_to_swa(loc)
        self.pool.set_kv_buffer(layer, KVWriteLoc(loc, swa_loc), self.k[:P], self.v[:P])
        spec_info = NS(
            draft_token_num=N, tree_topk=tree_topk, custom_mask=mask.reshape(-1)
        )
        depth = mask.sum(dim=1) - 1
        fb = NS(
            forward_mode=NS(is_target_verify=lambda: True),
            spec_info=spec_info,
            batch_size=1,
            out_cache_loc=self.full[P:],
            encoder_out_cache_loc=None,
            encoder_lens=None,
            req_pool_indices=torch.tensor([1]),
            seq_lens=torch.tensor([P]),
            positions=P + depth + 1,  # offset as Gemma's forward leaves it: unused
        )
        self.backend.init_forward_metadata(fb)
        out = self.backend.forward_extend(
            self.q.reshape(N, -1), self.k[P:], self.v[P:], layer, fb
        )
        return out.view(N, HQ * D)

    def _reference(self, layer_id, i, path):
        """Draft i sees the prefix and the drafts of ``path`` (at positions P + depth), within
        the window by position on the SWA layer."""
        keys = list(range(P)) + [P + j for j in path]
        pos = list(range(P)) + [P + d for d in range(len(path))]
        q_pos = P + len(path) - 1
        if layer_id == SWA_LAYER:
            keys = [k for k, p in zip(keys, pos) if p >= q_pos - W]
        k = self.k[keys].repeat_interleave(HQ // HKV, dim=1)
        v = self.v[keys].repeat_interleave(HQ // HKV, dim=1)
        s = torch.einsum("hd,khd->hk", self.q[i], k) * D**-0.5
        return torch.einsum("hk,khd->hd", s.softmax(-1), v).reshape(-1)

    def _check(self, layer_id):
        out = self._verify(layer_id)
        expected = torch.stack(
            [self._reference(layer_id, i, _path(i)) for i in range(N)]
        )
        torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)

    def test_swa_layer_tree(self):
        self._check(SWA_LAYER)

    def test_full_layer_tree(self):
        self._check(FULL_LAYER)

    def test_chain_when_tree_topk_is_one(self):
        """tree_topk 1: the drafts are a chain (causal), whatever the mask says."""
        out = self._verify(
            SWA_LAYER, tree_topk=1, mask=torch.zeros(N, N, dtype=torch.bool)
        )
        expected = torch.stack(
            [self._reference(SWA_LAYER, i, list(range(i + 1))) for i in range(N)]
        )
        torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)

    def test_drafts_kv_is_written(self):
        self._verify(FULL_LAYER)
        torch.testing.assert_close(
            self.pool.get_key_buffer(FULL_LAYER)[self.full[P:]], self.k[P:]
        )


if __name__ == "__main__":
    unittest.main()
