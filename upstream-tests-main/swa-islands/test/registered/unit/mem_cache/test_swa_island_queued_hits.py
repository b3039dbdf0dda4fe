"""Queued hits under the window-aware SWA eviction on sglang 0.5.23's Python tree core
(``--swa-islands-eviction window``): a request joining the waiting queue
(``SWAIslandUnifiedRadixCache.on_request_queued``, the scheduler's hook) keeps the window its
match ends at until its first checkpoint or its release; SWA eviction takes queued hits' windows
after every other window, the latest queued request's first; a checkpoint moves the queued hits
that continue along the committed path.

The tree: a 192-token prompt committed in three 64-token chunks with reclaim ``lazy``, then
aborted: ``[0,33) [33,64) [64,97) [97,128) [128,161) [161,192)``, chunk ends 64 and 128 retention
points, 192 a leaf; 99 cold tokens. Windows are 31 tokens (``window_lock_tokens``: page 1).
"""

import gc
import random
import unittest
from array import array

from swa_islands_stack import (
    build_params,
    commit_chunk,
    decode_step,
    finish_prefill,
    make_prefilling_req,
    match_prefix,
    release,
)

from sglang.srt.managers.schedule_batch import Req, ScheduleBatch
from sglang.srt.managers.schedule_policy import PrefillAdder
from sglang.srt.mem_cache.base_prefix_cache import EvictParams
from sglang.srt.mem_cache.swa_island_formulas import COLD, QUEUED, RETENTION, WINDOW
from sglang.srt.mem_cache.swa_island_queue import QueuedHits
from sglang.srt.mem_cache.swa_island_radix_cache import SWAIslandUnifiedRadixCache
from sglang.srt.mem_cache.unified_cache.components import ComponentType
from sglang.srt.sampling.sampling_params import SamplingParams
from sglang.test.ci.ci_register import register_cpu_ci

register_cpu_ci(est_time=5, suite="base-a-test-cpu")

CHUNK, CHUNKS, KV = 64, 3, 512
PROMPT = list(range(10, 10 + CHUNK * CHUNKS))
COLD_TOKENS = 3 * 33
WINDOW_TOKENS = 31  # a retention point's or the leaf's window: one node each


def waiting_req(prompt, rid) -> Req:
    """A request as it joins the waiting queue: tokens, no KV row, nothing matched yet."""
    params = SamplingParams(temperature=0, max_new_tokens=4)
    params.normalize(None)
    return Req(
        rid=rid,
        origin_input_text="",
        origin_input_ids=array("q", prompt),
        sampling_params=params,
    )


def hit_at(cache, end: int) -> int:
    return match_prefix(cache, PROMPT[:end] + [7]).device_prefix_len


def hit_end(cache, req) -> int:
    """The end (tokens from the root) of ``req``'s queued hit."""
    node = cache.components[ComponentType.SWA].queued.hits[req]
    end = 0
    while node is not cache.tree_core.root_node:
        end += len(node.key)
        node = node.parent
    return end


class TestSWAIslandQueuedHits(unittest.TestCase):
    def build(self, eviction="window"):
        cache = SWAIslandUnifiedRadixCache(
            build_params(
                max_num_reqs=4,
                kv_size=KV,
                tree_core_backend="python",
                enable_swa_islands=True,
                swa_islands_reclaim="lazy",
                chunked_prefill_size=CHUNK,
                swa_islands_eviction=eviction,
            )
        )
        req = make_prefilling_req(cache, PROMPT)
        for k in range(1, CHUNKS + 1):
            commit_chunk(cache, req, k * CHUNK)
        release(cache, req, "abort")
        self.assertEqual(cache.swa_evictable_size(), len(PROMPT))
        return cache

    def evict_swa(self, cache, tokens):
        cache.evict(EvictParams(num_tokens=0, swa_num_tokens=tokens))

    def test_a_queued_hit_outlasts_every_other_window(self):
        # without a queued request the first chunk end (a retention window, the least recently
        # used) goes first once the cold SWA is gone; queued, it goes last
        everything_else = COLD_TOKENS + 2 * WINDOW_TOKENS
        # (a hit falls back to the deepest match end whose window survived)
        for queued, hits in ((False, (0, 0, 192)), (True, (64, 64, 64))):
            with self.subTest(queued=queued):
                cache = self.build()
                waiting = waiting_req(
                    PROMPT[:64] + [5] * 20, "w"
                )  # the waiting queue holds it
                if queued:
                    cache.on_request_queued(waiting)
                self.evict_swa(cache, everything_else)
                self.assertEqual(
                    cache.swa_evictable_size(), len(PROMPT) - everything_else
                )
                self.assertEqual(
                    tuple(hit_at(cache, end) for end in (64, 128, 192)), hits
                )

    def test_the_window_of_a_queued_hit_is_its_class(self):
        cache = self.build()
        swa = cache.components[ComponentType.SWA]
        waiting = waiting_req(PROMPT[:128] + [5] * 20, "w")
        cache.on_request_queued(waiting)
        path = {}
        node = cache.tree_core.root_node
        for start in (0, 33, 64, 97, 128, 161):
            node = next(
                c for c in node.children.values() if c.key.token_ids[0] == PROMPT[start]
            )
            path[start] = node
        self.assertEqual(
            [swa.eviction_class(path[s]) for s in (0, 33, 64, 97, 128, 161)],
            [COLD, RETENTION, COLD, QUEUED, COLD, WINDOW],
        )
        swa.check_candidates()

    def test_latest_queued_goes_first_among_queued_hits(self):
        # the cold SWA, the leaf's window, then the window of the request queued last
        for first, hits in ((64, (64, 64)), (128, (0, 128))):
            with self.subTest(queued_first=first):
                cache = self.build()
                waiting = [
                    waiting_req(PROMPT[:end] + [5] * 20, f"w{end}")
                    for end in (first, 192 - first)
                ]
                for req in waiting:
                    cache.on_request_queued(req)
                self.evict_swa(cache, COLD_TOKENS + 2 * WINDOW_TOKENS)
                self.assertEqual((hit_at(cache, 64), hit_at(cache, 128)), hits)

    def test_what_a_queued_hit_uncovers_goes_before_the_next_queued_hit(self):
        # a match at 128 makes [97,128) a match end's window; queued: at 64, then at 150 (splits
        # [128,161)); a running request locks the leaf [161,192). The cold SWA [0,33) [64,97)
        # and the leaf's window left, [150,161), go first (77), then the latest queued hit's
        # end [128,150) (22): [97,128) is then only the window of 128, which goes before the
        # queued hit at 64
        cache = self.build()
        self.assertEqual(hit_at(cache, 128), 128)
        waiting = [waiting_req(PROMPT[:end] + [5] * 20, f"w{end}") for end in (64, 150)]
        for req in waiting:
            cache.on_request_queued(req)
        leaf = cache.tree_core.root_node
        while leaf.children:
            leaf = next(
                c for c in leaf.children.values() if c.key.token_ids[0] in PROMPT
            )
        self.assertEqual(len(leaf.key), 31)
        lock = cache.inc_lock_ref(leaf.id)
        self.evict_swa(cache, 77 + 22 + 31)
        self.assertEqual((hit_at(cache, 64), hit_at(cache, 128)), (64, 64))
        cache.components[ComponentType.SWA].check_candidates()
        cache.dec_lock_ref(leaf.id, lock.to_dec_params())

    def test_the_first_checkpoint_and_the_release_end_a_queued_hit(self):
        cache = self.build()
        swa = cache.components[ComponentType.SWA]
        running = make_prefilling_req(cache, PROMPT[:64] + [5] * 40, rid="admitted")
        cache.on_request_queued(running)
        aborted = waiting_req(PROMPT[:128] + [5] * 20, "aborted")
        cache.on_request_queued(aborted)
        self.assertEqual((hit_end(cache, running), hit_end(cache, aborted)), (64, 128))
        hit_128 = swa.queued.hits[aborted]
        self.assertEqual(swa.eviction_class(hit_128), QUEUED)
        commit_chunk(cache, running, 104)  # admitted: its first checkpoint
        self.assertNotIn(running, swa.queued.hits)
        release(cache, running, "abort")
        cache.on_release(aborted, checkpointed=False)  # aborted while waiting
        self.assertEqual(len(swa.queued.hits.nodes), 0)
        self.assertNotEqual(swa.eviction_class(hit_128), QUEUED)
        swa.check_candidates()  # the released window's nodes are candidates again

    def test_a_garbage_collected_waiting_request_leaves_its_hit(self):
        for alive, hits in ((True, (64, 64)), (False, (0, 192))):
            with self.subTest(alive=alive):
                cache = self.build()
                swa = cache.components[ComponentType.SWA]
                waiting = waiting_req(PROMPT[:64] + [5] * 20, "w")
                cache.on_request_queued(waiting)
                self.assertEqual(
                    hit_at(cache, 192), 192
                )  # the leaf: the latest match end
                if not alive:
                    del waiting
                    gc.collect()
                # the next eviction forgets a collected request: its window goes by recency
                self.evict_swa(cache, COLD_TOKENS + 2 * WINDOW_TOKENS)
                self.assertEqual(len(swa.queued.hits.nodes), int(alive))
                self.assertEqual((hit_at(cache, 64), hit_at(cache, 192)), hits)
                swa.check_candidates()

    def test_a_checkpoint_moves_the_queued_hits_that_continue_along_it(self):
        cache = SWAIslandUnifiedRadixCache(
            build_params(
                max_num_reqs=4,
                kv_size=KV,
                tree_core_backend="python",
                enable_swa_islands=True,
                swa_islands_reclaim="lazy",
                chunked_prefill_size=CHUNK,
                swa_islands_eviction="window",
            )
        )
        running = make_prefilling_req(cache, PROMPT, rid="running")
        commit_chunk(cache, running, CHUNK)
        follower = waiting_req(PROMPT[:150] + [5] * 20, "follower")
        other = waiting_req(
            PROMPT[:40] + [6] * 30, "other"
        )  # diverges inside the first chunk
        for req in (follower, other):
            cache.on_request_queued(req)
        self.assertEqual((hit_end(cache, follower), hit_end(cache, other)), (64, 40))
        commit_chunk(cache, running, 2 * CHUNK)
        self.assertEqual((hit_end(cache, follower), hit_end(cache, other)), (128, 40))
        commit_chunk(cache, running, 3 * CHUNK)
        self.assertEqual(
            hit_end(cache, follower), 150
        )  # the match ends inside the last chunk
        release(cache, running, "abort")
        # the follower's window at 150 ([119,150), in the nodes [97,128) and [128,150): 53
        # tokens) outlasts the rest of the prompt
        self.evict_swa(cache, cache.swa_evictable_size() - 53)
        self.assertEqual(match_prefix(cache, PROMPT[:150] + [5]).device_prefix_len, 150)
        cache.components[ComponentType.SWA].check_candidates()

    def test_a_decode_island_moves_a_follow_up_queued_behind_its_request(self):
        cache = SWAIslandUnifiedRadixCache(
            build_params(
                max_num_reqs=4,
                kv_size=KV,
                tree_core_backend="python",
                enable_swa_islands=True,
                swa_islands_reclaim="lazy",
                chunked_prefill_size=CHUNK,
                swa_islands_decode_interval=16,
                swa_islands_eviction="window",
            )
        )
        prompt = PROMPT[:64]
        running = make_prefilling_req(cache, prompt, rid="running")
        commit_chunk(cache, running, len(prompt))
        finish_prefill(running, 500)
        outputs = [500] + list(range(501, 541))
        follow_up = waiting_req(prompt + outputs + [5] * 8, "follow-up")
        cache.on_request_queued(follow_up)
        self.assertEqual(hit_end(cache, follow_up), 64)
        for token in outputs[1:]:
            decode_step(cache, running, [token])
        # decode islands every 16 computed tokens: the last at 64 + 32
        self.assertEqual(hit_end(cache, follow_up), 96)
        release(cache, running, "abort")

    def test_admission_reserves_the_windows_of_queued_hits_while_requests_run(self):
        # queued hits at 64, 128 and again 64: two distinct windows of 31 tokens. A running
        # request holding 40 SWA slots of its own caps the reserve at 40; one holding 90 does not.
        # A hit whose end node is locked is not counted
        for own, reserve in ((40, 40), (90, 62)):
            with self.subTest(held=own):
                cache = self.build()
                waiting = [
                    waiting_req(PROMPT[:end] + [5] * 20, f"w{i}")
                    for i, end in enumerate((64, 128, 64))
                ]
                for req in waiting:
                    cache.on_request_queued(req)
                running = make_prefilling_req(
                    cache, list(range(900, 900 + own)), rid="running"
                )
                batch = ScheduleBatch(reqs=[running], batch_is_full=False)
                self.assertEqual(cache.swa_admission_reserve(batch), reserve)
                allocator = cache.token_to_kv_pool_allocator
                adder = PrefillAdder(
                    1, cache, allocator, batch, 0.5, 4096, CHUNK, max_running_requests=4
                )
                self.assertEqual(
                    adder.memory_budget.remaining_swa,
                    allocator.swa_available_size()
                    + cache.swa_evictable_size()
                    - reserve,
                )
                if (
                    own == 90
                ):  # a hit whose end is locked has no window admission could spend
                    node = cache.components[ComponentType.SWA].queued.hits[waiting[1]]
                    lock = cache.inc_lock_ref(node.id)
                    self.assertEqual(cache.swa_admission_reserve(batch), 31)
                    cache.dec_lock_ref(node.id, lock.to_dec_params())
                # counted up to the limit, visiting at most the hits it is allowed to
                swa = cache.components[ComponentType.SWA]
                self.assertEqual(
                    [
                        swa.spendable_queued_hits(limit, visits)
                        for limit, visits in ((10, 10), (1, 10), (10, 1), (0, 10))
                    ],
                    [2, 1, 1, 0],
                )
                # nothing running: nothing reserved, so admission always makes progress
                self.assertEqual(
                    cache.swa_admission_reserve(
                        ScheduleBatch(reqs=[], batch_is_full=False)
                    ),
                    0,
                )
                for req in waiting:  # admitted or gone: no queued hit, no reserve
                    cache.on_release(req, checkpointed=False)
                self.assertEqual(cache.swa_admission_reserve(batch), 0)
                release(cache, running, "abort")

    def test_lru_order_reserves_nothing(self):
        cache = self.build(eviction="lru")
        waiting = waiting_req(PROMPT[:64] + [5] * 20, "w")
        cache.on_request_queued(waiting)
        running = make_prefilling_req(cache, list(range(900, 960)), rid="running")
        self.assertEqual(
            cache.swa_admission_reserve(
                ScheduleBatch(reqs=[running], batch_is_full=False)
            ),
            0,
        )
        release(cache, running, "abort")

    def test_lru_order_keeps_no_queued_hits(self):
        cache = self.build(eviction="lru")
        waiting = waiting_req(PROMPT[:64] + [5] * 20, "w")
        cache.on_request_queued(waiting)
        self.assertIsNone(cache._swa_island_component)
        self.evict_swa(cache, COLD_TOKENS)
        self.assertEqual(hit_at(cache, 64), 0)  # upstream's walk: the oldest first

    def test_random_traffic_takes_queued_windows_last(self):
        for seed in range(4):
            with self.subTest(seed=seed):
                self.run_traffic(random.Random(seed))

    def live_classes(self, cache):
        swa = cache.components[ComponentType.SWA]
        lru = cache.tree_core.lru_lists[ComponentType.SWA]
        out, node = {}, lru.get_lru_no_lock()
        while node is not None:
            out[node.id] = (swa.eviction_class(node), len(node.key))
            node = lru.get_prev_no_lock(node)
        return out

    def run_traffic(self, rng):
        cache = SWAIslandUnifiedRadixCache(
            build_params(
                max_num_reqs=4,
                kv_size=2048,
                tree_core_backend="python",
                enable_swa_islands=True,
                swa_islands_reclaim="lazy",
                chunked_prefill_size=CHUNK,
                swa_islands_eviction="window",
            )
        )
        swa = cache.components[ComponentType.SWA]
        transcripts, waiting, token = [], [], 1000
        for i in range(30):
            base = rng.choice(transcripts) if transcripts and rng.random() < 0.7 else []
            prompt = base[: rng.randrange(1, len(base) + 1)] if base else []
            fresh = rng.randrange(8, 120)
            prompt = (prompt + list(range(token, token + fresh)))[:300]
            token += fresh
            if rng.random() < 0.5:  # a request that waits behind the others
                req = waiting_req(prompt, f"w{i}")
                cache.on_request_queued(req)
                waiting.append(req)
            if waiting and rng.random() < 0.3:
                cache.on_release(
                    waiting.pop(rng.randrange(len(waiting))), checkpointed=False
                )
            need = len(prompt) + 8
            allocator = cache.token_to_kv_pool_allocator
            if (
                min(allocator.full_available_size(), allocator.swa_available_size())
                < need
            ):
                cache.evict(EvictParams(num_tokens=need, swa_num_tokens=need))
            req = make_prefilling_req(cache, prompt, rid=f"r{i}")
            for end in range(CHUNK, len(prompt) + CHUNK, CHUNK):
                commit_chunk(cache, req, min(end, len(prompt)))
            transcripts.append(prompt)
            release(cache, req, "abort")
            swa.check_candidates()
            before = self.live_classes(cache)
            others = sum(n for c, n in before.values() if c != QUEUED)
            longest = max((n for _, n in before.values()), default=0)
            tokens = rng.randrange(1, 300)
            self.evict_swa(cache, tokens)
            after = self.live_classes(cache)
            gone = [k for k in before if k not in after]
            if tokens + longest <= others:
                self.assertFalse(
                    [k for k in gone if before[k][0] == QUEUED],
                    "a queued hit's window went while other SWA remained",
                )
            swa.check_candidates()
        self.evict_swa(cache, 2048)
        self.assertEqual(cache.swa_evictable_size(), 0)


class TestQueuedHitsLatestFirst(unittest.TestCase):
    """``QueuedHits.latest_first``, the order the window eviction takes queued hits in: the
    distinct match ends of ``in_order`` reversed (a node goes at its earliest waiting request),
    given lazily."""

    class Waiting:
        """A waiting request: ``QueuedHits`` holds it weakly."""

    def test_a_node_goes_by_its_earliest_waiting_request(self):
        root, n1, n2 = object(), object(), object()
        hits = QueuedHits(root, on_released=lambda node: None)
        a, b, c = self.Waiting(), self.Waiting(), self.Waiting()
        for req, node in ((a, n1), (b, n2), (c, n1)):
            hits.set(req, node)
        self.assertEqual(
            list(hits.latest_first()), [n2, n1]
        )  # n1 waits for a, the earliest
        hits.drop(a)
        self.assertEqual(list(hits.latest_first()), [n1, n2])  # now for c, after b
        hits.set(b, root)  # b hits nothing: the root is not a queued hit
        self.assertEqual(list(hits.latest_first()), [n1])

    def test_it_is_in_order_reversed_under_random_updates(self):
        rng = random.Random(0)
        root = object()
        nodes = [root] + [object() for _ in range(6)]
        hits = QueuedHits(root, on_released=lambda node: None)
        waiting = [self.Waiting() for _ in range(30)]
        for _ in range(400):
            req = rng.choice(waiting)
            if rng.random() < 0.3:
                hits.drop(req)
            else:
                hits.set(req, rng.choice(nodes))
            self.assertEqual(list(hits.latest_first()), hits.in_order()[::-1])

    def test_it_passes_only_the_requests_after_the_end_it_gives(self):
        root = object()
        hits = QueuedHits(root, on_released=lambda node: None)
        waiting = [self.Waiting() for _ in range(1000)]
        ends = [object() for _ in waiting]
        for req, node in zip(waiting, ends):
            hits.set(req, node)
        walk = hits.latest_first()
        self.assertIs(next(walk), ends[-1])
        self.assertEqual(
            len(walk.gi_frame.f_locals["left"]), 1
        )  # one request passed of 1000


if __name__ == "__main__":
    unittest.main()
