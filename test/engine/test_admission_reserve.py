"""Admission keeps the running batch's next decode step free beside a prefill chunk it admits
(patch 0013, ``SWAIslandRadixCache.swa_admission_reserve``), on the real tree, pools, allocator,
``ScheduleBatch`` and ``PrefillAdder``.

Under the overlap scheduler the chunk admitted at step k is committed to the tree only after step
k+1 is scheduled. These tests reproduce that order: admit and allocate the chunk, then check the
running batch's decode memory (``check_decode_mem``, whose failure makes the scheduler retract)
before the chunk's result is processed.
"""

import random

import pytest

from islands_harness.invariants import check_invariants
from islands_harness.sim import MiniScheduler, random_prompt
from islands_harness.stack import build_stack
from sglang.srt.mem_cache.base_prefix_cache import BasePrefixCache, EvictParams

BIG = 10**9
WINDOW, CHUNK, PAGE = 32, 128, 1
N_DECODING, LONG_PROMPT = 6, 600


def decoding_batch(islands: bool):
    """``N_DECODING`` requests past their prefill, then only pinned SWA left: every evictable SWA
    token is evicted, and a ballast allocation leaves ``room`` free SWA tokens, where ``room`` is
    what a chunk of ``CHUNK`` tokens needs to be admitted (``_swa_budget_for_req`` + 1: the check
    is strict) plus ``N_DECODING - 3`` more. Admitting that chunk leaves ``N_DECODING - 1`` tokens:
    one short of the next decode step, which allocates one token per request at page size 1."""
    stack = build_stack(window=WINDOW, chunk=CHUNK, page=PAGE, islands=islands, reclaim="lazy",
                        max_reqs=N_DECODING + 2)
    rng = random.Random(0)
    sched = MiniScheduler(stack, max_running=N_DECODING + 1)
    reqs = [sched.submit(f"d{i}", random_prompt(rng, 40), 200) for i in range(N_DECODING)]
    while any(len(r.output_ids) < 2 for r in reqs):
        assert sched.step() is not None
        check_invariants(stack, sched.running)
    stack.tree.evict(EvictParams(num_tokens=0, swa_num_tokens=BIG))
    budget = max(CHUNK, WINDOW) + PAGE
    room = budget + 1 + (N_DECODING - 3)
    ballast = stack.allocator.alloc(stack.allocator.swa_available_size() - room)
    assert stack.allocator.swa_available_size() == room
    long_req = sched.submit("long", random_prompt(rng, LONG_PROMPT), 8)
    return stack, sched, reqs, long_req, ballast


def finish(stack, sched, ballast) -> None:
    """Free the ballast, run everything to the end, and check both pools are back to baseline."""
    stack.allocator.free(ballast)
    sched.run(after_step=lambda: check_invariants(stack, sched.running))
    stack.tree.evict(EvictParams(num_tokens=BIG, swa_num_tokens=BIG))
    stack.tree.sanity_check()
    assert stack.free_sizes() == stack.initial_free


def test_a_decode_step_scheduled_before_the_chunk_commits_fits():
    stack, sched, reqs, long_req, ballast = decoding_batch(islands=True)
    adder = sched._adder()
    assert adder.rem_swa_token_offset == N_DECODING  # one token per decoding request, page 1
    assert adder.rem_swa_token_offset == stack.tree.swa_admission_reserve(sched.running_batch)

    batch = sched._get_new_batch_prefill()
    # the reserve leaves too little room for a full chunk beside it: nothing admitted now
    assert batch is None and long_req in sched.waiting
    assert sched.running_batch.check_decode_mem(), "the next decode step would retract"
    finish(stack, sched, ballast)
    assert sched.retractions == 0
    assert [len(r.output_ids) for r in reqs] == [200] * N_DECODING
    assert len(long_req.output_ids) == 8


def test_without_the_reserve_the_same_admission_starves_the_next_decode_step(monkeypatch):
    """Control: the scenario above does retract when the cache reserves nothing (the base hook,
    what every other cache class keeps), so the test above can fail."""
    stack, sched, _, long_req, ballast = decoding_batch(islands=True)
    monkeypatch.setattr(type(stack.tree), "swa_admission_reserve",
                        BasePrefixCache.swa_admission_reserve)
    batch = sched._get_new_batch_prefill()
    assert batch is not None and batch.reqs == [long_req]
    assert stack.allocator.swa_available_size() == N_DECODING - 1
    assert not sched.running_batch.check_decode_mem()
    # the scheduler would now retract; here the chunk's result is processed instead
    monkeypatch.undo()
    sched._process_prefill(batch)
    sched.last_batch = batch
    finish(stack, sched, ballast)


@pytest.mark.parametrize("islands", [False, True])
def test_the_reserve_is_the_next_decode_step_and_zero_without_islands(islands):
    """``SWARadixCache`` (islands off) keeps the base hook: admission is upstream's, nothing
    reserved. With islands the reserve is exactly ``new_tokens_required_next_decode``, which at
    page 16 counts a page only for requests at a page boundary."""
    stack = build_stack(window=WINDOW, chunk=CHUNK, page=16, islands=islands)
    rng = random.Random(1)
    sched = MiniScheduler(stack, max_running=8)
    reqs = [sched.submit(f"r{i}", random_prompt(rng, 40 + 5 * i), 64) for i in range(4)]
    seen = set()
    while any(len(r.output_ids) < 40 for r in reqs):
        assert sched.step() is not None
        reserve = sched._adder().rem_swa_token_offset
        if islands:
            batch = sched.running_batch
            expected = 0 if batch.is_empty() else batch.new_tokens_required_next_decode()
            assert reserve == expected
            seen.add(reserve)
        else:
            assert reserve == 0
    if islands:
        assert max(seen) > 0 and 0 in seen  # both a page boundary and none, at some step
    sched.run()
    stack.tree.evict(EvictParams(num_tokens=BIG, swa_num_tokens=BIG))
    assert stack.free_sizes() == stack.initial_free
