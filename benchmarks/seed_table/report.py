"""The seed table's result: the JSON record (``result_record``), its markdown (``to_markdown``, a
function of the JSON alone, so a committed markdown regenerates byte for byte) and the plot of
running requests over the iterations (``plot_running``: a row per workload, a column per ratio).
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any, Dict, List, Optional, Tuple

from seed_table.setup import ARMS

SEED_FIGURES: Dict[Tuple[str, float], Tuple[float, Optional[float], str]] = {
    ("upstream", 0.17): (10, 11, "the production bind at 0.17 (\"measured bind was 10-11 running "
                                  "requests\")"),
    ("upstream", 0.32): (15, 18, "the historical benchmark at 0.32 (\"15-18 running requests\")"),
    ("islands", 0.17): (46, None, "the pool-bound table, islands at 0.17 (\"21 -> 46 running "
                                  "requests\")"),
}
"""The seed's running requests for 0.5.15.post1's arms, as issue 60 states them: (low, high or
None for "at least", where the seed says it). Within 10% means in ``[0.9 low, 1.1 high]``."""

ARM_DESCRIPTIONS = {
    "upstream": "sglang 0.5.15.post1, `SWARadixCache` (islands off)",
    "islands": "sglang 0.5.15.post1 + islands, `--enable-swa-islands` (reclaim `lazy`, the default)",
    "main": "stock sglang 0.5.23, `UnifiedRadixCache` with its defaults",
    "main_islands": "sglang 0.5.23 + islands, `--enable-swa-islands` with its defaults (eviction "
                    "`auto`, reclaim by that order)",
}


def result_record(*, command: str, date: str, git_head: str, runtime_s: float, shape, budget, draw,
                  workloads: List[str], ratios: List[float], arms: List[str],
                  out: Dict[str, Any]) -> Dict[str, Any]:
    return {"command": command, "date": date, "git_head": git_head, "runtime_s": runtime_s,
            "shape": dataclasses.asdict(shape), "budget": dataclasses.asdict(budget),
            "draw": dataclasses.asdict(draw), "workloads": workloads, "ratios": ratios,
            "arms": arms, "arm_descriptions": {a: ARM_DESCRIPTIONS[a] for a in arms},
            "arm_targets": out["arm_targets"], "new_token_ratio": 0.7,
            "pools": out["pools"], "lengths": out["lengths"], "cells": out["cells"]}


def _pool(result, ratio) -> Dict[str, Any]:
    return next(p for p in result["pools"] if p["ratio"] == ratio)


def _k(result, w, r, a) -> Optional[Dict[str, Any]]:
    return result["cells"].get(f"{w}/{r}/{a}")


def _verdict(value: float, lo: float, hi: Optional[float]) -> str:
    if hi is None:
        return "within 10%" if value >= 0.9 * lo else "not within 10%"
    return "within 10%" if 0.9 * lo <= value <= 1.1 * hi else "not within 10%"


def at_seed_shape(result) -> bool:
    """The result ran the seed's table (its requests, shape and budget): only then are the seed's
    figures a yardstick."""
    from seed_table.setup import Budget, Shape
    from seed_table.workload import Draw

    d = {k: v for k, v in result["draw"].items() if k not in ("seed", "range_ratio")}
    return (result["shape"] == dataclasses.asdict(Shape())
            and result["budget"]["budget_bytes"] == Budget().budget_bytes
            and d == {k: v for k, v in dataclasses.asdict(Draw()).items()
                      if k not in ("seed", "range_ratio")})


def upstream_hold(prompt_len: int, shape: Dict[str, Any]) -> int:
    """SWA tokens 0.5.15.post1 upstream holds for a decoding request of ``prompt_len`` tokens: its
    last chunk commit's tree node (SWA-locked while it runs; with the chunk before it where that
    node is shorter than the tree's window, ``w - 1``), the prompt's unaligned tail, and ``w`` of
    decode (the decode evictor frees what falls out of the window)."""
    cp, p, w = shape["chunk"], shape["page"], shape["window"]
    chunks = -(-prompt_len // cp)
    node = prompt_len // p * p - (chunks - 1) * cp
    locked = node + (cp if node < w - 1 and chunks > 1 else 0)
    return locked + prompt_len % p + w


def _expected_hold_line(result, w: str) -> str:
    holds = [upstream_hold(n, result["shape"]) for n in result["lengths"][w]["input"]]
    h = sum(holds) / len(holds)
    binds = ", ".join(f"{p['swa_pool'] / h:.1f} at {p['ratio']:.2f}" for p in result["pools"])
    return (f"Upstream's hold expected from these prompt lengths (the last chunk's tree node, with "
            f"the chunk before it where that node is under the window; the unaligned tail; `w` of "
            f"decode), mean over the requests: {h:,.0f} tokens; SWA pool / that: {binds}.\n")


def _seed_rows(result) -> List[str]:
    L = []
    if not at_seed_shape(result):
        return L
    for (arm, ratio), (lo, hi, what) in SEED_FIGURES.items():
        if arm not in result["arms"] or ratio not in result["ratios"]:
            continue
        seed = f"{lo:g}-{hi:g}" if hi is not None else f">= {lo:g}"
        for w in result["workloads"]:
            c = _k(result, w, ratio, arm)
            if c is None:
                continue
            v = c["running_mean_waiting"]
            L.append(f"| {ARMS[arm]['label']} | {ratio:.2f} | {w} | {v:.1f} ({c['running_mean']:.1f}, "
                     f"{c['running_max']}) | {seed}: {what} | {_verdict(v, lo, hi)} |")
    return L


def to_markdown(result: Dict[str, Any]) -> str:
    sh, d = result["shape"], result["draw"]
    L = ["# The seed's pool-bound table, replayed on the real tree cache and admission (no model)\n",
         f"Generated by `benchmarks/seed_table.py` on {result['date']} (HEAD {result['git_head']}), "
         f"{result['runtime_s'] / 60:.0f} min.\n", "Command:\n", "```", result["command"], "```\n",
         f"{d['n']} requests, all queued before the first iteration; `--max-running-requests` "
         f"{sh['cap']}, chunk {sh['chunk']:,}, window {sh['window']:,}, page {sh['page']}; the "
         "planner's pools for the seed deployment (full 9.5 KB, SWA 95 KB, draft 10.24 KB per token, "
         f"{result['budget']['budget_bytes'] / 1e9:g} GB"
         + (f"; the full pool capped at `--max-total-tokens {result['budget']['max_total_tokens']:,}`"
            if result["budget"].get("max_total_tokens") else "")
         + "). Each cell runs the arm's sglang in its own "
         "process: its real `Req`, `ScheduleBatch`, `PrefillAdder`, tree cache, pools and allocator "
         "under the scheduler's glue (`islands_harness.sim.MiniScheduler`, 0.5.15.post1; "
         "`islands_harness.sim_main.MainMiniScheduler`, 0.5.23), no model; until every request "
         "finished, one iteration per prefill batch (a chunk) or decode step. The glue's new-token "
         f"ratio is fixed at {result['new_token_ratio']} (a server decays it). Deterministic.\n"]
    for a in result["arms"]:
        L.append(f"- `{a}` ({ARMS[a]['label']}): {result['arm_descriptions'][a]}")
    L.append("")
    for w in result["workloads"]:
        lens = result["lengths"][w]
        n = len(lens["input"])
        what = ("SGLang `bench_serving`'s random dataset draw (`--random-input-len "
                f"{d['input_len']} --random-output-len {d['output_len']} --random-range-ratio "
                f"{d['range_ratio']:g} --seed {d['seed']}`)" if w == "random"
                else f"every request {d['input_len']:,} in, {d['output_len']:,} out")
        L.append(f"## `{w}`: {what}\n")
        L.append(f"Input tokens {sum(lens['input']):,} (mean {sum(lens['input']) / n:,.0f}), output "
                 f"tokens {sum(lens['output']):,} (mean {sum(lens['output']) / n:,.0f}).\n")
        L.append("| ratio: full / SWA pool | arm | running while requests wait | running mean / max "
                 "| SWA held per running request (while requests wait) | retractions | prefill "
                 "tokens computed (x input) | iterations: prefill / decode |")
        L.append("|---|---|---|---|---|---|---|---|")
        for r in result["ratios"]:
            p = _pool(result, r)
            for a in result["arms"]:
                c = _k(result, w, r, a)
                if c is None:
                    continue
                L.append(f"| {r:.2f}: {p['full_pool']:,} / {p['swa_pool']:,} | {ARMS[a]['label']} "
                         f"| {c['running_mean_waiting']:.1f} | {c['running_mean']:.1f} / "
                         f"{c['running_max']} | {c['swa_held_per_running_mean_waiting']:,.0f} "
                         f"| {c['retractions']} | {c['prefill_tokens']:,} "
                         f"({c['prefill_tokens'] / c['input_tokens']:.3f}) "
                         f"| {c['extend_iterations']:,} / {c['decode_iterations']:,} |")
        L.append("")
        L.append(_expected_hold_line(result, w))
    L.append("`running`: requests holding a request-pool row after an iteration (the decoding ones "
             "and the one in chunked prefill); `while requests wait`: the mean over the iterations "
             "that end with requests still queued, where admission decides how many run. `SWA held`: "
             "SWA tokens allocated and not evictable (what admission cannot use) over the running "
             "requests, mean over the decode steps while requests wait. The planner's bind without "
             "islands (`SWA pool / cp`): "
             + ", ".join(f"{p['planner_bind_without_islands']:g} at {p['ratio']:.2f}"
                         for p in result["pools"]) + ".\n")
    rows = _seed_rows(result)
    if rows:
        L.append("## Against the seed's figures (0.5.15.post1)\n")
        L.append("| arm | ratio | workload | running while requests wait (mean over the run, "
                 "max) | the seed | while requests wait |")
        L.append("|---|---|---|---|---|---|")
        L += rows
        L.append("")
    L.append(f"![running requests over the iterations]({result.get('plot', 'seed_table_running.png')})\n")
    return "\n".join(L)


def plot_running(result: Dict[str, Any], png: pathlib.Path) -> None:
    """Running requests over the iterations: a row per workload, a column per ratio, a line per arm."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ws, rs = result["workloads"], result["ratios"]
    fig, axes = plt.subplots(len(ws), len(rs), figsize=(5 * len(rs), 3.4 * len(ws)), squeeze=False)
    cap = result["shape"]["cap"]
    for i, w in enumerate(ws):
        for j, r in enumerate(rs):
            ax = axes[i][j]
            p = _pool(result, r)
            for a in result["arms"]:
                c = _k(result, w, r, a)
                if c is None:
                    continue
                ch = c["running_changes"]
                xs = [x for x, _ in ch] + [c["iterations"]]
                ys = [y for _, y in ch] + [ch[-1][1]]
                ax.step(xs, ys, where="post", label=ARMS[a]["label"], lw=1.2)
            ax.axhline(cap, color="grey", ls=":", lw=0.8)
            ax.axhline(p["planner_bind_without_islands"], color="red", ls="--", lw=0.8)
            ax.set_title(f"{w}, r {r:.2f}: full {p['full_pool'] / 1e3:,.0f}k, SWA "
                         f"{p['swa_pool'] / 1e3:,.0f}k", fontsize=9)
            ax.set_xlabel("scheduler iteration", fontsize=8)
            ax.set_ylabel("running requests", fontsize=8)
            ax.tick_params(labelsize=7)
            if i == 0 and j == 0:
                ax.legend(fontsize=7)
    fig.suptitle("Running requests. Dotted: the cap; dashed: the planner's bind without "
                 "islands,\nSWA pool / cp", fontsize=9)
    fig.tight_layout()
    fig.savefig(png, dpi=90)
    plt.close(fig)
