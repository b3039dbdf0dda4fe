"""Window-aware SWA eviction on sglang 0.5.23's Python tree core (``SWAIslandComponent``), against
upstream's ``SWAComponent`` on the same core and the same tree.

A 192-token prompt committed in three 64-token chunks with reclaim ``lazy`` (nothing freed at the
commits), then aborted: the tree keeps ``[0,33) [33,64) [64,97) [97,128) [128,161) [161,192)``
(upstream caps each new leaf at one window, 31 tokens, so each chunk splits there), all SWA live.
The chunk ends 64 and 128 are retention points, 192 a leaf. Cold SWA: ``[0,33)``, ``[64,97)``,
``[128,161)`` (99 tokens), no window of a match end needs it.

- evicting up to the cold SWA keeps every chunk end matchable; upstream's LRU walk loses the
  first chunk end;
- past the cold SWA, retention windows go least recently used first and the leaf's window last;
  a match that ended at a retention point lifts it to a match end's window, kept longer;
- the class of a node reads the window below it (a junction or a leaf is a window);
- after everything is evicted the pools are back at baseline.

The candidate index under random traffic: ``test_swa_island_eviction_index.py``.
"""

import unittest
from collections import defaultdict

import torch
from swa_islands_stack import (
    build_params,
    commit_chunk,
    make_prefilling_req,
    match_prefix,
    release,
)

from sglang.srt.mem_cache.base_prefix_cache import EvictParams
from sglang.srt.mem_cache.swa_island_formulas import COLD, RETENTION, WINDOW
from sglang.srt.mem_cache.swa_island_radix_cache import SWAIslandUnifiedRadixCache
from sglang.srt.mem_cache.unified_cache.components import ComponentType
from sglang.srt.mem_cache.unified_cache.components.swa import SWAComponent
from sglang.srt.mem_cache.unified_cache.components.swa_island import SWAIslandComponent
from sglang.test.ci.ci_register import register_cpu_ci

register_cpu_ci(est_time=5, suite="base-a-test-cpu")

CHUNK, CHUNKS, KV = 64, 3, 512
PROMPT = list(range(10, 10 + CHUNK * CHUNKS))
COLD_TOKENS = 3 * 33


def hit_at(cache, end: int) -> int:
    """Tokens a request that shares the prompt up to ``end`` and then diverges hits."""
    return match_prefix(cache, PROMPT[:end] + [7]).device_prefix_len


class TestSWAIslandEvictionOrder(unittest.TestCase):
    def build(self, component=SWAIslandComponent, host_tier=False):
        """The tree of the module docstring; ``host_tier``: as if HiCache had attached an SWA
        host pool (``has_swa_host_pool``, which the component reads; nothing is transferred).
        """
        params = build_params(
            max_num_reqs=4,
            kv_size=KV,
            tree_core_backend="python",
            enable_swa_islands=True,
            swa_islands_reclaim="lazy",
            chunked_prefill_size=CHUNK,
            component_registry_override={ComponentType.SWA: component},
        )
        cache = SWAIslandUnifiedRadixCache(params)
        cache.tree_core.has_swa_host_pool = host_tier
        self.assertIs(type(cache.components[ComponentType.SWA]), component)
        req = make_prefilling_req(cache, PROMPT)
        for k in range(1, CHUNKS + 1):
            commit_chunk(cache, req, k * CHUNK)
        release(cache, req, "abort")
        self.assertEqual(cache.swa_protected_size(), 0)
        self.assertEqual(cache.swa_evictable_size(), len(PROMPT))
        return cache

    def nodes(self, cache):
        """The prompt's path, root first, as (start, end) spans with their nodes."""
        out, node, start = [], cache.tree_core.root_node, 0
        while start < len(PROMPT):
            node = next(
                (
                    child
                    for child in node.children.values()
                    if child.key.token_ids[0] == PROMPT[start]
                ),
                None,
            )
            if node is None:
                break
            out.append(((start, start + len(node.key)), node))
            start += len(node.key)
        return out

    def filings(self, cache):
        """``filed(span)``: the candidate classes the node of ``span`` (a span of the prompt's
        path as it is now) is filed as."""
        swa = cache.components[ComponentType.SWA]
        spans = dict(self.nodes(cache))

        def filed(span):
            return [
                c for c in (COLD, RETENTION) if spans[span].id in swa._candidates[c]
            ]

        return filed

    def evict_swa(self, cache, tokens):
        cache.evict(EvictParams(num_tokens=0, swa_num_tokens=tokens))

    def test_the_tree_and_its_classes(self):
        cache = self.build()
        swa = cache.components[ComponentType.SWA]
        spans = [(span, swa.eviction_class(node)) for span, node in self.nodes(cache)]
        self.assertEqual(
            spans,
            [
                ((0, 33), COLD),
                ((33, 64), RETENTION),
                ((64, 97), COLD),
                ((97, 128), RETENTION),
                ((128, 161), COLD),
                ((161, 192), WINDOW),
            ],
        )

    def test_cold_swa_goes_first_and_every_chunk_end_stays_matchable(self):
        for component, hits in (
            (SWAComponent, (0, 128, 192)),
            (SWAIslandComponent, (64, 128, 192)),
        ):
            with self.subTest(component=component.__name__):
                cache = self.build(component)
                self.evict_swa(cache, 60)
                self.assertEqual(
                    tuple(hit_at(cache, end) for end in (64, 128, 192)), hits
                )

        cache = self.build()
        self.evict_swa(cache, COLD_TOKENS)
        self.assertEqual(cache.swa_evictable_size(), len(PROMPT) - COLD_TOKENS)
        live = [
            span
            for span, node in self.nodes(cache)
            if node.component_data[ComponentType.SWA].value is not None
        ]
        self.assertEqual(live, [(33, 64), (97, 128), (161, 192)])
        self.assertEqual([hit_at(cache, end) for end in (64, 128, 192)], [64, 128, 192])

    def test_past_the_cold_swa_retention_windows_go_before_the_leaf(self):
        cache = self.build()
        self.evict_swa(
            cache, COLD_TOKENS + 1
        )  # one retention window: the least recently used
        self.assertEqual([hit_at(cache, end) for end in (64, 128, 192)], [0, 128, 192])
        self.evict_swa(cache, 31)
        self.assertEqual([hit_at(cache, end) for end in (64, 128, 192)], [0, 0, 192])

    def test_retention_windows_go_least_recently_used_first_whoever_filed_them(self):
        # (the chunk end touched first, hits at 64 and 128 after its window went)
        for first, hits in ((64, (0, 128)), (128, (64, 64))):
            with self.subTest(touched_first=first):
                cache = self.build()
                for end in (
                    first,
                    192 - first,
                ):  # inserts ending at both chunk ends, in order
                    again = make_prefilling_req(cache, PROMPT[:end], rid=f"again{end}")
                    commit_chunk(cache, again, end)
                    release(cache, again, "abort")
                # the cold SWA, then the retention window touched first; evicting cold nodes
                # refiles the windows above them, which must not make them look recent
                self.evict_swa(cache, COLD_TOKENS + 1)
                self.assertEqual(tuple(hit_at(cache, end) for end in (64, 128)), hits)

    def test_a_hot_match_end_keeps_the_candidate_heaps_bounded(self):
        cache = self.build()
        swa = cache.components[ComponentType.SWA]
        for _ in range(
            200
        ):  # every match touches the window at 64 again: a new filing each time
            self.assertEqual(hit_at(cache, 64), 64)
        swa.check_candidates()  # one entry per filing, stale ones rebuilt away
        self.evict_swa(
            cache, COLD_TOKENS
        )  # the heap order still gives the cold SWA first
        self.assertEqual([hit_at(cache, end) for end in (64, 128, 192)], [64, 128, 192])

    def test_an_end_files_its_window_by_its_class_and_a_cold_tombstone_files_nothing(
        self,
    ):
        """The index where an end is stamped: a match end's window leaves the candidates (its
        class is WINDOW until something lowers it, which files it again), an insert end's window
        moves from COLD to RETENTION, a node no window covers stays COLD; tombstoning a COLD
        node files nothing above it (no window ran through it)."""
        cache = self.build()
        swa = cache.components[ComponentType.SWA]
        spans = dict(self.nodes(cache))
        filed = self.filings(cache)

        # the abort's unlock filed the chunk ends' windows as RETENTION, the cold SWA as COLD
        self.assertEqual(
            [filed(span) for span in ((0, 33), (33, 64), (97, 128))],
            [[COLD], [RETENTION], [RETENTION]],
        )
        self.assertEqual(hit_at(cache, 64), 64)  # a match ends at the first chunk end
        self.assertEqual(filed((33, 64)), [])
        self.assertEqual(
            filed((0, 33)), [COLD]
        )  # 33 tokens above 64: outside its window
        again = make_prefilling_req(cache, PROMPT[:128], rid="again")
        commit_chunk(
            cache, again, 128
        )  # an insert ends at the second chunk end, inside the tree
        self.assertEqual(filed((97, 128)), [RETENTION])
        self.assertEqual(filed((64, 97)), [COLD])
        swa.check_candidates()
        release(cache, again, "abort")
        swa.check_candidates()
        # the cold SWA goes: tombstoning [64,97) leaves the window above it ([33,64), the match
        # end's) out of the candidates
        self.evict_swa(cache, COLD_TOKENS)
        self.assertEqual(
            [
                spans[span].component_data[ComponentType.SWA].value is None
                for span in ((0, 33), (64, 97), (128, 161))
            ],
            [True, True, True],
        )
        self.assertEqual(filed((33, 64)), [])
        self.assertEqual(hit_at(cache, 64), 64)
        swa.check_candidates()

    def test_an_unlock_files_the_window_it_held_by_the_class_of_its_end(self):
        """An SWA lock release files the nodes it unlocked as the lock's end's window classes
        them: inside a retention end's window as RETENTION, inside a match end's not at all, the
        rest as COLD; so a COLD pass pops no node a window covers."""
        cache = self.build()
        swa = cache.components[ComponentType.SWA]
        spans = dict(self.nodes(cache))
        filed = self.filings(cache)

        again = make_prefilling_req(cache, PROMPT[:128], rid="again")
        commit_chunk(
            cache, again, 128
        )  # an insert ends at the second chunk end, locked
        self.assertEqual(cache.swa_protected_size(), 31)
        release(cache, again, "abort")
        self.assertEqual(cache.swa_protected_size(), 0)
        self.assertEqual((filed((97, 128)), filed((64, 97))), ([RETENTION], [COLD]))
        swa.check_candidates()
        match = match_prefix(
            cache, PROMPT[:64] + [7]
        )  # a match end at the first chunk end
        lock = cache.inc_lock_ref(match.last_device_node)
        cache.dec_lock_ref(match.last_device_node, lock.to_dec_params())
        self.assertEqual((filed((33, 64)), filed((0, 33))), ([], [COLD]))
        swa.check_candidates()

    def test_an_insert_end_moves_its_window_from_cold_to_retention(self):
        cache = self.build()
        swa = cache.components[ComponentType.SWA]
        filed, node = self.filings(cache), dict(self.nodes(cache))[(64, 97)]
        self.assertEqual(filed((64, 97)), [COLD])
        mid = make_prefilling_req(cache, PROMPT[:97], rid="mid")
        # an insert ends at 97: [64,97) is its window (the lock's split keeps the node on the
        # suffix, filed as [64,97) was)
        commit_chunk(cache, mid, 97)
        self.assertEqual(swa.eviction_class(node), RETENTION)
        self.assertEqual(filed((64, 97)), [RETENTION])
        swa.check_candidates()
        release(cache, mid, "abort")
        self.assertEqual(filed((64, 97)), [RETENTION])
        swa.check_candidates()

    def test_an_unlock_files_what_lies_past_a_tombstone_in_its_segment_as_cold(self):
        """A lock's segment runs through tombstones (upstream counts them), but the window of its
        end does not: a live node above a tombstone in the segment, covered by no other end, is
        COLD, and the unlock files it so."""
        cache = self.build()
        swa, core = cache.components[ComponentType.SWA], cache.tree_core
        end = dict(self.nodes(cache))[(97, 128)]
        core._split_node(end.key, end, 23)  # [97,120) [120,128): no match end, no stamp
        core._split_node(end.parent.key, end.parent, 15)  # [97,112) [112,120)
        spans = dict(self.nodes(cache))
        frees = (defaultdict(list), defaultdict(list), [])
        core._evict_component_and_detach_lru(spans[(112, 120)], swa, *frees)
        cache._free_values(frees[0], frees[1])
        self.assertIsNone(spans[(112, 120)].component_data[ComponentType.SWA].value)
        self.assertEqual(
            swa.eviction_class(spans[(97, 112)]), COLD
        )  # its window is cut
        lock = cache.inc_lock_ref(spans[(120, 128)].id)
        self.assertGreater(
            spans[(97, 112)].component_data[ComponentType.SWA].lock_ref, 0
        )
        self.evict_swa(
            cache, KV
        )  # pops [97,112) while it is locked: dropped from the candidates
        self.assertNotIn(spans[(97, 112)].id, swa._candidates[COLD])
        cache.dec_lock_ref(spans[(120, 128)].id, lock.to_dec_params())
        self.assertIn(spans[(97, 112)].id, swa._candidates[COLD])
        swa.check_candidates()

    def test_a_window_that_starts_inside_a_long_node_leaves_its_head_to_the_cold_swa(
        self,
    ):
        """A match end whose window begins inside a live node at least a window longer than the
        window's part of it: the COLD pass splits the node there and takes the head (no window
        needs it), the window stays whole. A shorter head stays with its window."""
        cache = self.build()
        other = list(range(1000, 1128))
        req = make_prefilling_req(cache, other, rid="long")
        commit_chunk(
            cache, req, 128
        )  # one 128-token insert: [0,97) and the leaf [97,128)
        release(cache, req, "abort")
        self.assertEqual(match_prefix(cache, other[:97] + [7]).device_prefix_len, 97)
        self.assertEqual(
            hit_at(cache, 97), 97
        )  # PROMPT's [64,97): a 2-token head, kept
        # the cold SWA: PROMPT's [0,33) [128,161), the long node's head [0,66)
        self.evict_swa(cache, 66 + 66)
        node, spans = cache.tree_core.root_node, []
        while node.children:
            node = next(
                (
                    c
                    for c in node.children.values()
                    if c.key.token_ids[0] == other[sum(n for _, n in spans)]
                ),
                None,
            )
            if node is None:
                break
            spans.append(
                (
                    node.component_data[ComponentType.SWA].value is not None,
                    len(node.key),
                )
            )
        self.assertEqual(spans, [(False, 66), (True, 31), (True, 31)])
        self.assertIn((64, 97), dict(self.nodes(cache)))  # not split for 2 tokens
        self.assertEqual(match_prefix(cache, other[:97] + [7]).device_prefix_len, 97)
        self.assertEqual(
            [hit_at(cache, end) for end in (64, 97, 128, 192)], [64, 97, 128, 192]
        )
        cache.components[ComponentType.SWA].check_candidates()
        # past the cold SWA a retention window goes, not the 2-token head (no split for it)
        self.evict_swa(cache, 1)
        self.assertIn((64, 97), dict(self.nodes(cache)))
        cache.components[ComponentType.SWA].check_candidates()

    def test_a_match_end_outlasts_the_retention_windows(self):
        cache = self.build()
        self.assertEqual(
            hit_at(cache, 64), 64
        )  # a request matched up to the first chunk end
        again = make_prefilling_req(cache, PROMPT[:128], rid="again")
        commit_chunk(
            cache, again, 128
        )  # an insert ends at 128 later: its window is the MRU
        release(cache, again, "abort")
        self.evict_swa(
            cache, COLD_TOKENS + 1
        )  # the window at 128 goes: 128 falls back to 64
        self.assertEqual([hit_at(cache, end) for end in (64, 128, 192)], [64, 64, 192])

    def test_a_junction_is_a_window(self):
        cache = self.build()
        branch = make_prefilling_req(cache, PROMPT[:80] + [5] * 40, rid="b")
        commit_chunk(cache, branch, CHUNK)  # shares the tree's first chunk
        commit_chunk(cache, branch, 120)  # splits [64,97) at 80: a junction
        release(cache, branch, "abort")
        swa = cache.components[ComponentType.SWA]
        classes = {span: swa.eviction_class(node) for span, node in self.nodes(cache)}
        self.assertEqual(classes[(64, 80)], WINDOW)

    def test_a_junction_that_loses_a_branch_is_a_candidate_again(self):
        cache = self.build()
        swa = cache.components[ComponentType.SWA]
        branch = make_prefilling_req(cache, PROMPT[:80] + [5] * 40, rid="b")
        commit_chunk(cache, branch, CHUNK)
        commit_chunk(
            cache, branch, 120
        )  # [64,80) a junction; the branch [80,89) [89,120)
        release(cache, branch, "abort")
        self.evict_swa(cache, 92)  # the cold SWA: [0,33) [80,97) [128,161) [80,89)
        junction = dict(self.nodes(cache))[(64, 80)]
        stub = next(c for c in junction.children.values() if c.key.token_ids[0] == 5)
        self.assertIsNone(stub.component_data[ComponentType.SWA].value)  # tombstoned
        (leaf,) = stub.children.values()
        self.assertEqual(swa.eviction_class(junction), WINDOW)
        # upstream's leaf evictions (the controller's step): the branch's leaf, then its stub
        # (a tombstone with Full KV, a device leaf now), their frees drained as the controller does
        cache._apply_eviction_result(cache.tree_core.evict_device_leaf(leaf.id, False))
        self.assertEqual(len(junction.children), 2)
        cache._apply_eviction_result(cache.tree_core.evict_device_leaf(stub.id, False))
        self.assertEqual(len(junction.children), 1)
        self.assertEqual(swa.eviction_class(junction), COLD)
        swa.check_candidates()  # the junction is a COLD candidate again

    def test_a_match_lock_takes_one_window_not_the_node_the_window_ends_in(self):
        # match ends at chunk ends, inside a node, and at the leaf; upstream locks whole nodes up
        # to the window (a mid-node end: the piece above it plus the node before, 47 or 53)
        for component, locked in (
            (SWAComponent, (31, 47, 31, 53, 31)),
            (SWAIslandComponent, (31,) * 5),
        ):
            for end, want in zip((64, 80, 128, 150, 192), locked):
                with self.subTest(component=component.__name__, end=end):
                    cache = self.build(component)
                    self.assertEqual(cache.swa_retain_window, 31)
                    match = match_prefix(cache, PROMPT[:end] + [7])
                    self.assertEqual(match.device_prefix_len, end)
                    lock = cache.inc_lock_ref(match.last_device_node)
                    self.assertEqual(cache.swa_protected_size(), want)
                    self.assertEqual(
                        hit_at(cache, end), end
                    )  # the split kept the match
                    cache.evict(EvictParams(num_tokens=0, swa_num_tokens=KV))
                    self.assertEqual(hit_at(cache, end), end)  # the locked window stays
                    cache.dec_lock_ref(match.last_device_node, lock.to_dec_params())
                    self.assertEqual(cache.swa_protected_size(), 0)
                    cache.evict(EvictParams(num_tokens=KV, swa_num_tokens=KV))
                    allocator = cache.token_to_kv_pool_allocator
                    self.assertEqual(
                        (
                            allocator.full_available_size(),
                            allocator.swa_available_size(),
                        ),
                        (allocator.size_full, allocator.size_swa),
                    )

    def test_a_lock_whose_window_runs_into_a_tombstone_splits_nothing(self):
        cache = self.build()
        self.evict_swa(cache, COLD_TOKENS)  # tombstones [0,33) [64,97) [128,161)
        match_prefix(cache, PROMPT[:112] + [7])  # splits [97,128) at 112
        spans = [span for span, _ in self.nodes(cache)]
        self.assertIn((97, 112), spans)
        # [97,112) is shorter than the window, which runs on into the tombstone [64,97): a lock
        # there has no live SWA to split off (the validator gives no hit at 112 either)
        lock = cache.inc_lock_ref(dict(self.nodes(cache))[(97, 112)].id)
        self.assertEqual([span for span, _ in self.nodes(cache)], spans)
        self.assertEqual(cache.swa_protected_size(), 15)
        cache.dec_lock_ref(dict(self.nodes(cache))[(97, 112)].id, lock.to_dec_params())
        self.assertEqual(cache.swa_protected_size(), 0)

    def test_a_host_tier_backs_up_a_window_and_a_page_at_each_end_and_no_cold_chunk(
        self,
    ):
        """With a host tier a write-through backup of a node takes the SWA without a host copy
        that lies in the window and a page (33 tokens, ``host_backup_tokens``) behind the nearest
        match or insert end at or below it and in the window its own lock covers (31 tokens), and
        none for a node no end's span reaches. ``lazy`` keeps the cold chunks live, and upstream's
        walk backs up each node of a write-through chain with one window of live SWA behind it, in
        whole nodes. Every end splits its span off at its start and a chain backs up each of its
        nodes, so an end's span goes to the host: a re-sent prompt, which matches a page short of
        its end, finds its window there."""

        def backup(cache, span):
            spans = dict(self.nodes(cache))
            got = cache.components[ComponentType.SWA]._collect_unbacked_swa_nodes(
                spans[span]
            )
            return sorted(s for s, n in spans.items() if n in got)

        upstream = self.build(SWAComponent, host_tier=True)
        self.assertEqual(backup(upstream, (0, 33)), [(0, 33)])  # a cold chunk, whole
        cache = self.build(host_tier=True)
        self.assertEqual(
            [span for span, _ in self.nodes(cache)],
            [
                (0, 31),
                (31, 33),
                (33, 64),
                (64, 95),
                (95, 97),
                (97, 128),
                (128, 159),
                (159, 161),
                (161, 192),
            ],
        )
        swa = cache.components[ComponentType.SWA]
        spans = dict(self.nodes(cache))
        # a span's extra page is classed with its end, so the device gives the span up as one
        self.assertEqual(
            [swa.eviction_class(spans[s]) for s in ((0, 31), (31, 33), (33, 64))],
            [COLD, RETENTION, RETENTION],
        )
        for cold in ((0, 31), (64, 95), (128, 159)):
            self.assertEqual(backup(cache, cold), [], cold)
        for start, end in (
            (31, 64),
            (95, 128),
            (159, 192),
        ):  # two chunk ends and the leaf
            # the end's lock covers its 31 tokens; the span's other 2 are the parent's own part
            self.assertEqual(backup(cache, (start + 2, end)), [(start + 2, end)])
            self.assertEqual(backup(cache, (start, start + 2)), [(start, start + 2)])
        # a match ends at 100, inside [97,128): its span [67,100) starts inside [64,95)
        self.assertEqual(hit_at(cache, 100), 100)
        self.assertEqual(
            [span for span, _ in self.nodes(cache)][3:7],
            [(64, 67), (67, 95), (95, 97), (97, 100)],
        )
        self.assertEqual(backup(cache, (97, 100)), [(67, 95), (95, 97), (97, 100)])
        self.assertEqual(backup(cache, (67, 95)), [(67, 95)])
        self.assertEqual(backup(cache, (64, 67)), [])
        cache.components[ComponentType.SWA].check_candidates()
        self.assertEqual(
            [hit_at(cache, end) for end in (63, 100, 127, 191)], [63, 100, 127, 191]
        )
        # without a host tier an end splits nothing (a lock does, when one is taken)
        cache = self.build()
        self.assertEqual(hit_at(cache, 100), 100)
        self.assertIn((64, 97), dict(self.nodes(cache)))
        self.assertIsNone(
            cache.components[ComponentType.SWA]._collect_unbacked_swa_nodes(
                dict(self.nodes(cache))[(97, 100)]
            )
            or None
        )

    def test_a_hit_on_the_host_keeps_its_window_there_longest(self):
        """With a host tier a match that ends at a window whose SWA is only on the host moves
        that window to the most recently used end of the host LRU list, as upstream's refresh
        does for live SWA on the device, so host eviction takes it last: a request waiting to
        load it back (matched again at each admission try) still finds it. Upstream's host list
        keeps the order in which the device gave the nodes up, and loses the hit. Each node gets
        a host copy through upstream's own attach (host slots numbered by token; nothing is
        transferred), then the device gives up all of its SWA."""

        def host_hit_at_64(component):
            cache = self.build(component, host_tier=True)
            swa = cache.components[ComponentType.SWA]
            for (start, end), node in self.nodes(cache):
                swa._attach_swa_host_value(node, torch.arange(start, end))
            self.evict_swa(cache, len(PROMPT))
            cache.tree_core.set_hicache_enabled()  # the match takes host windows
            self.assertEqual(
                match_prefix(cache, PROMPT[:64] + [7]).swa_host_hit_length, 31
            )
            host_lru = cache.tree_core.host_lru_lists[ComponentType.SWA]
            lru_first, node = [], host_lru.get_lru_no_host_lock()
            while node is not None:
                lru_first.append(node)
                node = host_lru.get_prev_no_host_lock(node)
            # host eviction of three windows and a token: the window at 64 is in the fourth
            # node of upstream's list and the last two of the island list
            spans = {node: span for span, node in self.nodes(cache)}
            swa.drive_host_eviction(
                3 * 31 + 1, defaultdict(int), defaultdict(list), defaultdict(list), []
            )
            return (
                [spans[node] for node in lru_first],
                match_prefix(cache, PROMPT[:64] + [7]).swa_host_hit_length,
            )

        order, hit = host_hit_at_64(SWAComponent)
        self.assertEqual(order, [(0, 33), (33, 64), (64, 97), (97, 128), (128, 161)])
        self.assertEqual(hit, 0)
        order, hit = host_hit_at_64(SWAIslandComponent)
        self.assertEqual(
            order,
            [
                (0, 31),
                (64, 95),
                (128, 159),
                (97, 128),
                (95, 97),
                (159, 161),
                (31, 33),
                (33, 64),
            ],
        )
        self.assertEqual(hit, 31)

    def test_the_setting_picks_the_component_and_window_runs_on_the_python_core(self):
        for order, backend, component, core in (
            ("lru", "rust", SWAComponent, "rust"),
            ("lru", "python", SWAComponent, "python"),
            ("window", "rust", SWAIslandComponent, "python"),
        ):
            with self.subTest(order=order, backend=backend):
                cache = SWAIslandUnifiedRadixCache(
                    build_params(
                        kv_size=KV,
                        tree_core_backend=backend,
                        enable_swa_islands=True,
                        chunked_prefill_size=CHUNK,
                        swa_islands_eviction=order,
                    )
                )
                self.assertIs(type(cache.components[ComponentType.SWA]), component)
                self.assertEqual(cache._tree_core_backend, core)
        with self.assertRaisesRegex(ValueError, "swa_islands_eviction must be one of"):
            SWAIslandUnifiedRadixCache(
                build_params(
                    kv_size=KV, enable_swa_islands=True, swa_islands_eviction="fifo"
                )
            )

    def test_pools_are_back_at_baseline_after_everything_is_evicted(self):
        cache = self.build()
        allocator = cache.token_to_kv_pool_allocator
        self.evict_swa(cache, COLD_TOKENS + 1)
        cache.evict(EvictParams(num_tokens=KV, swa_num_tokens=KV))
        self.assertEqual(
            (cache.full_evictable_size(), cache.swa_evictable_size()), (0, 0)
        )
        self.assertEqual(
            (allocator.full_available_size(), allocator.swa_available_size()),
            (allocator.size_full, allocator.size_swa),
        )


if __name__ == "__main__":
    unittest.main()
