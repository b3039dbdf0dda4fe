"""The numbers islands report (decode log line, Prometheus) against what the workload produced."""

import random

from islands_harness.invariants import recomputed_counters
from islands_harness.sim import MiniScheduler, random_prompt
from islands_harness.stack import build_stack
from sglang.srt.mem_cache.swa_island_metrics import (
    SWAIslandMetrics,
    report_swa_islands,
    swa_hold,
    tombstone_tokens,
)


def test_report_matches_the_workload_and_is_empty_for_upstream():
    stack = build_stack(window=32, chunk=128)
    rng = random.Random(0)
    sched = MiniScheduler(stack)
    reqs = [sched.submit(f"r{i}", random_prompt(rng, 520), 100) for i in range(2)]
    while not all(len(r.output_ids) >= 60 for r in reqs):
        sched.step()
    line = report_swa_islands(stack.tree, sched.running)
    holds = [sum(swa_hold(stack.tree, r)) for r in reqs]
    # 520 tokens in 128-token chunks: 5 commits each; 60 decode tokens at cp/4 = 32: 1 island each
    assert stack.tree.stats.chunk_islands == 10
    assert stack.tree.stats.decode_islands == 2
    assert f"islands: 10 chunk + 2 decode" in line
    assert f"(max {max(holds)})" in line
    fe, fp, se, sp = recomputed_counters(stack.tree)
    assert tombstone_tokens(stack.tree) == fe + fp - se - sp > 0
    assert f"#tombstone token: {fe + fp - se - sp}" in line
    sched.run()
    upstream = build_stack(window=32, chunk=128, islands=False)
    assert report_swa_islands(upstream.tree, []) == ""


LABELS = {"cache_type": "SWAIslandRadixCache", "test": "metrics"}
_METRICS = []


def _island_metrics() -> SWAIslandMetrics:
    """One set of series per process (prometheus_client refuses to register a name twice)."""
    if not _METRICS:
        _METRICS.append(SWAIslandMetrics(LABELS))
    m = _METRICS[0]
    m._reported = (0, 0, 0)  # a new tree's counters start at 0
    return m


def test_prometheus_series_follow_the_counters():
    from prometheus_client import REGISTRY

    def sample(name, **extra):
        return REGISTRY.get_sample_value(name, {**LABELS, **extra}) or 0.0

    before = (sample("sglang:swa_island_inserts_total", kind="chunk"),
              sample("sglang:swa_island_freed_tokens_total"))
    stack = build_stack(window=32, chunk=128)
    stack.tree.island_metrics = _island_metrics()
    rng = random.Random(1)
    sched = MiniScheduler(stack)
    sched.submit("a", random_prompt(rng, 400), 80)
    for _ in range(3):
        sched.run(max_steps=20)
        report_swa_islands(stack.tree, sched.running)
    got = sample("sglang:swa_island_inserts_total", kind="chunk") - before[0]
    assert got == stack.tree.stats.chunk_islands == 4
    freed = sample("sglang:swa_island_freed_tokens_total") - before[1]
    assert freed == stack.tree.stats.swa_tokens_freed_eagerly > 0


def test_reported_hold_equals_the_hold_measured_from_tree_and_allocator():
    """The log line's and Prometheus' hold (mean, max) equal the hold measured independently
    (``islands_harness.invariants.held_swa``: the lock range in the tree + live mapped slots past
    ``cache_protected_len``), at a point where requests hold different amounts and have private
    (request-owned) slots."""
    from prometheus_client import REGISTRY

    from islands_harness.invariants import held_swa

    stack = build_stack(window=32, chunk=128)
    labels = LABELS
    stack.tree.island_metrics = _island_metrics()
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
    line = report_swa_islands(stack.tree, sched.running)
    mean = REGISTRY.get_sample_value("sglang:swa_held_tokens_per_running_req", {**labels, "stat": "mean"})
    top = REGISTRY.get_sample_value("sglang:swa_held_tokens_per_running_req", {**labels, "stat": "max"})
    assert mean == sum(totals) / 3
    assert top == max(totals)
    assert f"swa held/req: {sum(totals) / 3:.0f} (max {max(totals)})" in line
    sched.run()
