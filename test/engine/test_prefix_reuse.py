"""Islands keep every prefix hit upstream keeps: shared prefixes that diverge (a system prompt, a
document shared by many requests, an edited transcript), the reclaim policies, the cold tier and
the windows before match ends (junctions, islands, finished tails).

Real tree, pools, allocator, Req, ScheduleBatch and PrefillAdder (islands_harness.sim); HF window
32 (a token reads 33), page 1 unless a test says otherwise, so a hit needs 32 live tokens before
its end."""

import random
from array import array

import pytest

from islands_harness.invariants import check_invariants, tree_nodes
from islands_harness.sim import MiniScheduler, random_prompt
from islands_harness.stack import build_stack
from sglang.srt.mem_cache.base_prefix_cache import EvictParams, MatchPrefixParams
from sglang.srt.mem_cache.radix_cache import RadixKey

BIG = 10**9


def match_len(tree, tokens) -> int:
    key = RadixKey(array("q", tokens), None)
    return len(tree.match_prefix(MatchPrefixParams(key=key)).device_indices)


def serve(sched, stack, rid, tokens, new=16):
    """Run one request to completion; its cached tokens at admission."""
    req = sched.submit(rid, tokens, new)
    sched.run(after_step=lambda: check_invariants(stack, sched.running))
    assert req.finished()
    return req.cached_tokens


def baseline(stack):
    stack.tree.evict(EvictParams(num_tokens=BIG, swa_num_tokens=BIG))
    stack.tree.sanity_check()
    assert stack.free_sizes() == stack.initial_free


def arm_stack(arm, **kw):
    if arm == "upstream":
        return build_stack(islands=False, **kw)
    return build_stack(islands=True, reclaim=arm, **kw)


WORKLOADS = {
    # (shared prefix, own tokens per request, number of requests)
    "shared_system": (1200, 600, 2),
    "fanout": (1500, 300, 8),
}


@pytest.mark.parametrize("arm", ["upstream", "lazy", "auto", "eager"])
@pytest.mark.parametrize("workload", sorted(WORKLOADS))
def test_shared_prefix_hits(arm, workload):
    """Requests one after another, each = a shared prefix + its own tokens (the issue's table:
    upstream hits the whole shared part from the 2nd request on). An ample pool: lazy and auto
    match upstream request for request; eager loses the first divergence (its SWA below A's
    frontier was freed at A's commits) and, because B's insert revives the window before the
    junction from B's own KV, every later request hits the whole shared prefix."""
    shared_len, own, n = WORKLOADS[workload]
    stack = arm_stack(arm, window=32, chunk=512, full_pool=65536, swa_pool=32768)
    rng = random.Random(sorted(WORKLOADS).index(workload))
    shared = random_prompt(rng, shared_len)
    sched = MiniScheduler(stack, max_running=4)
    cached = [serve(sched, stack, f"r{i}", shared + random_prompt(rng, own)) for i in range(n)]
    assert cached[0] == 0
    if arm in ("upstream", "lazy", "auto"):
        assert cached[1:] == [shared_len] * (n - 1), cached
    else:
        assert cached[1] < shared_len and cached[2:] == [shared_len] * (n - 2), cached
    baseline(stack)


@pytest.mark.parametrize("arm", ["upstream", "lazy", "auto"])
def test_edited_transcript_hits_up_to_the_edit(arm):
    """A finished 2000-token transcript, re-sent edited at token 1400: the hit ends at the edit."""
    stack = arm_stack(arm, window=32, chunk=512, full_pool=65536, swa_pool=32768)
    rng = random.Random(7)
    prompt = random_prompt(rng, 1800)
    sched = MiniScheduler(stack)
    a = sched.submit("a", prompt, 200)
    sched.run(after_step=lambda: check_invariants(stack, sched.running))
    transcript = list(prompt) + list(a.output_ids)
    edited = transcript[:1400] + random_prompt(rng, 300)
    # upstream's decode evictor frees out-of-window generated SWA, so edits inside the prompt are
    # what every arm keeps
    assert serve(sched, stack, "b", edited) == 1400
    baseline(stack)


def test_lazy_commit_keeps_the_hold_of_an_island():
    """Lazy reclaim frees nothing at the commit, yet the request SWA-locks only its island: the
    SWA below the frontier is evictable (counted as such by admission), not held."""
    stack = build_stack(window=32, chunk=128, reclaim="lazy")
    rng = random.Random(8)
    sched = MiniScheduler(stack)
    req = sched.submit("a", random_prompt(rng, 640), 8)
    seen = []

    def on_event(label, reqs):
        if label in ("chunk_commit", "last_chunk_commit"):
            check_invariants(stack, sched.running)
            seen.append((req.extend_range.end, stack.tree.swa_protected_size(),
                         stack.tree.swa_evictable_size()))

    sched.on_event = on_event
    sched.run()
    # L=128: island [94, 128) locked (34), [0, 94) evictable; ... L=640: [606, 640) locked
    assert seen == [(128, 34, 94), (256, 34, 222), (384, 34, 350), (512, 34, 478), (640, 34, 606)]
    assert stack.tree.stats.freed_at_commit == 0
    baseline(stack)


def _fanout_tree(reclaim, swa_pool=32768):
    """Three documents of 1000 tokens, each shared by 3 finished requests with 200 own tokens."""
    stack = build_stack(window=32, chunk=512, full_pool=65536, swa_pool=swa_pool, reclaim=reclaim)
    rng = random.Random(9)
    docs = [random_prompt(rng, 1000) for _ in range(3)]
    sched = MiniScheduler(stack, max_running=4)
    for d, doc in enumerate(docs):
        for q in range(3):
            serve(sched, stack, f"d{d}q{q}", doc + random_prompt(rng, 200))
    return stack, sched, docs, rng


def _cold_and_windows(tree):
    """(cold tokens, {node id: window tail}) of the live, SWA-unlocked nodes."""
    cold, tails = 0, {}
    for n in tree_nodes(tree):
        if n.swa_tombstone or n.swa_lock_ref > 0:
            continue
        tail = tree._window_tail(n)
        cold += len(n.value) - tail
        if tail:
            tails[id(n)] = (n, tail)
    return cold, tails


def test_eviction_takes_the_cold_tier_before_any_window():
    """With cold SWA left, ``evict`` never tombstones a token inside the live window before a
    match end (junction, island, finished tail): evicting less than the cold tier frees only cold
    tokens, and every document still hits in full."""
    stack, sched, docs, rng = _fanout_tree("lazy")
    tree = stack.tree
    cold, windows = _cold_and_windows(tree)
    assert cold > 2000 and windows
    tree.evict(EvictParams(num_tokens=0, swa_num_tokens=cold - 500))
    check_invariants(stack, [])
    assert tree.stats.reclaimed_window == 0 and tree.stats.reclaimed_cold >= cold - 500
    mapping = stack.allocator.full_to_swa_index_mapping
    for n, tail in windows.values():  # every window token is still live (nodes may be split)
        assert bool((mapping[n.value[len(n.value) - tail:]] > 0).all())
    for doc in docs:
        assert match_len(tree, doc + random_prompt(rng, 50)) == 1000
    baseline(stack)


def test_evicting_everything_evictable_skips_the_passes():
    """An eviction of at least all evictable SWA keeps nothing: it is upstream's LRU walk, which
    creates no node (no window tail is split first), frees every evictable token and counts it as
    window reclaim; an eviction of one token less takes the passes and splits window tails."""
    from sglang.srt.mem_cache.swa_radix_cache import TreeNode

    for less in (0, 1):
        stack, sched, docs, rng = _fanout_tree("lazy")
        tree = stack.tree
        created, evictable = TreeNode.counter, tree.swa_evictable_size()
        tree.evict(EvictParams(num_tokens=0, swa_num_tokens=evictable - less))
        check_invariants(stack, [])
        if less == 0:
            assert TreeNode.counter == created and tree.swa_evictable_size() == 0
            assert (tree.stats.reclaimed_cold, tree.stats.reclaimed_window) == (0, evictable)
        else:
            assert TreeNode.counter > created and tree.stats.reclaimed_cold > 0
        baseline(stack)


def test_junction_windows_survive_losing_the_whole_cold_tier():
    """Evicting exactly the cold tier leaves the windows only: each document's junction window
    and, per request, the windows before its prompt end and its finished tail. A new question on
    any document still hits the whole document."""
    stack, sched, docs, rng = _fanout_tree("lazy")
    tree = stack.tree
    cold, windows = _cold_and_windows(tree)
    tree.evict(EvictParams(num_tokens=0, swa_num_tokens=cold))
    assert tree.stats.reclaimed_window == 0
    live = sum(len(n.value) for n in tree_nodes(tree) if not n.swa_tombstone)
    # per document: the junction's 32 tokens and the window before the chunk island at 512; per
    # request: the windows before its chunk island at 1024, its prompt end and its finished tail
    # (they overlap, so this bounds from above)
    assert live <= 3 * (2 * 32 + 3 * 3 * 32), live
    for d, doc in enumerate(docs):
        assert serve(sched, stack, f"new{d}", doc + random_prompt(rng, 120)) == 1000
    baseline(stack)


def test_lazy_keeps_a_window_at_every_chunk_island_of_a_prompt():
    """A 1200-token prompt at chunk 256 leaves chunk islands at 256, 512, 768 and 1024. Once the
    cold tier is gone, a request diverging at 900 still hits 768 (the last chunk island before
    the divergence) under lazy and auto; under eager (the seed's behaviour) only the prompt's end
    is kept, so it hits nothing."""
    def hit_after_cold_tier(reclaim):
        stack = build_stack(window=32, chunk=256, full_pool=65536, swa_pool=32768, reclaim=reclaim)
        rng = random.Random(13)
        prompt = random_prompt(rng, 1200)
        sched = MiniScheduler(stack)
        serve(sched, stack, "a", prompt)
        cold, _ = _cold_and_windows(stack.tree)
        stack.tree.evict(EvictParams(num_tokens=0, swa_num_tokens=cold))
        assert stack.tree.stats.reclaimed_window == 0
        got = serve(sched, stack, "b", prompt[:900] + random_prompt(rng, 100))
        baseline(stack)
        return got

    assert [hit_after_cold_tier(r) for r in ("lazy", "auto", "eager")] == [768, 768, 0]


def test_a_finished_turn_stays_a_match_end_after_the_next_turn_extends_it():
    """Turn 1 (600 opening + 150 message, 40 generated) finishes; turn 2 re-sends its transcript +
    150 more and finishes too. An edit of turn 2's message (cut after 70 of its tokens) hits all
    860 shared tokens while the cold tier is there; once it is gone, the window before turn 1's
    finished end (position 789: the last generated token has no KV) is still live although turn 2
    extended that node, so the edit hits 789, not just turn 1's prompt end (750)."""
    stack = build_stack(window=32, chunk=256, full_pool=65536, swa_pool=32768, reclaim="lazy")
    tree = stack.tree
    rng = random.Random(12)
    sched = MiniScheduler(stack)
    prompt1 = random_prompt(rng, 750)
    a = sched.submit("a", prompt1, 40)
    sched.run(after_step=lambda: check_invariants(stack, sched.running))
    transcript1 = list(prompt1) + list(a.output_ids)
    msg2 = random_prompt(rng, 150)
    serve(sched, stack, "b", transcript1 + msg2, new=40)
    edit = transcript1 + msg2[:70] + random_prompt(rng, 100)
    assert match_len(tree, edit) == 860
    cold, _ = _cold_and_windows(tree)
    tree.evict(EvictParams(num_tokens=0, swa_num_tokens=cold))
    check_invariants(stack, [])
    assert tree.stats.reclaimed_window == 0
    assert match_len(tree, edit) == 789
    assert serve(sched, stack, "c", edit) == 789
    baseline(stack)


def test_eager_revives_the_junction_window_from_the_diverging_request():
    """Eager: A's commits free the SWA of A's prompt below its frontiers; B = the first 700 of A's
    tokens + its own matches only up to a match end of A before 700 (the root here), computes the
    rest itself, and its insert revives the tombstoned window before the junction at 700 from B's
    own KV, so C, sharing the same 700 tokens, hits all of them."""
    stack = build_stack(window=32, chunk=256, full_pool=65536, swa_pool=32768, reclaim="eager")
    rng = random.Random(10)
    shared = random_prompt(rng, 700)
    sched = MiniScheduler(stack)
    serve(sched, stack, "a", shared + random_prompt(rng, 500))
    assert match_len(stack.tree, shared + [1]) == 0  # [0, 700) is tombstones below A's islands
    assert serve(sched, stack, "b", shared + random_prompt(rng, 300)) == 0
    assert serve(sched, stack, "c", shared + random_prompt(rng, 300)) == 700
    baseline(stack)


def test_auto_reclaims_eagerly_only_below_the_watermark():
    """``auto`` keeps the SWA below islands while one chunk (256) of SWA is free, and frees it at
    the commit once the free pool is below that."""
    def run(swa_pool):
        stack = build_stack(window=32, chunk=256, full_pool=65536, swa_pool=swa_pool,
                            reclaim="auto")
        assert stack.tree.reclaim_watermark == 256
        rng = random.Random(11)
        sched = MiniScheduler(stack, max_running=4)
        for i in range(3):
            sched.submit(f"r{i}", random_prompt(rng, 900), 40)
        sched.run(after_step=lambda: check_invariants(stack, sched.running))
        freed = stack.tree.stats.freed_at_commit
        baseline(stack)
        return freed

    assert run(32768) == 0
    assert run(1000) > 0


def test_retention_windows_go_after_the_cold_tier_and_before_older_match_ends():
    """A (300 tokens + 16 out) finishes, then B (1100 + 16, chunk islands at 512 and 1024:
    retention points). Live SWA: A 315 = 268 cold + 47 window ([268, 315): the prompt end and
    the finished end); B 1115 = 1004 cold + 2 x 32 retention windows + 47. Evicting 1272 + 40
    takes the cold tier (1272), then B's retention windows (64, newer than A's) before A's
    window: A still hits its whole prompt, B only past its chunk islands."""
    stack = build_stack(window=32, chunk=512, full_pool=65536, swa_pool=8192, reclaim="lazy")
    rng = random.Random(3)
    a, b = random_prompt(rng, 300), random_prompt(rng, 1100)
    sched = MiniScheduler(stack, max_running=4)
    serve(sched, stack, "a", a, 16)
    serve(sched, stack, "b", b, 16)
    tree = stack.tree
    assert tree.swa_evictable_size_ == 315 + 1115
    tree.evict(EvictParams(num_tokens=0, swa_num_tokens=1272 + 40))
    check_invariants(stack, [])
    assert (tree.stats.reclaimed_cold, tree.stats.reclaimed_window) == (1272, 64)
    assert match_len(tree, a + [1]) == 300
    assert match_len(tree, b + [1]) == 1100
    assert match_len(tree, b[:700] + [1]) == 0
    assert match_len(tree, b[:1030] + [1]) == 0
    baseline(stack)


def test_lazy_is_the_default_of_the_flag_and_of_the_cache_params():
    import dataclasses

    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.swa_island_radix_cache import RECLAIM_POLICIES
    from sglang.srt.server_args import ServerArgs

    defaults = {f.name: f.default for f in dataclasses.fields(ServerArgs)}
    params = {f.name: f.default for f in dataclasses.fields(CacheInitParams)}
    assert defaults["swa_islands_reclaim"] == params["swa_islands_reclaim"] == "lazy"
    assert RECLAIM_POLICIES[0] == "lazy"


def _sibling_hits(swa_pool, arrival):
    """A (900 tokens, chunks of 256) and B (A's first 700 tokens + 200 own): B's hit and whether
    A's commits freed SWA, per reclaim policy. ``arrival``: B queues together with A (admitted
    once A's chunked prefill is done) or after A has finished."""
    hits = {}
    for reclaim in ("lazy", "auto", "eager"):
        stack = build_stack(window=32, chunk=256, full_pool=65536, swa_pool=swa_pool,
                            reclaim=reclaim)
        rng = random.Random(5)
        a = random_prompt(rng, 900)
        b = a[:700] + random_prompt(rng, 200)
        sched = MiniScheduler(stack, max_running=4)
        ra = sched.submit("a", a, 40)
        if arrival == "after":
            sched.run(after_step=lambda: check_invariants(stack, sched.running))
        rb = sched.submit("b", b, 40)
        sched.run(after_step=lambda: check_invariants(stack, sched.running))
        assert ra.cached_tokens == 0
        hits[reclaim] = (rb.cached_tokens, stack.tree.stats.freed_at_commit > 0)
        baseline(stack)
    return hits


@pytest.mark.parametrize("swa_pool", [800, 1000])
def test_a_sibling_arriving_later_hits_what_lazy_keeps_and_auto_or_eager_free(swa_pool):
    """B arrives after A finished. Under lazy, A's cold SWA below its islands is the most
    recently used and survived the evictions of A's own chunks: B hits all 700 shared tokens.
    ``auto`` at these pools (free SWA below one chunk at A's commits) freed it at the commit and
    kept A's chunk islands: B hits the one at 512. ``eager`` kept only A's prompt-end island
    (900, past the divergence): B hits nothing."""
    assert _sibling_hits(swa_pool, "after") == {
        "lazy": (700, False), "auto": (512, True), "eager": (0, True)}


@pytest.mark.parametrize("refresh", [True, False])
def test_a_sibling_queued_behind_a_prefill_keeps_its_hit_along_the_commits_under_every_policy(
    refresh, monkeypatch
):
    """B queues together with A: each of A's chunk commits refreshes B's queued hit along A's
    fresh path (``_refresh_queued_hits``), so its window is kept at the commit (eager, auto) and
    by eviction (lazy) and B hits all 700 shared tokens under every policy. Without the refresh
    (control), B's queued hit stays the root and the policies differ as for a later arrival."""
    if not refresh:
        from sglang.srt.mem_cache.swa_island_radix_cache import SWAIslandRadixCache

        monkeypatch.setattr(SWAIslandRadixCache, "_refresh_queued_hits", lambda self, node: None)
    want = {"lazy": (700, False), "auto": (700, True), "eager": (700, True)}
    if not refresh:
        want = {"lazy": (700, False), "auto": (512, True), "eager": (0, True)}
    assert _sibling_hits(800, "with") == want


@pytest.mark.parametrize("reclaim", ["eager", "lazy", "auto"])
def test_every_policy_keeps_every_invariant_under_random_traffic(reclaim):
    """Shared prefixes cut at random points, aborts, retractions and small SWA pools, with the
    invariants (running windows live, no double free, counters) after every operation and the
    pools back to baseline at the end."""
    rng = random.Random({"eager": 1, "lazy": 2, "auto": 3}[reclaim])
    for _ in range(2):
        page = rng.choice([1, 16])
        stack = build_stack(window=rng.choice([16, 32, 40]), page=page,
                            chunk=rng.choice([64, 128, 160]) // page * page, full_pool=32768,
                            swa_pool=rng.choice([1500, 4000, 16384]), reclaim=reclaim)
        sched = MiniScheduler(stack, max_running=rng.choice([2, 4, 8]),
                              swa_pressure=rng.random() < 0.3)
        bases = [random_prompt(rng, 400) for _ in range(3)]
        for step in range(300):
            op = rng.random()
            if op < 0.15 and len(sched.all_reqs) < 20:
                base = rng.choice(bases)
                cut = rng.randrange(0, len(base))
                sched.submit(f"q{step}", base[:cut] + random_prompt(rng, rng.randrange(1, 300)),
                             rng.randrange(1, 120))
            elif op < 0.18 and sched.chunked_req is not None:
                sched.abort_chunked()
            elif op < 0.20:
                sched.retract_all_but_one()
            else:
                sched.step()
            check_invariants(stack, sched.running)
        sched.run(after_step=lambda: check_invariants(stack, sched.running))
        baseline(stack)
