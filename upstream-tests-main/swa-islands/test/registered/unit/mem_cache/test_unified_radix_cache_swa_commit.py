"""What stock UnifiedRadixCache already does with a request's SWA at a prefill-chunk commit, on
both tree cores: the ground the island path stands on (and, if upstream changes it, the first
test to say so).

- With the commit-time free (SGLANG_OPT_UNIFIED_CACHE_FREE_OUT_OF_WINDOW_SLOTS, default on), the
  request's SWA below ``pre_len - ceil_p(max(window_left, p))`` is freed and inserted as a
  tombstone; the new leaf is split so the lock covers one window: the hold after every commit is
  one window, at most ``w + 2p``. A request diverging inside an earlier chunk then hits only up to
  that chunk's end (upstream issue #36131).
- Without it, the committed chunk stays live, matchable and evictable outside the one locked
  window ("reclaim without forgetting"): the diverging request hits up to its divergence.
"""

import unittest

from swa_islands_stack import build_params  # beside this file
from swa_islands_stack import (
    WINDOW_LEFT,
    commit_chunk,
    make_prefilling_req,
    match_prefix,
)

from sglang.srt.environ import envs
from sglang.srt.mem_cache.swa_island_formulas import swa_tombstone_frontier
from sglang.srt.mem_cache.unified_cache.components import ComponentType
from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache
from sglang.test.ci.ci_register import register_cpu_ci

register_cpu_ci(est_time=10, suite="base-a-test-cpu")

CHUNK, CHUNKS = 64, 3
W, P = WINDOW_LEFT + 1, 1
PROMPT = list(range(10, 10 + CHUNK * CHUNKS))
DIVERGE_AT = CHUNK + 36  # inside the second chunk
BRANCH = PROMPT[:DIVERGE_AT] + [5] * 20


class _CommitSuite:
    BACKEND = "python"

    def commit_prompt(self, free_out_of_window: bool):
        """[(end, protected, evicted, locked SWA, evictable SWA)] after each chunk commit, and the
        prefix the branch then hits."""
        with envs.SGLANG_OPT_UNIFIED_CACHE_FREE_OUT_OF_WINDOW_SLOTS.override(
            free_out_of_window
        ):
            cache = UnifiedRadixCache(build_params(tree_core_backend=self.BACKEND))
            self.assertEqual(cache._tree_core_backend, self.BACKEND)
            req = make_prefilling_req(cache, PROMPT)
            rows = []
            for k in range(1, CHUNKS + 1):
                commit_chunk(cache, req, k * CHUNK)
                rows.append(
                    (
                        k * CHUNK,
                        req.kv.cache_protected_len,
                        req.kv.get_evicted_seqlen(ComponentType.SWA),
                        cache.swa_protected_size(),
                        cache.swa_evictable_size(),
                    )
                )
            return rows, match_prefix(cache, BRANCH).device_prefix_len

    def test_every_chunk_commit_leaves_one_locked_window(self):
        for free in (True, False):
            with self.subTest(free_out_of_window=free):
                rows, _ = self.commit_prompt(free)
                for end, protected, _, locked, _ in rows:
                    self.assertEqual(
                        protected, end
                    )  # everything committed is tree-owned
                    self.assertEqual(
                        locked, WINDOW_LEFT
                    )  # one window, page-rounded (p = 1)
                    self.assertLessEqual(locked, W + 2 * P)

    def test_the_commit_free_tombstones_below_main_frontier(self):
        rows, _ = self.commit_prompt(True)
        for end, _, evicted, _, evictable in rows:
            # main's frontier: floor_p(L - 1 - ceil_p(max(window_left, p))); ours is one token
            # lower at p = 1 (swa_tombstone_frontier keeps w + p).
            self.assertEqual(evicted, end - 1 - WINDOW_LEFT)
            self.assertEqual(swa_tombstone_frontier(end, W, P), evicted - 1)
            # live and unlocked: the tail windows of earlier chunks, tree-owned
            self.assertEqual(
                evictable,
                (end // CHUNK - 1) * (CHUNK - (end - evicted))
                + (end - evicted - WINDOW_LEFT),
            )

    def test_with_the_commit_free_a_branch_inside_a_chunk_hits_only_the_chunk_end(self):
        _, hit = self.commit_prompt(True)
        self.assertEqual(hit, CHUNK)

    def test_without_the_commit_free_the_chunk_stays_matchable_and_evictable(self):
        rows, hit = self.commit_prompt(False)
        for end, _, evicted, locked, evictable in rows:
            self.assertEqual(evicted, 0)
            self.assertEqual(evictable, end - locked)
        self.assertEqual(hit, DIVERGE_AT)


class TestSwaCommitPythonCore(_CommitSuite, unittest.TestCase):
    BACKEND = "python"


class TestSwaCommitRustCore(_CommitSuite, unittest.TestCase):
    BACKEND = "rust"


if __name__ == "__main__":
    unittest.main()
