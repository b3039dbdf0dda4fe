"""Where SWA islands may run, and the clear errors everywhere else.

Islands are a memory-safety change to one cache class. The guard is an exact type check, never a
capability flag: ``UnifiedRadixCache``, ``PureSWARadixCache``, ``SWAChunkCache`` and the streaming
session wrapper all answer ``supports_swa() == True`` but have no island path.

Two checks, both raising ``ValueError`` with the reason and the way out:

- :func:`validate_swa_islands_args` runs in ``ServerArgs`` before any model is loaded and rejects
  flag combinations whose cache can never be ``SWARadixCache``;
- :func:`check_swa_islands_cache` runs in ``create_tree_cache`` on the cache actually built,
  which also covers what only the model decides (not hybrid SWA, all layers SWA, hybrid SWA
  memory disabled by a model override).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from sglang.srt.mem_cache.base_prefix_cache import BasePrefixCache
    from sglang.srt.server_args import ServerArgs

FLAG = "--enable-swa-islands"


def _flag_conflict(server_args: ServerArgs) -> Optional[str]:
    from sglang.srt.environ import envs

    if server_args.disable_radix_cache:
        return "--disable-radix-cache builds a chunk cache, which has no radix tree to hold islands"
    if server_args.enable_hierarchical_cache:
        return (
            "--enable-hierarchical-cache builds UnifiedRadixCache for hybrid models, "
            "which has no island path"
        )
    if server_args.radix_cache_backend:
        return (
            f"--radix-cache-backend={server_args.radix_cache_backend!r} replaces the default "
            "cache chain; islands exist only in the default SWARadixCache"
        )
    if server_args.enable_streaming_session:
        return (
            "--enable-streaming-session wraps the tree cache in StreamingSession, "
            "which has no island path"
        )
    if envs.SGLANG_ENABLE_UNIFIED_RADIX_TREE.get():
        return "SGLANG_ENABLE_UNIFIED_RADIX_TREE=1 builds UnifiedRadixCache, which has no island path"
    if envs.SGLANG_EXPERIMENTAL_CPP_RADIX_TREE.get():
        return "SGLANG_EXPERIMENTAL_CPP_RADIX_TREE=1 builds the C++ radix tree, which has no island path"
    if server_args.disable_hybrid_swa_memory:
        return "--disable-hybrid-swa-memory keeps one pool for all layers; there is no SWA pool to free"
    return None


def validate_swa_islands_args(server_args: ServerArgs) -> None:
    """Reject ``--enable-swa-islands`` with flags that never build ``SWARadixCache``."""
    if not server_args.enable_swa_islands:
        return
    reason = _flag_conflict(server_args)
    if reason is not None:
        raise ValueError(f"{FLAG} cannot be used here: {reason}. Drop one of the two.")


def check_swa_islands_cache(cache: BasePrefixCache, is_hybrid_swa: bool) -> None:
    """Exact type check on the cache the scheduler will use (``create_tree_cache``)."""
    from sglang.srt.mem_cache.swa_island_radix_cache import SWAIslandRadixCache

    if type(cache) is SWAIslandRadixCache:
        return
    if not is_hybrid_swa:
        reason = (
            "the model is not a hybrid sliding-window model (or its hybrid SWA memory pool is "
            "disabled), so there is no out-of-window SWA KV to free"
        )
    else:
        reason = (
            f"the tree cache built for this configuration is {type(cache).__name__}, and islands "
            "run only where the default chain builds exactly SWARadixCache"
        )
    raise ValueError(f"{FLAG} cannot be used here: {reason}. Remove {FLAG}.")
