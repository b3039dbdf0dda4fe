"""SWA islands: a radix cache for hybrid sliding-window models that does not pin dead SWA KV.

Vocabulary (tokens are positions in one request's sequence, 0-based):

- ``window_left``: ``SWARadixCache.sliding_window_size``, treated as the number of keys before the
  query that SWA attends to: the query at position ``i`` reads ``[i - window_left, i]``. Models
  with ``get_attention_sliding_window_size`` (Gemma, GPT-OSS) pass ``config.sliding_window - 1``,
  which is exact; others (Laguna) pass the HF window itself, so islands keep one token more than
  needed there.
- ``w``: the model's sliding window, ``window_left + 1`` tokens (1024 for Gemma 4).
- ``p``: page size in tokens.
- ``L``: committed length: tokens whose KV is written (or enqueued) for the request.
- **frontier** ``t``: a page-aligned position below which no future token of the request reads
  SWA KV. ``t = floor_p(L - (w + p))``, clamped at 0 (:func:`swa_tombstone_frontier`).
- **tombstone**: a tree node whose SWA slots are freed (``swa_tombstone=True``) but whose
  full-attention KV stays, so prefix matching still walks through it.
- **island**: the live (non-tombstone) run of tree nodes ending at a committed length, at least
  ``w`` tokens long, so that a later request may end its prefix match there.
- **hold**: SWA slots a running request keeps allocated: its SWA-locked tree nodes plus its live
  request-owned slots past ``cache_protected_len``.

At every chunk commit (``cache_unfinished_req``) this cache, unlike ``SWARadixCache``:

1. frees, eagerly, the request-owned SWA slots in ``[max(cache_protected_len,
   swa_evicted_seqlen), t)``;
2. inserts the committed key with ``swa_evicted_seqlen = t``, so ``[.., t)`` enters the tree as a
   tombstone and ``[t, floor_p(L))`` as the live island, split at ``t`` into its own node;
3. after the request's lock has moved to the island, tombstones the tree-owned nodes below ``t``
   on the request's path that no running request SWA-locks (``swa_lock_ref == 0``).

The request's SWA lock then covers only the island: its hold after a commit is at most
``w + p`` tokens plus the chunk in flight, instead of a whole chunk (``cp``).

Invariants kept (checked by ``islands_harness.invariants`` in tests):

- every node inside a request's SWA-lock range is live; leaves are never tombstones;
- a prefix match never ends where the preceding ``window_left`` tokens are not live
  (``SWARadixCache._match_prefix_helper``'s rule; islands are ``>= w`` tokens long);
- full-pool KV is never freed by the island path; SWA pages are freed only through
  :func:`free_live_swa_pages`, once each: the request's own pages above its insert's dedup point
  and below the frontier (``swa_evicted_seqlen`` then moves to the frontier), and tree nodes that
  are tombstoned in the walk that lists them (``docs/SAFETY.md``).

Ordering with the overlap scheduler (why freeing at commit is safe):

- Middle-chunk commits run in ``Scheduler.get_next_batch_to_run`` (``stash_chunked_request``)
  after ``_apply_war_barrier`` and before ``run_batch``; chunk ``k`` may still be in flight and
  reads SWA KV of ``[L_{k-1} - window_left, L_k)``, which overlaps ``[.., t_k)``. On CUDA the WAR
  barrier makes the schedule stream (where the island free zeroes the full->SWA mapping) wait for
  chunk ``k``'s forward; on CPU the forward has completed when ``run_batch`` returns; without
  overlap nothing is in flight. Elsewhere (ROCm/NPU without ``SGLANG_ENABLE_WAR_BARRIER``) the
  frontier of a middle-chunk commit is taken from the chunk's start, ``L_{k-1}``, which the
  in-flight chunk no longer reads (:func:`commit_frees_are_stream_ordered`).
- The final-chunk commit runs in the result phase while the next batch is in flight. That batch
  reads only ``[L - window_left, ..)`` of this request, and ``t <= L - w - p``. A freed slot is
  re-used only by a later ``alloc*`` on the schedule stream, consumed by a forward that runs after
  the in-flight one on the forward stream.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING, List, Optional, Tuple

import torch

from sglang.srt.mem_cache.base_prefix_cache import (
    DecLockRefParams,
    IncLockRefResult,
    InsertParams,
    InsertResult,
    MatchPrefixParams,
)
from sglang.srt.mem_cache.cache_init_params import CacheInitParams
from sglang.srt.mem_cache.radix_cache import RadixKey
from sglang.srt.mem_cache.swa_radix_cache import SWARadixCache, TreeNode
from sglang.srt.utils import get_bool_env_var

if TYPE_CHECKING:
    from sglang.srt.managers.schedule_batch import Req

logger = logging.getLogger(__name__)


def swa_tombstone_frontier(committed_len: int, window: int, page_size: int) -> int:
    """Page-aligned position below which no future token reads SWA KV.

    ``t = floor_p(L - (w + p))``, clamped at 0, where ``L`` is the committed length, ``w`` the
    model's sliding window in tokens (``window_left + 1``) and ``p`` the page size. At least
    ``w + p`` committed tokens stay live: the next token (position ``L``) reads
    ``[L - w + 1, L]``, and the page-aligned tree key ``floor_p(L)`` keeps ``>= w`` live tokens
    after the frontier, so the island is a valid match end and a valid SWA-lock range.

    Example: w=1024, p=64, L=16384 -> t = floor_64(15296) = 15296 (1088 tokens live).
    Example: w=32, p=1, L=300 -> t = 267.
    """
    if committed_len < 0 or window <= 0 or page_size <= 0:
        raise ValueError(f"{committed_len=}, {window=}, {page_size=}")
    live = window + page_size
    if committed_len <= live:
        return 0
    return (committed_len - live) // page_size * page_size


DEFAULT_DECODE_ISLAND_INTERVAL = 2048
"""Decode-island interval in tokens when chunked prefill is off (``cp/4`` of the common
``--chunked-prefill-size 8192``)."""


def decode_island_interval(chunked_prefill_size: Optional[int], override: Optional[int] = None) -> int:
    """Committed decode tokens between two decode islands: ``cp/4``.

    ``override`` (``--swa-islands-decode-interval``) wins; with chunked prefill off (``None`` or
    ``<= 0``) the default is :data:`DEFAULT_DECODE_ISLAND_INTERVAL`. Never below 1.
    Example: cp=16384 -> 4096; cp=512 -> 128.
    """
    if override is not None and override > 0:
        return override
    if chunked_prefill_size is None or chunked_prefill_size <= 0:
        return DEFAULT_DECODE_ISLAND_INTERVAL
    return max(1, chunked_prefill_size // 4)


def decode_island_due(committed_len: int, last_island_len: int, interval: int) -> bool:
    """Cadence trigger: fire once ``interval`` tokens were committed since the last island.

    Counts accumulated progress (``committed_len - last_island_len``), never
    ``committed_len % interval == 0``: speculative decoding advances by variable accept lengths
    and a modulo trigger would almost never land. After firing, ``last_island_len`` becomes the
    new island's end, so the same progress never fires twice.
    """
    return committed_len - last_island_len >= interval


def commit_frees_are_stream_ordered(device: torch.device, overlap: bool) -> bool:
    """Whether a middle-chunk commit runs after the in-flight chunk's forward stopped reading.

    True without the overlap scheduler, on CPU (the forward completes inside ``run_batch``), and
    where the scheduler's WAR barrier is on (CUDA, or ``SGLANG_ENABLE_WAR_BARRIER=1``), mirroring
    ``Scheduler._war_barrier_enabled``.
    """
    if not overlap or device.type == "cpu":
        return True
    from sglang.srt.environ import envs
    from sglang.srt.utils import is_cuda

    return bool(is_cuda() or envs.SGLANG_ENABLE_WAR_BARRIER.get())


def free_live_swa_pages(allocator, page_starts: torch.Tensor, check: bool = False) -> int:
    """Free the SWA pages behind live full-pool pages; returns the SWA tokens freed.

    ``page_starts``: int64 full-pool indices, one per page (every index at ``p == 1``), each the
    first slot of a whole page whose ``p`` slots the request or node holds in order (a slice
    ``row[a:b:p]`` of a ``req_to_token`` row or ``node.value[::p]``, with ``a`` page-aligned).

    Preconditions (what the island path guarantees by construction, see ``docs/SAFETY.md``):
    every page's SWA slots are live (``full_to_swa_index_mapping > 0``), a full page's SWA page
    holds its slots at the same offsets (``alloc_extend``/``alloc_decode`` allocate both pools
    page by page), and no page is listed twice. ``check=True`` (``SGLANG_DEBUG_MEMORY_POOL=1``)
    asserts all three before freeing.

    Unlike ``free_swa`` this reads the mapping once per page and needs no ``> 0`` filter and no
    ``unique``: no op whose output size depends on data, so no host synchronisation on CUDA. The
    SWA pages go where ``PagedTokenToKVPoolAllocator.free`` / ``TokenToKVPoolAllocator.free`` put
    them (``release_pages`` with ``need_sort``, else ``free_pages``); the mapping is zeroed, so a
    later ``free``/``free_swa`` of these full indices (eviction of the tombstone) frees no SWA.
    """
    n = page_starts.numel()
    if n == 0:
        return 0
    p = allocator.page_size
    mapping = allocator.full_to_swa_index_mapping
    swa_starts = mapping[page_starts]
    if check:
        _check_live_pages(mapping, page_starts, swa_starts, p)
    sub = allocator.swa_attn_allocator
    if p == 1:
        sub.free(swa_starts)  # TokenToKVPoolAllocator.free: a concatenation, no filter
        mapping.index_fill_(0, page_starts, 0)
        return n
    swa_pages = swa_starts // p
    if not sub.is_not_in_free_group:
        sub.free_group.append(swa_starts)
    elif sub.need_sort:
        sub.release_pages = torch.cat((swa_pages, sub.release_pages))
    else:
        sub.free_pages = torch.cat((swa_pages, sub.free_pages))
    if (mapping.numel() - 1) % p == 0:  # [0, size + p) as whole pages; the last entry is -1
        mapping[:-1].view(-1, p).index_fill_(0, page_starts // p, 0)
    else:
        offsets = torch.arange(p, dtype=page_starts.dtype, device=page_starts.device)
        mapping.index_fill_(0, (page_starts[:, None] + offsets[None, :]).reshape(-1), 0)
    return n * p


def _check_live_pages(mapping, page_starts, swa_starts, p) -> None:
    """The preconditions of :func:`free_live_swa_pages` (debug only: synchronises on CUDA)."""
    assert torch.unique(page_starts).numel() == page_starts.numel(), "a page listed twice"
    assert bool((page_starts % p == 0).all()), "not a page start"
    assert bool((swa_starts > 0).all()), "SWA already freed (double free)"
    if p > 1:
        offsets = torch.arange(p, dtype=page_starts.dtype, device=page_starts.device)
        full = page_starts[:, None] + offsets[None, :]
        assert bool((mapping[full] == swa_starts[:, None] + offsets[None, :]).all()), (
            "full page and SWA page not aligned"
        )


@dataclasses.dataclass
class IslandStats:
    """Monotonic counters of the island path (tokens are SWA slots)."""

    chunk_islands: int = 0
    decode_islands: int = 0
    swa_tokens_freed_eagerly: int = 0


class SWAIslandRadixCache(SWARadixCache):
    """``SWARadixCache`` that tombstones SWA KV below the frontier at every commit.

    Selected only where the default factory would build exactly ``SWARadixCache`` and
    ``--enable-swa-islands`` is on (``mem_cache/registry.py``).
    """

    def __init__(self, params: CacheInitParams):
        super().__init__(params)
        # Model window in tokens (see module docstring: window_left + 1).
        self.window = self.sliding_window_size + 1
        self.stats = IslandStats()
        self.island_metrics = None
        if params.enable_metrics:
            from sglang.srt.mem_cache.swa_island_metrics import SWAIslandMetrics

            labels = getattr(self.metrics_collector, "labels", None)
            self.island_metrics = SWAIslandMetrics(labels or {"cache_type": type(self).__name__})
        self._pending_frontier: Optional[int] = None
        # prefix_len of the island insert: where the insert stopped deduplicating (see insert)
        self._insert_prefix_len = 0
        self._check_frees = get_bool_env_var("SGLANG_DEBUG_MEMORY_POOL")
        self.decode_interval = decode_island_interval(
            params.chunked_prefill_size, _decode_interval_override()
        )
        self._overlap = _overlap_enabled()
        self._stream_ordered = commit_frees_are_stream_ordered(
            torch.device(self.device), self._overlap
        )

    # ---- chunk commit -------------------------------------------------------------------------

    def chunk_frontier(self, req: Req, chunked: bool) -> int:
        """Frontier for a commit of ``req``; 0 means no island (upstream behaviour).

        ``chunked=True`` is a middle-chunk commit that may race the chunk in flight when frees are
        not stream-ordered: then the frontier is taken from that chunk's start.
        """
        if req.swa_evict_floor > 0:
            # Prefill-aware SWA models keep [0, swa_evict_floor) visible: leave them upstream's.
            return 0
        committed = req.extend_range.end
        if chunked and not self._stream_ordered:
            committed = len(req.prefix_indices)
        return swa_tombstone_frontier(committed, self.window, self.page_size)

    def cache_unfinished_req(self, req: Req, chunked: bool = False) -> None:
        if self.disable:
            return super().cache_unfinished_req(req, chunked=chunked)
        frontier = self.chunk_frontier(req, chunked)
        if frontier == 0:
            return super().cache_unfinished_req(req, chunked=chunked)
        owned_from = max(req.cache_protected_len, req.swa_evicted_seqlen)
        # Request-owned pages below the frontier, captured before the commit rewrites req_to_token
        # with tree indices.
        owned = self._owned_page_starts(req, owned_from, frontier)

        self._pending_frontier, self._insert_prefix_len = frontier, 0
        try:
            super().cache_unfinished_req(req, chunked=chunked)
        finally:
            self._pending_frontier = None

        dead = self._tombstone_path_below(req.last_node, frontier)
        self._free_live_swa([self._not_deduplicated(owned, owned_from)] + dead)
        req.swa_evicted_seqlen = max(req.swa_evicted_seqlen, frontier)
        self.stats.chunk_islands += 1

    def insert(self, params: InsertParams) -> InsertResult:
        frontier = self._pending_frontier
        if frontier is None:
            return super().insert(params)
        params = dataclasses.replace(
            params, swa_evicted_seqlen=max(params.swa_evicted_seqlen, frontier)
        )
        result = super().insert(params)
        self._insert_prefix_len = result.prefix_len
        return result

    def inc_lock_ref(self, node: TreeNode) -> IncLockRefResult:
        """During an island commit, first split the live node straddling the frontier, so the
        node-granular SWA lock covers only the island ``[frontier, ..)``."""
        if self._pending_frontier is not None:
            self._split_path_at(node, self._pending_frontier)
        return super().inc_lock_ref(node)

    # ---- decode ------------------------------------------------------------------------------

    def on_decode_progress(self, req: Req, accepted: int) -> None:
        """Called once per decode step for each unfinished request after its tokens are committed
        (``accepted`` tokens: 1 without speculative decoding, the accept length with it).

        - Every :attr:`decode_interval` committed tokens, insert a decode island: the
          prompt-plus-generation prefix enters the tree, SWA below the frontier is freed.
        - Once the request's locked island has slid out of its window, release the island's SWA
          lock but keep it live: it stays in the tree as the re-serve point and becomes evictable.
        """
        if req.req_pool_idx is None or req.swa_evict_floor > 0:
            return
        committed = req.kv_committed_len
        if decode_island_due(committed, req.cache_protected_len, self.decode_interval):
            self.insert_decode_island(req)
        elif (
            not req.swa_prefix_lock_released
            and req.last_node is not None
            and committed >= req.cache_protected_len + self.window + self.page_size
        ):
            self._release_island_swa_lock(req)

    def insert_decode_island(self, req: Req) -> None:
        """Insert ``(origin_input_ids + output_ids)[:kv_committed_len]`` as an island.

        Tombstones start where the request's SWA is already freed; the island is the last
        ``>= w + p`` committed tokens; the request's locks move to it and ``cache_protected_len``,
        ``prefix_indices``, ``last_node`` and ``swa_evicted_seqlen`` follow, as after a chunk
        commit. The prompt's last island is kept live (unlocked): it is the prompt's re-serve point.
        """
        committed = req.kv_committed_len
        frontier = swa_tombstone_frontier(committed, self.window, self.page_size)
        old_prefix_len = req.cache_protected_len
        token_ids = (req.origin_input_ids + req.output_ids)[:committed]
        radix_key = RadixKey(token_ids, req.extra_key, is_bigram=self.is_eagle).page_aligned(
            self.page_size
        )
        if len(radix_key) <= old_prefix_len:
            return
        if req.swa_evicted_seqlen > old_prefix_len:
            island_start = max(frontier, req.swa_evicted_seqlen)
        else:
            island_start = max(frontier, self._live_run_start(req))
        if len(radix_key) - island_start < self.window:
            # Too short to be a match end (the evictor's frontier or a pressure-evicted island
            # ends too close to floor_p(committed)): not an island yet, retry next step.
            return
        row = self.req_to_token_pool.req_to_token[req.req_pool_idx]
        owned_from = max(old_prefix_len, req.swa_evicted_seqlen)
        owned = self._owned_page_starts(req, owned_from, frontier)
        values = row[: len(radix_key)].to(dtype=torch.int64, copy=True)

        self._pending_frontier, self._insert_prefix_len = frontier, 0
        try:
            self.insert(
                InsertParams(
                    key=radix_key,
                    value=values,
                    prev_prefix_len=old_prefix_len,
                    swa_evicted_seqlen=req.swa_evicted_seqlen,
                )
            )
            match = self.match_prefix(MatchPrefixParams(key=radix_key))
            new_indices, new_last_node = match.device_indices, match.last_device_node
            assert old_prefix_len <= len(new_indices), f"{old_prefix_len=}, {len(new_indices)=}"
            self.req_to_token_pool.write(
                (req.req_pool_idx, slice(old_prefix_len, len(new_indices))),
                new_indices[old_prefix_len:],
            )
            req.cache_protected_len = len(new_indices)
            self.dec_lock_ref(
                req.last_node,
                DecLockRefParams(swa_uuid_for_lock=req.swa_uuid_for_lock),
                skip_swa=req.swa_prefix_lock_released,
            )
            req.swa_prefix_lock_released = False
            # inc_lock_ref splits the live node straddling the frontier first (see above)
            req.swa_uuid_for_lock = self.inc_lock_ref(new_last_node).swa_uuid_for_lock
        finally:
            self._pending_frontier = None
        req.last_node = new_last_node
        req.prefix_indices = new_indices

        dead = self._tombstone_path_below(new_last_node, frontier, keep=self._prompt_island(req))
        self._free_live_swa([self._not_deduplicated(owned, owned_from)] + dead)
        req.swa_evicted_seqlen = max(req.swa_evicted_seqlen, frontier)
        self.stats.decode_islands += 1

    def _live_run_start(self, req: Req) -> int:
        """Position where the live run of tree nodes ending at ``cache_protected_len`` starts."""
        pos, node = req.cache_protected_len, req.last_node
        while node is not None and node is not self.root_node and not node.swa_tombstone:
            pos -= len(node.value)
            node = node.parent
        return pos

    def _prompt_island(self, req: Req) -> Tuple[int, int]:
        """``[start, end)`` of the prompt's last island (positions), kept live during decode."""
        end = len(req.origin_input_ids) - (1 if self.is_eagle else 0)
        end = end // self.page_size * self.page_size
        return swa_tombstone_frontier(len(req.origin_input_ids), self.window, self.page_size), end

    def _release_island_swa_lock(self, req: Req) -> None:
        """Drop ``req``'s SWA lock on its island, keeping the nodes live (protected -> evictable).

        Unlike ``dec_swa_lock_only`` this never tombstones a leaf, so the island stays a match end.
        A live leaf that still holds a full lock is evicted by ``evict``'s SWA phase in place.
        """
        node = req.last_node
        while node is not self.root_node:
            assert not node.swa_tombstone and node.swa_lock_ref > 0, f"{node.id=}"
            if node.swa_lock_ref == 1:
                self.swa_protected_size_ -= len(node.value)
                self.swa_evictable_size_ += len(node.value)
            node.swa_lock_ref -= 1
            if req.swa_uuid_for_lock is not None and node.swa_uuid == req.swa_uuid_for_lock:
                break
            node = node.parent
        req.swa_prefix_lock_released = True

    # ---- helpers ------------------------------------------------------------------------------

    def _split_path_at(self, last_node: TreeNode, frontier: int) -> None:
        """Split the live node on the path root..``last_node`` that straddles ``frontier``."""
        path = []
        node = last_node
        while node is not self.root_node:
            path.append(node)
            node = node.parent
        pos = 0
        for node in reversed(path):
            end = pos + len(node.value)
            if end > frontier:
                if pos < frontier and not node.swa_tombstone:
                    self._split_node(node.key, node, frontier - pos)
                return
            pos = end

    def _tombstone_path_below(
        self, last_node: TreeNode, frontier: int, keep: Tuple[int, int] = (0, 0)
    ) -> List[torch.Tensor]:
        """Tombstone live, SWA-unlocked nodes of the path root..last_node that end at or before
        ``frontier`` and do not overlap ``keep`` (positions). Returns their full-pool page starts
        (``value[::p]``), whose SWA pages the caller frees."""
        path = []
        node = last_node
        while node is not None and node is not self.root_node:
            path.append(node)
            node = node.parent
        dead, pos = [], 0
        for node in reversed(path):
            start, pos = pos, pos + len(node.value)
            if pos > frontier:
                break
            if node.swa_tombstone or node.swa_lock_ref > 0 or (start < keep[1] and pos > keep[0]):
                continue
            assert node.children, f"island path would tombstone a leaf, {node.id=}"
            dead.append(node.value[:: self.page_size])
            self.swa_lru_list.remove_node(node)
            self._tombstone_internal_node(node)
        return dead

    def _owned_page_starts(self, req: Req, owned_from: int, frontier: int) -> torch.Tensor:
        """Page starts of ``req``'s own slots in ``[owned_from, frontier)`` (both page-aligned)."""
        row = self.req_to_token_pool.req_to_token[req.req_pool_idx]
        return row[owned_from : max(owned_from, frontier) : self.page_size].to(torch.int64)

    def _not_deduplicated(self, owned: torch.Tensor, owned_from: int) -> torch.Tensor:
        """Drop the pages the island insert already freed as duplicates.

        ``_insert_helper`` frees (full and SWA) the request's slots in ``[prev_prefix_len,
        prefix_len)`` that matched existing nodes, or adopts them into a revived tombstone; a
        revival only happens at or after ``swa_evicted_seqlen = frontier``, outside ``owned``.
        What is left of ``owned`` is live and request-owned.
        """
        skip = max(0, self._insert_prefix_len - owned_from) // self.page_size
        return owned[skip:]

    def _free_live_swa(self, parts: List[torch.Tensor]) -> None:
        """Free the SWA pages of ``parts`` (page starts) in one :func:`free_live_swa_pages` call.

        The parts are disjoint and live by construction, so no slot is freed twice (see
        ``docs/SAFETY.md``): the request's own pages in ``[max(cache_protected_len,
        swa_evicted_seqlen, insert prefix_len), frontier)``, freed once because
        ``swa_evicted_seqlen`` moves to the frontier in the same commit; and distinct tree nodes
        that were live before this commit, freed once because they are tombstoned in the same
        walk that lists them. ``SGLANG_DEBUG_MEMORY_POOL=1`` asserts it on every call.
        """
        parts = [v for v in parts if v.numel() > 0]
        if not parts:
            return
        starts = torch.cat(parts) if len(parts) > 1 else parts[0]
        self.stats.swa_tokens_freed_eagerly += free_live_swa_pages(
            self.token_to_kv_pool_allocator, starts, check=self._check_frees
        )

def _overlap_enabled() -> bool:
    try:
        from sglang.srt.server_args import get_global_server_args

        return not get_global_server_args().disable_overlap_schedule
    except Exception:  # no global server args (unit construction): assume the worst case
        return True


def _decode_interval_override() -> Optional[int]:
    try:
        from sglang.srt.server_args import get_global_server_args

        return get_global_server_args().swa_islands_decode_interval
    except Exception:
        return None


def on_decode_progress(tree_cache, req: Req, accepted: int) -> None:
    """Scheduler hook (result phase, every decode path): exact type check, then the cadence."""
    if type(tree_cache) is SWAIslandRadixCache:
        tree_cache.on_decode_progress(req, accepted)
