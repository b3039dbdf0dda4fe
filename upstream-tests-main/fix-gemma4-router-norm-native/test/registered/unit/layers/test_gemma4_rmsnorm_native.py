"""Gemma4RMSNorm's native path (CPU without AMX, ROCm) multiplies by its weight buffer when
`with_scale=False`, as forward_cuda does: Gemma4Router.fuse_scale folds the router's learned scale
and hidden_size**-0.5 into that buffer, so a native path that ignores it routes every Gemma 4 MoE
on the bare RMS norm."""

import unittest
from types import SimpleNamespace

import torch

from sglang.srt.layers.layernorm import Gemma4RMSNorm
from sglang.test.ci.ci_register import register_cpu_ci

try:
    from sglang.test.test_utils import CustomTestCase
except ImportError:  # test_utils needs the benchmark extras (e.g. datasets)
    CustomTestCase = unittest.TestCase

register_cpu_ci(est_time=10, suite="base-a-test-cpu")

DIM = 16
EPS = 1e-6


def rms_norm(x: torch.Tensor) -> torch.Tensor:
    x = x.float()
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS)


class TestGemma4RMSNormNativeWithoutScale(CustomTestCase):
    def setUp(self):
        torch.manual_seed(0)
        self.x = torch.randn(5, DIM)

    def test_ones_buffer_gives_the_bare_norm(self):
        norm = Gemma4RMSNorm(DIM, eps=EPS, with_scale=False)
        torch.testing.assert_close(norm.forward_native(self.x), rms_norm(self.x))

    def test_folded_buffer_scales_the_output(self):
        norm = Gemma4RMSNorm(DIM, eps=EPS, with_scale=False)
        norm.weight.fill_(2.0)
        torch.testing.assert_close(norm.forward_native(self.x), 2.0 * rms_norm(self.x))

    def test_per_dimension_buffer_is_applied_per_dimension(self):
        norm = Gemma4RMSNorm(DIM, eps=EPS, with_scale=False)
        weight = torch.linspace(0.25, 4.0, DIM)
        norm.weight.copy_(weight)
        torch.testing.assert_close(
            norm.forward_native(self.x), rms_norm(self.x) * weight
        )

    def test_bf16_input_keeps_its_dtype(self):
        norm = Gemma4RMSNorm(DIM, eps=EPS, with_scale=False)
        norm.weight.fill_(0.5)
        x = self.x.to(torch.bfloat16)
        out = norm.forward_native(x)
        self.assertEqual(out.dtype, torch.bfloat16)
        torch.testing.assert_close(out, (0.5 * rms_norm(x)).to(torch.bfloat16))

    def test_with_scale_is_unchanged(self):
        norm = Gemma4RMSNorm(DIM, eps=EPS, with_scale=True, scale_shift=1.0)
        with torch.no_grad():
            norm.weight.fill_(0.5)
        torch.testing.assert_close(norm.forward_native(self.x), 1.5 * rms_norm(self.x))


class TestGemma4RouterNative(CustomTestCase):
    """The router's logits on the native path: proj(norm(x) * scale * hidden_size**-0.5)."""

    def test_router_logits_apply_the_learned_scale_and_root_size(self):
        from sglang.srt.models.gemma4_causal import Gemma4Router

        torch.manual_seed(0)
        config = SimpleNamespace(hidden_size=DIM, rms_norm_eps=EPS, num_experts=4)
        router = Gemma4Router(config)
        # pin the norm to its native path (CPU without AMX, ROCm) on every machine
        router.norm._forward_method = router.norm.forward_native
        scale = torch.rand(DIM) + 0.5
        proj = torch.randn(config.num_experts, DIM)
        with torch.no_grad():
            router.scale.copy_(scale)  # as the checkpoint loader does
            router.proj.weight.copy_(proj)
        x = torch.randn(7, DIM)
        with torch.no_grad():
            logits = router(x)
        expected = (rms_norm(x) * scale * DIM**-0.5) @ proj.t()
        torch.testing.assert_close(logits, expected)


if __name__ == "__main__":
    unittest.main()
