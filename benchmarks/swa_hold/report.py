"""The SWA hold benchmark's markdown (``benchmarks/swa_hold.py``): one table, one column per arm,
and the cProfile appendix of ``--profile`` (``profile_details``), from the JSON result alone
(``to_markdown``: the whole file ``--md`` writes). What a run measured under a name that changed
since (the island free, the arms' reclaim) is rendered from the JSON's own record of it. SWA
figures are tokens per running request; costs are milliseconds."""

from __future__ import annotations

import statistics
from typing import Callable, List

from swa_hold.setup import ARM_ORDER, ISLAND_FREE_FUNCTION

from islands_harness.host_syncs import SYNC_KEYS


def _f(x, nd=1):
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.{nd}f}"
    return str(x)


def A_k(a, k, field, nd=1):
    hs = a.get("host_syncs") or {}
    if k not in hs:
        return "-"
    return _f(hs[k][field], nd)


class _Table:
    """The metric rows of the table: ``row`` formats one cell per arm from that arm's entry,
    ``cells`` takes one cell per arm name."""

    def __init__(self, result: dict):
        self.result = result
        self.A = result["arms"]
        self.arms = result.get("arm_order") or [a for a in ARM_ORDER if a in self.A]
        self.ratios = result.get("ratios_vs_upstream", {})
        self.lines: List[str] = []

    def row(self, label: str, fn: Callable[[dict], str]) -> None:
        self.lines.append(f"| {label} | " + " | ".join(fn(self.A[a]) for a in self.arms) + " |")

    def cells(self, label: str, fn: Callable[[str], str]) -> None:
        self.lines.append(f"| {label} | " + " | ".join(fn(a) for a in self.arms) + " |")

    def ratio(self, label: str, fn: Callable[[dict], str]) -> None:
        """A ratio-vs-upstream row: ``1`` for upstream, ``-`` where there is no ratio."""
        r = self.ratios
        self.cells(label, lambda a: "1" if a == "upstream" else (fn(r[a]) if a in r else "-"))


def _hold_rows(t: _Table) -> None:
    for phase, key in (("after commit", "after_commit"), ("chunk in flight", "with_chunk_in_flight"),
                       ("decode", "decode")):
        t.row(f"{phase}: held (locked + private) max / mean",
              lambda a: f"{_f(a[key].get('max_swa_held_per_running_req'))} / "
                        f"{_f(a[key].get('mean_swa_held_per_running_req'))}")
        t.row(f"{phase}: locked max / private max",
              lambda a: f"{_f(a[key].get('max_swa_locked_per_running_req'))} / "
                        f"{_f(a[key].get('max_swa_private_per_running_req'))}")
        t.row(f"{phase}: tree evictable max / mean",
              lambda a: f"{_f(a[key].get('max_swa_evictable_per_running_req'))} / "
                        f"{_f(a[key].get('mean_swa_evictable_per_running_req'))}")
        t.row(f"{phase}: dead max / mean",
              lambda a: f"{_f(a[key].get('max_dead_swa_per_running_req'))} / "
                        f"{_f(a[key].get('mean_dead_swa_per_running_req'))}")
        t.row(f"{phase}: SWA allocated max / mean",
              lambda a: f"{_f(a[key].get('max_swa_allocated_per_running_req'))} / "
                        f"{_f(a[key].get('mean_swa_allocated_per_running_req'))}")


def _cost_rows(t: _Table) -> None:
    A, arms, ratios = t.A, t.arms, t.ratios
    t.row("commit CPU ms median / p90 (`perf_counter`)",
          lambda a: f"{_f(a['commit_cpu_seconds_median'] * 1e3, 3)} / "
                    f"{_f(a['commit_cpu_seconds_p90'] * 1e3, 3)}"
          if a["commit_cpu_seconds_median"] is not None else "-")
    t.ratio("commit CPU ratio vs upstream (median / p90, perf_counter)",
            lambda r: f"{r['commit_cpu_median']:.3f} / {r['commit_cpu_p90']:.3f}")
    t.row("commit thread CPU ms median / p90 (`time.thread_time`)",
          lambda a: f"{_f(a['commit_thread_cpu_seconds_median'] * 1e3, 3)} / "
                    f"{_f(a['commit_thread_cpu_seconds_p90'] * 1e3, 3)}"
          if a["commit_thread_cpu_seconds_median"] is not None else "-")
    t.ratio("commit thread CPU ratio vs upstream (median / p90)",
            lambda r: f"{r['commit_thread_cpu_median']:.3f} / {r['commit_thread_cpu_p90']:.3f}")
    if any(A[a].get("commit_free_thread_cpu_seconds_median") is not None for a in arms):
        free = t.result.get("island_free_function", ISLAND_FREE_FUNCTION)
        t.row(f"of which the SWA free (`{free}`), thread CPU ms median",
              lambda a: _f(a["commit_free_thread_cpu_seconds_median"] * 1e3, 3)
              if a.get("commit_free_thread_cpu_seconds_median") is not None else "-")
        t.cells("upstream's commit + that free, thread CPU ratio vs upstream (a floor for freeing "
                "at commit)",
                lambda a: _f(ratios[a]["upstream_plus_free_thread_cpu_median"], 3)
                if "upstream_plus_free_thread_cpu_median" in ratios.get(a, {}) else "-")
    t.ratio("per-repeat median ratio vs upstream (perf_counter)",
            lambda r: ", ".join(f"{x:.3f}" for x in r["per_repeat_median"]))
    t.row("all commits of a run + final SWA reclaim, ms (reclaimed tokens)",
          lambda a: f"{_f(a['commit_cpu_seconds_per_run_median'] * 1e3, 2)} + "
                    f"{_f(a['final_swa_reclaim_cpu_seconds_median'] * 1e3, 2)} "
                    f"({a['final_swa_reclaimed_tokens']})"
          if a["commit_cpu_seconds_per_run_median"] is not None else "-")
    t.row("commit timing samples (commits x repeats)",
          lambda a: f"{a['commits_per_run']} x {t.result['repeats']}")


def _sync_rows(t: _Table) -> None:
    A, arms = t.A, t.arms
    t.row("host syncs per commit max / mean",
          lambda a: f"{_f(a['host_syncs'].get('syncs_per_commit_max'))} / "
                    f"{_f(a['host_syncs'].get('syncs_per_commit_mean'), 2)}" if a["host_syncs"] else "-")
    for k in SYNC_KEYS:
        if any(A[a]["host_syncs"] and A[a]["host_syncs"][k]["per_commit_max"] for a in arms):
            t.row(f"  `{k}` per commit max / mean",
                  lambda a, k=k: f"{A_k(a, k, 'per_commit_max')} / {A_k(a, k, 'per_commit_mean', 2)}")
    if any(A[a]["host_syncs"] and "cuda_sync" in A[a]["host_syncs"] for a in arms):
        t.row("CUDA syncs per commit max / mean (torch sync debug mode)",
              lambda a: f"{A_k(a, 'cuda_sync', 'per_commit_max')} / "
                        f"{A_k(a, 'cuda_sync', 'per_commit_mean', 2)}")
        t.row("decode-island CUDA syncs max",
              lambda a: _f(((a.get("decode_island_host_syncs") or {}).get("cuda_sync") or {})
                           .get("per_commit_max")))
    t.row("aten ops per commit max / mean",
          lambda a: f"{A_k(a, 'aten_ops', 'per_commit_max')} / {A_k(a, 'aten_ops', 'per_commit_mean')}")


def _island_rows(t: _Table) -> None:
    t.row("chunk islands / decode islands", lambda a: f"{a['chunk_islands']} / {a['decode_islands']}")
    t.row("decode-island CPU ms median",
          lambda a: _f(statistics.median(a["decode_island_cpu_seconds"]) * 1e3, 3)
          if a["decode_island_cpu_seconds"] else "-")
    t.row("decode-island host syncs max",
          lambda a: _f((a.get("decode_island_host_syncs") or {}).get("syncs_per_commit_max")))
    t.row("measurement run wall s (full decode)", lambda a: _f(a["measurement_run_wall_seconds"]))


def _ms(x, nd=2):
    return "-" if x is None else f"{x * 1e3:.{nd}f}"


def _main_hold_rows(t: _Table) -> None:
    """0.5.23: the hold rows, with the commits split into chunk commits and decode islands."""
    _hold_rows(t)
    for phase, key in (("after a chunk commit (every running request)", "after_chunk_commit"),
                       ("after a decode island (the committing request)", "after_decode_island"),
                       ("after a decode island (every running request: others' decode tails)",
                        "after_decode_island_all_running")):
        t.row(f"{phase}: held max / mean",
              lambda a, key=key: f"{_f(a[key].get('max_swa_held_per_running_req'))} / "
                                 f"{_f(a[key].get('mean_swa_held_per_running_req'))}"
              if a[key] else "-")


def _gib(x) -> str:
    return "-" if x is None else f"{x / (1 << 30):.3f}"


def _main_bytes_rows(t: _Table) -> None:
    """With a model shape: the hold rows' SWA figures in GiB per running request (tokens x the
    SWA pool's bytes per token)."""
    if "model_shape" not in t.result:
        return
    def cell(a, key, kind):
        b = a.get("hold_bytes", {}).get(key)
        return "-" if not b else (f"{_gib(b[f'max_swa_{kind}_per_running_req'])} / "
                                  f"{_gib(b[f'mean_swa_{kind}_per_running_req'])}")

    t.row("**after commit: held max / mean, GiB of SWA KV**",
          lambda a: f"**{cell(a, 'after_commit', 'held')}**")
    for phase, key in (("chunk in flight", "with_chunk_in_flight"), ("decode", "decode")):
        t.row(f"{phase}: held max / mean, GiB", lambda a, key=key: cell(a, key, "held"))
    for phase, key in (("after commit", "after_commit"), ("chunk in flight", "with_chunk_in_flight"),
                       ("decode", "decode")):
        t.row(f"{phase}: SWA allocated max / mean, GiB",
              lambda a, key=key: cell(a, key, "allocated"))


def _main_cost_rows(t: _Table) -> None:
    """0.5.23: per-call and whole-run costs, ratios against ``main`` on the same core."""
    r = t.result.get("ratios_vs_main", {})

    def ratio(label, fn):
        t.cells(label, lambda a: fn(r[a]) if a in r else ("1" if a.startswith("main/") else "-"))

    t.row("chunk commit CPU ms median / p90 (`perf_counter`)",
          lambda a: f"{_ms(a['commit_cpu_seconds_median'], 3)} / "
                    f"{_ms(a['commit_cpu_seconds_p90'], 3)}")
    t.row("chunk commit thread CPU ms median / p90 (`time.thread_time`)",
          lambda a: f"{_ms(a['commit_thread_cpu_seconds_median'], 3)} / "
                    f"{_ms(a['commit_thread_cpu_seconds_p90'], 3)}")
    ratio("chunk commit thread CPU ratio vs main, same core (median / p90)",
          lambda x: f"{x['commit_thread_cpu_median']:.3f} / {x['commit_thread_cpu_p90']:.3f}")
    t.row("decode island (a decode-progress call that laid one) thread CPU ms median",
          lambda a: _ms(a["decode_island_thread_cpu_seconds_median"], 3))
    t.row("per run, thread CPU ms: chunk commits + decode islands + finishes + final reclaim",
          lambda a: " + ".join(_ms(a["per_run_median"].get(k)) for k in (
              "commits_thread", "islands_thread", "finishes_thread", "reclaim_thread")))
    t.row("**per run, commit + reclaim thread CPU ms** (median over repeats)",
          lambda a: f"**{_ms(a['per_run_median'].get('commit_reclaim_thread'))}**")
    ratio("**commit + reclaim thread CPU ratio vs main, same core**",
          lambda x: f"**{x['commit_reclaim_thread_cpu']:.3f}**")
    ratio("commit + reclaim thread CPU ratio per repeat",
          lambda x: ", ".join(f"{v:.3f}" for v in x["commit_reclaim_thread_cpu_per_repeat"]))
    ratio("chunk commits + final reclaim only (the 0.5.15 benchmark's sum), thread CPU ratio",
          lambda x: f"{x['chunk_commits_plus_reclaim_thread_cpu']:.3f}")
    t.row("commit + reclaim, wall ms (`perf_counter`)",
          lambda a: _ms(a["per_run_median"].get("commit_reclaim")))
    ratio("commit + reclaim wall ratio vs main, same core",
          lambda x: f"{x['commit_reclaim_wall']:.3f}")
    t.row("other decode-progress calls (due check, window release): calls per run; thread CPU "
          "us median per call; ms per run",
          lambda a: f"{a['decode_hook_calls_per_run'] - a['decode_islands']}; "
                    f"{_f(None if a['decode_hook_thread_cpu_seconds_median'] is None else a['decode_hook_thread_cpu_seconds_median'] * 1e6, 2)}; "
                    f"{_ms(a['per_run_median'].get('hook_rest_thread'))}")
    ratio("commit + reclaim + those calls, thread CPU ratio vs main",
          lambda x: f"{x['whole_run_thread_cpu']:.3f}")
    t.row("timer overhead per timed call, thread CPU us (taken off every call above)",
          lambda a: _f(None if a["timer_overhead_thread_cpu_seconds_median"] is None
                       else a["timer_overhead_thread_cpu_seconds_median"] * 1e6, 2))
    t.row("final SWA reclaim: tokens freed",
          lambda a: _f(a["final_swa_reclaimed_tokens"]))
    t.row("chunk commit timing samples (commits x repeats)",
          lambda a: f"{a['commits_per_run']} x {t.result['repeats']}")


def _main_sync_rows(t: _Table) -> None:
    def syncs(key):
        return lambda a: (f"{_f(a[key].get('syncs_per_commit_max'))} / "
                          f"{_f(a[key].get('syncs_per_commit_mean'), 2)}" if a.get(key) else "-")

    t.row("host syncs per chunk commit max / mean", syncs("host_syncs"))
    t.row("host syncs per decode island max / mean", syncs("decode_island_host_syncs"))
    t.row("host syncs per decode-progress call max / mean", syncs("decode_hook_host_syncs"))
    t.row("host syncs per finish (`release_kv_cache`) max / mean", syncs("finish_host_syncs"))
    t.row("aten ops per chunk commit max / mean",
          lambda a: f"{A_k(a, 'aten_ops', 'per_commit_max')} / "
                    f"{A_k(a, 'aten_ops', 'per_commit_mean')}")
    t.row("decode islands per run", lambda a: str(a["decode_islands"]))
    s = t.result["shape"]
    if s.get("accept_max"):  # speculative decoding: the cadence on accumulated progress
        floor = s["decode_tokens"] // (s["decode_interval"] + s["accept_max"])
        t.row(f"decode islands of the fewest request (floor(G / (interval + N)) = {floor}) / "
              "mean accept length",
              lambda a: (f"{a['decode_islands_min_per_request']} / {_f(a['accept_mean'], 2)}"
                         if a.get("accept_mean") is not None else "-"))
    t.row("measurement run wall s (full decode, snapshots)",
          lambda a: _f(a["measurement_run_wall_seconds"]))


def _main_notes(result: dict) -> List[str]:
    s = result["shape"]
    lines = [
        "",
        f"sglang 0.5.23 (upstream main), in-process on the real `UnifiedRadixCache` / "
        f"`SWATokenToKVPoolAllocator` / `SWAKVPool` (`benchmarks/swa_hold/main_driver.py`, run in each "
        f"arm's environment: `main` = stock 0.5.23 in `.venv-main`, `main_islands` = "
        f"`SWAIslandUnifiedRadixCache` as `--enable-swa-islands` builds it, in "
        f"`.venv-main-islands`); columns are ARM/tree core. Pools: full {s['full_pool']} / SWA "
        f"{s['swa_pool']} tokens (nothing is evicted before the end: the natural hold). "
        "`after commit` = every running request after each chunk commit and the committing "
        "request after each decode island (the rows below split them; the other requests' "
        "decode tails at a decode island are what they own since their own last island, freed "
        "by main's decode evictor, not what the commit left). "
        "`held` = the SWA the request's tree lock holds (the rise of `swa_protected_size()` "
        "when the lock was taken; the prompts share no token, so the locks share no node, "
        "checked against `swa_protected_size()` at every snapshot) + its live request-owned "
        "SWA slots past `cache_protected_len`. `decode` = after every decode step "
        "(main's decode SWA evictor runs every `SGLANG_SWA_EVICTION_INTERVAL` = 128 tokens, "
        "as `maybe_evict_swa`). `dead` needs node-level access (not on the Rust core): `-`.",
        "",
        "Costs: `time.thread_time` (this thread's CPU; the machine is shared) and "
        "`perf_counter` around each call; per-call figures are medians over all calls of all "
        "timing repeats, per-run figures medians over the repeats, each call less the timer's "
        "own cost (its median around an empty call, measured in every run). Commit + reclaim = "
        "every insert into the tree (chunk commits, decode islands: the `on_decode_progress` "
        "calls that laid one, finishes: `release_kv_cache`, which inserts the rest of the "
        "request) + the final reclaim (`evict` of all evictable SWA once every request "
        "finished). The other `on_decode_progress` calls (islands only: stock main has no "
        "hook; once per running request per decode step, the due check and the window "
        "release) are reported beside it. Host syncs: aten "
        "ops that would block the host on a CUDA tensor, counted at the torch dispatcher "
        "(`islands_harness.host_syncs`): what the Rust core does on raw buffers is not seen.",
    ]
    lines += _model_notes(result)
    acc = result.get("acceptance")
    if acc:
        lines += ["", "Acceptance (issue 27, per core): " + ", ".join(
            f"{k}={v}" for k, v in acc.items())]
    lines += ["", f"Command: `{result.get('command', '')}`"]
    env = result.get("environment")
    if env:
        lines += ["", f"Machine: {env['cpus']} CPUs, load average {env['loadavg_start'][0]:.1f} "
                      f"at start / {env['loadavg_end'][0]:.1f} at end (shared with other jobs; "
                      f"arms interleaved per repeat, cores alternating); KV device "
                      f"{result.get('device', '')}, 1 thread; versions "
                      + ", ".join(f"{a}: sglang {v['sglang']}"
                                  for a, v in result.get("versions", {}).items()) + "."]
    lines.append("")
    return lines


def _model_notes(result: dict) -> List[str]:
    """With a model shape: the pools' geometry, their bytes per token and GiB, and the memory
    check the command made before allocating them."""
    m = result.get("model_shape")
    if not m:
        return []
    s, pools = result["shape"], m["pools"]
    full, swa = pools["full"], pools["swa"]
    lines = [
        "",
        f"Model shape `{m['name']}` ({m['source']}): the pools are SGLang's own `SWAKVPool`, "
        f"built with the keyword arguments 0.5.23's configurator passes for a model whose "
        f"sliding and full layers differ (`swa_head_num`, `swa_head_dim`, `swa_v_head_dim`, "
        f"`v_head_dim`), KV dtype `{m['kv_dtype']}` (stored as `{swa['store_dtype']}`). "
        f"SWA pool: {swa['layers']} sliding layers x {swa['kv_heads']} KV heads x "
        f"({swa['head_dim']} + {swa['v_head_dim']}) = {swa['bytes_per_token']:,} B per token, "
        f"{s['swa_pool']:,} tokens = **{m['swa_pool_gib']:.2f} GiB**; full pool: "
        f"{full['layers']} full layers x {full['kv_heads']} KV heads x ({full['head_dim']} + "
        f"{full['v_head_dim']}) = {full['bytes_per_token']:,} B per token, "
        f"{s['full_pool']:,} tokens = **{m['full_pool_gib']:.2f} GiB** (each pool keeps one "
        f"page more, slot 0's; the bytes are read off the pools the measurement runs built). "
        f"A GiB figure is the SWA token figure of the same row above x {swa['bytes_per_token']:,}"
        f" B.",
    ]
    mem = result.get("memory")
    if mem:
        avail = mem.get("mem_available_bytes_at_start")
        lines[-1] += (f" The pools are real memory on this machine: {mem['pool_bytes_estimate'] / (1 << 30):.2f} GiB "
                      f"estimated before allocating, under the limit of "
                      f"{mem['limit_bytes'] / (1 << 30):.2f} GiB (`--max-pool-gib` "
                      f"{mem['max_pool_gib']:g}"
                      + (f", 70% of {avail / (1 << 30):.1f} GiB available at start" if avail
                         else "") + "); the pools default to what the driver can allocate at "
                      "most, `n x (prompt + decode + p)`.")
    return lines


def _header(result: dict, arms: List[str]) -> List[str]:
    s = result["shape"]
    return [
        f"### SWA hold per running request: w={s['window']} p={s['page']} cp={s['chunk']} "
        f"prompt={s['prompt']} n={s['n_requests']} decode={s['decode_tokens']}"
        f" (decode-island interval {s['decode_interval']})"
        + (f", speculative: 1-{s['accept_max']} tokens a step (mean "
           f"{(1 + s['accept_max']) / 2:g})" if s.get("accept_max") else "")
        + (f", pools of {result['model_shape']['name']}" if "model_shape" in result else ""),
        "",
        f"KV device: {result.get('device', 'cpu')}.",
        "",
        "SWA tokens per running request (max / mean over snapshots and running requests).",
        "`after commit`: right after each `cache_unfinished_req`, before the next chunk is "
        "allocated; `chunk in flight`: after each extend step, including the next chunk's slots.",
        "",
        "| metric | " + " | ".join(arms) + " |",
        "|---|" + "---|" * len(arms),
    ]


def _notes(result: dict) -> List[str]:
    s = result["shape"]
    cuda = str(result.get("device", "cpu")).startswith("cuda")
    lines = [
        "",
        f"Pools: full {s['full_pool']} / SWA {s['swa_pool']} tokens (no eviction pressure, no "
        "retractions: the natural hold is measured). `held` = SWA-locked tree nodes + live "
        "request-owned slots (`req_hold`); `tree evictable`, `dead` and `SWA allocated` are pool "
        "totals divided by the running requests; `dead` = live, unlocked tree SWA outside every "
        "running request's window `[L - w, L)` (during decode, islands' count includes the "
        "prompt's last island, kept live on purpose as the re-serve point"
        + ("; with lazy reclaim it is the cached SWA below islands, evictable: what `lazy`, the "
           "default, keeps until the pool needs it" if "lazy" in arm_reclaim(result).values()
           else "")
        + "). Commit CPU: "
        "`time.perf_counter` (wall) and `time.thread_time` (this thread's CPU, less sensitive "
        "to other jobs on the machine) around `tree.cache_unfinished_req` "
        + ("(tensor ops are CUDA kernel launches: the thread time is the host's launch cost), "
           if cuda else
           "(CPU harness: tensor ops run on CPU tensors), ")
        + "median / p90 over all commits of all timing repeats. Host syncs: aten ops "
        "that block the host on a CUDA tensor (see the module docstring), counted per commit"
        + ("; CUDA syncs: warnings of torch's sync debug mode, counted per commit."
           if cuda else "."),
    ]
    acc = result.get("acceptance")
    if acc:
        lines += ["", "Acceptance: " + ", ".join(f"{k}={v}" for k, v in acc.items())]
    lines += ["", f"Command: `{result.get('command', '')}`"]
    env = result.get("environment")
    if env:
        lines += ["", f"Machine: {env['cpus']} CPUs, load average {env['loadavg_start'][0]:.1f} at "
                      f"start / {env['loadavg_end'][0]:.1f} at end (other jobs share it: timings are "
                      f"noisy; arms are interleaved per repeat); torch {env['torch']}, "
                      f"{env['torch_threads']} thread(s)."]
    lines.append("")
    return lines


def arm_reclaim(result: dict) -> dict:
    """Each arm's ``--swa-islands-reclaim`` (None: no policy) as the run recorded it. JSONs before
    that record (2026-12-04): a run with an ``islands_eager`` arm ran ``islands`` with ``lazy``
    (the arm set since lazy became the default, 2026-12-01; the four hours before it, ``islands``
    ran ``auto``, a run not kept); a run without one predates the reclaim policies (islands freed
    at commit)."""
    if "arm_reclaim" in result:
        return result["arm_reclaim"]
    if "islands_eager" in result["arms"]:
        return {a: {"islands_eager": "eager", "islands": "lazy"}.get(a) for a in result["arms"]}
    return {a: None for a in result["arms"]}


def to_markdown(result: dict) -> str:
    """The markdown file of a result: its table, pools and method notes, acceptance, command and
    machine, then the cProfile tables of the arms that carry them."""
    t = _Table(result)
    if result.get("target") == "main":
        for part in (_main_hold_rows, _main_bytes_rows, _main_cost_rows, _main_sync_rows):
            part(t)
        return "\n".join(_header(result, t.arms) + t.lines + _main_notes(result)) + profile_details(
            result)
    for part in (_hold_rows, _cost_rows, _sync_rows, _island_rows):
        part(t)
    return "\n".join(_header(result, t.arms) + t.lines + _notes(result)) + profile_details(result)


def profile_details(result: dict) -> str:
    """One collapsed cProfile table per arm that has ``commit_profile`` (``--profile N``)."""
    out = []
    for arm, a in result["arms"].items():
        if a.get("commit_profile"):
            out.append(f"\n<details><summary>cProfile of the commit path: {arm} "
                       f"(thread-CPU microseconds per commit, profiler overhead included, "
                       f"{result['profile_runs']} runs)</summary>\n\n"
                       "| cumulative | own | calls | function |\n|---:|---:|---:|---|\n")
            for r in a["commit_profile"]:
                out.append(f"| {r['cumtime_us_per_commit']:.1f} | {r['tottime_us_per_commit']:.1f}"
                           f" | {r['ncalls']} | `{r['func']}` |\n")
            out.append("\n</details>\n")
    return "".join(out)
