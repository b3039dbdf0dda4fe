"""What the SWA pool costs in hits on a live 0.5.23 server, from its ``/metrics`` (the islands
series' patch 0015, ``--enable-metrics``): the prefix tokens the SWA cut from hits
(``sglang:swa_cut_tokens_total``) against those hit (``sglang:cached_tokens_total`` by source),
and a ratio suggestion from that share. Units: tokens; shares in [0, 1]."""

from __future__ import annotations

import dataclasses
from typing import Optional

from islands_harness.client import Metrics, fetch_metrics

CUT_NEGLIGIBLE = 0.02
"""Below this cut share the SWA pool costs no measurable hits."""
CUT_RAISE = 0.10
"""Above this cut share the ratio should go up (or islands / a host tier on)."""


@dataclasses.dataclass(frozen=True)
class SwaCutReading:
    """Counters of one scrape, in tokens, summed over label sets."""

    cached_device: float
    cached_host: float
    swa_cut: float
    prompt: float

    @property
    def cached(self) -> float:
        return self.cached_device + self.cached_host

    @property
    def cut_share(self) -> Optional[float]:
        """Of the hits the full-attention cache held (hit + cut), the share the SWA cut; None
        before any."""
        held = self.cached + self.swa_cut
        return self.swa_cut / held if held else None

    @classmethod
    def from_metrics(cls, m: Metrics) -> "SwaCutReading":
        if "sglang:swa_cut_tokens_total" not in m and "sglang:prompt_tokens_total" in m:
            raise ValueError("the server exports no sglang:swa_cut_tokens_total: it runs without "
                             "the islands series for 0.5.23 (patch 0015)")

        def total(name, labels=None):
            return m.value(name, labels, default=0.0)

        return cls(cached_device=total("sglang:cached_tokens_total", {"cache_source": "device"}),
                   cached_host=total("sglang:cached_tokens_total", {"cache_source": "host"}),
                   swa_cut=total("sglang:swa_cut_tokens_total"),
                   prompt=total("sglang:prompt_tokens_total"))


def read(base_url: str) -> SwaCutReading:
    """Scrape ``base_url``'s ``/metrics`` (``http://host:port``, with or without ``/metrics``)."""
    base = base_url.rstrip("/")
    base = base[: -len("/metrics")] if base.endswith("/metrics") else base
    return SwaCutReading.from_metrics(fetch_metrics(base))


def suggested_ratio(share: float, current_ratio: float) -> float:
    """A first-order ratio that keeps the windows the cut share says were lost: the matched
    windows scale with the SWA pool, so keeping a share ``s`` more takes ``1 / (1 - s)`` times the
    pool. Capped at 1.0. Example: 0.17 at a cut share of 0.15 -> 0.2."""
    if not 0.0 <= share < 1.0:
        raise ValueError(f"cut share must be in [0, 1), got {share}")
    return min(1.0, round(current_ratio / (1.0 - share), 2))


def advice(reading: SwaCutReading, current_ratio: Optional[float] = None) -> str:
    """The reading and what it suggests, a few lines for the planner's output."""
    share = reading.cut_share
    lines = [f"live traffic: {reading.prompt:,.0f} prompt tokens, {reading.cached:,.0f} hit "
             f"({reading.cached_host:,.0f} from the host tier), {reading.swa_cut:,.0f} cut by "
             f"the SWA"]
    if share is None:
        lines.append("no prefix reuse measured yet: nothing to suggest")
        return "\n".join(lines)
    lines.append(f"SWA cut share of the full-attention hits: {share:.1%}")
    if share < CUT_NEGLIGIBLE:
        lines.append("the SWA pool costs no measurable hits: keep the ratio, or lower it toward "
                     "the floor this planner computes")
    elif share < CUT_RAISE:
        lines.append("the SWA pool costs some hits: islands (a branch inside a chunk, a follow-up "
                     "on a running reply) or a host tier recover part of them")
    else:
        tail = (f": try --swa-full-tokens-ratio {suggested_ratio(share, current_ratio)}"
                if current_ratio is not None else " (give --current-ratio for a number)")
        lines.append("the SWA pool evicts windows the traffic returns to; raise the ratio" + tail)
    return "\n".join(lines)
