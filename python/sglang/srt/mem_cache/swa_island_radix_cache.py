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
match ends it marks for later hits (island ends, retention points, queued hits), reclaim of the
SWA below an island at the commit (``--swa-islands-reclaim``), the one-window match lock, the
admission reserve and the hold statistics. SWA eviction by class, which keeps the marked ends'
windows, is its base class's (``swa_island_window_eviction``).

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
from typing import TYPE_CHECKING, Dict, Iterable, List, Optional

import torch

from sglang.srt.mem_cache.base_prefix_cache import MatchPrefixParams, SWAHoldStats
from sglang.srt.mem_cache.cache_init_params import CacheInitParams
from sglang.srt.mem_cache.radix_cache import RadixKey
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
from sglang.srt.mem_cache.swa_island_window_eviction import SWAWindowEvictionRadixCache
from sglang.srt.mem_cache.swa_radix_cache import TreeNode

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


class SWAIslandRadixCache(SWAWindowEvictionRadixCache):
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
        # a request's latest island, by rid, until its next island (its marks: the base class's)
        self._latest_island: Dict[str, TreeNode] = {}

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
