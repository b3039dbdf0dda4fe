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
SWA eviction of the island cache on 0.5.15.post1: ``SWAWindowEvictionRadixCache``, the
``SWARadixCache`` that ``SWAIslandRadixCache`` extends.

Owns the match ends whose windows eviction keeps (island marks, retention points, queued hits:
``SWAIslandRadixCache`` sets them), the window cover of a live node (its window tail, its
eviction class), the passes of SWA eviction (cold tokens, then retention windows, then the other
windows, then queued hits', then upstream's LRU walk) and the eviction index they walk
(``swa_island_eviction``: the stamped SWA LRU list and one heap per class).

Invariant: a node filed under class ``c`` > ``COLD`` is covered by the live window of a match end
of category ``>= c``; whatever can break a cover files the nodes within one window of it again
(:meth:`SWAWindowEvictionRadixCache._unverify_above`, ``_unverify_below``), so a pass costs the
nodes it frees or splits, not the windows it keeps. SWA KV is freed only by ``_tombstone_swa``
or with a deleted leaf's full KV.

Units are tokens (``window_left`` = ``sliding_window_size``, ``p`` the page). Design:
docs/DESIGN.md, "The cache, term by term".
"""

import dataclasses
import weakref
from typing import Collection, Iterator, List, Optional, Tuple

from sglang.srt.mem_cache.cache_init_params import CacheInitParams
from sglang.srt.mem_cache.swa_island_eviction import (
    COLD,
    QUEUED,
    RETENTION,
    WINDOW,
    EvictionClasses,
    StampedLRUList,
)
from sglang.srt.mem_cache.swa_island_queue import QueuedHitIndex
from sglang.srt.mem_cache.swa_radix_cache import SWARadixCache, TreeNode


@dataclasses.dataclass(frozen=True)
class Keep:
    """The match ends whose windows one pass of SWA eviction keeps: the queued hits always;
    every other match end if ``others``, retention points (chunk islands) among them only if
    ``retention``. ``classes``: the eviction classes whose nodes the pass may take (the pass
    meets no node of another class)."""

    retention: bool
    others: bool
    queued: Collection
    classes: Tuple[int, ...] = (COLD, RETENTION, WINDOW, QUEUED)


@dataclasses.dataclass
class IslandStats:
    """Totals of the island path (see ``SWAHoldStats``), in tokens. ``reclaimed_cold``: what
    eviction took in its first pass (outside every window); ``reclaimed_window``: in the later
    passes, and in an eviction of everything evictable (which keeps nothing)."""

    chunk_islands: int = 0
    decode_islands: int = 0
    freed_at_commit: int = 0
    reclaimed_cold: int = 0
    reclaimed_window: int = 0


class SWAWindowEvictionRadixCache(SWARadixCache):
    """``SWARadixCache`` whose SWA eviction keeps the windows of match ends, by eviction class:
    the passes of :meth:`_passes`, each meeting only the nodes of its classes
    (:class:`EvictionClasses`). It keeps the match ends' marks, which ``SWAIslandRadixCache``
    sets, and the island path's totals (``stats``)."""

    def __init__(self, params: CacheInitParams):
        super().__init__(params)
        self.stats = IslandStats()

    def reset(self) -> None:
        super().reset()
        # the SWA LRU list stamps its order; eviction classes index its nodes in that order
        self._classes = EvictionClasses()
        self.swa_lru_list = StampedLRUList(self._classes)
        # island ends kept as match ends: node -> number of marks (a node may end several
        # requests' islands)
        self._island_marks: "weakref.WeakKeyDictionary[TreeNode, int]" = (
            weakref.WeakKeyDictionary()
        )
        # chunk islands kept as retention points (lazy/auto): match ends whose windows go after
        # the cold tier but before every other window
        self._retention_marks: "weakref.WeakSet[TreeNode]" = weakref.WeakSet()
        # queued hits: the match end each waiting request would hit (the root: none yet), in
        # arrival order, from its arrival until its first commit; and, for the refresh at a
        # commit, the same by node and by the child key of the request's next page after it
        # (the edge it would continue on)
        self._queued = QueuedHitIndex(self.root_node, self._unverify_above)
        self._queued_hits = self._queued.hits

    # ---- match ends ---------------------------------------------------------------------------

    def island_state_of(self, node: TreeNode) -> Tuple[int, bool, Optional[int]]:
        """What islands recorded about ``node``: its island marks, whether it is a retention
        point, and its eviction class (None outside the SWA LRU list)."""
        return (self._island_marks.get(node, 0), node in self._retention_marks,
                getattr(node, "evict_class", None))

    def _is_match_end(self, node: TreeNode, keep: Optional[Keep] = None) -> bool:
        """Whether ``node``'s end is a match end whose window ``keep`` keeps (default: every
        match end)."""
        keep = keep or self._keep_all()
        if node in keep.queued:
            return True
        if not keep.others:
            return False
        return (
            len(node.children) != 1
            or node.swa_lock_ref > 0
            or self._island_marks.get(node, 0) > 0
            or (keep.retention and node in self._retention_marks)
        )

    def _window_tail(self, x: TreeNode, keep: Optional[Keep] = None) -> int:
        """Tokens at the end of live ``x`` that lie in the live window of a match end at or below
        it that ``keep`` keeps (0: ``x`` holds no such window; default: every match end).

        A match end ``d`` tokens below ``x``'s end needs the ``window_left`` tokens before it
        live, the last ``window_left - d`` of them in ``x``. Looks at most ``window_left`` tokens
        up (is the window live?) and down (live descendants).
        Example: window_left 32, x = [0, 1000) with a junction at its end: 32; a junction 20
        tokens below its end: 12; none within 32 tokens: 0.
        """
        keep = keep or self._keep_all()
        window = self.sliding_window_size
        run, node = x.value.numel(), x.parent
        while run < window and node is not self.root_node and not node.swa_tombstone:
            run += node.value.numel()
            node = node.parent
        to_root = run < window and node is self.root_node
        tail = 0
        stack = [(x, 0)]
        while stack:
            n, below = stack.pop()
            if self._is_match_end(n, keep) and (to_root or run + below >= window):
                tail = max(tail, min(x.value.numel(), window - below))
            for child in n.children.values():
                d = below + child.value.numel()
                if d < window and not child.swa_tombstone:
                    stack.append((child, d))
        return tail

    def _cold_head(self, x: TreeNode, keep: Optional[Keep] = None) -> Optional[TreeNode]:
        """The part of live ``x`` outside every window ``keep`` keeps, as a node of its own (``x``
        is split if only its head is free of them), or None if no whole page of ``x`` is."""
        tail = self._window_tail(x, keep)
        if tail == 0:
            return x
        tail = -(-tail // self.page_size) * self.page_size
        if tail >= x.value.numel():
            return None
        self._split_node(x.key, x, x.value.numel() - tail)
        return x.parent

    def _keep_all(self) -> Keep:
        self._queued_hits.reap()
        return Keep(retention=True, others=True, queued=self._queued_hits.nodes)

    def _queued_hit_nodes(self) -> List[TreeNode]:
        """Queued hits' match ends, in arrival order (no root: a request with nothing to hit)."""
        self._queued_hits.reap()
        return self._queued_hits.in_order()

    def eviction_passes(self) -> List[Keep]:
        """What each pass of SWA eviction keeps, in order (:meth:`_passes`), as a list of
        snapshots (each pass's queued hits as a frozenset)."""
        self._queued_hits.reap()
        return [dataclasses.replace(p, queued=frozenset(p.queued)) for p in self._passes()]

    def _passes(self) -> Iterator[Keep]:
        """What each pass of SWA eviction keeps, in order: every window (the pass takes cold
        tokens); every window but those of retention points; the windows of queued hits only,
        then of the earliest queued half, quarter, ... of them (the first come is admitted next).
        Passes that would keep what the previous one kept are left out. After them, upstream's
        LRU eviction over everything unlocked.

        Which passes run is fixed when the first one starts; the queue's order is read only by
        a pass that keeps part of the queued hits (O(queued hits), when eviction gets that far).
        """
        every = self._queued_hits.nodes
        with_retention = bool(self._retention_marks)
        n = len(every)
        yield Keep(retention=True, others=True, queued=every, classes=(COLD,))
        if with_retention:
            yield Keep(retention=False, others=True, queued=every, classes=(COLD, RETENTION))
        if n == 0:
            return
        yield Keep(retention=False, others=False, queued=every, classes=(COLD, RETENTION, WINDOW))
        queued = self._queued_hits.in_order()
        n //= 2
        while n > 0:
            yield Keep(retention=False, others=False, queued=frozenset(queued[:n]))
            n //= 2

    # ---- eviction classes ---------------------------------------------------------------------

    def _category(self, node: TreeNode) -> int:
        """The eviction class whose passes stop keeping ``node``'s window as a match end:
        QUEUED (a queued hit), WINDOW (a leaf, a junction, SWA-locked, an island end), RETENTION
        (a retention point only) or COLD (not a match end). Agrees with :meth:`_is_match_end`:
        a pass of :meth:`_passes` keeps the window iff the category is above its classes."""
        if node in self._queued_hits.nodes:
            return QUEUED
        if (
            len(node.children) != 1
            or node.swa_lock_ref > 0
            or self._island_marks.get(node, 0) > 0
        ):
            return WINDOW
        if node in self._retention_marks:
            return RETENTION
        return COLD

    def _protection(self, x: TreeNode) -> int:
        """Eviction class of live ``x``: the highest category of a match end at or below it whose
        live window covers all of ``x`` (page-rounded, as :meth:`_cold_head` rounds), or COLD.

        Same walk as :meth:`_window_tail`, pruned below the depth where a window can no longer
        cover ``x``. Example: window_left 32, page 1, x of 20 tokens: a leaf 10 tokens below it
        covers it (32 - 10 >= 20), one 13 tokens below does not.
        """
        window, page, need = self.sliding_window_size, self.page_size, x.value.numel()
        if -(-window // page) * page < need:
            return COLD  # longer than a window: no window covers all of it
        run, node = need, x.parent
        while run < window and node is not self.root_node and not node.swa_tombstone:
            run += node.value.numel()
            node = node.parent
        to_root = run < window and node is self.root_node
        best = COLD
        stack = [(x, 0)]
        while stack:
            n, below = stack.pop()
            if to_root or run + below >= window:
                best = max(best, self._category(n))
                if best == QUEUED:
                    return best
            for child in n.children.values():
                d = below + child.value.numel()
                if -(-(window - d) // page) * page >= need and not child.swa_tombstone:
                    stack.append((child, d))
        return best

    def _unverify_above(self, node: TreeNode, below: int = 0, verify: bool = False) -> None:
        """A cover may be gone: file again ``node`` and its live ancestors whose end is less than
        a window above ``node``'s end plus ``below`` tokens (the nodes whose windows a match end
        there could cover). As COLD (met, and classified, by the next pass), or with ``verify``
        under the class they have now: an eviction files what it uncovers itself, so the next one
        does not pay for it. For a match end that lost its category: ``(m)``; for a tombstone or
        a deleted node ``a``: ``(a.parent, len(a))``.
        """
        window, root, in_list = self.sliding_window_size, self.root_node, self.swa_lru_list.in_list
        while node is not root and node is not None and not node.swa_tombstone:
            if below >= window:
                break
            if in_list(node):
                if verify:
                    self._classes.place(node, self._protection(node))
                else:
                    self._classes.uncover(node)
            below += node.value.numel()
            node = node.parent

    def _unverify_below(self, a: TreeNode) -> None:
        """``a`` turned into a tombstone: file again, under the class they have now, its live
        descendants whose own live run reached ``a`` within a window (their windows, or the one
        above them, crossed ``a``)."""
        window = self.sliding_window_size
        stack = [(c, c.value.numel()) for c in a.children.values()]
        while stack:
            n, d = stack.pop()
            if d >= window or n.swa_tombstone:
                continue
            self._classes.place(n, self._protection(n))
            stack.extend((c, d + c.value.numel()) for c in n.children.values())

    def _tombstone_swa(self, x: TreeNode) -> None:
        super()._tombstone_swa(x)
        self._unverify_above(x.parent, x.value.numel(), verify=True)
        self._unverify_below(x)

    def _add_new_node(self, parent: TreeNode, key, value, swa_tombstone: bool = False):
        was_leaf = len(parent.children) == 0
        node = super()._add_new_node(parent, key, value, swa_tombstone=swa_tombstone)
        if was_leaf:
            self._unverify_above(parent)  # a leaf with a child is no longer a match end
        return node

    def _delete_leaf(self, node: TreeNode) -> None:
        parent = node.parent
        super()._delete_leaf(node)
        # the leaf's window, and maybe the parent's junction, went
        self._unverify_above(parent, verify=True)

    def _delete_tombstone_leaf(self, node: TreeNode) -> None:
        parent = node.parent
        super()._delete_tombstone_leaf(node)
        self._unverify_above(parent, verify=True)

    def dec_lock_ref(self, node: TreeNode, params=None, skip_swa: bool = False):
        released = []
        if not skip_swa and not self.disable:
            uuid = params.swa_uuid_for_lock if params is not None else None
            released = [n for n in self.swa_lock_range(node, uuid) if n.swa_lock_ref == 1]
        result = super().dec_lock_ref(node, params, skip_swa=skip_swa)
        self._file_released(released)
        return result

    def dec_swa_lock_only(
        self, node: TreeNode, swa_uuid_for_lock: Optional[int] = None, keep_leaf_live: bool = False
    ):
        released = []
        if not self.disable:
            released = [
                n for n in self.swa_lock_range(node, swa_uuid_for_lock) if n.swa_lock_ref == 1
            ]
        super().dec_swa_lock_only(node, swa_uuid_for_lock, keep_leaf_live=keep_leaf_live)
        self._file_released(released)

    def _file_released(self, released: List[TreeNode]) -> None:
        """Nodes whose SWA lock was just released (deepest first, one contiguous path): a live one
        that a pass dropped while it was locked is filed as COLD; where the lock was what made a
        node a match end, the nodes its window covered (itself included) may have lost their
        cover and are filed as COLD. A node still a leaf, junction or island end keeps its
        category, and the nodes it covers their classes. A leaf that upstream freed on release
        (``dec_swa_lock_only`` without ``keep_leaf_live``) took its window with it."""
        lost = []
        for n in released:
            if n.swa_tombstone:
                self._unverify_above(n.parent, n.value.numel())
                continue
            self._classes.uncover(n, only_unfiled=True)
            if self._category(n) < WINDOW:
                lost.append(n)
        for n in lost:
            self._unverify_above(n)

    def _evict_swa(self, swa_num_tokens: int):
        """Evict at least ``swa_num_tokens`` SWA tokens (:meth:`_evict_passes`), the SWA pages it
        frees returned to the free list in one group."""
        alloc = self.token_to_kv_pool_allocator
        alloc.swa_free_group_begin()
        try:
            return self._evict_passes(swa_num_tokens)
        finally:
            alloc.swa_free_group_end()

    def _evict_passes(self, swa_num_tokens: int) -> Tuple[int, int]:
        """The passes of :meth:`_passes`, each over nodes in least recently used order; then
        everything else in upstream's LRU order. An eviction of at least all evictable SWA
        (``/flush_cache``-like, or a pool that needs everything) keeps nothing, so it goes straight
        to upstream's walk: the passes would only split nodes that are evicted next.

        A pass meets only the nodes of its eviction classes (:class:`EvictionClasses`): a node it
        finds covered by a window it keeps is filed under its class and not met again until a
        cover may be gone, so a pass costs the nodes it frees or splits, not the windows it keeps.
        """
        if swa_num_tokens >= self.swa_evictable_size_:
            full_evicted, swa_evicted = super()._evict_swa(swa_num_tokens)
            self.stats.reclaimed_window += swa_evicted
            return full_evicted, swa_evicted
        self._queued_hits.reap()
        full_evicted = swa_evicted = 0
        for i, keep in enumerate(self._passes()):
            if swa_evicted >= swa_num_tokens:
                break
            full, swa = self._evict_pass(keep, swa_num_tokens - swa_evicted)
            full_evicted += full
            swa_evicted += swa
            if i == 0:
                self.stats.reclaimed_cold += swa
            else:
                self.stats.reclaimed_window += swa
        if swa_evicted < swa_num_tokens:
            full, swa = super()._evict_swa(swa_num_tokens - swa_evicted)
            full_evicted += full
            swa_evicted += swa
            self.stats.reclaimed_window += swa
        return full_evicted, swa_evicted

    def _evict_pass(self, keep: Keep, swa_num_tokens: int) -> Tuple[int, int]:
        """One pass: the nodes of ``keep.classes`` in least recently used order; each one's cold
        head (outside every window ``keep`` keeps) is evicted until ``swa_num_tokens`` SWA tokens
        are. A node found covered is filed under its class (for a pass that keeps every window of
        some categories, a class it does not meet)."""
        full_evicted = swa_evicted = 0
        top = keep.classes[-1]
        walk = self._classes.walk(keep.classes)
        try:
            for x in walk:
                if x.swa_lock_ref > 0:
                    self._classes.drop(x)  # filed again as COLD when its SWA lock is released
                    continue
                if top < QUEUED:
                    cls = self._protection(x)
                    if cls > top:
                        self._classes.place(x, cls)
                        continue
                head = self._cold_head(x, keep)
                if head is None:
                    self._classes.place(x, self._protection(x))
                    continue
                full, swa = self._evict_swa_node(head)
                full_evicted += full
                swa_evicted += swa
                if head is not x:
                    # x kept the window at its end: file it now, while its cover is at hand
                    self._classes.place(x, self._protection(x))
                if swa_evicted >= swa_num_tokens:
                    break
        finally:
            walk.close()
        return full_evicted, swa_evicted

    def check_eviction_classes(self) -> None:
        """Sanity check of the eviction index, valid at any point between scheduler steps: every
        live SWA-unlocked node is filed once, in list order, and a node filed above COLD is
        covered by a window of that category (so a pass that skips it would not have taken it).
        O(tree): for tests."""
        self._classes.check(self.swa_lru_list.in_list)
        for node in self.swa_lru_list.cache.values():
            cls = getattr(node, "evict_class", None)
            if node.swa_lock_ref == 0:
                assert cls is not None, f"live unlocked node {node.id} is in no eviction class"
            if cls is not None and cls > COLD:
                assert self._protection(node) >= cls, (
                    f"node {node.id} filed as {cls} but covered only as {self._protection(node)}"
                )

    def _free_node_swa(self, x: TreeNode) -> None:
        # a live node's value is whole pages whose SWA slots are live: no host sync needed
        self.token_to_kv_pool_allocator.free_swa_pages(x.value[:: self.page_size])
