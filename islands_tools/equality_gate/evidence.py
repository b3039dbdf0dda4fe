"""Equality gate, evidence and conservation: what the islands boot must show (or the gate proved
nothing), and each boot's pools read from the server's own gauges.

Evidence, in the islands boot: cache hits where the workload expects them, a mid-run probe that
hit a decode island, extension links deep enough, junction hits at the branch point, and the
island insert counters where the server exports them. Conservation, per pool (tokens): used is 0
right after boot and after the workload, available + evictable is the pool size after the
workload, and the reading after /flush_cache + the health probe equals the boot reading; with
HiCache, so does the host tier's usage.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

from .boot import POOL_GAUGES, BootData, Metrics, fmt_pool
from .compare import expected_status
from .setup import say
from .workload import Req, Step, all_reqs


def conservation_check(boot_label: str, readings: dict[str, Any]) -> list[str]:
    """Per pool, from the server's gauges (see the module docstring)."""
    problems = []
    b, e, f = readings.get("boot"), readings.get("end"), readings.get("flushed")
    if not b or not e:
        return [f"{boot_label}: no pool reading"]
    for pool in POOL_GAUGES:
        bp, ep = b[pool], e[pool]
        size = bp["available"] + bp["evictable"]
        if bp["used"] != 0:
            problems.append(f"{boot_label}: {pool} pool right after boot: {fmt_pool(bp)}")
        if ep["used"] != 0 or ep["available"] + ep["evictable"] != size:
            problems.append(f"{boot_label}: {pool} pool after the workload: {fmt_pool(ep)} "
                            f"(pool {size:.0f}; nothing runs, so used must be 0)")
        fp = f[pool] if f else None
        if fp is None:
            problems.append(f"{boot_label}: no reading after /flush_cache")
        elif fp != bp:
            problems.append(f"{boot_label}: {pool} pool after /flush_cache + health probe: "
                            f"{fmt_pool(fp)}; right after boot: {fmt_pool(bp)}")
    if "host_used" in b and f and f.get("host_used") != b["host_used"]:
        problems.append(f"{boot_label}: host tier after /flush_cache + health probe: "
                        f"{f.get('host_used'):.0f} tokens used; right after boot: "
                        f"{b['host_used']:.0f}")
    return problems


def print_conservation(label: str, readings: dict[str, Any]) -> None:
    for pool in POOL_GAUGES:
        parts = []
        for when in ("boot", "end", "flushed"):
            r = readings.get(when)
            parts.append(f"{when}: " + (fmt_pool(r[pool]) if r else "not read"))
        say(f"  conservation [{label}] {pool:4s} | " + " | ".join(parts))
    if "host_used" in (readings.get("boot") or {}):
        say(f"  conservation [{label}] host | " + " | ".join(
            f"{when}: {(readings.get(when) or {}).get('host_used', float('nan')):.0f} used"
            for when in ("boot", "end", "flushed")))


def island_counters(metrics: Metrics) -> Optional[dict[str, float]]:
    """Island inserts by kind (``sglang:swa_island_{chunk,decode}_inserts``); None if absent."""
    out = {kind: metrics.value(f"sglang:swa_island_{kind}_inserts", default=None)
           for kind in ("chunk", "decode")}
    return {k: v for k, v in out.items() if v is not None} or None


def cache_hit_evidence(page: int, reqs: list[Req], on: BootData, label: str) -> list[str]:
    """Every request expected to hit was served with cached tokens in the islands boot."""
    hits = [r for r in reqs
            if expected_status(r, len(on.prompts[r.name]), page) in ("hit", "hit_on")]
    say(f"  evidence [{label} p{page}] cache hits (cached_tokens / prompt): " + ", ".join(
        f"{r.name} {on.results[r.name].cached_tokens}/{len(on.prompts[r.name])}" for r in hits))
    if not hits or any(on.results[r.name].cached_tokens == 0 for r in hits):
        return [f"page {page}: a cache-hit request was served cold in the islands boot"]
    return []


def decode_island_evidence(page: int, reqs: list[Req], on: BootData, label: str,
                           off: Optional[BootData]) -> list[str]:
    """At least one mid-run probe hit more than its running parent's prompt and more than an
    earlier probe of the same parent inserted: only a decode island can hold that."""
    probes = [r for r in reqs if r.trigger is not None]
    island_hits = []
    parts = []
    for r in probes:
        # Only a decode island of the running parent can hold more of its sequence than its
        # prompt, except for an earlier probe of the same parent: greedy, it generated the
        # parent's own continuation, and its finished insert is reusable. So the bar is past both.
        s = on.results[r.name]
        bar = max([len(on.prompts[r.parent])] + [
            len(on.prompts[q.name]) + q.n for q in probes
            if q.parent == r.parent and q.trigger < r.trigger])
        off_cached = off.results[r.name].cached_tokens if off else None
        vs_off = f", off boot {off_cached}" if off else ""
        if s.cached_tokens > bar:
            island_hits.append(r)
            parts.append(f"{r.name} cached {s.cached_tokens} > {bar}{vs_off} (sent at the "
                         f"parent's token {s.sent_at_completion})")
        else:
            parts.append(f"{r.name} cached {s.cached_tokens} <= {bar}{vs_off}: NO island hit "
                         f"(sent at the parent's token {s.sent_at_completion})")
    say(f"  evidence [{label} p{page}] decode-island hits (mid-run probes; cached_tokens past "
        f"the running parent's prompt and past earlier probes' own inserts): " + "; ".join(parts))
    if not island_hits:
        return [f"page {page}: no mid-run probe hit a decode island in the islands boot"]
    return []


def depth_evidence(page: int, reqs: list[Req], on: BootData, interval: int,
                   label: str) -> list[str]:
    """Each extension link's hit reaches ``min_islands`` decode intervals past the base prompt."""
    problems = []
    for r in reqs:
        if not r.depth_from:
            continue
        s, base = on.results[r.name], len(on.prompts[r.depth_from])
        deep = (s.cached_tokens - base) / interval
        say(f"  evidence [{label} p{page}] {r.name}: cached {s.cached_tokens} of "
            f"{len(on.prompts[r.name])}, {deep:.1f} decode intervals past the base prompt")
        if deep < r.min_islands - 0.5:
            problems.append(f"page {page}: {r.name} reaches only {deep:.1f} decode intervals "
                            f"deep (< {r.min_islands})")
    return problems


BIGRAM_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "FROZEN_KV_MTP")
"""Speculative algorithms whose radix keys are token bigrams (sglang's
``SpeculativeAlgorithm.is_eagle``; NEXTN is EAGLE's alias, and EAGLE with a Gemma 4 assistant
draft is promoted to FROZEN_KV_MTP)."""


def bigram_keys(server_args: Sequence[str]) -> bool:
    """Whether a server started with ``server_args`` keys its radix tree by token bigrams: a
    match then ends one token short of a shared prefix's end, islands on or off (the last shared
    token's key pairs it with the token after it)."""
    args = list(server_args)
    for i, arg in enumerate(args):
        if arg == "--speculative-algorithm" and i + 1 < len(args):
            return args[i + 1].upper() in BIGRAM_ALGORITHMS
        if arg.startswith("--speculative-algorithm="):
            return arg.split("=", 1)[1].upper() in BIGRAM_ALGORITHMS
    return False


def junction_evidence(page: int, reqs: list[Req], on: BootData, label: str,
                      off: Optional[BootData], bigram: bool = False) -> list[str]:
    """Junction hits end exactly at the branch point (rounded down to a page; with bigram keys,
    the token before it), also after pressure reclaimed the cold tier."""
    names = {r.name: r for r in reqs}
    if "j_probe" not in names or "j_base" not in names:
        return []
    problems = []
    shared = 0
    pa, pb = on.prompts["j_base"], on.prompts["j_probe"]
    while shared < min(len(pa), len(pb)) and pa[shared] == pb[shared]:
        shared += 1
    junction = (shared - (1 if bigram else 0)) // page * page
    for name in ("j_probe", "jp_probe"):
        if name not in names:
            continue
        got = on.results[name].cached_tokens
        off_got = off.results[name].cached_tokens if off is not None else None
        say(f"  evidence [{label} p{page}] {name}: cached {got} at a junction of {junction} "
            f"tokens" + (f" (off boot {off_got})" if off_got is not None else ""))
        if got < junction:
            problems.append(f"page {page}: {name} hit {got} < the junction at {junction}")
    return problems


def counter_evidence(page: int, counters: Optional[dict[str, float]], label: str) -> list[str]:
    """Where exported: chunk island inserts > 0 and at least 4 decode island inserts."""
    if counters is None:
        say(f"  evidence [{label} p{page}] island counters: not exported by this build")
        return []
    say(f"  evidence [{label} p{page}] island counters (sglang:swa_island_*_inserts): "
        + ", ".join(f"{k} {v:.0f}" for k, v in sorted(counters.items())))
    if counters.get("chunk", 0) <= 0 or counters.get("decode", 0) < 4:
        return [f"page {page}: island counters {counters}: expected chunk > 0 and decode >= 4"]
    return []


def evidence(page: int, steps: list[Step], on: BootData, counters, interval: int,
             label: str, off: Optional[BootData] = None, bigram: bool = False) -> list[str]:
    """What the islands boot must show, or the gate proved nothing (``bigram``: the servers key
    their radix trees by token bigrams, :func:`bigram_keys`)."""
    reqs = all_reqs(steps)
    return (cache_hit_evidence(page, reqs, on, label)
            + decode_island_evidence(page, reqs, on, label, off)
            + depth_evidence(page, reqs, on, interval, label)
            + junction_evidence(page, reqs, on, label, off, bigram)
            + counter_evidence(page, counters, label))
