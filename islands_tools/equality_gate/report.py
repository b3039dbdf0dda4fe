"""Equality gate, report: the saved islands-off reference, the JSON summary, and the verdict line
with its exit status (0 pass, 1 the gate failed, 2 it could not run).
"""

from __future__ import annotations

import argparse
import json
import pathlib

from .oracle import Oracle
from .run import Plan, Tally
from .setup import elapsed_s, say

MAX_FAILURES_SHOWN = 25


def save_reference(args: argparse.Namespace, tally: Tally) -> None:
    """``--save-reference``: the islands-off arm of every page, if every page ran."""
    if args.save_reference and tally.saved_ref and tally.setup_error is None:
        p = pathlib.Path(args.save_reference)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps({"pages": tally.saved_ref}))
        say(f"islands-off prompts and outputs saved to {p}")


def finish_summary(args: argparse.Namespace, tally: Tally, oracle: Oracle) -> None:
    """Print the notes, record a control whose shim never ran as a setup error, complete the
    summary and write it to ``--json-out``."""
    for n in tally.notes:
        say("NOTE " + n)
    if tally.setup_error is None and args.negative_control and not tally.shim_active:
        tally.setup_error = "negative control: the wrong-frontier shim did not run in the server"
    tally.summary.update({
        "failures": tally.failures, "notes": tally.notes, "setup_error": tally.setup_error,
        "shim_active": tally.shim_active, "seconds": round(elapsed_s(), 1),
        "oracle": {"computed": oracle.calls, "cached": oracle.hits,
                   "seconds": round(oracle.seconds, 1)}})
    if args.json_out:
        pathlib.Path(args.json_out).parent.mkdir(parents=True, exist_ok=True)
        pathlib.Path(args.json_out).write_text(json.dumps(tally.summary, indent=1, default=str))


def verdict(plan: Plan, tally: Tally) -> int:
    """Print the verdict (the failures first, at most 25) and return the exit status."""
    summary, failures = tally.summary, tally.failures
    same = sum(c["identical"] for pg in summary["pages"].values()
               for c in pg["per_class"].values())
    ctl = " (negative control)" if plan.args.negative_control else ""
    if tally.setup_error:
        say(f"ERROR {tally.setup_error}")
        print(f"EQUALITY GATE: ERROR{ctl}: could not run: {tally.setup_error.splitlines()[0]}",
              flush=True)
        return 2
    if failures:
        for f in failures[:MAX_FAILURES_SHOWN]:
            say("FAIL " + f)
        if len(failures) > MAX_FAILURES_SHOWN:
            say(f"FAIL ... and {len(failures) - MAX_FAILURES_SHOWN} more")
        first = next((pg["first_difference"] for pg in summary["pages"].values()
                      if pg["first_difference"]), None)
        where = (f"; first difference: page {first['page']} request {first['request']} "
                 f"token {first['token_index']}" if first else "")
        print(f"EQUALITY GATE: FAIL{ctl}: {same}/{tally.reqs_compared} requests identical "
              f"across boots, {len(failures)} problem(s){where} [{elapsed_s():.0f} s]",
              flush=True)
        return 1
    print(f"EQUALITY GATE: PASS: {same}/{tally.reqs_compared} requests identical across boots "
          f"(pages {','.join(map(str, plan.pages))}), islands hit, conservation ok, "
          f"{len(tally.notes)} engine-property note(s) "
          f"[{elapsed_s():.0f} s]", flush=True)
    return 0
