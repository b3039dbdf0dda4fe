"""The scheduler's log lines, parsed in one place: `Prefill batch`, `Decode batch` (with the SWA
hold fragment of patch 0011), retractions, and the pool sizes and island warnings of the boot log.

The decode and prefill usage parts are written by upstream's `PoolStats.get_*_usage_msg_parts`
(`sglang/srt/managers/scheduler_components/pool_stats_observer.py`, patched by 0011 to add the
hold fragment); `test/tools/test_harness_units.py` formats lines with that real class and parses
them back, so a change of the writer breaks the test, not a benchmark's figures.

Token counts are tokens; `*_use` are the two-decimal usage ratios the log prints.
"""

from __future__ import annotations

import pathlib
import re
from typing import Any, Iterable, Optional

TIMESTAMP = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\]")
DECODE = re.compile(
    r"Decode batch(?: \[\d+\])?, #running-req: (?P<run>\d+), #full token: (?P<full_tok>\d+), "
    r"full token usage: (?P<full_use>[\d.]+), #swa token: (?P<swa_tok>\d+), "
    r"swa token usage: (?P<swa_use>[\d.]+)"
)
HOLD = re.compile(
    r"swa held/req: (?P<held_mean>\d+) \(max (?P<held_max>\d+)\), islands: (?P<chunk_islands>\d+) "
    r"chunk \+ (?P<decode_islands>\d+) decode, swa reclaimed: (?P<freed>\d+) at commit \+ "
    r"(?P<cold>\d+) cold \+ (?P<window>\d+) window, #tombstone token: (?P<tomb>\d+)"
)
PREFILL = re.compile(
    r"Prefill batch(?: \[\d+\])?, #new-seq: (?P<new_seq>\d+), #new-token: (?P<new_tok>\d+), "
    r"#cached-token: (?P<cached>\d+), full token usage: (?P<full_use>[\d.]+), "
    r"swa token usage: (?P<swa_use>[\d.]+), #running-req: (?P<run>\d+), #queue-req: (?P<queue>\d+)"
)
QUEUE = re.compile(r"#queue-req: (\d+)")
ACCEPT = re.compile(r"accept len: ([\d.]+)")
RETRACT = re.compile(r"#retracted_reqs: (\d+)")
POOLS = re.compile(r"swa size: (\d+), full size: (\d+)")
BIND_WARN = re.compile(r"binds admission at about ([\d.]+) running requests")
CAPACITY_WARN = re.compile(r"carries about (\d+) running requests at the island floor")

_FLOATS = {"full_use", "swa_use"}


def _fields(m: re.Match) -> dict[str, Any]:
    return {k: float(v) if k in _FLOATS else int(v) for k, v in m.groupdict().items()}


def parse_line(line: str) -> Optional[dict[str, Any]]:
    """One log line -> `{"kind": "decode" | "prefill" | "retract", "t": timestamp, ...}`, or None.

    decode: run, full_tok, full_use, swa_tok, swa_use, queue (when logged), accept_len (speculative
    decoding), and with a hold fragment held_mean, held_max, chunk_islands, decode_islands, freed,
    cold, window, tomb. prefill: new_seq, new_tok, cached, full_use, swa_use, run, queue.
    retract: n (requests retracted at once).
    """
    ts = TIMESTAMP.match(line)
    t = ts.group(1) if ts else None
    if (m := DECODE.search(line)) is not None:
        d = {"kind": "decode", "t": t, **_fields(m)}
        if (q := QUEUE.search(line)) is not None:
            d["queue"] = int(q.group(1))
        if (a := ACCEPT.search(line)) is not None:
            d["accept_len"] = float(a.group(1))
        if (h := HOLD.search(line)) is not None:
            d.update(_fields(h))
        return d
    if (m := PREFILL.search(line)) is not None:
        return {"kind": "prefill", "t": t, **_fields(m)}
    if (m := RETRACT.search(line)) is not None:
        return {"kind": "retract", "t": t, "n": int(m.group(1))}
    return None


def parse_lines(lines: Iterable[str]) -> dict[str, list]:
    """Log lines -> `{"decode": [...], "prefill": [...], "retract_events": [n, ...]}` in log order
    (the dicts of `parse_line`, without `kind`)."""
    out: dict[str, list] = {"decode": [], "prefill": [], "retract_events": []}
    for line in lines:
        e = parse_line(line)
        if e is None:
            continue
        kind = e.pop("kind")
        if kind == "retract":
            out["retract_events"].append(e["n"])
        else:
            out[kind].append(e)
    return out


def parse_boot(text: str) -> dict[str, Any]:
    """The pool sizes the scheduler logged at boot and the island cache's capacity warnings."""
    out: dict[str, Any] = {}
    if (m := POOLS.search(text)) is not None:
        out["swa_pool_log"], out["full_pool_log"] = int(m.group(1)), int(m.group(2))
    if (m := BIND_WARN.search(text)) is not None:
        out["server_predicted_bind"] = float(m.group(1))
    if (m := CAPACITY_WARN.search(text)) is not None:
        out["server_island_capacity"] = int(m.group(1))
    return out


class LogTail:
    """The complete lines a log file gained since construction (or the last `advance`).

    `text()` reads from the mark without moving it; `advance()` returns the new complete lines and
    moves the mark past them (a partial last line waits for the next call).
    """

    def __init__(self, path: str | pathlib.Path):
        self.path = pathlib.Path(path)
        self.offset = self.path.stat().st_size

    def _read(self) -> tuple[str, int]:
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            chunk = f.read()
        cut = chunk.rfind(b"\n") + 1
        return chunk[:cut].decode(errors="replace"), cut

    def text(self) -> str:
        return self._read()[0]

    def advance(self) -> str:
        text, cut = self._read()
        self.offset += cut
        return text

    def reset(self) -> None:
        self.offset = self.path.stat().st_size
