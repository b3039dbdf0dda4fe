# SPDX-License-Identifier: Apache-2.0
"""Queued hits on sglang 0.5.23's Python tree core: what each waiting request would hit, and where
it would continue, for the window-aware SWA eviction (``SWAIslandComponent``).

A request joining the waiting queue is matched once (``SWAIslandUnifiedRadixCache.on_request_queued``)
and the node its match ends at becomes its *queued hit*, kept until the request's first commit
(``checkpoint``) or its release: SWA eviction takes the windows of queued hits after every other
window (``QUEUED``, the last class), the latest queued request's first. A commit that makes
``root..last_node`` live moves the queued hits that continue along it: a waiting request whose hit
lies on that path and whose next page is the path's next node matches again, so the deeper hit it
now has (a sibling's fresh prompt, a running predecessor's decode island) is kept before eviction
can take it as cold.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Hashable, Iterable, List, Optional

from sglang.srt.mem_cache.swa_island_queue import QueuedHits

if TYPE_CHECKING:
    from sglang.srt.managers.schedule_batch import Req
    from sglang.srt.mem_cache.unified_cache.unified_tree_core import UnifiedTreeNode


class QueuedHitIndex:
    """Queued hits (``hits``: by request, weakly, in arrival order; ``node in hits.nodes`` O(1)) and,
    per hit node, the waiting requests by the child key of their next page (``edge``: the key the
    tree files that page under). A request dropped from the queue, or garbage-collected while
    queued, leaves both. Node and request references are weak: the index never keeps a node or
    a request alive."""

    def __init__(self, root: "UnifiedTreeNode"):
        # A hit's end is a match end (the match that made it stamped it, ``MATCH_END``), so when
        # no request hits it any more its window stays ``WINDOW``: no candidate to file again.
        self.hits = QueuedHits(root, on_released=lambda node: None)
        # node -> {edge -> {req: None}}: who waits at node to continue on edge
        self._at: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
        self._edge: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # req -> (node, edge)

    def set(self, req: "Req", node: "UnifiedTreeNode", edge: Optional[Hashable]) -> None:
        """``req`` would hit ``node`` and continue on ``edge`` (None: no full page follows the
        hit); an update keeps the request's place in arrival order."""
        self._unindex(req)
        self.hits.set(req, node)
        if edge is not None:
            by_edge = self._at.setdefault(node, {})
            by_edge.setdefault(edge, weakref.WeakKeyDictionary())[req] = None
            self._edge[req] = (node, edge)

    def drop(self, req: "Req") -> None:
        """``req`` left the queue (its first commit, its release): its hit is no longer kept."""
        self._unindex(req)
        self.hits.drop(req)

    def continuing(self, path: Iterable["UnifiedTreeNode"], page_size: int) -> List["Req"]:
        """The waiting requests whose hit is the parent of a node of ``path`` (root first, root
        left out) and whose next page is that node: two dict lookups per node of the path."""
        if not self._at:
            return []
        out: List["Req"] = []
        for child in path:
            by_edge = self._at.get(child.parent)
            if by_edge:
                out.extend(by_edge.get(child.key.child_key(page_size), ()))
        return out

    def _unindex(self, req: "Req") -> None:
        node, edge = self._edge.pop(req, (None, None))
        by_edge = self._at.get(node) if node is not None else None
        if by_edge is not None and edge in by_edge:
            by_edge[edge].pop(req, None)
            if not by_edge[edge]:
                del by_edge[edge]
            if not by_edge:
                del self._at[node]
