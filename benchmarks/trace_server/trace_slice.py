"""The slice of a Mooncake trace that a CPU server can serve, and its token ids.

A contiguous run of the trace shares little within itself (a conversation's next turn comes
minutes and thousands of requests later: the first 96 requests of the committed trace, scaled,
have a no-forget bound of 0.035, nearly all of it the first block every request shares). So the
slice keeps whole conversations instead: every request whose second block's hash id is
``0 mod thin`` (all requests share their first block, the trace's common system prompt; a request
of one block has no conversation and is dropped), the first ``limit`` of them in arrival order.
Their arrival times, from the first one's, are divided by ``time_factor`` (a minute of the trace
in ``60 / time_factor`` seconds), and their output lengths capped at ``output_cap x scale``
tokens, so after ``traces.scale(.., scale)`` no output is longer than ``output_cap``. A request
whose scaled input and output exceed the served model's context (``max_context``, 4,096 tokens for
tiny Gemma 4: 65,536 production tokens) is dropped.

The slice is written as a Mooncake-format file (production lengths, block 512) that the server
run and the in-process replay (``trace_replay.replay``, ``--scale``) both read, so the two see the
same requests at the same times. Token ids: ``traces.TokenMap`` at the scaled block, drawn from the
tiny model's real vocabulary ``[TOKEN_LO, real_vocab)``.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
from typing import Any, Dict, List, Optional, Sequence

import _bench_path  # noqa: F401  (puts the repository root and benchmarks/ on sys.path)
from trace_replay import traces

TOKEN_LO = 4
"""The tiny tokenizers' first ordinary id (0-3 are special)."""


@dataclasses.dataclass(frozen=True)
class SliceSpec:
    """What slice to take: ``trace`` (a Mooncake file), ``thin`` (keep 1 conversation in
    ``thin``), ``limit`` (requests), ``scale`` (length divisor, a divisor of 512), ``time_factor``
    (arrival times divided by it), ``output_cap`` (scaled output tokens at most), ``max_context``
    (the served model's context: requests whose scaled input and output exceed it are dropped)."""

    trace: str = str(traces.CONVERSATION)
    thin: int = 64
    limit: int = 96
    scale: int = 16
    time_factor: float = 60.0
    output_cap: int = 64
    max_context: int = 4096

    @property
    def block(self) -> int:
        """The scaled block in tokens (512 / scale)."""
        return traces.MOONCAKE_BLOCK // self.scale


def select(reqs: Sequence[traces.TraceRequest], thin: int, limit: int, scale: int = 1,
           output_cap: Optional[int] = None,
           max_context: Optional[int] = None) -> List[traces.TraceRequest]:
    """The first ``limit`` requests (in the order given) whose second hash id is ``0 mod thin``
    and, scaled by ``scale`` (output capped at ``output_cap``), fit ``max_context`` tokens."""
    if thin < 1 or limit < 1:
        raise ValueError(f"thin and limit must be positive, got {thin}, {limit}")
    out = []
    for r in reqs:
        if len(r.hash_ids) < 2 or r.hash_ids[1] % thin:
            continue
        if max_context is not None:
            (s,) = traces.scale([r], scale)
            if s.input_len + min(s.output_len, output_cap or s.output_len) > max_context:
                continue
        out.append(r)
        if len(out) == limit:
            break
    return out


def slice_rows(spec: SliceSpec) -> List[Dict[str, Any]]:
    """The slice as Mooncake rows (production lengths; ``timestamp`` in ms from the first
    request, divided by ``time_factor``; ``output_length`` capped at ``output_cap x scale``)."""
    if spec.time_factor <= 0 or spec.output_cap < 1:
        raise ValueError("time_factor and output_cap must be positive")
    picked = select(traces.load(spec.trace), spec.thin, spec.limit, spec.scale, spec.output_cap,
                    spec.max_context)
    if not picked:
        raise traces.TraceError(f"{spec.trace}: no conversation with thin {spec.thin}")
    t0 = picked[0].t_ms
    return [{"timestamp": int(round((r.t_ms - t0) / spec.time_factor)),
             "input_length": r.input_len,
             "output_length": min(r.output_len, spec.output_cap * spec.scale),
             "hash_ids": list(r.hash_ids)} for r in picked]


def write_slice(spec: SliceSpec, path: pathlib.Path) -> pathlib.Path:
    """Write ``slice_rows(spec)`` to ``path`` (.jsonl), parents made; ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in slice_rows(spec)))
    return path


def scaled(path: str | pathlib.Path, scale: int) -> List[traces.TraceRequest]:
    """The slice file's requests with lengths divided by ``scale`` (``traces.scale``)."""
    reqs = traces.load(path)
    return traces.scale(reqs, scale) if scale != 1 else reqs


def token_map(block: int, vocab: int, seed: int = 0) -> traces.TokenMap:
    """``TokenMap`` at ``block`` tokens per hash id, ids in ``[TOKEN_LO, vocab)``."""
    return traces.TokenMap(block=block, low=TOKEN_LO, high=vocab, seed=seed)


def stats(reqs: Sequence[traces.TraceRequest], block: int) -> Dict[str, Any]:
    """Requests, tokens (input, output, longest input), span in seconds and no-forget bound."""
    n = len(reqs)
    return {"requests": n, "input_tokens": sum(r.input_len for r in reqs),
            "output_tokens": sum(r.output_len for r in reqs),
            "max_input": max(r.input_len for r in reqs),
            "max_output": max(r.output_len for r in reqs),
            "span_s": round((reqs[-1].t_ms - reqs[0].t_ms) / 1000.0, 3),
            "no_forget_bound": round(traces.no_forget_bound(reqs, block=block), 4)}
