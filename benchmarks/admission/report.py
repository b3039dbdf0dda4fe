"""Admission benchmark, report: the aggregation over repeats (means, spreads, ratios to the
baseline arm), the acceptance checks, the result schema, the markdown and the plot.
"""

from __future__ import annotations

import pathlib
import statistics
from typing import Any, Dict, List, Optional, Sequence

import _bench_path  # noqa: F401  (puts the repository root on sys.path)
from admission.run import COUNTERS
from admission.setup import ARMS, BASELINE_ARM

HEADLINE = [  # (json key, phase, field)
    ("max_running", "no_reuse", "max_running"),
    ("mean_running", "no_reuse", "mean_running"),
    ("mean_running_step", "no_reuse", "mean_running_step"),
    ("frac_steps_at_cap", "no_reuse", "frac_steps_at_cap"),
    ("retractions", "no_reuse", "retractions"),
    ("retractions_log", "no_reuse", "retractions_log"),
    ("decode_steps", "no_reuse", "decode_steps"),
    ("prefill_tokens", "no_reuse", "prefill_tokens"),
    ("max_swa_used_tokens", "no_reuse", "max_swa_used_tokens"),
    ("max_swa_usage", "no_reuse", "max_swa_usage"),
    ("max_full_usage", "no_reuse", "max_full_usage"),
    ("throughput_tok_s", "no_reuse", "throughput_tok_s"),
    ("latency_mean_s", "no_reuse", "latency_mean_s"),
    ("wall_s", "no_reuse", "wall_s"),
    ("server_cpu_s", "no_reuse", "server_cpu_s"),
    ("tok_per_cpu_s", "no_reuse", "tok_per_cpu_s"),
    ("evicted_tokens", "no_reuse", "evicted_tokens"),
    ("island_freed_tokens", "no_reuse", "island_freed_tokens"),
    ("held_per_req_mean", "no_reuse", "held_per_req_mean"),
    ("held_per_req_max", "no_reuse", "held_per_req_max"),
    ("agent_hit_rate", "agent", "agent_hit_rate"),
    ("agent_hit_of_reusable", "agent", "agent_hit_of_reusable"),
    ("agent_ideal_hit_rate", "agent", "agent_ideal_hit_rate"),
    ("agent_max_running", "agent", "max_running"),
    ("agent_mean_running", "agent", "mean_running"),
    ("agent_retractions", "agent", "retractions"),
    ("agent_prefill_tokens", "agent", "prefill_tokens"),
    ("agent_max_swa_usage", "agent", "max_swa_usage"),
    ("agent_evicted_tokens", "agent", "evicted_tokens"),
    ("agent_island_freed_tokens", "agent", "island_freed_tokens"),
    ("agent_throughput_tok_s", "agent", "throughput_tok_s"),
    ("agent_latency_mean_s", "agent", "latency_mean_s"),
    ("agent_wall_s", "agent", "wall_s"),
    ("agent_server_cpu_s", "agent", "server_cpu_s"),
    ("agent_tok_per_cpu_s", "agent", "tok_per_cpu_s"),
]


RATIOS = [  # (json key, phase, field): value / the baseline arm's, per repeat
    ("throughput_ratio", "no_reuse", "throughput_tok_s"),
    ("latency_ratio", "no_reuse", "latency_mean_s"),
    ("cpu_throughput_ratio", "no_reuse", "tok_per_cpu_s"),
    ("agent_throughput_ratio", "agent", "throughput_tok_s"),
    ("agent_latency_ratio", "agent", "latency_mean_s"),
    ("agent_cpu_throughput_ratio", "agent", "tok_per_cpu_s"),
]


def _num(x) -> Optional[float]:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def aggregate(runs: List[Dict[str, Any]], mapping: Dict[str, Any], cap: int,
              baseline: str = BASELINE_ARM) -> Dict[str, Dict[str, Any]]:
    """Per arm: the mean over repeats of each headline field, its [min, max] spread, and the
    ratios to the baseline arm of the same repeat (so paired boots share machine conditions)."""
    by_arm: Dict[str, List[Dict[str, Any]]] = {}
    for r in runs:
        by_arm.setdefault(r["arm"], []).append(r)
    base = {r["repeat"]: r for r in by_arm.get(baseline, [])}
    arms: Dict[str, Dict[str, Any]] = {}
    for name, rs in by_arm.items():
        arm = ARMS.get(name)
        pool = mapping["pools"].get(arm.pool_key) if arm and arm.pool_key else None
        a: Dict[str, Any] = {
            "ratio": pool["ratio_equivalent"] if pool else None,
            "server_ratio": pool["server_ratio"] if pool else None,
            "swa_pool": _first_val(rs, "swa_pool_log", "swa_pool"),
            "full_pool": _first_val(rs, "full_pool_log", "full_pool"),
            "predicted_bind_without_islands": pool["bind_without_islands"] if pool else None,
            "islands": bool(arm and "--enable-swa-islands" in arm.args),
            "knobs": bool(arm and arm.env),
            "repeats": len(rs),
            "spread": {},
        }
        values: Dict[str, List[float]] = {}
        for key, phase, field in HEADLINE:
            vs = [_num(r.get(phase, {}).get(field)) for r in rs]
            vs = [v for v in vs if v is not None]
            if vs:
                values[key] = vs
        for key, phase, field in RATIOS:
            vs = []
            for r in rs:
                b = base.get(r["repeat"])
                x = _num(r.get(phase, {}).get(field))
                y = _num(b.get(phase, {}).get(field)) if b else None
                if x is not None and y:
                    vs.append(x / y)
            if vs:
                values[key] = vs
        for key, vs in values.items():
            mean = statistics.mean(vs)
            a[key] = int(mean) if key in ("max_running",) and all(v == int(v) for v in vs) \
                and len(set(vs)) == 1 else round(mean, 4)
            if len(vs) > 1:
                a["spread"][key] = [round(min(vs), 4), round(max(vs), 4)]
        if "max_running" in values:
            a["max_running"] = int(max(values["max_running"]))  # the max over repeats
            a["max_running_min_over_repeats"] = int(min(values["max_running"]))
        for phase in ("agent",):
            per_turn = [r[phase]["per_turn"] for r in rs if phase in r and "per_turn" in r[phase]]
            if per_turn:
                a["agent_hit_rate_per_turn"] = {
                    t: round(statistics.mean(p[t]["hit_rate"] for p in per_turn if t in p), 4)
                    for t in per_turn[0]}
        arms[name] = a
    return arms


def _first_val(rs, *keys):
    for r in rs:
        for k in keys:
            if r.get(k) is not None:
                return r[k]
    return None


def acceptance(arms: Dict[str, Dict[str, Any]], cap: int,
               workloads: Sequence[str] = ("no_reuse", "agent")) -> List[Dict[str, Any]]:
    """The issue's expected outcomes that the run's workloads measure, on the measured numbers."""
    checks = []

    def add(name, ok, detail):
        checks.append({"check": name, "pass": bool(ok) if ok is not None else None, "detail": detail})

    g = lambda arm, k: arms.get(arm, {}).get(k)  # noqa: E731
    i17, u17, i10 = "islands_0.17", "upstream_0.17", "islands_0.10"
    if "no_reuse" not in workloads:
        arms_nr: Dict[str, Any] = {}
    else:
        arms_nr = arms
    if i17 in arms_nr and u17 in arms_nr:
        ok = (g(i17, "max_running_min_over_repeats") == cap and g(i17, "retractions") == 0
              and (g(u17, "max_running") or 0) < cap)
        add("islands reach the cap with 0 retractions at 0.17-eq; upstream binds below it", ok,
            f"islands_0.17 max running {g(i17, 'max_running')} (min over repeats "
            f"{g(i17, 'max_running_min_over_repeats')}), retractions {g(i17, 'retractions')}, "
            f"steps at cap {g(i17, 'frac_steps_at_cap')}; upstream_0.17 max running "
            f"{g(u17, 'max_running')}, mean {g(u17, 'mean_running')}")
    if i10 in arms_nr:
        ok = g(i10, "max_running_min_over_repeats") == cap and g(i10, "retractions") == 0
        add("islands at 0.10-eq still do not bind", ok,
            f"islands_0.10 max running {g(i10, 'max_running')}, mean {g(i10, 'mean_running')}, "
            f"steps at cap {g(i10, 'frac_steps_at_cap')}, retractions {g(i10, 'retractions')}")
    if i17 in arms_nr and "chunk_cache" in arms_nr:
        x, y = g(i17, "throughput_tok_s"), g("chunk_cache", "throughput_tok_s")
        xc, yc = g(i17, "tok_per_cpu_s"), g("chunk_cache", "tok_per_cpu_s")
        ok = x is not None and y is not None and x >= y and (xc is None or yc is None or xc >= yc)
        add("no-reuse: islands throughput >= chunk_cache", ok,
            f"islands_0.17 {x} tok/s, {xc} tok/CPU-s vs chunk_cache {y} tok/s, {yc} tok/CPU-s; "
            f"prefill tokens computed {g(i17, 'prefill_tokens')} vs {g('chunk_cache', 'prefill_tokens')}")
    if i17 in arms and "agent" in workloads:
        others = [o for o in (u17, "upstream_knobs_0.17") if o in arms]
        x = g(i17, "agent_hit_rate")
        ok = x is not None and all(x > (g(o, "agent_hit_rate") or 0) for o in others)
        add("agent: islands keep a higher hit rate than upstream and upstream_knobs (same pool)", ok,
            f"islands_0.17 {x} vs " + ", ".join(f"{o} {g(o, 'agent_hit_rate')}" for o in others))
    for pool in ("0.17", "0.10"):  # issue 27: the arms on sglang 0.5.23
        mi, mains = f"main_islands_{pool}", [f"main_{pool}", f"main_knobs_{pool}"]
        mains = [m for m in mains if m in arms]
        if mi in arms_nr and mains:
            ok = (g(mi, "max_running_min_over_repeats") == cap and g(mi, "retractions") == 0)
            add(f"main_islands reach the cap with 0 retractions at {pool}-eq", ok,
                f"{mi} max running {g(mi, 'max_running')} (min over repeats "
                f"{g(mi, 'max_running_min_over_repeats')}), mean {g(mi, 'mean_running')}, "
                f"retractions {g(mi, 'retractions')}; " + ", ".join(
                    f"{m} max running {g(m, 'max_running')}, mean {g(m, 'mean_running')}, "
                    f"retractions {g(m, 'retractions')}" for m in mains))
        if mi in arms and mains and "agent" in workloads:
            x = g(mi, "agent_hit_rate")
            ok = x is not None and all(x >= (g(m, "agent_hit_rate") or 0) for m in mains)
            add(f"agent: main_islands hit rate >= main and main_knobs at {pool}-eq", ok,
                f"{mi} {x} vs " + ", ".join(f"{m} {g(m, 'agent_hit_rate')}" for m in mains))
    return checks


# keys that only a workload fills: no_reuse's headline, agent's hit rate
SCHEMA_ARM_KEYS = ("ratio", "max_running", "mean_running", "retractions", "throughput_ratio",
                   "latency_ratio", "agent_hit_rate")


_WORKLOAD_KEYS = {"no_reuse": SCHEMA_ARM_KEYS[1:6], "agent": ("agent_hit_rate",)}


def validate_result(result: Dict[str, Any]) -> None:
    """Raise ValueError unless ``result`` has the committed JSON's shape."""
    if not isinstance(result.get("cap"), int) or result["cap"] <= 0:
        raise ValueError("cap must be a positive integer")
    arms = result.get("arms")
    if not isinstance(arms, dict) or not arms:
        raise ValueError("arms must be a non-empty object")
    workloads = result.get("workloads") or list(_WORKLOAD_KEYS)
    skip = {k for w, keys in _WORKLOAD_KEYS.items() if w not in workloads for k in keys}
    for name, a in arms.items():
        missing = [k for k in SCHEMA_ARM_KEYS if k not in a and k not in skip]
        if missing:
            raise ValueError(f"arm {name}: missing {missing}")
        if name == "chunk_cache" and a["ratio"] is not None:
            raise ValueError("chunk_cache: ratio must be null (the server sizes that pool)")
        if name != "chunk_cache" and not isinstance(a["ratio"], (int, float)):
            raise ValueError(f"arm {name}: ratio must be a number")
        for k in SCHEMA_ARM_KEYS[1:]:
            if a.get(k) is not None and not isinstance(a[k], (int, float)):
                raise ValueError(f"arm {name}: {k} must be a number or null")
    if "mapping" in result and "pools" not in result["mapping"]:
        raise ValueError("mapping must carry pools")


def _f(x, nd=2) -> str:
    if x is None:
        return "–"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int) or (isinstance(x, float) and x == int(x) and abs(x) >= 100):
        return f"{int(x):,}"
    if nd == 0:
        return f"{x:,.0f}"
    return f"{x:.{nd}f}"


def _cell(a: Dict[str, Any], key: str, nd=2) -> str:
    s = _f(a.get(key), nd)
    sp = a.get("spread", {}).get(key)
    if sp and sp[0] != sp[1]:
        s += f" [{_f(sp[0], nd)}–{_f(sp[1], nd)}]"
    return s


def to_markdown(result: Dict[str, Any]) -> str:
    """The results file: header, scaling, workloads, result tables, acceptance."""
    L: List[str] = []
    model = f" `{result['model']}`" if "model" in result else ""
    L.append(f"# Admission under SWA-pool pressure (real SGLang server, CPU, tiny model{model})\n")
    L.append(f"Generated by `benchmarks/admission.py` on {result['date']} (HEAD "
             f"{result.get('git_head') or '?'}); "
             f"{result['repeats']} repeat(s), total runtime {result['runtime_s'] / 60:.1f} min "
             f"({'--quick' if result['quick'] else 'full'} workload).\n")
    L.append("Command:\n\n```\n" + result["command"] + "\n```\n")
    _scaling_section(L, result)
    _workloads_section(L, result)
    _results_section(L, result)
    _outcomes_section(L, result)
    return "\n".join(L) + "\n"


def _scaling_section(L: List[str], result: Dict[str, Any]) -> None:
    """Production pools -> CPU pools, island floors and the decode tail."""
    mp = result["mapping"]
    prod, cpu, pools = mp["production"], mp["cpu"], mp["pools"]
    L.append("## Scaling: production pools → CPU pools\n")
    L.append(
        f"Shape: window w = {cpu['window']}, page p = {cpu['page']}, chunk cp = {cpu['chunk']}: "
        f"cp/(w+p) = {cpu['cp_over_w_plus_p']} (production {prod['chunk']}/"
        f"({prod['window']}+{prod['page']}) = {prod['cp_over_w_plus_p']}). Concurrency cap "
        f"`--max-running-requests {cpu['cap']}` (production {prod['cap']}); "
        f"`--max-total-tokens {cpu['max_total_tokens']:,}` so that the full pool never binds.\n")
    L.append(
        "Each production SWA pool comes from the planner (`islands_tools.pool_plan.solve_pool_sizes`: "
        f"{prod['full_bytes'] / 1000:g} KB full + r × {prod['swa_bytes'] / 1000:g} KB SWA + "
        f"{prod['draft_bytes'] / 1000:g} KB draft per token, budget {prod['budget_bytes'] / 1e9:g} GB, "
        f"p = {prod['page']}) and is expressed in units of cap × per-request hold without islands "
        f"(H = `hold_without_islands` = one chunk): fraction = pool_prod(r) / ({prod['cap']} × "
        f"{prod['hold_without_islands']:,}) = pool_prod(r) / {prod['cap_x_hold']:,}. The CPU pool is "
        f"the same fraction of {cpu['cap']} × {cpu['hold_without_islands']} = {cpu['cap_x_hold']:,} "
        f"tokens, and the server ratio is that pool / {cpu['max_total_tokens']:,} "
        "(the boot log's `swa size` confirms it). The predicted bind without islands is "
        "`admission_bind(pool, H)` = pool / H, the same in both units.\n")
    L.append("| pool | prod ratio | prod SWA pool | fraction of cap×H | CPU SWA pool | server ratio "
             "| bind w/o islands (prod → CPU) | island floor margin (CPU) | + decode tail |")
    L.append("|---|---|---|---|---|---|---|---|---|")
    for key, p in pools.items():
        L.append(
            f"| {key}-eq | {p['ratio_equivalent']} | {_f(p['prod_swa_pool'])} | "
            f"{p['fraction_of_cap_x_hold']:.4f} | {p['swa_pool']:,} | {p['server_ratio']} | "
            f"{_f(p['prod_bind_without_islands'], 1)} → {p['bind_without_islands']:.1f} of {cpu['cap']} | "
            f"{p['floor_margin']:+.0%} | {p['floor_with_tail_margin']:+.0%} |")
    L.append("")
    L.append(
        f"Island floor (one chunk + N(w+p)): production {prod['island_floor']:,} = "
        f"{prod['island_floor_fraction']:.3f} of cap×H; CPU {cpu['chunk']} + {cpu['cap']}×"
        f"{cpu['window'] + cpu['page']} = {cpu['island_floor']:,} = {cpu['island_floor_fraction']:.3f} "
        f"of cap×H. The floor fits the 0.10-equivalent: "
        f"{'yes' if pools['0.10']['floor_fits'] else 'NO'} ({pools['0.10']['swa_pool']:,} ≥ "
        f"{cpu['island_floor']:,}). The CPU floor is a larger fraction than production's because "
        f"the one-chunk term is 1/cap of cap×H: 1/{cpu['cap']} here vs 1/{prod['cap']} in production, "
        "so the scaled pools are *tighter* for islands than production is.\n")
    L.append(
        f"Decode tail: production's decode evictor runs every {prod['eviction_interval']} steps of "
        f"~{prod['accept_len']} accepted tokens (`decode_tail_tokens` = {prod['decode_tail']:,} "
        f"tokens, {prod['decode_tail'] / prod['chunk']:.1%} of cp). The CPU run has no speculative "
        f"decoding (1 token per step), so every arm runs with `SGLANG_SWA_EVICTION_INTERVAL="
        f"{result['eviction_interval']}` (the same share of cp; sglang's default 128 would be 25% of "
        f"cp). With that tail the island floor is {cpu['island_floor_with_tail']:,} tokens "
        f"(production {prod['island_floor_with_tail']:,}); the last table column is the margin "
        "over it.\n")


def _workloads_section(L: List[str], result: Dict[str, Any]) -> None:
    cap = result["cap"]
    wl = result["workload"]
    workloads = result.get("workloads") or ["no_reuse", "agent"]
    L.append("## Workloads\n")
    if "no_reuse" in workloads:
        L.append(
            f"* **no_reuse**: {wl['requests']} random prompts of U[{wl['in_min']}, {wl['in_max']}] tokens "
            f"(seed {wl['seed']}, no shared prefix), U[{wl['out_min']}, {wl['out_max']}] output tokens, "
            f"{wl['clients']} concurrent clients (offered load {wl['clients'] / cap:.0f}× the cap), "
            "temperature 0, ignore_eos.")
    if "agent" in workloads:
        L.append(
            f"* **agent**: {wl['convs']} conversations in parallel × {wl['turns']} turns; system prompt "
            f"{wl['system_len']} random tokens; each turn re-sends the transcript (all previous prompts "
            f"and replies) plus U[{wl['user_min']}, {wl['user_max']}] new user tokens and asks for "
            f"U[{wl['reply_min']}, {wl['reply_max']}] reply tokens. "
            + ("Turn k+1 is sent when turn k finished (`after_finish`). "
               if wl.get("agent_mode", "after_finish") == "after_finish" else
               f"Turn k+1 is sent as soon as turn k has streamed its reply, while turn k keeps "
               f"generating {wl.get('run_on')} more tokens (`while_running`: a tool call acted on as "
               "soon as it is complete). ")
            + "Hit rate = cached / prompt tokens over "
            "turns ≥ 2 (turn 1 is cold); 'of reusable' divides by the previous turn's prompt + reply.\n")


def _results_section(L: List[str], result: Dict[str, Any]) -> None:
    arms = result["arms"]
    names = [n for n in result["arm_order"] if n in arms]
    workloads = result.get("workloads") or ["no_reuse", "agent"]
    L.append("## Results\n")
    L.append(
        "Numbers are means over repeats; [min–max] where repeats differ. Max running is the max over "
        "repeats of the per-step `#running-req` (decode log lines) and `/metrics` samples; "
        "mean running is time-weighted over the `sglang:num_running_reqs` samples; "
        "'steps at cap' is the share of decode steps with the cap running. Ratios are to "
        f"`{result.get('baseline_arm', BASELINE_ARM)}` of the same repeat. Wall-clock figures (tok/s, latency) depend on what "
        "else runs on the 2 shared cores; 'tok/CPU-s' (output tokens per CPU second of the server "
        "process tree) and the work counts (decode steps, prefill tokens) do not, or much less.\n")
    if "no_reuse" in workloads:
        _no_reuse_table(L, arms, names)
    if "agent" in workloads:
        _agent_table(L, arms, names, with_no_reuse="no_reuse" in workloads,
                     counters=counter_names(result))


def _outcomes_section(L: List[str], result: Dict[str, Any]) -> None:
    L.append("## Expected outcomes, as measured\n")
    for c in result["acceptance"]:
        mark = {True: "PASS", False: "FAIL", None: "n/a"}[c["pass"]]
        L.append(f"* **{mark}** {c['check']}: {c['detail']}")
    L.append("")
    if result.get("png"):
        L.append(f"Plot: `{pathlib.Path(result['png']).name}` (running requests over time per "
                 "arm).\n")
    rt = result.get("arm_runtimes_s", {})
    if rt:
        L.append("Per-arm wall time (boot + workloads, s): " + ", ".join(
            f"`{k}` {v}" for k, v in rt.items()) + ".\n")


def _no_reuse_table(L: List[str], arms: Dict[str, Any], names: List[str]) -> None:
    L.append("### no_reuse\n")
    hdr = ["arm", "ratio (eq)", "SWA pool", "max run", "mean run", "steps at cap", "retractions",
           "decode steps", "prefill tok", "max SWA use", "max full use", "tok/s", "throughput ×",
           "tok/CPU-s ×", "latency s", "latency ×", "held/req"]
    L.append("| " + " | ".join(hdr) + " |")
    L.append("|" + "---|" * len(hdr))
    for n in names:
        a = arms[n]
        L.append("| " + " | ".join([
            f"`{n}`", _f(a["ratio"]), _f(a["swa_pool"]), _cell(a, "max_running", 0),
            _cell(a, "mean_running"), _cell(a, "frac_steps_at_cap"), _cell(a, "retractions", 0),
            _cell(a, "decode_steps", 0), _cell(a, "prefill_tokens", 0), _cell(a, "max_swa_usage"),
            _cell(a, "max_full_usage"), _cell(a, "throughput_tok_s", 1), _cell(a, "throughput_ratio"),
            _cell(a, "cpu_throughput_ratio"), _cell(a, "latency_mean_s", 1), _cell(a, "latency_ratio"), _cell(a, "held_per_req_mean", 0),
        ]) + " |")
    L.append("")


def counter_names(result: Dict[str, Any]) -> Dict[str, str]:
    """The Prometheus name of each counter (``admission.run.COUNTERS``' keys) as the run scraped
    it: the result's ``counters`` (a run writes them), today's ``COUNTERS`` for a name it lacks
    (results from before the field)."""
    return {**COUNTERS, **(result.get("counters") or {})}


def _agent_table(L: List[str], arms: Dict[str, Any], names: List[str], with_no_reuse: bool,
                 counters: Dict[str, str] = COUNTERS) -> None:
    L.append("### agent (multi-turn, transcript re-sent)\n")
    turns = max((len(a.get("agent_hit_rate_per_turn", {})) for a in arms.values()), default=0)
    hdr = ["arm", "SWA pool", "hit rate (turns≥2)", "of reusable"] + \
          [f"turn {t}" for t in range(1, turns + 1)] + \
          ["max run", "mean run", "retractions", "prefill tok", "LRU-evicted tok", "eager-freed SWA",
           "tok/s ×", "tok/CPU-s ×", "latency ×"]
    L.append("| " + " | ".join(hdr) + " |")
    L.append("|" + "---|" * len(hdr))
    for n in names:
        a = arms[n]
        pt = a.get("agent_hit_rate_per_turn", {})
        L.append("| " + " | ".join(
            [f"`{n}`", _f(a["swa_pool"]), _cell(a, "agent_hit_rate"), _cell(a, "agent_hit_of_reusable")]
            + [_f(pt.get(str(t))) for t in range(1, turns + 1)]
            + [_cell(a, "agent_max_running", 0), _cell(a, "agent_mean_running"),
               _cell(a, "agent_retractions", 0), _cell(a, "agent_prefill_tokens", 0),
               _cell(a, "agent_evicted_tokens", 0), _cell(a, "agent_island_freed_tokens", 0),
               _cell(a, "agent_throughput_ratio"), _cell(a, "agent_cpu_throughput_ratio"),
               _cell(a, "agent_latency_ratio")]) + " |")
    L.append("")
    L.append(
        f"LRU-evicted = `{counters['evicted_tokens']}` (pressure-driven `evict()`: full + SWA "
        "slots summed by sglang; there is no SWA-only counter); eager-freed = "
        f"`{counters['island_freed_tokens']}` (SWA slots islands free at commit, islands only)."
        + ((" no_reuse: " + ", ".join(
            f"`{n}` {_f(arms[n].get('evicted_tokens'), 0)} / {_f(arms[n].get('island_freed_tokens'), 0)}"
            for n in names) + " (LRU-evicted / eager-freed).") if with_no_reuse else "") + "\n")


def plot_running(result: Dict[str, Any], runs: List[Dict[str, Any]], png: pathlib.Path) -> None:
    """Running requests per arm (repeat 0): left against wall seconds, right against the share of
    each arm's own wall time (the shape survives a machine whose load changes between arms)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [n for n in result["arm_order"] if any(r["arm"] == n for r in runs)]
    phases = [p for p in ("no_reuse", "agent") if any(p in r for r in runs)]
    colors = {
        "chunk_cache": "#7f7f7f", "upstream_0.32": "#1f77b4", "upstream_0.17": "#d62728",
        "upstream_knobs_0.17": "#ff7f0e", "islands_0.17": "#2ca02c", "islands_0.10": "#17becf",
        "upstream_knobs_0.10": "#bcbd22", "islands_floor": "#9467bd",
        "upstream_knobs_floor": "#8c564b", "main_0.17": "#e377c2", "main_0.10": "#e377c2",
        "main_knobs_0.17": "#8c564b", "main_knobs_0.10": "#8c564b",
        "main_islands_0.17": "#98df8a", "main_islands_0.10": "#98df8a",
    }
    styles = {"upstream_knobs_0.10": "--", "islands_0.10": "--", "main_0.10": "--",
              "main_knobs_0.10": "--", "main_islands_0.10": "--",
              "islands_floor": ":", "upstream_knobs_floor": ":"}
    fig, axes = plt.subplots(len(phases), 2, figsize=(15, 4.0 * len(phases) + 1.2), squeeze=False,
                             gridspec_kw={"width_ratios": [3, 2]})
    cap = result["cap"]
    handles = {}
    wl = result["workload"]
    for row, phase in enumerate(phases):
        for col in (0, 1):
            ax = axes[row, col]
            for n in names:
                r = next((r for r in runs if r["arm"] == n and r.get("repeat", 0) == 0 and phase in r),
                         None)
                if r is None or not r[phase].get("series"):
                    continue
                s = r[phase]["series"]
                wall = max(r[phase].get("wall_s") or 0.0, 1e-9)
                xs = [x[0] for x in s] if col == 0 else [x[0] / wall for x in s]
                (h,) = ax.step(xs, [x[1] for x in s], where="post", lw=1.5, alpha=0.9,
                               color=colors.get(n), ls=styles.get(n, "-"))
                a = result["arms"].get(n, {})
                handles[n] = (h, f"{n} (SWA pool {a.get('swa_pool') or 0:,})")
            ax.axhline(cap, ls="--", color="black", lw=1)
            ax.set_ylim(0, cap + 1.5)
            ax.grid(alpha=0.3)
            if col == 0:
                ax.text(0, cap + 0.2, f"cap (--max-running-requests {cap})", fontsize=8, va="bottom")
                ax.set_xlim(left=0)
                ax.set_xlabel("seconds since the workload started (wall clock, shared machine)")
                ax.set_ylabel("running requests")
                title = {"no_reuse": f"no reuse: {wl['requests']} random ~2k-token prompts, "
                                     f"{wl['out_min']}-{wl['out_max']} output tokens, "
                                     f"{wl['clients']} clients",
                         "agent": f"agent: {wl['convs']} conversations × {wl['turns']} turns, "
                                  "transcript re-sent each turn"}[phase]
                ax.set_title(title, fontsize=10)
            else:
                ax.set_xlim(0, 1)
                ax.set_xlabel("share of the arm's own wall time")
                ax.set_title("same, time normalised per arm", fontsize=10)
    order = [n for n in names if n in handles]
    fig.legend([handles[n][0] for n in order], [handles[n][1] for n in order], loc="lower center",
               ncol=min(4, len(order)), fontsize=9, frameon=False)
    fig.suptitle("Running requests over time per arm (sglang:num_running_reqs, repeat 0; tiny model "
                 f"on CPU, w=32, cp=512, cap {cap})", fontsize=11)
    fig.tight_layout(rect=(0, 0.07 if len(order) > 4 else 0.05, 1, 1))
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=100)
    plt.close(fig)
