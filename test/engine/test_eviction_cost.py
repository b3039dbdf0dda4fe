"""An SWA eviction pays for what it takes, not for the windows it keeps: the nodes one eviction
examines do not grow with the number of live nodes the cache keeps (issue: "SWA eviction that
costs what it takes, at any cache size").

Visits are counted, never timed: every call that examines one node for eviction (the window walk
of ``_window_tail``, the cover walk of ``_protection``, and a step of upstream's LRU walk,
``get_prev_no_lock``). Real tree, pools, allocator; HF window 32, page 1.
"""

import random
from array import array

import pytest

from islands_harness.invariants import check_invariants
from islands_harness.sim import MiniScheduler, random_prompt
from islands_harness.stack import build_stack
from sglang.srt.mem_cache.base_prefix_cache import EvictParams, InsertParams
from sglang.srt.mem_cache.radix_cache import RadixKey

WINDOW = 32


class Visits:
    """Counts the node examinations of ``tree``'s SWA eviction (wrapping the bound methods on the
    instance; the real methods run)."""

    def __init__(self, tree):
        self.n = 0
        for owner, name in (
            (tree, "_window_tail"),
            (tree, "_protection"),
            (tree.swa_lru_list, "get_prev_no_lock"),
        ):
            if hasattr(owner, name):
                setattr(owner, name, self._counted(getattr(owner, name)))

    def _counted(self, fn):
        def wrapper(*args, **kwargs):
            self.n += 1
            return fn(*args, **kwargs)

        return wrapper


def evict_swa(tree, tokens):
    return tree.evict(EvictParams(num_tokens=0, swa_num_tokens=tokens))


def prompts_tree(n, islands=True):
    """``n`` cached 64-token prompts of their own (a leaf each: its last window is a match end,
    the 32 tokens before it cold), inserted with KV from the real allocator."""
    size = n * 64 + 4096
    stack = build_stack(
        window=WINDOW, chunk=256, full_pool=size, swa_pool=size, islands=islands, reclaim="lazy"
    )
    rng = random.Random(n)
    for i in range(n):
        tokens = array("q", [1000 + i] + [rng.randrange(10, 1000) for _ in range(63)])
        value = stack.allocator.alloc(64).to("cpu").to(dtype=__import__("torch").int64)
        stack.tree.insert(InsertParams(key=RadixKey(tokens, None), value=value))
    return stack


def drain_cold(stack):
    """Evict every cold SWA token (all but each leaf's window)."""
    tree = stack.tree
    evict_swa(tree, tree.swa_evictable_size() - len(tree.root_node.children) * WINDOW)
    if hasattr(tree, "stats"):
        assert tree.stats.reclaimed_window == 0


def visits_of_one_eviction(stack, tokens=64):
    visits = Visits(stack.tree)
    freed = evict_swa(stack.tree, tokens).swa_num_tokens_evicted
    n = visits.n
    assert freed >= tokens
    check_invariants(stack, [])
    return n


@pytest.mark.parametrize("islands", [True, False], ids=["islands", "upstream"])
def test_evicting_windows_visits_no_more_nodes_in_a_larger_cache(islands):
    """The issue's measurement, counted: once no cold SWA is left, evicting 64 tokens examines
    the same number of nodes with 100 or 800 cached prompts (the scan examined every live window,
    once per pass: 800+ visits at 800 prompts)."""
    counts = {}
    for n in (100, 800):
        stack = prompts_tree(n, islands=islands)
        drain_cold(stack)
        counts[n] = visits_of_one_eviction(stack)
    assert counts[800] <= counts[100] + 2, counts
    assert counts[800] <= 16, counts


def transcripts_with_queue(n, queued):
    """``n`` finished chunked prompts (192 tokens, chunk 64: two retention points each) and
    ``queued`` follow-ups of them waiting (each a queued hit), through the scheduler glue."""
    size = n * 400 + 4096
    stack = build_stack(
        window=WINDOW, chunk=64, full_pool=size, swa_pool=size, max_reqs=32, reclaim="lazy"
    )
    rng = random.Random(n)
    sched = MiniScheduler(stack, max_running=16)
    done = [sched.submit(f"t{i}", random_prompt(rng, 192), 4) for i in range(n)]
    sched.run()
    for i in range(queued):
        req = done[i % n]
        sched.submit(f"f{i}", list(req.origin_input_ids) + list(req.output_ids) + [7], 4)
    return stack, sched


@pytest.mark.parametrize("queued", [0, 16])
def test_each_pass_visits_no_more_nodes_in_a_larger_cache(queued):
    """With retention points, finished transcripts and queued hits, the evictions that take the
    cold tier, then retention windows, then other windows, and (with a queue) queued hits'
    windows, each examine as many nodes at 120 transcripts as at 20 (plus what they free or
    split): a pass starts at its first candidate."""
    counts = {}
    for n in (20, 120):
        stack, sched = transcripts_with_queue(n, queued)
        tree = stack.tree
        per_phase = []
        for _ in range(3):  # cold, then retention windows, then other windows
            per_phase.append(visits_of_one_eviction(stack, tokens=WINDOW))
            check_invariants(stack, sched.running)
        # most windows gone: the next eviction also files the nodes this one uncovered (work of
        # this eviction, deferred: bounded by what it freed); the one after it is measured
        evict_swa(tree, max(0, tree.swa_evictable_size() - 40 * WINDOW))
        evict_swa(tree, WINDOW)
        per_phase.append(visits_of_one_eviction(stack, tokens=WINDOW))
        counts[n] = per_phase
    for small, large in zip(counts[20], counts[120]):
        assert large <= small + 8, counts


def test_a_tombstone_refiles_only_the_descendants_whose_run_reaches_it_within_a_window():
    """``_unverify_below``: when ``a`` loses its SWA, the live descendants re-filed are those whose
    distance from ``a``'s end (their own tokens included) is under a window, and no deeper one.
    A chain below ``a`` of 16 + 8 + 8 + 8 + 8 tokens, a 1-token branch leaf at every node end:
    the chain's first two nodes and their branch leaves (16, 24; 17, 25) and ``a``'s own branch
    leaf (1) are re-filed; the third chain node (32) and all below it are not."""
    stack = build_stack(window=WINDOW, chunk=256, full_pool=4096, swa_pool=4096, islands=True,
                        reclaim="lazy")
    tree, torch = stack.tree, __import__("torch")
    key = array("q", range(10, 98))

    def insert(tokens):
        value = stack.allocator.alloc(len(tokens)).to("cpu").to(dtype=torch.int64)
        tree.insert(InsertParams(key=RadixKey(array("q", tokens), None), value=value))

    insert(list(key))
    ends = (40, 56, 64, 72, 80)
    for s in ends:
        insert(list(key[:s]) + [2000 + s])
    a = tree.root_node.children[next(iter(tree.root_node.children))]
    assert len(a.key) == 40 and not a.swa_tombstone

    placed = []
    real_place = tree._classes.place
    tree._classes.place = lambda node, cls: (placed.append(node), real_place(node, cls))[1]
    tree._tombstone_swa(a)

    def depth_below_a(node):  # tokens from a's end to node's end; None if not below a
        d = 0
        while node is not None and node is not a:
            d += len(node.key)
            node = node.parent
        return d if node is a else None

    below = sorted(d for d in (depth_below_a(n) for n in placed) if d is not None)
    assert below == [1, 16, 17, 24, 25]


def test_a_node_longer_than_a_page_rounded_window_is_covered_by_no_window():
    """``_protection``'s first test: a live node longer than the page-rounded window
    (``ceil(w / p) * p``: 32 tokens at page 1) is COLD whatever ends at it, since no window
    covers all of it (``_cold_head`` splits its head off); a leaf of exactly that length is its
    own window, WINDOW."""
    from sglang.srt.mem_cache.swa_island_formulas import COLD, WINDOW

    page = 1
    stack = build_stack(window=WINDOW, page=page, chunk=256, full_pool=4096, swa_pool=4096,
                        islands=True, reclaim="lazy")
    tree, torch = stack.tree, __import__("torch")
    rounded = -(-WINDOW // page) * page
    leaves = {}
    for first, length in ((100, rounded), (200, rounded + page)):
        tokens = array("q", [first] + list(range(300, 300 + length - 1)))
        value = stack.allocator.alloc(length).to("cpu").to(dtype=torch.int64)
        tree.insert(InsertParams(key=RadixKey(tokens, None), value=value))
        leaves[length] = tree.root_node.children[next(
            k for k, c in tree.root_node.children.items() if len(c.key) == length)]
    assert tree._protection(leaves[rounded]) == WINDOW
    assert tree._protection(leaves[rounded + page]) == COLD
