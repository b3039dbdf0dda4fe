# SPDX-License-Identifier: Apache-2.0
"""Window-aware SWA eviction for the island cache (Python tree core).

``SWAIslandComponent`` is ``SWAComponent`` whose device eviction goes by eviction
class (``swa_island_formulas.CLASSES``): cold SWA, then retention windows, then
upstream's LRU walk over all but queued hits' windows, then those. Device SWA locks
take one page-rounded window. Invariant: while cold SWA remains, no window that ends
a match is evicted. Units are tokens. Design and glossary: docs/MAIN_DESIGN.md.
"""

from __future__ import annotations

import functools
import itertools
from typing import TYPE_CHECKING, Callable, Iterator, Optional

from sglang.srt.mem_cache.swa_island_formulas import (
    COLD,
    QUEUED,
    RETENTION,
    WINDOW,
    host_backup_tokens,
    window_lock_tokens,
)
from sglang.srt.mem_cache.swa_island_queue import QueuedHitIndex
from sglang.srt.mem_cache.unified_cache.components.base import (
    EvictLayer,
    LRURefreshPhase,
)
from sglang.srt.mem_cache.unified_cache.components.swa import SWAComponent
from sglang.srt.mem_cache.unified_cache.components.swa_island_candidates import (
    CandidateLRUList,
    Candidates,
)

if TYPE_CHECKING:
    import torch

    from sglang.srt.mem_cache.base_prefix_cache import (
        DecLockRefParams,
        IncLockRefResult,
        InsertParams,
        InsertResult,
    )
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.unified_cache.cache_action import (
        CacheAction,
        ComponentAction,
    )
    from sglang.srt.mem_cache.unified_cache.components.base import (
        ComponentType,
        InternalStateBackup,
    )
    from sglang.srt.mem_cache.unified_cache.unified_tree_core import (
        UnifiedLRUList,
        UnifiedTreeNode,
    )
    from sglang.srt.mem_cache.unified_radix_cache import NodeId, UnifiedRadixCache

MATCH_END_KEY = "island_match_end"
"""SWA ``metadata`` key: the node's match-end category (RETENTION or WINDOW)."""
TOUCH_KEY = "island_touch"
"""SWA ``metadata`` key: the node's recency in the device LRU list (higher: newer)."""


class SWAIslandComponent(SWAComponent):
    """``SWAComponent`` evicting by class; ``queued``: the waiting requests' hits."""

    def __init__(self, cache: UnifiedRadixCache, params: CacheInitParams) -> None:
        super().__init__(cache, params)
        # Per eviction call: LRU walk position, tokens to free, walk done, queued left.
        self._walk_cursor = None
        self._walk_tokens = 0
        self._walk_done = False
        self._queued_walk: Optional[Iterator] = None
        self._clock = 0  # the last touch given
        self._candidates = self._no_candidates()
        self.queued: Optional[QueuedHitIndex] = None  # rebuilt with the LRU list

    @property
    def window_span(self) -> int:
        """An end's window in tokens; with a host tier, the backup span."""
        if self.tree_core is not None and self.tree_core.has_swa_host_pool:
            return self._host_backup_span
        return self.sliding_window_size

    @staticmethod
    def _no_candidates() -> dict:
        return {COLD: Candidates(), RETENTION: Candidates()}

    def make_device_lru_list(
        self,
        component_types: tuple[ComponentType, ...],
        is_referenced: Optional[Callable[[UnifiedTreeNode], bool]] = None,
    ) -> UnifiedLRUList:
        """The device LRU list (at every reset); candidates and queued hits restart."""
        self._candidates = self._no_candidates()
        # A queued hit's end keeps its MATCH_END stamp after release: nothing to re-add.
        self.queued = QueuedHitIndex(
            self.tree_core.root_node, on_released=lambda node: None
        )
        return CandidateLRUList(
            self.component_type,
            component_types,
            on_add=self._on_add,
            is_referenced=is_referenced,
        )

    def _touch_of(self, node: UnifiedTreeNode) -> int:
        return node.component_data[self.component_type].metadata.get(TOUCH_KEY, 0)

    def _on_add(self, beside: Optional[UnifiedTreeNode], node: UnifiedTreeNode) -> None:
        """Stamp the added ``node``'s touch (``beside``'s or new); add it as COLD."""
        if beside is None:
            self._clock += 1
            touch = self._clock
        else:
            touch = self._touch_of(beside)
        node.component_data[self.component_type].metadata[TOUCH_KEY] = touch
        self._file(COLD, node)

    def _is_window_end(self, node: UnifiedTreeNode) -> bool:
        """Whether ``node`` is a WINDOW end: a leaf, a junction or a match end. O(1)."""
        return (
            len(node.children) != 1
            or node.component_data[self.component_type].metadata.get(
                MATCH_END_KEY, COLD
            )
            >= WINDOW
        )

    def _file(self, cls: int, node: UnifiedTreeNode) -> None:
        """Add ``node`` to the ``cls`` candidates at its touch."""
        self._candidates[cls].file(node, self._touch_of(node))

    def refresh_lru(
        self,
        phase: LRURefreshPhase,
        node: UnifiedTreeNode,
        root_node: UnifiedTreeNode,
    ) -> None:
        """Upstream's refresh; stamp ``node`` WINDOW (match) or RETENTION (insert)."""
        super().refresh_lru(phase, node, root_node)
        if node is root_node or phase is LRURefreshPhase.WALKDOWN:
            return
        metadata = node.component_data[self.component_type].metadata
        category = WINDOW if phase is LRURefreshPhase.MATCH_END else RETENTION
        if metadata.get(MATCH_END_KEY, COLD) < category:
            metadata[MATCH_END_KEY] = category
        if self.tree_core.has_swa_host_pool:
            # Before the insert's write-through, which backs up whole nodes.
            self._split_window_start(node, self._host_backup_span)
            self._refresh_host_window(node)
        self._settle_window(node, WINDOW if self._is_window_end(node) else RETENTION)

    def _refresh_host_window(self, end: UnifiedTreeNode) -> None:
        """Move the host-only SWA in ``end``'s backup span to the host list's MRU."""
        host_lru = self.tree_core.host_lru_lists[self.component_type]
        host_lru.reset_node_and_window_ancestors_mru(
            end, self.tree_core.root_node, self._host_backup_span, host_lru.in_list
        )

    def _settle_window(self, end: UnifiedTreeNode, category: int) -> None:
        """Remove the candidates in ``end``'s window (WINDOW), or move its COLD ones to
        RETENTION; a node with a cold head stays. O(w / p), as upstream's refresh."""
        ct, root = self.component_type, self.tree_core.root_node
        lru, cold, retention = (
            self.tree_core.lru_lists[ct],
            self._candidates[COLD],
            self._candidates[RETENTION],
        )
        cur, above = end, 0  # above: tokens from cur's end down to end's end
        while cur.component_data[ct].value is not None and lru.in_list(cur):
            if not self._settles_with(above, len(cur.key)):
                return  # past the window, or a node with a cold head
            if category >= WINDOW:
                cold.unfile(cur.id)
                retention.unfile(cur.id)
            elif cur.id in cold:
                cold.unfile(cur.id)
                self._file(RETENTION, cur)
            above += len(cur.key)
            cur = cur.parent
            if cur is root:
                return

    def _settles_with(self, above: int, length: int) -> bool:
        """Whether a node ending ``above`` tokens over an end lies in its window and
        has no cold head."""
        page = self.tree_core.page_size
        need = -(-(self.window_span - above) // page) * page
        return need > 0 and not self._has_cold_head(length, need)

    def eviction_class(self, node: "UnifiedTreeNode") -> int:
        """The highest category of the ends whose window holds ``node``, else COLD."""
        return self._cover(node, QUEUED)[0]

    def _cover(self, node: "UnifiedTreeNode", cls: int) -> tuple:
        """``(class, tail)`` of ``node``; ``tail``: its last tokens that the nearest end
        of a category above ``cls`` needs in its window, 0 if none. O(w / p)."""
        ct, queued, span = self.component_type, self.queued.hits.nodes, self.window_span
        any_queued = len(queued) > 0
        # below: tokens from node's end down to cur's end
        node_class, tail, cur, below = COLD, 0, node, 0
        while True:
            children = cur.children
            if any_queued and cur in queued:
                category = QUEUED
            elif len(children) != 1:  # a leaf or a junction
                category = WINDOW
            else:
                category = cur.component_data[ct].metadata.get(MATCH_END_KEY, COLD)
            if category > cls and not tail:  # the nearest: below < w, so tail > 0
                tail = min(len(node.key), span - below)
            node_class = max(node_class, category)
            if category == QUEUED or len(children) != 1:
                return node_class, tail
            if category >= WINDOW and not any_queued:  # no queued hit below
                return node_class, tail
            (child,) = children.values()
            below += len(child.key)
            if child.component_data[ct].value is None or below >= span:
                return node_class, tail
            cur = child

    @functools.cached_property
    def _host_backup_span(self) -> int:
        """SWA tokens a host backup of an end takes: ``host_backup_tokens``."""
        return host_backup_tokens(
            self.sliding_window_size + 1, self.tree_core.page_size
        )

    def _collect_unbacked_swa_nodes(
        self, node: UnifiedTreeNode
    ) -> list[UnifiedTreeNode]:
        """Device-only SWA nodes ``node``'s backup takes, deepest first: only those in
        the backup span of an end at or below ``node`` and in its lock's window."""
        ct, root = self.component_type, self.tree_core.root_node
        if not self.tree_core.has_swa_host_pool or node is root:
            return []
        rest = min(
            self._host_backup_span - self._below_to_end(node), self.sliding_window_size
        )
        covered, unbacked, cur = 0, [], node
        while cur is not root and covered < rest:
            if cur.write_through_pending_id is not None:  # its backup takes the rest
                break
            cd = cur.component_data[ct]
            value = cd.value if cd.value is not None else cd.host_value
            if value is None:
                break
            covered += len(value)
            if cd.value is not None and cd.host_value is None:
                unbacked.append(cur)
            cur = cur.parent
        return unbacked

    def _below_to_end(self, node: UnifiedTreeNode) -> int:
        """Tokens from ``node`` down to the nearest end at or below it (<= span)."""
        ct, span = self.component_type, self._host_backup_span
        below, cur = 0, node
        while below < span:
            if (
                self._is_window_end(cur)
                or cur.component_data[ct].metadata.get(MATCH_END_KEY, COLD) >= RETENTION
            ):
                return below
            (cur,) = cur.children.values()
            below += len(cur.key)
        return span

    def _evict_device_start(self, request_cnt: int) -> None:
        super()._evict_device_start(request_cnt)
        self._walk_tokens = request_cnt  # tokens this call frees
        self._walk_cursor = None  # upstream's walk of this call: not started
        self._walk_done = False
        self._queued_walk = None
        self.queued.hits.reap()  # drop requests garbage-collected while queued

    def _evict_device_next_node(
        self,
        tracker: dict[ComponentType, int],
        device_frees: dict[ComponentType, list[torch.Tensor]],
        host_frees: dict[ComponentType, list[torch.Tensor]],
        cache_actions: list[CacheAction | ComponentAction],
    ) -> NodeId | InternalStateBackup | None:
        """One upstream step at the oldest COLD candidate, else RETENTION candidate,
        else the next non-QUEUED node of the LRU walk, else the latest queued hit."""
        if (
            self.tree_core.enable_session_radix_cache
            or tracker[self.component_type] >= self._walk_tokens
        ):
            return super()._evict_device_next_node(
                tracker, device_frees, host_frees, cache_actions
            )
        # A candidate is an internal node (leaves are WINDOW): the step tombstones it.
        victim = self._pop_candidate(COLD) or self._pop_candidate(RETENTION)
        if victim is not None:
            self._evict_device_cursor = victim
            return super()._evict_device_next_node(
                tracker, device_frees, host_frees, cache_actions
            )
        lru = self.tree_core.lru_lists[self.component_type]
        if not self._walk_done:
            cursor = self._walk_cursor
            if cursor is None or not lru.in_list(cursor):
                cursor = lru.get_lru_no_lock()
            if self.queued.hits.nodes:  # O(nodes skipped), each O(w / p)
                while cursor is not None and self.eviction_class(cursor) == QUEUED:
                    cursor = lru.get_prev_no_lock(cursor)
            if cursor is not None:
                self._evict_device_cursor = cursor
                out = super()._evict_device_next_node(
                    tracker, device_frees, host_frees, cache_actions
                )
                self._walk_cursor = self._evict_device_cursor
                return out
            self._walk_done = True
        victim = self._next_queued_victim()
        if victim is not None:
            self._walk_done, self._walk_cursor = False, None
        self._evict_device_cursor = (
            victim if victim is not None else lru.get_lru_no_lock()
        )
        return super()._evict_device_next_node(
            tracker, device_frees, host_frees, cache_actions
        )

    def _next_queued_victim(self) -> Optional["UnifiedTreeNode"]:
        """The latest queued hit's end not yet taken, live and unlocked, or None."""
        if self._queued_walk is None:
            self._queued_walk = self.queued.hits.latest_first()
        ct, lru = self.component_type, self.tree_core.lru_lists[self.component_type]
        for node in self._queued_walk:
            if lru.in_list(node) and node.component_data[ct].lock_ref == 0:
                return node
        return None

    def spendable_queued_hits(self, limit: int, visits: int) -> int:
        """Distinct queued hits with a live, SWA-unlocked end, up to ``limit``, among
        the first ``visits`` hits (earliest queued first). O(visits)."""
        ct, count = self.component_type, 0
        if limit <= 0:
            return 0
        self.queued.hits.reap()
        for node in itertools.islice(self.queued.hits.nodes, visits):
            data = node.component_data[ct]
            if data.value is not None and data.lock_ref == 0:
                count += 1
                if count >= limit:
                    break
        return count

    def _pop_candidate(self, cls: int) -> Optional["UnifiedTreeNode"]:
        """The oldest ``cls`` candidate of class <= ``cls``, or its cold head."""
        ct, candidates = self.component_type, self._candidates[cls]
        lru = self.tree_core.lru_lists[ct]
        while candidates:
            node = candidates.pop()
            if (
                node is None
                or not lru.in_list(node)
                or node.component_data[ct].lock_ref > 0
            ):
                continue  # gone, or locked (its unlock adds it again)
            node_class, tail = self._cover(node, cls)
            if node_class <= cls:
                return node
            head = self._cold_head(node, tail)
            if node_class == RETENTION:
                self._file(RETENTION, node)
            if head is not None:
                return head
        return None

    def _cold_head(self, node: UnifiedTreeNode, tail: int) -> Optional[UnifiedTreeNode]:
        """Split ``node`` before its last ``tail`` tokens (page-rounded); the head, or
        None if shorter than a window. ``node`` keeps its stamps and entries."""
        page = self.tree_core.page_size
        tail = -(-tail // page) * page
        if not self._has_cold_head(len(node.key), tail):
            return None
        # a pending host backup of node: its ack covers both halves
        return self.cache.split_node(node, len(node.key) - tail)

    def _has_cold_head(self, length: int, tail: int) -> bool:
        """Whether the head before the last ``tail`` tokens is at least a window."""
        return length - tail >= self.window_span

    def acquire_component_lock(
        self,
        node: UnifiedTreeNode,
        result: IncLockRefResult,
        lock_host: bool = False,
    ) -> IncLockRefResult:
        """Upstream's lock, split to one window first (``window_lock_tokens``)."""
        if not lock_host:
            self._split_window_start(
                node,
                window_lock_tokens(self.sliding_window_size, self.tree_core.page_size),
            )
        return super().acquire_component_lock(node, result, lock_host)

    def _split_window_start(self, node: UnifiedTreeNode, need: int) -> None:
        """Split the live node where the ``need`` tokens up to ``node`` begin."""
        ct, root = self.component_type, self.tree_core.root_node
        covered, cur = 0, node
        while cur is not root and covered < need:
            length = len(cur.key)
            if covered + length > need and cur.component_data[ct].value is not None:
                self.cache.split_node(cur, covered + length - need)
                return
            covered += length
            cur = cur.parent

    def evict_component(
        self,
        node: UnifiedTreeNode,
        device_frees: dict[ComponentType, list[torch.Tensor]],
        host_frees: dict[ComponentType, list[torch.Tensor]],
        cache_actions: list[CacheAction | ComponentAction],
        target: EvictLayer = EvictLayer.DEVICE,
    ) -> tuple[int, int]:
        # Tombstoning a COLD node changes no other class: every end whose window
        # could reach it is >= w below it. A leaf is WINDOW without the walk.
        keeps_classes = (
            EvictLayer.DEVICE in target
            and not self._is_window_end(node)
            and self.eviction_class(node) == COLD
        )
        out = super().evict_component(
            node, device_frees, host_frees, cache_actions, target=target
        )
        if EvictLayer.DEVICE in target and not keeps_classes:
            self._file_above(node)
        return out

    def _file_above(self, node: UnifiedTreeNode) -> None:
        """Add the live nodes up to ``w`` above ``node`` as COLD candidates."""
        ct, root = self.component_type, self.tree_core.root_node
        lru = self.tree_core.lru_lists[ct]
        live, cur = 0, node.parent
        while (
            cur is not None
            and cur is not root
            and live < self.window_span
            and cur.component_data[ct].value is not None
        ):
            if lru.in_list(cur):
                self._file(COLD, cur)
            live += len(cur.key)
            cur = cur.parent

    def commit_insert_component_data(
        self,
        node: UnifiedTreeNode,
        is_new_leaf: bool,
        params: InsertParams,
        result: InsertResult,
        cache_actions: list[CacheAction | ComponentAction],
    ) -> None:
        if is_new_leaf:
            # The parent may have been a leaf; before upstream may split the new leaf.
            self._file_above(node)
        super().commit_insert_component_data(
            node, is_new_leaf, params, result, cache_actions
        )

    def release_component_lock(
        self,
        node: UnifiedTreeNode,
        params: DecLockRefParams,
        lock_host: bool = False,
    ) -> None:
        super().release_component_lock(node, params, lock_host)
        if not lock_host:
            self._file_unlocked(node)

    def release_window_lock(
        self,
        node: UnifiedTreeNode,
        swa_uuid_for_lock: Optional[int],
        device_frees: dict[ComponentType, list[torch.Tensor]],
        host_frees: dict[ComponentType, list[torch.Tensor]],
        cache_actions: list[CacheAction | ComponentAction],
    ) -> None:
        super().release_window_lock(
            node, swa_uuid_for_lock, device_frees, host_frees, cache_actions
        )
        self._file_unlocked(node)

    def _file_unlocked(self, node: UnifiedTreeNode) -> None:
        """Add the nodes an SWA unlock at ``node`` frees up, by ``node``'s window."""
        ct, root = self.component_type, self.tree_core.root_node
        lru = self.tree_core.lru_lists[ct]
        cold = self._candidates[COLD]
        category = COLD  # of node's window over cur; COLD past a tombstone
        if node is not root and node.component_data[ct].value is not None:
            category = (
                WINDOW
                if self._is_window_end(node)
                else node.component_data[ct].metadata.get(MATCH_END_KEY, COLD)
            )
        covered, cur = 0, node  # covered: tokens from cur's end down to node's end
        span = self.window_span + self.tree_core.page_size
        while cur is not None and cur is not root and covered < span:
            cd = cur.component_data[ct]
            if cd.value is None:
                category = COLD
            elif cd.lock_ref == 0 and lru.in_list(cur):
                cls = category if self._settles_with(covered, len(cur.key)) else COLD
                if cls == COLD:
                    self._file(COLD, cur)
                elif cls == RETENTION:
                    cold.unfile(cur.id)
                    self._file(RETENTION, cur)
            covered += len(cur.key)
            cur = cur.parent

    def check_candidates(self) -> None:
        """Assert the candidate index invariants (tests only, O(tree))."""
        ct = self.component_type
        self.queued.hits.reap()
        for candidates in self._candidates.values():
            candidates.check()
        lru = self.tree_core.lru_lists[ct]
        node, last_touch = lru.get_lru_no_lock(), 0
        while node is not None:
            assert (
                self._touch_of(node) >= last_touch
            ), f"node {node.id} touched out of list order"
            last_touch = self._touch_of(node)
            node_class = self.eviction_class(node)
            filed = [c for c in (COLD, RETENTION) if node.id in self._candidates[c]]
            if node_class == COLD:
                assert COLD in filed, f"cold node {node.id} is not a COLD candidate"
            elif node_class == RETENTION:
                assert filed, f"retention node {node.id} is not a candidate"
            node = lru.get_prev_no_lock(node)
