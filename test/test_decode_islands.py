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
        interval = chunk // 4
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
    interval = stack.tree.decode_interval  # 64
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
        w, interval = stack.tree.window, stack.tree.decode_interval
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
