#!/usr/bin/env python
"""Admission under SWA-pool pressure on the real SGLang server (CPU, tiny hybrid-SWA model).

The production question: with a lean ``--swa-full-tokens-ratio`` (0.17), does the SWA pool bind
admission below the concurrency cap (upstream: each running request pins about one prefill chunk
of SWA KV), and do SWA islands remove that bind without losing prefix reuse? This benchmark boots
the real ``sglang.launch_server`` (``islands_harness.server.SglangServer``) on the tiny Laguna
model (``islands_harness.tiny_model``), once per arm and repeat, and drives two workloads through
``/generate`` on token ids.

Scaling (see ``plan_mapping``; the results file prints the numbers):

* shape: window ``w`` = 32, page ``p`` = 1, chunk ``cp`` = 512, so ``cp / (w + p)`` = 15.5
  (production 16384 / 1088 = 15.1); cap ``--max-running-requests`` 16 (production 48);
* pools: the production SWA pool at ratio ``r`` (``islands_tools.pool_plan.solve_pool_sizes``: 9.5 KB full,
  95 KB SWA, 10.24 KB draft per token, 37 GB, p = 64) in units of cap x hold (48 x 16384) gives a
  fraction; the CPU SWA pool is that fraction x 16 x 512; the server ratio is that pool /
  ``--max-total-tokens`` (65536, large enough that the full pool never binds);
* decode tail: production's decode evictor runs every 128 steps of ~8.5 accepted tokens, a tail
  of 1088 tokens = 6.6% of cp (``decode_tail_tokens``); the CPU has no speculative decoding, so
  ``SGLANG_SWA_EVICTION_INTERVAL`` is set to the same 6.6% of cp (34 steps) for every arm
  (``--eviction-interval 0`` keeps sglang's 128).

Arms (one boot each, same arguments otherwise):

* ``chunk_cache``: ``--disable-radix-cache``; the server sizes its SWA pool itself
  (``SWAChunkCapPoolConfigurator``), the ratio is ignored (reported as null);
* ``upstream_0.32`` / ``upstream_0.17``: stock ``SWARadixCache`` at the 0.32- and 0.17-equivalent;
* ``upstream_knobs_0.17``: plus ``SGLANG_OPT_SWA_SPLIT_LEAF_ON_INSERT=1`` and
  ``SGLANG_OPT_SWA_RELEASE_LEAF_LOCK_AFTER_WINDOW=1``;
* ``islands_0.17`` / ``islands_0.10``: ``--enable-swa-islands``;
* ``islands_floor`` (opt-in via ``--arms``): islands with the SWA pool at the island floor
  ``cp + N (w + p)`` itself.

Workloads (seeded; identical token totals in every arm; temperature 0, ``ignore_eos``):

* ``no_reuse``: ``--requests`` random prompts (U[in-min, in-max] tokens, no shared prefix) with
  U[out-min, out-max] output tokens, sent by ``--clients`` concurrent clients (2x the cap);
* ``agent``: ``--convs`` conversations in parallel, ``--turns`` turns each; every turn re-sends
  the whole transcript (system prompt + all previous user turns and replies) plus a new user
  message, so turn k > 1 can reuse turn k-1's prompt and reply from the radix cache. There are
  more conversations than upstream admits at the lean pools, so a turn waits in the queue with
  its cached transcript unlocked while other requests need SWA slots: upstream's lazy LRU
  eviction must run, and it deletes whole leaves (full KV too) or tombstones internal nodes.

Measured from the server: running requests per scheduler step (``#running-req`` of the
``Decode batch`` / ``Prefill batch`` log lines, ``--decode-log-interval 1``) and over time
(``sglang:num_running_reqs`` sampled from ``/metrics`` every ``--sample-interval`` s), both pools'
usage (decode log lines), decode steps, prefill tokens computed (sum of ``#new-token``),
retractions (``sglang:num_retracted_requests_total``, cross-checked with the log), islands'
eager frees (``sglang:swa_freed_at_commit_tokens``) vs pressure-driven LRU eviction
(``sglang:evicted_tokens_total``: full + SWA slots, summed by sglang), and cached tokens per
request (``meta_info.cached_tokens``).

Examples::

    .venv/bin/python benchmarks/admission.py --quick
    .venv/bin/python benchmarks/admission.py --repeats 2 --json benchmarks/results/admission.json \\
        --md benchmarks/results/admission.md --png benchmarks/results/admission_running.png
    .venv/bin/python benchmarks/admission.py --plan-only          # the pool mapping, no server
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import dataclasses
import json
import pathlib
import random
import re
import shlex
import statistics
import sys
import threading
import time
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

ROOT = pathlib.Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from islands_tools import pool_plan as plan  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"

# ----------------------------------------------------------------------------- shapes


@dataclasses.dataclass(frozen=True)
class Production:
    """The deployment of the spec (planner docstring's worked example)."""

    full_bytes: float = 9500.0  # per token, all 5 full layers, fp8
    swa_bytes: float = 95000.0  # per token, all 25 SWA layers, fp8
    draft_bytes: float = 10240.0  # per token, speculative draft KV
    budget_bytes: float = 37e9
    page: int = 64
    chunk: int = 16384
    window: int = 1024
    cap: int = 48
    accept_len: float = 8.5  # mean speculative accept length
    eviction_interval: int = 128  # SGLANG_SWA_EVICTION_INTERVAL default


@dataclasses.dataclass(frozen=True)
class CpuShape:
    window: int = 32
    page: int = 1
    chunk: int = 512
    cap: int = 16
    max_total_tokens: int = 65536


RATIO_EQUIVALENTS = (0.32, 0.17, 0.10)


def server_ratio_for_pool(pool: int, max_total_tokens: int) -> float:
    """The ``--swa-full-tokens-ratio`` whose SWA pool is exactly ``pool`` tokens at page 1.

    SGLang computes ``floor_p(int(T * r))`` (``swa_island_guard.swa_pool_tokens``); half a token of
    slack keeps float rounding from landing one token short.
    """
    r = round((pool + 0.5) / max_total_tokens, 8)
    if plan.swa_pool_tokens(max_total_tokens, r, 1) != pool:  # pragma: no cover (sanity)
        raise AssertionError(f"ratio {r} does not give a pool of {pool}")
    return r


def equivalent_ratio(fraction: float, prod: Production = Production()) -> float:
    """The production ratio whose SWA pool is ``fraction`` x cap x cp (bisection on the planner)."""
    kv = plan.KVBytesPerToken(prod.full_bytes, prod.swa_bytes, prod.draft_bytes)
    target = fraction * prod.cap * prod.chunk
    lo, hi = 1e-4, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if plan.solve_pool_sizes(kv, prod.budget_bytes, mid, prod.page).swa_tokens < target:
            lo = mid
        else:
            hi = mid
    return round(hi, 4)


def plan_mapping(
    ratios: Sequence[float] = RATIO_EQUIVALENTS,
    prod: Production = Production(),
    cpu: CpuShape = CpuShape(),
) -> Dict[str, Any]:
    """Production pools at each ratio -> the CPU pools, server ratios and predicted binds.

    ``fraction(r) = pool_prod(r) / (cap_prod x H_prod)`` with ``H_prod = hold_without_islands``
    (one chunk); ``pool_cpu = round(fraction x cap_cpu x H_cpu)``; ``server ratio = pool_cpu /
    --max-total-tokens``. Also the island floors and the decode-tail scaling.
    """
    kv = plan.KVBytesPerToken(prod.full_bytes, prod.swa_bytes, prod.draft_bytes)
    hold_prod = plan.hold_without_islands(prod.window, prod.page, prod.chunk)
    hold_cpu = plan.hold_without_islands(cpu.window, cpu.page, cpu.chunk)
    unit_prod = prod.cap * hold_prod
    unit_cpu = cpu.cap * hold_cpu
    floor_prod = plan.island_floor(prod.cap, prod.window, prod.page, prod.chunk)
    floor_cpu = plan.island_floor(cpu.cap, cpu.window, cpu.page, cpu.chunk)
    tail_prod = plan.decode_tail_tokens(
        prod.accept_len, eviction_interval=prod.eviction_interval, decode_interval=prod.chunk // 4
    )
    tail_cpu = max(1, round(tail_prod / prod.chunk * cpu.chunk))
    floor_tail_prod = plan.island_floor(
        prod.cap, prod.window, prod.page, prod.chunk, decode_tail=tail_prod
    )
    floor_tail_cpu = plan.island_floor(cpu.cap, cpu.window, cpu.page, cpu.chunk, decode_tail=tail_cpu)

    pools: Dict[str, Dict[str, Any]] = {}

    def row(key: str, r_eq: float, pool_prod: Optional[int], fraction: float) -> None:
        pool_cpu = int(round(fraction * unit_cpu))
        pools[key] = {
            "ratio_equivalent": r_eq,
            "prod_swa_pool": pool_prod,
            "prod_full_pool": (
                plan.solve_pool_sizes(kv, prod.budget_bytes, r_eq, prod.page).full_tokens
                if pool_prod is not None
                else None
            ),
            "fraction_of_cap_x_hold": round(fraction, 5),
            "prod_bind_without_islands": (
                round(plan.admission_bind(pool_prod, hold_prod), 2) if pool_prod else None
            ),
            "swa_pool": pool_cpu,
            "server_ratio": server_ratio_for_pool(pool_cpu, cpu.max_total_tokens),
            "bind_without_islands": round(plan.admission_bind(pool_cpu, hold_cpu), 2),
            "island_capacity": plan.island_capacity(pool_cpu, cpu.window, cpu.page, cpu.chunk),
            "island_capacity_with_tail": plan.island_capacity(
                pool_cpu, cpu.window, cpu.page, cpu.chunk, decode_tail=tail_cpu
            ),
            "floor_margin": round(pool_cpu / floor_cpu - 1, 4),
            "floor_with_tail_margin": round(pool_cpu / floor_tail_cpu - 1, 4),
            "floor_fits": pool_cpu >= floor_cpu,
        }

    for r in ratios:
        p = plan.solve_pool_sizes(kv, prod.budget_bytes, r, prod.page)
        row(_ratio_key(r), r, p.swa_tokens, p.swa_tokens / unit_prod)
    # The leanest islands arm: the CPU pool at the CPU island floor itself.
    frac_floor = floor_cpu / unit_cpu
    row("floor", equivalent_ratio(frac_floor, prod), None, frac_floor)

    return {
        "production": {
            **dataclasses.asdict(prod),
            "hold_without_islands": hold_prod,
            "cap_x_hold": unit_prod,
            "island_floor": floor_prod,
            "island_floor_fraction": round(floor_prod / unit_prod, 5),
            "decode_tail": tail_prod,
            "island_floor_with_tail": floor_tail_prod,
            "cp_over_w_plus_p": round(prod.chunk / (prod.window + prod.page), 2),
        },
        "cpu": {
            **dataclasses.asdict(cpu),
            "hold_without_islands": hold_cpu,
            "cap_x_hold": unit_cpu,
            "island_floor": floor_cpu,
            "island_floor_fraction": round(floor_cpu / unit_cpu, 5),
            "decode_tail": tail_cpu,
            "eviction_interval": tail_cpu,  # accept length 1 on CPU: tail tokens == steps
            "island_floor_with_tail": floor_tail_cpu,
            "cp_over_w_plus_p": round(cpu.chunk / (cpu.window + cpu.page), 2),
        },
        "pools": pools,
    }


def _ratio_key(r: float) -> str:
    return f"{r:.2f}"


# ----------------------------------------------------------------------------- arms

from islands_harness.knobs import UPSTREAM_KNOBS_ENV as KNOBS_ENV  # noqa: E402


@dataclasses.dataclass(frozen=True)
class Arm:
    name: str
    pool_key: Optional[str]  # key into plan_mapping()["pools"]; None: the server sizes the pool
    args: Tuple[str, ...] = ()
    env: Tuple[Tuple[str, str], ...] = ()
    baseline: bool = False  # the arm ratios are taken against


ARMS: Dict[str, Arm] = {
    a.name: a
    for a in (
        Arm("chunk_cache", None, ("--disable-radix-cache",)),
        Arm("upstream_0.32", "0.32"),
        Arm("upstream_0.17", "0.17", baseline=True),
        Arm("upstream_knobs_0.17", "0.17", (), tuple(KNOBS_ENV.items())),
        Arm("islands_0.17", "0.17", ("--enable-swa-islands",)),
        Arm("islands_0.10", "0.10", ("--enable-swa-islands",)),
        Arm("upstream_knobs_0.10", "0.10", (), tuple(KNOBS_ENV.items())),
        Arm("islands_floor", "floor", ("--enable-swa-islands",)),
        Arm("upstream_knobs_floor", "floor", (), tuple(KNOBS_ENV.items())),
    )
}
QUICK_ARMS = [
    "chunk_cache",
    "upstream_0.32",
    "upstream_0.17",
    "upstream_knobs_0.17",
    "islands_0.17",
    "islands_0.10",
]
DEFAULT_ARMS = QUICK_ARMS + ["upstream_knobs_0.10"]
BASELINE_ARM = "upstream_0.17"


def common_server_args(cpu: CpuShape) -> List[str]:
    return [
        "--page-size", str(cpu.page),
        "--chunked-prefill-size", str(cpu.chunk),
        "--max-total-tokens", str(cpu.max_total_tokens),
        "--max-running-requests", str(cpu.cap),
        "--enable-metrics",
        "--decode-log-interval", "1",
        "--log-level", "info",
    ]


def arm_server_args(arm: Arm, mapping: Dict[str, Any], cpu: CpuShape) -> List[str]:
    args = common_server_args(cpu)
    if arm.pool_key is not None:
        args += ["--swa-full-tokens-ratio", repr(mapping["pools"][arm.pool_key]["server_ratio"])]
    return args + list(arm.args)


def arm_env(arm: Arm, eviction_interval: int) -> Dict[str, str]:
    return with_eviction_interval(arm.env, eviction_interval)


def with_eviction_interval(env: Dict[str, str], eviction_interval: int) -> Dict[str, str]:
    """A copy of ``env`` plus ``SGLANG_SWA_EVICTION_INTERVAL`` (0 keeps sglang's default)."""
    env = dict(env)
    if eviction_interval > 0:
        env["SGLANG_SWA_EVICTION_INTERVAL"] = str(eviction_interval)
    return env


# ----------------------------------------------------------------------------- workloads


@dataclasses.dataclass(frozen=True)
class WorkloadConfig:
    requests: int = 32
    clients: int = 32
    in_min: int = 1980
    in_max: int = 2040
    out_min: int = 256
    out_max: int = 512
    convs: int = 12
    turns: int = 4
    system_len: int = 1200
    user_min: int = 64
    user_max: int = 128
    reply_min: int = 64
    reply_max: int = 128
    # after_finish: turn k+1 is sent once turn k finished; while_running: once turn k has streamed
    # its reply (the tokens the agent acts on), while turn k keeps generating run_on more tokens
    agent_mode: str = "after_finish"
    run_on: int = 32
    seed: int = 20261129
    token_lo: int = 4  # first non-special id
    token_hi: int = 683  # tiny tokenizer's real vocabulary


QUICK = dict(requests=32, clients=32, out_min=96, out_max=192, convs=8, turns=3,
             system_len=1000, reply_min=48, reply_max=96)


def no_reuse_requests(cfg: WorkloadConfig) -> List[Dict[str, Any]]:
    rng = random.Random(cfg.seed)
    out = []
    for i in range(cfg.requests):
        n = rng.randint(cfg.in_min, cfg.in_max)
        out.append({
            "i": i,
            "input_ids": [rng.randrange(cfg.token_lo, cfg.token_hi) for _ in range(n)],
            "max_new_tokens": rng.randint(cfg.out_min, cfg.out_max),
        })
    return out


def agent_script(cfg: WorkloadConfig) -> List[Dict[str, Any]]:
    """Per conversation: a system prompt and, per turn, the new user tokens and the reply length."""
    rng = random.Random(cfg.seed + 1)
    convs = []
    for c in range(cfg.convs):
        system = [rng.randrange(cfg.token_lo, cfg.token_hi) for _ in range(cfg.system_len)]
        turns = []
        for _ in range(cfg.turns):
            user = [rng.randrange(cfg.token_lo, cfg.token_hi)
                    for _ in range(rng.randint(cfg.user_min, cfg.user_max))]
            turns.append({"user": user, "max_new_tokens": rng.randint(cfg.reply_min, cfg.reply_max)})
        convs.append({"conv": c, "system": system, "turns": turns})
    return convs


def agent_max_context(cfg: WorkloadConfig) -> int:
    return cfg.system_len + cfg.turns * (cfg.user_max + cfg.reply_max)


# ----------------------------------------------------------------------------- parsing

_TS = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\]")
_DECODE = re.compile(
    r"Decode batch(?: \[\d+\])?, #running-req: (?P<run>\d+), #full token: (?P<full_tok>\d+), "
    r"full token usage: (?P<full_use>[\d.]+), #swa token: (?P<swa_tok>\d+), "
    r"swa token usage: (?P<swa_use>[\d.]+)"
)
_ISLANDS = re.compile(
    r"swa held/req: (?P<held_mean>\d+) \(max (?P<held_max>\d+)\), islands: (?P<chunk_islands>\d+) "
    r"chunk \+ (?P<decode_islands>\d+) decode, swa reclaimed: (?P<freed>\d+) at commit \+ "
    r"(?P<cold>\d+) cold \+ (?P<window>\d+) window, #tombstone token: (?P<tomb>\d+)"
)
_PREFILL = re.compile(
    r"Prefill batch(?: \[\d+\])?, #new-seq: (?P<new_seq>\d+), #new-token: (?P<new_tok>\d+), "
    r"#cached-token: (?P<cached>\d+), full token usage: (?P<full_use>[\d.]+), "
    r"swa token usage: (?P<swa_use>[\d.]+), #running-req: (?P<run>\d+), #queue-req: (?P<queue>\d+)"
)
_QUEUE = re.compile(r"#queue-req: (\d+)")
_RETRACT = re.compile(r"#retracted_reqs: (\d+)")
_POOLS = re.compile(r"swa size: (\d+), full size: (\d+)")
_BIND_WARN = re.compile(r"binds admission at about ([\d.]+) running requests")
_CAPACITY_WARN = re.compile(r"carries about (\d+) running requests at the island floor")


def parse_log_lines(lines: Iterable[str]) -> Dict[str, Any]:
    """Scheduler log lines -> decode steps, prefill batches, retractions (in log order)."""
    decode: List[Dict[str, Any]] = []
    prefill: List[Dict[str, Any]] = []
    retract_events: List[int] = []
    for line in lines:
        ts = _TS.match(line)
        t = ts.group(1) if ts else None
        if (m := _DECODE.search(line)) is not None:
            d: Dict[str, Any] = {
                "t": t,
                "run": int(m["run"]),
                "full_tok": int(m["full_tok"]),
                "full_use": float(m["full_use"]),
                "swa_tok": int(m["swa_tok"]),
                "swa_use": float(m["swa_use"]),
            }
            if (q := _QUEUE.search(line)) is not None:
                d["queue"] = int(q.group(1))
            if (i := _ISLANDS.search(line)) is not None:
                d.update({k: int(v) for k, v in i.groupdict().items()})
            decode.append(d)
        elif (m := _PREFILL.search(line)) is not None:
            prefill.append({
                "t": t,
                "new_seq": int(m["new_seq"]),
                "new_tok": int(m["new_tok"]),
                "cached": int(m["cached"]),
                "full_use": float(m["full_use"]),
                "swa_use": float(m["swa_use"]),
                "run": int(m["run"]),
                "queue": int(m["queue"]),
            })
        elif (m := _RETRACT.search(line)) is not None:
            retract_events.append(int(m.group(1)))
    return {"decode": decode, "prefill": prefill, "retract_events": retract_events}


def parse_boot_log(text: str) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    if (m := _POOLS.search(text)) is not None:
        out["swa_pool_log"], out["full_pool_log"] = int(m.group(1)), int(m.group(2))
    if (m := _BIND_WARN.search(text)) is not None:
        out["server_predicted_bind"] = float(m.group(1))
    if (m := _CAPACITY_WARN.search(text)) is not None:
        out["server_island_capacity"] = int(m.group(1))
    return out


def summarize_log(parsed: Dict[str, Any], cap: int) -> Dict[str, Any]:
    dec, pre = parsed["decode"], parsed["prefill"]
    runs = [d["run"] for d in dec]
    out = {
        "decode_steps": len(dec),
        "prefill_batches": len(pre),
        "prefill_tokens": sum(p["new_tok"] for p in pre),
        "prefill_cached_tokens": sum(p["cached"] for p in pre),
        "max_running_log": max(runs + [p["run"] + p["new_seq"] for p in pre], default=0),
        "max_running_decode": max(runs, default=0),
        "mean_running_step": round(statistics.mean(runs), 3) if runs else 0.0,
        "frac_steps_at_cap": round(sum(r >= cap for r in runs) / len(runs), 4) if runs else 0.0,
        "retractions_log": sum(parsed["retract_events"]),
        "retraction_events_log": len(parsed["retract_events"]),
        "max_swa_used_tokens": max((d["swa_tok"] for d in dec), default=0),
        "max_swa_usage": max([d["swa_use"] for d in dec] + [p["swa_use"] for p in pre], default=0.0),
        "max_full_used_tokens": max((d["full_tok"] for d in dec), default=0),
        "max_full_usage": max([d["full_use"] for d in dec] + [p["full_use"] for p in pre], default=0.0),
        "mean_swa_usage_step": round(statistics.mean(d["swa_use"] for d in dec), 4) if dec else 0.0,
        "max_queue": max([d.get("queue", 0) for d in dec] + [p["queue"] for p in pre], default=0),
    }
    isl = [d for d in dec if "held_mean" in d]
    if isl:
        out["held_per_req_mean"] = round(statistics.mean(d["held_mean"] for d in isl), 1)
        out["held_per_req_max"] = max(d["held_max"] for d in isl)
        out["max_tombstone_tokens"] = max(d["tomb"] for d in isl)
    return out


_PROM = re.compile(r"^(?P<name>[A-Za-z_:][\w:]*)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)")


def parse_metrics(text: str) -> Dict[str, Dict[str, float]]:
    """Prometheus text -> ``{name: {label string: value}}`` (labels kept, unlike
    ``islands_harness.server.parse_prometheus``, which keeps one sample per name)."""
    out: Dict[str, Dict[str, float]] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _PROM.match(line)
        if m is None:
            continue
        try:
            v = float(m["value"])
        except ValueError:
            continue
        out.setdefault(m["name"], {})[m["labels"] or ""] = v
    return out


def metric(m: Dict[str, Dict[str, float]], name: str, label: Optional[str] = None,
           agg: Callable[[Iterable[float]], float] = sum) -> float:
    """Sum (or ``agg``) of ``sglang:<name>`` over its label sets; ``label`` ('k="v"') filters."""
    series = m.get(name if name.startswith("sglang:") else f"sglang:{name}", {})
    vals = [v for k, v in series.items() if label is None or label in k]
    return float(agg(vals)) if vals else 0.0


COUNTERS = {
    "retractions": ("num_retracted_requests_total", None),
    "evicted_tokens": ("evicted_tokens_total", None),
    "island_freed_tokens": ("swa_freed_at_commit_tokens", None),
    "island_reclaimed_cold_tokens": ("swa_reclaimed_cold_tokens", None),
    "island_reclaimed_window_tokens": ("swa_reclaimed_window_tokens", None),
    "chunk_islands": ("swa_island_chunk_inserts", None),
    "decode_islands": ("swa_island_decode_inserts", None),
    "cached_tokens_metric": ("cached_tokens_total", None),
    "prompt_tokens_metric": ("prompt_tokens_total", None),
    "generation_tokens_metric": ("generation_tokens_total", None),
}


def counter_deltas(before: Dict[str, Dict[str, float]], after: Dict[str, Dict[str, float]]) -> Dict[str, float]:
    return {k: metric(after, n, lab) - metric(before, n, lab) for k, (n, lab) in COUNTERS.items()}


def time_weighted_mean(samples: Sequence[Tuple[float, float]], t0: float, t1: float) -> Optional[float]:
    """Mean of a step function given by (t, value) samples over [t0, t1]."""
    pts = sorted((t, v) for t, v in samples if t0 <= t <= t1)
    if not pts:
        return None
    if len(pts) == 1 or t1 <= t0:
        return pts[0][1]
    area = 0.0
    for (ta, va), (tb, _) in zip(pts, pts[1:]):
        area += va * (tb - ta)
    area += pts[-1][1] * (t1 - pts[-1][0])
    span = t1 - pts[0][0]
    return area / span if span > 0 else pts[0][1]


# ----------------------------------------------------------------------------- running


def log(msg: str) -> None:
    print(f"[admission {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class Sampler:
    """Samples ``/metrics`` every ``interval`` s in a thread: (t, running, queue, swa used, full used)."""

    def __init__(self, base_url: str, interval: float):
        self.url = f"{base_url}/metrics"
        self.interval = interval
        self.samples: List[Dict[str, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="metrics-sampler", daemon=True)

    def start(self) -> "Sampler":
        self._thread.start()
        return self

    def _loop(self) -> None:
        import requests

        s = requests.Session()
        while not self._stop.is_set():
            t = time.monotonic()
            try:
                m = parse_metrics(s.get(self.url, timeout=5).text)
                self.samples.append({
                    "t": t,
                    "running": metric(m, "num_running_reqs", agg=max),
                    "queue": metric(m, "num_queue_reqs", agg=max),
                    "swa_used": metric(m, "swa_used_tokens", agg=max),
                    "full_used": metric(m, "kv_used_tokens", agg=max),
                })
            except Exception:  # noqa: BLE001 - a missed sample is fine under load
                pass
            self._stop.wait(max(0.0, self.interval - (time.monotonic() - t)))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


def _post_generate(session, base_url: str, ids: List[int], max_new: int, timeout: float) -> Dict[str, Any]:
    r = session.post(
        f"{base_url}/generate",
        json={"input_ids": ids, "sampling_params": {
            "temperature": 0, "max_new_tokens": max_new, "ignore_eos": True}},
        timeout=timeout,
    )
    if r.status_code != 200:
        raise RuntimeError(f"/generate returned {r.status_code}: {r.text[:300]}")
    return r.json()


_tls = threading.local()


def _session():
    import requests

    if not hasattr(_tls, "s"):
        _tls.s = requests.Session()
    return _tls.s


def run_no_reuse(base_url: str, reqs: List[Dict[str, Any]], clients: int, timeout: float,
                 progress: Callable[[str], None]) -> List[Dict[str, Any]]:
    done = [0]
    lock = threading.Lock()

    def one(r):
        t0 = time.monotonic()
        j = _post_generate(_session(), base_url, r["input_ids"], r["max_new_tokens"], timeout)
        t1 = time.monotonic()
        with lock:
            done[0] += 1
            if done[0] % max(1, len(reqs) // 4) == 0 or done[0] == len(reqs):
                progress(f"no_reuse: {done[0]}/{len(reqs)} requests done")
        mi = j.get("meta_info", {})
        return {"i": r["i"], "t_send": t0, "t_done": t1, "latency_s": t1 - t0,
                "prompt_tokens": len(r["input_ids"]),
                "completion_tokens": int(mi.get("completion_tokens", len(j.get("output_ids", [])))),
                "cached_tokens": int(mi.get("cached_tokens", 0) or 0)}

    with cf.ThreadPoolExecutor(max_workers=clients) as ex:
        return list(ex.map(one, reqs))


def run_agent(base_url: str, convs: List[Dict[str, Any]], timeout: float,
              progress: Callable[[str], None], mode: str = "after_finish",
              run_on: int = 0, keep_ids: bool = False) -> List[Dict[str, Any]]:
    """The agent workload; ``mode`` as in ``WorkloadConfig.agent_mode``. ``keep_ids``
    (``after_finish`` only): each row also carries its ``input_ids`` and ``output_ids``."""
    if mode == "while_running":
        return run_agent_while_running(base_url, convs, timeout, progress, run_on)
    if mode != "after_finish":
        raise ValueError(f"agent mode {mode!r}")

    def conversation(c):
        rows = []
        transcript = list(c["system"])
        reusable = 0
        for k, turn in enumerate(c["turns"]):
            prompt = transcript + turn["user"]
            t0 = time.monotonic()
            j = _post_generate(_session(), base_url, prompt, turn["max_new_tokens"], timeout)
            t1 = time.monotonic()
            out_ids = list(j.get("output_ids", []))
            mi = j.get("meta_info", {})
            rows.append({"conv": c["conv"], "turn": k + 1, "t_send": t0, "t_done": t1,
                         "latency_s": t1 - t0, "prompt_tokens": len(prompt),
                         "reusable_tokens": reusable,
                         "completion_tokens": int(mi.get("completion_tokens", len(out_ids))),
                         "cached_tokens": int(mi.get("cached_tokens", 0) or 0)})
            if keep_ids:
                rows[-1].update(input_ids=list(prompt), output_ids=out_ids)
            transcript = prompt + out_ids
            reusable = len(transcript)
        progress(f"agent: conversation {c['conv']} done ({len(rows)} turns)")
        return rows

    with cf.ThreadPoolExecutor(max_workers=len(convs)) as ex:
        return [row for rows in ex.map(conversation, convs) for row in rows]


def run_agent_while_running(base_url: str, convs: List[Dict[str, Any]], timeout: float,
                            progress: Callable[[str], None], run_on: int) -> List[Dict[str, Any]]:
    """Each conversation streams turn k; once it has streamed its reply (``max_new_tokens`` of
    the script) the agent sends turn k+1 = transcript + that reply + the next user message, while
    turn k keeps generating ``run_on`` more tokens (a tool call acted on as soon as it is
    complete). Turn k+1's cache hit on turn k's reply needs it to be in the tree while turn k
    still runs: decode islands (every cp/4 tokens) put it there; upstream caches a running
    request's prompt only."""
    from types import SimpleNamespace

    from islands_harness.decode_reuse import conversation as streamed_conversation

    srv = SimpleNamespace(base_url=base_url)

    def one(c):
        turns = c["turns"]
        rows_t = streamed_conversation(
            srv, list(c["system"]) + turns[0]["user"], [t["user"] for t in turns[1:]],
            gen=[t["max_new_tokens"] for t in turns], mode="while_running", run_on=run_on,
            timeout=timeout, log=lambda m: None, name=f" conv {c['conv']}")
        rows = []
        for t in rows_t:
            rows.append({"conv": c["conv"], "turn": t.turn, "latency_s": t.seconds,
                         "prompt_tokens": t.prompt_len,
                         "reusable_tokens": t.prev_transcript_len or 0,
                         # every turn runs to its max_new_tokens (ignore_eos): reply + run_on
                         "completion_tokens": t.completion_tokens + run_on,
                         "cached_tokens": t.cached_tokens,
                         "prev_running_at_admit": t.prev_running_at_admit})
        progress(f"agent: conversation {c['conv']} done ({len(rows)} turns, while running)")
        return rows

    with cf.ThreadPoolExecutor(max_workers=len(convs)) as ex:
        return [row for rows in ex.map(one, convs) for row in rows]


def summarize_requests(rows: List[Dict[str, Any]], wall_s: float) -> Dict[str, Any]:
    lat = [r["latency_s"] for r in rows]
    out_tok = sum(r["completion_tokens"] for r in rows)
    prompt = sum(r["prompt_tokens"] for r in rows)
    cached = sum(r["cached_tokens"] for r in rows)
    return {
        "n_requests": len(rows),
        "wall_s": round(wall_s, 2),
        "output_tokens": out_tok,
        "prompt_tokens": prompt,
        "cached_tokens": cached,
        "hit_rate": round(cached / prompt, 4) if prompt else 0.0,
        "throughput_tok_s": round(out_tok / wall_s, 2) if wall_s > 0 else 0.0,
        "latency_mean_s": round(statistics.mean(lat), 3) if lat else 0.0,
        "latency_p50_s": round(statistics.median(lat), 3) if lat else 0.0,
        "latency_max_s": round(max(lat), 3) if lat else 0.0,
    }


def agent_hit_rates(rows: List[Dict[str, Any]]) -> Dict[str, Any]:
    """Per turn: cached / prompt tokens, and cached / reusable (previous prompt + reply).

    ``agent_hit_rate`` is over turns >= 2 (turn 1 is cold by construction)."""
    turns = sorted({r["turn"] for r in rows})
    per_turn = {}
    for t in turns:
        rs = [r for r in rows if r["turn"] == t]
        prompt = sum(r["prompt_tokens"] for r in rs)
        reusable = sum(r["reusable_tokens"] for r in rs)
        cached = sum(r["cached_tokens"] for r in rs)
        per_turn[str(t)] = {
            "prompt_tokens": prompt,
            "reusable_tokens": reusable,
            "cached_tokens": cached,
            "hit_rate": round(cached / prompt, 4) if prompt else 0.0,
            "hit_of_reusable": round(cached / reusable, 4) if reusable else None,
        }
    later = [r for r in rows if r["turn"] >= 2]
    prompt = sum(r["prompt_tokens"] for r in later)
    reusable = sum(r["reusable_tokens"] for r in later)
    cached = sum(r["cached_tokens"] for r in later)
    return {
        "per_turn": per_turn,
        "agent_hit_rate": round(cached / prompt, 4) if prompt else 0.0,
        "agent_hit_of_reusable": round(cached / reusable, 4) if reusable else 0.0,
        "agent_ideal_hit_rate": round(reusable / prompt, 4) if prompt else 0.0,
    }


def _read_from(path: pathlib.Path, offset: int) -> Tuple[str, int]:
    with open(path, "rb") as f:
        f.seek(offset)
        data = f.read()
    return data.decode(errors="replace"), offset + len(data)


def server_cpu_seconds(pid: Optional[int]) -> Optional[float]:
    """User + system CPU seconds of the server process tree so far (scheduler, tokenizer manager,
    detokenizer). Unlike wall time, it hardly grows when other work shares the cores, so output
    tokens per server CPU second is the throughput figure that survives a loaded machine."""
    from islands_harness.server import process_tree_cpu_seconds

    return process_tree_cpu_seconds(pid)


def run_phase(srv, name: str, cap: int, sample_interval: float,
              body: Callable[[], List[Dict[str, Any]]], *,
              extra: Optional[Callable[[Dict[str, Any], List[Dict[str, Any]]], Dict[str, Any]]] = None,
              lead_s: float = 0.5, settle_s: float = 1.5) -> Dict[str, Any]:
    """Run one workload against a booted server: requests, log slice, /metrics deltas, samples.

    ``extra(parsed_log, rows)``, when given, returns more fields for the result (after the
    ``agent`` hit rates); ``lead_s`` / ``settle_s`` are the pauses before the workload and after it
    (for the last log lines and gauges to land)."""
    time.sleep(lead_s)
    _, offset = _read_from(srv.log_path, 0)
    before = parse_metrics(_get_metrics_text(srv))
    sampler = Sampler(srv.base_url, sample_interval).start()
    cpu0 = server_cpu_seconds(srv.pid)
    t0 = time.monotonic()
    rows = body()
    t1 = time.monotonic()
    cpu1 = server_cpu_seconds(srv.pid)
    time.sleep(settle_s)  # let the last decode/log lines and gauges land
    sampler.stop()
    after = parse_metrics(_get_metrics_text(srv))
    text, _ = _read_from(srv.log_path, offset)
    parsed = parse_log_lines(text.splitlines())
    res = summarize_requests(rows, t1 - t0)
    if cpu0 is not None and cpu1 is not None and cpu1 > cpu0:
        res["server_cpu_s"] = round(cpu1 - cpu0, 2)
        res["tok_per_cpu_s"] = round(res["output_tokens"] / (cpu1 - cpu0), 3)
    res.update(summarize_log(parsed, cap))
    res.update(counter_deltas(before, after))
    samples = [(s["t"], s["running"]) for s in sampler.samples]
    twm = time_weighted_mean(samples, t0, t1)
    res["mean_running_time"] = round(twm, 3) if twm is not None else None
    res["max_running_metrics"] = max((v for t, v in samples if t0 <= t <= t1), default=None)
    res["max_running"] = max(res["max_running_decode"], int(res["max_running_metrics"] or 0))
    res["mean_running"] = res["mean_running_time"] if twm is not None else res["mean_running_step"]
    res["series"] = [[round(s["t"] - t0, 2), s["running"], s["swa_used"]] for s in sampler.samples
                     if t0 - 0.5 <= s["t"] <= t1 + 0.5]
    res["step_running"] = [d["run"] for d in parsed["decode"]]
    res["requests"] = [{k: (round(v - t0, 3) if k in ("t_send", "t_done") else
                            round(v, 3) if isinstance(v, float) else v) for k, v in r.items()}
                       for r in rows]
    if name == "agent":
        res.update(agent_hit_rates(rows))
    if extra is not None:
        res.update(extra(parsed, rows))
    return res


def _get_metrics_text(srv) -> str:
    import requests

    r = requests.get(f"{srv.base_url}/metrics", timeout=30)
    r.raise_for_status()
    return r.text


def run_arm(arm: Arm, repeat: int, mapping: Dict[str, Any], cfg: WorkloadConfig, a,
            model_dir: pathlib.Path, log_dir: pathlib.Path, workloads: Sequence[str]) -> Dict[str, Any]:
    from islands_harness.server import SglangServer

    cpu = CpuShape()
    args = arm_server_args(arm, mapping, cpu)
    env = arm_env(arm, a.eviction_interval)
    log_path = log_dir / f"{arm.name}_r{repeat}.log"
    out: Dict[str, Any] = {"arm": arm.name, "repeat": repeat, "server_args": args, "env": env,
                           "log": str(log_path)}
    t_arm = time.monotonic()
    log(f"[{arm.name} r{repeat}] booting: {' '.join(args)}"
        + (f"  env {' '.join(f'{k}={v}' for k, v in env.items())}" if env else ""))
    with SglangServer(model_dir, args, env=env, omp_threads=a.omp_threads, log_path=log_path,
                      boot_timeout_s=a.boot_timeout) as srv:
        out["boot_s"] = round(srv.boot_s, 1)
        boot_text = srv.log_path.read_text(errors="replace")
        out.update(parse_boot_log(boot_text))
        m = parse_metrics(_get_metrics_text(srv))
        out["swa_pool"] = int(sum(metric(m, f"swa_{k}_tokens", agg=max)
                                  for k in ("available", "evictable", "used")))
        out["full_pool"] = int(sum(metric(m, f"kv_{k}_tokens", agg=max)
                                   for k in ("available", "evictable", "used")))
        if arm.pool_key is not None:
            want = mapping["pools"][arm.pool_key]["swa_pool"]
            if out.get("swa_pool_log", out["swa_pool"]) != want:
                log(f"[{arm.name}] WARNING: SWA pool {out.get('swa_pool_log')} != planned {want}")
        log(f"[{arm.name} r{repeat}] healthy in {srv.boot_s:.0f} s: SWA pool "
            f"{out.get('swa_pool_log', out['swa_pool'])}, full pool "
            f"{out.get('full_pool_log', out['full_pool'])} (log {log_path})")
        progress = lambda msg: log(f"[{arm.name} r{repeat}] {msg}")  # noqa: E731
        if "no_reuse" in workloads:
            reqs = no_reuse_requests(cfg)
            out["no_reuse"] = run_phase(
                srv, "no_reuse", cpu.cap, a.sample_interval,
                lambda: run_no_reuse(srv.base_url, reqs, cfg.clients, a.request_timeout, progress))
            _progress_summary(progress, "no_reuse", out["no_reuse"])
        if "agent" in workloads:
            if "no_reuse" in workloads:
                srv.flush_cache()
            convs = agent_script(cfg)
            out["agent"] = run_phase(
                srv, "agent", cpu.cap, a.sample_interval,
                lambda: run_agent(srv.base_url, convs, a.request_timeout, progress,
                                  mode=cfg.agent_mode, run_on=cfg.run_on))
            _progress_summary(progress, "agent", out["agent"])
    out["arm_s"] = round(time.monotonic() - t_arm, 1)
    return out


def _progress_summary(progress, name: str, r: Dict[str, Any]) -> None:
    extra = f", hit rate (turns>=2) {r['agent_hit_rate']:.2f}" if "agent_hit_rate" in r else ""
    progress(f"{name}: {r['wall_s']:.0f} s, running max {r['max_running']} mean "
             f"{r['mean_running']}, retractions {r['retractions']:.0f}, "
             f"{r['throughput_tok_s']:.0f} tok/s, latency {r['latency_mean_s']:.1f} s{extra}")


# ----------------------------------------------------------------------------- aggregation

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
    return checks


# ----------------------------------------------------------------------------- output

SCHEMA_ARM_KEYS = ("ratio", "max_running", "mean_running", "retractions", "throughput_ratio",
                   "latency_ratio", "agent_hit_rate")
# keys that only a workload fills: no_reuse's headline, agent's hit rate
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
    mp = result["mapping"]
    prod, cpu, pools = mp["production"], mp["cpu"], mp["pools"]
    cap = result["cap"]
    arms = result["arms"]
    names = [n for n in result["arm_order"] if n in arms]
    L: List[str] = []
    L.append("# Admission under SWA-pool pressure (real SGLang server, CPU, tiny model)\n")
    L.append(f"Generated by `benchmarks/admission.py` on {result['date']} (HEAD "
             f"{result.get('git_head') or '?'}); "
             f"{result['repeats']} repeat(s), total runtime {result['runtime_s'] / 60:.1f} min "
             f"({'--quick' if result['quick'] else 'full'} workload).\n")
    L.append("Command:\n\n```\n" + result["command"] + "\n```\n")
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
    L.append("## Results\n")
    L.append(
        "Numbers are means over repeats; [min–max] where repeats differ. Max running is the max over "
        "repeats of the per-step `#running-req` (decode log lines) and `/metrics` samples; "
        "mean running is time-weighted over the `sglang:num_running_reqs` samples; "
        "'steps at cap' is the share of decode steps with the cap running. Ratios are to "
        f"`{BASELINE_ARM}` of the same repeat. Wall-clock figures (tok/s, latency) depend on what "
        "else runs on the 2 shared cores; 'tok/CPU-s' (output tokens per CPU second of the server "
        "process tree) and the work counts (decode steps, prefill tokens) do not, or much less.\n")
    if "no_reuse" in workloads:
        _no_reuse_table(L, arms, names)
    if "agent" in workloads:
        _agent_table(L, arms, names, with_no_reuse="no_reuse" in workloads)
    L.append("## Expected outcomes, as measured\n")
    for c in result["acceptance"]:
        mark = {True: "PASS", False: "FAIL", None: "n/a"}[c["pass"]]
        L.append(f"* **{mark}** {c['check']}: {c['detail']}")
    L.append("")
    L.append(f"Plot: `{pathlib.Path(result['png']).name}` (running requests over time per arm).\n")
    rt = result.get("arm_runtimes_s", {})
    if rt:
        L.append("Per-arm wall time (boot + workloads, s): " + ", ".join(
            f"`{k}` {v}" for k, v in rt.items()) + ".\n")
    return "\n".join(L) + "\n"


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


def _agent_table(L: List[str], arms: Dict[str, Any], names: List[str], with_no_reuse: bool) -> None:
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
        "LRU-evicted = `sglang:evicted_tokens_total` (pressure-driven `evict()`: full + SWA slots "
        "summed by sglang; there is no SWA-only counter); eager-freed = "
        "`sglang:swa_freed_at_commit_tokens` (SWA slots islands free at commit, islands only)."
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
        "upstream_knobs_floor": "#8c564b",
    }
    styles = {"upstream_knobs_0.10": "--", "islands_0.10": "--", "islands_floor": ":",
              "upstream_knobs_floor": ":"}
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


# ----------------------------------------------------------------------------- CLI


def parse_args(argv=None):
    ap = argparse.ArgumentParser(
        prog="benchmarks/admission.py",
        description=(
            "Admission under SWA-pool pressure on the real SGLang server (CPU, tiny hybrid-SWA "
            "model, window 32, chunk 512, page 1, cap 16). Boots one server per arm and repeat, "
            "runs a no-reuse workload (random ~2k-token prompts at 2x the cap) and a multi-turn "
            "agent workload, and reports running requests, retractions, pool usage, throughput, "
            "latency and cache hit rates. Pools are the production pools at ratios 0.32/0.17/0.10 "
            "scaled by the planner (run --plan-only to see the mapping)."),
        epilog=(
            "examples:\n"
            "  .venv/bin/python benchmarks/admission.py --plan-only\n"
            "  .venv/bin/python benchmarks/admission.py --quick\n"
            "  .venv/bin/python benchmarks/admission.py --repeats 2\n"
            "  .venv/bin/python benchmarks/admission.py --arms upstream_0.17,islands_0.17,islands_floor\n"
            "  .venv/bin/python benchmarks/admission.py --from-runs .work/admission/STAMP   # re-render\n"
            f"arms: {', '.join(ARMS)}"),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    d = WorkloadConfig()
    ap.add_argument("--quick", action="store_true",
                    help="smaller workload (32 requests of 96-192 output tokens; 8 conversations x "
                         "3 turns): about 10 minutes on a quiet 2-core machine")
    ap.add_argument("--repeats", type=int, default=1, help="boots per arm; arms interleaved (default 1)")
    ap.add_argument("--arms", default=None,
                    help=f"comma list of arms (default: {','.join(DEFAULT_ARMS)}; with --quick "
                         "without upstream_knobs_0.10)")
    ap.add_argument("--workloads", default="no_reuse,agent",
                    help="comma list: no_reuse, agent (default both, one boot per arm)")
    ap.add_argument("--requests", type=int, help=f"no_reuse requests (default {d.requests})")
    ap.add_argument("--clients", type=int, help=f"no_reuse concurrent clients (default {d.clients})")
    ap.add_argument("--out-min", type=int, help=f"no_reuse min output tokens (default {d.out_min})")
    ap.add_argument("--out-max", type=int, help=f"no_reuse max output tokens (default {d.out_max})")
    ap.add_argument("--convs", type=int, help=f"agent conversations in parallel (default {d.convs})")
    ap.add_argument("--turns", type=int, help=f"agent turns per conversation (default {d.turns})")
    ap.add_argument("--reply-min", type=int, help=f"agent min reply tokens (default {d.reply_min})")
    ap.add_argument("--reply-max", type=int, help=f"agent max reply tokens (default {d.reply_max})")
    ap.add_argument("--agent-mode", choices=("after_finish", "while_running"), default=None,
                    help="after_finish (default): a turn is sent when the previous one finished; "
                         "while_running: as soon as the previous one has streamed its reply, "
                         "which keeps generating --run-on more tokens (replies longer than the "
                         "decode-island interval cp/4 = 128 show what decode islands add)")
    ap.add_argument("--run-on", type=int, help=f"while_running: tokens a turn generates after "
                                               f"its reply (default {d.run_on})")
    ap.add_argument("--seed", type=int, default=d.seed, help="workload seed")
    ap.add_argument("--eviction-interval", type=int, default=None,
                    help="SGLANG_SWA_EVICTION_INTERVAL for every arm (default: the planner's scaled "
                         "decode tail, 34; 0 keeps sglang's 128)")
    ap.add_argument("--sample-interval", type=float, default=0.25, help="/metrics sampling period, s")
    ap.add_argument("--omp-threads", type=int, default=2, help="OMP threads of each server")
    ap.add_argument("--boot-timeout", type=float, default=600.0, help="server boot timeout, s")
    ap.add_argument("--request-timeout", type=float, default=3600.0, help="per request timeout, s")
    ap.add_argument("--json", default=str(RESULTS / "admission.json"), help="result JSON path")
    ap.add_argument("--md", default=str(RESULTS / "admission.md"), help="markdown report path")
    ap.add_argument("--png", default=str(RESULTS / "admission_running.png"), help="plot path")
    ap.add_argument("--log-dir", default=str(ROOT / ".work" / "admission"),
                    help="server logs and raw per-run JSON (not committed)")
    ap.add_argument("--plan-only", action="store_true", help="print the pool mapping and exit")
    ap.add_argument("--from-runs", metavar="DIR", default=None,
                    help="no server: rebuild the JSON, markdown and plot from the raw per-run files "
                         "of an earlier run (a --log-dir/STAMP directory)")
    a = ap.parse_args(argv)
    if a.arms is None:
        a.arms = ",".join(QUICK_ARMS if a.quick else DEFAULT_ARMS)
    unknown = [n for n in a.arms.split(",") if n and n not in ARMS]
    if unknown:
        ap.error(f"unknown arm(s) {unknown}; choose from {list(ARMS)}")
    bad = [w for w in a.workloads.split(",") if w not in ("no_reuse", "agent")]
    if bad:
        ap.error(f"unknown workload(s) {bad}")
    if a.repeats < 1:
        ap.error("--repeats must be >= 1")
    return a


def workload_from_args(a) -> WorkloadConfig:
    kw = dict(QUICK) if a.quick else {}
    for k in ("requests", "clients", "out_min", "out_max", "convs", "turns", "reply_min",
              "reply_max", "agent_mode", "run_on"):
        v = getattr(a, k)
        if v is not None:
            kw[k] = v
    kw["seed"] = a.seed
    cfg = WorkloadConfig(**kw)
    if cfg.out_min > cfg.out_max or cfg.in_min > cfg.in_max or cfg.reply_min > cfg.reply_max:
        raise SystemExit("min > max in the workload lengths")
    if agent_max_context(cfg) + 8 > 4096:
        raise SystemExit("agent transcripts would exceed the tiny model's 4096-token context")
    return cfg


def _git_head() -> Optional[str]:
    import subprocess

    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True, timeout=30).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def main(argv=None) -> int:
    a = parse_args(argv)
    mapping = plan_mapping()
    if a.eviction_interval is None:
        a.eviction_interval = mapping["cpu"]["eviction_interval"]
    if a.plan_only:
        print(json.dumps(mapping, indent=1))
        return 0
    command = " ".join(shlex.quote(x) for x in [".venv/bin/python", "benchmarks/admission.py",
                                                 *(sys.argv[1:] if argv is None else argv)])
    if a.from_runs:
        return rebuild(pathlib.Path(a.from_runs), a, mapping)
    cfg = workload_from_args(a)
    arm_names = [n for n in a.arms.split(",") if n]
    workloads = [w for w in a.workloads.split(",") if w]
    stamp = time.strftime("%Y%m%d-%H%M%S")
    log_dir = pathlib.Path(a.log_dir) / stamp
    log_dir.mkdir(parents=True, exist_ok=True)
    meta = {"command": command, "date": time.strftime("%Y-%m-%d %H:%M"), "git_head": _git_head(),
            "quick": a.quick, "repeats": a.repeats, "eviction_interval": a.eviction_interval,
            "workload": dataclasses.asdict(cfg), "workloads": workloads, "arm_order": arm_names}
    (log_dir / "meta.json").write_text(json.dumps(meta, indent=1))
    log(f"{len(arm_names)} arms x {a.repeats} repeat(s), workloads {workloads}; logs in {log_dir}")
    for n in arm_names:
        arm = ARMS[n]
        if arm.pool_key:
            p = mapping["pools"][arm.pool_key]
            log(f"  {n}: SWA pool {p['swa_pool']} (ratio {p['server_ratio']}, {arm.pool_key}-eq; "
                f"predicted bind without islands {p['bind_without_islands']})")
        else:
            log(f"  {n}: SWA pool sized by the server (chunk-cache configurator)")

    from islands_harness.tiny_model import build_tiny_model

    model_dir = build_tiny_model(window=CpuShape().window)
    t_start = time.monotonic()
    runs: List[Dict[str, Any]] = []
    for rep in range(a.repeats):
        order = arm_names if rep % 2 == 0 else list(reversed(arm_names))
        for n in order:
            r = run_arm(ARMS[n], rep, mapping, cfg, a, model_dir, log_dir, workloads)
            runs.append(r)
            (log_dir / f"{n}_r{rep}.json").write_text(json.dumps(r, indent=1))
            log(f"[{n} r{rep}] done in {r['arm_s']:.0f} s; {time.monotonic() - t_start:.0f} s elapsed")
    meta["runtime_s"] = round(time.monotonic() - t_start, 1)
    (log_dir / "meta.json").write_text(json.dumps(meta, indent=1))
    return write_outputs(runs, meta, mapping, a)


def rebuild(run_dir: pathlib.Path, a, mapping: Dict[str, Any]) -> int:
    """Re-aggregate the raw per-run files of an earlier run (no server)."""
    files = sorted(run_dir.glob("*_r*.json"))
    if not files:
        raise SystemExit(f"no per-run files (<arm>_r<k>.json) in {run_dir}")
    runs = [json.loads(f.read_text()) for f in files]
    meta_path = run_dir / "meta.json"
    if meta_path.exists():
        meta = json.loads(meta_path.read_text())
    else:  # a run from before meta.json existed: the workload comes from this command line
        cfg = workload_from_args(a)
        meta = {"command": "(not recorded)", "date": time.strftime(
                    "%Y-%m-%d %H:%M", time.localtime(files[0].stat().st_mtime)),
                "git_head": None, "quick": a.quick, "repeats": max(r["repeat"] for r in runs) + 1,
                "eviction_interval": a.eviction_interval, "workload": dataclasses.asdict(cfg),
                "workloads": [w for w in ("no_reuse", "agent") if any(w in r for r in runs)],
                "arm_order": [n for n in ARMS if any(r["arm"] == n for r in runs)]}
    if "runtime_s" not in meta:
        meta["runtime_s"] = round(sum(r.get("arm_s", 0) for r in runs), 1)
    meta["arm_order"] = [n for n in meta["arm_order"] if any(r["arm"] == n for r in runs)]
    log(f"rebuilding from {len(runs)} runs in {run_dir}")
    return write_outputs(runs, meta, mapping, a)


def write_outputs(runs: List[Dict[str, Any]], meta: Dict[str, Any], mapping: Dict[str, Any], a) -> int:
    cap = CpuShape().cap
    arms = aggregate(runs, mapping, cap)
    result = {
        "cap": cap,
        **{k: meta.get(k) for k in ("command", "date", "git_head", "quick", "repeats", "runtime_s",
                                    "eviction_interval", "workload", "workloads", "arm_order")},
        "arm_runtimes_s": {f"{r['arm']} r{r['repeat']}": r["arm_s"] for r in runs},
        "baseline_arm": BASELINE_ARM,
        "mapping": mapping,
        "png": a.png,
        "arms": arms,
    }
    result["acceptance"] = acceptance(arms, cap, result.get("workloads") or ("no_reuse", "agent"))
    result["runs"] = [dict(r) for r in runs]
    for r in result["runs"]:  # keep the committed JSON readable: no raw series / per-step lists
        for phase in ("no_reuse", "agent"):
            if phase in r:
                r[phase] = {k: v for k, v in r[phase].items()
                            if k not in ("series", "step_running", "requests")}
    validate_result(result)
    pathlib.Path(a.json).parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path(a.json).write_text(json.dumps(result, indent=1) + "\n")
    pathlib.Path(a.md).write_text(to_markdown(result))
    plot_running(result, runs, pathlib.Path(a.png))
    log(f"wrote {a.json}, {a.md}, {a.png}; runtime {result['runtime_s'] / 60:.1f} min")
    print(to_markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
