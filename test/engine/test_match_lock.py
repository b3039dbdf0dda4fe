"""Admission's lock on a prefix match (patch 0016, ``BasePrefixCache.inc_match_lock_ref``): with
islands it SWA-locks one window of the match, so the cold tokens before the match end stay
evictable; every other cache (and islands off) locks as ``inc_lock_ref`` does.

Real tree, pools, allocator, ``Req``, ``PrefillAdder`` and scheduler glue (islands_harness.sim);
HF window 32 (the cache's ``sliding_window_size`` is 32), chunk 128, reclaim ``lazy``."""

import random

import pytest

from islands_harness.invariants import check_invariants, req_locked_swa
from islands_harness.sim import MiniScheduler, random_prompt
from islands_harness.stack import build_stack
from sglang.srt.mem_cache.base_prefix_cache import BasePrefixCache, EvictParams

BIG = 10**9


def transcript(req):
    return list(req.origin_input_ids) + list(req.output_ids)


@pytest.mark.parametrize("page", [1, 16])
@pytest.mark.parametrize("hook", ["islands", "base", "off"])
def test_a_match_inside_a_long_cold_node_locks_one_window(hook, page, monkeypatch):
    """A finished 600-token transcript; B shares its first 400 tokens and has 500 of its own, so
    B is still the chunked request after its first step and holds admission's lock on its match,
    which ends 16 tokens into the node [384, ...) (the match splits it at 400). Islands: the lock
    covers one window, page-rounded: 32 tokens. Whole nodes back to a window instead: [384, 400)
    plus the node before it, which is A's chunk island at the commit of 384 ([350, 384) at page
    1, frontier 384 - (33 + 1); [320, 384) at page 16) with the base hook (control), and the
    whole chunk [256, 384) with islands off (upstream)."""
    if hook == "base":
        from sglang.srt.mem_cache.swa_island_radix_cache import SWAIslandRadixCache

        monkeypatch.setattr(
            SWAIslandRadixCache, "inc_match_lock_ref", BasePrefixCache.inc_match_lock_ref
        )
    stack = build_stack(window=32, page=page, chunk=128, full_pool=16384, swa_pool=8192,
                        reclaim="lazy", islands=hook != "off")
    rng = random.Random(11)
    sched = MiniScheduler(stack, max_running=4)
    a = sched.submit("a", random_prompt(rng, 600), 16)
    sched.run(after_step=lambda: check_invariants(stack, sched.running))
    b = sched.submit("b", transcript(a)[:400] + random_prompt(rng, 500), 8)
    evictable_before = stack.tree.swa_evictable_size()
    sched.step()  # admitted; the first chunk is scheduled, not committed yet
    assert sched.chunked_req is b and len(b.prefix_indices) == 400
    locked = req_locked_swa(stack, b)
    want = {"islands": 32, "base": 16 + (34 if page == 1 else 64), "off": 16 + 128}[hook]
    assert locked == want
    assert stack.tree.swa_evictable_size() >= evictable_before - locked
    sched.run(after_step=lambda: check_invariants(stack, sched.running))
    assert b.cached_tokens == 400
    stack.tree.evict(EvictParams(num_tokens=BIG, swa_num_tokens=BIG))
    stack.tree.sanity_check()
    assert stack.free_sizes() == stack.initial_free


def test_the_lock_length_is_the_window_rounded_up_to_pages():
    for page, want in ((1, 32), (16, 32), (64, 64)):
        stack = build_stack(window=32, page=page, chunk=128, reclaim="lazy")
        assert stack.tree.window_lock_len == want
