"""The candidate index of the window eviction order (``SWAIslandComponent``) under random
traffic on sglang 0.5.23's Python tree core: shared prefixes, chunk commits, decode islands,
finishes and aborts, matches, evictions of random sizes. After every operation the index keeps
its invariant (``check_candidates``), and an eviction that the cold SWA covers takes only cold
nodes (an oracle classifies every live node, O(tree)); with and without a host tier.
"""

import random
import unittest

from swa_islands_stack import (
    build_params,
    commit_chunk,
    decode_step,
    finish_prefill,
    make_prefilling_req,
    match_prefix,
    release,
)

from sglang.srt.mem_cache.base_prefix_cache import EvictParams
from sglang.srt.mem_cache.swa_island_formulas import COLD
from sglang.srt.mem_cache.swa_island_radix_cache import SWAIslandUnifiedRadixCache
from sglang.srt.mem_cache.unified_cache.components import ComponentType
from sglang.test.ci.ci_register import register_cpu_ci

register_cpu_ci(est_time=5, suite="base-a-test-cpu")

CHUNK = 64


class TestSWAIslandEvictionIndex(unittest.TestCase):
    """Random traffic against the candidate index (``SWAIslandComponent.check_candidates``) and
    the cold-first order, with an oracle that classifies every live node (O(tree), tests only).
    """

    KV = 2048

    def live_nodes(self, cache):
        swa = cache.components[ComponentType.SWA]
        lru = cache.tree_core.lru_lists[ComponentType.SWA]
        out, node = {}, lru.get_lru_no_lock()
        while node is not None:
            out[node.id] = (swa.eviction_class(node), len(node.key))
            node = lru.get_prev_no_lock(node)
        return out

    def evict_checked(self, cache, tokens):
        before = self.live_nodes(cache)
        cold = sum(n for c, n in before.values() if c == COLD)
        longest = max((n for _, n in before.values()), default=0)
        cache.evict(EvictParams(num_tokens=0, swa_num_tokens=tokens))
        after = self.live_nodes(cache)
        gone = [i for i in before if i not in after]
        if tokens + longest <= cold:
            self.assertTrue(
                all(before[i][0] == COLD for i in gone),
                f"a window went while {cold} cold tokens remained: "
                f"{[(i, before[i]) for i in gone if before[i][0] != COLD]}",
            )
        cache.components[ComponentType.SWA].check_candidates()

    def test_random_traffic_keeps_the_index_and_takes_cold_first(self):
        for seed in range(5):
            with self.subTest(seed=seed):
                self.run_traffic(random.Random(seed))

    def test_with_a_host_tier_random_traffic_keeps_the_index_and_takes_cold_first(self):
        """The same with ``has_swa_host_pool`` (the ends' windows split off at every match and
        insert end, for their backups)."""
        for seed in range(5, 8):
            with self.subTest(seed=seed):
                self.run_traffic(random.Random(seed), host_tier=True)

    def run_traffic(self, rng, host_tier=False):
        params = build_params(
            max_num_reqs=4,
            kv_size=self.KV,
            tree_core_backend="python",
            enable_swa_islands=True,
            swa_islands_reclaim=rng.choice(["lazy", "auto"]),
            chunked_prefill_size=CHUNK,
            swa_islands_decode_interval=rng.choice([16, 48]),
            swa_islands_eviction="window",
        )
        cache = SWAIslandUnifiedRadixCache(params)
        cache.tree_core.has_swa_host_pool = host_tier
        swa = cache.components[ComponentType.SWA]
        allocator = cache.token_to_kv_pool_allocator
        transcripts, token = [], 1000
        for i in range(40):
            if transcripts and rng.random() < 0.7:
                base = rng.choice(transcripts)
                cut = (
                    len(base) if rng.random() < 0.3 else rng.randrange(1, len(base) + 1)
                )
                prompt = base[
                    :cut
                ]  # a whole transcript continued, or one cut somewhere
            else:
                prompt = []
            fresh = rng.randrange(8, 160)
            prompt = prompt + list(range(token, token + fresh))
            token += fresh
            prompt = prompt[:300]
            need = len(prompt) + 48
            if (
                min(allocator.full_available_size(), allocator.swa_available_size())
                < need
            ):
                cache.evict(EvictParams(num_tokens=need, swa_num_tokens=need))
            req = make_prefilling_req(cache, prompt, rid=f"q{i}")
            for end in range(CHUNK, len(prompt) + CHUNK, CHUNK):
                commit_chunk(cache, req, min(end, len(prompt)))
                swa.check_candidates()
                if rng.random() < 0.3:  # while the request holds its locks
                    self.evict_checked(cache, rng.randrange(1, 100))
            how = rng.choice(["finish", "finish", "abort"])
            if how == "finish":
                finish_prefill(req, token)
                for step in range(rng.randrange(0, 60)):
                    token += 1
                    decode_step(cache, req, [token], swa_eviction_interval=34)
                    if step % 7 == 6:
                        self.evict_checked(cache, rng.randrange(1, 100))
                swa.check_candidates()
                transcripts.append(
                    list(req.origin_input_ids) + list(req.output_ids[:-1])
                )
            release(cache, req, how)
            swa.check_candidates()
            for _ in range(rng.randrange(0, 3)):
                if transcripts:
                    t = rng.choice(transcripts)
                    match_prefix(cache, t[: rng.randrange(1, len(t) + 1)] + [7])
            self.evict_checked(cache, rng.randrange(1, 200))
        self.evict_checked(cache, self.KV)
        self.assertEqual(cache.swa_evictable_size(), 0)


if __name__ == "__main__":
    unittest.main()
