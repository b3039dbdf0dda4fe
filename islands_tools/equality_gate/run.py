"""Equality gate, run: the plan (pages, model, workload, reference) and, per page, the arms booted,
their workloads run one boot at a time, and their results judged into a running tally.

Per page the arms are islands off (a boot, or the recorded reference) and islands on (a boot,
with the wrong-frontier shim under ``--negative-control``). A page whose boots fail sets the
tally's setup error, and the gate stops there.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
import threading
import time
from typing import Any, Optional

from .boot import Boot, BootData, Served
from .compare import evaluate
from .evidence import (bigram_keys, conservation_check, evidence, island_counters,
                                    print_conservation)
from .oracle import Oracle
from .setup import (fingerprint, model_hash, model_window, say, server_python,
                                 shim_dir)
from .workload import CPU_WINDOW, Req, Step, all_reqs, build_workload


class GateError(Exception):
    """The gate cannot run (exit 2); the message follows ``equality gate: error:``."""


@dataclasses.dataclass
class Plan:
    """What the gate runs: the CLI arguments (``oracle_policy`` resolved), the page sizes, the
    islands arm's label, the islands-off reference if one was given, the model and the workload."""

    args: argparse.Namespace
    pages: list[int]
    on_label: str
    reference: Optional[dict]
    model_dir: pathlib.Path
    vocab_hi: int
    window: Optional[int]
    steps: list[Step]

    @property
    def reqs(self) -> list[Req]:
        return all_reqs(self.steps)


def resolve_model(args: argparse.Namespace) -> tuple[pathlib.Path, int]:
    """The model directory (``--model``, or the tiny CPU model, built if missing) and the top of
    its real vocabulary (prompt token ids are drawn below it)."""
    if args.model:
        model_dir = pathlib.Path(args.model).resolve()
    else:
        from islands_harness.tiny_model import build_tiny_model

        model_dir = build_tiny_model(window=CPU_WINDOW)
    marker = model_dir / ".tiny_model_complete.json"
    vocab_hi = json.loads(marker.read_text()).get("real_vocab", 256) if marker.exists() else 256
    return model_dir, vocab_hi


def make_plan(args: argparse.Namespace) -> Plan:
    """Resolve the defaults, check the control shim and the reference, build the workload."""
    pages = [int(p) for p in (args.pages or ("1" if args.quick else "1,16")).split(",")]
    if args.oracle_policy is None:
        args.oracle_policy = "strict" if args.device == "cpu" else "report"
    on_label = "on+shim" if args.negative_control else "on"
    shim = shim_dir(args.target)
    if args.negative_control and not (shim / "sitecustomize.py").is_file():
        raise GateError(f"shim missing: {shim}/sitecustomize.py")
    python = server_python(args)
    if python is not None and not pathlib.Path(python).is_file():
        raise GateError(f"no server interpreter {python}"
                        + (" (build it with scripts/setup_main.sh --islands)"
                           if args.target == "main" else ""))
    reference = None
    if args.reference:
        try:
            reference = json.loads(pathlib.Path(args.reference).read_text())
        except (OSError, ValueError) as e:
            raise GateError(f"cannot read --reference: {e}") from e
    model_dir, vocab_hi = resolve_model(args)
    steps = build_workload(vocab_hi, args.quick, args.decode_interval, args.chunk)
    return Plan(args, pages, on_label, reference, model_dir, vocab_hi, model_window(model_dir),
                steps)


@dataclasses.dataclass
class Tally:
    """What the pages have found so far, and the JSON summary being built."""

    summary: dict[str, Any]
    failures: list[str] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)
    saved_ref: dict[str, Any] = dataclasses.field(default_factory=dict)
    setup_error: Optional[str] = None
    shim_active: Optional[bool] = None
    reqs_compared: int = 0

    @classmethod
    def start(cls, args: argparse.Namespace) -> "Tally":
        return cls({"pages": {}, "negative_control": args.negative_control,
                    "quick": args.quick, "device": args.device, "target": args.target})


def reference_arm(plan: Plan, page: int, fp: dict) -> BootData:
    """The islands-off arm of ``page`` from the reference; it must match the fingerprint."""
    entry = plan.reference.get("pages", {}).get(str(page))
    if not entry or entry.get("fingerprint") != fp:
        raise GateError(f"--reference has no matching islands-off run for page {page} "
                        f"(different workload, arguments or model)")
    return BootData(entry["prompts"], {k: Served(**v) for k, v in entry["results"].items()})


def page_arms(plan: Plan, page: int) -> tuple[dict, list[Boot], Optional[BootData], Boot]:
    """(fingerprint, boots to run, the off arm if it comes from the reference, the islands
    boot); the islands boot is always the last of the boots."""
    args = plan.args
    fp = fingerprint(page, plan.steps, args, model_hash(plan.model_dir)[:16])
    boots: list[Boot] = []
    off: Optional[BootData] = None
    if plan.reference is not None:
        off = reference_arm(plan, page, fp)
        say(f"page {page}: islands-off prompts and outputs from {args.reference} "
            f"(recorded by an earlier boot; fingerprint matches)")
    else:
        boots.append(Boot("off", plan.model_dir, page, False, args))
    on = Boot(plan.on_label.replace("+", "-"), plan.model_dir, page, True, args,
              shim=args.negative_control)
    boots.append(on)
    return fp, boots, off, on


def start_boots(boots: list[Boot], sequential: bool) -> None:
    if sequential:
        for b in boots:
            b.start()
    else:
        ths = [threading.Thread(target=b.start) for b in boots]
        [th.start() for th in ths]
        [th.join() for th in ths]


def boot_and_run(boots: list[Boot], steps: list[Step], args: argparse.Namespace,
                 page: int) -> Optional[str]:
    """Boot the arms, run the workload on each in turn (then its end reading, /flush_cache and
    the flushed reading), stop them all; returns the first setup error, or None."""
    on = boots[-1]
    how = ("one server at a time" if getattr(args, "one_server", False)
           else "one at a time" if args.sequential_boots else "together")
    say(f"page {page}: booting {', '.join(b.label for b in boots)} "
        f"({how}); the only difference: "
        f"--enable-swa-islands" + (" + the wrong-frontier shim" if on.shim else ""))
    say(f"  server args: {' '.join(on.server_args)}")
    say(f"  server env:  {' '.join(f'{k}={v}' for k, v in sorted(on.env.items()))}")
    if getattr(args, "one_server", False):
        return _one_server_at_a_time(boots, steps, page)
    try:
        start_boots(boots, args.sequential_boots)
        for b in boots:
            if b.error:
                return f"[{b.label} p{page}] {b.error}"
            say(f"  [{b.label} p{page}] up in {b.srv.boot_s:.1f} s, log {b.srv.log_path}")
        for b in boots:
            say(f"  [{b.label} p{page}] workload ...")
            b.run(steps)
            if b.error:
                return f"[{b.label} p{page}] {b.error}"
            b.end_of_workload_and_flush()
            b.after_flush()
            say(f"  [{b.label} p{page}] workload done in {b.work_s:.1f} s; flushed, "
                f"pools read")
    finally:
        for b in boots:
            b.stop()
    return None


def _one_server_at_a_time(boots: list[Boot], steps: list[Step], page: int) -> Optional[str]:
    """``--one-server``: each arm booted, run, read and stopped before the next boots."""
    for b in boots:
        try:
            b.start()
            if b.error:
                return f"[{b.label} p{page}] {b.error}"
            say(f"  [{b.label} p{page}] up in {b.srv.boot_s:.1f} s, log {b.srv.log_path}; "
                f"workload ...")
            b.run(steps)
            if b.error:
                return f"[{b.label} p{page}] {b.error}"
            b.end_of_workload_and_flush()
            b.after_flush()
            say(f"  [{b.label} p{page}] workload done in {b.work_s:.1f} s; flushed, pools read")
        finally:
            b.stop()
    return None


def warm_oracle(plan: Plan, page: int, off: BootData, on: BootData, oracle: Oracle) -> None:
    """Every prompt of both arms through the oracle (its cache, and the timing, before the
    report)."""
    t = time.monotonic()
    say(f"page {page}: HF oracle (transformers fp32 greedy) ...")
    for r in plan.reqs:
        oracle(off.prompts[r.name], r.n)
        if on.prompts[r.name] != off.prompts[r.name]:
            oracle(on.prompts[r.name], r.n)
    say(f"page {page}: HF oracle ready in {time.monotonic() - t:.1f} s ({oracle.calls} "
        f"computed so far, {oracle.hits} from the cache)")


def boot_checks(page: int, boots: list[Boot]) -> list[str]:
    """Each boot's pool conservation and its log's alarms."""
    failures = []
    for b in boots:
        print_conservation(f"{b.label} p{page}", b.readings)
        failures += conservation_check(f"{b.label} p{page}", b.readings)
        alarms = b.log_alarms()
        if alarms:
            failures.append(f"{b.label} p{page}: the server's own checks fired "
                            f"({len(alarms)} log lines), first: {alarms[0]}")
    return failures


def say_kv_kept(boots: list[Boot], on_label: str) -> None:
    if len(boots) == 2 and all(b.readings.get("end") for b in boots):
        ends = [b.readings["end"] for b in boots]
        say(f"  KV the tree keeps after the workload: SWA off {ends[0]['swa']['evictable']:.0f}"
            f" vs {on_label} {ends[1]['swa']['evictable']:.0f} tokens; full off "
            f"{ends[0]['full']['evictable']:.0f} vs {on_label} "
            f"{ends[1]['full']['evictable']:.0f} tokens")


def shim_ran(on: Boot) -> bool:
    """Whether the wrong-frontier shim installed itself and freed SWA KV in the islands boot."""
    lines = on.shim_lines()
    say(f"  shim: {len(lines)} log lines; " + (lines[-1] if lines else "NOT ACTIVE"))
    return any("installed" in ln for ln in lines) and any("freed SWA" in ln for ln in lines)


def judge_page(plan: Plan, page: int, boots: list[Boot], off: BootData, on: Boot,
               oracle: Oracle, tally: Tally) -> None:
    """Compare the arms, check the islands evidence and each boot's pools, add to the tally."""
    args, on_label = plan.args, plan.on_label
    on_data = BootData(on.prompts, on.results)
    warm_oracle(plan, page, off, on_data, oracle)
    say(f"page {page}: results (off vs {on_label}, like-for-like cache status; HF = "
        f"transformers fp32 greedy, policy {args.oracle_policy})")
    f_page, n_page, s_page = evaluate(page, plan.steps, off, on_data, oracle,
                                      args.oracle_policy == "strict", on_label)
    tally.reqs_compared += len(plan.reqs)
    tally.failures += f_page
    tally.notes += n_page
    counters = island_counters(on.metrics_end)
    tally.failures += evidence(page, plan.steps, on_data, counters, args.decode_interval,
                               on_label, off, bigram=bigram_keys(on.server_args))
    tally.failures += boot_checks(page, boots)
    say_kv_kept(boots, on_label)
    if on.shim:
        tally.shim_active = shim_ran(on)
    tally.summary["pages"][str(page)] = {
        **s_page, "cached_on": {k: v.cached_tokens for k, v in on.results.items()},
        "cached_off": {k: v.cached_tokens for k, v in off.results.items()},
        "conservation": {b.label: b.readings for b in boots},
        "island_counters": counters,
        "boot_s": {b.label: b.srv.boot_s for b in boots},
        "workload_s": {b.label: b.work_s for b in boots}}


def run_page(plan: Plan, page: int, oracle: Oracle, tally: Tally) -> None:
    """One page: arms, boots and workloads, then the judgement (skipped on a setup error)."""
    fp, boots, off, on = page_arms(plan, page)
    tally.setup_error = boot_and_run(boots, plan.steps, plan.args, page)
    if tally.setup_error:
        return
    if off is None:
        off = BootData(boots[0].prompts, boots[0].results)
        tally.saved_ref[str(page)] = {"fingerprint": fp, "prompts": off.prompts, "results": {
            k: dataclasses.asdict(v) for k, v in off.results.items()}}
    judge_page(plan, page, boots, off, on, oracle, tally)


def run_pages(plan: Plan, oracle: Oracle, tally: Tally) -> None:
    """Every page in order, stopping at the first setup error."""
    for page in plan.pages:
        run_page(plan, page, oracle, tally)
        if tally.setup_error:
            break
