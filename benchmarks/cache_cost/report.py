"""Cache cost benchmark, the report: ratios and growth slopes against upstream (``analyse``), the
markdown (``to_markdown``) and the log-log plot (``plot``). The markdown renders from the JSON
alone: what a run did not measure (path nodes, before 2026-12-03 12:19) gets no column."""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Tuple

SIZE_OPS = ("match_continue", "match_diverge", "commit_chunk", "insert_finished",
            "queued_refresh", "decode_hook", "decode_island", "evict_64_cold", "evict_window_cold",
            "evict_64_nocold", "evict_window_nocold", "lock_inc", "lock_dec", "match_lock",
            "on_request_queued")
QUEUE_OPS = ("on_request_queued", "evict_64_cold", "evict_64_nocold", "commit_chunk",
             "queued_refresh")
ISLAND_ARMS = ("islands_lazy", "islands_eager", "islands_auto")
PATH_OPS = ("match_continue", "match_diverge", "commit_chunk", "insert_finished", "lock_inc",
            "lock_dec", "match_lock")
"""Operations whose upstream steps walk a transcript's path node by node (match, lock, MRU reset,
insert): compared also per path node (``facts.path_nodes``), since islands split a path at its
islands."""
RATIO_LIMIT = 1.2
SLOPE_SLACK = 0.15  # log-log slope above upstream's by more than this: grows faster
NOTES = {
    "on_request_queued": "upstream's hook is the base class's no-op; islands match the request "
                         "once (one match_prefix) to record its queued hit",
    "queued_refresh": "islands only (no upstream counterpart): part of commit_chunk",
    "decode_island": "islands only: a decode island is an insert upstream never makes",
    "decode_hook": "upstream's hook is the base class's no-op; islands check the decode-island "
                   "cadence and the island's window on every decode step",
}


def _median(cell: Optional[Dict[str, Any]]) -> Optional[float]:
    return cell["median_us"] if cell else None


def _slope(xs: List[float], ys: List[Optional[float]]) -> Optional[float]:
    """Least-squares slope of log10(y) on log10(x) over the points with a positive y."""
    pts = [(math.log10(x), math.log10(y)) for x, y in zip(xs, ys) if y and y > 0 and x > 0]
    if len(pts) < 2:
        return None
    mx = sum(p[0] for p in pts) / len(pts)
    my = sum(p[1] for p in pts) / len(pts)
    den = sum((p[0] - mx) ** 2 for p in pts)
    return round(sum((p[0] - mx) * (p[1] - my) for p in pts) / den, 3) if den else None


def _verdict(op: str, ratios: List[Optional[float]], slope: Optional[float],
             up_slope: Optional[float], per_node: Optional[List[Optional[float]]] = None) -> str:
    """PASS, FAIL, ``note`` (see NOTES) or ``per node``: above the limit, but within it per path
    node and growing no faster than upstream's."""
    if op in NOTES:
        return "note"
    if not ratios or any(r is None for r in ratios):
        return "n/a"
    faster = slope is not None and up_slope is not None and slope > up_slope + SLOPE_SLACK
    if faster:
        return "FAIL"
    if max(ratios) <= RATIO_LIMIT:
        return "PASS"
    if per_node and all(r is not None for r in per_node) and max(per_node) <= RATIO_LIMIT:
        return "per node"
    return "FAIL"


def _check_rows(cells: Dict[str, Dict[str, Any]], points: List[str], xs: List[float],
                ops, key: str) -> List[Dict[str, Any]]:
    """Per op and islands arm: the ratio to upstream at each point, the log-log slopes against
    ``xs`` and the verdict."""
    rows = []
    for op in ops:
        up = [_median(cells.get("upstream", {}).get(p, {}).get("ops", {}).get(op))
              for p in points]
        up_slope = _slope(xs, up)
        for arm in ISLAND_ARMS:
            if arm not in cells:
                continue
            mine = [_median(cells[arm].get(p, {}).get("ops", {}).get(op)) for p in points]
            ratios = [round(m / u, 3) if m is not None and u else None for m, u in zip(mine, up)]
            slope = _slope(xs, mine)
            per_node = None
            if op in PATH_OPS:
                paths = [_path_ratio(cells, arm, p) for p in points]
                per_node = [round(r / q, 3) if r is not None and q else None
                            for r, q in zip(ratios, paths)]
            rows.append({key: None, "op": op, "arm": arm, "points": points, "ratios": ratios,
                         "max_ratio": max([r for r in ratios if r is not None], default=None),
                         "per_node_ratios": per_node,
                         "max_per_node_ratio": max([r for r in per_node or () if r is not None],
                                                   default=None),
                         "slope": slope, "upstream_slope": up_slope,
                         "verdict": _verdict(op, ratios, slope, up_slope, per_node)})
    return rows


def _path_ratio(cells: Dict[str, Dict[str, Any]], arm: str, point: str) -> Optional[float]:
    """Mean path nodes of ``arm`` over upstream's at one size (None: not measured)."""
    mine = cells.get(arm, {}).get(point, {}).get("facts", {}).get("path_nodes")
    up = cells.get("upstream", {}).get(point, {}).get("facts", {}).get("path_nodes")
    return mine / up if mine and up else None


def analyse(result: Dict[str, Any]) -> Dict[str, Any]:
    """Ratios to upstream and log-log growth slopes: size sweep against tokens cached (the same
    for every arm at one size), queue sweep against queue length."""
    out: Dict[str, Any] = {"ratio_limit": RATIO_LIMIT, "slope_slack": SLOPE_SLACK,
                           "notes": NOTES, "size": [], "queue": []}
    sweep = result["size_sweep"]
    for w in result["windows"]:
        w = str(w)
        cells = {arm: sweep[arm][w] for arm in sweep if w in sweep[arm]}
        if "upstream" not in cells:
            continue
        points = [str(n) for n in result["sizes"][w]]
        xs = [cells["upstream"][p]["facts"]["tokens_cached"] for p in points]
        for row in _check_rows(cells, points, xs, SIZE_OPS, "window"):
            row["window"] = int(w)
            out["size"].append(row)
    q = result["queue_sweep"]
    if "upstream" in q:
        points = [str(n) for n in result["queue"]["lengths"]]
        out["queue"] = _check_rows(q, points, [float(p) for p in points], QUEUE_OPS, "queue")
    out["failures"] = [f"{r.get('window', 'queue')}/{r['op']}/{r['arm']}"
                       for r in out["size"] + out["queue"] if r["verdict"] == "FAIL"]
    return out


# ----------------------------------------------------------------------------- markdown


def _us(x: Optional[float]) -> str:
    if x is None:
        return "–"
    return f"{x:,.0f}" if x >= 100 else f"{x:,.1f}" if x >= 1 else f"{x:.2f}"


def _cell(cells, arm: str, point: str, op: str) -> Optional[float]:
    return _median(cells.get(arm, {}).get(point, {}).get("ops", {}).get(op))


def _ratio(a: Optional[float], b: Optional[float]) -> str:
    return f"{a / b:.2f}" if a is not None and b else "–"


def _path_nodes_measured(result: Dict[str, Any]) -> bool:
    """Whether the run recorded the probed transcripts' path nodes (``facts.path_nodes``)."""
    return any("path_nodes" in cell.get("facts", {}) for arm in result["size_sweep"].values()
               for w in arm.values() for cell in w.values())


def _auto_builds_lazys_tree(result: Dict[str, Any]) -> bool:
    """Whether ``islands_auto`` built the tree ``islands_lazy`` built at every size (the same
    nodes and live SWA, before and after the evictions)."""
    sweep = result["size_sweep"]
    auto, lazy = sweep.get("islands_auto"), sweep.get("islands_lazy")
    if not auto or not lazy or auto.keys() != lazy.keys():
        return False
    return all(auto[w].keys() == lazy[w].keys() and all(
        (auto[w][p]["facts"], auto[w][p]["facts_nocold"])
        == (lazy[w][p]["facts"], lazy[w][p]["facts_nocold"]) for p in auto[w]) for w in auto)


def _header(result: Dict[str, Any]) -> List[str]:
    env, code = result["environment"], result.get("code", {})
    return [
        "# Cache cost: per-operation time of the tree cache, islands against upstream\n",
        f"Generated by `benchmarks/cache_cost.py` on {result['date']} (HEAD {result['git_head']}, "
        f"installed `swa_island_radix_cache.py` sha256 "
        f"{code.get('installed_swa_island_radix_cache_sha256_16')}, uncommitted under python/ "
        f"and patches/: {len(code.get('dirty') or [])} files); preset `{result['preset']}`, "
        f"{result['runtime_s'] / 60:.1f} min on {env['cpus']} CPUs (load average "
        f"{env['loadavg_start'][0]:.1f} at the start, {env['loadavg_end'][0]:.1f} at the end).\n",
        "Command:\n", "```", result["command"], "```\n",
        "Each arm builds the same deterministic workload (shared system prompts, multi-turn "
        "transcripts, fan-out over documents, chunked long prompts; page 1, chunk 4w) through the "
        "real scheduler glue (`islands_harness.sim.MiniScheduler`), then every operation is timed "
        "on the built cache: median microseconds of wall time (p90 and sample counts in the "
        "JSON), torch on one thread, garbage collector off in timed regions. `*_cold`: the first "
        "eviction of k SWA tokens right after the build; `*_nocold`: after evicting until islands "
        "take window tokens (upstream: the same total as `islands_lazy`); each sample on a fresh "
        "clone of that state. `–`: no such operation in that arm."
        + (" With these ample pools `islands_auto` (lazy while a chunk of SWA is free) builds "
           "the same tree as `islands_lazy`: their columns differ by noise only."
           if _auto_builds_lazys_tree(result) else "") + "\n"]


def _headline(result: Dict[str, Any]) -> List[str]:
    arms = [a for a in ("upstream", *ISLAND_ARMS) if a in result["size_sweep"]]
    L = ["## Headline: evicting 64 SWA tokens with no cold SWA left, at the largest size\n",
         "| window | clients | live-SWA nodes (upstream / lazy) | " + " | ".join(
             f"`{a}` us" for a in arms) + " | lazy / upstream |", "|---" * (4 + len(arms)) + "|"]
    for w in result["windows"]:
        w = str(w)
        n = str(result["sizes"][w][-1])
        cells = {a: result["size_sweep"][a].get(w, {}) for a in arms}
        vals = [_cell(cells, a, n, "evict_64_nocold") for a in arms]
        live = [cells[a].get(n, {}).get("facts_nocold", {}).get("live_swa_nodes") for a in
                ("upstream", "islands_lazy") if a in cells]
        lz, up = _cell(cells, "islands_lazy", n, "evict_64_nocold"), _cell(
            cells, "upstream", n, "evict_64_nocold")
        L.append(f"| {w} | {n} | {' / '.join(f'{x:,}' for x in live if x is not None)} | "
                 + " | ".join(_us(v) for v in vals) + f" | {_ratio(lz, up)} |")
    return L + [""]


def _window_tables(result: Dict[str, Any], w: str) -> List[str]:
    sweep = result["size_sweep"]
    cells = {a: sweep[a][w] for a in sweep if w in sweep[a]}
    arms = [a for a in ("upstream", *ISLAND_ARMS) if a in cells]
    points = [str(n) for n in result["sizes"][w]]
    paths = _path_nodes_measured(result)
    L = [f"## Window {w} (chunk {4 * int(w)})\n",
         "| clients | requests | tokens cached | " + " | ".join(
             f"`{a}` nodes / live-SWA (no cold: live)" + (" / path nodes" if paths else "")
             for a in arms) + " |",
         "|---" * (3 + len(arms)) + "|"]
    for p in points:
        f = cells[arms[0]][p]["facts"]
        L.append(f"| {p} | {f['requests']:,} | {f['tokens_cached']:,} | " + " | ".join(
            f"{cells[a][p]['facts']['nodes']:,} / {cells[a][p]['facts']['live_swa_nodes']:,} "
            f"({cells[a][p]['facts_nocold']['live_swa_nodes']:,})"
            + (f" / {cells[a][p]['facts'].get('path_nodes', '–')}" if paths else "")
            for a in arms) + " |")
    L += ["", "| op | clients | " + " | ".join(f"`{a}`" for a in arms) + " | lazy / upstream |",
          "|---" * (3 + len(arms)) + "|"]
    for op in SIZE_OPS:
        for p in points:
            vals = {a: _cell(cells, a, p, op) for a in arms}
            L.append(f"| {op} | {p} | " + " | ".join(_us(vals[a]) for a in arms)
                     + f" | {_ratio(vals.get('islands_lazy'), vals.get('upstream'))} |")
    return L + [""]


def _queue_table(result: Dict[str, Any]) -> List[str]:
    q = result["queue_sweep"]
    if not q:
        return []
    arms = [a for a in ("upstream", *ISLAND_ARMS) if a in q]
    qq = result["queue"]
    L = [f"## Waiting queue (window {qq['window']}, {qq['clients']} clients cached)\n",
         "| op | queued | " + " | ".join(f"`{a}`" for a in arms) + " | lazy / upstream |",
         "|---" * (3 + len(arms)) + "|"]
    for op in QUEUE_OPS:
        for p in (str(n) for n in qq["lengths"]):
            vals = {a: _cell(q, a, p, op) for a in arms}
            L.append(f"| {op} | {p} | " + " | ".join(_us(vals[a]) for a in arms)
                     + f" | {_ratio(vals.get('islands_lazy'), vals.get('upstream'))} |")
    return L + [""]


def _checks(result: Dict[str, Any]) -> List[str]:
    an = result["analysis"]
    paths = _path_nodes_measured(result)
    L = ["## Checks: islands <= 1.2x upstream at every size, no curve steeper than upstream's\n",
         f"Slopes: log-log against tokens cached (size sweep) or queue length (queue sweep); "
         f"steeper means more than {SLOPE_SLACK} above upstream's. `note`: an operation that must "
         "cost more, or has no upstream counterpart (below)."
         + (" `per node`: above the limit as "
            "measured, within it per path node (the time over the mean nodes on the probed "
            "transcripts' paths, `path nodes` above: islands split a path at every island, and "
            "upstream's own match, lock, MRU reset and insert walk it node by node), growing no "
            "faster than upstream's." if paths else "") + "\n",
         "| sweep | op | arm | max ratio | " + ("max ratio per path node | " if paths else "")
         + "slope (upstream) | verdict |",
         "|---" * (7 if paths else 6) + "|"]
    for r in an["size"] + an["queue"]:
        sweep = f"w {r['window']}" if "window" in r and r.get("window") else "queue"
        mr = f"{r['max_ratio']:.2f}" if r["max_ratio"] is not None else "–"
        pn = r.get("max_per_node_ratio")
        pn = f"{pn:.2f} | " if pn is not None else "– | "
        L.append(f"| {sweep} | {r['op']} | {r['arm']} | {mr} | {pn if paths else ''}"
                 f"{r['slope']} ({r['upstream_slope']}) | {r['verdict']} |")
    L += ["", "Notes:\n"] + [f"- `{op}`: {text}" for op, text in NOTES.items()]
    return L + [""]


def to_markdown(result: Dict[str, Any]) -> str:
    L = _header(result) + _headline(result)
    for w in result["windows"]:
        L += _window_tables(result, str(w))
    L += _queue_table(result) + _checks(result)
    return "\n".join(L) + "\n"


# ----------------------------------------------------------------------------- plot

ARM_STYLE = {"upstream": ("black", "o"), "islands_lazy": ("tab:red", "s"),
             "islands_eager": ("tab:blue", "^"), "islands_auto": ("tab:green", "v")}
WINDOW_STYLE = ["-", "--", ":", "-."]


def _series(result: Dict[str, Any], arm: str, w: str, op: str) -> Tuple[List[float], List[float]]:
    facts = "facts_nocold" if op.endswith("_nocold") else "facts"
    xs, ys = [], []
    for n in result["sizes"][w]:
        cell = result["size_sweep"].get(arm, {}).get(w, {}).get(str(n))
        y = _median(cell["ops"].get(op)) if cell else None
        if y:
            xs.append(max(1, cell[facts]["live_swa_nodes"]))
            ys.append(y)
    return xs, ys


def plot(result: Dict[str, Any], path) -> None:
    """One log-log panel per operation (time against nodes with live SWA, one line per arm and
    window), then one per queue operation (time against queue length)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [("size", op) for op in SIZE_OPS]
    if result["queue_sweep"]:
        panels += [("queue", op) for op in QUEUE_OPS]
    cols = 5
    rows = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 3.3 * rows), squeeze=False)
    for ax, (kind, op) in zip(axes.flat, panels):
        for arm, (color, marker) in ARM_STYLE.items():
            if kind == "size":
                for i, w in enumerate(str(x) for x in result["windows"]):
                    xs, ys = _series(result, arm, w, op)
                    if xs:
                        ax.plot(xs, ys, WINDOW_STYLE[i % 4], color=color, marker=marker,
                                ms=3, label=f"{arm} w{w}")
            else:
                cells = result["queue_sweep"].get(arm, {})
                pts = [(int(q), _median(cells.get(q, {}).get("ops", {}).get(op)))
                       for q in (str(n) for n in result["queue"]["lengths"])]
                pts = [(x, y) for x, y in pts if y]
                if pts:
                    ax.plot(*zip(*pts), "-", color=color, marker=marker, ms=3, label=arm)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(op if kind == "size" else f"{op} vs queue", fontsize=9)
        ax.set_xlabel("live-SWA nodes" if kind == "size" else "requests waiting", fontsize=8)
        ax.set_ylabel("us (median)", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(True, which="both", alpha=0.3)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", fontsize=8, ncol=min(len(labels), 6))
    fig.suptitle(f"cache cost per operation, log-log ({result['preset']}, HEAD "
                 f"{result['git_head']}): size sweep against live-SWA nodes, then queue sweep")
    fig.tight_layout(rect=(0, 0.05, 1, 0.98))
    fig.savefig(path, dpi=90)
    plt.close(fig)
