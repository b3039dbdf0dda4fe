"""A request trace in the Mooncake FAST'25 format, read, checked and turned into token ids.

One JSON object per line: ``timestamp`` (ms from the first request), ``input_length``,
``output_length`` (tokens) and ``hash_ids`` (prefix block hashes, ``block`` tokens each, the last
block possibly partial). Token ids: each hash id stands for the same ``block`` tokens wherever it
appears (drawn from a generator seeded by ``(seed, hash id)``); the tokens past a request's last
full block are its own (seeded by ``(seed, request index)``), so no two requests share them.
Standard library plus numpy: runs in every environment.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import pathlib
from typing import Iterable, List, Optional, Sequence

import numpy as np

MOONCAKE_BLOCK = 512
"""The Mooncake release's block size in tokens."""

CONVERSATION = pathlib.Path(__file__).resolve().parents[1] / "traces" / "mooncake_conversation.jsonl.gz"
"""The Mooncake conversation trace (one hour, 12,031 requests), as committed."""

_OWN = 1 << 40
"""Offset of a request's own tail seed, apart from every hash id."""


@dataclasses.dataclass(frozen=True)
class TraceRequest:
    """One request: arrival ``t_ms``, ``input_len`` / ``output_len`` tokens, ``hash_ids``."""

    index: int
    t_ms: int
    input_len: int
    output_len: int
    hash_ids: tuple

    def full_blocks(self, block: int) -> int:
        return self.input_len // block


class TraceError(ValueError):
    """A trace line that does not follow the format; the message names the file and line."""


def _check(row: object, where: str, block: int) -> None:
    if not isinstance(row, dict):
        raise TraceError(f"{where}: expected a JSON object, got {type(row).__name__}")
    for key in ("timestamp", "input_length", "output_length", "hash_ids"):
        if key not in row:
            raise TraceError(f"{where}: missing {key!r}")
    for key in ("timestamp", "input_length", "output_length"):
        v = row[key]
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise TraceError(f"{where}: {key} must be a non-negative integer, got {v!r}")
    if row["input_length"] < 1 or row["output_length"] < 1:
        raise TraceError(f"{where}: input_length and output_length must be at least 1")
    ids = row["hash_ids"]
    if not isinstance(ids, list) or not all(isinstance(h, int) and h >= 0 for h in ids):
        raise TraceError(f"{where}: hash_ids must be a list of non-negative integers")
    need = -(-row["input_length"] // block)
    if len(ids) != need:
        raise TraceError(f"{where}: {len(ids)} hash_ids for input_length {row['input_length']} "
                         f"(block {block} needs {need})")


def load(path: str | pathlib.Path, *, block: int = MOONCAKE_BLOCK,
         limit: Optional[int] = None, minutes: Optional[float] = None) -> List[TraceRequest]:
    """The trace at ``path`` (``.gz``: gzip), checked line by line (``TraceError`` names the first bad line),
    in arrival order: the first ``limit`` requests and/or those arriving in the first
    ``minutes``."""
    path = pathlib.Path(path)
    out: List[TraceRequest] = []
    with (gzip.open(path, "rt") if path.suffix == ".gz" else path.open()) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path}:{n}"
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise TraceError(f"{where}: not JSON ({e.msg})") from None
            _check(row, where, block)
            if minutes is not None and row["timestamp"] >= minutes * 60_000:
                continue
            out.append(TraceRequest(len(out), row["timestamp"], row["input_length"],
                                    row["output_length"], tuple(row["hash_ids"])))
    out.sort(key=lambda r: r.t_ms)
    out = [dataclasses.replace(r, index=i) for i, r in enumerate(out)]
    if limit is not None:
        out = out[:limit]
    if not out:
        raise TraceError(f"{path}: no requests (limit {limit}, minutes {minutes})")
    return out


def scale(requests: Sequence[TraceRequest], factor: int) -> List[TraceRequest]:
    """The trace with lengths divided by ``factor`` (at least 1 token each), for a block of
    ``MOONCAKE_BLOCK // factor``: a request keeps its blocks and their sharing."""
    if factor < 1 or MOONCAKE_BLOCK % factor:
        raise ValueError(f"factor must divide {MOONCAKE_BLOCK}, got {factor}")
    out = []
    for r in requests:
        blk = MOONCAKE_BLOCK // factor
        full, tail = divmod(r.input_len, MOONCAKE_BLOCK)
        n_in = full * blk + (-(-tail // factor) if tail else 0)
        out.append(dataclasses.replace(r, input_len=max(1, n_in),
                                       output_len=max(1, r.output_len // factor)))
    return out


class TokenMap:
    """Token ids for a trace's requests: ``block`` ids per hash id, drawn uniformly from
    ``[low, high)``; a request's tokens past its last full block are its own."""

    def __init__(self, *, block: int = MOONCAKE_BLOCK, low: int = 0, high: int = 1 << 20,
                 seed: int = 0):
        if not 0 <= low < high:
            raise ValueError(f"need 0 <= low < high, got {low}, {high}")
        self.block, self.low, self.high, self.seed = block, low, high, seed

    def _draw(self, key: int, n: int) -> np.ndarray:
        return np.random.default_rng([self.seed, key]).integers(self.low, self.high, n)

    def tokens(self, r: TraceRequest) -> List[int]:
        full = r.full_blocks(self.block)
        parts = [self._draw(h, self.block) for h in r.hash_ids[:full]]
        tail = r.input_len - full * self.block
        if tail:
            parts.append(self._draw(_OWN + r.index, tail))
        return np.concatenate(parts).tolist() if parts else []


def no_forget_bound(requests: Iterable[TraceRequest], *, block: int = MOONCAKE_BLOCK,
                    partial: bool = False) -> float:
    """The share of input tokens an infinite cache would serve: per request, in arrival order,
    its leading blocks whose whole prefix of hash ids arrived before. ``partial``: count a
    matching partial last block too (the trace README's 0.374); without it, the bound of
    ``TokenMap``, whose tails are each request's own (0.373 on the conversation trace)."""
    ids: dict = {}  # (prefix id, hash id) -> prefix id
    seen: set = set()
    cov = total = 0
    for r in requests:
        total += r.input_len
        full = r.full_blocks(block)
        key, matched = 0, True
        for i, h in enumerate(r.hash_ids):
            key = ids.setdefault((key, h), len(ids) + 1)
            matched = matched and key in seen and (i < full or partial)
            if matched:
                cov += block if i < full else r.input_len - full * block
            seen.add(key)
    return cov / total if total else 0.0
