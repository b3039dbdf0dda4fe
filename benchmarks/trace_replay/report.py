"""The trace replay's result: the JSON record (``result_record``), its markdown (``to_markdown``,
a function of the JSON alone, so a committed markdown regenerates byte for byte) and the plot of
running requests over model time (``plot_running``: a row per speed, a column per pool, a line
per arm, its cached share in the legend).
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any, Dict, List, Optional

from trace_replay.setup import ARM_DESCRIPTIONS, ARMS

PLOT = "trace_replay_running.png"


def result_record(*, command: str, date: str, git_head: str, runtime_s: float, shape, sizes,
                  trace: Dict[str, Any], speeds: List[float], arms: List[str],
                  out: Dict[str, Any]) -> Dict[str, Any]:
    """The JSON of a run; ``trace``: the slice asked for (``path``, ``limit``, ``minutes``,
    ``scale``), ``out``: ``trace_replay.run.run_cells``'s."""
    return {"command": command, "date": date, "git_head": git_head, "runtime_s": runtime_s,
            "shape": dataclasses.asdict(shape), "budget": dataclasses.asdict(sizes.budget),
            "lean": {"max_total_tokens": sizes.lean_max_total_tokens, "ratio": sizes.lean_ratio},
            "slice": trace, "trace": out["trace"], "steptime": out["steptime"],
            "speeds": speeds, "arms": arms,
            "arm_descriptions": {a: ARM_DESCRIPTIONS[a] for a in arms},
            "arm_targets": out["arm_targets"], "new_token_ratio": 0.7, "pools": out["pools"],
            "cells": out["cells"], "cell_wall_s": out["cell_wall_s"]}


def _cell(result, speed, pool, arm) -> Optional[Dict[str, Any]]:
    return result["cells"].get(f"{speed:g}/{pool}/{arm}")


def pools_at(result, speed) -> List[Dict[str, Any]]:
    """The pools that ran at ``speed``, in the result's order."""
    return [p for p in result["pools"]
            if any(_cell(result, speed, p["name"], a) for a in result["arms"])]


def slice_title(result) -> str:
    """What part of the trace ran: "the whole trace", "the first 10 minutes", ..."""
    s = result["slice"]
    parts = []
    if s.get("minutes") is not None:
        parts.append(f"the first {s['minutes']:g} minutes")
    if s.get("limit") is not None:
        parts.append(f"the first {s['limit']:,} requests")
    what = " and ".join(parts) if parts else "the whole trace"
    return what + (f", lengths / {s['scale']}" if s.get("scale", 1) != 1 else "")


def _share(x: Optional[int], total: int) -> str:
    return "–" if x is None else f"{x / total:.3f}"


def _pool_label(p) -> str:
    return f"{p['name']}: {p['full_pool']:,} / {p['swa_pool']:,}"


def _rows(result, speed) -> List[str]:
    tr = result["trace"]
    bound = tr["no_forget_bound"]
    L = ["| pool: full / SWA | arm | cached share (of the bound) | SWA cut | host hits "
         "| prefill tokens computed (x input) | running mean / while waiting / max "
         "| TTFT mean / p50 / p99 (s) | retractions | model time (s) | wall (s) |",
         "|---|---|---|---|---|---|---|---|---|---|---|"]
    for p in pools_at(result, speed):
        for a in result["arms"]:
            c = _cell(result, speed, p["name"], a)
            if c is None:
                continue
            inp = c["input_tokens"]
            host = (_share(c["host_cached_tokens"], inp) if "hicache" in a else "–")
            wall = result["cell_wall_s"].get(f"{speed:g}/{p['name']}/{a}", c["wall_s"])
            L.append(
                f"| {_pool_label(p)} | {ARMS[a]['label']} | {c['cached_tokens'] / inp:.3f} "
                f"({c['cached_tokens'] / inp / bound:.2f}) | {_share(c['swa_cut_tokens'], inp)} "
                f"| {host} | {c['prefill_tokens']:,} ({c['prefill_tokens'] / inp:.3f}) "
                f"| {c['running_mean']:.1f} / {c['running_mean_waiting']:.1f} / "
                f"{c['running_max']} | {c['ttft_mean_s']:,.2f} / {c['ttft_p50_s']:,.2f} / "
                f"{c['ttft_p99_s']:,.2f} | {c['retractions']} | {c['model_time_s']:,.0f} "
                f"| {wall:,.0f} |")
    L.append(f"| any | no-forget bound | {bound:.3f} (1.00) | | | "
             f"{round(tr['input_tokens'] * (1 - bound)):,} ({1 - bound:.3f}) | | | | | |")
    return L


PAIRS = (("islands", "upstream"), ("main_islands", "main"),
         ("main_islands_hicache", "main_hicache"))
"""(islands arm, its stock arm): the comparisons ``trailing`` makes."""


def trailing(result) -> List[str]:
    """A line per cell where an islands arm trails its stock arm on the cached share (by more
    than 0.001) or on mean running requests while requests wait (by more than 0.1: where
    admission decides; with nothing queued, fewer running requests is a faster service, by
    Little's law)."""
    L = []
    for speed in result["speeds"]:
        for p in pools_at(result, speed):
            for isl, stock in PAIRS:
                a, b = (_cell(result, speed, p["name"], x) for x in (isl, stock))
                if a is None or b is None:
                    continue
                what = []
                da = (a["cached_tokens"] - b["cached_tokens"]) / a["input_tokens"]
                if da < -0.001:
                    what.append(f"cached share {da:+.3f}")
                dr = a["running_mean_waiting"] - b["running_mean_waiting"]
                if dr < -0.1 and a["waiting_time_s"] and b["waiting_time_s"]:
                    what.append(f"running while requests wait {dr:+.1f}")
                if what:
                    L.append(f"- speed {speed:g}, {p['name']}: {ARMS[isl]['label']} against "
                             f"{ARMS[stock]['label']}: {', '.join(what)}")
    return L


def _steptime_lines(result) -> List[str]:
    k = result["steptime"]
    return [
        "Step-time model (`trace_replay.steptime`, its docstring says why these constants), "
        "each time divided by the speed:\n",
        f"- decode step of B requests of lengths s_i: {k['decode_base_s'] * 1e3:g} ms + "
        f"{k['decode_per_request_s'] * 1e3:g} ms x B + ({k['full_bytes']:,.0f} B x sum s_i + "
        f"{k['swa_bytes']:,.0f} B x sum min(s_i, {k['window']:,})) / "
        f"{k['kv_bandwidth'] / 1e12:g} TB/s;",
        f"- prefill batch of n_i new tokens after c_i tokens: {k['prefill_base_s'] * 1e3:g} ms + "
        f"{k['prefill_per_token_s'] * 1e6:g} us x sum n_i + {k['prefill_attention_s'] * 1e9:g} ns "
        "x sum n_i (c_i + n_i / 2).\n"]


def to_markdown(result: Dict[str, Any]) -> str:
    sh, tr, sl = result["shape"], result["trace"], result["slice"]
    n = tr["requests"]
    L = [f"# The Mooncake conversation trace replayed on the real tree cache and admission: "
         f"{slice_title(result)} (no model)\n",
         f"Generated by `benchmarks/trace_replay.py` on {result['date']} (HEAD "
         f"{result['git_head']}), {result['runtime_s'] / 60:.0f} min.\n", "Command:\n", "```",
         result["command"], "```\n",
         f"Trace `{pathlib.Path(sl['path']).name}`, {slice_title(result)}: {n:,} requests over "
         f"{tr['span_s']:,.0f} s, input tokens {tr['input_tokens']:,} (mean "
         f"{tr['input_tokens'] / n:,.0f}), output tokens {tr['output_tokens']:,} (mean "
         f"{tr['output_tokens'] / n:,.0f}); its no-forget bound (an infinite cache: the leading "
         f"full blocks whose prefix arrived before) {tr['no_forget_bound']:.4f} of the input "
         "tokens. Token ids: equal block hashes are equal tokens, each request's tail past its "
         "last full block its own (`trace_replay.traces.TokenMap`).\n",
         f"Shape: `--max-running-requests` {sh['cap']}, chunk {sh['chunk']:,}, window "
         f"{sh['window']:,}, page {sh['page']}. Pools (full / SWA tokens): the planner's for the "
         "seed deployment (full 9.5 KB, SWA 95 KB, draft 10.24 KB per token, "
         f"{result['budget']['budget_bytes'] / 1e9:g} GB) at each `--swa-full-tokens-ratio`, and "
         f"`lean`, the full pool capped at `--max-total-tokens "
         f"{result['lean']['max_total_tokens']:,}` (ratio {result['lean']['ratio']:g}) so that "
         "the full pool, not the SWA pool, evicts prefixes (`trace_replay.setup"
         ".LEAN_MAX_TOTAL_TOKENS`). Each cell runs the arm's sglang in its own process: its real "
         "`Req`, `ScheduleBatch`, `PrefillAdder`, tree cache, pools, allocator (and HiCache's "
         "host tier) under the scheduler's glue (`islands_harness.sim.MiniScheduler`, "
         "0.5.15.post1; `islands_harness.sim_main.MainMiniScheduler`, 0.5.23), no model. The "
         "scheduler runs in model time: before each iteration the requests whose arrival time "
         "has passed join the queue; each prefill batch or decode step advances the clock by the "
         "step-time model; idle, the clock jumps to the next arrival. The glue's new-token ratio "
         f"is fixed at {result['new_token_ratio']}. Deterministic.\n"]
    L += _steptime_lines(result)
    for a in result["arms"]:
        L.append(f"- `{a}` ({ARMS[a]['label']}): {result['arm_descriptions'][a]}")
    L.append("")
    for speed in result["speeds"]:
        if not pools_at(result, speed):
            continue
        L.append(f"## Speed {speed:g}\n")
        L += _rows(result, speed)
        L.append("")
    L.append(
        "`cached share`: cached tokens (`Req.cached_tokens`, device and host hits, as the server "
        "reports them) over the input tokens, and over the no-forget bound. `SWA cut`: "
        "`cached_tokens_swa_cut` over the input tokens, full-attention KV the tree held past the "
        "hit where no SWA window ends (the islands series' counter, "
        "`sglang:swa_cut_tokens_total`; stock 0.5.23 and 0.5.15.post1 have none: –). `host "
        "hits`: the share served from HiCache's host tier. `prefill tokens computed`: the "
        "extend batches' new tokens (retracted requests prefill again). `running`: requests "
        "holding a request-pool row after an iteration, weighted by the iteration's model time "
        "(0 while idle); `while waiting`: over the time requests were queued. `TTFT`: from "
        "arrival to the end of the iteration that produced the first token, model seconds "
        "(queueing and prefill). `wall`: the cell's worker process, seconds on this machine.\n")
    trail = trailing(result)
    L.append("Where an islands arm trails its stock arm (cached share by more than 0.001; mean "
             "running requests while requests wait by more than 0.1, where admission decides: "
             "with nothing queued fewer running requests means a faster service): "
             + ("none." if not trail else "\n"))
    if trail:
        L += trail + [""]
    else:
        L[-1] += "\n"
    L.append(f"![running requests over model time]({result.get('plot', PLOT)})\n")
    return "\n".join(L)


def plot_running(result: Dict[str, Any], png: pathlib.Path) -> None:
    """Running requests over model time (10 s bins): a row per speed, a column per pool."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    speeds = [s for s in result["speeds"] if pools_at(result, s)]
    ncol = max(len(pools_at(result, s)) for s in speeds)
    size = (max(4.6 * ncol, 6.4), 3.3 * len(speeds) + 0.4)
    fig, axes = plt.subplots(len(speeds), ncol, figsize=size, squeeze=False)
    inp = result["trace"]["input_tokens"]
    for i, s in enumerate(speeds):
        ps = pools_at(result, s)
        for j in range(ncol):
            ax = axes[i][j]
            if j >= len(ps):
                ax.axis("off")
                continue
            p = ps[j]
            for a in result["arms"]:
                c = _cell(result, s, p["name"], a)
                if c is None:
                    continue
                xs = [k * c["bin_s"] for k in range(len(c["running_bins"]))]
                ax.plot(xs, c["running_bins"], lw=1.0,
                        label=f"{ARMS[a]['label']} ({c['cached_tokens'] / inp:.3f})")
            ax.axhline(result["shape"]["cap"], color="grey", ls=":", lw=0.8)
            ax.set_title(f"speed {s:g}, {p['name']}: full {p['full_pool'] / 1e3:,.0f}k, SWA "
                         f"{p['swa_pool'] / 1e3:,.0f}k", fontsize=9)
            ax.set_xlabel("model time (s)", fontsize=8)
            ax.set_ylabel("running requests", fontsize=8)
            ax.tick_params(labelsize=7)
            ax.legend(fontsize=6, title="arm (cached share)", title_fontsize=6)
    fig.suptitle(f"Running requests, 10 s means; dotted: the cap.\nThe cached share's no-forget "
                 f"bound: {result['trace']['no_forget_bound']:.3f}", fontsize=9)
    fig.tight_layout()
    fig.savefig(png, dpi=80)
    plt.close(fig)
