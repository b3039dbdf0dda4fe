"""Two-boot equality gate: SWA islands must be invisible in the outputs.

Boots the real SGLang server (CPU, tiny random-weight hybrid-SWA model from
islands_harness.tiny_model) twice per page size, once with ``--enable-swa-islands`` and once
without, every other argument and environment variable identical, runs the same temperature-0
workload on both, and demands byte-identical output token ids request by request.
``--device cuda`` is the same gate on a GPU (scripts/gpu_gate.sh drives it).

Shape (like production, scaled down): sliding window w=32, chunked prefill cp=512 (cp/(w+p) is
15.5 at page 1, as 16384/1088 is in production), decode islands every 64 committed tokens
(``--swa-islands-decode-interval 64``), page 1 and, in the full run, page 16 (the CPU path
needs TRITON_INTERPRET=1 for the paged allocator; the gate sets it for page > 1 in both boots).

Workload classes (each request is one /generate call on token ids, ignore_eos, greedy):
  cold        distinct prompts, several longer than one chunk (chunk islands fire), nothing cached
  reserve     the same prompts again: cache-hit re-serves
  extension   a base request generating 4 decode islands' worth (4 x interval + 8 tokens);
              mid-run probes that re-send the base prompt plus the output streamed so far WHILE
              the base is still generating, just past its 2nd and its 3rd decode island
              (their cached prefix can only come from a decode island); links whose prompt is
              the previous link's prompt + output and that generate further (the prefix they
              reuse holds >= 4 decode islands, and its last window is island data)
  concurrent  requests sharing a cached prefix, fired together from threads, then re-served
              together
  multiturn   transcripts: each turn re-sends the whole conversation plus new user text
Chained prompts (links, probes, later turns) are built in each boot from that boot's own outputs
(as a client would), so nothing depends on HF agreeing with the server; a chained prompt that
differs between the boots is reported as a consequence of an earlier difference.

Comparisons. Across the two boots, request by request, only like with like: cold against cold
and cache-hit against cache-hit (a request's status is cached_tokens > 0 in meta_info; a pair
whose status differs between the boots is a workload error, never compared as if equal).
Cache-hit against cold is never compared: a cache-hit serve recomputes only the suffix past the
cached prefix, under different kernel tiling, and may flip a borderline argmax on an unmodified
engine. Every output is also compared with transformers' fp32 greedy decoding (hf_oracle) as an
independent witness. Policy:
  - off != on                       FAIL (islands visible); the report says which side matches HF
  - off == on != HF, cold serve     FAIL (the engine's simplest path disagrees with the oracle:
                                    the harness, not islands, is broken, and nothing is proven)
  - off == on != HF, cache-hit      reported as an ENGINE PROPERTY note (same flip with islands off
                                    and on, so not islands); not a failure
Evidence (the gate proves nothing if islands never did anything): in the islands boot, the
cache-hit classes must have cached_tokens > 0, at least one mid-run probe must have
cached_tokens beyond the running request's prompt and beyond what an earlier probe of the same
request inserted when it finished (a decode-island hit), extension links must reach at least
four decode intervals past the base prompt, and, where the server exports them
(sglang:swa_island_chunk_inserts / _decode_inserts), chunk and decode island counters must be > 0.

Conservation, read from the server itself: the ``--enable-metrics`` gauges
sglang:{kv,swa}_{available,evictable,used}_tokens (full and SWA pool; available = the allocator's
free slots, evictable = the tree's unlocked cached tokens, used = pool - both), which the
scheduler refreshes at every decode step (``--decode-log-interval 1``) and every 30 s when idle.
Three readings per boot, each pool:
  boot     right after boot; the boot's /health_generate probe (input_ids [0], one token) has
           run, so a token or two may be cached; used must be 0
  end      after the workload, from the decode step that finished the last request (or the idle
           log): used == 0 and available + evictable == pool size, i.e. every slot is either free
           or owned by the tree: no leak (used > 0) and no double free (used < 0)
  flushed  after /flush_cache and the same /health_generate probe again: exactly the boot reading
/flush_cache clears the allocator wholesale, so "flushed == boot" mostly shows that the flush and
the pools' bookkeeping work; "end" is the reading that can catch an islands leak or double free.
Both boots also run with the server's per-step pool invariant assertion
(SGLANG_ENABLE_STRICT_MEM_CHECK_DURING_BUSY=1; strict idle check too) and its per-step free-list
double-free / use-after-free check (SGLANG_CHECK_KV_PAGE_INVARIANTS=1); the server log is scanned
for their messages.

Negative control (``--negative-control``): the islands boot gets test/shims/wrong_frontier on its
PYTHONPATH (a sitecustomize that frees SWA KV a window past the frontier, see its docstring), with
the server's own invariant checks off so that the run completes; the gate must then FAIL on the
outputs. ``--save-reference FILE`` / ``--reference FILE`` reuse the islands-off boot of an
earlier run (same workload and arguments, checked by fingerprint) so the control boots once.

Exit status: 0 pass; 1 the gate failed (difference, conservation, missing evidence); 2 the gate
could not run (server did not boot, request error, bad reference, shim not active).

Modules of this package (``scripts/equality_gate.py`` is its entry point): ``workload`` (the
requests), ``setup`` (paths, both boots' arguments and environment, reference fingerprint),
``boot`` (one server boot: workload, pool readings, log alarms), ``oracle`` (the HF witness),
``compare`` (off vs on vs HF, request by request), ``evidence`` (islands evidence, conservation),
``run`` (the plan, each page's arms), ``report`` (reference file, JSON summary, verdict and exit
status), ``cli`` (this module: the parser and ``main``).

Examples:
  scripts/equality_gate.sh --quick                      # page 1, ~1-2 min on 2 idle cores
  scripts/equality_gate.sh                              # full: pages 1 and 16
  scripts/equality_gate.sh --quick --save-reference /tmp/ref.json
  scripts/equality_gate.sh --quick --negative-control --reference /tmp/ref.json   # must exit 1
  scripts/equality_gate.sh --target main --quick        # the same on sglang 0.5.23
                                                        # (.venv-main-islands)
"""

from __future__ import annotations

import argparse
import pathlib
import shlex
import sys
from typing import Optional

from .boot import Boot
from .compare import expected_status
from .oracle import Oracle
from .report import finish_summary, save_reference, verdict
from .run import GateError, Plan, Tally, make_plan, run_pages
from .setup import DEFAULT_ORACLE_CACHE, WORK_DIR, say, server_python
from .workload import (
    CLASSES, CPU_CHUNK, CPU_DECODE_INTERVAL, CPU_WINDOW, Req, Step, all_reqs, build_workload,
    workload_hash)

# The gate's names that test/tools/test_equality_gate.py reads from this module.
__all__ = ["CLASSES", "CPU_CHUNK", "Req", "Step", "all_reqs", "build_workload",
           "expected_status", "main", "make_parser", "workload_hash"]


def make_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="scripts/equality_gate.sh",
        description="Two-boot equality gate: boot the real SGLang server with and without "
                    "--enable-swa-islands (everything else identical), run the same greedy "
                    "workload (cold, cache-hit re-serves, extensions >= 4 decode islands deep "
                    "with mid-run decode-island probes, concurrent shared prefixes, multi-turn), "
                    "require byte-identical outputs, check them against transformers' fp32 "
                    "greedy, and check KV pool conservation from the server's own gauges.",
        epilog="Exit 0: pass. 1: the gate failed (first differing request and token printed). "
               "2: it could not run. The module docstring (islands_tools/equality_gate/cli.py) explains "
               "the comparison policy, the evidence and the conservation readings.",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", choices=("0.5.15", "main"), default="0.5.15",
                    help="0.5.15 (default): both boots run this interpreter (the pinned .venv, "
                         "sglang 0.5.15.post1 with the series). main: both boots run sglang "
                         "0.5.23 with the main islands series (.venv-main-islands, "
                         "scripts/setup_main.sh --islands), islands off vs --enable-swa-islands; "
                         "the negative control uses test/shims/wrong_frontier_main. The gate "
                         "itself (workload, HF oracle) always runs in this interpreter")
    ap.add_argument("--python", default=None,
                    help="the servers' interpreter (default: see --target)")
    ap.add_argument("--quick", action="store_true",
                    help="small workload, page 1 only (~1 min on 2 idle cores, plus ~1 min "
                         "for the HF oracle when its cache is cold)")
    ap.add_argument("--pages", default=None,
                    help="comma-separated page sizes (default: 1 with --quick, else 1,16)")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                    help="cpu (default): SglangServer's CPU boot (torch_native, fp32, no graphs). "
                         "cuda: the GPU gate's boot (scripts/gpu_gate.sh); give the backend, "
                         "graphs, KV dtype and speculative mode with --server-args")
    ap.add_argument("--model", default=None, help="model directory (default: the tiny CPU model, "
                    f"window {CPU_WINDOW})")
    ap.add_argument("--chunk", type=int, default=CPU_CHUNK,
                    help=f"--chunked-prefill-size (default {CPU_CHUNK}); prompt lengths scale "
                         f"with it")
    ap.add_argument("--decode-interval", type=int, default=CPU_DECODE_INTERVAL,
                    help=f"--swa-islands-decode-interval for both boots (default "
                         f"{CPU_DECODE_INTERVAL}; the flag's own default would be chunk/4)")
    ap.add_argument("--max-total-tokens", type=int, default=32768,
                    help="full pool size (default 32768, SWA pool 16384 at ratio 0.5: no pool "
                         "pressure for either workload, so a request's cache status is the same "
                         "in both boots)")
    ap.add_argument("--swa-ratio", type=float, default=0.5,
                    help="--swa-full-tokens-ratio (default 0.5)")
    ap.add_argument("--server-args", default="",
                    help="more sglang arguments for both boots (one shell-quoted string)")
    ap.add_argument("--oracle-policy", choices=("strict", "report"), default=None,
                    help="strict: a cold serve that differs from HF (identically in both boots) "
                         "fails the gate; report: it is only noted. Default: strict on cpu (fp32 "
                         "like HF), report on cuda (bf16 weights, fp8 KV)")
    ap.add_argument("--oracle-device", default="cpu",
                    help="device for the HF oracle (default cpu, as islands_harness.hf_oracle; "
                         "the GPU gate uses cuda)")
    ap.add_argument("--oracle-python", default=None, metavar="PYTHON",
                    help="decode the oracle with this interpreter's transformers (default: this "
                         "process's); tiny Gemma 4 needs transformers >= 5.19, .venv-main's")
    ap.add_argument("--omp-threads", type=int, default=2,
                    help="OMP threads per CPU server and for the HF oracle (default 2)")
    ap.add_argument("--negative-control", action="store_true",
                    help="islands boot with the wrong-frontier shim (test/shims/wrong_frontier); "
                         "the gate must FAIL (exit 1)")
    ap.add_argument("--wrong-frontier-shift", type=int, default=None,
                    help="with --negative-control: tokens past the frontier the shim frees "
                         "(default: the cache's window)")
    ap.add_argument("--save-reference", default=None, metavar="FILE",
                    help="write the islands-off boot's prompts and outputs (per page) to FILE")
    ap.add_argument("--reference", default=None, metavar="FILE",
                    help="use FILE (from --save-reference, same workload and arguments) instead "
                         "of booting islands off")
    ap.add_argument("--oracle-cache", default=str(DEFAULT_ORACLE_CACHE),
                    help="HF oracle results cache, keyed by model files and library versions "
                         "('' to disable)")
    ap.add_argument("--kv-page-invariants", action=argparse.BooleanOptionalAction, default=True,
                    help="run the server's per-step free-list double-free / use-after-free check "
                         "(SGLANG_CHECK_KV_PAGE_INVARIANTS=1) in both boots (default on; on CPU it "
                         "adds ~15%% scheduler CPU at a 32768-token pool, but ~5x at 65536)")
    ap.add_argument("--sequential-boots", action="store_true",
                    help="boot one server at a time (default: both start together; the "
                         "workloads always run one boot at a time, and --sleep-on-idle keeps the "
                         "idle one off the CPU)")
    ap.add_argument("--one-server", action="store_true",
                    help="never more than one server alive: boot, run the workload, read the "
                         "pools and stop each arm before the next boots (slower: no overlap "
                         "of one boot with the other's workload; for a shared machine)")
    ap.add_argument("--boot-timeout", type=float, default=400.0)
    ap.add_argument("--request-timeout", type=float, default=600.0)
    ap.add_argument("--log-dir", default=str(WORK_DIR / "logs"), help="server logs")
    ap.add_argument("--json-out", default=None, help="write a machine-readable summary here")
    ap.add_argument("--print-commands", action="store_true",
                    help="print each boot's server command line and environment, run nothing")
    return ap


def print_commands(plan: Plan) -> None:
    """``--print-commands``: each boot's environment and server command line, per page."""
    for page in plan.pages:
        for label, islands, shim in (("off", False, False),
                                     (plan.on_label, True, plan.args.negative_control)):
            b = Boot(label, plan.model_dir, page, islands, plan.args, shim=shim)
            b.srv.port = 30000
            print(f"# page {page}, islands {label}: "
                  + " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(b.env.items())))
            print(" ".join(shlex.quote(c) for c in b.srv.command()))


def announce(plan: Plan) -> None:
    args, reqs = plan.args, plan.reqs
    say(f"target {args.target} (servers: {server_python(args) or sys.executable}); model "
        f"{plan.model_dir} (window {plan.window}, vocab {plan.vocab_hi}); device "
        f"{args.device}; pages {plan.pages}; chunk {args.chunk}, decode interval "
        f"{args.decode_interval}; {'quick' if args.quick else 'full'} workload "
        f"{workload_hash(plan.steps)}: {len(reqs)} requests, {sum(r.n for r in reqs)} tokens to "
        f"generate" + (f"; NEGATIVE CONTROL (shift {args.wrong_frontier_shift or 'w'})"
                       if args.negative_control else ""))


def main(argv: Optional[list[str]] = None) -> int:
    """The gate: parse, plan (or print the boot commands), run each page's arms and judge them,
    then report; returns the exit status."""
    args = make_parser().parse_args(argv)
    try:
        plan = make_plan(args)
        if args.print_commands:
            print_commands(plan)
            return 0
        announce(plan)
        oracle = Oracle(plan.model_dir,
                        pathlib.Path(args.oracle_cache) if args.oracle_cache else None,
                        args.omp_threads, args.oracle_device, args.oracle_python)
        tally = Tally.start(args)
        run_pages(plan, oracle, tally)
    except GateError as e:
        print(f"equality gate: error: {e}", file=sys.stderr)
        return 2
    save_reference(args, tally)
    finish_summary(args, tally, oracle)
    return verdict(plan, tally)


if __name__ == "__main__":
    sys.exit(main())
