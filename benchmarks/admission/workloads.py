"""Admission benchmark, workloads: the seeded no-reuse requests and agent conversations, the
clients that send them (greedy ``/generate`` on token ids) and the per-request summaries.
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import random
import statistics
import threading
import time
from typing import Any, Callable, Dict, List

import _bench_path  # noqa: F401  (puts the repository root on sys.path)
from islands_harness.client import generate, thread_session

@dataclasses.dataclass(frozen=True)
class WorkloadConfig:
    requests: int = 32
    clients: int = 32
    in_min: int = 1980
    in_max: int = 2040
    out_min: int = 256
    out_max: int = 512
    convs: int = 12
    turns: int = 4
    system_len: int = 1200
    user_min: int = 64
    user_max: int = 128
    reply_min: int = 64
    reply_max: int = 128
    # after_finish: turn k+1 is sent once turn k finished; while_running: once turn k has streamed
    # its reply (the tokens the agent acts on), while turn k keeps generating run_on more tokens
    agent_mode: str = "after_finish"
    run_on: int = 32
    seed: int = 20261129
    token_lo: int = 4  # first non-special id
    token_hi: int = 683  # tiny tokenizer's real vocabulary


QUICK = dict(requests=32, clients=32, out_min=96, out_max=192, convs=8, turns=3,
             system_len=1000, reply_min=48, reply_max=96)


def no_reuse_requests(cfg: WorkloadConfig) -> List[Dict[str, Any]]:
    rng = random.Random(cfg.seed)
    out = []
    for i in range(cfg.requests):
        n = rng.randint(cfg.in_min, cfg.in_max)
        out.append({
            "i": i,
            "input_ids": [rng.randrange(cfg.token_lo, cfg.token_hi) for _ in range(n)],
            "max_new_tokens": rng.randint(cfg.out_min, cfg.out_max),
        })
    return out


def agent_script(cfg: WorkloadConfig) -> List[Dict[str, Any]]:
    """Per conversation: a system prompt and, per turn, the new user tokens and the reply length."""
    rng = random.Random(cfg.seed + 1)
    convs = []
    for c in range(cfg.convs):
        system = [rng.randrange(cfg.token_lo, cfg.token_hi) for _ in range(cfg.system_len)]
        turns = []
        for _ in range(cfg.turns):
            user = [rng.randrange(cfg.token_lo, cfg.token_hi)
                    for _ in range(rng.randint(cfg.user_min, cfg.user_max))]
            turns.append({"user": user, "max_new_tokens": rng.randint(cfg.reply_min, cfg.reply_max)})
        convs.append({"conv": c, "system": system, "turns": turns})
    return convs


def agent_max_context(cfg: WorkloadConfig) -> int:
    return cfg.system_len + cfg.turns * (cfg.user_max + cfg.reply_max)


def run_no_reuse(base_url: str, reqs: List[Dict[str, Any]], clients: int, timeout: float,
                 progress: Callable[[str], None]) -> List[Dict[str, Any]]:
    done = [0]
    lock = threading.Lock()

    def one(r):
        t0 = time.monotonic()
        g = generate(base_url, r["input_ids"], r["max_new_tokens"], timeout=timeout,
                     session=thread_session())
        t1 = time.monotonic()
        with lock:
            done[0] += 1
            if done[0] % max(1, len(reqs) // 4) == 0 or done[0] == len(reqs):
                progress(f"no_reuse: {done[0]}/{len(reqs)} requests done")
        return {"i": r["i"], "t_send": t0, "t_done": t1, "latency_s": t1 - t0,
                "prompt_tokens": len(r["input_ids"]), "completion_tokens": g.completion_tokens,
                "cached_tokens": g.cached_tokens}

    with cf.ThreadPoolExecutor(max_workers=clients) as ex:
        return list(ex.map(one, reqs))


def run_agent(base_url: str, convs: List[Dict[str, Any]], timeout: float,
              progress: Callable[[str], None], mode: str = "after_finish",
              run_on: int = 0, keep_ids: bool = False) -> List[Dict[str, Any]]:
    """The agent workload; ``mode`` as in ``WorkloadConfig.agent_mode``. ``keep_ids``
    (``after_finish`` only): each row also carries its ``input_ids`` and ``output_ids``."""
    if mode == "while_running":
        return run_agent_while_running(base_url, convs, timeout, progress, run_on)
    if mode != "after_finish":
        raise ValueError(f"agent mode {mode!r}")

    def conversation(c):
        rows = []
        transcript = list(c["system"])
        reusable = 0
        for k, turn in enumerate(c["turns"]):
            prompt = transcript + turn["user"]
            t0 = time.monotonic()
            g = generate(base_url, prompt, turn["max_new_tokens"], timeout=timeout,
                         session=thread_session())
            t1 = time.monotonic()
            out_ids = g.output_ids
            rows.append({"conv": c["conv"], "turn": k + 1, "t_send": t0, "t_done": t1,
                         "latency_s": t1 - t0, "prompt_tokens": len(prompt),
                         "reusable_tokens": reusable,
                         "completion_tokens": g.completion_tokens,
                         "cached_tokens": g.cached_tokens})
            if keep_ids:
                rows[-1].update(input_ids=list(prompt), output_ids=out_ids)
            transcript = prompt + out_ids
            reusable = len(transcript)
        progress(f"agent: conversation {c['conv']} done ({len(rows)} turns)")
        return rows

    with cf.ThreadPoolExecutor(max_workers=len(convs)) as ex:
        return [row for rows in ex.map(conversation, convs) for row in rows]


def run_agent_while_running(base_url: str, convs: List[Dict[str, Any]], timeout: float,
                            progress: Callable[[str], None], run_on: int) -> List[Dict[str, Any]]:
    """Each conversation streams turn k; once it has streamed its reply (``max_new_tokens`` of
    the script) the agent sends turn k+1 = transcript + that reply + the next user message, while
    turn k keeps generating ``run_on`` more tokens (a tool call acted on as soon as it is
    complete). Turn k+1's cache hit on turn k's reply needs it to be in the tree while turn k
    still runs: decode islands (every cp/4 tokens) put it there; upstream caches a running
    request's prompt only."""
    from types import SimpleNamespace

    from islands_harness.conversations import conversation as streamed_conversation

    srv = SimpleNamespace(base_url=base_url)

    def one(c):
        turns = c["turns"]
        rows_t = streamed_conversation(
            srv, list(c["system"]) + turns[0]["user"], [t["user"] for t in turns[1:]],
            gen=[t["max_new_tokens"] for t in turns], mode="while_running", run_on=run_on,
            timeout=timeout, log=lambda m: None, name=f" conv {c['conv']}")
        rows = []
        for t in rows_t:
            rows.append({"conv": c["conv"], "turn": t.turn, "latency_s": t.seconds,
                         "prompt_tokens": t.prompt_len,
                         "reusable_tokens": t.prev_transcript_len or 0,
                         # every turn runs to its max_new_tokens (ignore_eos): reply + run_on
                         "completion_tokens": t.completion_tokens + run_on,
                         "cached_tokens": t.cached_tokens,
                         "prev_running_at_admit": t.prev_running_at_admit})
        progress(f"agent: conversation {c['conv']} done ({len(rows)} turns, while running)")
        return rows

    with cf.ThreadPoolExecutor(max_workers=len(convs)) as ex:
        return [row for rows in ex.map(one, convs) for row in rows]


def summarize_requests(rows: List[Dict[str, Any]], wall_s: float) -> Dict[str, Any]:
    lat = [r["latency_s"] for r in rows]
    out_tok = sum(r["completion_tokens"] for r in rows)
    prompt = sum(r["prompt_tokens"] for r in rows)
    cached = sum(r["cached_tokens"] for r in rows)
    return {
        "n_requests": len(rows),
        "wall_s": round(wall_s, 2),
        "output_tokens": out_tok,
        "prompt_tokens": prompt,
        "cached_tokens": cached,
        "hit_rate": round(cached / prompt, 4) if prompt else 0.0,
        "throughput_tok_s": round(out_tok / wall_s, 2) if wall_s > 0 else 0.0,
        "latency_mean_s": round(statistics.mean(lat), 3) if lat else 0.0,
        "latency_p50_s": round(statistics.median(lat), 3) if lat else 0.0,
        "latency_max_s": round(max(lat), 3) if lat else 0.0,
    }


def agent_hit_rates(rows: List[Dict[str, Any]]) -> Dict[str, Any]:
    """Per turn: cached / prompt tokens, and cached / reusable (previous prompt + reply).

    ``agent_hit_rate`` is over turns >= 2 (turn 1 is cold by construction)."""
    turns = sorted({r["turn"] for r in rows})
    per_turn = {}
    for t in turns:
        rs = [r for r in rows if r["turn"] == t]
        prompt = sum(r["prompt_tokens"] for r in rs)
        reusable = sum(r["reusable_tokens"] for r in rs)
        cached = sum(r["cached_tokens"] for r in rs)
        per_turn[str(t)] = {
            "prompt_tokens": prompt,
            "reusable_tokens": reusable,
            "cached_tokens": cached,
            "hit_rate": round(cached / prompt, 4) if prompt else 0.0,
            "hit_of_reusable": round(cached / reusable, 4) if reusable else None,
        }
    later = [r for r in rows if r["turn"] >= 2]
    prompt = sum(r["prompt_tokens"] for r in later)
    reusable = sum(r["reusable_tokens"] for r in later)
    cached = sum(r["cached_tokens"] for r in later)
    return {
        "per_turn": per_turn,
        "agent_hit_rate": round(cached / prompt, 4) if prompt else 0.0,
        "agent_hit_of_reusable": round(cached / reusable, 4) if reusable else 0.0,
        "agent_ideal_hit_rate": round(reusable / prompt, 4) if prompt else 0.0,
    }
