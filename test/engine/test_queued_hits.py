"""Queued hits: the window of the match end a waiting request would hit is evicted only after every
other window, the earliest queued request's last (patch 0014, ``on_request_queued``; the
``eviction_passes`` of ``SWAIslandRadixCache``).

Real tree, pools, allocator, ``Req``, ``ScheduleBatch``, ``PrefillAdder`` and the installed
``Scheduler._add_request_to_queue`` (islands_harness.sim); HF window 32 (a hit needs 32 live
tokens before its end), page 1, chunk 128, reclaim ``lazy``."""

import gc
import random
from array import array

import pytest

from islands_harness.invariants import check_invariants
from islands_harness.sim import MiniScheduler, random_prompt
from islands_harness.stack import build_stack
from sglang.srt.mem_cache.base_prefix_cache import (
    BasePrefixCache,
    EvictParams,
    MatchPrefixParams,
)
from sglang.srt.mem_cache.radix_cache import RadixKey

BIG = 10**9


def match_len(tree, tokens) -> int:
    key = RadixKey(array("q", tokens), None)
    return len(tree.match_prefix(MatchPrefixParams(key=key)).device_indices)


def baseline(stack):
    stack.tree.evict(EvictParams(num_tokens=BIG, swa_num_tokens=BIG))
    stack.tree.sanity_check()
    assert stack.free_sizes() == stack.initial_free


def transcript(req):
    return list(req.origin_input_ids) + list(req.output_ids)


def in_tree(req) -> int:
    """Tokens of a finished request's transcript in the tree: all but the last (never computed)."""
    return len(transcript(req)) - 1


def end_of(tree, node) -> int:
    """Position of ``node``'s end: the tokens from the root to it."""
    n = 0
    while node is not tree.root_node:
        n, node = n + len(node.key), node.parent
    return n


def finished_transcripts(stack, sched, rng, n, prompt_len=100, new=16):
    reqs = []
    for i in range(n):
        reqs.append(sched.submit(f"t{i}", random_prompt(rng, prompt_len), new))
        sched.run(after_step=lambda: check_invariants(stack, sched.running))
    return reqs


@pytest.mark.parametrize("hook", ["islands", "base"])
def test_a_queued_follow_up_keeps_its_hit_while_a_cold_request_ahead_of_it_prefills(
    hook, monkeypatch
):
    """A finished 316-token transcript, then four short transcripts (newer, so upstream's LRU
    takes A's window first). A cold 600-token request and A's follow-up B queue in that order;
    the cold one's chunked prefill needs more SWA than the cold tier and the retention windows
    hold, so some match end loses its window. With the hook B's is kept and B hits all of A's
    transcript; with the base hook (every other cache) it is the least recently used, and B
    recomputes everything."""
    if hook == "base":
        from sglang.srt.mem_cache.swa_island_radix_cache import SWAIslandRadixCache

        monkeypatch.setattr(
            SWAIslandRadixCache, "on_request_queued", BasePrefixCache.on_request_queued
        )
    stack = build_stack(window=32, chunk=128, full_pool=16384, swa_pool=300, reclaim="lazy")
    rng = random.Random(3)
    sched = MiniScheduler(stack, max_running=4)
    a = sched.submit("a", random_prompt(rng, 300), 16)
    sched.run(after_step=lambda: check_invariants(stack, sched.running))
    for i in range(4):
        sched.submit(f"o{i}", random_prompt(rng, 60), 16)
    sched.run(after_step=lambda: check_invariants(stack, sched.running))
    sched.submit("cold", random_prompt(rng, 600), 8)
    b = sched.submit("b", transcript(a) + random_prompt(rng, 40), 8)
    if hook == "islands":
        root = stack.tree.root_node  # the cold request has nothing to hit (yet)
        assert [n is root for n in stack.tree._queued_hits.values()] == [True, False]
    sched.run(after_step=lambda: check_invariants(stack, sched.running))
    assert sched.retractions == 0
    assert b.cached_tokens == (315 if hook == "islands" else 0)
    assert len(stack.tree._queued_hits) == 0
    baseline(stack)


def test_eviction_passes_give_up_the_latest_queued_hits_first():
    """Five finished transcripts, a follow-up of each queued in the order 4, 3, 2, 1, 0 (the
    oldest transcript queued last). The passes keep every window; every window but retention
    points' (chunk islands); then the queued hits' only, the first 5, 2, 1 of them. Evicting all
    evictable SWA but one window leaves exactly the first queued request's hit."""
    stack = build_stack(window=32, chunk=128, full_pool=16384, swa_pool=8192, reclaim="lazy")
    rng = random.Random(4)
    sched = MiniScheduler(stack, max_running=4)
    done = finished_transcripts(stack, sched, rng, 5, prompt_len=200)
    follow_ups = [
        sched.submit(f"f{i}", transcript(done[i]) + random_prompt(rng, 20), 4)
        for i in (4, 3, 2, 1, 0)
    ]
    tree = stack.tree
    ends = [tree._queued_hits[f] for f in follow_ups]
    assert [end_of(tree, e) for e in ends] == [in_tree(done[i]) for i in (4, 3, 2, 1, 0)]
    passes = tree.eviction_passes()
    assert [(p.retention, p.others) for p in passes] == [
        (True, True), (False, True), (False, False), (False, False), (False, False)]
    assert [p.queued for p in passes] == [frozenset(ends)] * 3 + [
        frozenset(ends[:2]), frozenset(ends[:1])]

    tree.evict(EvictParams(num_tokens=0, swa_num_tokens=tree.swa_evictable_size() - 32))
    check_invariants(stack, sched.running)
    assert tree.swa_evictable_size() == 32
    hits = [match_len(tree, transcript(done[i]) + [1]) for i in (4, 3, 2, 1, 0)]
    assert hits == [in_tree(done[4]), 0, 0, 0, 0]
    sched.run(after_step=lambda: check_invariants(stack, sched.running))
    assert follow_ups[0].cached_tokens == in_tree(done[4])
    baseline(stack)


def test_a_queued_hit_lasts_from_arrival_to_the_first_commit_or_until_the_request_is_dropped():
    stack = build_stack(window=32, chunk=128, full_pool=16384, swa_pool=8192, reclaim="lazy")
    rng = random.Random(5)
    sched = MiniScheduler(stack, max_running=4)
    (done,) = finished_transcripts(stack, sched, rng, 1, prompt_len=300)
    tree = stack.tree
    cold = sched.submit("cold", random_prompt(rng, 300), 4)
    assert tree._queued_hits[cold] is tree.root_node  # nothing to hit: no window kept
    b = sched.submit("b", transcript(done) + random_prompt(rng, 20), 4)
    assert end_of(tree, tree._queued_hits[b]) == in_tree(done)  # the transcript's end
    # admitted (locks its match) and committed: the entry is gone
    while b.req_pool_idx is None:
        sched.step()
    sched.step()
    assert b not in tree._queued_hits and b.cached_tokens == in_tree(done)
    sched.run()

    # a request dropped from the queue (an abort of a waiting request) drops its entry
    c = sched.submit("c", transcript(done) + random_prompt(rng, 20), 4)
    assert len(tree._queued_hits) == 1
    sched.waiting.remove(c)
    sched.all_reqs.remove(c)
    del c
    gc.collect()
    assert len(tree._queued_hits) == 0
    baseline(stack)


def test_a_retracted_request_queues_again_behind_the_others():
    """``Scheduler._add_request_to_queue(req, is_retracted=True)`` appends; its queued hit moves
    behind the others' (the passes give it up before theirs)."""
    stack = build_stack(window=32, chunk=128, full_pool=16384, swa_pool=8192, reclaim="lazy")
    rng = random.Random(6)
    sched = MiniScheduler(stack, max_running=4)
    done = finished_transcripts(stack, sched, rng, 2, prompt_len=200)
    first = sched.submit("first", transcript(done[0]) + random_prompt(rng, 20), 4)
    second = sched.submit("second", transcript(done[1]) + random_prompt(rng, 20), 4)
    tree = stack.tree
    assert list(tree._queued_hits) == [first, second]
    sched._queue(sched.waiting.pop(0), is_retracted=True)
    assert sched.waiting == [second, first]
    assert list(tree._queued_hits) == [second, first]
    sched.run()
    baseline(stack)


def test_the_base_cache_ignores_queued_requests():
    """Islands off (``SWARadixCache``): the hook is the base class's no-op, eviction upstream's."""
    stack = build_stack(window=32, chunk=128, islands=False)
    assert type(stack.tree).on_request_queued is BasePrefixCache.on_request_queued
    rng = random.Random(7)
    sched = MiniScheduler(stack, max_running=4)
    (done,) = finished_transcripts(stack, sched, rng, 1)
    b = sched.submit("b", transcript(done) + random_prompt(rng, 20), 4)
    assert not hasattr(stack.tree, "_queued_hits")
    sched.run()
    assert b.cached_tokens == in_tree(done)
    baseline(stack)


def test_a_commit_refreshes_the_queued_hits_that_continue_along_its_path():
    """A cold 600-token request P prefills in chunks of 128; behind it queue S (P's first 300
    tokens + its own), X (unrelated) and T (P's first 500 + its own), with nothing to hit yet.
    Each of P's commits re-matches only the queued requests whose tokens continue along P's fresh
    path: S's and T's queued hits move down P's path (S's stops at 300, where it leaves it), X's
    stays the root; the arrival order is kept. S and T then hit what they share with P."""
    stack = build_stack(window=32, chunk=128, full_pool=16384, swa_pool=8192, reclaim="lazy")
    rng = random.Random(8)
    sched = MiniScheduler(stack, max_running=1)  # S, X, T wait until P has finished
    p_ids = random_prompt(rng, 600)
    p = sched.submit("p", p_ids, 4)
    s = sched.submit("s", p_ids[:300] + random_prompt(rng, 50), 4)
    x = sched.submit("x", random_prompt(rng, 80), 4)
    t = sched.submit("t", p_ids[:500] + random_prompt(rng, 50), 4)
    tree = stack.tree
    assert [tree._queued_hits[r] is tree.root_node for r in (s, x, t)] == [True] * 3
    ends = []
    while p.req_pool_idx is None or len(p.output_ids) == 0:
        sched.step()
        check_invariants(stack, sched.running)
        ends.append(tuple(end_of(tree, tree._queued_hits[r]) for r in (s, x, t)))
    assert list(tree._queued_hits) == [s, x, t]
    # after the commits of 128, 256, 384, 512 and the last chunk (600)
    assert ends[-1] == (300, 0, 500), ends
    assert ends[0] == (0, 0, 0) and (128, 0, 128) in ends, ends
    sched.run(after_step=lambda: check_invariants(stack, sched.running))
    assert (s.cached_tokens, x.cached_tokens, t.cached_tokens) == (300, 0, 500)
    baseline(stack)
