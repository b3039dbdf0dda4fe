"""SWAIslandUnifiedRadixCache (--enable-swa-islands) on both tree cores: built from its
CacheInitParams, its SWA pool checked against the island floor at construction, refused by
swa_island_guard where the model rules islands out (and, without the flag, a set ratio that binds
stock admission warned about: the rollback), and, until the island steps land, answering
inserts and matches exactly as UnifiedRadixCache does."""

import unittest
from array import array

import torch
from swa_islands_stack import WINDOW_LEFT  # beside this file
from swa_islands_stack import KV_SIZE, build_params, match_prefix

from sglang.srt.mem_cache.base_prefix_cache import InsertParams
from sglang.srt.mem_cache.cache_init_params import CacheInitParams
from sglang.srt.mem_cache.radix_cache import RadixKey
from sglang.srt.mem_cache.swa_island_formulas import (
    DEFAULT_DECODE_ISLAND_INTERVAL,
    hold_unified_decode,
    island_capacity,
    island_floor,
    lazy_reclaim_fits,
    ratio_for_swa_pool,
)
from sglang.srt.mem_cache.swa_island_guard import (
    check_swa_islands_cache,
    warn_swa_pool_binds_without_islands,
)
from sglang.srt.mem_cache.swa_island_radix_cache import SWAIslandUnifiedRadixCache
from sglang.srt.mem_cache.unified_cache.component_type import ComponentType
from sglang.srt.mem_cache.unified_cache.components.swa_island import SWAIslandComponent
from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache
from sglang.test.ci.ci_register import register_cpu_ci

register_cpu_ci(est_time=20, suite="base-a-test-cpu")

CHUNK = 64


class _IslandCacheSuite:
    BACKEND = "python"

    def build(self, *, islands=True, max_num_reqs=10, **fields):
        """(cache, allocator): the island cache (or, ``islands=False``, UnifiedRadixCache) on
        this suite's tree core over a fresh stack."""
        defaults = dict(
            enable_swa_islands=islands,
            chunked_prefill_size=CHUNK,
            tree_core_backend=self.BACKEND,
            swa_islands_eviction="lru",
        )
        params = build_params(max_num_reqs=max_num_reqs, **{**defaults, **fields})
        cls = SWAIslandUnifiedRadixCache if islands else UnifiedRadixCache
        return cls(params), params.token_to_kv_pool_allocator

    def test_builds_on_this_tree_core(self):
        cache, _ = self.build()
        self.assertEqual(cache._tree_core_backend, self.BACKEND)
        self.assertEqual(
            "Rust" in type(cache.tree_core).__name__, self.BACKEND == "rust"
        )
        self.assertTrue(cache.supports_swa())

    def test_auto_eviction_takes_the_window_order_where_the_pool_cannot_keep_a_chunk(
        self,
    ):
        # KV_SIZE SWA tokens: 2 requests x one 64-token chunk fit, 10 do not.
        for max_num_reqs, order in ((2, "lru"), (10, "window")):
            with self.subTest(max_num_reqs=max_num_reqs):
                with self.assertLogs(
                    "sglang.srt.mem_cache.swa_island_radix_cache", "INFO"
                ) as logs:
                    cache, _ = self.build(
                        max_num_reqs=max_num_reqs, swa_islands_eviction="auto"
                    )
                fits = lazy_reclaim_fits(
                    cache.token_to_kv_pool_allocator.size_swa, max_num_reqs, CHUNK, 1
                )
                self.assertEqual(fits, order == "lru")
                self.assertEqual(cache.swa_islands_eviction, order)
                self.assertEqual(
                    CacheInitParams.swa_islands_eviction, "auto"
                )  # the default
                component = cache.components[ComponentType.SWA]
                self.assertEqual(
                    type(component) is SWAIslandComponent, order == "window"
                )
                # the window order runs on the Python core; lru keeps this suite's core
                self.assertEqual(
                    cache._tree_core_backend,
                    "python" if order == "window" else self.BACKEND,
                )
                self.assertEqual(
                    cache.swa_islands_reclaim, "lazy" if order == "window" else "auto"
                )
                text = "\n".join(logs.output)
                self.assertIn(
                    f"eviction {order} (auto: the SWA pool "
                    f"{'keeps' if fits else 'cannot keep'} a chunk",
                    text,
                )
                # the move off the Rust core is said at startup, with its cost
                self.assertEqual(
                    "runs on the Python tree core" in text, order == "window"
                )

    def test_settings_come_from_the_cache_params(self):
        cache, _ = self.build()
        self.assertEqual(cache.swa_islands_reclaim, "auto")  # not given, under lru
        self.assertEqual(cache.decode_island_interval, CHUNK // 4)
        cache, _ = self.build(swa_islands_eviction="window")
        self.assertEqual(cache.swa_islands_reclaim, "lazy")  # not given, under window
        cache, _ = self.build(
            swa_islands_reclaim="eager", swa_islands_decode_interval=5
        )
        self.assertEqual(
            (cache.swa_islands_reclaim, cache.decode_island_interval), ("eager", 5)
        )
        cache, _ = self.build(chunked_prefill_size=None)
        self.assertEqual(cache.decode_island_interval, DEFAULT_DECODE_ISLAND_INTERVAL)

    def test_an_unknown_reclaim_policy_is_refused(self):
        with self.assertRaisesRegex(ValueError, "swa_islands_reclaim must be one of"):
            self.build(swa_islands_reclaim="sometimes")

    def test_a_pool_below_one_requests_island_floor_is_refused(self):
        chunk = KV_SIZE  # one chunk + window + page cannot fit a pool of one chunk
        with self.assertRaisesRegex(
            ValueError,
            r"below the island floor of a single request "
            r"\(%d tokens" % island_floor(1, WINDOW_LEFT + 1, 1, chunk),
        ):
            self.build(chunked_prefill_size=chunk)

    def test_a_pool_below_the_request_pools_floor_warns(self):
        carried = island_capacity(KV_SIZE, WINDOW_LEFT + 1, 1, CHUNK)
        with self.assertLogs(
            "sglang.srt.mem_cache.swa_island_guard", "WARNING"
        ) as logs:
            cache, _ = self.build(max_num_reqs=10)
        self.assertLess(carried, cache.req_to_token_pool.size)
        self.assertIn(f"carries about {carried} running requests", logs.output[0])

    def test_an_ample_pool_is_silent(self):
        with self.assertNoLogs("sglang.srt.mem_cache.swa_island_guard", "WARNING"):
            cache, _ = self.build(max_num_reqs=2)
        self.assertGreaterEqual(
            island_capacity(KV_SIZE, WINDOW_LEFT + 1, 1, CHUNK),
            cache.req_to_token_pool.size,
        )

    def test_inserts_and_matches_as_unified_radix_cache(self):
        answers = []
        for islands in (False, True):
            cache, allocator = self.build(islands=islands)
            tokens = list(range(1, 101))
            value = allocator.alloc(len(tokens))
            result = cache.insert(
                InsertParams(key=RadixKey(array("q", tokens)), value=value)
            )
            match = match_prefix(cache, tokens[:80] + [999] * 10)
            answers.append(
                (
                    result.prefix_len,
                    match.device_prefix_len,
                    cache.full_evictable_size(),
                    cache.swa_evictable_size(),
                    torch.equal(
                        cache.path_device_indices(match.last_device_node).cpu(),
                        value[: match.device_prefix_len].cpu(),
                    ),
                )
            )
        self.assertEqual(answers[0], answers[1])
        self.assertEqual(answers[1][1], 80)


class TestSWAIslandUnifiedRadixCachePythonCore(_IslandCacheSuite, unittest.TestCase):
    BACKEND = "python"


class TestSWAIslandUnifiedRadixCacheRustCore(_IslandCacheSuite, unittest.TestCase):
    BACKEND = "rust"


class TestSwaIslandsGuard(unittest.TestCase):
    """What only the model decides, checked once the registry built the cache."""

    def setUp(self):
        self.stock = UnifiedRadixCache(build_params())
        self.island = SWAIslandUnifiedRadixCache(
            build_params(enable_swa_islands=True, chunked_prefill_size=CHUNK)
        )

    def test_the_island_cache_over_a_hybrid_swa_model_passes(self):
        check_swa_islands_cache(self.island, is_hybrid_swa=True, is_hybrid_ssm=False)

    def test_a_model_without_sliding_window_layers_is_refused(self):
        with self.assertRaisesRegex(
            ValueError,
            "not a hybrid sliding-window model.*Remove " "--enable-swa-islands",
        ):
            check_swa_islands_cache(
                self.island, is_hybrid_swa=False, is_hybrid_ssm=False
            )

    def test_a_model_with_mamba_layers_is_refused(self):
        with self.assertRaisesRegex(ValueError, "Mamba layers"):
            check_swa_islands_cache(self.island, is_hybrid_swa=True, is_hybrid_ssm=True)

    def test_another_cache_is_refused_by_name(self):
        with self.assertRaisesRegex(
            ValueError,
            "the tree cache built for this configuration is " "UnifiedRadixCache",
        ):
            check_swa_islands_cache(self.stock, is_hybrid_swa=True, is_hybrid_ssm=False)


class TestRollbackWarning(unittest.TestCase):
    """Without the flag (a rollback that kept the islands' ratio): a stock UnifiedRadixCache whose
    SWA pool admits fewer decoding requests than the request pool, at an operator-set ratio.
    """

    LOGGER = "sglang.srt.mem_cache.swa_island_guard"
    INTERVAL = 128  # SGLANG_SWA_EVICTION_INTERVAL

    def test_a_set_ratio_that_binds_decoding_requests_warns_with_the_ratio_that_fits(
        self,
    ):
        cache = UnifiedRadixCache(build_params(max_num_reqs=10))
        allocator = cache.token_to_kv_pool_allocator
        hold = hold_unified_decode(WINDOW_LEFT + 1, 1, self.INTERVAL)
        bind = (allocator.size_swa - CHUNK) / hold
        n_cap = cache.req_to_token_pool.size
        self.assertLess(bind, n_cap)
        with self.assertLogs(self.LOGGER, "WARNING") as logs:
            warn_swa_pool_binds_without_islands(cache, 0.17, CHUNK, self.INTERVAL)
        message = logs.output[0]
        self.assertIn(
            f"binds admission at about {bind:.1f} decoding requests without "
            "--enable-swa-islands",
            message,
        )
        self.assertIn(f"holds up to {hold} tokens", message)
        suggested = ratio_for_swa_pool(n_cap * hold + CHUNK, allocator.size_full, 1)
        self.assertIn(
            f"--swa-full-tokens-ratio {suggested:.2f}, or keep --enable-swa-islands on",
            message,
        )

    def test_room_for_every_decoding_request_a_default_ratio_or_the_island_cache_are_silent(
        self,
    ):
        short = 16  # a decode SWA evictor every 16 tokens: 2.5 decoding requests fit 256 tokens
        roomy = UnifiedRadixCache(build_params(max_num_reqs=2))
        self.assertGreaterEqual(
            (roomy.token_to_kv_pool_allocator.size_swa - CHUNK)
            / hold_unified_decode(WINDOW_LEFT + 1, 1, short),
            roomy.req_to_token_pool.size,
        )
        tight = UnifiedRadixCache(build_params(max_num_reqs=10))
        island = SWAIslandUnifiedRadixCache(
            build_params(
                max_num_reqs=2, enable_swa_islands=True, chunked_prefill_size=CHUNK
            )
        )
        for cache, ratio, interval in (
            (roomy, 0.17, short),
            (tight, None, self.INTERVAL),
            (island, 0.17, self.INTERVAL),
        ):
            with self.subTest(
                cache=type(cache).__name__, ratio=ratio, interval=interval
            ):
                with self.assertNoLogs(self.LOGGER, "WARNING"):
                    warn_swa_pool_binds_without_islands(cache, ratio, CHUNK, interval)
        with self.assertLogs(
            self.LOGGER, "WARNING"
        ):  # the roomy pool at a slower evictor
            warn_swa_pool_binds_without_islands(roomy, 0.17, CHUNK, self.INTERVAL)


if __name__ == "__main__":
    unittest.main()
