"""The decode-reuse benchmark's report: every arm's outputs against the reference arm's and
against transformers' greedy decoding, and the markdown table (rendered from the result JSON
alone: ``test_results_regenerate.py``)."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import _bench_path  # noqa: F401  (the repository root and benchmarks/ on sys.path)
from decode_reuse.setup import BASELINE, CHUNK, PAGE, WINDOW, progress


def reference_arm(arms: dict[str, dict[str, Any]]) -> str:
    """The arm the others are compared with: ``upstream`` when it ran, else the first."""
    return "upstream" if "upstream" in arms else next(iter(arms))


def first_difference(a: list[int], b: list[int]) -> int:
    """The first index where two token lists differ (the shorter one's length if one is a prefix)."""
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def compare_outputs(arms: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Every arm's outputs against the reference arm's (``reference_arm``), request by request."""
    ref = reference_arm(arms)
    up = arms[ref]["_outputs"]
    diff, compared = {}, set(up)
    for arm, res in arms.items():
        if arm == ref:
            continue
        other = res["_outputs"]
        compared |= set(other)
        for name in sorted(set(up) | set(other)):
            a, b = up.get(name), other.get(name)
            if a != b:
                first = None if a is None or b is None else first_difference(a, b)
                diff[f"{arm}:{name}"] = {"first_diff": first}
    out = {"requests_compared": len(compared), "arms_compared": sorted(set(arms) - {ref}),
           "differ": diff, "all_equal": not diff}
    if ref != "upstream":
        out["reference"] = ref
    return out


def hf_check(model: pathlib.Path, arms: dict[str, dict[str, Any]],
             python: str | None = None) -> dict[str, Any]:
    """The reference arm's outputs against transformers' greedy decoding of the same input ids
    (fp32, CPU, ``islands_harness.hf_oracle``), request by request, as many tokens as the server
    returned. With every arm equal to the reference, every arm is transformers' greedy.
    ``python``: decode in that interpreter (``OracleWorker``; a model this `.venv`'s transformers
    cannot load, Gemma 4) instead of this process."""
    from contextlib import nullcontext

    from islands_harness.hf_oracle import OracleWorker, greedy_decode_one

    ref = reference_arm(arms)
    ins, outs = arms[ref]["_inputs"], arms[ref]["_outputs"]
    differ = {}
    with (OracleWorker(str(python), model) if python else nullcontext()) as worker:
        for name in sorted(outs):
            want = (worker(ins[name], len(outs[name])) if worker else
                    greedy_decode_one(model, ins[name], len(outs[name])))
            if want != outs[name]:
                differ[name] = {"first_diff": first_difference(want, outs[name])}
    progress(f"transformers' greedy: {len(outs) - len(differ)} of {len(outs)} {ref} outputs equal")
    return {"reference": ref, "requests": len(outs), "differ": differ, "all_equal": not differ}


def admitted_after_previous_finished(a: dict[str, Any]) -> list[str]:
    """The `while_running` turns of one arm whose previous turn had already finished when they were
    admitted (the stream lagged past `--run-on`): their hit covers the finished transcript, not
    decode islands, so they do not measure reuse of a running output."""
    late = []
    for key, ph in a["phases"].items():
        if key == "conversation_while_running":
            late += [f"conversation turn {t['turn']}" for t in ph["turns"][1:]
                     if not t["prev_running_at_admit"]]
        elif key == "agents":
            agents = len(ph["turns"])
            late += [f"agents turn {t['turn']} ({agents - t['prev_running_at_admit']} of {agents})"
                     for t in ph["per_turn"][1:] if t["prev_running_at_admit"] < agents]
    return late


def markdown(result: dict[str, Any]) -> str:
    arms = result["arms"]
    names = list(arms)
    sh = result["shape"]
    lines = [
        f"### Decode-region reuse on the real server: tiny "
        f"{'Laguna' if 'model' not in result else 'model `' + result['model'] + '`'}, "
        f"window {WINDOW}, page {PAGE}, "
        f"chunked prefill {CHUNK} (decode-island interval {sh['interval']})",
        "",
        f"Command: `{result['command']}`",
        "",
        "| metric | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(names),
    ]

    def row(label, fn):
        lines.append(f"| {label} | " + " | ".join(str(fn(arms[n])) for n in names) + " |")

    fu = lambda a: a["phases"]["follow_up"]  # noqa: E731
    row(f"(a) follow-up: B cached / B prompt (A prompt {sh['prompt_len']}, B sent at A's n-th "
        f"token)", lambda a: f"{fu(a)['b_cached_tokens']} / {fu(a)['b_prompt_len']} "
        f"(n={fu(a)['generated_at_send']})")
    row("(a) hit tokens on A's running output / expected min",
        lambda a: f"{a['hit_tokens_on_running_output']} / {a['expected_min_hit_tokens']}")
    row("(a) A still running when B returned", lambda a: fu(a)["a_running_when_b_done"])
    for mode in sh["modes"]:
        key = f"conversation_{mode}"

        def turns(a, key=key):
            return ", ".join(f"{t['cached_tokens']}/{t['prompt_len']}"
                             for t in a["phases"][key]["turns"][1:])

        def covered(a, key=key):
            return ", ".join(f"{t['prev_output_covered']}/{t['prev_transcript_len'] - t['prev_prompt_len']}"
                             for t in a["phases"][key]["turns"][1:])
        row(f"(b) conversation {mode}: turns 2.. cached / prompt", turns)
        row(f"(b) conversation {mode}: previous output hit / re-sent", covered)
    row("agents: cached-token share per turn", lambda a: ", ".join(
        f"{s:.3f}" for s in a["cached_share_per_turn"]))
    row("agents: previous output hit / re-sent (turns 2..)", lambda a: ", ".join(
        f"{t['prev_output_tokens_hit']}/{t['prev_output_tokens_resent']}"
        for t in a["phases"]["agents"]["per_turn"][1:]))
    row("agents: prefill tokens computed (client / log #new-token)", lambda a: (
        f"{a['phases']['agents']['prefill_tokens_computed']} / "
        f"{a['phases']['agents']['prefill_new_tokens_log']}"))
    row("prefill tokens computed, all phases (client / log #new-token)",
        lambda a: f"{a['prefill_tokens_computed']} / {a['prefill_new_tokens_log']}")
    for ph in arms[names[0]]["phases"]:
        row(f"peak SWA used, {ph}: decode lines (exact) / prefill lines (+-"
            f"{arms[names[0]]['prefill_usage_resolution_tokens']}) / /metrics sampled",
            lambda a, ph=ph: (f"{a['phases'][ph]['peak_swa_used_decode']} / "
                              f"{a['phases'][ph]['peak_swa_used_prefill']} / "
                              f"{a['phases'][ph]['peak_swa_used_metrics']}"))
    row("SWA pool / full pool (tokens)", lambda a: f"{a['swa_pool_tokens']} / {a['full_pool_tokens']}")
    row("decode islands / chunk islands inserted", lambda a: f"{a['decode_islands']} / {a['chunk_islands']}")
    row("boot s / workload s", lambda a: f"{a['boot_s']} / "
        f"{round(sum(p['seconds'] for p in a['phases'].values()), 1)}")
    eq = result["outputs"]
    codes = {n: arms[n].get("code_at_boot", {}) for n in names}
    lines += ["", "Code at each boot: " + "; ".join(
        f"{n}: {c.get('head')}{' +dirty ' + str(c['dirty']) if c.get('dirty') else ''}, "
        f"installed swa_island_radix_cache.py sha256 {c.get('installed_swa_island_radix_cache_sha256_16')}"
        for n, c in codes.items())]
    others = ", ".join(eq.get("arms_compared") or ["islands"])
    ref = eq.get("reference", "upstream")
    lines += ["", f"Outputs: {eq['requests_compared']} requests, {others} == {ref} token for "
                  f"token: {eq['all_equal']}" + ("" if eq["all_equal"] else f" (differ: {eq['differ']})"),
              *(["", f"Transformers' greedy (fp32, same input ids): {result['hf']['requests']} "
                 f"{result['hf']['reference']} outputs equal token for token: "
                 f"{result['hf']['all_equal']}" + ("" if result["hf"]["all_equal"] else
                                                   f" (differ: {result['hf']['differ']})")]
                if "hf" in result else []),
              *(["", "Admitted after the previous turn had finished (not a running output; raise "
                 "`--run-on`): " + "; ".join(f"{n}: {', '.join(late)}" for n, late in (
                     (n, admitted_after_previous_finished(arms[n])) for n in names) if late)]
                if any(admitted_after_previous_finished(arms[n]) for n in names) else []),
              *(["", f"Upstream baseline for comparison (same model and shape): "
                     f"{json.dumps(BASELINE)}"] if result.get("model", "laguna") == "laguna" else []),
              f"Total runtime: {result['runtime_s']} s", ""]
    return "\n".join(lines)
