"""The decode-reuse benchmark's shape and arms: the server arguments every arm shares, what each
arm adds (flags, environment, the interpreter it boots) and the workload's shape."""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time

import _bench_path  # noqa: F401  (the repository root and benchmarks/ on sys.path)
from islands_harness.knobs import UPSTREAM_KNOBS_ENV
from islands_harness.main_arm import (
    MAIN_FREE_OFF_ENV,
    MAIN_KNOBS_ENV,
    MAIN_RELEASE_PREFILL_ENV,
    main_islands_python,
    main_python,
)

WINDOW = 32
PAGE = 1
CHUNK = 512
SERVER_ARGS = [
    "--page-size", str(PAGE),
    "--chunked-prefill-size", str(CHUNK),
    "--max-total-tokens", "65536",
    "--swa-full-tokens-ratio", "0.25",
    "--max-running-requests", "16",
    "--enable-metrics",
    "--decode-log-interval", "1",
]
ARMS = {"upstream": [], "upstream_knobs": [], "islands": ["--enable-swa-islands"], "main": [],
        "main_knobs": [], "main_free_off": [], "main_release_prefill": [],
        "main_islands": ["--enable-swa-islands"]}
"""``main``: stock sglang 0.5.23 in `.venv-main` (``islands_harness.main_arm``), default settings;
``main_knobs`` / ``main_free_off`` / ``main_release_prefill``: the same with main's knobs
(``ARM_ENV``); ``main_islands``: `.venv-main-islands` with ``--enable-swa-islands``. Each runs
when named in --arms."""
ARM_ENV = {"upstream_knobs": UPSTREAM_KNOBS_ENV, "main_knobs": MAIN_KNOBS_ENV,
           "main_free_off": MAIN_FREE_OFF_ENV, "main_release_prefill": MAIN_RELEASE_PREFILL_ENV}
MAIN_ARMS = ("main", "main_knobs", "main_free_off", "main_release_prefill")
"""Arms booted from `.venv-main` (stock 0.5.23)."""
ISLAND_ARMS = ("islands", "main_islands")
"""Arms that lay decode islands (expected follow-up hit k * interval)."""


def arm_python(arm: str):
    """The interpreter ``arm`` boots: None (this `.venv`, 0.5.15.post1), `.venv-main` or
    `.venv-main-islands` (a clear error when that environment was never built)."""
    if arm == "main_islands":
        return main_islands_python()
    return main_python() if arm in MAIN_ARMS else None


def arm_target(arm: str) -> str:
    """The sglang release ``arm`` boots: 0.5.23 for the main arms, else 0.5.15.post1."""
    return "0.5.23" if arm in MAIN_ARMS or arm == "main_islands" else "0.5.15.post1"
# The upstream baseline measured on this model and shape (prompt 2000, 300 tokens per turn,
# 50 user tokens; /work/shared/reference/cpu-spike/baseline, multiturn): cached / prompt tokens.
BASELINE = {
    "follow_up_cached_at_150_generated": [2000, 2150],
    "follow_up_cached_after_finish": [2149, 2150],
    "conversation_after_finish_turns_2_3": [[2300, 2350], [2650, 2700]],
}

T0 = time.monotonic()


def progress(msg: str) -> None:
    print(f"[decode_reuse {time.monotonic() - T0:7.1f}s] {msg}", file=sys.stderr, flush=True)


@dataclasses.dataclass
class Shape:
    prompt_len: int
    k: int
    delta: int
    turns: int
    gen: int
    user: int
    run_on: int
    agents: int
    agent_prompt: tuple[int, int]
    agent_gen: tuple[int, int]
    agent_tool: tuple[int, int]
    modes: tuple[str, ...]
    seed: int
    interval: int = CHUNK // 4
    abort_previous: bool = True


def quick_shape(seed: int) -> Shape:
    return Shape(prompt_len=1000, k=1, delta=8, turns=2, gen=160, user=50, run_on=512, agents=2,
                 agent_prompt=(800, 1200), agent_gen=(140, 180), agent_tool=(30, 80),
                 modes=("while_running",), seed=seed)


def full_shape(a: argparse.Namespace) -> Shape:
    return Shape(prompt_len=a.prompt_len, k=a.k, delta=a.delta, turns=a.turns, gen=a.gen,
                 user=a.user, run_on=a.run_on, agents=a.agents,
                 agent_prompt=tuple(a.agent_prompt), agent_gen=tuple(a.agent_gen),
                 agent_tool=tuple(a.agent_tool), modes=tuple(a.modes.split(",")), seed=a.seed,
                 abort_previous=a.abort_previous)
