"""PrefillAdder leaves unspent the SWA a tree cache reserves while requests run (patches-main
0011): ``tree_cache.swa_admission_reserve(running_batch)``, asked once per prefill pass, comes
off the SWA budget (``memory_budget.remaining_swa``); the default reserves nothing, so a stock
cache admits as before. Real stack: SWA allocator, ``UnifiedRadixCache`` on the Python core,
``ScheduleBatch`` and ``PrefillAdder``."""

import unittest

from swa_islands_stack import build_params, make_prefilling_req, release

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.managers.schedule_policy import PrefillAdder
from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache
from sglang.test.ci.ci_register import register_cpu_ci

register_cpu_ci(est_time=5, suite="base-a-test-cpu")


class ReservingCache(UnifiedRadixCache):
    """A cache that reserves ``reserve`` SWA tokens and records the batches it was asked for."""

    reserve = 40

    def swa_admission_reserve(self, running_batch):
        self.asked = getattr(self, "asked", []) + [running_batch]
        return self.reserve


def adder(cache, running_batch) -> PrefillAdder:
    return PrefillAdder(
        1,
        cache,
        cache.token_to_kv_pool_allocator,
        running_batch,
        0.5,
        4096,
        64,
        max_running_requests=8,
    )


class TestSWAAdmissionReserveHook(unittest.TestCase):
    def stack(self, cls):
        cache = cls(build_params(tree_core_backend="python"))
        running = make_prefilling_req(cache, list(range(10, 60)), rid="running")
        return cache, ScheduleBatch(reqs=[running], batch_is_full=False), running

    def test_the_reserve_comes_off_the_swa_budget_once_per_pass(self):
        cache, batch, running = self.stack(ReservingCache)
        allocator = cache.token_to_kv_pool_allocator
        free_and_evictable = allocator.swa_available_size() + cache.swa_evictable_size()
        a = adder(cache, batch)
        self.assertEqual(cache.asked, [batch])
        self.assertEqual(
            a.memory_budget.remaining_swa, free_and_evictable - ReservingCache.reserve
        )
        release(cache, running, "abort")

    def test_a_stock_cache_reserves_nothing(self):
        cache, batch, running = self.stack(UnifiedRadixCache)
        allocator = cache.token_to_kv_pool_allocator
        self.assertEqual(cache.swa_admission_reserve(batch), 0)
        self.assertEqual(
            adder(cache, batch).memory_budget.remaining_swa,
            allocator.swa_available_size() + cache.swa_evictable_size(),
        )
        release(cache, running, "abort")

    def test_no_running_batch_asks_nothing(self):
        cache, _, running = self.stack(ReservingCache)
        allocator = cache.token_to_kv_pool_allocator
        a = adder(cache, None)
        self.assertFalse(hasattr(cache, "asked"))
        self.assertEqual(
            a.memory_budget.remaining_swa,
            allocator.swa_available_size() + cache.swa_evictable_size(),
        )
        release(cache, running, "abort")


if __name__ == "__main__":
    unittest.main()
