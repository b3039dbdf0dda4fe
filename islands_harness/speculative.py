"""Speculative decoding on the CPU harness (sglang 0.5.23; issue 58): each mode's server
arguments, the server's own accept length, and the cadence probe that checks decode islands fire
on accumulated progress while a request advances by whole accept lengths.

    from islands_harness.speculative import ngram_args, cadence_probe
    SglangServer(path, [*model.server_args, *SERVER_ARGS, *ngram_args()], python=...)
    probe = cadence_probe(srv, prompt, marks=(96, 192, 288, 384), interval=16, draft_tokens=5)
    assert not probe.violations()

Why the probe warms a corpus first: the tiny models' greedy output is nearly random, so NGRAM
accepts almost nothing on a fresh prompt (accept length about 1.03 on 200 tokens). Request W
(``extra_key`` ``"warm"``, its own radix namespace) generates the continuation once; NGRAM's
corpus is shared by all requests, so A, the same prompt in the default namespace, then accepts
whole drafts (accept length ``draft_tokens``), while its follow-ups can only hit A's own islands
(W's cached transcript lies under another key).
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import subprocess
from typing import Sequence

from islands_harness.client import StreamingRequest, fetch_metrics, generate
from islands_harness.server import REPO_ROOT


def _bench_env() -> dict:
    """This environment for another interpreter: the repository on its path, nothing else."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO_ROOT)
    return env

NGRAM_DRAFT_TOKENS = 5
"""Tokens per NGRAM draft (``--speculative-num-draft-tokens``): a step commits 1 to 5 tokens.
5 is coprime with the harness's decode-island interval (16), so a modulo trigger that fires
when ``L % 16 == 0`` misses most multiples at full acceptance."""

SPEC_MEM_FRACTION = ("--mem-fraction-static", "0.3")
"""With a drafter, 0.5.23's memory profile counts more than the tiny weights: at the harness's
0.05 it refuses to start ("Loaded weights leave no GPU memory for the KV cache"). The pools stay
sized by ``--max-total-tokens``."""


def ngram_args(draft_tokens: int = NGRAM_DRAFT_TOKENS, *, cpu: bool = True) -> list[str]:
    """Server arguments for NGRAM speculative decoding (no draft model: drafts come from a corpus
    of the requests' own tokens); ``cpu``: with the CPU harness's memory fraction."""
    return ["--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens",
            str(draft_tokens), *(SPEC_MEM_FRACTION if cpu else ())]


MTP_STEPS, MTP_DRAFT_TOKENS = 3, 4
"""Frozen-KV MTP's draft: 3 steps of top-1 (a chain), 4 tokens verified a step. topk > 1 needs
the triton or trtllm_mha backend (``frozen_kv_mtp_worker_v2.py``), which the CPU harness has
not."""


def build_assistant(target_dir, python) -> pathlib.Path:
    """The tiny Gemma 4 assistant of ``target_dir`` (``islands_harness.tiny_gemma4_assistant``),
    built by ``python``: the environment that serves it, whose transformers (5.19, what 0.5.23
    pins) writes the published layout."""
    out = subprocess.run([str(python), "-m", "islands_harness.tiny_gemma4_assistant",
                          "--target", str(target_dir)], cwd=str(REPO_ROOT), capture_output=True,
                         text=True, timeout=600, env=_bench_env())
    if out.returncode != 0:
        raise RuntimeError(f"building the assistant failed:\n{out.stderr[-3000:]}")
    return pathlib.Path(out.stdout.strip().splitlines()[-1])


def frozen_kv_mtp_args(assistant_dir, *, cpu: bool = True) -> list[str]:
    """Server arguments for Gemma 4's own drafter: the assistant checkpoint as the draft model.
    sglang promotes ``EAGLE`` with a ``Gemma4AssistantForCausalLM`` draft to FROZEN_KV_MTP (its
    log says so); the assistant keeps no KV and reads the target's, its sliding window
    included."""
    return ["--speculative-algorithm", "EAGLE", "--speculative-draft-model-path",
            str(assistant_dir), "--speculative-num-steps", str(MTP_STEPS),
            "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens",
            str(MTP_DRAFT_TOKENS), *(SPEC_MEM_FRACTION if cpu else ())]


MODES = ("none", "ngram")
"""What a benchmark's ``--speculative`` takes on the CPU harness (0.5.23 arms only, any model):
``ngram`` needs no draft model. ``DRAFTER_MODES`` add a draft checkpoint."""

DRAFTER_MODES = ("mtp",)
"""Modes that serve a draft checkpoint beside the target: ``mtp``, Frozen-KV MTP with the tiny
Gemma 4 assistant (``build_assistant``; tiny Gemma 4 only). Taken by the soak
(``benchmarks/soak.py --model gemma4 --speculative mtp``) and
``test/server/test_speculative_main.py``, not by the benchmarks that read ``MODES``."""

ALL_MODES = MODES + DRAFTER_MODES


def mode_args(mode: str, assistant_dir=None) -> list[str]:
    """The server arguments of ``--speculative MODE`` (``ALL_MODES``) on the CPU harness;
    ``assistant_dir``: the draft checkpoint, which ``mtp`` needs and the others ignore."""
    if mode not in ALL_MODES:
        raise ValueError(f"--speculative must be one of {', '.join(ALL_MODES)}, got {mode!r}")
    if mode == "mtp":
        if assistant_dir is None:
            raise ValueError("--speculative mtp needs the assistant checkpoint "
                             "(islands_harness.speculative.build_assistant)")
        return frozen_kv_mtp_args(assistant_dir)
    return ngram_args() if mode == "ngram" else []


def server_accept_length(base_url: str) -> tuple[float, float]:
    """``(generation tokens, verify calls)`` from the server's own Prometheus counters
    (``sglang:generation_tokens_total``, ``sglang:spec_verify_calls_total``); their ratio over a
    run, less one token per request for its prefill, is the mean accept length."""
    m = fetch_metrics(base_url)
    return (m.value("sglang:generation_tokens_total", default=0.0),
            m.value("sglang:spec_verify_calls_total", default=0.0))


@dataclasses.dataclass
class CadenceProbe:
    """A running request's follow-ups at ``marks`` generated tokens. ``hits[i]``: the follow-up's
    cached tokens; ``bound``: the most a follow-up may miss of ``prompt + mark`` if a decode
    island fires whenever ``interval`` tokens were committed since the last one (a step commits
    at most ``draft_tokens``)."""

    prompt_len: int
    marks: list[int]
    hits: list[int]
    bound: int
    a_running: list[bool]
    a_accept_length: float
    w_accept_length: float
    a_equals_w: bool
    a_output_ids: list[int]

    def gaps(self) -> list[int]:
        return [self.prompt_len + m - h for m, h in zip(self.marks, self.hits)]

    def violations(self) -> list[tuple[int, int]]:
        """``(mark, gap)`` wherever the follow-up missed more than ``bound`` tokens."""
        return [(m, g) for m, g in zip(self.marks, self.gaps()) if g > self.bound]

    def min_islands(self) -> int:
        """What the run implies: ``floor(generated / (interval + draft tokens))`` islands."""
        return self.marks[-1] // self.bound if self.bound else 0


def cadence_probe(srv, prompt: Sequence[int], *, marks: Sequence[int], interval: int,
                  draft_tokens: int, max_new: int = 800, warm: bool = True,
                  timeout: float = 600.0) -> CadenceProbe:
    """W (``extra_key="warm"``) generates ``marks[-1] + 16`` tokens so the corpus knows the
    continuation (skipped with ``warm=False``); A streams ``max_new`` tokens of the same prompt;
    at each mark a follow-up (A's prompt and first ``mark`` tokens, then an id A never sent,
    1 new token) goes in while A runs; A is aborted after the last. Follow-ups are spaced more
    than ``interval + draft_tokens`` apart, so one's own prompt, cached once it finished, cannot
    cover the next's bound."""
    bound = interval + draft_tokens
    if any(b - a <= bound for a, b in zip(marks, marks[1:])):
        raise ValueError(f"marks {list(marks)} must be more than {bound} tokens apart")
    w_accept = 0.0
    if warm:
        w = generate(srv.base_url, prompt, marks[-1] + 16, timeout=timeout, extra_key="warm")
        w_accept = float(w.meta_info.get("spec_accept_length") or 0.0)
    a = StreamingRequest(srv.base_url, prompt, max_new, name="A", timeout=timeout).start()
    hits, running = [], []
    for mark in marks:
        snap = a.wait_generated(mark, timeout=timeout)
        nxt = snap[mark] if mark < len(snap) else None
        fresh = 5 if nxt == 4 else 4  # an id A did not send next
        b = generate(srv.base_url, list(prompt) + snap[:mark] + [fresh], 1, timeout=timeout)
        hits.append(b.cached_tokens)
        running.append(not a.done.is_set())
    a.abort(timeout)
    ra = a.wait(timeout)
    out = ra.output_ids if ra else []
    return CadenceProbe(
        prompt_len=len(prompt), marks=list(marks), hits=hits, bound=bound, a_running=running,
        a_accept_length=float((ra.meta_info if ra else {}).get("spec_accept_length") or 0.0),
        w_accept_length=w_accept,
        a_equals_w=(not warm) or out[:marks[-1]] == w.output_ids[:marks[-1]],
        a_output_ids=out)
