"""HiCache on a CPU device pool (the CPU engine, --enable-hierarchical-cache with
--hicache-io-backend direct): the host pool is allocated without CUDA host registration, the
direct io backend's copies exist on CPU and move what they should, a failed transfer raises
its own error, and SGLANG_TEST_HICACHE_CPU_COPY_DELAY_POLLS holds a backup's copy back until its
ack could be seen."""

import unittest
from types import SimpleNamespace

import torch

from sglang.srt.utils import is_cpu
from sglang.test.ci.ci_register import register_cpu_ci

try:
    from sglang.test.test_utils import CustomTestCase
except ImportError:  # test_utils needs the benchmark extras (e.g. datasets)
    CustomTestCase = unittest.TestCase

register_cpu_ci(est_time=5, suite="base-a-test-cpu")

LAYERS, HEADS, DIM = 3, 2, 4


def device_layers(size, seed):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(size, HEADS, DIM, generator=g) for _ in range(LAYERS)]


@unittest.skipUnless(is_cpu(), "the CPU engine (SGLANG_USE_CPU_ENGINE=1)")
class TestHiCacheCpuDevice(CustomTestCase):
    def test_host_pool_for_a_cpu_device_needs_no_cuda(self):
        from sglang.srt.mem_cache.pool_host.common import (
            ALLOC_MEMORY_FUNCS,
            HostTensorAllocator,
        )

        buf = ALLOC_MEMORY_FUNCS["cpu"](
            (2, LAYERS, 8, HEADS, DIM),
            dtype=torch.float32,
            device="cpu",
            pin_memory=True,
            allocator=HostTensorAllocator(),
        )
        self.assertEqual(tuple(buf.shape), (2, LAYERS, 8, HEADS, DIM))
        self.assertEqual(buf.device.type, "cpu")

    def test_direct_layer_first_backup_and_load(self):
        from sglang.srt.mem_cache.pool_host import mha

        src = device_layers(16, 0)
        host = [torch.zeros(12, HEADS, DIM) for _ in range(LAYERS)]
        dev_idx = torch.tensor([3, 4, 9, 10, 15], dtype=torch.int64)
        host_idx = torch.tensor([0, 1, 6, 7, 11], dtype=torch.int64)
        mha.transfer_kv_direct(
            src_layers=src,
            dst_layers=host,
            src_indices=dev_idx,
            dst_indices=host_idx,
            page_size=1,
        )
        back = [torch.zeros(16, HEADS, DIM) for _ in range(LAYERS)]
        load_idx = torch.tensor([1, 2, 5, 6, 7], dtype=torch.int64)
        for layer in range(LAYERS):
            mha.transfer_kv_direct(
                src_layers=[host[layer]],
                dst_layers=[back[layer]],
                src_indices=host_idx,
                dst_indices=load_idx,
                page_size=1,
            )
            torch.testing.assert_close(host[layer][host_idx], src[layer][dev_idx])
            torch.testing.assert_close(back[layer][load_idx], src[layer][dev_idx])
            untouched = torch.ones(12, dtype=torch.bool)
            untouched[host_idx] = False
            self.assertEqual(int(host[layer][untouched].abs().sum()), 0)

    def test_direct_page_first_backup_and_load(self):
        from sglang.srt.mem_cache.pool_host import mha

        for page_size in (1, 4):
            with self.subTest(page_size=page_size):
                src_k, src_v = device_layers(32, 1), device_layers(32, 2)
                pages = 6
                host_k = torch.zeros(pages, LAYERS, page_size, HEADS, DIM)
                host_v = torch.zeros_like(host_k)
                # device pages 2 and 5 -> host pages 4 and 1, token order kept in a page
                offsets = torch.arange(page_size)
                dev_idx = torch.cat([offsets + 2 * page_size, offsets + 5 * page_size])
                host_idx = torch.cat([offsets + 4 * page_size, offsets + 1 * page_size])
                mha.transfer_kv_all_layer_direct_lf_pf(
                    src_ptrs=src_k + src_v,
                    dst_ptrs=[host_k, host_v],
                    src_indices=dev_idx,
                    dst_indices=host_idx,
                    page_size=page_size,
                )
                load_idx = torch.arange(2 * page_size) + 3 * page_size
                for layer in range(LAYERS):
                    for host, src in ((host_k, src_k), (host_v, src_v)):
                        got = host[host_idx // page_size, layer, host_idx % page_size]
                        torch.testing.assert_close(got, src[layer][dev_idx])
                    back_k = torch.zeros(32, HEADS, DIM)
                    back_v = torch.zeros(32, HEADS, DIM)
                    mha.transfer_kv_per_layer_direct_pf_lf(
                        src_ptrs=[host_k, host_v],
                        dst_ptrs=[back_k, back_v],
                        src_indices=host_idx,
                        dst_indices=load_idx,
                        layer_id=layer,
                        page_size=page_size,
                    )
                    torch.testing.assert_close(back_k[load_idx], src_k[layer][dev_idx])
                    torch.testing.assert_close(back_v[load_idx], src_v[layer][dev_idx])
                self.assertEqual(int(host_k[[0, 2, 3, 5]].abs().sum()), 0)

    def test_a_failed_transfer_raises_its_own_error(self):
        from sglang.srt.mem_cache.l2_transfer import L2Transfer, L2TransferEngine

        def refuse(*args):
            raise RuntimeError("host pool refused the transfer")

        engine = L2TransferEngine("direct")
        indices = torch.arange(4)
        transfer = L2Transfer(
            host_pool=SimpleNamespace(prepare_transfer_indices=refuse),
            device_pool=SimpleNamespace(),
            host_indices=indices,
            device_indices=indices,
        )
        with self.assertRaisesRegex(RuntimeError, "host pool refused the transfer"):
            engine.submit_device_to_host([transfer])

    def test_a_held_back_backup_reads_the_device_when_its_ack_is_seen(self):
        from sglang.srt.environ import envs
        from sglang.srt.mem_cache.l2_transfer import (
            L2Transfer,
            L2TransferEngine,
            PendingCpuCopies,
        )
        from sglang.srt.mem_cache.pool_host import mha

        device = device_layers(8, 3)
        host = [torch.zeros(8, HEADS, DIM) for _ in range(LAYERS)]

        def backup(device_pool, host_indices, device_indices, io_backend):
            mha.transfer_kv_direct(device, host, device_indices, host_indices, 1)

        host_pool = SimpleNamespace(
            prepare_transfer_indices=lambda h, d, io: (h, d),
            backup_from_device_all_layer_physical=backup,
        )
        transfer = L2Transfer(
            host_pool=host_pool,
            device_pool=SimpleNamespace(),
            host_indices=torch.tensor([0, 1]),
            device_indices=torch.tensor([5, 6]),
        )
        engine = L2TransferEngine("direct")

        done = engine.submit_device_to_host([transfer]).finish_event
        self.assertNotIsInstance(done, PendingCpuCopies)  # off by default: copied
        torch.testing.assert_close(host[0][[0, 1]], device[0][[5, 6]])

        with envs.SGLANG_TEST_HICACHE_CPU_COPY_DELAY_POLLS.override(3):
            for host_layer in host:
                host_layer.zero_()
            done = engine.submit_device_to_host([transfer]).finish_event
            self.assertEqual(int(host[0].abs().sum()), 0)
            # slot 6 freed and written again while the backup is pending
            device[0][6] = 7.0
            self.assertEqual([done.query(), done.query()], [False, False])
            self.assertEqual(int(host[0].abs().sum()), 0)
            self.assertTrue(done.query())
            torch.testing.assert_close(host[0][1], torch.full((HEADS, DIM), 7.0))
            torch.testing.assert_close(host[2][[0, 1]], device[2][[5, 6]])

            for host_layer in host:
                host_layer.zero_()
            done = engine.submit_device_to_host([transfer]).finish_event
            done.synchronize()
            torch.testing.assert_close(host[1][[0, 1]], device[1][[5, 6]])
            self.assertTrue(done.query())


if __name__ == "__main__":
    unittest.main()
