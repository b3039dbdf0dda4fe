"""One arm of the decode-reuse benchmark on a live server: the follow-up, conversation and agents
phases, each with its log scan and /metrics sampler, the cache flushed before each."""

from __future__ import annotations

import pathlib
import random
import threading
import time
from typing import Any

import _bench_path  # noqa: F401  (the repository root and benchmarks/ on sys.path)
from decode_reuse.setup import (ARM_ENV, ARMS, ISLAND_ARMS, SERVER_ARGS, Shape, arm_python,
                                progress)
from islands_harness import sched_log
from islands_harness.client import MetricsSampler, fetch_metrics
from islands_harness.conversations import (
    LogScan,
    Turn,
    conversation,
    flush_cache_when_idle,
    follow_up_while_running,
    random_ids,
)
from islands_harness.provenance import code_version
from islands_harness.server import SglangServer


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
