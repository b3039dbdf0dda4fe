"""Decode islands on the real tree, pools, allocator, Req and ScheduleBatch: reuse of a running
request's output, the cadence under variable accept lengths, conservation, and the decode hold."""

import random
from array import array

import pytest

from islands_harness.invariants import check_invariants, req_hold, req_locked_swa
from islands_harness.knobs import UPSTREAM_KNOBS_ENV
from islands_harness.sim import MiniScheduler, random_prompt
from islands_harness.stack import build_stack, env_overrides
from sglang.srt.mem_cache.base_prefix_cache import EvictParams, MatchPrefixParams
from sglang.srt.mem_cache.radix_cache import RadixKey

BIG = 10**9


def match_len(tree, tokens) -> int:
    return len(tree.match_prefix(MatchPrefixParams(key=RadixKey(array("q", tokens), None))).device_indices)


def baseline(stack):
    stack.tree.evict(EvictParams(num_tokens=BIG, swa_num_tokens=BIG))
    stack.tree.sanity_check()
    assert stack.free_sizes() == stack.initial_free


def run_until_generated(sched, req, n):
    while len(req.output_ids) < n:
        assert sched.step() is not None
        check_invariants(sched.s, sched.running)


@pytest.mark.parametrize("page", [1, 16])
def test_follow_up_reuses_running_output(page):
    """A generates; B = A's prompt + A's output so far hits >= len(prompt) + k*cp/4 while A runs."""
    chunk, prompt_len = 128, 600
    hits = {}
    for islands in (False, True):
        stack = build_stack(window=32, chunk=chunk, page=page, islands=islands)
        interval = 32  # cp / 4
        rng = random.Random(0)
        sched = MiniScheduler(stack)
        prompt = random_prompt(rng, prompt_len)
        a = sched.submit("a", prompt, 400)
        k, delta = 5, 7
        run_until_generated(sched, a, k * interval + delta)
        transcript = list(prompt) + list(a.output_ids)
        hits[islands] = match_len(stack.tree, transcript)
        expected = (prompt_len + k * interval) // page * page
        if islands:
            assert hits[islands] >= expected, (hits, expected)
            assert stack.tree.stats.decode_islands >= k
        sched.run(after_step=lambda: check_invariants(stack, sched.running))
        baseline(stack)
    # upstream covers only the prompt while A runs
    assert hits[False] <= prompt_len
    assert hits[True] > hits[False]


def test_cadence_under_variable_accept_lengths_fires_on_progress_never_twice():
    stack = build_stack(window=32, chunk=256)
    interval = 64  # cp / 4
    rng = random.Random(1)
    sched = MiniScheduler(stack, accept_len=lambda req: rng.randint(1, 16))
    reqs = [sched.submit(f"r{i}", random_prompt(rng, 300 + 50 * i), 700) for i in range(3)]
    islands_at = {r.rid: [] for r in reqs}
    last = {}

    def on_event(label, rs):
        if label != "decode":
            return
        for r in rs:
            if last.get(r.rid) is not None and r.cache_protected_len != last[r.rid]:
                islands_at[r.rid].append((last[r.rid], r.cache_protected_len, r.kv_committed_len))
            last[r.rid] = r.cache_protected_len

    sched.on_event = on_event
    sched.run(after_step=lambda: check_invariants(stack, sched.running))
    n_islands = 0
    for rid, moves in islands_at.items():
        assert len(moves) >= 600 // (interval + 16), (rid, moves)
        for before, after, committed in moves:
            assert after - before >= interval - 1  # page 1: the island ends at the committed length
            assert after == committed
        ends = [m[1] for m in moves]
        assert len(set(ends)) == len(ends)  # no island twice for the same progress
        n_islands += len(moves)
    assert stack.tree.stats.decode_islands == n_islands
    baseline(stack)


def test_decode_hold_is_window_plus_two_pages_plus_cadence_slack():
    for page in (1, 16):
        stack = build_stack(window=32, chunk=128, page=page)
        w, interval = 33, 32  # HF window 32 (a token reads 33); cp / 4
        rng = random.Random(2)
        sched = MiniScheduler(stack)
        for i in range(3):
            sched.submit(f"r{i}", random_prompt(rng, 500), 260)
        worst_locked = 0

        def after():
            nonlocal worst_locked
            check_invariants(stack, sched.running)
            for r in sched.running:
                if not r.output_ids:
                    continue
                slack = r.kv_committed_len - r.cache_protected_len
                assert req_hold(stack, r) <= w + 2 * page + slack
                worst_locked = max(worst_locked, req_locked_swa(stack, r))
            # Nothing below a decode island's frontier stays live, even when the interval (32) is
            # shorter than w + p and the frontier falls inside the previous island: the only live
            # unlocked SWA is each request's prompt island and its latest (released) island, plus
            # a finished request's prompt island, last island and tail.
            bound = (2 * len(sched.running) + 3 * len(sched.finished)) * (w + 2 * page)
            assert stack.tree.swa_evictable_size() <= bound

        sched.run(after_step=after)
        assert worst_locked <= w + 2 * page
        baseline(stack)


def test_prompt_reserve_point_survives_decode_and_moderate_pressure():
    """The prompt's last island is unlocked once it slides out of the window, but stays live:
    the prompt re-serves from it while the request runs, also under moderate SWA pressure.
    Upstream's release-after-window knob tombstones that leaf instead."""
    prompt_len = 512
    hits = {}
    for arm, islands, env in (
        ("islands", True, {}),
        ("upstream_knobs", False, {**UPSTREAM_KNOBS_ENV, "SGLANG_SWA_EVICTION_INTERVAL": "1"}),
    ):
        with env_overrides(env):
            stack = build_stack(window=32, chunk=128, islands=islands, swa_pool=2000)
            rng = random.Random(3)
            sched = MiniScheduler(stack, max_running=4)
            prompt = random_prompt(rng, prompt_len)
            a = sched.submit("a", prompt, 300)
            run_until_generated(sched, a, 80)  # past the window
            # moderate pressure: other traffic through the SWA pool while A keeps running
            for i in range(3):
                sched.submit(f"p{i}", random_prompt(rng, 300), 20)
            run_until_generated(sched, a, 200)
            hits[arm] = match_len(stack.tree, prompt)
            sched.run(after_step=lambda: check_invariants(stack, sched.running))
            baseline(stack)
    assert hits["islands"] == prompt_len, hits
    assert hits["upstream_knobs"] < hits["islands"], hits


@pytest.mark.parametrize("page", [1, 16])
def test_running_window_stays_live_under_swa_pressure(page):
    """What a running request reads is never freed: with every evictable SWA token evicted after
    each step, each running request's last ``sliding_window_size`` positions still map to live
    SWA slots (``check_invariants``), across chunk commits, decode islands and the release of the
    island lock after the window."""
    stack = build_stack(window=32, chunk=512, page=page, swa_pool=4096)
    rng = random.Random(11)
    sched = MiniScheduler(stack, max_running=4, swa_pressure=True)
    for i in range(3):
        sched.submit(f"r{i}", random_prompt(rng, 700 + 90 * i), 560)
    sched.run(after_step=lambda: check_invariants(stack, sched.running))
    assert all(len(r.output_ids) == 560 for r in sched.all_reqs)
    # decode islands every 128 tokens; each island's lock is released 34 + page tokens after it
    assert stack.tree.stats.decode_islands >= 3 * 4
    baseline(stack)


def test_island_lock_is_released_once_it_slides_out_of_the_window():
    """Prompt 300 tokens, HF window 32 (33 read), page 1, cp 512 (one chunk; decode islands every
    128): the prompt commit leaves the island [266, 300) SWA-locked. Once 334 tokens are
    committed (300 + 33 + 1), no future token reads it: the lock is dropped, the island stays
    live and evictable (the prompt's re-serve point) until the decode island at 428. (Upstream's
    decode evictor, every 128 forward steps, is switched off to keep the numbers simple.)"""
    with env_overrides({"SGLANG_SWA_EVICTION_INTERVAL": "1000000"}):
        _released_after_window()


def _released_after_window():
    stack = build_stack(window=32, chunk=512)
    tree = stack.tree
    rng = random.Random(12)
    sched = MiniScheduler(stack)
    a = sched.submit("a", random_prompt(rng, 300), 200)
    seen = {}
    while a.kv_committed_len < 430:
        assert sched.step() is not None
        check_invariants(stack, sched.running)
        L = a.kv_committed_len
        if L in (300, 333, 334, 427, 428):
            island = a.last_node if L < 428 else None
            seen[L] = (
                island.swa_lock_ref if island is not None else None,
                None if island is None else island.swa_tombstone,
                a.cache_protected_len,
                tree.swa_evictable_size(),
                tree.swa_protected_size(),
            )
    assert seen[300] == (1, False, 300, 0, 34)  # locked island [266, 300), nothing dead
    assert seen[333] == (1, False, 300, 0, 34)
    assert seen[334] == (0, False, 300, 34, 0)  # released, live, evictable
    assert seen[427][:4] == (0, False, 300, 34)
    # the decode island at 428: frontier 394, new island [394, 428) locked; of the prompt island
    # the window a re-served prompt needs, [268, 300), stays live (evictable); everything else
    # below the frontier is tombstoned (eager reclaim, the harness default)
    assert seen[428][2:] == (428, 32, 34)
    sched.run()
    baseline(stack)


@pytest.mark.parametrize("window, page", [(40, 16), (32, 16), (33, 1)])
def test_decode_island_needs_a_live_window_after_upstreams_evictor(window, page):
    """Upstream's decode evictor (here every step) frees a request's own SWA up to
    ``floor_p(L - max(sliding_window_size, p))``. A decode island ends at ``floor_p(committed)``
    and must have at least ``sliding_window_size`` live tokens before its end (the match rule
    and the lock rule); when the evictor left fewer (window not a multiple of the page), the
    island waits for a later step. Invariants hold throughout, and islands still fire."""
    with env_overrides({"SGLANG_SWA_EVICTION_INTERVAL": "1"}):
        stack = build_stack(window=window, page=page, chunk=256, full_pool=32768, swa_pool=8192)
        rng = random.Random(16)
        sched = MiniScheduler(stack, max_running=4)
        for i in range(3):
            sched.submit(f"r{i}", random_prompt(rng, 300 + 37 * i), 400)
        sched.run(after_step=lambda: check_invariants(stack, sched.running))
        assert stack.tree.stats.decode_islands >= 3 * 4
        baseline(stack)


@pytest.mark.parametrize("reclaim", ["eager", "lazy"])
def test_an_interval_shorter_than_the_window_fires_every_interval(reclaim):
    """Decode interval 8 < window 32: each decode island starts where the live run before the
    previous island starts (the previous island and its window), so it holds a window and fires
    every 8 committed tokens: 100 (prompt), 108, ..., 156, seven decode islands before the 64th
    token finishes the request."""
    stack = build_stack(window=32, chunk=256, decode_interval=8, reclaim=reclaim)
    rng = random.Random(2)
    sched = MiniScheduler(stack)
    req = sched.submit("a", random_prompt(rng, 100), 64)
    ends = []

    def on_event(label, rs):
        if label == "decode" and req in rs and (not ends or ends[-1] != req.cache_protected_len):
            ends.append(req.cache_protected_len)

    sched.on_event = on_event
    sched.run(after_step=lambda: check_invariants(stack, sched.running))
    assert ends == [100, 108, 116, 124, 132, 140, 148, 156]
    assert stack.tree.stats.decode_islands == 7
    baseline(stack)
