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
import random
import shlex
import sys
import threading
import time
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from islands_harness import sched_log  # noqa: E402
from islands_harness.client import MetricsSampler, fetch_metrics  # noqa: E402
from islands_harness.conversations import (  # noqa: E402
    LogScan,
    Turn,
    conversation,
    flush_cache_when_idle,
    follow_up_while_running,
    random_ids,
)
from islands_harness.provenance import code_version  # noqa: E402
from islands_harness.knobs import UPSTREAM_KNOBS_ENV  # noqa: E402
from islands_harness.main_arm import (  # noqa: E402
    MAIN_FREE_OFF_ENV,
    MAIN_KNOBS_ENV,
    MAIN_RELEASE_PREFILL_ENV,
    main_islands_python,
    main_python,
)
from islands_harness.models import MODELS, get_model, real_vocab  # noqa: E402
from islands_harness.server import SglangServer  # noqa: E402

WINDOW = 32
PAGE = 1
CHUNK = 512
SERVER_ARGS = [
    "--page-size", str(PAGE),
    "--chunked-prefill-size", str(CHUNK),
    "--max-total-tokens", "65536",
    "--swa-full-tokens-ratio", "0.25",
    "--max-running-requests", "16",
    "--enable-metrics",
    "--decode-log-interval", "1",
]
ARMS = {"upstream": [], "upstream_knobs": [], "islands": ["--enable-swa-islands"], "main": [],
        "main_knobs": [], "main_free_off": [], "main_release_prefill": [],
        "main_islands": ["--enable-swa-islands"]}
"""``main``: stock sglang 0.5.23 in `.venv-main` (``islands_harness.main_arm``), default settings;
``main_knobs`` / ``main_free_off`` / ``main_release_prefill``: the same with main's knobs
(``ARM_ENV``); ``main_islands``: `.venv-main-islands` with ``--enable-swa-islands``. Each runs
when named in --arms."""
ARM_ENV = {"upstream_knobs": UPSTREAM_KNOBS_ENV, "main_knobs": MAIN_KNOBS_ENV,
           "main_free_off": MAIN_FREE_OFF_ENV, "main_release_prefill": MAIN_RELEASE_PREFILL_ENV}
MAIN_ARMS = ("main", "main_knobs", "main_free_off", "main_release_prefill")
"""Arms booted from `.venv-main` (stock 0.5.23)."""
ISLAND_ARMS = ("islands", "main_islands")
"""Arms that lay decode islands (expected follow-up hit k * interval)."""


def arm_python(arm: str):
    """The interpreter ``arm`` boots: None (this `.venv`, 0.5.15.post1), `.venv-main` or
    `.venv-main-islands` (a clear error when that environment was never built)."""
    if arm == "main_islands":
        return main_islands_python()
    return main_python() if arm in MAIN_ARMS else None


def arm_target(arm: str) -> str:
    """The sglang release ``arm`` boots: 0.5.23 for the main arms, else 0.5.15.post1."""
    return "0.5.23" if arm in MAIN_ARMS or arm == "main_islands" else "0.5.15.post1"
# The upstream baseline measured on this model and shape (prompt 2000, 300 tokens per turn,
# 50 user tokens; /work/shared/reference/cpu-spike/baseline, multiturn): cached / prompt tokens.
BASELINE = {
    "follow_up_cached_at_150_generated": [2000, 2150],
    "follow_up_cached_after_finish": [2149, 2150],
    "conversation_after_finish_turns_2_3": [[2300, 2350], [2650, 2700]],
}

T0 = time.monotonic()


def progress(msg: str) -> None:
    print(f"[decode_reuse {time.monotonic() - T0:7.1f}s] {msg}", file=sys.stderr, flush=True)


@dataclasses.dataclass
class Shape:
    prompt_len: int
    k: int
    delta: int
    turns: int
    gen: int
    user: int
    run_on: int
    agents: int
    agent_prompt: tuple[int, int]
    agent_gen: tuple[int, int]
    agent_tool: tuple[int, int]
    modes: tuple[str, ...]
    seed: int
    interval: int = CHUNK // 4
    abort_previous: bool = True


def quick_shape(seed: int) -> Shape:
    return Shape(prompt_len=1000, k=1, delta=8, turns=2, gen=160, user=50, run_on=512, agents=2,
                 agent_prompt=(800, 1200), agent_gen=(140, 180), agent_tool=(30, 80),
                 modes=("while_running",), seed=seed)


def full_shape(a: argparse.Namespace) -> Shape:
    return Shape(prompt_len=a.prompt_len, k=a.k, delta=a.delta, turns=a.turns, gen=a.gen,
                 user=a.user, run_on=a.run_on, agents=a.agents,
                 agent_prompt=tuple(a.agent_prompt), agent_gen=tuple(a.agent_gen),
                 agent_tool=tuple(a.agent_tool), modes=tuple(a.modes.split(",")), seed=a.seed,
                 abort_previous=a.abort_previous)


# ---- one phase ---------------------------------------------------------------------------------


class Phase:
    """Log scan + /metrics sampler + timer around one phase of the workload."""

    def __init__(self, srv: SglangServer, swa_pool: int, name: str):
        self.srv, self.name = srv, name
        self.scan = LogScan(srv.log_path, swa_pool)
        self.sampler = MetricsSampler(srv.base_url, 0.25, {"swa_used": "sglang:swa_used_tokens"})

    def __enter__(self) -> "Phase":
        flush_cache_when_idle(self.srv)
        self.scan.reset()
        self.t0 = time.monotonic()
        self.sampler.__enter__()
        progress(f"  phase {self.name}")
        return self

    def __exit__(self, *exc) -> None:
        self.sampler.__exit__(*exc)
        self.seconds = time.monotonic() - self.t0
        time.sleep(0.3)  # the last step's log line
        self.stats = self.scan.stats()

    def summary(self, requests: list[tuple[int, int]]) -> dict[str, Any]:
        """`requests`: (prompt_tokens, cached_tokens) of every request of the phase."""
        return {
            "requests": len(requests),
            "prompt_tokens": sum(p for p, _ in requests),
            "cached_tokens": sum(c for _, c in requests),
            "prefill_tokens_computed": sum(p - c for p, c in requests),
            "prefill_new_tokens_log": self.stats.prefill_new_tokens,
            "peak_swa_used": self.stats.peak_swa_used,
            "peak_swa_used_decode": self.stats.peak_swa_used_decode,
            "peak_swa_used_prefill": self.stats.peak_swa_used_prefill,
            "peak_swa_used_metrics": int(self.sampler.peak("swa_used")),
            "seconds": round(self.seconds, 1),
        }


def turn_rows(turns: list[Turn]) -> list[dict[str, Any]]:
    return [t.row() for t in turns]


def pool_sizes(srv: SglangServer) -> tuple[int, int]:
    """(SWA pool, full pool) in tokens: available + evictable + used from /metrics, else the
    boot log (stock main exports no SWA pool split)."""
    m = fetch_metrics(srv.base_url)
    swa, full = m.pool_tokens("swa"), m.pool_tokens("kv")
    boot = sched_log.parse_boot(srv.log_path.read_text(errors="replace"))
    return int(swa or boot.get("swa_pool_log") or 0), int(full or boot.get("full_pool_log") or 0)


def follow_up_phase(srv: SglangServer, swa_pool: int, shape: Shape, vocab_hi: int,
                    outputs: dict[str, list[int]], inputs: dict[str, list[int]],
                    log) -> tuple[dict[str, Any], Any]:
    """Phase 1: B = A's prompt + A's output so far + 20 tokens, sent while A still runs."""
    rng = random.Random(shape.seed)
    with Phase(srv, swa_pool, "follow_up") as ph:
        prompt = random_ids(rng, shape.prompt_len, vocab_hi)
        want = shape.k * shape.interval + shape.delta
        fu = follow_up_while_running(
            srv, prompt, k=shape.k, delta=shape.delta, interval=shape.interval,
            a_max_new=want + (shape.run_on if shape.abort_previous else 96),
            abort_a=shape.abort_previous, b_new=random_ids(rng, 20, vocab_hi), log=log)
    # an aborted A's length depends on timing: compare what every arm streamed before B was sent
    a_ids = fu.a_output_ids[:want] if shape.abort_previous else fu.a_output_ids
    outputs["follow_up/A"], outputs["follow_up/B"] = a_ids, fu.b_output_ids
    inputs["follow_up/A"], inputs["follow_up/B"] = list(prompt), fu.b_input_ids
    summary = {
        **ph.summary([(fu.prompt_len, 0), (fu.b_prompt_len, fu.b_cached_tokens)]),
        "prompt_len": fu.prompt_len, "generated_at_send": fu.generated_at_send,
        "b_prompt_len": fu.b_prompt_len, "b_cached_tokens": fu.b_cached_tokens,
        "a_running_when_b_done": fu.a_running_when_b_done,
    }
    return summary, fu


def conversation_phase(srv: SglangServer, swa_pool: int, shape: Shape, vocab_hi: int, mode: str,
                       outputs: dict[str, list[int]], inputs: dict[str, list[int]],
                       log) -> dict[str, Any]:
    """Phase 2: the baseline-shaped conversation in one mode (turn 1 is a cold prompt)."""
    crng = random.Random(f"{shape.seed}/conversation")
    first = random_ids(crng, shape.prompt_len, vocab_hi)
    users = [random_ids(crng, shape.user, vocab_hi) for _ in range(shape.turns - 1)]
    with Phase(srv, swa_pool, f"conversation_{mode}") as ph:
        turns = conversation(srv, first, users, gen=shape.gen, mode=mode, run_on=shape.run_on,
                             abort_previous=shape.abort_previous, log=log)
    for t in turns:
        outputs[f"conversation_{mode}/turn{t.turn}"] = t.output_ids
        inputs[f"conversation_{mode}/turn{t.turn}"] = t.input_ids
    return {**ph.summary([(t.prompt_len, t.cached_tokens) for t in turns]),
            "turns": turn_rows(turns)}


def agent_plans(shape: Shape, vocab_hi: int) -> list[tuple[list[int], list[int], list[list[int]]]]:
    """Per agent: (first prompt, tokens to generate per turn, tool results), from the seed."""
    arng = random.Random(f"{shape.seed}/agents")
    plans = []
    for _ in range(shape.agents):
        first = random_ids(arng, arng.randint(*shape.agent_prompt), vocab_hi)
        gens = [arng.randint(*shape.agent_gen) for _ in range(shape.turns)]
        tools = [random_ids(arng, arng.randint(*shape.agent_tool), vocab_hi)
                 for _ in range(shape.turns - 1)]
        plans.append((first, gens, tools))
    return plans


def run_agents(srv: SglangServer, plans, run_on: int, log,
               abort_previous: bool = True) -> dict[int, list[Turn]]:
    """Every agent's while_running conversation, each in its own thread."""
    results: dict[int, list[Turn]] = {}
    errors: list[BaseException] = []

    def agent(i: int) -> None:
        first, gens, tools = plans[i]
        try:
            results[i] = conversation(srv, first, tools, gen=gens, mode="while_running",
                                      run_on=run_on, abort_previous=abort_previous, log=log,
                                      name=f" agent{i}")
        except BaseException as e:  # re-raised below
            errors.append(e)

    threads = [threading.Thread(target=agent, args=(i,)) for i in range(len(plans))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results


def agents_per_turn(results: dict[int, list[Turn]], turns: int) -> list[dict[str, Any]]:
    """Turn j summed over the agents: cached share and how much of the previous output hit."""
    per_turn = []
    for j in range(turns):
        ts = [results[i][j] for i in sorted(results)]
        prompt_tok = sum(t.prompt_len for t in ts)
        cached = sum(t.cached_tokens for t in ts)
        prev = [t.prev_output_covered for t in ts if t.prev_output_covered is not None]
        per_turn.append({
            "turn": j + 1, "prompt_tokens": prompt_tok, "cached_tokens": cached,
            "cached_share": round(cached / prompt_tok, 4),
            "prev_output_tokens_resent": sum(t.prev_transcript_len - t.prev_prompt_len
                                             for t in ts if t.prev_prompt_len is not None),
            "prev_output_tokens_hit": sum(prev) if prev else None,
            "prev_running_at_admit": sum(bool(t.prev_running_at_admit) for t in ts),
        })
    return per_turn


def agents_phase(srv: SglangServer, swa_pool: int, shape: Shape, vocab_hi: int,
                 outputs: dict[str, list[int]], inputs: dict[str, list[int]],
                 log) -> dict[str, Any]:
    """Phase 3: concurrent seeded agents, each sending its next turn while the last one runs."""
    plans = agent_plans(shape, vocab_hi)
    with Phase(srv, swa_pool, "agents") as ph:
        results = run_agents(srv, plans, shape.run_on, log, shape.abort_previous)
    for i, ts in results.items():
        for t in ts:
            outputs[f"agents/agent{i}/turn{t.turn}"] = t.output_ids
            inputs[f"agents/agent{i}/turn{t.turn}"] = t.input_ids
    return {
        **ph.summary([(t.prompt_len, t.cached_tokens) for ts in results.values() for t in ts]),
        "per_turn": agents_per_turn(results, shape.turns),
        "turns": {f"agent{i}": turn_rows(ts) for i, ts in sorted(results.items())}}


def island_counts(srv: SglangServer) -> tuple[Any, Any]:
    """(decode islands, chunk islands) inserted; None where the server exports no such counter."""
    time.sleep(0.5)
    m = fetch_metrics(srv.base_url)
    return (m.value("sglang:swa_island_decode_inserts", default=None),
            m.value("sglang:swa_island_chunk_inserts", default=None))


def run_arm(model: pathlib.Path, vocab_hi: int, arm: str, shape: Shape,
            extra_args: list[str], model_args: list[str] = (),
            omp_threads: int = 2) -> dict[str, Any]:
    """One boot of ``arm``: the three phases in order, the cache flushed before each.
    ``model_args``: the model's own server arguments (``TinyModel.server_args``)."""
    srv = SglangServer(model, SERVER_ARGS + ARMS[arm] + list(model_args) + extra_args,
                       boot_timeout_s=900, omp_threads=omp_threads,
                       env=ARM_ENV.get(arm), python=arm_python(arm))
    progress(f"{arm}: booting")
    code = code_version(arm_python(arm))
    srv.start()
    progress(f"{arm}: up in {srv.boot_s:.0f} s (log {srv.log_path})")
    outputs: dict[str, list[int]] = {}
    inputs: dict[str, list[int]] = {}  # the token ids each request sent, by the same names
    phases: dict[str, dict[str, Any]] = {}
    log = lambda m: progress(f"  {arm}: {m}")  # noqa: E731
    try:
        swa_pool, full_pool = pool_sizes(srv)
        phases["follow_up"], fu = follow_up_phase(srv, swa_pool, shape, vocab_hi, outputs, inputs,
                                                      log)
        for mode in shape.modes:
            phases[f"conversation_{mode}"] = conversation_phase(
                srv, swa_pool, shape, vocab_hi, mode, outputs, inputs, log)
        phases["agents"] = agents_phase(srv, swa_pool, shape, vocab_hi, outputs, inputs, log)
        decode_islands, chunk_islands = island_counts(srv)
    finally:
        srv.stop()
    progress(f"{arm}: done, server stopped")
    peaks = {k: max(p[k] for p in phases.values()) for k in (
        "peak_swa_used", "peak_swa_used_decode", "peak_swa_used_prefill", "peak_swa_used_metrics")}
    return {
        "hit_tokens_on_running_output": max(0, fu.b_cached_tokens - fu.prompt_len),
        "expected_min_hit_tokens": shape.k * shape.interval if arm in ISLAND_ARMS else 0,
        "follow_up_b_cached_tokens": fu.b_cached_tokens,
        "prefill_tokens_computed": sum(p["prefill_tokens_computed"] for p in phases.values()),
        "prefill_new_tokens_log": sum(p["prefill_new_tokens_log"] for p in phases.values()),
        **peaks,
        "prefill_usage_resolution_tokens": round(0.005 * swa_pool),
        "swa_pool_tokens": swa_pool,
        "full_pool_tokens": full_pool,
        "cached_share_per_turn": [t["cached_share"] for t in phases["agents"]["per_turn"]],
        "decode_islands": decode_islands,
        "chunk_islands": chunk_islands,
        "phases": phases,
        "boot_s": round(srv.boot_s, 1),
        "code_at_boot": code,
        "log": str(srv.log_path),
        "_outputs": outputs,
        "_inputs": inputs,
    }


# ---- report ------------------------------------------------------------------------------------


def reference_arm(arms: dict[str, dict[str, Any]]) -> str:
    """The arm the others are compared with: ``upstream`` when it ran, else the first."""
    return "upstream" if "upstream" in arms else next(iter(arms))


def first_difference(a: list[int], b: list[int]) -> int:
    """The first index where two token lists differ (the shorter one's length if one is a prefix)."""
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def compare_outputs(arms: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Every arm's outputs against the reference arm's (``reference_arm``), request by request."""
    ref = reference_arm(arms)
    up = arms[ref]["_outputs"]
    diff, compared = {}, set(up)
    for arm, res in arms.items():
        if arm == ref:
            continue
        other = res["_outputs"]
        compared |= set(other)
        for name in sorted(set(up) | set(other)):
            a, b = up.get(name), other.get(name)
            if a != b:
                first = None if a is None or b is None else first_difference(a, b)
                diff[f"{arm}:{name}"] = {"first_diff": first}
    out = {"requests_compared": len(compared), "arms_compared": sorted(set(arms) - {ref}),
           "differ": diff, "all_equal": not diff}
    if ref != "upstream":
        out["reference"] = ref
    return out


def hf_check(model: pathlib.Path, arms: dict[str, dict[str, Any]],
             python: str | None = None) -> dict[str, Any]:
    """The reference arm's outputs against transformers' greedy decoding of the same input ids
    (fp32, CPU, ``islands_harness.hf_oracle``), request by request, as many tokens as the server
    returned. With every arm equal to the reference, every arm is transformers' greedy.
    ``python``: decode in that interpreter (``OracleWorker``; a model this `.venv`'s transformers
    cannot load, Gemma 4) instead of this process."""
    from contextlib import nullcontext

    from islands_harness.hf_oracle import OracleWorker, greedy_decode_one

    ref = reference_arm(arms)
    ins, outs = arms[ref]["_inputs"], arms[ref]["_outputs"]
    differ = {}
    with (OracleWorker(str(python), model) if python else nullcontext()) as worker:
        for name in sorted(outs):
            want = (worker(ins[name], len(outs[name])) if worker else
                    greedy_decode_one(model, ins[name], len(outs[name])))
            if want != outs[name]:
                differ[name] = {"first_diff": first_difference(want, outs[name])}
    progress(f"transformers' greedy: {len(outs) - len(differ)} of {len(outs)} {ref} outputs equal")
    return {"reference": ref, "requests": len(outs), "differ": differ, "all_equal": not differ}


def admitted_after_previous_finished(a: dict[str, Any]) -> list[str]:
    """The `while_running` turns of one arm whose previous turn had already finished when they were
    admitted (the stream lagged past `--run-on`): their hit covers the finished transcript, not
    decode islands, so they do not measure reuse of a running output."""
    late = []
    for key, ph in a["phases"].items():
        if key == "conversation_while_running":
            late += [f"conversation turn {t['turn']}" for t in ph["turns"][1:]
                     if not t["prev_running_at_admit"]]
        elif key == "agents":
            agents = len(ph["turns"])
            late += [f"agents turn {t['turn']} ({agents - t['prev_running_at_admit']} of {agents})"
                     for t in ph["per_turn"][1:] if t["prev_running_at_admit"] < agents]
    return late


def markdown(result: dict[str, Any]) -> str:
    arms = result["arms"]
    names = list(arms)
    sh = result["shape"]
    lines = [
        f"### Decode-region reuse on the real server: tiny "
        f"{'Laguna' if 'model' not in result else 'model `' + result['model'] + '`'}, "
        f"window {WINDOW}, page {PAGE}, "
        f"chunked prefill {CHUNK} (decode-island interval {sh['interval']})",
        "",
        f"Command: `{result['command']}`",
        "",
        "| metric | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(names),
    ]

    def row(label, fn):
        lines.append(f"| {label} | " + " | ".join(str(fn(arms[n])) for n in names) + " |")

    fu = lambda a: a["phases"]["follow_up"]  # noqa: E731
    row(f"(a) follow-up: B cached / B prompt (A prompt {sh['prompt_len']}, B sent at A's n-th "
        f"token)", lambda a: f"{fu(a)['b_cached_tokens']} / {fu(a)['b_prompt_len']} "
        f"(n={fu(a)['generated_at_send']})")
    row("(a) hit tokens on A's running output / expected min",
        lambda a: f"{a['hit_tokens_on_running_output']} / {a['expected_min_hit_tokens']}")
    row("(a) A still running when B returned", lambda a: fu(a)["a_running_when_b_done"])
    for mode in sh["modes"]:
        key = f"conversation_{mode}"

        def turns(a, key=key):
            return ", ".join(f"{t['cached_tokens']}/{t['prompt_len']}"
                             for t in a["phases"][key]["turns"][1:])

        def covered(a, key=key):
            return ", ".join(f"{t['prev_output_covered']}/{t['prev_transcript_len'] - t['prev_prompt_len']}"
                             for t in a["phases"][key]["turns"][1:])
        row(f"(b) conversation {mode}: turns 2.. cached / prompt", turns)
        row(f"(b) conversation {mode}: previous output hit / re-sent", covered)
    row("agents: cached-token share per turn", lambda a: ", ".join(
        f"{s:.3f}" for s in a["cached_share_per_turn"]))
    row("agents: previous output hit / re-sent (turns 2..)", lambda a: ", ".join(
        f"{t['prev_output_tokens_hit']}/{t['prev_output_tokens_resent']}"
        for t in a["phases"]["agents"]["per_turn"][1:]))
    row("agents: prefill tokens computed (client / log #new-token)", lambda a: (
        f"{a['phases']['agents']['prefill_tokens_computed']} / "
        f"{a['phases']['agents']['prefill_new_tokens_log']}"))
    row("prefill tokens computed, all phases (client / log #new-token)",
        lambda a: f"{a['prefill_tokens_computed']} / {a['prefill_new_tokens_log']}")
    for ph in arms[names[0]]["phases"]:
        row(f"peak SWA used, {ph}: decode lines (exact) / prefill lines (+-"
            f"{arms[names[0]]['prefill_usage_resolution_tokens']}) / /metrics sampled",
            lambda a, ph=ph: (f"{a['phases'][ph]['peak_swa_used_decode']} / "
                              f"{a['phases'][ph]['peak_swa_used_prefill']} / "
                              f"{a['phases'][ph]['peak_swa_used_metrics']}"))
    row("SWA pool / full pool (tokens)", lambda a: f"{a['swa_pool_tokens']} / {a['full_pool_tokens']}")
    row("decode islands / chunk islands inserted", lambda a: f"{a['decode_islands']} / {a['chunk_islands']}")
    row("boot s / workload s", lambda a: f"{a['boot_s']} / "
        f"{round(sum(p['seconds'] for p in a['phases'].values()), 1)}")
    eq = result["outputs"]
    codes = {n: arms[n].get("code_at_boot", {}) for n in names}
    lines += ["", "Code at each boot: " + "; ".join(
        f"{n}: {c.get('head')}{' +dirty ' + str(c['dirty']) if c.get('dirty') else ''}, "
        f"installed swa_island_radix_cache.py sha256 {c.get('installed_swa_island_radix_cache_sha256_16')}"
        for n, c in codes.items())]
    others = ", ".join(eq.get("arms_compared") or ["islands"])
    ref = eq.get("reference", "upstream")
    lines += ["", f"Outputs: {eq['requests_compared']} requests, {others} == {ref} token for "
                  f"token: {eq['all_equal']}" + ("" if eq["all_equal"] else f" (differ: {eq['differ']})"),
              *(["", f"Transformers' greedy (fp32, same input ids): {result['hf']['requests']} "
                 f"{result['hf']['reference']} outputs equal token for token: "
                 f"{result['hf']['all_equal']}" + ("" if result["hf"]["all_equal"] else
                                                   f" (differ: {result['hf']['differ']})")]
                if "hf" in result else []),
              *(["", "Admitted after the previous turn had finished (not a running output; raise "
                 "`--run-on`): " + "; ".join(f"{n}: {', '.join(late)}" for n, late in (
                     (n, admitted_after_previous_finished(arms[n])) for n in names) if late)]
                if any(admitted_after_previous_finished(arms[n]) for n in names) else []),
              *(["", f"Upstream baseline for comparison (same model and shape): "
                     f"{json.dumps(BASELINE)}"] if result.get("model", "laguna") == "laguna" else []),
              f"Total runtime: {result['runtime_s']} s", ""]
    return "\n".join(lines)


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


if __name__ == "__main__":
    sys.exit(main())
