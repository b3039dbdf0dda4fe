"""Follow-ups and conversations on the real server: requests that re-send another request's
prompt and output, sent while it still runs or after it finished, and what the server log says
about the pools and islands meanwhile.

Shared by `test/server/test_server_decode_islands.py`, `benchmarks/decode_reuse.py` and the
admission benchmark's agent workload. Requests go through `islands_harness.client`.

- `follow_up_while_running`: request A streams; once A has generated `>= k * interval + delta`
  tokens, B = A's prompt + A's output so far (+ a little new text) is sent while A still runs.
- `conversation`: turns that each re-send the transcript (previous prompt + previous output + new
  user text), either right after the previous turn finished (`after_finish`) or once it has
  streamed `gen` tokens (`while_running`).
- `LogScan`: what the scheduler's `Prefill batch` / `Decode batch` lines (parsed by
  `islands_harness.sched_log`) say from a byte offset on.

All requests are greedy (temperature 0) and `ignore_eos`, on token ids (no tokenizer round trip).
"""

from __future__ import annotations

import dataclasses
import pathlib
import random
import time
from typing import Any, Optional, Sequence

from islands_harness import sched_log
from islands_harness.client import ServerError, StreamingRequest
from islands_harness.server import SglangServer

def flush_cache_when_idle(srv: SglangServer, timeout: float = 120.0) -> int:
    """`/flush_cache`, retried until it succeeds: sglang refuses it (400 "Flush cache failed.")
    while any request is still in the scheduler, which lags the client's last stream chunk by a
    step or two. Returns the number of refusals."""
    deadline = time.monotonic() + timeout
    refusals = 0
    while True:
        try:
            srv.flush_cache()
            return refusals
        except ServerError:
            refusals += 1
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def random_ids(rng: random.Random, n: int, vocab_hi: int) -> list[int]:
    """`n` token ids in [4, vocab_hi): ids 0..3 are the tiny model's special tokens."""
    return [rng.randrange(4, vocab_hi) for _ in range(n)]


# ---- server log --------------------------------------------------------------------------------

@dataclasses.dataclass
class LogStats:
    prefill_new_tokens: int = 0  # sum of `#new-token` over Prefill batch lines
    prefill_cached_tokens: int = 0  # sum of `#cached-token`
    peak_swa_used: int = 0  # max of the two below
    peak_swa_used_decode: int = 0  # max `#swa token` on Decode batch lines (exact)
    peak_swa_used_prefill: int = 0  # max `swa token usage` * pool on Prefill batch lines
    #   (the ratio has two decimals: +-0.005 * pool tokens)
    decode_lines: int = 0
    chunk_islands: Optional[int] = None  # last value of the hold fragment (patch 0011)
    decode_islands: Optional[int] = None
    accept_lens: list[float] = dataclasses.field(default_factory=list)


class LogScan:
    """Scan the server log from the byte offset at construction (or the last `reset()`).

    Decode lines carry exact `#swa token` counts; prefill lines only a two-decimal usage ratio,
    converted with `swa_pool` (tokens) when given. Needs `--decode-log-interval 1` for a peak over
    every decode step.
    """

    def __init__(self, log_path: str | pathlib.Path, swa_pool: Optional[int] = None):
        self.tail = sched_log.LogTail(log_path)
        self.swa_pool = swa_pool

    def reset(self) -> None:
        self.tail.reset()

    def text(self) -> str:
        return self.tail.text()

    def stats(self) -> LogStats:
        s = LogStats()
        for line in self.text().splitlines():
            e = sched_log.parse_line(line)
            if e is None:
                continue
            if e["kind"] == "prefill":
                s.prefill_new_tokens += e["new_tok"]
                s.prefill_cached_tokens += e["cached"]
                if self.swa_pool:
                    s.peak_swa_used_prefill = max(s.peak_swa_used_prefill,
                                                  round(e["swa_use"] * self.swa_pool))
            elif e["kind"] == "decode":
                s.decode_lines += 1
                s.peak_swa_used_decode = max(s.peak_swa_used_decode, e["swa_tok"])
                if "chunk_islands" in e:
                    s.chunk_islands, s.decode_islands = e["chunk_islands"], e["decode_islands"]
                if "accept_len" in e:
                    s.accept_lens.append(e["accept_len"])
        s.peak_swa_used = max(s.peak_swa_used_decode, s.peak_swa_used_prefill)
        return s


# ---- experiments -------------------------------------------------------------------------------


@dataclasses.dataclass
class FollowUp:
    prompt_len: int
    generated_at_send: int  # the tokens of A's output B carries (k * interval + delta)
    b_prompt_len: int
    b_cached_tokens: int
    expected_min_hit: int  # len(prompt) + k * interval (page 1)
    a_running_when_b_done: bool  # A's stream still open when B's response came back
    a_output_ids: list[int]
    b_output_ids: list[int]
    a_completion_tokens: int
    seconds: float
    b_input_ids: list[int] = dataclasses.field(default_factory=list)


def follow_up_while_running(srv: SglangServer, prompt: Sequence[int], *, k: int, delta: int,
                            interval: int, a_max_new: int, b_new: Sequence[int] = (),
                            b_max_new: int = 8, abort_a: bool = False, timeout: float = 1200.0,
                            log=print) -> FollowUp:
    """A streams; at `>= k*interval + delta` generated tokens send B = prompt + A's first
    `k*interval + delta` output tokens + `b_new` while A runs. `expected_min_hit` = len(prompt) + k*interval (the islands floor).
    `abort_a`: A is aborted once B returned (its output is then what it streamed until then, at
    least `k*interval + delta` tokens), so a large `a_max_new` keeps A running however far the
    client's stream lags the server, at no cost."""
    t0 = time.monotonic()
    a = StreamingRequest(srv.base_url, prompt, a_max_new, name="A", timeout=timeout).start()
    want = k * interval + delta
    snap = a.wait_generated(want, timeout=timeout)
    log(f"A streamed {len(snap)} tokens (wanted >= {want}) after {time.monotonic() - t0:.1f} s; "
        f"sending B")
    # the stream delivers several tokens per chunk: B takes exactly the first `want`, so its
    # prompt is the same on every server the comparison runs on
    b_ids = list(prompt) + snap[:want] + list(b_new)
    b = srv.generate(b_ids, b_max_new, timeout=timeout)
    a_running = not a.done.is_set()
    log(f"B: cached {b.cached_tokens} of {len(b_ids)}; A at {a.generated()} tokens, "
        f"{'still running' if a_running else 'finished'}")
    if abort_a:
        a.abort(timeout)
    ra = a.wait(timeout)
    return FollowUp(prompt_len=len(prompt), generated_at_send=want, b_prompt_len=len(b_ids),
                    b_cached_tokens=b.cached_tokens, expected_min_hit=len(prompt) + k * interval,
                    a_running_when_b_done=a_running, a_output_ids=ra.output_ids,
                    b_output_ids=b.output_ids, a_completion_tokens=ra.completion_tokens,
                    seconds=time.monotonic() - t0, b_input_ids=b_ids)


@dataclasses.dataclass
class Turn:
    turn: int
    prompt_len: int
    cached_tokens: int
    completion_tokens: int
    prev_prompt_len: Optional[int]  # the previous turn's prompt length
    prev_transcript_len: Optional[int]  # previous prompt + the previous output this turn re-sends
    prev_running_at_send: Optional[bool]  # previous turn still streaming when this one was sent
    prev_running_at_admit: Optional[bool]  # ... and when this one's first token came back
    output_ids: list[int]
    input_ids: list[int]
    seconds: float

    @property
    def prev_output_covered(self) -> Optional[int]:
        """Tokens of the previous turn's output (as re-sent) this turn found cached."""
        if self.prev_prompt_len is None:
            return None
        return max(0, min(self.cached_tokens, self.prev_transcript_len) - self.prev_prompt_len)

    def row(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d.pop("output_ids")
        d.pop("input_ids")
        d["prev_output_covered"] = self.prev_output_covered
        return d


def conversation(srv: SglangServer, first_prompt: Sequence[int], user_texts: Sequence[Sequence[int]],
                 *, gen: int | Sequence[int], mode: str, run_on: int = 0,
                 abort_previous: bool = False, timeout: float = 1200.0, log=print,
                 name: str = "") -> list[Turn]:
    """1 + len(user_texts) turns; turn j+1 = turn j's prompt + turn j's output + user_texts[j].

    `gen` is the tokens per turn, or one count per turn.
    `after_finish`: each turn generates `gen` tokens and the next is sent when it has finished.
    `while_running`: each turn may generate `gen + run_on` tokens; the next is sent as soon as it
    has streamed `gen`, with those `gen` tokens as the previous output (the turn keeps running).
    `abort_previous` (while_running): once the next turn's first token streamed, the previous
    turn is aborted (`/abort_request`) instead of running on to its end, and the last turn
    generates `gen` only; a large `run_on` then costs nothing and keeps the previous turn running
    however far the client's stream lags the server.
    """
    if mode not in ("after_finish", "while_running"):
        raise ValueError(mode)
    gens = [gen] * (len(user_texts) + 1) if isinstance(gen, int) else list(gen)
    if len(gens) != len(user_texts) + 1:
        raise ValueError(f"{len(gens)} generation lengths for {len(user_texts) + 1} turns")
    turns: list[Turn] = []
    prompt = list(first_prompt)
    prev = None  # (StreamingRequest, prompt_len, transcript_len)
    for j in range(len(user_texts) + 1):
        t0 = time.monotonic()
        gen = gens[j]
        last = j == len(user_texts)
        max_new = gen if mode == "after_finish" or (abort_previous and last) else gen + run_on
        cur = StreamingRequest(srv.base_url, prompt, max_new, name=f"turn{j + 1}",
                               timeout=timeout)
        prev_running_at_send = None if prev is None else not prev[0].done.is_set()
        cur.start()
        # The first streamed token comes after this turn's prefill, where its cache hit was
        # decided; cached_tokens is in every stream chunk's meta_info.
        cur.wait_generated(1, timeout)
        prev_running_at_admit = None if prev is None else not prev[0].done.is_set()
        if prev is not None and abort_previous and mode == "while_running":
            prev[0].abort(timeout)
        cached = int(cur.meta_info.get("cached_tokens", 0) or 0)
        if mode == "after_finish" or j == len(user_texts):
            out = cur.wait(timeout).output_ids
        else:
            out = cur.wait_generated(gen, timeout)[:gen]
        turns.append(Turn(turn=j + 1, prompt_len=len(prompt), cached_tokens=cached,
                          completion_tokens=len(out), output_ids=list(out), input_ids=list(prompt),
                          prev_prompt_len=None if prev is None else prev[1],
                          prev_transcript_len=None if prev is None else prev[2],
                          prev_running_at_send=prev_running_at_send,
                          prev_running_at_admit=prev_running_at_admit,
                          seconds=time.monotonic() - t0))
        log(f"[{mode}{name}] turn {j + 1}: cached {cached} of {len(prompt)} "
            f"(previous prompt {turns[-1].prev_prompt_len}, previous transcript "
            f"{turns[-1].prev_transcript_len})")
        if prev is not None:
            prev[0].wait(timeout)
        if j < len(user_texts):
            prev = (cur, len(prompt), len(prompt) + len(out))
            prompt = prompt + list(out) + list(user_texts[j])
        else:
            cur.wait(timeout)
    return turns
