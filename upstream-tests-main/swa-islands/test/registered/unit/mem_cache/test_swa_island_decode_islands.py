"""Decode islands of SWAIslandUnifiedRadixCache on both tree cores, driven as the scheduler drives
the cache (chunk commits, decode steps that call ``on_decode_progress``, ``release_kv_cache``) over
the real UnifiedRadixCache, SWA allocator and pools.

- a decode island is laid once ``interval`` tokens were committed since the last island, whatever
  the accept lengths (a modulo trigger would miss most of them); under the overlap scheduler the
  committed tokens include the launched step's, as in what ``release_kv_cache`` checkpoints;
- a request that shares a running request's prompt and part of its output hits at least the last
  island's end (stock main: only the prompt, the output enters the tree at finish);
- an island's window lock is released ``w + p`` tokens after it, once, and main's
  ``SGLANG_OPT_RELEASE_PREFILL_SWA`` call cannot release it earlier; with islands at least a
  window apart the lock never holds more than ``w + 2p`` SWA tokens (closer islands: the lock
  takes whole island nodes up to a window, so up to ``w + interval + p``);
- finished, aborted and retracted requests leave the pools as they found them once the tree is
  evicted;
- both tree cores lay the same islands and cache the same tokens;
- all of it with token keys and with EAGLE's bigram keys (one entry fewer than the tokens they
  span: an island ends one token earlier).

Each test fails with the hook a no-op (stock main: ``UnifiedRadixCache.on_decode_progress``).
"""

import unittest

from swa_islands_stack import WINDOW_LEFT  # beside this file
from swa_islands_stack import (
    TREE_CORES,
    build_params,
    commit_chunk,
    computed_len,
    decode_step,
    finish_prefill,
    make_prefilling_req,
    match_prefix,
    release,
)

from sglang.srt.mem_cache.base_prefix_cache import EvictParams
from sglang.srt.mem_cache.swa_island_formulas import (
    decode_island_due,
    island_out_of_window,
)
from sglang.srt.mem_cache.swa_island_radix_cache import SWAIslandUnifiedRadixCache
from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache
from sglang.test.ci.ci_register import register_cpu_ci

register_cpu_ci(est_time=20, suite="base-a-test-cpu")

CHUNK = 64  # chunked prefill; the default decode-island interval is CHUNK // 4
INTERVAL = CHUNK // 4
W = WINDOW_LEFT + 1
KV = 512
PROMPT = list(range(10, 10 + 2 * CHUNK))  # two chunks
ACCEPTS = (3, 5, 8, 1, 7, 2, 6, 4)  # speculative accept lengths, cycled
DECODE_STEPS = 24  # 108 decode tokens


def output_token(i: int) -> int:
    return 1000 + i


def build(
    backend: str, *, islands: bool = True, eagle: bool = False, page: int = 1, **fields
):
    defaults = dict(
        enable_swa_islands=islands,
        chunked_prefill_size=CHUNK,
        tree_core_backend=backend,
        is_eagle=eagle,
        swa_islands_eviction="lru",
    )
    params = build_params(
        max_num_reqs=2, kv_size=KV, page_size=page, **{**defaults, **fields}
    )
    cls = SWAIslandUnifiedRadixCache if islands else UnifiedRadixCache
    return cls(params)


def prefill(cache, rid="r0"):
    """A running request: the prompt committed chunk by chunk, its first token sampled."""
    req = make_prefilling_req(cache, PROMPT, rid=rid)
    for end in range(CHUNK, len(PROMPT) + 1, CHUNK):
        commit_chunk(cache, req, end)
    finish_prefill(req, output_token(0))
    return req


def decode(cache, req, steps, *, each_step=None, **kw):
    """``steps`` decode steps with the cycled accept lengths; ``each_step(L)`` after each."""
    for s in range(steps):
        n = len(req.output_ids)
        decode_step(
            cache,
            req,
            [output_token(n + j) for j in range(ACCEPTS[s % len(ACCEPTS)])],
            **kw,
        )
        if each_step is not None:
            each_step(computed_len(req))


def island_ends(cache, req, steps, **kw):
    """[(L, island end)] at every step where the request's tree-protected end moved."""
    ends = []

    def note(L):
        if not ends or req.kv.cache_protected_len != ends[-1][1]:
            ends.append((L, req.kv.cache_protected_len))

    note(computed_len(req))
    decode(cache, req, steps, each_step=note, **kw)
    return ends[1:]


class _DecodeIslandSuite:
    BACKEND = "python"
    EAGLE = False  # bigram keys: a key of L tokens has L - 1 entries
    PAGE = 1

    def build(self, **kw):
        return build(self.BACKEND, eagle=self.EAGLE, page=self.PAGE, **kw)

    def key_end(self, L: int) -> int:
        """Where an island of L computed tokens ends: its key, page-aligned."""
        return (L - int(self.EAGLE)) // self.PAGE * self.PAGE

    def test_a_decode_island_is_laid_every_interval_whatever_the_accept_lengths(self):
        cache = self.build()
        self.assertEqual(cache.decode_island_interval, INTERVAL)
        req = prefill(cache)
        ends = island_ends(cache, req, DECODE_STEPS)
        # replay of the cadence over the same computed lengths; an island ends where its key
        # ends (L tokens, L - 1 bigrams)
        prompt_end = self.key_end(len(PROMPT))
        expected, last, L = [], prompt_end, len(PROMPT)  # after the prefill: L = prompt
        for s in range(DECODE_STEPS):
            L += ACCEPTS[s % len(ACCEPTS)]
            if decode_island_due(L, last, INTERVAL):
                expected.append((L, self.key_end(L)))
                last = self.key_end(L)
        self.assertEqual(ends, expected)
        self.assertGreaterEqual(len(ends), 5)
        modulo = [L for L, _ in expected if L % INTERVAL == 0]
        self.assertLess(len(modulo), len(ends) // 2)  # a modulo trigger would miss most
        gaps = [b - a for (_, a), (_, b) in zip([(0, prompt_end)] + ends, ends)]
        self.assertTrue(
            all(INTERVAL - self.PAGE <= g < INTERVAL + max(ACCEPTS) for g in gaps), gaps
        )

    def test_a_request_sharing_the_running_output_hits_its_last_island(self):
        hits = {}
        for islands in (False, True):
            cache = self.build(islands=islands)
            req = prefill(cache)
            decode(cache, req, DECODE_STEPS, swa_eviction_interval=32)
            last_end = req.kv.cache_protected_len
            shared = PROMPT + list(
                req.output_ids[: computed_len(req) - len(PROMPT) - 3]
            )
            hits[islands] = (
                match_prefix(cache, shared + [7] * 10).device_prefix_len,
                last_end,
            )
        prompt_end = self.key_end(len(PROMPT))
        self.assertEqual(
            hits[False], (prompt_end, prompt_end)
        )  # stock: only the prompt
        hit, last_end = hits[True]
        self.assertGreater(last_end, len(PROMPT))
        self.assertGreaterEqual(hit, last_end)

    def test_an_island_window_lock_is_released_w_plus_p_later_and_the_hold_stays_bounded(
        self,
    ):
        # 48 > w + p: each island's lock is released before the next island
        released_ends, _ = self._check_window_release(48)
        # the prompt-end island and every decode island but the latest were released
        self.assertGreaterEqual(len(released_ends), 2)
        self.assertEqual(released_ends[0], self.key_end(len(PROMPT)))

    def test_a_step_that_lays_an_island_and_leaves_the_last_keeps_the_new_window_locked(
        self,
    ):
        # w + p + 1: a step that lays an island mostly also leaves the previous island's window;
        # only the previous lock may go, the new island's window is the one the request reads
        _, both = self._check_window_release(W + self.PAGE + 1)
        self.assertGreaterEqual(both, 2)

    def _check_window_release(self, interval):
        """Decode with ``interval``, checking every step that the lock is released exactly when
        the request left the island it locks. Returns (island ends whose lock was released, steps
        that laid an island while leaving the previous island's window)."""
        P = self.PAGE
        cache = self.build(swa_islands_decode_interval=interval)
        req = prefill(cache)
        released_ends, both = [], 0
        previous = [req.kv.cache_protected_len]

        def check(L):
            nonlocal both
            end = req.kv.cache_protected_len
            if end != previous[0] and island_out_of_window(L, previous[0], W, P):
                both += 1
            previous[0] = end
            self.assertEqual(
                req.lock.swa_released, island_out_of_window(L, end, W, P), (L, end)
            )
            # main's SGLANG_OPT_RELEASE_PREFILL_SWA asks every step once past a window of
            # decode batches; the island cache answers only once the request left the island
            cache.release_swa_prefix_lock(req)
            out = island_out_of_window(L, end, W, P)
            self.assertEqual(req.lock.swa_released, out, (L, end))
            self.assertLessEqual(cache.swa_protected_size(), W + 2 * P)
            if out:
                self.assertEqual(cache.swa_protected_size(), 0)
                if not released_ends or released_ends[-1] != end:
                    released_ends.append(end)
            else:
                self.assertGreater(cache.swa_protected_size(), 0)

        decode(cache, req, DECODE_STEPS, each_step=check, swa_eviction_interval=32)
        return released_ends, both

    def test_islands_closer_than_a_window_hold_at_most_w_plus_interval(self):
        # main locks whole nodes back to one window (only a leaf longer than the window is
        # split): a leaf of `interval` < w tokens locks the previous island's node too
        P = self.PAGE
        cache = self.build()
        req = prefill(cache)
        holds = []
        decode(
            cache,
            req,
            DECODE_STEPS,
            each_step=lambda L: holds.append(cache.swa_protected_size()),
            swa_eviction_interval=32,
        )
        self.assertLessEqual(max(holds), W + INTERVAL + P)
        self.assertGreater(
            max(holds), W + 2 * P
        )  # the price of islands closer than a window

    def test_under_overlap_an_island_takes_the_launched_step_as_release_would(self):
        # the overlap scheduler allocates and launches the next step before it processes this
        # one's result: kv_committed_len is one ahead of the computed tokens, and what
        # release_kv_cache would checkpoint (owned_kv_len) includes the launched position. The
        # island is due one step sooner and ends where it would without overlap.
        first = {}
        for overlap in (False, True):
            cache = self.build()
            allocator = cache.token_to_kv_pool_allocator
            baseline = (allocator.full_available_size(), allocator.swa_available_size())
            req = prefill(cache)
            while (
                req.kv.cache_protected_len <= len(PROMPT)
                and len(req.output_ids) < 4 * INTERVAL
            ):
                decode_step(
                    cache, req, [output_token(len(req.output_ids))], overlap=overlap
                )
            end = req.kv.cache_protected_len
            first[overlap] = (len(req.output_ids), end)
            self.assertEqual(end, self.key_end(req.owned_kv_len()))
            if (
                overlap
            ):  # the island covers the launched position, one past the computed tokens
                self.assertEqual(req.owned_kv_len(), computed_len(req) + 1)
            release(cache, req, "finish")
            cache.evict(EvictParams(num_tokens=KV, swa_num_tokens=KV))
            self.assertEqual(
                (allocator.full_available_size(), allocator.swa_available_size()),
                baseline,
            )
        (n, end), (n_overlap, end_overlap) = first[False], first[True]
        self.assertGreater(end, len(PROMPT))
        self.assertEqual((n_overlap, end_overlap), (n - 1, end))

    def test_pools_return_to_baseline_after_finish_abort_or_retract(self):
        for how in ("finish", "abort", "retract"):
            with self.subTest(how=how):
                cache = self.build(swa_islands_decode_interval=48)
                allocator = cache.token_to_kv_pool_allocator
                baseline = (
                    allocator.full_available_size(),
                    allocator.swa_available_size(),
                )
                req = prefill(cache)
                for _ in range(40):  # up to a step where a decode island was left
                    decode(cache, req, 1, swa_eviction_interval=32)
                    if (
                        req.kv.cache_protected_len > len(PROMPT)
                        and req.lock.swa_released
                    ):
                        break
                # the decoded text is in the tree before the request ends, its island's window
                # lock already released (the release then must not take it twice)
                self.assertGreater(req.kv.cache_protected_len, len(PROMPT))
                self.assertTrue(req.lock.swa_released)
                other = prefill(
                    cache, rid="r1"
                )  # a second request on the shared prompt
                decode(cache, other, 3)
                release(cache, req, how)
                release(cache, other, "finish")
                self.assertEqual(cache.full_protected_size(), 0)
                self.assertEqual(cache.swa_protected_size(), 0)
                cache.evict(EvictParams(num_tokens=KV, swa_num_tokens=KV))
                self.assertEqual(cache.full_evictable_size(), 0)
                self.assertEqual(cache.swa_evictable_size(), 0)
                self.assertEqual(
                    (allocator.full_available_size(), allocator.swa_available_size()),
                    baseline,
                )


class TestDecodeIslandsPythonCore(_DecodeIslandSuite, unittest.TestCase):
    BACKEND = "python"


class TestDecodeIslandsRustCore(_DecodeIslandSuite, unittest.TestCase):
    BACKEND = "rust"


class TestDecodeIslandsBigramKeysPythonCore(_DecodeIslandSuite, unittest.TestCase):
    BACKEND, EAGLE = "python", True


class TestDecodeIslandsBigramKeysRustCore(_DecodeIslandSuite, unittest.TestCase):
    BACKEND, EAGLE = "rust", True


class TestDecodeIslandsPage4PythonCore(_DecodeIslandSuite, unittest.TestCase):
    BACKEND, PAGE = "python", 4


class TestDecodeIslandsPage4RustCore(_DecodeIslandSuite, unittest.TestCase):
    BACKEND, PAGE = "rust", 4


class TestDecodeIslandsPage4BigramKeysRustCore(_DecodeIslandSuite, unittest.TestCase):
    BACKEND, EAGLE, PAGE = "rust", True, 4


class TestDecodeIslandsBothCoresAgree(unittest.TestCase):
    def test_both_cores_lay_the_same_islands_and_cache_the_same_tokens(self):
        records = {}
        for backend in TREE_CORES:
            cache = build(backend)
            req = prefill(cache)
            ups = []
            checkpoint = cache.checkpoint
            cache.checkpoint = lambda r, *, up_to, **kw: (
                ups.append(up_to),
                checkpoint(r, up_to=up_to, **kw),
            )
            decode(cache, req, DECODE_STEPS, swa_eviction_interval=32)
            probes = [PROMPT + list(req.output_ids[:k]) + [7] for k in range(0, 100, 9)]
            records[backend] = dict(
                up_to=ups,
                hits=[match_prefix(cache, key).device_prefix_len for key in probes],
                sizes=(
                    cache.full_evictable_size(),
                    cache.full_protected_size(),
                    cache.swa_evictable_size(),
                    cache.swa_protected_size(),
                ),
            )
        self.assertEqual(records["python"], records["rust"])
        self.assertGreaterEqual(
            len(records["rust"]["up_to"]), 5
        )  # decode islands were laid
        self.assertGreater(max(records["rust"]["hits"]), len(PROMPT))


if __name__ == "__main__":
    unittest.main()
