#!/usr/bin/env python
"""Run one ``benchmarks/prefix_reuse.py`` command several times and judge issue 50's done-when on
the per-cell means (``prefix_reuse/repeats.py`` says why).

    .venv/bin/python benchmarks/prefix_reuse_repeats.py --runs 3 --out DIR -- \\
        --quick --pools 0.17-eq,0.10-eq --arms main_hicache,main_islands,main_islands_hicache
    .venv/bin/python benchmarks/prefix_reuse_repeats.py --out DIR --from-existing   # re-summarize

Writes ``DIR/rK.json`` / ``rK.md`` per run (``prefix_reuse.py --json/--md``, no plot) and
``DIR/summary.json`` / ``DIR/summary.md``; a run that already has its ``rK.json`` is not run again
(so an interrupted series resumes). Progress: each run logs as ``prefix_reuse.py`` does.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

import _bench_path  # noqa: F401  (the repository root and benchmarks/ on sys.path)
from prefix_reuse import cli
from prefix_reuse.arms import CPU
from prefix_reuse.repeats import summarize, to_markdown


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3, help="how many runs of the command (default 3)")
    ap.add_argument("--out", required=True, help="directory of the runs' JSON and the summary")
    ap.add_argument("--from-existing", action="store_true",
                    help="run nothing: summarize the rK.json already in --out")
    ap.add_argument("prefix_reuse_args", nargs=argparse.REMAINDER,
                    help="after --: the arguments of benchmarks/prefix_reuse.py for every run")
    a = ap.parse_args(argv)
    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    args = [x for x in a.prefix_reuse_args if x != "--"]
    if not a.from_existing:
        if not args:
            ap.error("give the prefix_reuse.py arguments after --")
        bad = {"--json", "--md", "--png", "--out"} & set(args)
        if bad:
            ap.error(f"{', '.join(sorted(bad))}: the repeats choose each run's outputs")
        for k in range(1, a.runs + 1):
            if (out / f"r{k}.json").exists():
                print(f"[repeats] run {k}/{a.runs}: {out / f'r{k}.json'} exists, kept", flush=True)
                continue
            print(f"[repeats] run {k}/{a.runs}", flush=True)
            rc = cli.main([*args, "--json", str(out / f"r{k}.json"), "--md", str(out / f"r{k}.md"),
                           "--log-dir", str(out / "logs")])
            if rc != 0:
                print(f"[repeats] run {k} exited {rc}; its JSON (if written) is summarized",
                      flush=True)
    files = sorted(out.glob("r*.json"), key=lambda f: int(f.stem[1:]) if f.stem[1:].isdigit() else 0)
    files = [f for f in files if f.stem[1:].isdigit()]
    if not files:
        ap.error(f"no rK.json in {out}")
    summary = summarize([json.loads(f.read_text()) for f in files], CPU.page)
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    (out / "summary.md").write_text(to_markdown(summary))
    s = summary["summary"]
    print(f"[repeats] {len(files)} runs -> {out / 'summary.md'}: {s['pass']} PASS, {s['fail']} FAIL "
          f"({s['fail_beyond_noise']} beyond 2 x noise)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
