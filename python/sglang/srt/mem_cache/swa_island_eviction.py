from __future__ import annotations

"""
Copyright 2023-2024 SGLang Team
Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
"""

"""
The indexes behind SWA islands' eviction order, so that an eviction pays for what it takes, not
for what it keeps.

Owns :class:`StampedLRUList` (upstream's SWA LRU list stamping each node with its position,
``swa_order``) and :class:`EvictionClasses` (one heap per eviction class, :data:`COLD` <
:data:`RETENTION` < :data:`WINDOW` < :data:`QUEUED`, each in list order, stale entries dropped
lazily); re-exports ``QueuedHits``. A node entering the list is :data:`COLD`; one leaving it
leaves its class.

Invariant (what makes skipping exact): a node filed under class ``c`` > :data:`COLD` is covered
by the live window of a match end of category ``>= c``; whatever can break a cover files the
nodes within one window of the change again (``SWAIslandRadixCache._unverify_above``,
``_unverify_below``). Units: tokens. Design: docs/DESIGN.md, "The cache, term by term".
"""

import copy
import heapq
import weakref
from typing import TYPE_CHECKING, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from sglang.srt.mem_cache.swa_island_formulas import CLASSES, COLD, QUEUED, RETENTION, WINDOW  # noqa: F401
from sglang.srt.mem_cache.swa_island_queue import QueuedHits  # noqa: F401  (re-exported)
from sglang.srt.mem_cache.swa_radix_cache import LRUList, TreeNode

if TYPE_CHECKING:
    from sglang.srt.managers.schedule_batch import Req



class StampedLRUList(LRUList):
    """Upstream's SWA LRU list whose nodes carry ``swa_order``: ``(epoch, rank)`` tuples that
    increase from the least to the most recently used node, kept as upstream moves nodes.

    A node added at the most recently used end opens a new epoch ``(e, 0)``; a parent that
    ``reset_node_and_parents_mru`` adds right behind its child takes ``(e, rank - 1)``, so a path
    touched by a match is ordered as the list orders it. Example: leaf, parent, grandparent reset
    after epoch 7 -> (8, 0), (8, -1), (8, -2), all after every node of epochs <= 7.

    ``classes``: told when a node enters the list (:data:`COLD`), moves in it (same class, new
    place) and leaves it (no class), so a class's heap is in list order without corrections at
    eviction time: a move costs one heap push, paid by the match or commit that moved the node.
    """

    def __init__(self, classes: "EvictionClasses"):
        super().__init__(is_swa_list=True)
        self.classes = classes
        self._epoch = 0

    def _add_node_after(self, old_node: TreeNode, new_node: TreeNode) -> None:
        super()._add_node_after(old_node, new_node)
        if old_node is self.head:
            self._epoch += 1
            new_node.swa_order = (self._epoch, 0)
        else:
            epoch, rank = old_node.swa_order
            new_node.swa_order = (epoch, rank - 1)
        cls = getattr(new_node, "evict_class", None)
        if cls is not None:  # a move: the node's entry follows it
            self.classes.place(new_node, cls)

    def insert_mru(self, node: TreeNode) -> None:
        super().insert_mru(node)
        self.classes.place(node, COLD)

    def remove_node(self, node: TreeNode) -> None:
        super().remove_node(node)
        self.classes.drop(node)


class EvictionClasses:
    """Live nodes of the SWA LRU list filed by eviction class, each class in list order.

    Entries are ``(swa_order, node.id, version, weakref(node))``; a node's ``evict_class`` and
    ``evict_version`` say which entry is current (every re-filing, a move in the list included,
    makes the previous one stale; stale entries are dropped when they reach the top of their heap
    or at compaction). Holds no strong reference to a node.
    """

    def __init__(self):
        self._heaps: List[list] = [[] for _ in CLASSES]
        self._size = [0 for _ in CLASSES]

    def __deepcopy__(self, memo) -> "EvictionClasses":
        """A copy over the copied nodes (``copy.deepcopy`` keeps weak references as they are, so
        the entries are rebuilt to point at the copies in ``memo``); stale entries are left out."""
        new = EvictionClasses.__new__(EvictionClasses)
        memo[id(self)] = new
        new._size = list(self._size)
        new._heaps = []
        for heap in self._heaps:
            entries = []
            for order, node_id, version, ref in heap:  # a heap stays one with the same keys
                node = ref()
                if node is not None and node.evict_version == version:
                    twin = copy.deepcopy(node, memo)
                    entries.append((order, node_id, version, weakref.ref(twin)))
            heapq.heapify(entries)
            new._heaps.append(entries)
        return new

    def place(self, node: TreeNode, cls: int) -> None:
        """File ``node`` under ``cls`` (replacing its previous class, if any)."""
        old = getattr(node, "evict_class", None)
        if old is not None:
            self._size[old] -= 1
        version = getattr(node, "evict_version", 0) + 1
        node.evict_version = version
        node.evict_class = cls
        self._size[cls] += 1
        heap = self._heaps[cls]
        heapq.heappush(heap, (node.swa_order, node.id, version, weakref.ref(node)))
        if len(heap) > 2 * self._size[cls] + 64:
            self._compact(cls)

    def uncover(self, node: TreeNode, only_unfiled: bool = False) -> None:
        """File ``node`` as :data:`COLD` (its cover may be gone), unless it is COLD already (its
        entry stays) or, with ``only_unfiled``, filed at all.
        Not for a node a :meth:`walk` has just yielded (its entry is out of the heap until the
        caller files it)."""
        old = getattr(node, "evict_class", None)
        if old == COLD or (only_unfiled and old is not None):
            return
        self.place(node, COLD)

    def drop(self, node: TreeNode) -> None:
        """``node`` has no class any more (left the list, or is SWA-locked)."""
        old = getattr(node, "evict_class", None)
        if old is None:
            return
        self._size[old] -= 1
        node.evict_class = None
        node.evict_version += 1

    def size(self, cls: int) -> int:
        return self._size[cls]

    def walk(self, classes: Sequence[int]) -> Iterator[TreeNode]:
        """Nodes of ``classes`` in list order, least recently used first, as the list is while
        the walk runs (what upstream's walk from ``get_lru_no_lock`` meets of them): a node that
        enters one of the classes ahead of the walk (moved to the most recently used end, split,
        or uncovered) is met; one behind it is not, and keeps its class. Each node is met at most
        once; the caller files it again (``place``) or removes it (``drop``, eviction). Close the
        walk (``close()``) when done: that re-files what it passed over.
        """
        heaps = [self._heaps[c] for c in classes]
        passed = []  # current entries behind the cursor: not met in this walk
        cursor = None
        try:
            while True:
                best = None
                for heap in heaps:
                    top = self._valid_top(heap)
                    if top is not None and (best is None or top < best[0]):
                        best = (top, heap)
                if best is None:
                    return
                entry, heap = best
                heapq.heappop(heap)
                if cursor is not None and entry[:2] <= cursor:
                    passed.append((heap, entry))
                    continue
                cursor = entry[:2]
                yield entry[3]()
        finally:
            for heap, entry in passed:
                node = entry[3]()
                if node is not None and node.evict_version == entry[2]:
                    heapq.heappush(heap, entry)

    @staticmethod
    def _valid_top(heap: list) -> Optional[Tuple]:
        """The heap's first current entry, dropping stale entries."""
        while heap:
            order, node_id, version, ref = heap[0]
            node = ref()
            if node is None or node.evict_version != version:
                heapq.heappop(heap)
            else:
                assert node.swa_order == order, f"node {node_id} moved without being re-filed"
                return heap[0]
        return None

    def _compact(self, cls: int) -> None:
        """Drop stale entries of ``cls`` (amortized over the places that made them stale)."""
        live = []
        for entry in self._heaps[cls]:
            node = entry[3]()
            if node is not None and node.evict_version == entry[2]:
                live.append((node.swa_order,) + entry[1:])
        heapq.heapify(live)
        self._heaps[cls] = live

    def check(self, in_list: Callable[[TreeNode], bool]) -> None:
        """Sanity check: every filed node is in the list and has exactly one current entry."""
        seen: Dict[int, int] = {}
        for cls, heap in enumerate(self._heaps):
            for _, node_id, version, ref in heap:
                node = ref()
                if node is not None and node.evict_version == version:
                    assert node.evict_class == cls, (node_id, node.evict_class, cls)
                    assert in_list(node), f"filed node {node_id} is not in the SWA LRU list"
                    seen[node_id] = seen.get(node_id, 0) + 1
        assert all(v == 1 for v in seen.values()), "a node has two current entries"
        assert len(seen) == sum(self._size), (len(seen), self._size)
