"""The eviction index of SWA islands on its own (``swa_island_eviction``): upstream's real SWA
``LRUList`` and ``TreeNode`` stamped by ``StampedLRUList``, filed by ``EvictionClasses``.

What the cache relies on: a walk meets the nodes of its classes in the list's order as it is
while the walk runs (least recently used first), each at most once; a node moved after it was
filed is met at its new place; what a walk passed over keeps its class; ``uncover`` files a node
as COLD without a second entry; the index holds its nodes weakly and survives ``deepcopy``."""

import copy
import gc

from sglang.srt.mem_cache.swa_island_eviction import (
    COLD,
    QUEUED,
    RETENTION,
    WINDOW,
    EvictionClasses,
    StampedLRUList,
)
from sglang.srt.mem_cache.swa_radix_cache import TreeNode


def make(n):
    classes = EvictionClasses()
    lru = StampedLRUList(classes)
    nodes = [TreeNode() for _ in range(n)]
    for x in nodes:  # nodes[0] least recently used
        lru.insert_mru(x)
    return classes, lru, nodes


def lru_order(lru):
    out, x = [], lru.tail.swa_prev
    while x is not lru.head:
        out.append(x)
        x = x.swa_prev
    return out


def walk_all(classes, wanted, on_meet=None):
    met = []
    walk = classes.walk(wanted)
    try:
        for x in walk:
            met.append(x)
            if on_meet is not None:
                on_meet(x)
            else:
                classes.place(x, x.evict_class_to_be)
    finally:
        walk.close()
    return met


def test_new_nodes_are_cold_and_a_walk_meets_them_in_list_order():
    classes, lru, nodes = make(6)
    assert [classes.size(c) for c in (COLD, RETENTION, WINDOW, QUEUED)] == [6, 0, 0, 0]
    for x in nodes:
        x.evict_class_to_be = COLD
    assert walk_all(classes, (COLD,)) == nodes
    classes.check(lru.in_list)


def test_a_walk_over_several_classes_merges_them_in_list_order_and_skips_the_others():
    classes, lru, nodes = make(8)
    for i, x in enumerate(nodes):
        classes.place(x, (COLD, RETENTION, WINDOW, QUEUED)[i % 4])
        x.evict_class_to_be = x.evict_class
    met = walk_all(classes, (COLD, WINDOW))
    assert met == [x for i, x in enumerate(nodes) if i % 4 in (0, 2)]
    assert [classes.size(c) for c in (COLD, RETENTION, WINDOW, QUEUED)] == [2, 2, 2, 2]
    classes.check(lru.in_list)


def test_a_node_moved_to_the_most_recently_used_end_is_met_at_its_new_place():
    classes, lru, nodes = make(5)
    lru.reset_node_mru(nodes[1])
    parent_chain = [nodes[3], nodes[0]]  # reset a "path": nodes[3], then its "parent" nodes[0]
    prev = lru.head
    for x in parent_chain:
        lru._remove_node(x)
        lru._add_node_after(prev, x)
        prev = x
    for x in nodes:
        x.evict_class_to_be = COLD
    assert walk_all(classes, (COLD,)) == lru_order(lru)
    assert lru_order(lru) == [nodes[2], nodes[4], nodes[1], nodes[0], nodes[3]]


def test_a_node_filed_ahead_of_the_cursor_is_met_and_one_behind_it_is_not():
    classes, lru, nodes = make(6)
    for x in nodes:
        classes.place(x, WINDOW)

    def on_meet(x):
        # uncover the node two places ahead and the first node (behind the cursor by then)
        if x is nodes[1]:
            classes.uncover(nodes[3])
            classes.uncover(nodes[0])
        classes.place(x, WINDOW)

    classes.place(nodes[1], COLD)
    met = walk_all(classes, (COLD,), on_meet)
    # nodes[0] was uncovered after the walk passed its place in the list: not met, still COLD
    assert met == [nodes[1], nodes[3]]
    assert nodes[0].evict_class == COLD
    classes.check(lru.in_list)
    # the next walk meets it
    assert walk_all(classes, (COLD,), lambda x: classes.place(x, WINDOW)) == [nodes[0]]


def test_uncover_files_as_cold_once():
    classes, lru, nodes = make(3)
    a, b, c = nodes
    version = a.evict_version
    classes.uncover(a)  # already COLD: the entry stays
    assert a.evict_version == version
    classes.place(b, QUEUED)
    classes.uncover(b, only_unfiled=True)  # filed: kept
    assert b.evict_class == QUEUED
    classes.uncover(b)
    assert b.evict_class == COLD
    classes.drop(c)
    assert c.evict_class is None
    classes.uncover(c, only_unfiled=True)
    assert c.evict_class == COLD
    assert [classes.size(k) for k in (COLD, RETENTION, WINDOW, QUEUED)] == [3, 0, 0, 0]
    classes.check(lru.in_list)


def test_leaving_the_list_leaves_the_class_and_many_places_stay_compact():
    classes, lru, nodes = make(40)
    for _ in range(50):
        for x in nodes:
            classes.place(x, WINDOW)
            classes.place(x, COLD)
    assert all(len(h) <= 2 * classes.size(c) + 64 for c, h in enumerate(classes._heaps))
    for x in nodes[:10]:
        lru.remove_node(x)
    assert classes.size(COLD) == 30
    classes.check(lru.in_list)
    for x in nodes:
        x.evict_class_to_be = COLD
    assert walk_all(classes, (COLD,)) == nodes[10:]


def test_weak_entries_and_deepcopy():
    classes, lru, nodes = make(4)
    classes.place(nodes[2], RETENTION)
    twin_lru = copy.deepcopy(lru)
    twin = twin_lru.classes
    copies = lru_order(twin_lru)
    assert [x.id for x in copies] == [x.id for x in nodes]
    assert all(c is not x for c, x in zip(copies, nodes))
    for x in copies:
        x.evict_class_to_be = x.evict_class
    assert walk_all(twin, (COLD, RETENTION)) == copies
    # the original is untouched by the walk on the copy
    assert [x.evict_class for x in nodes] == [COLD, COLD, RETENTION, COLD]
    # a node that is gone leaves only a dead entry, skipped by the next walk
    lru.remove_node(nodes[0])
    del copies, twin, twin_lru
    gone = nodes.pop(0)
    del gone
    gc.collect()
    for x in nodes:
        x.evict_class_to_be = x.evict_class
    assert walk_all(classes, (COLD, RETENTION)) == nodes
