"""Prefix reuse benchmark, report: the result assembled from the per-boot records, the issue's
acceptance checks on it, its schema, the markdown and the plot.

A result's ``arms`` is ``{arm: {pool: {class: record}}}`` (records: ``prefix_reuse.run.
finish_class``); everything here reads only the result, so the committed JSON regenerates its
markdown exactly.
"""

from __future__ import annotations

import pathlib
from typing import Any, Callable, Dict, List, Sequence, Tuple

import _bench_path  # noqa: F401  (puts the repository root and benchmarks/ on sys.path)
from prefix_reuse.arms import ARMS, CPU, DEFAULT_POOLS, ISLAND_ARMS, POOLS
from prefix_reuse.workloads import CLASSES


def fmt_or_dash(x, nd=1) -> str:
    """``x`` with ``nd`` decimals, or "–" for None."""
    return "–" if x is None else f"{x:.{nd}f}"


# ----------------------------------------------------------------------------- acceptance


def acceptance(arms: Dict[str, Dict[str, Dict[str, Dict[str, Any]]]], cap: int, page: int,
               pools: Sequence[str] = DEFAULT_POOLS,
               classes: Sequence[str] = CLASSES) -> List[Dict[str, Any]]:
    """The issue's done-when, per pool and class, on the measured numbers.

    * ample: islands cached >= upstream cached - page x requests;
    * lean pools: islands cached >= max(upstream, upstream_knobs) cached; and where upstream
      binds (``mean_running_queued`` < cap - 1): islands ``mean_running_queued`` >= cap - 1 (or
      no queued decode step) and 0 retractions.
    ``pass`` is None (n/a) where an arm or class was not run or upstream does not bind."""
    checks: List[Dict[str, Any]] = []

    def rec(arm, pool, cls):
        return arms.get(arm, {}).get(pool, {}).get(cls)

    def add(pool, cls, criterion, ok, islands, reference, detail):
        checks.append({"pool": pool, "class": cls, "criterion": criterion,
                       "pass": None if ok is None else bool(ok), "islands": islands,
                       "reference": reference, "detail": detail})

    for pool in pools:
        for cls in classes:
            isl = rec("islands", pool, cls)
            up = rec("upstream", pool, cls)
            if pool == "ample":
                crit = "cached tokens >= upstream's - 1 page/request"
                if isl is None or up is None:
                    add(pool, cls, crit, None, None, None, "islands or upstream not run")
                    continue
                slack = page * isl["requests"]
                ok = isl["cached_tokens"] >= up["cached_tokens"] - slack
                add(pool, cls, crit, ok, isl["cached_tokens"], up["cached_tokens"],
                    f"islands {isl['cached_tokens']} vs upstream {up['cached_tokens']} "
                    f"(slack {slack}; expected {isl['expected_shared_tokens']})")
                continue
            crit = "cached tokens >= max(upstream, upstream_knobs)"
            refs = {n: rec(n, pool, cls) for n in ("upstream", "upstream_knobs")}
            refs = {n: r for n, r in refs.items() if r is not None}
            if isl is None or not refs:
                add(pool, cls, crit, None, None, None, "islands or both upstream arms not run")
            else:
                best_name = max(refs, key=lambda n: refs[n]["cached_tokens"])
                best = refs[best_name]["cached_tokens"]
                add(pool, cls, crit, isl["cached_tokens"] >= best, isl["cached_tokens"], best,
                    f"islands {isl['cached_tokens']} vs " + ", ".join(
                        f"{n} {r['cached_tokens']}" for n, r in refs.items())
                    + f" (expected {isl['expected_shared_tokens']})")
            crit = "where upstream binds: running at the cap while queued, 0 retractions"
            if isl is None or up is None:
                add(pool, cls, crit, None, None, None, "islands or upstream not run")
                continue
            uq = up.get("mean_running_queued")
            if uq is None or uq >= cap - 1:
                add(pool, cls, crit, None, isl.get("mean_running_queued"), uq,
                    f"n/a: upstream does not bind (running while queued {fmt_or_dash(uq, 2)}, "
                    f"mean {fmt_or_dash(up.get('mean_running'), 2)}, max {up.get('max_running')})")
                continue
            iq = isl.get("mean_running_queued")
            ok = (iq is None or iq >= cap - 1) and isl["retractions"] == 0
            add(pool, cls, crit, ok, iq, uq,
                f"islands running while queued {fmt_or_dash(iq, 2)} (mean "
                f"{fmt_or_dash(isl.get('mean_running'), 2)}, max {isl.get('max_running')}), "
                f"retractions {isl['retractions']}; upstream while "
                f"queued {fmt_or_dash(uq, 2)} (mean {fmt_or_dash(up.get('mean_running'), 2)}, max "
                f"{up.get('max_running')}), retractions {up['retractions']}")
    return checks


MAIN_ISLAND_ARMS = ("main_islands", "main_islands_window")
MAIN_ISLANDS_AUTO = ("default eviction `auto`: `window` where the SWA pool cannot keep one chunk "
                     "per running request, here both lean pools, else `lru`; the reclaim that "
                     "order defaults to, `lazy` / `auto`")
"""What ``main_islands`` ran with in a run that records ``main_islands_eviction: auto``."""
"""The island arms on 0.5.23 that the main acceptance checks, each on its own rows."""


def acceptance_main(arms: Dict[str, Dict[str, Dict[str, Dict[str, Any]]]], page: int,
                    pools: Sequence[str] = DEFAULT_POOLS,
                    classes: Sequence[str] = CLASSES) -> List[Dict[str, Any]]:
    """Issue 27's done-when on sglang 0.5.23, per island arm (``MAIN_ISLAND_ARMS``), pool and
    class: the arm's cached >= the better of ``main`` and ``main_knobs`` cached - one page per
    request. Empty unless an island arm and one of the two ran; ``pass`` None where a record is
    missing."""
    if not ({"main", "main_knobs"} & set(arms)):
        return []
    checks: List[Dict[str, Any]] = []
    for arm in (a for a in MAIN_ISLAND_ARMS if a in arms):
        crit = f"{arm} cached >= max(main, main_knobs) - 1 page/request"
        for pool in pools:
            for cls in classes:
                isl = arms[arm].get(pool, {}).get(cls)
                refs = {n: arms.get(n, {}).get(pool, {}).get(cls) for n in ("main", "main_knobs")}
                refs = {n: r for n, r in refs.items() if r is not None}
                if isl is None or not refs:
                    checks.append({"pool": pool, "class": cls, "criterion": crit, "pass": None,
                                   "islands": None, "reference": None,
                                   "detail": f"{arm} or both main arms not run"})
                    continue
                best = max(r["cached_tokens"] for r in refs.values())
                slack = page * isl["requests"]
                checks.append({
                    "pool": pool, "class": cls, "criterion": crit,
                    "pass": isl["cached_tokens"] >= best - slack, "islands": isl["cached_tokens"],
                    "reference": best,
                    "detail": f"{arm} {isl['cached_tokens']} vs " + ", ".join(
                        f"{n} {r['cached_tokens']}" for n, r in refs.items())
                    + f" (slack {slack}; expected {isl['expected_shared_tokens']})"})
    return checks


HICACHE_REFERENCES = ("main_hicache", "main_islands")


def acceptance_hicache(arms: Dict[str, Dict[str, Dict[str, Dict[str, Any]]]], page: int,
                       pools: Sequence[str] = DEFAULT_POOLS,
                       classes: Sequence[str] = CLASSES) -> List[Dict[str, Any]]:
    """Issue 50's done-when, per pool and class: ``main_islands_hicache`` cached >= the better of
    ``main_hicache`` and ``main_islands`` - one page per request, and ``gap_closed``, the share of
    the gap from that better arm to the no-forget bound (``expected_shared_tokens``) it closes
    (None where there is no gap). Empty unless it and a reference ran."""
    if "main_islands_hicache" not in arms or not set(HICACHE_REFERENCES) & set(arms):
        return []
    checks: List[Dict[str, Any]] = []
    for pool in pools:
        for cls in classes:
            rec = arms["main_islands_hicache"].get(pool, {}).get(cls)
            refs = {n: arms.get(n, {}).get(pool, {}).get(cls) for n in HICACHE_REFERENCES}
            refs = {n: r for n, r in refs.items() if r is not None}
            if rec is None or not refs:
                continue
            best = max(r["cached_tokens"] for r in refs.values())
            bound = rec["expected_shared_tokens"]
            got = rec["cached_tokens"]
            checks.append({
                "pool": pool, "class": cls, "islands": got, "reference": best, "bound": bound,
                "pass": got >= best - page * rec["requests"],
                "gap_closed": round((got - best) / (bound - best), 3) if bound > best else None,
                "detail": ", ".join(f"{n} {r['cached_tokens']}" for n, r in refs.items())})
    return checks


# ----------------------------------------------------------------------------- result


CLASS_KEYS = ("requests", "cached_tokens", "cached_share", "prefill_tokens", "mean_running",
              "max_running", "retractions", "peak_swa_used", "max_swa_held_per_running_req",
              "expected_shared_tokens", "decode_steps", "wall_s", "tok_per_cpu_s")
"""Keys every class record of a result has (``validate_result``)."""


def validate_result(result: Dict[str, Any]) -> None:
    """Raise ValueError unless ``result`` has the committed JSON's shape."""
    for k in ("cap", "page"):
        if not isinstance(result.get(k), int) or result[k] <= 0:
            raise ValueError(f"{k} must be a positive integer")
    arms = result.get("arms")
    if not isinstance(arms, dict) or not arms:
        raise ValueError("arms must be a non-empty object")
    for arm, pools in arms.items():
        if arm not in ARMS:
            raise ValueError(f"unknown arm {arm}")
        for pool, classes in pools.items():
            if pool not in POOLS:
                raise ValueError(f"{arm}: unknown pool {pool}")
            for cls, r in classes.items():
                if cls not in CLASSES:
                    raise ValueError(f"{arm}/{pool}: unknown class {cls}")
                missing = [k for k in CLASS_KEYS if k not in r]
                if missing:
                    raise ValueError(f"{arm}/{pool}/{cls}: missing {missing}")
                if arm not in ISLAND_ARMS and r["max_swa_held_per_running_req"] is not None:
                    raise ValueError(f"{arm}/{pool}/{cls}: held per request is islands-only")


def assemble(boots: List[Dict[str, Any]], meta: Dict[str, Any]) -> Dict[str, Any]:
    """The result: the run's ``meta`` (command, date, pools, workload, plan ...), the records of
    the boots that produced any (arms in ``ARMS`` order), the failed boots' errors, the arms'
    descriptions (``meta``'s when it has them, else today's ``arm_descriptions``; those of arms
    without records left out), and the acceptance checks with their summary."""
    arms: Dict[str, Dict[str, Dict[str, Any]]] = {}
    for b in boots:
        if b.get("classes"):
            arms.setdefault(b["arm"], {})[b["pool"]] = b["classes"]
    order = {n: i for i, n in enumerate(ARMS)}
    arms = {k: arms[k] for k in sorted(arms, key=order.get)}
    result = {
        "cap": CPU.cap, "page": CPU.page, "window": CPU.window, "chunk": CPU.chunk,
        "max_total_tokens": CPU.max_total_tokens,
        **{k: meta.get(k) for k in ("command", "date", "git_head", "preset", "runtime_s",
                                    "eviction_interval", "machine", "pools", "workload", "plan",
                                    "rebuilt_by", "main_islands_eviction", "model")
           if k in meta or k not in ("main_islands_eviction", "model")},
        "boots": len(boots),
        "boot_times_s": {f"{b['arm']}@{b['pool']}": b.get("boot_total_s") for b in boots},
        "boot_s": {f"{b['arm']}@{b['pool']}": b.get("boot_s") for b in boots},
        "errors": {f"{b['arm']}@{b['pool']}": b["error"] for b in boots if "error" in b},
        "arms": arms,
    }
    desc = meta.get("arm_descriptions") or arm_descriptions(arms, meta.get("main_islands_eviction"))
    result["arm_descriptions"] = {n: d for n, d in desc.items()
                                  if n in ALWAYS_DESCRIBED or n in arms}
    pools = [p for p in POOLS if any(p in v for v in arms.values())]
    classes = [c for c in CLASSES if any(c in v.get(p, {}) for v in arms.values() for p in pools)]
    result["acceptance"] = acceptance(arms, CPU.cap, CPU.page, pools, classes)
    checks = [c["pass"] for c in result["acceptance"] if c["pass"] is not None]
    result["acceptance_summary"] = {"pass": sum(checks), "fail": len(checks) - sum(checks),
                                    "all_pass": bool(checks) and all(checks)}
    main_checks = acceptance_main(arms, CPU.page, pools, classes)
    if main_checks:
        result["acceptance_main"] = main_checks
    hicache_checks = acceptance_hicache(arms, CPU.page, pools, classes)
    if hicache_checks:
        result["acceptance_hicache"] = hicache_checks
    return result


# ----------------------------------------------------------------------------- markdown


ROWS = [  # (label, key, digits)
    ("requests", "requests", 0),
    ("cached tokens", "cached_tokens", 0),
    ("cached share", "cached_share", 3),
    ("expected shared (share)", "expected_share", 3),
    ("cached / expected", "cached_of_expected", 3),
    ("prefill tokens computed", "prefill_tokens", 0),
    ("mean running (time)", "mean_running", 2),
    ("mean running while queued", "mean_running_queued", 2),
    ("max running", "max_running", 0),
    ("retractions", "retractions", 0),
    ("peak SWA used", "peak_swa_used", 0),
    ("host-tier hit tokens", "host_hit_tokens", 0),
    ("host traffic / cached token", "host_traffic_per_hit_token", 3),
    ("SWA held / running req (max)", "max_swa_held_per_running_req", 0),
    ("decode steps", "decode_steps", 0),
    ("requests / server CPU-s", "req_per_cpu_s", 3),
    ("output tok / server CPU-s", "tok_per_cpu_s", 1),
    ("wall s", "wall_s", 1),
]


HOST_ROWS = ("host_hit_tokens", "host_traffic_per_hit_token")
"""The rows only HiCache arms record."""


def _f(x, nd=2) -> str:
    if x is None:
        return "–"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int) or nd == 0:
        return f"{int(round(x)):,}"
    return f"{x:.{nd}f}"



def shown(result: Dict[str, Any]) -> Tuple[List[str], List[str], List[str]]:
    """The arms, pools and classes ``result`` has, in ``ARMS`` / ``POOLS`` / ``CLASSES`` order."""
    arms = result["arms"]
    arm_names = [a for a in ARMS if a in arms]
    pools = [p for p in POOLS if any(p in arms[a] for a in arm_names)]
    classes = [c for c in CLASSES if any(c in arms[a].get(p, {}) for a in arm_names for p in pools)]
    return arm_names, pools, classes


def to_markdown(result: Dict[str, Any]) -> str:
    """The result as the committed markdown (header, setup, workloads, acceptance, tables)."""
    arm_names, pools, classes = shown(result)
    L = (_md_header(result) + _md_setup(result, pools) + _md_workloads(result, classes)
         + _md_acceptance(result) + _md_results(result, arm_names, pools, classes)
         + _md_footer(result))
    return "\n".join(L) + "\n"


def _md_header(result: Dict[str, Any]) -> List[str]:
    """Title, provenance (date, HEAD, preset, runtime, command) and the machine."""
    model = f" `{result['model']}`" if "model" in result else ""
    L = [f"# Prefix reuse under SWA-pool pressure (real SGLang server, CPU, tiny model{model})\n"]
    rt = result.get("runtime_s")
    L.append(f"Generated by `benchmarks/prefix_reuse.py` on {result.get('date', '?')} (HEAD "
             f"{result.get('git_head') or '?'}); preset `{result.get('preset', '?')}`, total runtime "
             f"{(rt or 0) / 60:.1f} min for {result.get('boots', '?')} server boots.\n")
    L.append("Command:\n\n```\n" + result.get("command", "(not recorded)") + "\n```\n")
    if result.get("rebuilt_by"):
        L.append("These files were written from that run's per-boot files by:\n\n```\n"
                 + result["rebuilt_by"] + "\n```\n")
    m = result.get("machine") or {}
    if m:
        L.append(f"Machine: {m.get('cpus')} CPUs ({m.get('platform')}); load average "
                 f"{m.get('load_start')} at the start, {m.get('load_end')} at the end. Other jobs "
                 "shared the cores, so wall seconds are noisy; token counts, decode steps, running "
                 "counts and the per-server-CPU-second figures much less so.\n")
    return L


def _md_setup(result: Dict[str, Any], pools: Sequence[str]) -> List[str]:
    """The shape, the pool table and the arms."""
    cap, page = result["cap"], result["page"]
    L = ["## Setup\n"]
    L.append(f"Shape (`admission.setup.CpuShape`): window {result.get('window')}, page {page}, chunk "
             f"{result.get('chunk')}, cap `--max-running-requests {cap}`, `--max-total-tokens "
             f"{result.get('max_total_tokens', 65536):,}`, `SGLANG_SWA_EVICTION_INTERVAL="
             f"{result.get('eviction_interval')}` for every arm. One boot per (arm, pool); the "
             "classes run in the order below on it, `/flush_cache` between them.\n")
    pt = result.get("pools") or {}
    if pt:
        # a column for the device pool only where a pool sets its own (``lean-device``)
        device = any("max_total_tokens" in pt.get(p, {}) for p in pools)
        L.append("| pool | ratio (equivalent) | server ratio | SWA pool tokens | upstream bind "
                 "(pool / chunk) | island capacity (with decode tail) |"
                 + (" device pool tokens |" if device else ""))
        L.append("|---|---|---|---|---|---|" + ("---|" if device else ""))
        for p in pools:
            x = pt.get(p, {})
            full = x.get("max_total_tokens", result.get("max_total_tokens", 65536))
            L.append(f"| {p} | {x.get('ratio_equivalent')} | {x.get('server_ratio')} | "
                     f"{_f(x.get('swa_pool'), 0)} | {_f(x.get('bind_without_islands'))} | "
                     f"{x.get('island_capacity')} ({x.get('island_capacity_with_tail')}) |"
                     + (f" {full:,} |" if device else ""))
        L.append("")
    desc = result.get("arm_descriptions") or arm_descriptions(
        result.get("arms", {}), result.get("main_islands_eviction"))
    L.append("Arms: " + ", ".join(f"`{n}` ({d})" for n, d in desc.items()) + ".\n")
    return L


ALWAYS_DESCRIBED = ("upstream", "upstream_knobs", "islands_eager", "islands")
"""The arms the markdown's arms paragraph names whether they ran or not."""


def arm_descriptions(run: Sequence[str] | Dict[str, Any],
                     main_islands_eviction: str | None = None) -> Dict[str, str]:
    """Today's description of each arm the arms paragraph names (``ALWAYS_DESCRIBED``, then those
    of ``run`` among the others), in that order. ``assemble`` stores them in the result as
    ``arm_descriptions``, so a committed run keeps what its arms were when the code changes; the
    markdown uses these only for a result without them."""
    d = {"upstream": "stock",
         "upstream_knobs": "+ `SGLANG_OPT_SWA_SPLIT_LEAF_ON_INSERT=1 "
                           "SGLANG_OPT_SWA_RELEASE_LEAF_LOCK_AFTER_WINDOW=1`",
         "islands_eager": "`--enable-swa-islands --swa-islands-reclaim eager`",
         "islands": "`--enable-swa-islands`, default reclaim `lazy`"}
    optional = {
        "islands_auto": "`--swa-islands-reclaim auto`",
        "main": "stock sglang 0.5.23, upstream main, default settings: its own cache, "
                "`UnifiedRadixCache`, and pool sizing",
        "main_knobs": "stock 0.5.23 + `SGLANG_OPT_UNIFIED_CACHE_FREE_OUT_OF_WINDOW_SLOTS=0 "
                      "SGLANG_OPT_RELEASE_PREFILL_SWA=1`",
        "main_free_off": "stock 0.5.23 + `SGLANG_OPT_UNIFIED_CACHE_FREE_OUT_OF_WINDOW_SLOTS=0`",
        "main_release_prefill": "stock 0.5.23 + `SGLANG_OPT_RELEASE_PREFILL_SWA=1`",
        "main_islands": "0.5.23 + the main islands series, `--enable-swa-islands`, " + (
            MAIN_ISLANDS_AUTO if main_islands_eviction == "auto" else "default reclaim `auto`"),
        "main_islands_auto": "the same with `--swa-islands-reclaim auto`",
        "main_islands_window": "the same with `--swa-islands-eviction window`: cold SWA, then "
                               "retention windows, then the rest, on the Python tree core",
        "main_hicache": "`main` + HiCache's host tier (`--enable-hierarchical-cache "
                        "--hicache-io-backend direct`: write_through, host pool 2x device)",
        "main_islands_hicache": "`main_islands` + the same host tier (eviction `auto` is "
                                "main's SWA walk with a host tier)",
    }
    d.update((n, t) for n, t in optional.items() if n in run)
    return d


CLASS_TEXT: Dict[str, Callable[[Dict[str, Any]], str]] = {
    # class: its sizes (``Workload.to_dict()[class]``) -> one sentence on what it sends
    "shared_system": lambda s: (
        f"{s['users']} users × {s['turns']} turns; every turn = one shared system prompt of "
        f"{s['system_len']} tokens + the user's history + a new message of "
        f"U[{s['msg_min']}, {s['msg_max']}] tokens; replies U[{s['reply_min']}, {s['reply_max']}]. "
        "Users concurrently, turns in sequence; user 0's first turn goes alone first."),
    "fanout": lambda s: (
        f"{s['docs']} documents of {s['doc_len']} tokens × {s['questions']} questions of "
        f"U[{s['q_min']}, {s['q_max']}] tokens; answers U[{s['answer_min']}, {s['answer_max']}]. "
        "The first question per document first, then all the others at once."),
    "branch_edit": lambda s: (
        f"{s['convs']} conversations: an opening of U[{s['opening_min']}, {s['opening_max']}] "
        f"tokens + {s['turns']} turns (messages U[{s['msg_min']}, {s['msg_max']}], replies "
        f"U[{s['reply_min']}, {s['reply_max']}]) in sequence, then {s['edits']} re-sends of the "
        "transcript cut inside an earlier turn's message (a random turn and position) + a new "
        f"message of U[{s['edit_min']}, {s['edit_max']}] tokens, sent at once; conversations "
        "concurrently."),
    "agents": lambda s: (
        f"`admission.workloads.agent_script`: {s['convs']} conversations × {s['turns']} turns, own "
        f"system prompt of {s['system_len']} tokens, user messages U[{s['user_min']}, "
        f"{s['user_max']}], replies U[{s['reply_min']}, {s['reply_max']}]; turn k+1 re-sends the "
        "transcript when turn k finished (`admission.workloads.run_agent`)."),
    "no_reuse": lambda s: (
        f"`admission.workloads.no_reuse_requests`: {s['requests']} random prompts of "
        f"U[{s['in_min']}, {s['in_max']}] tokens (first tokens all different), U[{s['out_min']}, "
        f"{s['out_max']}] output tokens, all at once."),
}


def _md_workloads(result: Dict[str, Any], classes: Sequence[str]) -> List[str]:
    """One bullet per class (its sizes and, when planned, requests and expected share)."""
    L = ["## Workloads\n"]
    wl = result.get("workload") or {}
    plan = result.get("plan") or {}
    for c in classes:
        extra = ""
        if c in plan:
            extra = (f" {plan[c]['requests']} requests, {plan[c]['prompt_tokens']:,} prompt tokens; "
                     f"a cache that forgets nothing hits about {plan[c]['expected_share']:.0%}.")
        L.append(f"* **{c}**: " + (CLASS_TEXT[c](wl[c]) if c in wl else "") + extra)
    L.append("\nEvery output is exactly its `max_new_tokens` (`ignore_eos`); every divergence point "
             "is a different token. *expected shared* = per request the longest prefix shared with "
             "an earlier request's prompt + output (minus its last token) in script order, capped "
             "at prompt - 1, page-floored: an upper bound no arm can beat.\n")
    return L


def _md_acceptance(result: Dict[str, Any]) -> List[str]:
    """The criteria and one table row per recorded check, with the PASS / FAIL / n/a counts."""
    cap, page = result["cap"], result["page"]
    L = ["## Acceptance (the issue's done-when)\n"]
    L.append(f"At `ample`: islands' cached tokens ≥ upstream's − one page ({page}) per request. At "
             "`0.17-eq` / `0.10-eq`: ≥ the better of `upstream` and `upstream_knobs`; and where "
             f"upstream binds (its mean running while requests queue < cap − 1 = {cap - 1}), islands "
             f"run ≥ {cap - 1} while requests queue, with 0 retractions. 'While queued' = the mean "
             "`#running-req` over the decode steps whose `#queue-req` > 0: a finite workload ramps "
             "up and drains below the cap in every arm, so the time mean (in the tables) cannot "
             "reach the cap.\n")
    checks = result.get("acceptance") or []
    L.append("| pool | class | criterion | islands | reference | result | detail |")
    L.append("|---|---|---|---|---|---|---|")
    for c in checks:
        mark = {True: "**PASS**", False: "**FAIL**", None: "n/a"}[c["pass"]]
        L.append(f"| {c['pool']} | {c['class']} | {c['criterion']} | {_f(c['islands'])} | "
                 f"{_f(c['reference'])} | {mark} | {c['detail']} |")
    n_pass = sum(c["pass"] is True for c in checks)
    n_fail = sum(c["pass"] is False for c in checks)
    L.append(f"\n{n_pass} PASS, {n_fail} FAIL, {sum(c['pass'] is None for c in checks)} n/a.\n")
    main_checks = result.get("acceptance_main") or []
    if main_checks:
        L.append("### On sglang 0.5.23 (issue 27)\n")
        L.append(f"In every pool and class: an island arm's cached tokens ≥ the better of `main` "
                 f"and `main_knobs` − one page ({page}) per request.\n")
        L.append("| pool | class | criterion | island arm | reference | result | detail |")
        L.append("|---|---|---|---|---|---|---|")
        for c in main_checks:
            mark = {True: "**PASS**", False: "**FAIL**", None: "n/a"}[c["pass"]]
            L.append(f"| {c['pool']} | {c['class']} | {c['criterion']} | {_f(c['islands'])} | "
                     f"{_f(c['reference'])} | {mark} | {c['detail']} |")
        L.append(f"\n{sum(c['pass'] is True for c in main_checks)} PASS, "
                 f"{sum(c['pass'] is False for c in main_checks)} FAIL, "
                 f"{sum(c['pass'] is None for c in main_checks)} n/a.\n")
    hicache_checks = result.get("acceptance_hicache") or []
    if hicache_checks:
        L.append("### With HiCache's host tier (issue 50)\n")
        L.append(f"`main_islands_hicache` cached tokens ≥ the better of `main_hicache` and "
                 f"`main_islands` − one page ({page}) per request; *gap closed*: the share of the "
                 "gap from that better arm to the no-forget bound that it closes.\n")
        L.append("| pool | class | `main_islands_hicache` | better reference | no-forget bound | "
                 "gap closed | result | references |")
        L.append("|---|---|---|---|---|---|---|---|")
        for c in hicache_checks:
            L.append(f"| {c['pool']} | {c['class']} | {_f(c['islands'])} | {_f(c['reference'])} | "
                     f"{_f(c['bound'])} | {_f(c['gap_closed'], 3)} | "
                     f"{'**PASS**' if c['pass'] else '**FAIL**'} | {c['detail']} |")
        L.append(f"\n{sum(c['pass'] for c in hicache_checks)} PASS, "
                 f"{sum(not c['pass'] for c in hicache_checks)} FAIL.\n")
    return L


def _md_results(result: Dict[str, Any], arm_names: Sequence[str], pools: Sequence[str],
                classes: Sequence[str]) -> List[str]:
    """Per pool a table: rows class × metric (``ROWS``), columns arms."""
    arms, pt = result["arms"], result.get("pools") or {}
    L = ["## Results per pool\n"]
    L.append("Rows: class × metric; columns: arms. *mean running (time)* is time-weighted over "
             "`sglang:num_running_reqs` samples; *peak SWA used* is the max `#swa token` of the "
             "decode log lines (locked + request-owned SWA; evictable excluded); *SWA held / "
             "running req* is islands' `swa held/req (max ...)` (– for upstream arms); CPU-s = "
             "CPU seconds of the server's process tree.\n")
    for p in pools:
        x = pt.get(p, {})
        L.append(f"### {p} (SWA pool {_f(x.get('swa_pool'), 0)} tokens)\n")
        L.append("| class | metric | " + " | ".join(f"`{a}`" for a in arm_names) + " |")
        L.append("|---|---|" + "---|" * len(arm_names))
        for c in classes:
            for label, key, nd in ROWS:
                if key in HOST_ROWS and not any(key in (arms[a].get(p, {}).get(c) or {})
                                                for a in arm_names):
                    continue  # a run without a HiCache arm has no host-tier rows
                cells = []
                for a in arm_names:
                    r = arms[a].get(p, {}).get(c)
                    cells.append(_f(r.get(key), nd) if r else "not run")
                L.append(f"| {c} | {label} | " + " | ".join(cells) + " |")
        L.append("")
    return L


def _md_footer(result: Dict[str, Any]) -> List[str]:
    """Failed boots, the plot's name and the wall time per boot."""
    L: List[str] = []
    errors = result.get("errors") or {}
    if errors:
        L.append("## Errors\n")
        for k, v in errors.items():
            L.append(f"* `{k}`: {v}")
        L.append("")
    if result.get("png"):
        L.append(f"Plot: `{pathlib.Path(result['png']).name}` (cached share per class and arm with "
                 "the expected share; mean running while queued and time-weighted).\n")
    bt = result.get("boot_times_s") or {}
    if bt:
        L.append("Per boot wall time (boot + classes, s): " + ", ".join(
            f"`{k}` {v}" for k, v in bt.items()) + ".\n")
    return L


# ----------------------------------------------------------------------------- plot

COLORS = {"upstream": "#d62728", "upstream_knobs": "#ff7f0e", "islands_eager": "#17becf",
          "islands": "#2ca02c", "islands_auto": "#9467bd", "main": "#7f7f7f",
          "main_knobs": "#8c564b", "main_free_off": "#bcbd22", "main_release_prefill": "#e377c2",
          "main_islands": "#98df8a", "main_islands_auto": "#c5b0d5",
          "main_islands_window": "#1f77b4", "main_hicache": "#c49c94",
          "main_islands_hicache": "#006400"}


def plot(result: Dict[str, Any], png: pathlib.Path) -> None:
    """Per pool (columns): cached share per class and arm, the expected share dotted (top); mean
    running while queued as bars, the time mean as black ticks, the cap dashed (bottom)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    arms = result["arms"]
    arm_names, pools, classes = shown(result)
    cap = result["cap"]
    fig, axes = plt.subplots(2, len(pools), figsize=(5.2 * len(pools), 8.2), squeeze=False)
    width = 0.8 / max(1, len(arm_names))
    xs = range(len(classes))
    for col, p in enumerate(pools):
        ax0, ax1 = axes[0, col], axes[1, col]
        for i, a in enumerate(arm_names):
            off = [x - 0.4 + width * (i + 0.5) for x in xs]
            recs = [arms[a].get(p, {}).get(c) for c in classes]
            ax0.bar(off, [r["cached_share"] if r else 0 for r in recs], width, color=COLORS[a],
                    label=a)
            ax1.bar(off, [(r.get("mean_running_queued") or 0) if r else 0 for r in recs], width,
                    color=COLORS[a], label=a if col == 0 else None)
            ax1.scatter(off, [(r.get("mean_running") or 0) if r else 0 for r in recs], marker="_",
                        s=120, color="black", zorder=3)
        for x, c in zip(xs, classes):
            exp = [arms[a][p][c]["expected_share"] for a in arm_names if c in arms[a].get(p, {})]
            if exp:
                ax0.hlines(max(exp), x - 0.42, x + 0.42, colors="black", linestyles="dotted")
        ax1.axhline(cap, ls="--", color="black", lw=1)
        pool_tokens = (result.get("pools") or {}).get(p, {}).get("swa_pool")
        ax0.set_title(f"{p}: SWA pool {pool_tokens:,} tokens" if pool_tokens else p, fontsize=10)
        ax0.set_ylim(0, 1.0)
        ax1.set_ylim(0, cap + 2)
        for ax in (ax0, ax1):
            ax.set_xticks(list(xs))
            ax.set_xticklabels(classes, rotation=20, fontsize=8)
            ax.grid(alpha=0.3, axis="y")
        if col == 0:
            ax0.set_ylabel("cached / prompt tokens\n(dotted: a cache that forgets nothing)")
            ax1.set_ylabel(f"running while queued (bars)\ntime mean (black ticks); cap {cap}")
    h, lab = axes[0, 0].get_legend_handles_labels()
    fig.legend(h, lab, loc="lower center", ncol=len(arm_names), fontsize=9, frameon=False)
    fig.suptitle("Prefix reuse per class, arm and SWA pool (tiny model on CPU, w=32, cp=512, "
                 f"cap {cap})", fontsize=11)
    fig.tight_layout(rect=(0, 0.04, 1, 0.97))
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=90)
    plt.close(fig)

