"""The seed-shape benchmark's markdown tables (``benchmarks/seed_shape.py``): one row per arm,
then each arm over the baseline beside the seed's own ratios."""

from __future__ import annotations

import shlex
from typing import Any, Dict

from seed_shape.setup import BASELINES, SEED_FIGURES


def _f(x, nd=1) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:,.{nd}f}"
    return f"{x:,}" if isinstance(x, int) else str(x)


def _ratio(a, b) -> str:
    return f"{a / b:.3f}" if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b else "-"


def tables(result: Dict[str, Any]) -> str:
    rows = [r for r in result["arms"] if "error" not in r]
    out = [f"### Seed shape ({result['profile']}): {result['model']}", "",
           f"{result['workload_line']}", "",
           "| arm | ratio | --max-total-tokens | SWA pool | boot s | completed | window s | "
           "output tok/s | mean running | max running | retractions | mean E2E s | p99 E2E s | "
           "peak SWA used | SWA held / running req | islands' held gauge |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        pool = r.get("boot_log", {}).get("swa_pool_log", r["swa_pool_plan"])
        out.append(
            f"| {r['arm']} | {r['ratio']:.2f} | {_f(r['max_total_tokens'])} | {_f(pool)} | "
            f"{_f(r.get('boot_s'))} | {r['completed']}/{r['requests']} | {_f(r['window_s'])} | "
            f"{_f(r['output_tok_s'], 0 if r['output_tok_s'] >= 100 else 2)} | "
            f"{_f(r['mean_running'])} | {_f(r['max_running'])} | "
            f"{_f(r['retractions'])} | {_f(r['latency_mean_s'], 2)} | {_f(r['latency_p99_s'], 2)} | "
            f"{_f(r['peak_swa_used'])} | {_f(r['swa_held_per_running'], 0)} | "
            f"{_f(r['swa_held_per_req_island_gauge'], 0)} |")
    for r in result["arms"]:
        if "error" in r:
            out.append(f"| {r['arm']} | ERROR: {r['error'][:160]} |")
    for name, why in result.get("skipped", []):
        out.append(f"| {name} | not run: {why} |")
    # the first target's stock arm at 0.17 that ran: upstream_0.17, else main_0.17 (0.5.23)
    base = next((r for b in BASELINES for r in rows if r["arm"] == b), None)
    BASELINE = base["arm"] if base is not None else BASELINES[0]
    if base is not None and len(rows) > 1:
        out += ["", f"Each arm / {BASELINE} (the seed: H100, real weights, EAGLE, 32k in / 16k out):",
                "", "| arm | mean running x | max running x | output tok/s x | mean E2E x | "
                "p99 E2E x | SWA held / running req x |", "|---|---|---|---|---|---|---|"]
        for r in rows:
            if r is base:
                continue
            out.append(
                f"| {r['arm']} / {BASELINE} | {_ratio(r['mean_running'], base['mean_running'])} | "
                f"{_ratio(r['max_running'], base['max_running'])} | "
                f"{_ratio(r['output_tok_s'], base['output_tok_s'])} | "
                f"{_ratio(r['latency_mean_s'], base['latency_mean_s'])} | "
                f"{_ratio(r['latency_p99_s'], base['latency_p99_s'])} | "
                f"{_ratio(r['swa_held_per_running'], base['swa_held_per_running'])} |")
        s = SEED_FIGURES
        out.append(
            f"| seed: islands_0.17 / {BASELINE} | "
            f"{_ratio(s['islands_0.17']['mean_running'], s['upstream_0.17']['mean_running'])} | - | "
            f"{_ratio(s['islands_0.17']['output_tok_s'], s['upstream_0.17']['output_tok_s'])} | "
            f"{s['mean_latency_ratio']:.3f} | - | - |")
    if any(r.get("window_limited") for r in rows):
        out += ["", "Window-limited arms: the load had not finished when the window closed; "
                "throughput counts every token streamed in the window, latency only the "
                "completed requests."]
    out += ["", "Commands: `seed_shape.json` (`arms[].command`, `arms[].env`); planner: `"
            + shlex.join(result["planner_command"]) + "`."]
    return "\n".join(out)
