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
Queued hits, shared by both targets (the ``window`` eviction order on 0.5.23): the
match end each waiting request would hit, kept until its first commit so that
eviction takes those windows last. Standard library only; a node needs ``parent``
and ``key.child_key(page_size)``.
"""

import weakref
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Dict,
    Hashable,
    Iterator,
    List,
    Optional,
)

if TYPE_CHECKING:
    from sglang.srt.managers.schedule_batch import Req

Node = Any
"""A tree node of either target (hashed by identity)."""


class QueuedHits:
    """The match end of each waiting request, in arrival order (requests held weakly).
    ``on_released(node)``: no request hits ``node`` any more."""

    def __init__(self, root: Node, on_released: Callable[[Node], None]):
        self._root = root
        self._on_released = on_released
        self._hit: Dict[weakref.ref, Node] = {}
        self._count: Dict[Node, int] = {}
        self._gone: List[weakref.ref] = []
        self.nodes = _HitNodes(self._count, root)

    # mapping of request -> match end, in arrival order
    def __getitem__(self, req: "Req") -> Node:
        return self._hit[weakref.ref(req)]

    def __contains__(self, req: "Req") -> bool:
        return weakref.ref(req) in self._hit

    def __len__(self) -> int:
        return sum(1 for ref in self._hit if ref() is not None)

    def __iter__(self) -> Iterator["Req"]:
        return (req for req in (ref() for ref in list(self._hit)) if req is not None)

    def values(self) -> List[Node]:
        return [node for ref, node in self._hit.items() if ref() is not None]

    def set(self, req: "Req", node: Node) -> None:
        self.reap()
        key = weakref.ref(req)
        old = self._hit.get(key)
        if old is None:
            key = weakref.ref(req, self._gone.append)
        self._hit[key] = node
        if old is node:
            return
        self._count[node] = self._count.get(node, 0) + 1
        if old is not None:
            self._release(old)

    def drop(self, req: "Req") -> None:
        self.reap()
        node = self._hit.pop(weakref.ref(req), None)
        if node is not None:
            self._release(node)

    def reap(self) -> None:
        """Forget requests that were garbage-collected while queued."""
        while self._gone:
            node = self._hit.pop(self._gone.pop(), None)
            if node is not None:
                self._release(node)

    def in_order(self) -> List[Node]:
        """Distinct match ends by their first request's arrival, root left out."""
        return [n for n in dict.fromkeys(self._hit.values()) if n is not self._root]

    def latest_first(self) -> Iterator[Node]:
        """:meth:`in_order` reversed, lazily: O(1) per request passed. The hits must not
        change while it runs."""
        left: Dict[Node, int] = {}  # node -> its requests not yet passed
        for node in reversed(self._hit.values()):
            n = left.get(node, self._count[node]) - 1
            left[node] = n
            if n == 0 and node is not self._root:
                yield node

    def _release(self, node: Node) -> None:
        left = self._count[node] - 1
        if left:
            self._count[node] = left
            return
        del self._count[node]
        if node is not self._root:
            self._on_released(node)


class _HitNodes:
    """Read-only view of the queued hits' match ends (the root left out)."""

    __slots__ = ("_count", "_root")

    def __init__(self, count: Dict[Node, int], root: Node):
        self._count = count
        self._root = root

    def __contains__(self, node: Node) -> bool:
        return node in self._count and node is not self._root

    def __len__(self) -> int:
        return len(self._count) - (self._root in self._count)

    def __iter__(self) -> Iterator[Node]:
        return (n for n in self._count if n is not self._root)


class QueuedHitIndex:
    """Queued hits (``hits``) and, per hit node, the waiting requests by ``edge``,
    the child key of their next page, in arrival order. References are weak."""

    def __init__(self, root: Node, on_released: Callable[[Node], None]):
        self.hits = QueuedHits(root, on_released)
        self._root = root
        # node -> {edge -> {req: None}}: who waits at node to continue on edge
        self._at: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
        # req -> (node, edge)
        self._edge: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()

    def set(self, req: "Req", node: Node, edge: Optional[Hashable]) -> None:
        """``req`` would hit ``node`` and continue on ``edge`` (None: no full page)."""
        self._unindex(req)
        self.hits.set(req, node)
        if edge is not None:
            by_edge = self._at.setdefault(node, {})
            by_edge.setdefault(edge, weakref.WeakKeyDictionary())[req] = None
            self._edge[req] = (node, edge)

    def drop(self, req: "Req") -> None:
        """``req`` left the queue (first commit or release)."""
        self._unindex(req)
        self.hits.drop(req)

    def continuing(self, last_node: Node, page_size: int) -> List["Req"]:
        """Waiting requests whose hit is on the path to ``last_node`` and whose next
        page is the path's next node, root first. Two dict lookups per path node."""
        if not self._at:
            return []
        path, node = [], last_node
        while node is not None and node is not self._root:
            path.append(node)
            node = node.parent
        out: List["Req"] = []
        for child in reversed(path):
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
