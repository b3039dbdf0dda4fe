# SPDX-License-Identifier: Apache-2.0
"""Eviction candidates of the window order (``swa_island.SWAIslandComponent``): a
device LRU list that reports each node it adds, and one heap per eviction class.
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
    """Device LRU list calling ``on_add(beside, new_node)`` for each node it adds;
    ``beside``: the node it went after, None at an MRU end."""

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
    """One class's candidates, oldest touch first, O(log n) per add: a heap whose
    stale entries are skipped, and dropped once they outnumber the live ones."""

    def __init__(self):
        self.filed: dict = {}  # node id -> (touch, number, weakref)
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
        """Remove ``node_id`` if present (its heap entry goes stale)."""
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
        """Remove and return the oldest node (None if gone); ``IndexError`` if empty."""
        while True:
            _, number, node_id, ref = heapq.heappop(self.heap)
            if self._live(number, node_id):
                del self.filed[node_id]
                return ref()

    def __bool__(self) -> bool:
        return bool(self.filed)

    def check(self) -> None:
        """One live heap entry per node; stale entries bounded (tests)."""
        live = sum(1 for _, n, node_id, _ in self.heap if self._live(n, node_id))
        assert live == len(
            self.filed
        ), f"{live} heap entries for {len(self.filed)} filed nodes"
        assert (
            len(self.heap) <= 2 * len(self.filed) + 64
        ), f"{len(self.heap)} heap entries"
