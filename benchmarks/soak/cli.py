#!/usr/bin/env python
"""Soak: the real CPU server (the tiny hybrid-SWA model) under a seeded random mix of traffic and
faults for a fixed time; every greedy output checked against transformers, pools, tree, log, RSS
and throughput checked at idle points in between.

    .venv/bin/python benchmarks/soak.py --quick                  # about 4 minutes (CI: test/server/test_soak.py)
    .venv/bin/python benchmarks/soak.py --minutes 30 --json benchmarks/results/soak_30min.json
    .venv/bin/python benchmarks/soak.py --quick --islands off    # the same soak with islands off
    .venv/bin/python benchmarks/soak.py --quick --target main    # islands on sglang 0.5.23
    .venv/bin/python benchmarks/soak.py --quick --target main --model gemma4 --speculative mtp

Targets: ``0.5.15`` (default: the server runs in this interpreter, `.venv`) and ``main`` (sglang
0.5.23: islands on run in `.venv-main-islands`, islands off is stock 0.5.23 in `.venv-main`;
``--eviction window`` adds ``--swa-islands-eviction window``). Models: the tiny Laguna (default)
or, on main, tiny Gemma 4 (``--model gemma4``: its server arguments, prompt ids below its
tokenizer's vocabulary, transformers 5.19 of `.venv-main-islands` as its oracle, near-ties within
1e-3 logits). Speculative decoding (main): ``--speculative ngram``, or ``mtp``, Gemma 4's own
drafter (Frozen-KV MTP with the tiny assistant); every decode step is then a verify, and the
report counts the aborts and disconnects that cut a request while it decoded. Stock 0.5.23
(``--target main --islands off``) gets no out-of-vocabulary ids (``workload.UNCHECKED_IDS``).

Server: page 1, chunked prefill 128, the tiny model's context (4096), ``--max-running-requests 8``
(clients: 12), a full pool of 2,400 tokens and an SWA pool of 20% of it (480 tokens: a chunk plus
eight islands fit; upstream's hold of a chunk per request does not), ``--swa-full-tokens-ratio 0.2``,
``SGLANG_INIT_NEW_TOKEN_RATIO=0.05`` (admission over-commits, so decode runs out of KV and
retracts), ``SGLANG_DEBUG_MEMORY_POOL=1`` (the allocator's double-free and bounds checks),
``SGLANG_REQUEST_STATE_WAIT_TIMEOUT=1``, ``--enable-metrics``; ``--enable-swa-islands`` (default
reclaim) unless ``--islands off``. Upstream's KV canary (``--kv-canary``) is not run: its kernels
are triton / CUDA JIT (``sglang/jit_kernel/kv_canary``), which do not run on CPU.

Traffic: each client thread draws one action at a time (weights in ``workload.ACTIONS``) from its
own seeded generator: a question on one of four shared documents (fan-out), the next turn of its own
conversation (multi-turn transcripts), an edit of a finished transcript cut at a random point
(branch), a prompt of several chunks, a streaming request read to the end, a streaming request whose
connection is killed after 0..8 events (client disconnect, mid-prefill or mid-decode), a request
aborted by rid (``/abort_request``) after a random delay (``workload.ABORT_DELAY_MAX_S``), a plain
``/flush_cache`` (400 while busy, 200 when idle), or a malformed request (ids outside the
vocabulary, negative, empty or non-integer ids, a prompt longer than the context, a negative or
absurd ``max_new_tokens``), which must get 400.

Checks, each a failure of the run (exit 1) when violated:

- every request that finished has exactly the output transformers' greedy decoding gives for its
  ids (``islands_harness.hf_oracle``, computed at each idle point for the requests since the last,
  while traffic is paused: wall time is about twice the traffic time); an aborted one, a prefix;
- every malformed request got 400; no answer was a 5xx; the server never died;
- at every idle point (traffic paused, the scheduler idle): nothing in use (``/get_load``, ``/v1/loads`` on 0.5.23), and
  after ``/flush_cache`` the pool gauges equal the ones read the same way after boot (both pools
  back to the baseline: the tree evicts to empty);
- the server log has no traceback;
- RSS at the last idle point is within 10% (plus 64 MiB) of the first.

Reported per idle point: requests by kind, retractions (``sglang:num_retracted_requests_total``),
cached tokens of the tree before the flush, RSS, and the interval's tokens (prompt + completion) per
server CPU-second, which should stay flat.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
import sys
import time

from _bench_path import ROOT  # the repository root (it and benchmarks/ go on sys.path)
from islands_harness.server import raise_keyboard_interrupt_on_signals
from islands_harness.speculative import ALL_MODES as SPEC_MODES
from sglang.srt.mem_cache.swa_island_formulas import EVICTION_ORDERS
from soak.report import write_md
from soak.run import Soak
from soak.setup import (MAX_RUNNING, MODELS, QUICK, TARGET_VERSION, TARGETS, WINDOW, SoakConfig,
                        model_vocab, server_command)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        prog="benchmarks/soak.py", description="\n\n".join(__doc__.split("\n\n")[:2]),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Exit status 1 when a check fails (the report's `failures` say which).")
    ap.add_argument("--quick", action="store_true",
                    help=f"about 4 minutes: {QUICK['minutes']} min of traffic, an idle point "
                         f"every {QUICK['idle_every_s']:.0f} s (CI)")
    ap.add_argument("--minutes", type=float, default=None, help="traffic time (default 30)")
    ap.add_argument("--idle-every", type=float, default=None,
                    help="seconds of traffic between idle points (default 120)")
    ap.add_argument("--clients", type=int, default=SoakConfig.clients,
                    help=f"client threads (default {SoakConfig.clients}; the cap is {MAX_RUNNING})")
    ap.add_argument("--islands", choices=("on", "off"), default="on")
    ap.add_argument("--target", choices=TARGETS, default="0.5.15",
                    help="0.5.15 (default, this interpreter) or main (sglang 0.5.23: "
                         ".venv-main-islands, or .venv-main with --islands off)")
    ap.add_argument("--eviction", choices=EVICTION_ORDERS, default=None,
                    help="main with islands on: --swa-islands-eviction (default: the server's)")
    ap.add_argument("--hicache", action="store_true",
                    help="main: with HiCache's host tier; hits on what the small device pool "
                         "evicted load back from the host, and the checks cover the host tier "
                         "(its usage back at baseline after each flush, host loads seen)")
    ap.add_argument("--held-copies", type=int, default=0, metavar="POLLS",
                    help="--hicache: hold each transfer pending for POLLS polls and each backup's "
                         "copy until then, as a GPU's asynchronous copies may (SGLANG_TEST_HICACHE_"
                         "CPU_COPY_DELAY_POLLS, patches-main/0012; default 0: done at submission)")
    ap.add_argument("--speculative", choices=SPEC_MODES, default="none",
                    help="main: decode speculatively (islands_harness.speculative): ngram, or mtp "
                         "(Frozen-KV MTP, --model gemma4 only); every decode step is a verify, so "
                         "aborts, disconnects and retractions land mid-verify")
    ap.add_argument("--model", choices=MODELS, default="laguna",
                    help="the tiny model served (islands_harness.models; default laguna); "
                         "gemma4: main only")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None, help="report (default .work/soak/<stamp>.json)")
    ap.add_argument("--md", default=None, help="markdown report (default next to the JSON)")
    a = ap.parse_args(argv)
    cfg = SoakConfig(clients=a.clients, seed=a.seed, islands=a.islands == "on", target=a.target,
                     eviction=a.eviction, hicache=a.hicache,
                     held_copies=a.held_copies, speculative=a.speculative, model=a.model)
    server_command(cfg)  # a bad combination or a missing venv fails before the model is built
    if a.quick:
        cfg = dataclasses.replace(cfg, **QUICK)
    if a.minutes is not None:
        cfg.minutes = a.minutes
    if a.idle_every is not None:
        cfg.idle_every_s = a.idle_every
    raise_keyboard_interrupt_on_signals()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out_json = pathlib.Path(a.json) if a.json else ROOT / ".work" / "soak" / f"{stamp}.json"
    out_json.parent.mkdir(parents=True, exist_ok=True)
    out_md = pathlib.Path(a.md) if a.md else out_json.with_suffix(".md")
    log_path = ROOT / ".work" / "soak" / f"server-{a.target}-{a.islands}-{stamp}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)

    def progress(msg: str) -> None:
        print(f"[soak {time.strftime('%H:%M:%S')}] {msg}", flush=True)

    from islands_harness.models import get_model

    model = get_model(cfg.model).build(window=WINDOW)
    vocab, real_vocab = model_vocab(model)
    assistant = None
    if cfg.speculative == "mtp":
        from islands_harness.main_arm import main_islands_python
        from islands_harness.speculative import build_assistant

        assistant = build_assistant(model, main_islands_python())  # the tests' build, both arms
    progress(f"sglang {TARGET_VERSION[cfg.target]}, {cfg.model}, {cfg.minutes} min, "
             f"{cfg.clients} clients, idle point every {cfg.idle_every_s:.0f} s, islands "
             f"{a.islands}, speculative {cfg.speculative}, seed {cfg.seed}")
    soak = Soak(cfg, model, vocab, real_vocab, log_path, progress, assistant)
    try:
        rep = soak.run()
    finally:
        soak.srv.stop()
        soak.close_oracle()
    # what the markdown says of the run is the report's own: the markdown renders from it alone
    rep["command"] = " ".join([".venv/bin/python", "benchmarks/soak.py", *(argv or sys.argv[1:])])
    rep["date"] = time.strftime("%Y-%m-%d %H:%M")
    out_json.write_text(json.dumps(rep, indent=1) + "\n")
    write_md(rep, out_md)
    progress(f"{'PASS' if rep['passed'] else 'FAIL'}: {rep['mismatch_count']} mismatches, "
             f"{rep['leaks']} leaks, {rep['tracebacks']} tracebacks; wrote {out_json}, {out_md}")
    for f in rep["failures"]:
        progress(f"failure: {f}")
    return 0 if rep["passed"] else 1
