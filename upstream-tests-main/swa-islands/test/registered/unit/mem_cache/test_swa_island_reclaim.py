"""Reclaim without forgetting on sglang 0.5.23, both tree cores: ``--swa-islands-reclaim`` answers
``UnifiedRadixCache.frees_out_of_window_at_commit(req)``, the commit-time free decision that stock
main reads from ``SGLANG_OPT_UNIFIED_CACHE_FREE_OUT_OF_WINDOW_SLOTS`` (default on) at its three
sites (``checkpoint_into_tree``, ``advance_unpublished_req``, the SWA component's free after an
inserted branch). Driven as the scheduler drives the cache (chunk commits through
``checkpoint_kv_cache``, decode steps that call ``on_decode_progress``, ``release_kv_cache``) over
the real UnifiedRadixCache, SWA allocator and pools.

- ``lazy``: a request diverging inside a committed chunk hits up to its divergence; ``eager``:
  only up to the last chunk end (main's default, upstream issue #36131); ``auto`` (the default):
  where the SWA pool keeps one chunk per running request, lazy while one prefill chunk of SWA is
  free and eager below it; in a smaller pool eager at every commit;
- the hold stays ``<= w + 2p`` per running request after every commit (chunks and decode
  islands a window apart), under every policy;
- after finish and eviction the pools are back at baseline;
- with the flag off the stock cache answers the environment variable, and a cache that answers
  the hook otherwise is obeyed at every site (no site reads the variable itself).
"""

import unittest

from swa_islands_stack import build_params  # beside this file
from swa_islands_stack import (
    WINDOW_LEFT,
    commit_chunk,
    computed_len,
    decode_step,
    finish_prefill,
    make_prefilling_req,
    match_prefix,
    release,
)

from sglang.srt.environ import envs
from sglang.srt.mem_cache.base_prefix_cache import EvictParams, InsertResult
from sglang.srt.mem_cache.swa_island_formulas import (
    lazy_reclaim_fits,
    reclaim_watermark,
)
from sglang.srt.mem_cache.swa_island_radix_cache import SWAIslandUnifiedRadixCache
from sglang.srt.mem_cache.unified_cache.components import ComponentType
from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache
from sglang.test.ci.ci_register import register_cpu_ci

register_cpu_ci(est_time=15, suite="base-a-test-cpu")

CHUNK, CHUNKS = 64, 3
W, P = WINDOW_LEFT + 1, 1
KV = 512
PROMPT = list(range(10, 10 + CHUNK * CHUNKS))
DIVERGE_AT = CHUNK + 36  # inside the second chunk
BRANCH = PROMPT[:DIVERGE_AT] + [5] * 20
BRANCHED = (
    PROMPT[:DIVERGE_AT] + [5] * 90
)  # a prompt whose branch at DIVERGE_AT is pending
POLICIES = ("lazy", "eager", "auto")


def evicted_swa(req) -> int:
    return req.kv.get_evicted_seqlen(ComponentType.SWA)


class _ReclaimSuite:
    BACKEND = "python"

    def build(
        self, reclaim="lazy", *, islands=True, cls=None, max_num_reqs=4, **fields
    ):
        # The reclaim decision on this tree core: upstream's SWA walk (``auto`` would take the
        # window order, on the Python core, where the pool cannot keep a chunk per request).
        fields = {"swa_islands_eviction": "lru", **fields}
        params = build_params(
            max_num_reqs=max_num_reqs,
            kv_size=KV,
            tree_core_backend=self.BACKEND,
            enable_swa_islands=islands,
            swa_islands_reclaim=reclaim,
            chunked_prefill_size=CHUNK,
            **fields,
        )
        cache = (cls or (SWAIslandUnifiedRadixCache if islands else UnifiedRadixCache))(
            params
        )
        self.assertEqual(cache._tree_core_backend, self.BACKEND)
        return cache

    def commit_prompt(self, cache, each_commit=None):
        req = make_prefilling_req(cache, PROMPT)
        for k in range(1, CHUNKS + 1):
            commit_chunk(cache, req, k * CHUNK)
            if each_commit is not None:
                each_commit(req)
        return req

    def test_lazy_hits_up_to_the_divergence_eager_only_up_to_the_chunk_end(self):
        hits = {}
        for reclaim in ("lazy", "eager"):
            cache = self.build(reclaim)
            req = self.commit_prompt(cache)
            hits[reclaim] = (
                match_prefix(cache, BRANCH).device_prefix_len,
                evicted_swa(req),
            )
        self.assertEqual(
            hits["lazy"], (DIVERGE_AT, 0)
        )  # nothing freed, all of it matchable
        self.assertEqual(hits["eager"][0], CHUNK)  # #36131: back to the last chunk end
        self.assertGreater(hits["eager"][1], DIVERGE_AT)

    def test_lazy_leaves_the_committed_chunks_evictable_outside_one_locked_window(self):
        cache = self.build("lazy")

        def check(req):
            self.assertEqual(evicted_swa(req), 0)
            self.assertEqual(
                cache.swa_protected_size(), WINDOW_LEFT
            )  # one window (p = 1)
            self.assertEqual(
                cache.swa_evictable_size(), req.kv.cache_protected_len - WINDOW_LEFT
            )

        self.commit_prompt(cache, check)

    def test_auto_is_lazy_with_a_chunk_of_free_swa_and_eager_below_it(self):
        self.assertEqual(reclaim_watermark(CHUNK, P), CHUNK)
        hits = {}
        for short in (False, True):
            cache = self.build("auto")
            allocator = cache.token_to_kv_pool_allocator
            if (
                short
            ):  # other requests' KV: 8 SWA tokens free once the prompt has its KV
                taken = allocator.alloc(KV - len(PROMPT) - 8)
                self.assertIsNotNone(taken)
            decisions = []
            req = self.commit_prompt(
                cache,
                lambda r: decisions.append(
                    (
                        cache.frees_out_of_window_at_commit(r),
                        allocator.swa_available_size(),
                    )
                ),
            )
            for frees, available in decisions:
                self.assertEqual(frees, available < CHUNK)
            hits[short] = match_prefix(cache, BRANCH).device_prefix_len
            if short:
                # the first two commits free (8, then 40 SWA tokens free), the second chunk's
                # frees lift the pool above the watermark, so the third commit keeps its chunk
                self.assertEqual(evicted_swa(req), 2 * CHUNK - 1 - WINDOW_LEFT)
        self.assertEqual(hits, {False: DIVERGE_AT, True: CHUNK})

    def test_auto_frees_at_every_commit_where_the_pool_cannot_keep_a_chunk_per_request(
        self,
    ):
        hits = {}
        for max_num_reqs in (4, 16):  # KV 512 SWA tokens: 4 x 64 fits, 16 x 64 does not
            cache = self.build("auto", max_num_reqs=max_num_reqs)
            allocator = cache.token_to_kv_pool_allocator
            fits = lazy_reclaim_fits(
                allocator.size_swa, cache.req_to_token_pool.size, CHUNK, P
            )
            self.assertEqual(fits, max_num_reqs == 4)
            self.assertEqual(cache.lazy_reclaim_fits, fits)
            decisions = []
            req = self.commit_prompt(
                cache,
                lambda r: decisions.append(
                    (
                        cache.frees_out_of_window_at_commit(r),
                        allocator.swa_available_size(),
                    )
                ),
            )
            self.assertTrue(all(available >= CHUNK for _, available in decisions))
            self.assertEqual([frees for frees, _ in decisions], [not fits] * CHUNKS)
            hits[max_num_reqs] = (
                match_prefix(cache, BRANCH).device_prefix_len,
                evicted_swa(req),
            )
        self.assertEqual(hits[4], (DIVERGE_AT, 0))
        self.assertEqual(hits[16][0], CHUNK)  # as eager: back to the last chunk end
        self.assertGreater(hits[16][1], DIVERGE_AT)

    def test_the_hold_stays_one_window_after_every_commit(self):
        interval = 48  # decode islands a window apart (closer ones: see the decode-island tests)
        for reclaim in POLICIES:
            with self.subTest(reclaim=reclaim):
                cache = self.build(reclaim, swa_islands_decode_interval=interval)
                holds = []
                req = self.commit_prompt(
                    cache, lambda r: holds.append(cache.swa_protected_size())
                )
                finish_prefill(req, 1000)
                ends = {req.kv.cache_protected_len}
                for i in range(120):
                    decode_step(cache, req, [1001 + i], swa_eviction_interval=32)
                    holds.append(cache.swa_protected_size())
                    ends.add(req.kv.cache_protected_len)
                self.assertGreaterEqual(len(ends), 3)  # decode islands were laid
                self.assertLessEqual(max(holds), W + 2 * P, holds)
                self.assertGreater(min(holds[:CHUNKS]), 0)
                shared = PROMPT + list(
                    req.output_ids[: computed_len(req) - len(PROMPT) - 3]
                )
                self.assertGreaterEqual(
                    match_prefix(cache, shared + [7]).device_prefix_len, max(ends)
                )

    def test_pools_return_to_baseline_after_everything_is_evicted(self):
        for reclaim in POLICIES:
            with self.subTest(reclaim=reclaim):
                cache = self.build(reclaim, swa_islands_decode_interval=48)
                allocator = cache.token_to_kv_pool_allocator
                baseline = (
                    allocator.full_available_size(),
                    allocator.swa_available_size(),
                )
                req = self.commit_prompt(cache)
                finish_prefill(req, 1000)
                for i in range(60):
                    decode_step(cache, req, [1001 + i], swa_eviction_interval=32)
                other = make_prefilling_req(cache, BRANCH, rid="r1")
                commit_chunk(cache, other, CHUNK)
                release(cache, req, "finish")
                release(cache, other, "abort")
                self.assertEqual(cache.full_protected_size(), 0)
                self.assertEqual(cache.swa_protected_size(), 0)
                cache.evict(EvictParams(num_tokens=KV, swa_num_tokens=KV))
                self.assertEqual(cache.full_evictable_size(), 0)
                self.assertEqual(cache.swa_evictable_size(), 0)
                self.assertEqual(
                    (allocator.full_available_size(), allocator.swa_available_size()),
                    baseline,
                )

    def branching_req(self, cache):
        """A request for ``BRANCHED`` whose match found Full KV past its SWA hit: ``PROMPT``
        committed and finished, then its first two chunks' SWA evicted (the SWA hit is 0, the
        branch at ``DIVERGE_AT``), as admission leaves it (``swa_branching_seqlen`` set).
        """
        release(cache, self.commit_prompt(cache), "finish")
        cache.evict(EvictParams(num_tokens=0, swa_num_tokens=2 * CHUNK))
        self.assertEqual(match_prefix(cache, BRANCHED).device_prefix_len, 0)
        req = make_prefilling_req(cache, BRANCHED, rid="r1")
        req.swa_branching_seqlen = match_prefix(cache, BRANCHED).swa_branching_seqlen
        return req

    def test_a_commit_goes_on_past_an_swa_branch(self):
        """A request whose match's Full KV hit runs past its SWA hit (the first two chunks'
        SWA evicted): main's first insert stops at that branch (``swa_branching_seqlen``) and
        leaves the rest to the request's next checkpoint; with islands the commit goes on to its
        end, so the prompt's end is a match end once prefilled and none of the request's SWA is
        outside the tree but its one locked window. Flag off: stock main stops at the branch.
        """
        prompt = BRANCHED
        for islands, reclaim in (
            (True, "lazy"),
            (True, "eager"),
            (True, "auto"),
            (False, "lazy"),
        ):
            with self.subTest(islands=islands, reclaim=reclaim):
                cache = self.build(reclaim, islands=islands)
                allocator = cache.token_to_kv_pool_allocator
                baseline = (
                    allocator.full_available_size(),
                    allocator.swa_available_size(),
                )
                req = self.branching_req(cache)
                self.assertEqual(req.swa_branching_seqlen, DIVERGE_AT)
                commit_chunk(cache, req, len(prompt))
                hit = match_prefix(cache, prompt + [7]).device_prefix_len
                used = allocator.size_swa - allocator.swa_available_size()
                outside = used - cache.swa_evictable_size() - cache.swa_protected_size()
                if islands:
                    self.assertEqual(
                        (req.kv.cache_protected_len, hit), (len(prompt),) * 2
                    )
                    self.assertEqual(outside, 0)
                    self.assertLessEqual(cache.swa_protected_size(), W + 2 * P)
                else:
                    self.assertEqual(req.kv.cache_protected_len, DIVERGE_AT)
                    self.assertLessEqual(hit, DIVERGE_AT)
                    self.assertGreater(outside, 0)
                release(cache, req, "finish")
                cache.evict(EvictParams(num_tokens=KV, swa_num_tokens=KV))
                self.assertEqual(
                    (allocator.full_available_size(), allocator.swa_available_size()),
                    baseline,
                )

    def test_a_request_finished_at_its_branch_inserts_as_stock_main(self):
        """A request that finishes before any checkpoint with its SWA branch pending: its finish
        inserts up to the branch and frees the rest, on stock main (commit-time free off, as
        ``lazy``) and with islands alike: the finish hands the request's KV to the tree in one
        insert, never two."""
        prompt = BRANCHED
        rows = {}
        for islands in (True, False):
            with envs.SGLANG_OPT_UNIFIED_CACHE_FREE_OUT_OF_WINDOW_SLOTS.override(False):
                cache = self.build("lazy", islands=islands)
                allocator = cache.token_to_kv_pool_allocator
                baseline = (
                    allocator.full_available_size(),
                    allocator.swa_available_size(),
                )
                req = self.branching_req(cache)
                finish_prefill(req, 1000)
                release(cache, req, "finish")
            rows[islands] = (
                match_prefix(cache, prompt + [1000, 7]).device_prefix_len,
                cache.full_evictable_size(),
                cache.swa_evictable_size(),
                allocator.full_available_size(),
                allocator.swa_available_size(),
            )
            self.assertEqual(
                cache.full_protected_size() + cache.swa_protected_size(), 0
            )
            cache.evict(EvictParams(num_tokens=KV, swa_num_tokens=KV))
            self.assertEqual(
                (allocator.full_available_size(), allocator.swa_available_size()),
                baseline,
            )
        self.assertEqual(rows[True], rows[False])
        self.assertLessEqual(rows[True][0], DIVERGE_AT)

    def test_flag_off_the_stock_cache_answers_the_environment_variable(self):
        for free in (True, False):
            with (
                self.subTest(free_out_of_window=free),
                envs.SGLANG_OPT_UNIFIED_CACHE_FREE_OUT_OF_WINDOW_SLOTS.override(free),
            ):
                cache = self.build(islands=False)
                self.assertIs(type(cache), UnifiedRadixCache)
                req = self.commit_prompt(cache)
                self.assertIs(cache.frees_out_of_window_at_commit(req), free)
                self.assertEqual(evicted_swa(req) > 0, free)

    def test_eager_and_lazy_commit_as_stock_main_with_the_variable_on_and_off(self):
        def rows(cache):
            out = []
            self.commit_prompt(
                cache,
                lambda r: out.append(
                    (
                        r.kv.cache_protected_len,
                        evicted_swa(r),
                        cache.swa_protected_size(),
                        cache.swa_evictable_size(),
                        cache.full_evictable_size(),
                    )
                ),
            )
            return out, match_prefix(cache, BRANCH).device_prefix_len

        for reclaim, free in (("eager", True), ("lazy", False)):
            with self.subTest(reclaim=reclaim):
                with envs.SGLANG_OPT_UNIFIED_CACHE_FREE_OUT_OF_WINDOW_SLOTS.override(
                    free
                ):
                    stock = rows(self.build(islands=False))
                self.assertEqual(rows(self.build(reclaim)), stock)

    def test_every_site_asks_the_cache_not_the_variable(self):
        """A cache that answers against the variable is obeyed at all three sites."""
        for answer in (False, True):
            with (
                self.subTest(answer=answer),
                envs.SGLANG_OPT_UNIFIED_CACHE_FREE_OUT_OF_WINDOW_SLOTS.override(
                    not answer
                ),
            ):
                cls = type(
                    "Decided",
                    (UnifiedRadixCache,),
                    {"frees_out_of_window_at_commit": lambda self, req: answer},
                )
                # checkpoint_into_tree
                cache = self.build(islands=False, cls=cls)
                self.assertEqual(evicted_swa(self.commit_prompt(cache)) > 0, answer)
                # advance_unpublished_req (a request barred from the tree)
                cache = self.build(islands=False, cls=cls)
                req = make_prefilling_req(cache, PROMPT)
                req.fill_ids = list(PROMPT)
                cache.advance_unpublished_req(req)
                self.assertEqual(evicted_swa(req) > 0, answer)
                # the SWA component's free after an inserted branch
                cache = self.build(islands=False, cls=cls)
                req = make_prefilling_req(cache, PROMPT)
                req.fill_ids = list(PROMPT)
                swa = next(
                    c
                    for c in cache._components_tuple
                    if c.component_type == ComponentType.SWA
                )
                swa.cleanup_after_caching_req(
                    req,
                    is_finished=False,
                    insert_result=InsertResult(prefix_len=0, swa_branch_inserted=True),
                )
                self.assertEqual(evicted_swa(req) > 0, answer)


class TestSwaIslandReclaimPythonCore(_ReclaimSuite, unittest.TestCase):
    BACKEND = "python"


class TestSwaIslandReclaimRustCore(_ReclaimSuite, unittest.TestCase):
    BACKEND = "rust"


if __name__ == "__main__":
    unittest.main()
