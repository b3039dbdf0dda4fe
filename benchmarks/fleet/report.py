"""Fleet benchmark, report: the result (one record per (arm, pool) fleet), the comparison of every
island arm with the best reference arm, the markdown and the plot.

Comparison, per (pool, policy, class): an island arm's fleet cached tokens >= the best reference
arm's (``upstream``, ``upstream_knobs``, ``main``, ``main_knobs``, those run) - one page per
request; and where both it and the reference arm with the most running while queued queued for
at least ``MIN_QUEUED_STEPS`` decode steps, its running while queued >= that reference's - 1. How
long a worker queues is decided mostly by the router (which worker gets how many requests), so an
arm that hardly queued is not judged on it.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

import _bench_path  # noqa: F401  (puts the repository root and benchmarks/ on sys.path)
from prefix_reuse.arms import CPU

ISLAND_ARMS = ("islands", "islands_eager", "islands_auto", "main_islands", "main_islands_auto",
               "main_islands_window")
REFERENCE_ARMS = ("upstream", "upstream_knobs", "main", "main_knobs")
RUNNING_SLACK = 1.0
"""Requests: an island arm's running while queued may be this much below the reference's."""
MIN_QUEUED_STEPS = 10
"""Decode steps with a non-empty queue (summed over the workers) before running while queued is
compared."""


def queued_steps(rec: Dict[str, Any]) -> int:
    """Decode steps with a non-empty queue, summed over the fleet's workers."""
    return sum(w["queued_steps"] for w in rec["workers"])


def assemble(fleets: List[Dict[str, Any]], meta: Dict[str, Any]) -> Dict[str, Any]:
    """``meta`` + the fleets + ``comparison`` rows + their PASS/FAIL summary."""
    result = dict(meta)
    result["fleets"] = fleets
    result["comparison"] = compare(fleets)
    result["comparison_summary"] = {
        k: sum(r["result"] == k.upper() for r in result["comparison"]) for k in ("pass", "fail")}
    return result


def _cell(fleets: List[Dict[str, Any]], arm: str, pool: str, policy: str, cls: str
          ) -> Optional[Dict[str, Any]]:
    for f in fleets:
        if f["arm"] == arm and f["pool"] == pool:
            return f.get("policies", {}).get(policy, {}).get(cls)
    return None


def _axes(fleets: List[Dict[str, Any]]):
    """(pools, policies, classes, arms) in first-seen order."""
    pools, policies, classes, arms = [], [], [], []
    for f in fleets:
        for xs, x in ((pools, f["pool"]), (arms, f["arm"])):
            if x not in xs:
                xs.append(x)
        for p, recs in f.get("policies", {}).items():
            if p not in policies:
                policies.append(p)
            for c in recs:
                if c not in classes:
                    classes.append(c)
    return pools, policies, classes, arms


def compare(fleets: List[Dict[str, Any]], page: int = CPU.page) -> List[Dict[str, Any]]:
    """One row per (pool, policy, class, island arm) with a reference arm in the same cell."""
    pools, policies, classes, arms = _axes(fleets)
    rows = []
    for pool in pools:
        for policy in policies:
            for cls in classes:
                refs = {a: _cell(fleets, a, pool, policy, cls) for a in arms if a in REFERENCE_ARMS}
                refs = {a: r for a, r in refs.items() if r is not None}
                if not refs:
                    continue
                best_arm = max(refs, key=lambda a: refs[a]["cached_tokens"])
                best = refs[best_arm]
                queued = [r["running_while_queued"] for r in refs.values()
                          if queued_steps(r) >= MIN_QUEUED_STEPS]
                for arm in arms:
                    rec = _cell(fleets, arm, pool, policy, cls) if arm in ISLAND_ARMS else None
                    if rec is None:
                        continue
                    slack = page * rec["requests"]
                    cached_ok = rec["cached_tokens"] >= best["cached_tokens"] - slack
                    rwq = rec["running_while_queued"]
                    judged = bool(queued) and queued_steps(rec) >= MIN_QUEUED_STEPS
                    run_ok = not judged or rwq >= max(queued) - RUNNING_SLACK
                    rows.append({
                        "pool": pool, "policy": policy, "class": cls, "arm": arm,
                        "cached_tokens": rec["cached_tokens"], "reference_arm": best_arm,
                        "reference_cached_tokens": best["cached_tokens"], "slack": slack,
                        "running_while_queued": rwq,
                        "reference_running_while_queued": max(queued) if queued else None,
                        "running_judged": judged,
                        "retractions": rec["retractions"],
                        "result": "PASS" if cached_ok and run_ok else "FAIL",
                        "detail": ("" if cached_ok else "fewer cached tokens; ")
                                  + ("" if run_ok else "fewer running while queued"),
                    })
    return rows


def _f(x, nd=1) -> str:
    return "–" if x is None else f"{x:,.{nd}f}" if isinstance(x, float) else f"{x:,}"


def to_markdown(result: Dict[str, Any]) -> str:
    fleets = result["fleets"]
    pools, policies, classes, arms = _axes(fleets)
    out = [
        "# Prefix reuse across a fleet: two CPU workers behind SGLang's router",
        "",
        f"Generated by `benchmarks/fleet.py` on {result['date']} (HEAD {result['git_head']}); "
        f"preset `{result['preset']}`, total runtime {result['runtime_s'] / 60:.1f} min.",
        "",
        "Command:",
        "",
        "```",
        result["command"],
        "```",
        "",
        f"Machine: {result['machine']['cpus']} CPUs; load average {result['machine']['load_start']} "
        f"at the start, {result['machine'].get('load_end')} at the end.",
        "",
        "## Setup",
        "",
        f"Per (arm, pool): two workers booted with the arm's server arguments (`prefix_reuse`'s "
        f"CPU shape: window {CPU.window}, page {CPU.page}, chunk {CPU.chunk}, cap "
        f"`--max-running-requests {CPU.cap}` per worker, each worker its own SWA pool of the "
        f"planned size, `--omp-threads {result['omp_threads']}` each), then per policy the router "
        f"`{result['router']}` started in front of them "
        "(`smg launch --worker-urls W0 W1 --policy POLICY`, on a reserved local port, stopped "
        "after the policy's classes); both workers' caches flushed before every class. Each "
        "class is `prefix_reuse`'s script at this preset, sent to the router exactly as "
        "`prefix_reuse.py` sends it to one server.",
        "",
        "Per class: fleet cached tokens (the responses' `meta_info.cached_tokens`, summed; the "
        "workers' `sglang:cached_tokens_total` counters and their scheduler logs give the same "
        "count), what a cache that forgets "
        "nothing could hit (*expected*: the same oracle as `prefix_reuse`, over the whole fleet), "
        "running while queued (mean `#running-req` over the decode steps of either worker with a "
        "non-empty queue, weighted by steps), retractions summed over the workers, requests per "
        "worker.",
        "",
    ]
    for pool in pools:
        out += [f"## Pool {pool}", ""]
        for policy in policies:
            out += [f"### {policy}", "",
                    "| class | expected | " + " | ".join(arms) + " |",
                    "|---|---|" + "---|" * len(arms)]
            for cls in classes:
                recs = [_cell(fleets, a, pool, policy, cls) for a in arms]
                exp = next((r for r in recs if r), None)
                cells = ["–" if r is None else
                         f"{r['cached_share']:.3f} ({r['cached_tokens']:,})" for r in recs]
                out.append(f"| {cls} | {exp['expected_share']:.3f} | " + " | ".join(cells) + " |"
                           if exp else f"| {cls} | – | " + " | ".join(cells) + " |")
            out += ["", "Running while queued (decode steps that queued) / retractions / requests "
                    "per worker:", "",
                    "| class | " + " | ".join(arms) + " |", "|---|" + "---|" * len(arms)]
            for cls in classes:
                cells = []
                for a in arms:
                    r = _cell(fleets, a, pool, policy, cls)
                    cells.append("–" if r is None else
                                 f"{_f(r['running_while_queued'])} ({queued_steps(r)}) / "
                                 f"{r['retractions']} / "
                                 f"{'+'.join(str(n) for n in r['requests_per_worker'])}")
                out.append(f"| {cls} | " + " | ".join(cells) + " |")
            out.append("")
    out += ["## Per worker", "",
            "| pool | policy | class | arm | worker | requests | prompt | cached | "
            "running while queued | max running | retractions | peak SWA used |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for pool in pools:
        for policy in policies:
            for cls in classes:
                for a in arms:
                    r = _cell(fleets, a, pool, policy, cls)
                    for i, w in enumerate(r["workers"] if r else []):
                        out.append(f"| {pool} | {policy} | {cls} | {a} | w{i} | "
                                   f"{w['requests']} | {w['prompt_tokens']:,} | "
                                   f"{w['cached_tokens']:,} | {_f(w['running_while_queued'])} | "
                                   f"{w['max_running']} | {w['retractions']} | {w['peak_swa_used']:,} |")
    out += ["", "## Island arms against the best reference arm", "",
            f"Cached tokens >= the best of {', '.join(a for a in REFERENCE_ARMS if a in arms)} "
            f"- one page per request; running while queued >= the reference arms' best - "
            f"{RUNNING_SLACK:g} where both queued for at least {MIN_QUEUED_STEPS} decode steps "
            "(`n/j`: not judged, one of them hardly queued).",
            "", "| pool | policy | class | island arm | cached | reference | running while queued "
            "(ref) | retractions | result |", "|---|---|---|---|---|---|---|---|---|"]
    for r in result["comparison"]:
        out.append(f"| {r['pool']} | {r['policy']} | {r['class']} | {r['arm']} | "
                   f"{r['cached_tokens']:,} | {r['reference_cached_tokens']:,} ({r['reference_arm']}) | "
                   f"{_f(r['running_while_queued'])} ({_f(r['reference_running_while_queued'])})"
                   f"{'' if r['running_judged'] else ' n/j'} | "
                   f"{r['retractions']} | **{r['result']}**"
                   + (f" {r['detail'].strip('; ')}" if r["detail"] else "") + " |")
    s = result["comparison_summary"]
    out += ["", f"{s['pass']} PASS, {s['fail']} FAIL.", ""]
    if result.get("png"):
        out += [f"![fleet cached share]({result['png'].rsplit('/', 1)[-1]})", ""]
    return "\n".join(out)


def plot(result: Dict[str, Any], path) -> None:
    """One panel per (pool, policy): fleet cached share per class, one bar per arm, the expected
    share as a tick."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fleets = result["fleets"]
    pools, policies, classes, arms = _axes(fleets)
    fig, axes = plt.subplots(len(pools), len(policies), squeeze=False,
                             figsize=(5.2 * len(policies), 3.4 * len(pools)), sharey=True)
    width = 0.8 / max(1, len(arms))
    for i, pool in enumerate(pools):
        for j, policy in enumerate(policies):
            ax = axes[i][j]
            for k, a in enumerate(arms):
                ys = [(_cell(fleets, a, pool, policy, c) or {}).get("cached_share", 0.0)
                      for c in classes]
                ax.bar([x + (k - (len(arms) - 1) / 2) * width for x in range(len(classes))], ys,
                       width, label=a)
            for x, c in enumerate(classes):
                rec = next((r for r in (_cell(fleets, a, pool, policy, c) for a in arms) if r), None)
                if rec:
                    ax.hlines(rec["expected_share"], x - 0.42, x + 0.42, colors="k",
                              linestyles="dashed", linewidth=1)
            ax.set_xticks(range(len(classes)), classes, fontsize=8)
            ax.set_title(f"{pool}, router policy {policy}", fontsize=9)
            if j == 0:
                ax.set_ylabel("fleet cached share")
    axes[0][0].legend(fontsize=7, loc="upper right")
    fig.suptitle("Two CPU workers behind smg (dashed: a cache that forgets nothing)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
