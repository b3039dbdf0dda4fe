"""SWAIslandRadixCache under --enable-swa-islands, on the real tree, pools, allocator, Req,
PrefillAdder and ScheduleBatch (swa_islands_stack; no model runs). On CPU: SGLANG_USE_CPU_ENGINE=1,
and TRITON_INTERPRET=1 for the page-size-16 case (the paged allocator launches Triton kernels)."""

import os
import random
import unittest

from sglang.srt.mem_cache.base_prefix_cache import EvictParams
from sglang.srt.mem_cache.swa_island_guard import check_swa_islands_cache
from sglang.srt.mem_cache.swa_island_radix_cache import SWAIslandRadixCache
from sglang.srt.mem_cache.swa_radix_cache import SWARadixCache
from sglang.test.ci.ci_register import register_cpu_ci

try:
    from sglang.test.test_utils import CustomTestCase
except ImportError:  # test_utils needs the benchmark extras (e.g. datasets)
    CustomTestCase = unittest.TestCase

from swa_islands_stack import build_stack, make_req, prefill  # beside this file

register_cpu_ci(est_time=30, suite="base-a-test-cpu")

BIG = 10**9


def prompt(n, seed=0):
    rng = random.Random(seed)
    return [rng.randrange(4, 1000) for _ in range(n)]


def chunk_commits(stack, n_tokens):
    """(SWA tokens the tree keeps locked, SWA tokens evictable) after every commit of one
    request's chunked prefill, and the pools after it finished and the tree was emptied."""
    rows = []
    prefill(stack, make_req("r0", prompt(n_tokens)),
            lambda req: rows.append((stack.tree.swa_protected_size(),
                                     stack.tree.swa_evictable_size())))
    stack.tree.evict(EvictParams(num_tokens=BIG, swa_num_tokens=BIG))
    stack.tree.sanity_check()
    free = (stack.allocator.full_available_size(), stack.allocator.swa_available_size())
    return rows, free


class TestSelection(CustomTestCase):
    def test_flag_off_builds_swa_radix_cache_and_on_builds_islands(self):
        self.assertIs(type(build_stack(islands=False).tree), SWARadixCache)
        self.assertIs(type(build_stack(islands=True).tree), SWAIslandRadixCache)

    def test_guard_refuses_any_other_cache(self):
        stack = build_stack(islands=False)
        with self.assertRaisesRegex(ValueError, "is SWARadixCache, and islands run only"):
            check_swa_islands_cache(stack.tree, is_hybrid_swa=True)
        with self.assertRaisesRegex(ValueError, "not a hybrid sliding-window model"):
            check_swa_islands_cache(stack.tree, is_hybrid_swa=False)

    def test_swa_pool_below_one_island_floor_is_refused(self):
        # one chunk (256) + window (65) + page (1) does not fit 300 SWA tokens
        with self.assertRaisesRegex(ValueError, "below the island floor of a single request"):
            build_stack(islands=True, swa_pool=300)


class TestChunkCommitHold(CustomTestCase):
    """The SWA a prefilling request keeps locked: a whole chunk upstream, one window with islands."""

    WINDOW = 65  # HF window 64: a token reads [i - 64, i]

    def test_upstream_locks_the_last_chunk(self):
        stack = build_stack(islands=False, window=64, chunk=256)
        baseline = (stack.allocator.full_available_size(), stack.allocator.swa_available_size())
        rows, free = chunk_commits(stack, 1024)
        self.assertEqual(len(rows), 4)
        self.assertEqual(max(locked for locked, _ in rows), 256)
        self.assertEqual(rows[-1][1], 768)  # the three earlier chunks: dead but cached SWA KV
        self.assertEqual(free, baseline)

    def test_islands_lock_one_window_plus_page(self):
        for page in (1, 16):
            with self.subTest(page=page):
                if page > 1 and os.environ.get("TRITON_INTERPRET") != "1":
                    # the stack is on CPU; the paged allocator launches Triton kernels
                    self.skipTest("page size > 1 on CPU tensors needs TRITON_INTERPRET=1")
                stack = build_stack(islands=True, window=64, chunk=256, page=page)
                baseline = (stack.allocator.full_available_size(),
                            stack.allocator.swa_available_size())
                rows, free = chunk_commits(stack, 1024)
                self.assertEqual(len(rows), 4)
                for locked, evictable in rows:
                    self.assertGreaterEqual(locked, self.WINDOW)
                    self.assertLessEqual(locked, self.WINDOW + 2 * page)
                    self.assertEqual(evictable, 0)  # eager reclaim: no dead SWA KV kept
                self.assertEqual(free, baseline)

    def test_islands_keep_the_prefix_matchable(self):
        stack = build_stack(islands=True, window=64, chunk=256)
        prefill(stack, make_req("r0", prompt(1024)))
        again = make_req("r1", prompt(1024) + [7])
        again.init_next_round_input(stack.tree)
        # the full-attention KV of the whole prompt stayed in the tree, and the island at its
        # end still has a live window, so the second request reuses the prefix
        self.assertGreaterEqual(len(again.prefix_indices), 1024 - 64)


if __name__ == "__main__":
    unittest.main()
