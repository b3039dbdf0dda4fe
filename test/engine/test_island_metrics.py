"""The numbers islands report (SWAHoldStats -> PoolStats -> decode log line and SchedulerStats)
against what the workload produced and what the tree and the allocator hold."""

import random

from islands_harness.invariants import held_swa, recomputed_counters
from islands_harness.sim import MiniScheduler, random_prompt
from islands_harness.stack import build_stack
from sglang.srt.managers.scheduler_components.pool_stats_observer import PoolStats
from sglang.srt.mem_cache.base_prefix_cache import SWAHoldStats
from sglang.srt.observability.metrics_collector import SchedulerStats


def test_hold_stats_count_the_workload_and_upstream_reports_none():
    stack = build_stack(window=32, chunk=128)
    rng = random.Random(0)
    sched = MiniScheduler(stack)
    reqs = [sched.submit(f"r{i}", random_prompt(rng, 520), 100) for i in range(2)]
    while not all(len(r.output_ids) >= 60 for r in reqs):
        sched.step()
    stats = stack.tree.swa_hold_stats(sched.running)
    # 520 tokens in 128-token chunks: 5 commits each; 60 decode tokens at cp/4 = 32: 1 island each
    assert (stats.chunk_islands, stats.decode_islands) == (10, 2)
    fe, fp, se, sp = recomputed_counters(stack.tree)
    assert stats.tombstone_tokens == fe + fp - se - sp > 0
    assert stats.freed_at_commit > 0  # the harness default is eager reclaim
    sched.run()
    upstream = build_stack(window=32, chunk=128, islands=False)
    assert upstream.tree.swa_hold_stats([]) is None


def test_reported_hold_equals_the_hold_measured_from_tree_and_allocator():
    """Mean and max hold equal the hold measured independently (``held_swa``: the lock range in
    the tree + live mapped slots past ``cache_protected_len``), at a point where requests hold
    different amounts and have private (request-owned) slots."""
    stack = build_stack(window=32, chunk=128)
    rng = random.Random(2)
    sched = MiniScheduler(stack)
    reqs = [sched.submit(f"r{i}", random_prompt(rng, 300 + 40 * i), 200) for i in range(2)]
    while len(reqs[0].output_ids) < 10:
        sched.step()
    reqs.append(sched.submit("r2", random_prompt(rng, 380), 200))  # 10 tokens behind
    while len(reqs[0].output_ids) < 45:
        sched.step()
    holds = [held_swa(stack, r) for r in reqs]
    assert all(private > 0 for _, private in holds), holds
    totals = [sum(h) for h in holds]
    assert len(set(totals)) > 1, totals  # mean != max
    stats = stack.tree.swa_hold_stats(sched.running)
    assert stats.held_per_req_mean == sum(totals) / 3
    assert stats.held_per_req_max == max(totals)
    sched.run()


def test_decode_line_and_scheduler_stats_carry_the_hold():
    hold = SWAHoldStats(held_per_req_mean=1088.4, held_per_req_max=1152, chunk_islands=12,
                        decode_islands=3, freed_at_commit=40960, reclaimed_cold=128,
                        reclaimed_window=64, tombstone_tokens=30720)
    pool = PoolStats(full_num_used=10, full_token_usage=0.1, full_available_size=90,
                     full_evictable_size=0, is_hybrid_swa=True, swa_num_used=5,
                     swa_token_usage=0.05, swa_available_size=95, swa_evictable_size=0,
                     swa_hold=hold)
    line = ", ".join(pool.get_decode_usage_msg_parts())
    assert line.endswith(
        "swa token usage: 0.05, swa held/req: 1088 (max 1152), islands: 12 chunk + 3 decode, "
        "swa reclaimed: 40960 at commit + 128 cold + 64 window, #tombstone token: 30720"
    )
    stats = SchedulerStats()
    pool.update_scheduler_stats(stats)
    assert (stats.swa_held_tokens_per_req_mean, stats.swa_held_tokens_per_req_max) == (1088.4, 1152)
    assert (stats.swa_island_chunk_inserts, stats.swa_island_decode_inserts) == (12, 3)
    assert (stats.swa_freed_at_commit_tokens, stats.swa_reclaimed_cold_tokens,
            stats.swa_reclaimed_window_tokens, stats.swa_tombstone_tokens) == (40960, 128, 64, 30720)
    # other caches report no hold: the line and the stats stay as upstream's
    pool.swa_hold = None
    assert ", ".join(pool.get_decode_usage_msg_parts()).endswith("swa token usage: 0.05")
    stats = SchedulerStats()
    pool.update_scheduler_stats(stats)
    assert stats.swa_island_chunk_inserts == 0 and stats.swa_held_tokens_per_req_max == 0
