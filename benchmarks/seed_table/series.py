"""A cell's per-iteration record and its summary (standard library only: runs in every environment).

Per scheduler iteration (a prefill batch or a decode step): ``running`` (requests holding a
request-pool row), ``waiting`` (queued), ``swa_held`` / ``full_held`` (tokens allocated and not
evictable: what admission cannot use), ``prefill_tokens`` (an extend batch's new tokens). The
summary keeps the running and waiting series exactly, as ``[iteration, value]`` at each change
(they change only at admissions, finishes and retractions), and the means that the table reads:
over every iteration, and over the iterations that end with requests still queued ("while
requests wait": where admission, not the supply of requests, decides how many run).
"""

from __future__ import annotations

from typing import Any, Dict, List, Sequence


def changes(values: Sequence[int]) -> List[List[int]]:
    """``[[i, v], ...]`` at ``i = 0`` and wherever ``values[i] != values[i - 1]``."""
    out: List[List[int]] = []
    for i, v in enumerate(values):
        if not out or out[-1][1] != v:
            out.append([i, v])
    return out


def expand(ch: Sequence[Sequence[int]], n: int) -> List[int]:
    """The series of ``n`` values that :func:`changes` gave ``ch`` for."""
    out: List[int] = []
    for k, (i, v) in enumerate(ch):
        end = ch[k + 1][0] if k + 1 < len(ch) else n
        out += [v] * (end - i)
    return out


def _mean(xs: Sequence[float]) -> float:
    return round(sum(xs) / len(xs), 2) if xs else 0.0


class Recorder:
    def __init__(self):
        self.extend: List[bool] = []
        self.running: List[int] = []
        self.waiting: List[int] = []
        self.swa_held: List[int] = []
        self.full_held: List[int] = []
        self.prefill_tokens = 0

    @property
    def iterations(self) -> int:
        return len(self.running)

    def add(self, *, extend: bool, running: int, waiting: int, swa_held: int, full_held: int,
            prefill_tokens: int) -> None:
        self.extend.append(extend)
        self.running.append(running)
        self.waiting.append(waiting)
        self.swa_held.append(swa_held)
        self.full_held.append(full_held)
        self.prefill_tokens += prefill_tokens

    def summary(self, cap: int) -> Dict[str, Any]:
        n = self.iterations
        idx = range(n)
        wait = [i for i in idx if self.waiting[i] > 0]
        dec = [i for i in idx if not self.extend[i] and self.running[i] > 0]
        dec_wait = [i for i in dec if self.waiting[i] > 0]

        def per_req(ii, held):
            return _mean([held[i] / self.running[i] for i in ii])

        return {
            "iterations": n,
            "extend_iterations": sum(self.extend),
            "decode_iterations": n - sum(self.extend),
            "waiting_iterations": len(wait),
            "running_mean": _mean(self.running),
            "running_mean_waiting": _mean([self.running[i] for i in wait]),
            "running_max": max(self.running, default=0),
            "iterations_at_cap": sum(r >= cap for r in self.running),
            "swa_held_per_running_mean": per_req(dec, self.swa_held),
            "swa_held_per_running_mean_waiting": per_req(dec_wait, self.swa_held),
            "swa_held_max": max(self.swa_held, default=0),
            "full_held_mean_waiting": _mean([self.full_held[i] for i in wait]),
            "swa_held_mean_waiting": _mean([self.swa_held[i] for i in wait]),
            "prefill_tokens": self.prefill_tokens,
            "running_changes": changes(self.running),
            "waiting_changes": changes(self.waiting),
        }
