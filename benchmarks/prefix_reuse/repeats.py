"""Prefix reuse benchmark, repeats: several runs of one ``prefix_reuse.py`` command summed up as
per-cell means with their standard errors, and issue 50's done-when judged on the means.

Why: a class's hits depend on which requests share a batch, so one run of one arm moves by
hundreds to thousands of tokens between runs of the same seed, more than the one-page-per-request
slack of the single-run check. The check here is ``report.acceptance_hicache`` applied to the
mean records (one source of the criterion); ``se`` is the standard error of a mean (sample
standard deviation / sqrt(n)), ``noise`` the standard error of the difference of two means.
"""

from __future__ import annotations

import math
import statistics
from typing import Any, Dict, List, Sequence

import _bench_path  # noqa: F401  (puts the repository root and benchmarks/ on sys.path)
from prefix_reuse.arms import POOLS
from prefix_reuse.report import HICACHE_REFERENCES, acceptance_hicache
from prefix_reuse.workloads import CLASSES

AVERAGED = ("retractions", "host_hit_tokens")
"""Record keys a mean record carries as the runs' mean, beside the cached tokens."""


def mean_se(xs: Sequence[float]) -> Dict[str, float]:
    """``{"mean", "se", "n"}`` of ``xs``; ``se`` is 0 for a single value."""
    n = len(xs)
    mean = sum(xs) / n
    se = statistics.stdev(xs) / math.sqrt(n) if n > 1 else 0.0
    return {"mean": mean, "se": se, "n": n}


def cells(results: Sequence[Dict[str, Any]]) -> Dict[str, Dict[str, Dict[str, List[Dict]]]]:
    """``{arm: {pool: {class: [record per run]}}}`` over the runs' ``arms``; a run whose boot
    failed simply has no record there."""
    out: Dict[str, Dict[str, Dict[str, List[Dict]]]] = {}
    for result in results:
        for arm, pools in result["arms"].items():
            for pool, classes in pools.items():
                for cls, rec in classes.items():
                    out.setdefault(arm, {}).setdefault(pool, {}).setdefault(cls, []).append(rec)
    return out


def mean_records(per_run: Dict[str, Dict[str, Dict[str, List[Dict]]]]) -> Dict[str, Any]:
    """The mean record of every cell: the mean ``cached_tokens`` (rounded down, so an arm never
    gains by rounding), its ``cached_tokens_se`` and ``runs``, the cell's ``requests`` and
    ``expected_shared_tokens`` (the same in every run) and the ``AVERAGED`` keys."""
    arms: Dict[str, Any] = {}
    for arm, pools in per_run.items():
        for pool, classes in pools.items():
            for cls, recs in classes.items():
                m = {k: sum(r.get(k) or 0 for r in recs) / len(recs) for k in AVERAGED}
                stats = mean_se([r["cached_tokens"] for r in recs])
                m["cached_tokens"] = math.floor(stats["mean"])
                m["requests"] = recs[0]["requests"]
                m["expected_shared_tokens"] = recs[0]["expected_shared_tokens"]
                m["cached_tokens_se"] = stats["se"]
                m["runs"] = [r["cached_tokens"] for r in recs]
                arms.setdefault(arm, {}).setdefault(pool, {})[cls] = m
    return arms


def hicache_on_means(arms: Dict[str, Any], page: int, pools: Sequence[str],
                     classes: Sequence[str]) -> List[Dict[str, Any]]:
    """``acceptance_hicache`` on the mean records, each check with ``diff`` (islands with a host
    tier minus the better reference, tokens) and ``noise`` (the standard error of that
    difference): a |diff| under 2 x noise is within what the runs can tell apart."""
    checks = acceptance_hicache(arms, page, pools, classes)
    for c in checks:
        refs = {n: arms[n][c["pool"]][c["class"]] for n in HICACHE_REFERENCES
                if c["class"] in arms.get(n, {}).get(c["pool"], {})}
        best = max(refs, key=lambda n: refs[n]["cached_tokens"])
        own = arms["main_islands_hicache"][c["pool"]][c["class"]]
        c["better"] = best
        c["diff"] = own["cached_tokens"] - refs[best]["cached_tokens"]
        c["noise"] = math.hypot(own["cached_tokens_se"], refs[best]["cached_tokens_se"])
    return checks


def summarize(results: Sequence[Dict[str, Any]], page: int) -> Dict[str, Any]:
    """The repeats' summary: the runs' commands and heads, mean records and the checks."""
    per_run = cells(results)
    arms = mean_records(per_run)
    checks = hicache_on_means(arms, page, POOLS, CLASSES)
    return {
        "runs": [{"command": r.get("command"), "date": r.get("date"),
                  "git_head": r.get("git_head"), "runtime_s": r.get("runtime_s"),
                  "errors": r.get("errors") or {}}
                 for r in results],
        "model": results[0].get("model", "laguna"),
        "arms": arms,
        "acceptance_hicache": checks,
        "summary": {"pass": sum(bool(c["pass"]) for c in checks),
                    "fail": sum(not c["pass"] for c in checks),
                    "fail_beyond_noise": sum(not c["pass"] and -c["diff"] > 2 * c["noise"]
                                             for c in checks)},
    }


def to_markdown(summary: Dict[str, Any]) -> str:
    """The repeats' markdown: the runs, the per-cell means and the check on them."""
    runs = summary["runs"]
    arms = summary["arms"]
    names = list(arms)
    lines = [f"# Prefix reuse with HiCache's host tier, {len(runs)} runs of one command "
             f"(model `{summary['model']}`)", "",
             "Generated by `benchmarks/prefix_reuse_repeats.py` from these runs of "
             "`benchmarks/prefix_reuse.py` (one JSON each, beside this file):", ""]
    for i, r in enumerate(runs, 1):
        lines.append(f"{i}. {r['date']} (HEAD {r['git_head']}), {(r['runtime_s'] or 0) / 60:.1f} "
                     f"min: `{r['command']}`")
        for boot, error in sorted(r.get("errors", {}).items()):
            lines.append(f"   - boot `{boot}` failed, no figures from it: {error}")
    lines += ["", "Cached tokens: the mean over the runs ± its standard error, then each run's "
              "figure. One run of one arm moves by hundreds to thousands of tokens between runs "
              "(which requests share a batch), so the check is on the means.", ""]
    lines.append("| pool | class | " + " | ".join(f"`{n}`" for n in names) + " | no-forget bound |")
    lines.append("|---|---|" + "---|" * len(names) + "---|")
    present = {(p, c) for a in arms.values() for p in a for c in a[p]}
    cells_ = [(p, c) for p in POOLS for c in CLASSES if (p, c) in present]
    for pool, cls in cells_:
        row, bound = [], None
        for n in names:
            m = arms[n].get(pool, {}).get(cls)
            if m is None:
                row.append("–")
                continue
            bound = m["expected_shared_tokens"]
            row.append(f"**{m['cached_tokens']:,}** ± {m['cached_tokens_se']:,.0f} "
                       f"({', '.join(f'{x:,}' for x in m['runs'])})")
        lines.append(f"| {pool} | {cls} | " + " | ".join(row) + f" | {bound:,} |")
    lines += ["", "## Issue 50's done-when on the means", "",
              "`main_islands_hicache` ≥ the better of `main_hicache` and `main_islands` − one page "
              "per request, on the mean cached tokens; *diff* = islands with a host tier minus that "
              "better arm, *noise* = the standard error of that difference (a |diff| under 2 × "
              "noise is within what these runs tell apart); *gap closed*: the share of the gap "
              "from the better arm to the no-forget bound that it closes.", "",
              "| pool | class | `main_islands_hicache` | better | diff | noise | gap closed | result |",
              "|---|---|---|---|---|---|---|---|"]
    for c in summary["acceptance_hicache"]:
        gap = "–" if c["gap_closed"] is None else f"{c['gap_closed']:.3f}"
        verdict = "**PASS**" if c["pass"] else (
            "**FAIL**" if -c["diff"] > 2 * c["noise"] else "**FAIL** (within noise)")
        lines.append(f"| {c['pool']} | {c['class']} | {c['islands']:,} | `{c['better']}` "
                     f"{c['reference']:,} | {c['diff']:+,} | {c['noise']:,.0f} | {gap} | {verdict} |")
    s = summary["summary"]
    lines += ["", f"{s['pass']} PASS, {s['fail']} FAIL ({s['fail_beyond_noise']} beyond 2 × noise).",
              ""]
    return "\n".join(lines)
