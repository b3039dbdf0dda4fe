"""Decode-island reuse on the real server: streaming requests, follow-ups while a request runs,
multi-turn transcripts, and what the server log and /metrics say about the pools and islands.

Shared by `test/test_server_decode_islands.py` and `benchmarks/decode_reuse.py`.

- `StreamingRequest`: one streaming `/generate` on token ids in a background thread; the
  cumulative `output_ids` (sglang's default, non-incremental streaming) are readable while it runs,
  `wait_generated(n)` blocks until the request has streamed at least `n` tokens.
- `follow_up_while_running`: request A streams; once A has generated `>= k * interval + delta`
  tokens, B = A's prompt + A's output so far (+ a little new text) is sent while A still runs.
- `conversation`: turns that each re-send the transcript (previous prompt + previous output + new
  user text), either right after the previous turn finished (`after_finish`) or once it has
  streamed `gen` tokens (`while_running`).
- `LogScan`: the scheduler's `Prefill batch` / `Decode batch` lines (`#new-token`, `#swa token`,
  the islands fragment of patch 0006) from a byte offset on.

All requests are greedy (temperature 0) and `ignore_eos`, on token ids (no tokenizer round trip).
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import random
import re
import threading
import time
from typing import Any, Optional, Sequence

import requests

from islands_harness.server import REPO_ROOT, GenerateResult, ServerError, SglangServer

# ---- streaming ---------------------------------------------------------------------------------


class StreamingRequest:
    """A streaming `/generate` in a background thread.

    `output_ids` is the latest cumulative output seen on the stream; `done` is set when the stream
    ends (`finished_at` is the monotonic time of the last chunk); `result` is the final
    `GenerateResult` (None until done, or when the request failed: `error` says why).
    """

    def __init__(self, base_url: str, input_ids: Sequence[int], max_new_tokens: int, *,
                 sampling_params: Optional[dict[str, Any]] = None, timeout: float = 1200.0,
                 name: str = "stream"):
        self.base_url = base_url
        self.input_ids = list(input_ids)
        self.max_new_tokens = max_new_tokens
        self.sampling_params = {"temperature": 0, "max_new_tokens": max_new_tokens,
                                "ignore_eos": True, **(sampling_params or {})}
        self.timeout = timeout
        self.name = name
        self.output_ids: list[int] = []
        self.meta_info: dict[str, Any] = {}
        self.result: Optional[GenerateResult] = None
        self.error: Optional[BaseException] = None
        self.started_at: Optional[float] = None
        self.finished_at: Optional[float] = None
        self.done = threading.Event()
        self._cv = threading.Condition()
        self._thread = threading.Thread(target=self._run, name=f"stream-{name}", daemon=True)

    def start(self) -> "StreamingRequest":
        self.started_at = time.monotonic()
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            with requests.post(f"{self.base_url}/generate", stream=True, timeout=self.timeout,
                               json={"input_ids": self.input_ids, "stream": True,
                                     "sampling_params": self.sampling_params}) as r:
                if r.status_code != 200:
                    raise ServerError(f"/generate (stream) returned {r.status_code}: "
                                      f"{r.text[:500]}")
                for raw in r.iter_lines():
                    if not raw or not raw.startswith(b"data:"):
                        continue
                    data = raw[5:].strip()
                    if data == b"[DONE]":
                        break
                    d = json.loads(data)
                    if "error" in d:
                        raise ServerError(f"/generate (stream) error: {d['error']}")
                    with self._cv:
                        if "output_ids" in d:
                            self.output_ids = list(d["output_ids"])
                        self.meta_info = d.get("meta_info", self.meta_info) or {}
                        self._cv.notify_all()
            self.result = GenerateResult(output_ids=list(self.output_ids),
                                         meta_info=dict(self.meta_info))
        except BaseException as e:  # reported by wait()/wait_generated()
            self.error = e
        finally:
            self.finished_at = time.monotonic()
            with self._cv:
                self.done.set()
                self._cv.notify_all()

    def generated(self) -> int:
        with self._cv:
            return len(self.output_ids)

    def snapshot(self) -> list[int]:
        with self._cv:
            return list(self.output_ids)

    def wait_generated(self, n: int, timeout: float = 1200.0) -> list[int]:
        """Block until at least `n` tokens were streamed; return the output so far (a copy).
        Raises if the request failed or ended with fewer tokens, or on timeout."""
        deadline = time.monotonic() + timeout
        with self._cv:
            while len(self.output_ids) < n:
                if self.done.is_set():
                    raise ServerError(f"{self.name}: stream ended after {len(self.output_ids)} "
                                      f"tokens, wanted {n} (error: {self.error!r})")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{self.name}: {len(self.output_ids)} of {n} tokens "
                                       f"after {timeout:.0f} s")
                self._cv.wait(min(left, 1.0))
            return list(self.output_ids)

    def wait(self, timeout: float = 1200.0) -> GenerateResult:
        if not self.done.wait(timeout):
            raise TimeoutError(f"{self.name}: not finished after {timeout:.0f} s")
        self._thread.join(timeout=10)
        if self.error is not None:
            raise ServerError(f"{self.name}: {self.error!r}") from self.error
        assert self.result is not None
        return self.result


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

_DECODE = re.compile(r"Decode batch.*?#swa token: (\d+)")
_PREFILL = re.compile(r"Prefill batch.*?#new-token: (\d+), #cached-token: (\d+)"
                      r".*?swa token usage: ([\d.]+)")
_ISLANDS = re.compile(r"islands: (\d+) chunk \+ (\d+) decode")
_ACCEPT = re.compile(r"accept len: ([\d.]+)")


@dataclasses.dataclass
class LogStats:
    prefill_new_tokens: int = 0  # sum of `#new-token` over Prefill batch lines
    prefill_cached_tokens: int = 0  # sum of `#cached-token`
    peak_swa_used: int = 0  # max of the two below
    peak_swa_used_decode: int = 0  # max `#swa token` on Decode batch lines (exact)
    peak_swa_used_prefill: int = 0  # max `swa token usage` * pool on Prefill batch lines
    #   (the ratio has two decimals: +-0.005 * pool tokens)
    decode_lines: int = 0
    chunk_islands: Optional[int] = None  # last value of the islands fragment (patch 0006)
    decode_islands: Optional[int] = None
    accept_lens: list[float] = dataclasses.field(default_factory=list)


class LogScan:
    """Scan the server log from the byte offset at construction (or the last `reset()`).

    Decode lines carry exact `#swa token` counts; prefill lines only a two-decimal usage ratio,
    converted with `swa_pool` (tokens) when given. Needs `--decode-log-interval 1` for a peak over
    every decode step.
    """

    def __init__(self, log_path: str | pathlib.Path, swa_pool: Optional[int] = None):
        self.log_path = pathlib.Path(log_path)
        self.swa_pool = swa_pool
        self.reset()

    def reset(self) -> None:
        self.offset = self.log_path.stat().st_size

    def text(self) -> str:
        with open(self.log_path, "rb") as f:
            f.seek(self.offset)
            chunk = f.read()
        cut = chunk.rfind(b"\n") + 1
        return chunk[:cut].decode(errors="replace")

    def stats(self) -> LogStats:
        s = LogStats()
        for line in self.text().splitlines():
            if m := _PREFILL.search(line):
                s.prefill_new_tokens += int(m[1])
                s.prefill_cached_tokens += int(m[2])
                if self.swa_pool:
                    s.peak_swa_used_prefill = max(s.peak_swa_used_prefill,
                                                  round(float(m[3]) * self.swa_pool))
            elif m := _DECODE.search(line):
                s.decode_lines += 1
                s.peak_swa_used_decode = max(s.peak_swa_used_decode, int(m[1]))
                if mi := _ISLANDS.search(line):
                    s.chunk_islands, s.decode_islands = int(mi[1]), int(mi[2])
                if ma := _ACCEPT.search(line):
                    s.accept_lens.append(float(ma[1]))
        s.peak_swa_used = max(s.peak_swa_used_decode, s.peak_swa_used_prefill)
        return s


def island_inserts(text: str, kind: str) -> Optional[float]:
    """`sglang:swa_island_{kind}_inserts` from raw /metrics text (None if absent)."""
    name = f"sglang:swa_island_{kind}_inserts"
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            return float(line.rpartition(" ")[2])
    return None


def metrics_text(srv: SglangServer) -> str:
    r = requests.get(f"{srv.base_url}/metrics", timeout=30)
    r.raise_for_status()
    return r.text


class SwaSampler:
    """Sample `sglang:swa_used_tokens` from /metrics every `interval_s` in a thread; `peak`."""

    def __init__(self, srv: SglangServer, interval_s: float = 0.25):
        self.srv, self.interval_s = srv, interval_s
        self.peak = 0.0
        self.samples = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._loop, name="swa-sampler", daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                v = self.srv.metrics().get("sglang:swa_used_tokens")
                if v is not None:
                    self.peak = max(self.peak, v)
                    self.samples += 1
            except Exception:
                pass
            self._stop.wait(self.interval_s)

    def __enter__(self) -> "SwaSampler":
        self._t.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._t.join(timeout=30)


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


def follow_up_while_running(srv: SglangServer, prompt: Sequence[int], *, k: int, delta: int,
                            interval: int, a_max_new: int, b_new: Sequence[int] = (),
                            b_max_new: int = 8, timeout: float = 1200.0,
                            log=print) -> FollowUp:
    """A streams; at `>= k*interval + delta` generated tokens send B = prompt + A's first
    `k*interval + delta` output tokens + `b_new` while A runs. `expected_min_hit` = len(prompt) + k*interval (the islands floor)."""
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
    ra = a.wait(timeout)
    return FollowUp(prompt_len=len(prompt), generated_at_send=want, b_prompt_len=len(b_ids),
                    b_cached_tokens=b.cached_tokens, expected_min_hit=len(prompt) + k * interval,
                    a_running_when_b_done=a_running, a_output_ids=ra.output_ids,
                    b_output_ids=b.output_ids, a_completion_tokens=ra.completion_tokens,
                    seconds=time.monotonic() - t0)


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
                 timeout: float = 1200.0, log=print, name: str = "") -> list[Turn]:
    """1 + len(user_texts) turns; turn j+1 = turn j's prompt + turn j's output + user_texts[j].

    `gen` is the tokens per turn, or one count per turn.
    `after_finish`: each turn generates `gen` tokens and the next is sent when it has finished.
    `while_running`: each turn may generate `gen + run_on` tokens; the next is sent as soon as it
    has streamed `gen`, with those `gen` tokens as the previous output (the turn keeps running).
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
        max_new = gen if mode == "after_finish" else gen + run_on
        cur = StreamingRequest(srv.base_url, prompt, max_new, name=f"turn{j + 1}",
                               timeout=timeout)
        prev_running_at_send = None if prev is None else not prev[0].done.is_set()
        cur.start()
        # The first streamed token comes after this turn's prefill, where its cache hit was
        # decided; cached_tokens is in every stream chunk's meta_info.
        cur.wait_generated(1, timeout)
        prev_running_at_admit = None if prev is None else not prev[0].done.is_set()
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


def code_version() -> dict[str, Any]:
    """The project commit, uncommitted changes under python/ and patches/, and a digest of the
    installed island cache module (what a server booted now imports)."""
    import hashlib
    import subprocess

    def git(*args):
        try:
            return subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True,
                                  timeout=60).stdout.strip()
        except Exception as e:  # not a checkout
            return f"<{e!r}>"

    try:
        import importlib.util

        spec = importlib.util.find_spec("sglang.srt.mem_cache.swa_island_radix_cache")
        digest = hashlib.sha256(pathlib.Path(spec.origin).read_bytes()).hexdigest()[:16]
    except Exception as e:
        digest = f"<{e!r}>"
    return {"head": git("rev-parse", "--short", "HEAD"),
            "dirty": git("status", "--porcelain", "--", "python", "patches").splitlines(),
            "installed_swa_island_radix_cache_sha256_16": digest}
