"""What SWA islands report: per-request SWA hold, island inserts, eager frees, tombstones.

``report_swa_islands(tree_cache, reqs)`` runs on the scheduler's decode log path (every
``--decode-log-interval`` steps, not every step). For ``SWAIslandRadixCache`` it returns a fragment
for the ``Decode batch`` log line and, with ``--enable-metrics``, updates these Prometheus series
(label ``cache_type`` as for ``RadixCacheMetricsCollector``):

- ``sglang:swa_island_inserts_total{kind="chunk"|"decode"}``: islands inserted (counter);
- ``sglang:swa_island_freed_tokens_total``: SWA slots freed eagerly by islands (counter);
- ``sglang:swa_tombstone_tokens``: tokens in the tree whose SWA KV is freed but full KV kept;
- ``sglang:swa_held_tokens_per_running_req{stat="mean"|"max"}``: hold of running requests.

Units are tokens (SWA slots). The hold of a request is :func:`swa_hold`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Dict, Iterable, Tuple

import torch

if TYPE_CHECKING:
    from sglang.srt.managers.schedule_batch import Req


def swa_hold(tree_cache, req: Req) -> Tuple[int, int]:
    """``(locked, private)`` SWA slots of a running request on any ``SWARadixCache``.

    ``locked``: tokens of the tree nodes in the request's SWA-lock range (``inc_lock_ref`` locks
    whole nodes up to the one tagged ``swa_uuid_for_lock``); 0 once released early.
    ``private``: live SWA slots of the request past ``cache_protected_len`` (request-owned).
    """
    locked = 0
    if req.last_node is not None and not req.swa_prefix_lock_released:
        node = req.last_node
        while node is not tree_cache.root_node:
            if not node.swa_tombstone:
                locked += len(node.value)
            if req.swa_uuid_for_lock is not None and node.swa_uuid == req.swa_uuid_for_lock:
                break
            node = node.parent
    private = 0
    lo, hi = req.cache_protected_len, req.kv_allocated_len
    if req.req_pool_idx is not None and hi > lo:
        allocator = tree_cache.token_to_kv_pool_allocator
        locs = tree_cache.req_to_token_pool.req_to_token[req.req_pool_idx, lo:hi].to(torch.int64)
        private = int((allocator.full_to_swa_index_mapping[locs] > 0).sum())
    return locked, private


def tombstone_tokens(tree_cache) -> int:
    """Tokens in the tree with full KV but no SWA KV (from the size counters, no walk)."""
    full = tree_cache.full_evictable_size_ + tree_cache.full_protected_size_
    swa = tree_cache.swa_evictable_size_ + tree_cache.swa_protected_size_
    return full - swa


class SWAIslandMetrics:
    """Prometheus series of the island path; created in the scheduler process."""

    def __init__(self, labels: Dict[str, str]):
        # prometheus_client must be imported after PROMETHEUS_MULTIPROC_DIR is set.
        from prometheus_client import Counter, Gauge

        self.labels = dict(labels)
        names = list(self.labels)
        self.inserts = Counter(
            name="sglang:swa_island_inserts_total",
            documentation="SWA islands inserted into the radix tree, by kind (chunk, decode).",
            labelnames=names + ["kind"],
        )
        self.freed = Counter(
            name="sglang:swa_island_freed_tokens_total",
            documentation="SWA slots freed eagerly by islands (not by pressure eviction).",
            labelnames=names,
        )
        self.tombstones = Gauge(
            name="sglang:swa_tombstone_tokens",
            documentation="Tokens in the radix tree whose SWA KV is freed and full KV kept.",
            labelnames=names,
            multiprocess_mode="mostrecent",
        )
        self.held = Gauge(
            name="sglang:swa_held_tokens_per_running_req",
            documentation="SWA slots held per running request (locked + request-owned), mean/max.",
            labelnames=names + ["stat"],
            multiprocess_mode="mostrecent",
        )
        self._reported = (0, 0, 0)

    def update(self, stats, tombstoned: int, held_mean: float, held_max: int) -> None:
        chunk, decode, freed = stats.chunk_islands, stats.decode_islands, stats.swa_tokens_freed_eagerly
        last_chunk, last_decode, last_freed = self._reported
        self.inserts.labels(**self.labels, kind="chunk").inc(chunk - last_chunk)
        self.inserts.labels(**self.labels, kind="decode").inc(decode - last_decode)
        self.freed.labels(**self.labels).inc(freed - last_freed)
        self._reported = (chunk, decode, freed)
        self.tombstones.labels(**self.labels).set(tombstoned)
        self.held.labels(**self.labels, stat="mean").set(held_mean)
        self.held.labels(**self.labels, stat="max").set(held_max)


def report_swa_islands(tree_cache, reqs: Iterable[Req]) -> str:
    """Decode-log hook: a log fragment (empty for other caches) and the Prometheus update."""
    from sglang.srt.mem_cache.swa_island_radix_cache import SWAIslandRadixCache

    if type(tree_cache) is not SWAIslandRadixCache:
        return ""
    holds = [sum(swa_hold(tree_cache, r)) for r in reqs if r.req_pool_idx is not None]
    held_mean = sum(holds) / len(holds) if holds else 0.0
    held_max = max(holds) if holds else 0
    tombstoned = tombstone_tokens(tree_cache)
    stats = tree_cache.stats
    if tree_cache.island_metrics is not None:
        tree_cache.island_metrics.update(stats, tombstoned, held_mean, held_max)
    return (
        f"swa held/req: {held_mean:.0f} (max {held_max}), "
        f"islands: {stats.chunk_islands} chunk + {stats.decode_islands} decode, "
        f"swa freed eagerly: {stats.swa_tokens_freed_eagerly}, "
        f"#tombstone token: {tombstoned}, "
    )
