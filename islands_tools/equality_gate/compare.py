"""Equality gate, comparison: the two arms' outputs request by request, like with like, and each
against the HF oracle.

Only a pair with the same cache status in both boots is compared (cold with cold, cache-hit with
cache-hit; see ``expected_status``); the policy (which disagreement fails, which is an engine
property note) is in the docstring of scripts/equality_gate.py. Token indices are 0-based
positions in the output (or the prompt, for a prompt difference).
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Optional

from islands_harness.hf_oracle import NEAR_TIE_LOGITS, parts_at_near_tie

from .boot import BootData, Served
from .setup import say
from .workload import CLASSES, Req, Step, all_reqs

Oracle = Callable[[list[int], int], list[int]]
"""`(ids, n) -> HF's greedy ids`, with `.margin(ids)` (hf_oracle.next_token_margin): the gate's
oracle.Oracle."""


def first_diff(a: list[int], b: list[int]) -> int:
    """The first index where ``a`` and ``b`` differ (the shorter length if one is a prefix of the
    other); -1 if they are equal."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b)) if len(a) != len(b) else -1


def status(s: Served) -> str:
    return "hit" if s.cached_tokens > 0 else "cold"


def expected_status(r: Req, prompt_len: int, page: int) -> str:
    """The cache status ``r`` must have at page size ``page``: a prompt of at most one page cannot
    hit (the tree caches whole pages, and a match leaves at least one token to compute)."""
    return "cold" if r.expect == "hit" and prompt_len <= page else r.expect


@dataclasses.dataclass
class Verdict:
    """One request's comparison: at most one failure or one note, and the difference record
    (``first_difference`` in the summary) when the prompts or the outputs differ."""

    hf_off: bool
    hf_on: bool
    identical: bool = False
    failure: Optional[str] = None
    note: Optional[str] = None
    difference: Optional[dict] = None


def status_problem(r: Req, a: Served, b: Served, prompt_len: int, page: int,
                   on_label: str) -> tuple[str, Optional[str]]:
    """(the status the pair is compared under, the problem or None): a pair whose cache status
    is not the expected one in both arms is not like for like and is never compared."""
    sa, sb = status(a), status(b)
    expect = expected_status(r, prompt_len, page)
    if expect == "hit_on":
        # the islands boot must hit; the off boot's status is not compared (see the workload)
        if sb != "hit":
            return expect, (f"{r.name}: served cold in the {on_label} boot ({b.cached_tokens} "
                            f"cached), expected a hit")
        return sb, None
    if sa != sb or sa != expect:
        return expect, (f"{r.name}: cache status off={sa} ({a.cached_tokens}) {on_label}="
                        f"{sb} ({b.cached_tokens}), expected {expect} in both: not a "
                        f"like-for-like pair")
    return expect, None


def agreement_against_hf(r: Req, expect: str, a: Served, b: Served, prompt: list[int],
                         ref_a: list[int], oracle: Oracle, strict_oracle: bool, on_label: str,
                         v: Verdict) -> None:
    """Both arms agree: a cold serve that differs from HF fails under the strict policy unless
    it parts from HF at a near-tie (HF's margin there below `NEAR_TIE_LOGITS`) by taking HF's
    runner-up; anything else that differs from HF is an engine-property note."""
    v.identical = True
    if a.output_ids == ref_a:
        return
    i = first_diff(a.output_ids, ref_a)
    msg = (f"{r.name} ({expect}): off and {on_label} agree but differ from HF at "
           f"token {i} (server {a.output_ids[i:i + 4]}, HF {ref_a[i:i + 4]}; cached "
           f"off {a.cached_tokens}, on {b.cached_tokens})")
    if expect == "cold" and strict_oracle:
        if len(a.output_ids) == len(ref_a) and parts_at_near_tie(a.output_ids, ref_a, prompt,
                                                                  oracle.margin):
            v.note = (f"NEAR TIE (same in both boots; HF's margin below {NEAR_TIE_LOGITS:g}, "
                      f"the server took HF's runner-up): " + msg)
        else:
            v.failure = "cold serve differs from HF in both boots: " + msg
    else:
        v.note = "ENGINE PROPERTY (same in both boots, not islands): " + msg


def output_difference(page: int, r: Req, a: Served, b: Served, prompt_len: int,
                      ref_a: list[int], ref_b: list[int], on_label: str, v: Verdict) -> None:
    """The arms' outputs differ: the failure, with a few tokens either side of the first
    difference and which side HF agrees with."""
    i = first_diff(a.output_ids, b.output_ids)
    side = ("off matches HF, on does not" if a.output_ids == ref_a else
            "on matches HF, off does not" if b.output_ids == ref_b else "neither matches HF")
    lo = max(0, i - 2)
    d = {"page": page, "request": r.name, "class": r.cls, "token_index": i,
         "off": a.output_ids[lo:i + 4], "on": b.output_ids[lo:i + 4],
         "cached_off": a.cached_tokens, "cached_on": b.cached_tokens,
         "prompt_len": prompt_len, "hf": side}
    v.difference = d
    v.failure = (f"{r.name}: outputs differ at token {i} (from token {lo}: off "
                 f"{d['off']} vs {on_label} {d['on']}; cached off {a.cached_tokens}, "
                 f"{on_label} {b.cached_tokens}; {side})")


def judge(page: int, r: Req, off: BootData, on: BootData, oracle: Oracle, strict_oracle: bool,
          on_label: str) -> Verdict:
    """Compare request ``r`` across the arms and with HF (both prompts go to the oracle first)."""
    a, b = off.results[r.name], on.results[r.name]
    pa, pb = off.prompts[r.name], on.prompts[r.name]
    ref_a = oracle(pa, r.n)
    ref_b = ref_a if pb == pa else oracle(pb, r.n)
    v = Verdict(hf_off=a.output_ids == ref_a, hf_on=b.output_ids == ref_b)
    if pa != pb:
        i = first_diff(pa, pb)
        v.failure = (f"{r.name}: prompt differs from token {i} (built from an earlier "
                     f"request's output, which differed)")
        v.difference = {"page": page, "request": r.name, "class": r.cls,
                        "token_index": f"prompt {i}"}
        return v
    expect, problem = status_problem(r, a, b, len(pa), page, on_label)
    if problem:
        v.failure = problem
    elif a.output_ids == b.output_ids:
        agreement_against_hf(r, expect, a, b, pa, ref_a, oracle, strict_oracle, on_label, v)
    else:
        output_difference(page, r, a, b, len(pa), ref_a, ref_b, on_label, v)
    return v


def say_per_class(page: int, per_class: dict[str, dict[str, int]], on_label: str) -> None:
    for cls in CLASSES:
        if cls not in per_class:
            continue
        c = per_class[cls]
        mark = "identical" if c["identical"] == c["n"] else "identical  <-- DIFFERENCES"
        say(f"  page {page:<2} {cls:11s} {c['identical']}/{c['n']} {mark:12s}  "
            f"HF: off {c['hf_off']}/{c['n']}, {on_label} {c['hf_on']}/{c['n']}")


def evaluate(page: int, steps: list[Step], off: BootData, on: BootData, oracle: Oracle,
             strict_oracle: bool, on_label: str) -> tuple[list[str], list[str], dict]:
    """Per-class report; returns (failures, engine notes, summary)."""
    failures: list[str] = []
    notes: list[str] = []
    first: Optional[dict] = None
    per_class: dict[str, dict[str, int]] = {}
    for r in all_reqs(steps):
        c = per_class.setdefault(r.cls, {"n": 0, "identical": 0, "hf_off": 0, "hf_on": 0})
        v = judge(page, r, off, on, oracle, strict_oracle, on_label)
        c["n"] += 1
        c["hf_off"] += v.hf_off
        c["hf_on"] += v.hf_on
        c["identical"] += v.identical
        failures += [v.failure] if v.failure else []
        notes += [v.note] if v.note else []
        if first is None:
            first = v.difference
    say_per_class(page, per_class, on_label)
    return failures, notes, {"per_class": per_class, "first_difference": first}
