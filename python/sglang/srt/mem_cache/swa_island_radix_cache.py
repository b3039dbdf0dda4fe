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
SWA islands on sglang 0.5.15.post1: ``SWAIslandRadixCache``, the ``SWARadixCache`` that the
registry builds under ``--enable-swa-islands``.

Owns chunk and decode islands (a running request SWA-locks one window, ``[t, floor_p(L))``), the
match ends kept for later hits (island marks, retention points, queued hits), reclaim of the SWA
below an island (``--swa-islands-reclaim``), SWA eviction by class in passes, the one-window match
lock, the admission reserve, and the hold statistics.

Invariants (asserted after every scheduler step by the tests): counters match the tree; nodes in
an SWA-lock range are live; every running request's last ``window_left`` positions map to live SWA
slots; SWA KV is freed only by ``_tombstone_swa`` or with a deleted leaf's full KV, never twice.

Units are tokens: ``window_left`` = ``sliding_window_size``, ``w = window_left + 1``, ``p`` the
page, ``L`` the committed length, frontier ``t = floor_p(L - (w + p))``. Formulas:
``swa_island_formulas``. Terms, passes and invariants in full: docs/DESIGN.md, "The cache, term by
term"; ordering under the overlap scheduler: docs/SAFETY.md.
"""

import dataclasses
import logging
import os
import weakref
from typing import TYPE_CHECKING, Collection, Dict, Iterable, Iterator, List, Optional, Tuple

import torch

from sglang.srt.mem_cache.base_prefix_cache import MatchPrefixParams, SWAHoldStats
from sglang.srt.mem_cache.cache_init_params import CacheInitParams
from sglang.srt.mem_cache.radix_cache import RadixKey
from sglang.srt.mem_cache.swa_island_eviction import (
    COLD,
    QUEUED,
    RETENTION,
    WINDOW,
    EvictionClasses,
    StampedLRUList,
)
from sglang.srt.mem_cache.swa_island_queue import QueuedHitIndex
from sglang.srt.mem_cache.swa_island_formulas import (  # noqa: F401  (re-exported)
    DEFAULT_DECODE_ISLAND_INTERVAL,
    RECLAIM_POLICIES,
    decode_island_due,
    decode_island_interval,
    island_out_of_window,
    reclaim_watermark,
    swa_tombstone_frontier,
    window_lock_tokens,
)
from sglang.srt.mem_cache.swa_island_digest import TreeDigest, tree_digest
from sglang.srt.mem_cache.swa_radix_cache import SWARadixCache, TreeNode

logger = logging.getLogger(__name__)

# Set to 1: log the tree digest (swa_island_digest) at idle points where it changed, per rank.
TREE_DIGEST_ENV = "SGLANG_SWA_ISLANDS_TREE_DIGEST"

if TYPE_CHECKING:
    from sglang.srt.managers.schedule_batch import Req, ScheduleBatch


def commit_frees_are_stream_ordered(device: torch.device, overlap: bool) -> bool:
    """Whether SWA slots freed while scheduling are no longer read by the batch in flight: no
    overlap, CPU (the forward is done when ``run_batch`` returns), or a WAR barrier (CUDA, or
    ``SGLANG_ENABLE_WAR_BARRIER=1``), as in ``Scheduler._war_barrier_enabled``."""
    if not overlap or device.type == "cpu":
        return True
    from sglang.srt.environ import envs
    from sglang.srt.utils import is_cuda

    return bool(is_cuda() or envs.SGLANG_ENABLE_WAR_BARRIER.get())


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


class SWAIslandRadixCache(SWARadixCache):
    """``SWARadixCache`` whose running requests SWA-lock one island, with cold-first reclaim.

    Built only where the default chain would build exactly ``SWARadixCache`` and
    ``--enable-swa-islands`` is on (``mem_cache/registry.py``).
    """

    # What ``swa_island_guard.is_island_cache`` reads, so the guard need not import this module.
    runs_swa_islands = True

    def __init__(self, params: CacheInitParams):
        super().__init__(params)
        if params.swa_islands_reclaim not in RECLAIM_POLICIES:
            raise ValueError(
                f"swa_islands_reclaim must be one of {RECLAIM_POLICIES}, "
                f"got {params.swa_islands_reclaim!r}"
            )
        self.window = self.sliding_window_size + 1
        self.reclaim = params.swa_islands_reclaim
        self.reclaim_watermark = reclaim_watermark(params.chunked_prefill_size, self.page_size)
        self.decode_interval = decode_island_interval(
            params.chunked_prefill_size, params.swa_islands_decode_interval
        )
        self.stream_ordered = commit_frees_are_stream_ordered(
            torch.device(self.device), params.enable_overlap_schedule
        )
        self.stats = IslandStats()
        self.log_tree_digest = os.environ.get(TREE_DIGEST_ENV, "0") == "1"
        self._logged_digest: Optional[TreeDigest] = None

    def sanity_check(self) -> None:
        """Upstream's LRU check (the scheduler calls it at idle points on every rank); with
        ``SGLANG_SWA_ISLANDS_TREE_DIGEST=1`` also log :func:`tree_digest` when it changed since
        the last idle point, so the ranks' decisions can be compared line by line."""
        super().sanity_check()
        if not self.log_tree_digest:
            return
        digest = tree_digest(self)
        if digest != self._logged_digest:
            self._logged_digest = digest
            logger.info("SWA islands tree digest: %s", digest)

    def reset(self) -> None:
        super().reset()
        # the SWA LRU list stamps its order; eviction classes index its nodes in that order
        self._classes = EvictionClasses()
        self.swa_lru_list = StampedLRUList(self._classes)
        # island ends kept as match ends: node -> number of marks (a node may end several
        # requests' islands); a request's latest island, by rid, until its next island
        self._island_marks: "weakref.WeakKeyDictionary[TreeNode, int]" = (
            weakref.WeakKeyDictionary()
        )
        # chunk islands kept as retention points (lazy/auto): match ends whose windows go after
        # the cold tier but before every other window
        self._retention_marks: "weakref.WeakSet[TreeNode]" = weakref.WeakSet()
        self._latest_island: Dict[str, TreeNode] = {}
        # queued hits: the match end each waiting request would hit (the root: none yet), in
        # arrival order, from its arrival until its first commit; and, for the refresh at a
        # commit, the same by node and by the child key of the request's next page after it
        # (the edge it would continue on)
        self._queued = QueuedHitIndex(self.root_node, self._unverify_above)
        self._queued_hits = self._queued.hits

    # ---- locks --------------------------------------------------------------------------------

    def inc_match_lock_ref(self, node: TreeNode):
        """Admission's lock on a prefix match SWA-locks one window, page-rounded up, splitting the
        live node it would cross, instead of whole nodes until a window is covered (commits keep
        ``inc_lock_ref``'s default), so the cold tokens of a long matched node stay evictable.
        Example: window_left 32, page 1, a match ending 300 tokens into a live node: 32 locked."""
        if self.disable:
            return super().inc_match_lock_ref(node)
        return self.inc_lock_ref(node, swa_lock_len=self.window_lock_len)

    @property
    def window_lock_len(self) -> int:
        """``window_left`` rounded up to whole pages: the SWA a match lock takes."""
        return window_lock_tokens(self.sliding_window_size, self.page_size)

    # ---- inserts ------------------------------------------------------------------------------

    def chunk_frontier(self, req: Req, chunked: bool) -> int:
        """Frontier of a chunk commit; 0 means no island (upstream's commit).

        A middle-chunk commit (``chunked``) whose frees are not stream-ordered takes it from the
        start of the chunk still in flight, so that chunk's window stays locked.
        """
        if req.swa_evict_floor > 0:
            # Prefill-aware SWA models keep [0, swa_evict_floor) visible: upstream's behaviour.
            return 0
        committed = req.extend_range.end
        if chunked and not self.stream_ordered:
            committed = len(req.prefix_indices)
        return swa_tombstone_frontier(committed, self.window, self.page_size)

    def on_request_queued(self, req: Req) -> None:
        """``req`` joined the waiting queue: the match end it would hit now becomes a *queued
        hit*, a match end whose window eviction takes only after every other window, until the
        request's first commit (admission locks its own match before that).

        A queued request that finds its window at admission computes only its new tokens; one
        that lost it recomputes the prefix, and the chunks it allocates for that evict the
        windows of the requests queued behind it. One match per arriving request, no host sync.
        """
        if self.disable or req.swa_evict_floor > 0:
            return
        self._drop_queued(req)  # a retracted request queues again, at the end
        self._queue_match(req)

    def _queue_match(self, req: Req) -> None:
        """Match ``req`` and make the match end its queued hit (the root if nothing matches),
        indexed under the edge its next page would continue on."""
        token_ids = req.origin_input_ids + req.output_ids
        key = RadixKey(
            token_ids,
            req.extra_key,
            limit=req._compute_max_prefix_len(len(token_ids)),
        )
        result = self.match_prefix(MatchPrefixParams(key=key))
        node, hit = result.last_device_node, len(result.device_indices)
        edge = None
        # the child key the tree files the request's next page under (bigram keys need one more)
        nxt = token_ids[hit : hit + self.page_size + (1 if self.is_eagle else 0)]
        if len(nxt) >= self.page_size + (1 if self.is_eagle else 0):
            edge = RadixKey(nxt, req.extra_key, is_bigram=self.is_eagle).child_key(self.page_size)
        self._queued.set(req, node, edge)  # an update keeps the request's place in arrival order

    def _drop_queued(self, req: Req) -> None:
        self._queued.drop(req)

    def _refresh_queued_hits(self, last_node: TreeNode) -> None:
        """A commit made root..``last_node`` live: a waiting request whose queued hit lies on that
        path and whose next page continues along it matches again, so the deeper hit it now has
        (a sibling's fresh prompt: an edit of the same transcript, the next question on the same
        document) is a queued hit before eviction can take it as cold.

        Costs two dict lookups per node of the path, plus one match per request that continues.
        """
        for req in self._queued.continuing(last_node, self.page_size):
            self._queue_match(req)

    def cache_unfinished_req(self, req: Req, chunked: bool = False) -> None:
        self._drop_queued(req)
        if self.disable or req.swa_evict_floor > 0:
            return super().cache_unfinished_req(req, chunked=chunked)
        frontier = self.chunk_frontier(req, chunked)
        self._commit_prefix(req, req.get_fill_ids(), swa_lock_from=frontier)
        self._refresh_queued_hits(req.last_node)
        # the prompt's last island stays a match end; unless reclaim is eager (the seed's
        # behaviour), every chunk island stays one too, as a retention point every cp tokens
        # where a later request diverging inside the prompt can still end its match
        self._mark_island(req, permanent=not chunked)
        if chunked and self.reclaim != "eager" and req.last_node is not self.root_node:
            self._retention_marks.add(req.last_node)
        if frontier > 0:
            self._reclaim_below(req.last_node, frontier)
            self.stats.chunk_islands += 1

    def cache_finished_req(self, req: Req, is_insert: bool = True) -> None:
        """Upstream's finish; the end of the inserted transcript stays a match end after a later
        turn extends it (the point an edited or regenerated next turn branches from)."""
        self._unmark_latest(req)
        self._drop_queued(req)
        key = None
        if is_insert and not self.disable and req.swa_evict_floor == 0:
            token_ids = (req.origin_input_ids + req.output_ids)[: req._cache_commit_len()]
            key = RadixKey(token_ids, req.extra_key, is_bigram=self.is_eagle).page_aligned(
                self.page_size
            )
        super().cache_finished_req(req, is_insert=is_insert)
        if key is not None:
            node = self._node_at(key)
            if node is not None and node is not self.root_node:
                self._island_marks[node] = self._island_marks.get(node, 0) + 1

    def on_decode_progress(self, req: Req, accepted: int) -> None:
        """After a decode step (``accepted`` tokens committed): a decode island every
        ``decode_interval`` committed tokens; otherwise, once the island is out of the window,
        release its SWA lock and keep it live (a match end, now evictable)."""
        if req.req_pool_idx is None or req.swa_evict_floor > 0:
            return
        committed = req.kv_committed_len
        if decode_island_due(committed, req.cache_protected_len, self.decode_interval):
            if self.insert_decode_island(req):
                return
        if (
            not req.swa_prefix_lock_released
            and req.last_node is not None
            and island_out_of_window(
                committed, req.cache_protected_len, self.window, self.page_size
            )
        ):
            self.dec_swa_lock_only(req.last_node, req.swa_uuid_for_lock, keep_leaf_live=True)
            req.swa_prefix_lock_released = True

    def insert_decode_island(self, req: Req) -> bool:
        """Insert ``(origin_input_ids + output_ids)[:kv_committed_len]`` with an island at its end.

        Returns False (try again at a later step) when the island would hold fewer than
        ``window_left`` live tokens: upstream's decode evictor may have freed the request's own
        SWA up to ``swa_evicted_seqlen``, or pressure may have tombstoned the previous island.
        """
        committed = req.kv_committed_len
        # the page-aligned key of the committed tokens (a bigram key has one entry fewer),
        # computed without building it: a due island that cannot be laid yet is retried every step
        key_len = max(0, committed - (1 if self.is_eagle else 0)) // self.page_size * self.page_size
        if key_len <= req.cache_protected_len:
            return False
        frontier = swa_tombstone_frontier(committed, self.window, self.page_size)
        island_start = max(frontier, req.swa_evicted_seqlen)
        if island_start < req.cache_protected_len:
            island_start = max(island_start, self._live_run_start(req))
        if key_len - island_start < self.sliding_window_size:
            return False
        token_ids = (req.origin_input_ids + req.output_ids)[:committed]
        self._commit_prefix(
            req,
            token_ids,
            swa_evicted_seqlen=req.swa_evicted_seqlen,
            swa_lock_from=island_start,
        )
        self._refresh_queued_hits(req.last_node)
        self._mark_island(req, permanent=False)
        self._reclaim_below(req.last_node, frontier)
        self.stats.decode_islands += 1
        return True

    # ---- match ends ---------------------------------------------------------------------------

    def _mark_island(self, req: Req, permanent: bool) -> None:
        """Make ``req.last_node`` a match end; replace the request's previous latest island."""
        self._unmark_latest(req)
        node = req.last_node
        if node is None or node is self.root_node:
            return
        self._island_marks[node] = self._island_marks.get(node, 0) + 1
        if not permanent:
            self._latest_island[req.rid] = node

    def _unmark_latest(self, req: Req) -> None:
        node = self._latest_island.pop(req.rid, None)
        if node is None:
            return
        marks = self._island_marks.get(node, 0) - 1
        if marks > 0:
            self._island_marks[node] = marks
        else:
            self._island_marks.pop(node, None)
            self._unverify_above(node)

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

    # ---- reclaim ------------------------------------------------------------------------------

    def _reclaim_below(self, last_node: TreeNode, frontier: int) -> None:
        """Under ``eager`` (or ``auto`` short of free SWA), tombstone the cold tokens of
        root..``last_node`` below ``frontier``."""
        if self.reclaim == "lazy" or frontier <= 0:
            return
        if (
            self.reclaim == "auto"
            and self.token_to_kv_pool_allocator.swa_available_size() >= self.reclaim_watermark
        ):
            return
        end, keep = 0, self._keep_all()
        for node in self._path(last_node):
            start, end = end, end + node.value.numel()
            if start >= frontier:
                break
            if node.swa_tombstone or node.swa_lock_ref > 0:
                continue
            if end > frontier:
                # straddles the frontier: split, and reclaim only the part below it
                self._split_node(node.key, node, frontier - start)
                node = node.parent
            head = self._cold_head(node, keep)
            if head is not None:
                self._tombstone_swa(head)
                self.stats.freed_at_commit += head.value.numel()

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

    # ---- admission ----------------------------------------------------------------------------

    def swa_admission_reserve(self, running_batch: ScheduleBatch) -> int:
        """SWA tokens ``PrefillAdder`` keeps free for ``running_batch``: what its next decode step
        allocates (``ScheduleBatch.new_tokens_required_next_decode``; a page per request at a page
        boundary, the speculative over-allocation with speculative decoding). Why only that:
        docs/DESIGN.md, "The cache, term by term" (Admission)."""
        if running_batch.is_empty():
            return 0
        return running_batch.new_tokens_required_next_decode()

    # ---- observation --------------------------------------------------------------------------

    def request_swa_hold(self, req: Req) -> int:
        """SWA tokens ``req`` keeps allocated: its SWA-locked tree nodes plus its own live slots
        past ``cache_protected_len`` (allocated, less what upstream's decode evictor freed)."""
        locked = 0
        if req.last_node is not None and not req.swa_prefix_lock_released:
            locked = sum(
                n.value.numel() for n in self.swa_lock_range(req.last_node, req.swa_uuid_for_lock)
            )
        own_from = max(req.cache_protected_len, req.swa_evicted_seqlen)
        return locked + max(0, req.kv_allocated_len - own_from)

    def swa_hold_stats(self, running_reqs: Iterable[Req]) -> SWAHoldStats:
        holds = [self.request_swa_hold(r) for r in running_reqs if r.req_pool_idx is not None]
        full = self.full_evictable_size_ + self.full_protected_size_
        swa = self.swa_evictable_size_ + self.swa_protected_size_
        return SWAHoldStats(
            held_per_req_mean=sum(holds) / len(holds) if holds else 0.0,
            held_per_req_max=max(holds) if holds else 0,
            tombstone_tokens=full - swa,
            **dataclasses.asdict(self.stats),
        )

    # ---- helpers ------------------------------------------------------------------------------

    def _path(self, node: TreeNode) -> List[TreeNode]:
        """Nodes root (exclusive) .. ``node``, in order."""
        path = []
        while node is not None and node is not self.root_node:
            path.append(node)
            node = node.parent
        path.reverse()
        return path

    def _node_at(self, key: RadixKey) -> Optional[TreeNode]:
        """The node whose end is exactly ``key``'s end, or None (no read-side effects)."""
        node = self.root_node
        while len(key) > 0:
            child = node.children.get(key.child_key(self.page_size))
            if child is None:
                return None
            matched = child.key.match(key, page_size=self.page_size)
            if matched < len(child.key):
                return None
            key, node = key[matched:], child
        return node

    def _live_run_start(self, req: Req) -> int:
        """Where the live run of tree nodes ending at ``req.cache_protected_len`` starts."""
        pos, node = req.cache_protected_len, req.last_node
        while node is not None and node is not self.root_node and not node.swa_tombstone:
            pos -= node.value.numel()
            node = node.parent
        return pos
