#!/usr/bin/env python
"""Decode-region reuse benchmark on the real SGLang server (CPU, tiny hybrid-SWA model): how much
of a running (or just finished) request's output the next request finds in the radix cache, what
that saves in prefill, and what the SWA pool holds, for upstream SGLang (with and without its two
off-by-default SWA knobs) and SWA islands.

Every arm boots `python -m sglang.launch_server` (through `islands_harness.server.SglangServer`)
with identical arguments (`SERVER_ARGS`: window 32, page 1, chunked prefill 512 so the default
decode-island interval is 512/4 = 128, `--decode-log-interval 1`, `--enable-metrics`);
`upstream_knobs` adds `islands_harness.knobs.UPSTREAM_KNOBS_ENV` (split leaf on insert, release
the leaf lock after the window) to the environment, `islands` adds `--enable-swa-islands`. The arms
on upstream main (sglang 0.5.23, its own `UnifiedRadixCache`; `islands_harness.main_arm`) run when
named in `--arms`: `main` is stock 0.5.23 booted from `.venv-main` (`scripts/setup_main.sh`) with
the same arguments; `main_knobs` adds main's two off-by-default SWA knobs to its environment
(`SGLANG_OPT_UNIFIED_CACHE_FREE_OUT_OF_WINDOW_SLOTS=0 SGLANG_OPT_RELEASE_PREFILL_SWA=1`),
`main_free_off` and `main_release_prefill` one each; `main_islands` is 0.5.23 with the main
islands series from `.venv-main-islands` (`scripts/setup_main.sh --islands`) and
`--enable-swa-islands`.
One run does the arms one after the other, with the same seeded workload. The radix cache is flushed between phases, so the phases do not feed each other:

1. `follow_up`: request A (prompt `--prompt-len`) streams; once it has generated
   >= k*128 + delta tokens, B = A's prompt + A's output so far + 20 new tokens is sent while A still
   runs (A may generate `--run-on` more and is aborted once B returned; `--no-abort-previous`: it
   runs 96 more to its end). `hit_tokens_on_running_output` = B's cached_tokens - len(prompt) (>= 0);
   `expected_min_hit_tokens` = k*128 for islands and main_islands (the decode-island floor at
   page 1) and 0 for the upstream and main arms (which cache a running request's prompt only:
   neither knob inserts during decode, and main inserts generated text at finish).
2. `conversation_<mode>`: one conversation of `--turns` turns shaped like the measured upstream
   baseline (prompt 2000, 300 tokens per turn, 50 new user tokens): each turn re-sends the
   transcript. `after_finish`: a turn is sent when the previous one finished; `while_running`: as
   soon as the previous turn has streamed its tokens (it may run `--run-on` more and is aborted
   once the next turn's first token streamed; the last turn generates its tokens only.
   `--no-abort-previous`: every turn runs its `--run-on` more to its end). The abort keeps the
   previous turn running however far the client's stream lags the server (255 tokens seen on a
   loaded 2-core machine), so a while_running turn measures a running output's reuse; turns
   admitted after their previous one finished anyway are named under the table.
3. `agents`: `--agents` concurrent seeded agents (prompt, per-turn output and tool-result lengths
   drawn from the seed), each a `while_running` conversation of `--turns` turns: the agent sends
   its next turn (transcript + tool result) as soon as the previous turn has streamed the tokens
   it acts on, while that turn still runs.

Measured per arm and phase:

- cached-token share per turn: sum(cached_tokens) / sum(prompt_tokens) over the agents' turn j;
- prefill tokens computed: sum over requests of prompt_tokens - cached_tokens (client view), and
  the sum of the scheduler's `Prefill batch ... #new-token` (server view, log);
- peak SWA pool use (`peak_swa_used`): max of `#swa token` on the `Decode batch` lines (exact,
  every step with `--decode-log-interval 1`; `peak_swa_used_decode`) and `swa token usage` x
  pool size on `Prefill batch` lines (a two-decimal ratio: +-0.005 x pool;
  `peak_swa_used_prefill`), plus the max of `sglang:swa_used_tokens` sampled from /metrics every
  0.25 s (`peak_swa_used_metrics`; misses short peaks);
- decode islands inserted (`sglang:swa_island_decode_inserts`, islands only);
- whether every arm's outputs equal the first arm's (`upstream` when it runs; token ids,
  temperature 0), and whether that arm's outputs equal transformers' greedy decoding of the same
  input ids (fp32, CPU; `--no-hf-check` skips it).

Examples::

    .venv/bin/python benchmarks/decode_reuse.py --quick
    .venv/bin/python benchmarks/decode_reuse.py --model gemma4 --arms main,main_knobs,main_islands \\
        --omp-threads 1   # tiny Gemma 4 (islands_harness.models), served on the 0.5.23 arms only
    .venv/bin/python benchmarks/decode_reuse.py --json benchmarks/results/decode_reuse.json \\
        --md benchmarks/results/decode_reuse.md
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
import shlex
import sys
import time
from typing import Any

import _bench_path  # noqa: F401  (the repository root and benchmarks/ on sys.path)
from decode_reuse.report import (admitted_after_previous_finished, compare_outputs, hf_check,
                                 markdown, reference_arm)
from decode_reuse.run import run_arm
from decode_reuse.setup import (ARMS, BASELINE, SERVER_ARGS, T0, WINDOW, arm_python, arm_target,
                                full_shape, progress, quick_shape)
from islands_harness.models import MODELS, get_model, real_vocab


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="benchmarks/decode_reuse.py",
        description="Decode-region prefix reuse on the real SGLang server (CPU, tiny hybrid-SWA "
                    "model), arms upstream, upstream_knobs and islands (and, when named, the arms on sglang "
                    "0.5.23: main (stock), main_knobs (its two SWA knobs), main_free_off, "
                    "main_release_prefill, main_islands (.venv-main-islands, --enable-swa-islands)) "
                    "in one run.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--quick", action="store_true",
                    help="small shape (prompt 1000, 2 turns of 160 tokens, 2 agents, "
                         "while_running only): a few minutes instead of ~half an hour")
    ap.add_argument("--prompt-len", type=int, default=2000, help="(a) and (b) prompt tokens")
    ap.add_argument("--k", type=int, default=2, help="(a): B is sent at >= k*128 + delta tokens")
    ap.add_argument("--delta", type=int, default=8)
    ap.add_argument("--turns", type=int, default=3, help="turns per conversation / agent")
    ap.add_argument("--gen", type=int, default=300, help="(b): tokens per turn")
    ap.add_argument("--user", type=int, default=50, help="(b): new user tokens per turn")
    ap.add_argument("--run-on", type=int, default=512,
                    help="while_running: tokens a turn may generate after it was re-sent (and A "
                         "after B was sent); it is aborted once the next request was served")
    ap.add_argument("--no-abort-previous", dest="abort_previous", action="store_false",
                    help="let A and every while_running turn run their --run-on more tokens to "
                         "the end instead (A: 96), as runs before 2026-12-05 did")
    ap.add_argument("--modes", default="after_finish,while_running",
                    help="(b) conversation modes, comma separated")
    ap.add_argument("--agents", type=int, default=4, help="concurrent agents")
    ap.add_argument("--agent-prompt", type=int, nargs=2, default=(1500, 2500), metavar=("LO", "HI"))
    ap.add_argument("--agent-gen", type=int, nargs=2, default=(200, 300), metavar=("LO", "HI"))
    ap.add_argument("--agent-tool", type=int, nargs=2, default=(30, 120), metavar=("LO", "HI"))
    ap.add_argument("--seed", type=int, default=20261129)
    ap.add_argument("--arms", default="upstream,upstream_knobs,islands", help="comma separated, of "
                    + ", ".join(ARMS))
    ap.add_argument("--model", default="laguna", choices=list(MODELS),
                    help="the tiny model served (islands_harness.models); gemma4 and gemma4-moe "
                         "run on the 0.5.23 arms only")
    ap.add_argument("--extra-server-args", default="", help="appended to every arm's arguments")
    ap.add_argument("--omp-threads", type=int, default=2,
                    help="OMP threads of each server (1 on a machine other jobs load: two threads "
                         "spin against each other there, tiny Gemma 4 ran 10-30x slower)")
    ap.add_argument("--no-hf-check", dest="hf_check", action="store_false",
                    help="skip comparing the reference arm's outputs with transformers' greedy "
                         "decoding of the same input ids (fp32, CPU; about a minute)")
    ap.add_argument("--json", default=None, help="write the result JSON here")
    ap.add_argument("--md", default=None, help="write the markdown table here")
    a = ap.parse_args(argv)
    shape = quick_shape(a.seed) if a.quick else full_shape(a)
    arm_names = a.arms.split(",")
    if set(arm_names) - set(ARMS):
        ap.error(f"unknown arms {set(arm_names) - set(ARMS)}")
    tiny = get_model(a.model)
    unserved = [arm for arm in arm_names if not tiny.serves_on(arm_target(arm))]
    if unserved:
        ap.error(f"--model {a.model} is served on {', '.join(tiny.targets)} only: arms "
                 f"{', '.join(unserved)} run {', '.join(sorted({arm_target(x) for x in unserved}))}")

    model = tiny.build(window=WINDOW)
    vocab_hi = real_vocab(model)
    command = " ".join(shlex.quote(x) for x in [".venv/bin/python", "benchmarks/decode_reuse.py",
                                                 *(argv if argv is not None else sys.argv[1:])])
    progress(f"shape {dataclasses.asdict(shape)}")
    arms = {}
    for arm in arm_names:
        arms[arm] = run_arm(model, vocab_hi, arm, shape, shlex.split(a.extra_server_args),
                            list(tiny.server_args), a.omp_threads)
    result: dict[str, Any] = {
        "arms": arms, "command": command, "model": a.model, "shape": dataclasses.asdict(shape),
        "server_args": SERVER_ARGS, "model_server_args": list(tiny.server_args),
        "arm_args": {n: ARMS[n] for n in arm_names},
        "baseline_upstream": BASELINE, "runtime_s": round(time.monotonic() - T0, 1),
    }
    if len(arms) > 1:
        result["outputs"] = compare_outputs(arms)
    else:
        result["outputs"] = {"requests_compared": 0, "differ": {}, "all_equal": None}
    if a.hf_check and arms:
        result["hf"] = hf_check(model, arms, python=None if tiny.serves_on("0.5.15.post1")
                                else arm_python(reference_arm(arms)))
    for arm in arms.values():
        arm.pop("_outputs")
        arm.pop("_inputs")
    for name, arm in arms.items():
        late = admitted_after_previous_finished(arm)
        if late:
            progress(f"WARNING {name}: admitted after the previous turn had finished: "
                     f"{', '.join(late)}; raise --run-on for a while-running measurement")
    md = markdown(result) if len(arms) else ""
    print(md)
    if a.json:
        pathlib.Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        pathlib.Path(a.json).write_text(json.dumps(result, indent=1) + "\n")
        progress(f"wrote {a.json}")
    if a.md:
        pathlib.Path(a.md).parent.mkdir(parents=True, exist_ok=True)
        pathlib.Path(a.md).write_text(md)
        progress(f"wrote {a.md}")
    return 0
