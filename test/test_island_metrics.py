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


def test_prometheus_series_follow_the_counters():
    from prometheus_client import REGISTRY

    stack = build_stack(window=32, chunk=128)
    metrics = SWAIslandMetrics({"cache_type": "SWAIslandRadixCache", "test": "metrics"})
    stack.tree.island_metrics = metrics
    rng = random.Random(1)
    sched = MiniScheduler(stack)
    sched.submit("a", random_prompt(rng, 400), 80)
    for _ in range(3):
        sched.run(max_steps=20)
        report_swa_islands(stack.tree, sched.running)
    labels = {"cache_type": "SWAIslandRadixCache", "test": "metrics"}
    got = REGISTRY.get_sample_value("sglang:swa_island_inserts_total", {**labels, "kind": "chunk"})
    assert got == stack.tree.stats.chunk_islands == 4
    freed = REGISTRY.get_sample_value("sglang:swa_island_freed_tokens_total", labels)
    assert freed == stack.tree.stats.swa_tokens_freed_eagerly > 0
