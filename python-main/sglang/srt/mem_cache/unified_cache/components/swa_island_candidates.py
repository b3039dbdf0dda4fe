# SPDX-License-Identifier: Apache-2.0
"""The candidate index of the window eviction order (``swa_island.SWAIslandComponent``).

``CandidateLRUList`` is upstream's device LRU list that reports every node it adds
(``UnifiedLRUList.on_node_added``); ``Candidates`` is one eviction class's candidates, least
recently touched first, O(log n) per filing.
"""

from __future__ import annotations

import heapq
import itertools
import weakref
from typing import TYPE_CHECKING, Callable, Optional

from sglang.srt.mem_cache.unified_cache.unified_tree_core import UnifiedLRUList

if TYPE_CHECKING:
    from sglang.srt.mem_cache.unified_cache.components.base import ComponentType
    from sglang.srt.mem_cache.unified_radix_cache import NodeId, UnifiedTreeNode


class CandidateLRUList(UnifiedLRUList):
    """Upstream's device LRU list that tells ``on_add(beside, new_node)`` every node it adds
    (``insert_mru``, ``insert_after``, the moves of ``reset_*_mru``): ``beside`` is the node of
    the list it went after, None when it went to a most recently used end (after the head or a
    partition sentinel). Its walk-cursor sentinels are not nodes of the list and are not told.
    """

    def __init__(
        self,
        component_type: ComponentType,
        component_types: tuple[ComponentType, ...],
        *,
        on_add: Callable[[Optional[UnifiedTreeNode], UnifiedTreeNode], None],
        is_referenced: Optional[Callable[[UnifiedTreeNode], bool]] = None,
    ) -> None:
        super().__init__(component_type, component_types, is_referenced=is_referenced)
        self._on_add = on_add

    def on_node_added(
        self, prev_node: UnifiedTreeNode, new_node: UnifiedTreeNode
    ) -> None:
        if new_node.id in self.cache:
            self._on_add(prev_node if prev_node.id in self.cache else None, new_node)


class Candidates:
    """The candidates of one class: the filed nodes, least recently touched first. One filing per
    node (a node filed again at a newer touch moves; ``unfile`` takes a filing back); a heap of
    (touch, filing number, node id, weak reference) entries in which an entry that is not its
    node's filing any more is stale, skipped when popped and dropped when stale entries
    outnumber the filings (O(log n) per filing, amortized).
    """

    def __init__(self):
        self.filed: dict = {}  # node id -> (touch, filing number, weak reference)
        self.heap: list = []
        self._filings = itertools.count()

    def __contains__(self, node_id: NodeId) -> bool:
        return node_id in self.filed

    def file(self, node: UnifiedTreeNode, touch: int) -> None:
        if self.filed.get(node.id, (None,))[0] == touch:
            return
        ref, number = weakref.ref(node), next(self._filings)
        self.filed[node.id] = (touch, number, ref)
        heapq.heappush(self.heap, (touch, number, node.id, ref))
        self._drop_stale()

    def unfile(self, node_id: NodeId) -> None:
        """Take ``node_id``'s filing back, if it has one (its heap entry goes stale)."""
        if self.filed.pop(node_id, None) is not None:
            self._drop_stale()

    def _live(self, number: int, node_id: NodeId) -> bool:
        return self.filed.get(node_id, (None, None))[1] == number

    def _drop_stale(self) -> None:
        if len(self.heap) > 2 * len(self.filed) + 64:
            self.heap = [
                (t, n, node_id, r) for node_id, (t, n, r) in self.filed.items()
            ]
            heapq.heapify(self.heap)

    def pop(self) -> Optional[UnifiedTreeNode]:
        """The least recently touched filed node (None if it is gone), unfiled; raises
        ``IndexError`` when nothing is filed."""
        while True:
            _, number, node_id, ref = heapq.heappop(self.heap)
            if self._live(number, node_id):
                del self.filed[node_id]
                return ref()

    def __bool__(self) -> bool:
        return bool(self.filed)

    def check(self) -> None:
        """One heap entry per filing; stale entries bounded (tests)."""
        live = sum(1 for _, n, node_id, _ in self.heap if self._live(n, node_id))
        assert live == len(
            self.filed
        ), f"{live} heap entries for {len(self.filed)} filed nodes"
        assert (
            len(self.heap) <= 2 * len(self.filed) + 64
        ), f"{len(self.heap)} heap entries"
