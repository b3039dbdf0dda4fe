"""The tree digest that tensor-parallel ranks compare (swa_island_digest), on the real tree, pools,
allocator and scheduler glue (islands_harness.sim; no model runs).

- two stacks that take the same decisions give the same digest, step by step; one decision apart
  (another eviction, another request, another lock), they differ;
- it depends on the tree only: not on node ids, object addresses or the order the process created
  objects in;
- the cache logs it at idle points (``sanity_check``) only with SGLANG_SWA_ISLANDS_TREE_DIGEST=1 and
  only when it changed.
"""

import logging
import random

import pytest

from islands_harness.sim import MiniScheduler, random_prompt
from islands_harness.stack import build_stack
from sglang.srt.mem_cache.base_prefix_cache import EvictParams
from sglang.srt.mem_cache.swa_island_digest import tree_digest
from sglang.srt.mem_cache.swa_island_radix_cache import TREE_DIGEST_ENV
from sglang.srt.mem_cache.swa_radix_cache import TreeNode

LOGGER = "sglang.srt.mem_cache.swa_island_radix_cache"


def run(seed: int, *, extra: bool = False, reclaim: str = "lazy"):
    """A workload with chunk islands, decode islands, queued requests and SWA pressure; the digest
    after every scheduler step."""
    stack = build_stack(window=32, chunk=128, page=1, swa_pool=1400, reclaim=reclaim)
    rng = random.Random(seed)
    sched = MiniScheduler(stack)
    shared = random_prompt(rng, 300)
    for i in range(5):
        sched.submit(f"r{i}", shared + random_prompt(rng, 100 + 40 * i), 150)
    if extra:
        sched.submit("extra", random_prompt(rng, 200), 40)
    digests = []
    sched.run(after_step=lambda: digests.append(tree_digest(stack.tree)))
    return stack, digests


def test_the_same_decisions_give_the_same_digest_at_every_step():
    _, a = run(1)
    TreeNode.counter += 12345  # other node ids, other objects: the digest must not see them
    _, b = run(1)
    assert len(a) > 20 and a == b
    assert len({d.sha256_16 for d in a}) > 10  # it moves with the tree


def test_one_decision_apart_the_digests_differ():
    _, base = run(1)
    _, more = run(1, extra=True)
    assert base[-1] != more[-1]
    stack, digests = run(1)
    before = tree_digest(stack.tree)
    assert before == digests[-1]
    stack.tree.evict(EvictParams(num_tokens=0, swa_num_tokens=40))
    assert tree_digest(stack.tree) != before
    _, eager = run(1, reclaim="eager")
    assert eager[-1] != base[-1]


def test_the_digest_is_logged_at_idle_points_only_when_asked_and_when_it_changed(
        monkeypatch, caplog):
    stack, _ = run(2)
    caplog.set_level(logging.INFO, logger=LOGGER)
    stack.tree.sanity_check()
    assert not [r for r in caplog.records if "tree digest" in r.getMessage()]

    monkeypatch.setenv(TREE_DIGEST_ENV, "1")
    stack, _ = run(2)
    caplog.clear()
    stack.tree.sanity_check()
    stack.tree.sanity_check()  # unchanged: no second line
    lines = [r.getMessage() for r in caplog.records if "tree digest" in r.getMessage()]
    assert lines == [f"SWA islands tree digest: {tree_digest(stack.tree)}"]
    stack.tree.evict(EvictParams(num_tokens=0, swa_num_tokens=40))
    stack.tree.sanity_check()
    lines = [r.getMessage() for r in caplog.records if "tree digest" in r.getMessage()]
    assert len(lines) == 2 and lines[1] != lines[0]


@pytest.mark.parametrize("seed", [3, 4])
def test_digest_totals_read_the_pools(seed):
    stack, digests = run(seed)
    d = tree_digest(stack.tree)
    assert d.swa_free == stack.allocator.swa_available_size()
    assert d.full_free == stack.allocator.full_available_size()
    assert d.swa_locked == stack.tree.swa_protected_size() == 0  # everything finished
    assert d.nodes >= 2
