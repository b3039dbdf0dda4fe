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
A digest of an ``SWAIslandRadixCache``'s decisions, equal on every tensor-parallel rank.

Under tensor parallelism every rank runs its own scheduler and tree cache, and only determinism
keeps their island decisions (frontier, decode cadence, reclaim, eviction order, queued hits)
identical; a divergence corrupts outputs or hangs a collective. :func:`tree_digest` hashes what
those decisions leave behind, in an order that depends on the tree only (never on object ids,
addresses or time): every node in depth-first order with children sorted by key, its key tokens,
value length, SWA tombstone, full and SWA lock counts, island and retention marks and eviction
class; both LRU lists as sequences of those depth-first positions; the pool and tree sizes. Two
ranks that took the same decisions give the same digest; the cache logs it at idle points when it
changed (``SWAIslandRadixCache.sanity_check``), each log line prefixed with its rank by sglang.
"""

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Dict, List

if TYPE_CHECKING:
    from sglang.srt.mem_cache.swa_radix_cache import SWARadixCache, TreeNode


@dataclass(frozen=True)
class TreeDigest:
    """``sha256_16``: the first 16 hex digits of the digest; the rest are readable totals (tokens
    and nodes) logged beside it."""

    sha256_16: str
    nodes: int
    tombstones: int
    full_locked: int
    swa_locked: int
    full_free: int
    swa_free: int

    def __str__(self) -> str:
        return (f"{self.sha256_16} nodes={self.nodes} tombstones={self.tombstones} "
                f"full_locked={self.full_locked} swa_locked={self.swa_locked} "
                f"full_free={self.full_free} swa_free={self.swa_free}")


def _key_tokens(node: "TreeNode") -> tuple:
    key = node.key
    return tuple(key.token_ids) if hasattr(key, "token_ids") else tuple(key)


def _depth_first(root: "TreeNode") -> List["TreeNode"]:
    """Every node below ``root``, parents before children, siblings by their key tokens."""
    order, stack = [], [root]
    while stack:
        node = stack.pop()
        order.append(node)
        children = sorted(node.children.values(), key=_key_tokens)
        stack.extend(reversed(children))
    return order


def _lru_positions(lru, position: Dict[int, int]) -> List[int]:
    """The list from least to most recently used, as depth-first positions."""
    out, node = [], getattr(lru.tail, lru.prv)
    while node is not lru.head:
        out.append(position.get(id(node), -1))
        node = getattr(node, lru.prv)
    return out


def tree_digest(cache: "SWARadixCache") -> TreeDigest:
    """The digest of ``cache``'s tree, LRU lists, island marks and pools (O(tree); idle use).
    ``cache``: an ``SWARadixCache`` that names each node's island marks (``island_state_of``,
    as ``SWAIslandRadixCache`` does); this module never imports the cache module."""
    nodes = _depth_first(cache.root_node)
    position = {id(node): i for i, node in enumerate(nodes)}
    h = hashlib.sha256()
    tombstones = 0
    for node in nodes:
        value = node.value
        value_len = 0 if value is None else (value.numel() if hasattr(value, "numel") else len(value))
        tombstones += bool(node.swa_tombstone)
        h.update(repr((
            position[id(node.parent)] if node.parent is not None else -1,
            _key_tokens(node) if node is not cache.root_node else (),
            value_len,
            bool(node.swa_tombstone),
            node.full_lock_ref,
            node.swa_lock_ref,
            cache.island_state_of(node),
        )).encode())
    h.update(repr(_lru_positions(cache.full_lru_list, position)).encode())
    h.update(repr(_lru_positions(cache.swa_lru_list, position)).encode())
    allocator = cache.token_to_kv_pool_allocator
    sizes = (cache.full_evictable_size(), cache.swa_evictable_size(),
             cache.full_protected_size(), cache.swa_protected_size(),
             allocator.full_available_size(), allocator.swa_available_size())
    h.update(repr(sizes).encode())
    return TreeDigest(h.hexdigest()[:16], len(nodes), tombstones, sizes[2], sizes[3], sizes[4],
                      sizes[5])
