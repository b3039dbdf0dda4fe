# SPDX-License-Identifier: Apache-2.0
"""Window-aware SWA eviction for the 0.5.23 island cache (Python tree core).

``SWAIslandComponent`` is upstream's ``SWAComponent`` with one change: its device eviction gives
SWA up by eviction class (``swa_island_formulas.CLASSES``) instead of one LRU walk. Pass
``COLD`` takes, least recently used first, the live SWA no kept window needs; pass ``RETENTION``
then also the windows of retention points only; pass ``WINDOW`` is upstream's walk (everything,
LRU order). So while cold SWA remains no window that ends a match point is tombstoned (no
cliff), and retention windows go before the windows requests matched.

Match ends (units: tokens; ``w`` = the retained window ``sliding_window_size``, the contiguous live
SWA upstream's match validator needs behind a match end; ``p`` = the page):

- ``WINDOW`` ends: a leaf (a finished transcript's kept window, a running request's latest
  island or chunk), a junction (two or more children: where requests diverged) and a node a
  match ended at (``LRURefreshPhase.MATCH_END`` stamps it);
- ``RETENTION`` ends: a node an insert ended at (``LRURefreshPhase.INSERT_END``: chunk ends,
  prompt ends, decode islands) that is neither of the above.

A stamp lives in the node's SWA ``metadata`` under :data:`MATCH_END_KEY`. Upstream's split keeps
the node object on the suffix (``redistribute_on_node_split``), so a stamp stays at the end it
marks. A live node ``x`` is in the window of a match end ``e`` below it when the path from
``x`` down to ``e`` is live SWA, single-child, and ``e.end - x.end < w``; its class is the highest
category of such ``e`` (``COLD`` when none). Tombstoning a cold node never changes another node's
class: every end whose window it could cut is ``>= w`` tokens below it.

Cost: a class costs at most ``w / p`` node steps; each eviction call walks from the LRU tail and
skips the protected nodes it meets, so it is O(protected nodes older than its victims + nodes it
takes): not indexed, every call walks the protected windows again once the cold SWA is gone
(``benchmarks/results/cache_cost_main.md``). Sessions (``enable_session_radix_cache``) keep
upstream's partitioned walk.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sglang.srt.mem_cache.swa_island_formulas import COLD, RETENTION, WINDOW
from sglang.srt.mem_cache.unified_cache.components.base import LRURefreshPhase
from sglang.srt.mem_cache.unified_cache.components.swa import SWAComponent

if TYPE_CHECKING:
    from sglang.srt.mem_cache.unified_cache.unified_tree_core import UnifiedTreeNode

MATCH_END_KEY = "island_match_end"
"""SWA ``metadata`` key of a match-end stamp: the end's category (``RETENTION`` or ``WINDOW``)."""

LAST_PASS = WINDOW
"""The pass that meets every class: upstream's own LRU walk."""


class SWAIslandComponent(SWAComponent):
    """``SWAComponent`` whose device eviction goes by class: cold SWA, then retention windows,
    then the rest in upstream's LRU order (see the module docstring)."""

    def __init__(self, cache, params):
        super().__init__(cache, params)
        # Tokens of contiguous live SWA a match end needs behind it (upstream's match validator).
        self.window_span = self.sliding_window_size
        self._evict_pass = COLD

    # ---- match ends -----------------------------------------------------------------------------

    def refresh_lru(self, phase, node, root_node) -> None:
        """Upstream's window-bounded recency, then stamp ``node`` as a match end: ``WINDOW`` at a
        match end, ``RETENTION`` at an insert end (a node keeps its highest stamp)."""
        super().refresh_lru(phase, node, root_node)
        if node is root_node or phase is LRURefreshPhase.WALKDOWN:
            return
        metadata = node.component_data[self.component_type].metadata
        category = WINDOW if phase is LRURefreshPhase.MATCH_END else RETENTION
        if metadata.get(MATCH_END_KEY, COLD) < category:
            metadata[MATCH_END_KEY] = category

    def eviction_class(self, node: "UnifiedTreeNode") -> int:
        """The class of the live node ``node``: the highest category of the match ends whose
        windows cover it, ``COLD`` when none does. At most ``w / p`` node steps."""
        ct = self.component_type
        cls, cur, below = COLD, node, 0  # below: tokens from node's end down to cur's end
        while True:
            children = cur.children
            if len(children) != 1:  # a leaf or a junction
                return WINDOW
            category = cur.component_data[ct].metadata.get(MATCH_END_KEY, COLD)
            if category >= WINDOW:
                return WINDOW
            cls = max(cls, category)
            (child,) = children.values()
            below += len(child.key)
            if child.component_data[ct].value is None or below >= self.window_span:
                return cls
            cur = child

    # ---- device eviction ------------------------------------------------------------------------

    def _evict_device_start(self, request_cnt: int) -> None:
        super()._evict_device_start(request_cnt)
        self._evict_pass = COLD

    def _evict_device_next_node(self, tracker, device_frees, host_frees, cache_actions):
        """Point upstream's cursor at the least recently used node of a class the current pass
        takes (the next pass restarts at the LRU tail), then take one upstream step there."""
        if not self.tree_core.enable_session_radix_cache:
            self._evict_device_cursor = self._next_victim(self._evict_device_cursor)
        return super()._evict_device_next_node(tracker, device_frees, host_frees, cache_actions)

    def _next_victim(self, cursor):
        lru = self.tree_core.lru_lists[self.component_type]
        if cursor is not None and not lru.in_list(cursor):
            cursor = None
        while True:
            node = cursor if cursor is not None else lru.get_lru_no_lock()
            while node is not None and self.eviction_class(node) > self._evict_pass:
                node = lru.get_prev_no_lock(node)
            if node is not None or self._evict_pass >= LAST_PASS:
                return node
            self._evict_pass += 1
            cursor = None
