# SPDX-License-Identifier: Apache-2.0
"""Window-aware SWA eviction for the island cache (Python tree core).

``SWAIslandComponent`` is ``SWAComponent`` whose device eviction goes by class
(``swa_island_formulas.CLASSES``): cold SWA, then retention windows, then upstream's
LRU walk over all but queued hits' windows, then those (latest request first). Device
SWA locks take one page-rounded window. With a host tier, each match or insert end's
window is split off and is what a write-through backup takes of SWA.

Invariant: while cold SWA remains, no window that ends a match point is evicted; a pass
costs what was filed since the last one, not what the cache keeps. Units are tokens.
Design: docs/MAIN_DESIGN.md, "The window order".
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
"""SWA ``metadata`` key of a match-end stamp: the end's category (``RETENTION`` or ``WINDOW``)."""
TOUCH_KEY = "island_touch"
"""SWA ``metadata`` key of a node's touch: its recency in the SWA LRU list (higher: more recent)."""


class SWAIslandComponent(SWAComponent):
    """``SWAComponent`` whose device eviction goes by class: cold SWA, then retention windows,
    then the other windows in upstream's LRU order, then queued hits' (see the module docstring).
    ``queued``: the waiting requests' queued hits, which the island cache keeps."""

    def __init__(self, cache: UnifiedRadixCache, params: CacheInitParams) -> None:
        super().__init__(cache, params)
        self._walk_cursor = None
        self._walk_tokens = 0  # tokens the current eviction call frees
        self._walk_done = (
            False  # this call's walk over everything but queued hits met its end
        )
        self._queued_walk: Optional[Iterator] = (
            None  # this call's queued hits left, latest first
        )
        self._clock = 0  # the last touch given
        self._candidates = self._no_candidates()
        self.queued: Optional[QueuedHitIndex] = (
            None  # made with the list, at every reset
        )

    @property
    def window_span(self) -> int:
        """Tokens behind a match or insert end that its window covers: the contiguous live SWA
        upstream's match validator needs, or with a host tier what a backup of the end takes
        (:attr:`_host_backup_span`, a page more), so that the device gives that span up as one
        and it enters the host tier's LRU list as one."""
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
        """The tree core's SWA device list (at every reset): a ``CandidateLRUList`` that touches
        and files as ``COLD`` candidates what it adds; the candidates and the queued hits start
        over with it."""
        self._candidates = self._no_candidates()
        # A hit's end is a match end (the match that made it stamped it, ``MATCH_END``), so when
        # no request hits it any more its window stays ``WINDOW``: no candidate to file again.
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
        """The SWA list added ``node``: a new touch at a most recently used end (``beside`` None),
        else the touch of ``beside``, the node it went after."""
        if beside is None:
            self._clock += 1
            touch = self._clock
        else:
            touch = self._touch_of(beside)
        node.component_data[self.component_type].metadata[TOUCH_KEY] = touch
        self._file(COLD, node)

    def _is_window_end(self, node: UnifiedTreeNode) -> bool:
        """Whether ``node`` is a ``WINDOW`` end itself (a leaf, a junction, a node a match ended
        at), so that its class is at least ``WINDOW`` without a walk. O(1)."""
        return (
            len(node.children) != 1
            or node.component_data[self.component_type].metadata.get(
                MATCH_END_KEY, COLD
            )
            >= WINDOW
        )

    def _file(self, cls: int, node: UnifiedTreeNode) -> None:
        """File ``node`` as a candidate of ``cls`` at its touch."""
        self._candidates[cls].file(node, self._touch_of(node))

    # ---- match ends -----------------------------------------------------------------------------

    def refresh_lru(
        self,
        phase: LRURefreshPhase,
        node: UnifiedTreeNode,
        root_node: UnifiedTreeNode,
    ) -> None:
        """Upstream's window-bounded recency, then stamp ``node`` as a match end: ``WINDOW`` at a
        match end, ``RETENTION`` at an insert end (a node keeps its highest stamp)."""
        super().refresh_lru(phase, node, root_node)
        if node is root_node or phase is LRURefreshPhase.WALKDOWN:
            return
        metadata = node.component_data[self.component_type].metadata
        category = WINDOW if phase is LRURefreshPhase.MATCH_END else RETENTION
        if metadata.get(MATCH_END_KEY, COLD) < category:
            metadata[MATCH_END_KEY] = category
        if self.tree_core.has_swa_host_pool:
            # before the insert's write-through walks the window: it backs up whole nodes
            self._split_window_start(node, self._host_backup_span)
            self._refresh_host_window(node)
        self._settle_window(node, WINDOW if self._is_window_end(node) else RETENTION)

    def _refresh_host_window(self, end: UnifiedTreeNode) -> None:
        """Move the host-only SWA of ``end``'s window (its span, :attr:`_host_backup_span`) to the
        most recently used end of the host LRU list, as upstream's refresh moves the device SWA:
        a hit on the host keeps its window there while its request waits (matched again at each
        admission try), where upstream's host list keeps tombstoning order. Host-locked nodes are
        not in the list and stay out. At most ``span / p`` node steps."""
        host_lru = self.tree_core.host_lru_lists[self.component_type]
        host_lru.reset_node_and_window_ancestors_mru(
            end, self.tree_core.root_node, self._host_backup_span, host_lru.in_list
        )

    def _settle_window(self, end: UnifiedTreeNode, category: int) -> None:
        """Refile the live nodes in the window of the match end ``end`` (``end`` and its
        single-child ancestors less than ``w`` tokens above its end, as :meth:`eviction_class`
        walks), whose class is at least ``category`` now: a ``WINDOW`` end takes them out of the
        candidates (no pass before the windows' needs them), a ``RETENTION`` end moves their
        ``COLD`` filings to ``RETENTION``. The node the window begins inside keeps its filing:
        its head is cold (:meth:`_cold_head`). Paid by the match or insert that stamped ``end``, at
        most ``w / p`` node steps, where upstream's refresh walked the same nodes; without it the
        next eviction pops each of them and classifies it."""
        ct, root = self.component_type, self.tree_core.root_node
        lru, cold, retention = (
            self.tree_core.lru_lists[ct],
            self._candidates[COLD],
            self._candidates[RETENTION],
        )
        cur, above = end, 0  # above: tokens from cur's end down to end's end
        while cur.component_data[ct].value is not None and lru.in_list(cur):
            if not self._settles_with(above, len(cur.key)):
                return  # above the window, or a cold head above its start: it stays filed
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
        """Whether a live node of ``length`` tokens whose end lies ``above`` tokens above a match
        end's end (single-child live SWA between) takes its filing from that end's window: it is
        inside the window (page-rounded) and has no cold head above the window's start (a node
        with one stays a ``COLD`` candidate, so that a pass splits the head off)."""
        page = self.tree_core.page_size
        need = -(-(self.window_span - above) // page) * page
        return need > 0 and not self._has_cold_head(length, need)

    def eviction_class(self, node: "UnifiedTreeNode") -> int:
        """The class of the live node ``node``: the highest category of the match ends whose
        windows cover it, ``COLD`` when none does. At most ``w / p`` node steps."""
        return self._cover(node, QUEUED)[0]

    def _cover(self, node: "UnifiedTreeNode", cls: int) -> tuple:
        """``(eviction class, covered tail)`` of the live node ``node``, in one walk down its
        window (at most ``w / p`` node steps): the class as :meth:`eviction_class` gives it, and
        the tokens at the end of ``node`` that the windows of the match ends of a category above
        ``cls`` need: ``w`` less the distance from ``node``'s end down to the nearest such end,
        at most all of ``node``, 0 when none covers it."""
        ct, queued, span = self.component_type, self.queued.hits.nodes, self.window_span
        any_queued = len(queued) > 0
        node_class, tail, cur, below = (
            COLD,
            0,
            node,
            0,
        )  # below: node's end to cur's end
        while True:
            children = cur.children
            if any_queued and cur in queued:
                category = QUEUED
            elif len(children) != 1:  # a leaf or a junction
                category = WINDOW
            else:
                category = cur.component_data[ct].metadata.get(MATCH_END_KEY, COLD)
            if (
                category > cls and not tail
            ):  # the nearest end above cls: below < w, so tail > 0
                tail = min(len(node.key), span - below)
            node_class = max(node_class, category)
            if category == QUEUED or len(children) != 1:
                return node_class, tail
            if (
                category >= WINDOW and not any_queued
            ):  # nothing below can be a queued hit
                return node_class, tail
            (child,) = children.values()
            below += len(child.key)
            if child.component_data[ct].value is None or below >= span:
                return node_class, tail
            cur = child

    # ---- host backups ---------------------------------------------------------------------------

    @functools.cached_property
    def _host_backup_span(self) -> int:
        """Tokens of SWA a host backup of an end takes behind it (``host_backup_tokens``); read
        once the tree core is attached, constant after (the window and the page are)."""
        return host_backup_tokens(
            self.sliding_window_size + 1, self.tree_core.page_size
        )

    def _collect_unbacked_swa_nodes(
        self, node: UnifiedTreeNode
    ) -> list[UnifiedTreeNode]:
        """The live SWA without a host copy that ``node``'s backup takes, deepest first: the
        nodes from ``node`` up that lie in the span (``host_backup_tokens``) behind the nearest
        match or insert end at or below ``node``, and in the window ``node``'s own SWA lock
        covers (upstream locks each node of a write-through chain until its ack, one window up,
        in whole nodes); none when no end's span reaches ``node``. Upstream takes that window
        behind every node of a chain: cold SWA stays live below the frontier here (``lazy``), so
        the host would hold cold chunks. A chain backs up ancestors first and a walk stops at a
        node whose backup is pending, so each node of the chain takes its own part of the span.
        An end's span begins at a node boundary (:meth:`refresh_lru` splits there)."""
        ct, root = self.component_type, self.tree_core.root_node
        if not self.tree_core.has_swa_host_pool or node is root:
            return []
        rest = min(
            self._host_backup_span - self._below_to_end(node), self.sliding_window_size
        )
        covered, unbacked, cur = 0, [], node
        while cur is not root and covered < rest:
            if cur.write_through_pending_id is not None:  # its backup carries the rest
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
        """Tokens from ``node``'s end down to the end of the nearest match or insert end at or
        below it (``node`` itself: 0), along its single-child chain; ``host_backup_tokens`` when
        none is nearer. At most ``host_backup_tokens / p`` node steps."""
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

    # ---- device eviction ------------------------------------------------------------------------

    def _evict_device_start(self, request_cnt: int) -> None:
        super()._evict_device_start(request_cnt)
        self._walk_tokens = request_cnt  # tokens this call frees
        self._walk_cursor = None  # upstream's walk of this call: not started
        self._walk_done = False
        self._queued_walk = None
        self.queued.hits.reap()  # waiting requests garbage-collected since: not queued any more

    def _evict_device_next_node(
        self,
        tracker: dict[ComponentType, int],
        device_frees: dict[ComponentType, list[torch.Tensor]],
        host_frees: dict[ComponentType, list[torch.Tensor]],
        cache_actions: list[CacheAction | ComponentAction],
    ) -> NodeId | InternalStateBackup | None:
        """One upstream step at the next victim: the oldest ``COLD`` candidate of class ``COLD``,
        else the oldest ``RETENTION`` candidate of class ``RETENTION``, else the next node of
        upstream's walk from the LRU tail that is not ``QUEUED`` (resumed where this call's last
        walk step left it), else the latest queued hit's end, else upstream's own walk. Candidates
        come first at every step, so what a window's eviction uncovers goes before the next
        window; a queued hit's eviction restarts the walk, since what it uncovered may be another
        match end's window, which goes before the next queued hit."""
        if (
            self.tree_core.enable_session_radix_cache
            or tracker[self.component_type] >= self._walk_tokens
        ):
            return super()._evict_device_next_node(
                tracker, device_frees, host_frees, cache_actions
            )
        # a candidate victim is an internal node (leaves are WINDOW): upstream's step tombstones it
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
        """The end of the latest queued hit not yet taken in this call that is live and
        unlocked (None when none is): evicting it breaks that hit's window, whose other nodes
        are then candidates (``_file_above``). One walk of the queue per call that gets this far,
        from the latest request back (``QueuedHits.latest_first``), resumed at each step: O(1)
        per waiting request it passes. The hits do not change under it: they change only
        between eviction calls, and each call starts a new walk (``_evict_device_start``).
        """
        if self._queued_walk is None:
            self._queued_walk = self.queued.hits.latest_first()
        ct, lru = self.component_type, self.tree_core.lru_lists[self.component_type]
        for node in self._queued_walk:
            if lru.in_list(node) and node.component_data[ct].lock_ref == 0:
                return node
        return None

    def spendable_queued_hits(self, limit: int, visits: int) -> int:
        """Distinct queued hits whose window admission could still spend (the end node live and
        SWA-unlocked), counted up to ``limit``, visiting at most ``visits`` hits (earliest
        queued first): O(visits)."""
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
        """The oldest candidate of ``cls`` whose class is at most ``cls``; the candidates met
        before it are refiled (``RETENTION``) or dropped (covered better, locked, gone).
        """
        ct, candidates = self.component_type, self._candidates[cls]
        lru = self.tree_core.lru_lists[ct]
        while candidates:
            node = candidates.pop()
            if (
                node is None
                or not lru.in_list(node)
                or node.component_data[ct].lock_ref > 0
            ):
                continue  # gone, or locked: an unlock files it again
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
        """The head of the live node ``node`` before its last ``tail`` tokens (a window of an end
        above the pass's class needs them, :meth:`_cover`; page-rounded up here), split off as a
        node of its own (``node`` keeps the tail, its stamps and filings), or None if that head is
        shorter than a window (:meth:`_has_cold_head`). The head's class is at most the pass's:
        the nearest end above it is at least ``w`` tokens below the head's end."""
        page = self.tree_core.page_size
        tail = -(-tail // page) * page
        if not self._has_cold_head(len(node.key), tail):
            return None
        # a pending host backup of node: its ack covers both halves
        return self.cache.split_node(node, len(node.key) - tail)

    def _has_cold_head(self, length: int, tail: int) -> bool:
        """Whether a live node of ``length`` tokens whose last ``tail`` a window needs has a head
        worth a split: at least one window. A shorter head stays with its window (a split would
        free less than a window); upstream caps a new leaf at one window, so most nodes a
        window begins inside are a few pages longer than it."""
        return length - tail >= self.window_span

    # ---- one-window locks -------------------------------------------------------------------------

    def acquire_component_lock(
        self,
        node: UnifiedTreeNode,
        result: IncLockRefResult,
        lock_host: bool = False,
    ) -> IncLockRefResult:
        """Upstream's device lock of the segment that covers the trailing window, split off first
        (:meth:`_split_window_start`): the lock takes one page-rounded window of live SWA
        (``window_lock_tokens``), not the whole node the window ends in."""
        if not lock_host:
            self._split_window_start(
                node,
                window_lock_tokens(self.sliding_window_size, self.tree_core.page_size),
            )
        return super().acquire_component_lock(node, result, lock_host)

    def _split_window_start(self, node: UnifiedTreeNode, need: int) -> None:
        """Split the live node in which the ``need`` tokens ending at ``node``'s end begin, so
        that the part of it they cover is a node of its own. Page-aligned: node keys are whole
        pages and ``need`` is. At most ``need / p`` node steps."""
        ct, root = self.component_type, self.tree_core.root_node
        covered, cur = 0, node
        while cur is not root and covered < need:
            length = len(cur.key)
            if covered + length > need and cur.component_data[ct].value is not None:
                self.cache.split_node(cur, covered + length - need)
                return
            covered += length
            cur = cur.parent

    # ---- what can lower a class: evictions and unlocks file their neighbourhood ------------------

    def evict_component(
        self,
        node: UnifiedTreeNode,
        device_frees: dict[ComponentType, list[torch.Tensor]],
        host_frees: dict[ComponentType, list[torch.Tensor]],
        cache_actions: list[CacheAction | ComponentAction],
        target: EvictLayer = EvictLayer.DEVICE,
    ) -> tuple[int, int]:
        # Tombstoning a COLD node changes no other node's class: every end whose window could run
        # through it is at least ``w`` tokens below it (a leaf, deleted with its SWA, is WINDOW:
        # a window end is never COLD, known without the walk).
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
        """File the live nodes up to ``w`` tokens above ``node`` as ``COLD`` candidates: ``node``
        lost its SWA (or is being deleted), so their windows may have run through it, and a parent
        may stop being a junction. A tombstone ends the walk: no device window runs through it
        (a window through a host-backed one is on the host, backed up with its end), and its own
        deletion, if upstream deletes it, files what lies above it."""
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
            # its parent may have been a leaf, a match end by being one; before upstream's commit,
            # which may split the new leaf under a parent whose SWA is stamped later
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
        """File the nodes an SWA lock release at ``node`` may have unlocked (the lock's segment:
        up to one window and a page above ``node``) by the window of ``node`` (the lock's end,
        a match or insert end): inside the window of a ``WINDOW`` end none (no pass before the
        windows' needs them), inside a ``RETENTION`` end's as ``RETENTION`` candidates, the rest
        as ``COLD`` ones; inside is :meth:`_settles_with`, as for :meth:`_settle_window`. A node
        filed below its class costs a pass one pop; none is left unfiled below it."""
        ct, root = self.component_type, self.tree_core.root_node
        lru = self.tree_core.lru_lists[ct]
        cold = self._candidates[COLD]
        category = COLD  # of node's window over cur; COLD from a tombstone up (the window ends)
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

    # ---- checks ---------------------------------------------------------------------------------

    def check_candidates(self) -> None:
        """The index invariants (tests, O(tree)): every live, unlocked node of the SWA list whose
        class is ``COLD`` is a ``COLD`` candidate, and one of class ``RETENTION`` a candidate of
        either; touches never decrease from the list's least to its most recently used end; each
        heap holds one entry per filed node, and no more than twice as many entries plus 64.
        """
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
