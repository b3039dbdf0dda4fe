# SPDX-License-Identifier: Apache-2.0
"""Server-argument checks for SWA islands (``--enable-swa-islands``).

Refuses, before any model is loaded, every flag combination that builds another cache
or a ``UnifiedRadixCache`` whose insert path islands do not cover. The combinations and
why: docs/MAIN_DESIGN.md, "Feature by feature".
"""

from __future__ import annotations

import logging
import os
from typing import Any, Dict, Mapping, Optional

from sglang.srt.arg_groups.overrides import resolving_view
from sglang.srt.mem_cache.swa_island_formulas import EVICTION_ORDERS, RECLAIM_POLICIES

logger = logging.getLogger(__name__)

FLAG = "--enable-swa-islands"
# Main's switch for the commit-time free; --swa-islands-reclaim replaces it.
FREE_OUT_OF_WINDOW_ENV = "SGLANG_OPT_UNIFIED_CACHE_FREE_OUT_OF_WINDOW_SLOTS"


def swa_islands_conflict(cfg: Any, environ: Mapping[str, str]) -> Optional[str]:
    """Why islands cannot run with the server arguments ``cfg``, or None."""
    # PD first: a decode server has --disable-radix-cache set by PD, not the operator.
    if cfg.disaggregation_mode == "decode":
        return (
            "--disaggregation-mode decode builds a disabled UnifiedRadixCache on the "
            "decode server (host-pool retraction), or with "
            "--disaggregation-decode-enable-radix-cache one that reuses only "
            "full-attention KV and receives the SWA window fresh from the prefill "
            "server; islands cover neither"
        )
    if cfg.disaggregation_mode == "prefill":
        return (
            "--disaggregation-mode prefill sends each request's KV to a decode server "
            "(its last SWA window after the last chunk commit, read while the request "
            "is locked until the transfer ends); islands on that path are not verified "
            "with any transfer backend"
        )
    if cfg.disable_radix_cache:
        return (
            "--disable-radix-cache builds a cache without a radix tree to keep "
            "islands in"
        )
    if cfg.disable_hybrid_swa_memory:
        return (
            "--disable-hybrid-swa-memory keeps one pool for all layers; there is no "
            "SWA pool to free"
        )
    if cfg.radix_cache_backend is not None:
        return (
            f"--radix-cache-backend={cfg.radix_cache_backend!r} replaces the default "
            "cache chain; islands exist only in the default UnifiedRadixCache"
        )
    if cfg.enable_hierarchical_cache:
        reason = hicache_conflict(cfg)
        if reason is not None:
            return f"--enable-hierarchical-cache {reason}"
    for flag, on, what in (
        ("--enable-lmcache", cfg.enable_lmcache, "builds LMCacheUnifiedRadixCache"),
        ("--enable-flexkv", cfg.enable_flexkv, "builds the FlexKV cache"),
        (
            "--enable-unified-cache-external-linker",
            cfg.enable_unified_cache_external_linker,
            "attaches an external KV linker the island path does not cover",
        ),
        (
            "--enable-session-radix-cache",
            cfg.enable_session_radix_cache,
            "lets sessions own checkpoints (and needs the Python tree core)",
        ),
        (
            "--enable-streaming-session",
            cfg.enable_streaming_session,
            "lets a session keep a request's KV row past its checkpoints",
        ),
        (
            "--enable-unified-memory",
            cfg.enable_unified_memory,
            "splits one buffer between pools dynamically; the island pool floor "
            "assumes a fixed SWA pool",
        ),
        (
            "--enable-decoder-swa-bounded-replay",
            cfg.enable_decoder_swa_bounded_replay,
            "re-prefills matched SWA windows instead of reusing them",
        ),
    ):
        if on:
            return f"{flag} {what}"
    if FREE_OUT_OF_WINDOW_ENV in environ:
        return (
            f"{FREE_OUT_OF_WINDOW_ENV} is set; under {FLAG} --swa-islands-reclaim "
            f"decides what is freed at a commit (unset {FREE_OUT_OF_WINDOW_ENV})"
        )
    return None


def hicache_conflict(cfg: Any) -> Optional[str]:
    """Why islands cannot run with this HiCache configuration, or None."""
    if cfg.hicache_storage_backend is not None:
        return (
            f"with --hicache-storage-backend {cfg.hicache_storage_backend} adds an L3 "
            "store whose SWA prefetch and backup islands are not verified with"
        )
    if cfg.hicache_host_memory_mode != "cache":
        return (
            f"with --hicache-host-memory-mode {cfg.hicache_host_memory_mode} stages "
            "SWA through a buffer pipeline islands are not verified with"
        )
    return None


def _declared_defaults() -> Dict[str, Any]:
    """The declared default of each ``ServerArgs`` field (a ``msgspec`` struct)."""
    import msgspec

    from sglang.srt.server_args import ServerArgs

    return {f.name: f.default for f in msgspec.structs.fields(ServerArgs)}


def handle_swa_islands(
    server_args: Any, environ: Optional[Mapping[str, str]] = None
) -> None:
    """Refuse an island configuration islands do not cover; without the flag, warn
    that island settings are ignored."""
    cfg = resolving_view(server_args)
    if not cfg.enable_swa_islands:
        defaults = _declared_defaults()
        if (
            cfg.swa_islands_decode_interval is not None
            or cfg.swa_islands_reclaim != defaults["swa_islands_reclaim"]
            or cfg.swa_islands_eviction != defaults["swa_islands_eviction"]
        ):
            logger.warning(
                "--swa-islands-decode-interval, --swa-islands-reclaim and "
                "--swa-islands-eviction take effect only with %s; ignored.",
                FLAG,
            )
        return
    reason = swa_islands_conflict(cfg, os.environ if environ is None else environ)
    if reason is not None:
        raise ValueError(f"{FLAG} cannot be used here: {reason}. Drop one of the two.")
    if (
        cfg.swa_islands_reclaim is not None
        and cfg.swa_islands_reclaim not in RECLAIM_POLICIES
    ):
        raise ValueError(
            f"--swa-islands-reclaim must be one of {', '.join(RECLAIM_POLICIES)}, "
            f"got {cfg.swa_islands_reclaim!r}."
        )
    if cfg.swa_islands_eviction not in EVICTION_ORDERS:
        raise ValueError(
            f"--swa-islands-eviction must be one of {', '.join(EVICTION_ORDERS)}, "
            f"got {cfg.swa_islands_eviction!r}."
        )
    interval = cfg.swa_islands_decode_interval
    if interval is not None and interval < 1:
        raise ValueError(
            f"--swa-islands-decode-interval must be at least 1 token, got {interval}."
        )
