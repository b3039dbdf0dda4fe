#!/usr/bin/env python3
"""The README's picture, from committed results only: per-request SWA hold, and running requests
at a lean SWA pool, for upstream sglang 0.5.15.post1, stock sglang 0.5.23 (upstream main) and
islands.

Reads (nothing else; no server, no benchmark run):

* ``--hold``       ``swa_hold.py --production`` on 0.5.15.post1: arms ``upstream``, ``islands``
* ``--hold-main``  ``swa_hold.py --target main --production``: arms ``main/<core>``,
                   ``main_islands/<core>`` (``--core``, default ``rust``: 0.5.23's default tree)
* ``--admission``       ``admission.py --quick`` on 0.5.15.post1: arms ``upstream_<pool>``,
                        ``islands_<pool>`` (``--pool``, default 0.17)
* ``--admission-main``  ``admission.py --quick`` with the 0.5.23 arms: ``main_<pool>``, and
                        ``main_islands_<pool>`` when the file has it

Left panel: SWA tokens held per running request right after every chunk commit (max) and per
decoding request (mean), window 1024, page 64, chunk 16384. Right panel: the no-reuse workload's
time-weighted mean running requests at the pool (bars), the max (marker), retractions (label),
the concurrency cap and the bind the planner predicts without islands.

    .venv/bin/python benchmarks/front_page_plot.py --out benchmarks/results/front_page.png
    .venv/bin/python benchmarks/front_page_plot.py      # -> .work/front_page/front_page.png

Exits 2 with the file (and key) it could not read.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
from typing import Any, List, Optional, Tuple

ROOT = pathlib.Path(__file__).resolve().parent.parent
# Read only: the committed results the picture is drawn from. Like every benchmark, the script
# writes into the committed results only when told to (--out; default under .work/).
INPUTS = ROOT.joinpath("benchmarks", "results")
DEFAULT_OUT = ROOT / ".work" / "front_page" / "front_page.png"
PROG = "front_page_plot.py"

# (label, colour) per arm family; the same colours in both panels.
UPSTREAM = ("upstream 0.5.15", "#d62728")
MAIN = ("stock main 0.5.23", "#e377c2")
ISLANDS = ("islands 0.5.15", "#2ca02c")
MAIN_ISLANDS = ("islands on main 0.5.23", "#98df8a")


class InputError(Exception):
    pass


def _rel(path: pathlib.Path) -> str:
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def load(path: pathlib.Path) -> Any:
    if not path.is_file():
        raise InputError(f"{_rel(path)}: no such file")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise InputError(f"{_rel(path)}: not JSON ({e})") from None


def need(data: Any, path: pathlib.Path, *keys: str) -> Any:
    """data[k0][k1]...; a missing key names the file and the whole key path."""
    cur = data
    for i, k in enumerate(keys):
        if not isinstance(cur, dict) or k not in cur or cur[k] is None:
            raise InputError(f"{_rel(path)}: missing key {'.'.join(repr(x) for x in keys[:i + 1])}")
        cur = cur[k]
    return cur


def hold_rows(a: argparse.Namespace) -> Tuple[List[Tuple[str, str, float, float]], str]:
    """[(label, colour, held after every commit (max), held while decoding (mean))], shape note."""
    hold, hold_main = load(a.hold), load(a.hold_main)
    rows = []
    for data, path, arm, (label, colour) in (
            (hold, a.hold, "upstream", UPSTREAM),
            (hold_main, a.hold_main, f"main/{a.core}", MAIN),
            (hold, a.hold, "islands", ISLANDS),
            (hold_main, a.hold_main, f"main_islands/{a.core}", MAIN_ISLANDS)):
        commit = need(data, path, "arms", arm, "after_commit", "max_swa_held_per_running_req")
        decode = need(data, path, "arms", arm, "decode", "mean_swa_held_per_running_req")
        rows.append((label, colour, float(commit), float(decode)))
    shapes = []
    for data, path in ((hold, a.hold), (hold_main, a.hold_main)):
        shapes.append(tuple(need(data, path, "shape", k) for k in ("window", "page", "chunk")))
    if shapes[0] != shapes[1]:
        raise InputError(f"{_rel(a.hold)} and {_rel(a.hold_main)}: different shapes "
                         f"(window, page, chunk) {shapes[0]} and {shapes[1]}")
    w, p, cp = shapes[0]
    return rows, f"w {w}, p {p}, cp {cp}"


def admission_rows(a: argparse.Namespace):
    """[(label, colour, mean running, max running, retractions)], cap, predicted bind, pool."""
    adm, adm_main = load(a.admission), load(a.admission_main)
    pool = a.pool
    rows = []
    seen = {}  # (cap, predicted bind, SWA pool) per file: the arms must share them
    for data, path, arm, fam, required in (
            (adm, a.admission, f"upstream_{pool}", UPSTREAM, True),
            (adm_main, a.admission_main, f"main_{pool}", MAIN, True),
            (adm, a.admission, f"islands_{pool}", ISLANDS, True),
            (adm_main, a.admission_main, f"main_islands_{pool}", MAIN_ISLANDS, False)):
        if not required and arm not in need(data, path, "arms"):
            continue
        mean = need(data, path, "arms", arm, "mean_running")
        mx = need(data, path, "arms", arm, "max_running")
        retr = need(data, path, "arms", arm, "retractions")
        seen[(_rel(path), arm)] = (need(data, path, "cap"),
                                   need(data, path, "arms", arm, "predicted_bind_without_islands"),
                                   need(data, path, "arms", arm, "swa_pool"))
        rows.append((fam[0], fam[1], float(mean), float(mx), float(retr)))
    if len(set(seen.values())) != 1:
        raise InputError("the admission arms differ in cap, predicted bind or SWA pool: "
                         + "; ".join(f"{f} {arm}: {v}" for (f, arm), v in seen.items()))
    cap, bind, swa_pool = next(iter(seen.values()))
    return rows, cap, bind, swa_pool


def plot(a: argparse.Namespace) -> pathlib.Path:
    hold, shape = hold_rows(a)
    running, cap, bind, swa_pool = admission_rows(a)

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.6), gridspec_kw={"width_ratios": [1, 1]})

    # Left: SWA held per request.
    xs = range(len(hold))
    width = 0.38
    top = max(max(r[2], r[3]) for r in hold)
    for i, (label, colour, commit, decode) in enumerate(hold):
        ax1.bar(i - width / 2, commit, width, color=colour, edgecolor="black", lw=0.6)
        ax1.bar(i + width / 2, decode, width, color=colour, edgecolor="black", lw=0.6, hatch="//",
                alpha=0.75)
        for x, v in ((i - width / 2, commit), (i + width / 2, decode)):
            ax1.text(x, v + top * 0.01, f"{v:,.0f}", ha="center", va="bottom", fontsize=8)
    ax1.set_xticks(list(xs), [r[0] for r in hold], fontsize=8)
    ax1.set_ylim(0, top * 1.12)
    ax1.set_ylabel("SWA tokens held per request")
    ax1.set_title(f"SWA held per running request ({shape})", fontsize=10)
    ax1.bar(0, 0, color="white", edgecolor="black", label="after every chunk commit (max)")
    ax1.bar(0, 0, color="white", edgecolor="black", hatch="//", label="while decoding (mean)")
    ax1.legend(fontsize=8, loc="upper right", frameon=False)
    ax1.grid(axis="y", alpha=0.3)

    # Right: running requests at the lean pool.
    for i, (label, colour, mean, mx, retr) in enumerate(running):
        ax2.bar(i, mean, 0.6, color=colour, edgecolor="black", lw=0.6)
        ax2.plot(i, mx, marker="_", color="black", markersize=28, mew=2)
        inside = mean >= 7  # three lines of text fit in the bar
        ax2.text(i, mean / 2 if inside else mx + 0.4,
                 f"mean {mean:.1f}\nmax {mx:.0f}\n{retr:.0f} retractions",
                 ha="center", va="center" if inside else "bottom", fontsize=8)
    ax2.plot([], [], marker="_", color="black", markersize=14, mew=2, ls="none",
             label="max running")
    ax2.axhline(cap, ls="--", color="black", lw=1, label=f"cap (--max-running-requests {cap})")
    ax2.axhline(bind, ls=":", color="#d62728", lw=1.5,
                label=f"bind without islands: pool / chunk = {bind:.2f}")
    names = [r[0] for r in running]
    if MAIN_ISLANDS[0] not in names:
        ax2.text(len(running) - 0.5, cap + 1.0, f"{MAIN_ISLANDS[0]}: not in this file",
                 ha="right", va="center", fontsize=7, color="#555555")
    ax2.set_xticks(range(len(running)), names, fontsize=8)
    ax2.set_xlim(-0.5, len(running) - 0.5)
    ax2.set_ylim(0, cap + 7)
    ax2.set_ylabel("running requests (bar: time-weighted mean)")
    ax2.set_title(f"running requests, {a.pool}-equivalent SWA pool ({swa_pool:,} tokens), no reuse",
                  fontsize=10)
    ax2.legend(fontsize=8, loc="upper left", frameon=False)
    ax2.grid(axis="y", alpha=0.3)

    fig.suptitle("SWA KV held per request, and running requests at a lean SWA pool", fontsize=11)
    fig.text(0.5, 0.005, f"left: {_rel(a.hold)}, {_rel(a.hold_main)} ({a.core} core)\n"
             f"right: {_rel(a.admission)}, {_rel(a.admission_main)} (tiny model on CPU, w 32, "
             f"cp 512, cap {cap})", ha="center", va="bottom", fontsize=7, color="#555555")
    fig.tight_layout(rect=(0, 0.06, 1, 0.95))
    a.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(a.out, dpi=100)
    plt.close(fig)
    return a.out


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(
        prog=PROG, description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Inputs are committed result files; see the module docstring for the keys read.")
    ap.add_argument("--hold", type=pathlib.Path, default=INPUTS / "swa_hold_production.json",
                    help="0.5.15.post1 hold result (default: benchmarks/results/"
                         "swa_hold_production.json)")
    ap.add_argument("--hold-main", type=pathlib.Path,
                    default=INPUTS / "swa_hold_main_production.json",
                    help="0.5.23 hold result (default: benchmarks/results/"
                         "swa_hold_main_production.json)")
    ap.add_argument("--core", default="rust", choices=("rust", "python"),
                    help="0.5.23 tree core of the hold panel (default: %(default)s)")
    ap.add_argument("--admission", type=pathlib.Path, default=INPUTS / "admission_quick.json",
                    help="0.5.15.post1 admission result: upstream_POOL, islands_POOL "
                         "(default: benchmarks/results/admission_quick.json)")
    ap.add_argument("--admission-main", type=pathlib.Path,
                    default=INPUTS / "admission_quick_main.json",
                    help="0.5.23 admission result: main_POOL, main_islands_POOL if run "
                         "(default: benchmarks/results/admission_quick_main.json)")
    ap.add_argument("--pool", default="0.17", help="pool of the running panel (default: %(default)s)")
    ap.add_argument("--out", type=pathlib.Path, default=DEFAULT_OUT,
                    help="PNG to write (default: .work/front_page/front_page.png; the README's "
                         "picture: --out benchmarks/results/front_page.png)")
    a = ap.parse_args(argv)
    try:
        out = plot(a)
    except InputError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    print(f"{PROG}: wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
