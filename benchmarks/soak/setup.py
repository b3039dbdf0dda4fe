"""The soak's server and configuration: pools small enough that decode retracts, the allocator's
debug checks on, the target release and its interpreter."""

from __future__ import annotations

import dataclasses
import re
from typing import Optional

WINDOW = 32
FULL_POOL = 2400
SWA_RATIO = 0.2
MAX_RUNNING = 8
CONTEXT = 4096
SERVER_ARGS = [
    "--page-size", "1", "--chunked-prefill-size", "128", "--max-running-requests",
    str(MAX_RUNNING), "--max-total-tokens", str(FULL_POOL), "--swa-full-tokens-ratio",
    str(SWA_RATIO), "--enable-metrics", "--decode-log-interval", "1", "--sleep-on-idle",
]
SERVER_ENV = {
    "SGLANG_DEBUG_MEMORY_POOL": "1",
    "SGLANG_INIT_NEW_TOKEN_RATIO": "0.05",
    "SGLANG_REQUEST_STATE_WAIT_TIMEOUT": "1",
}
HICACHE_ARGS = ["--enable-hierarchical-cache", "--hicache-io-backend", "direct"]
"""HiCache's host tier (twice the device pools, write_through): the small device pool evicts
what the traffic returns to, so its hits load back from the host."""
LOAD_BACK = "sglang:load_back_tokens_total"
HOST_USED = "sglang:hicache_host_used_tokens"
RETRACTED = "sglang:num_retracted_requests_total"
REQUEST_TIMEOUT_S = 900
TRACEBACK = re.compile(r"^Traceback \(most recent call last\)", re.M)


@dataclasses.dataclass
class SoakConfig:
    minutes: float = 30.0
    idle_every_s: float = 120.0
    clients: int = 12
    seed: int = 0
    islands: bool = True
    target: str = "0.5.15"
    eviction: Optional[str] = None  # main only: --swa-islands-eviction
    hicache: bool = False  # main only: HiCache's host tier (HICACHE_ARGS)
    held_copies: int = 0  # with hicache: polls each transfer stays pending (0: done at once)
    speculative: str = "none"  # main only: "ngram", islands_harness.speculative.ngram_args()
    boot_timeout_s: float = 900.0


TARGETS = ("0.5.15", "main")
TARGET_VERSION = {"0.5.15": "0.5.15.post1", "main": "0.5.23"}


def server_command(cfg: SoakConfig) -> tuple[list[str], Optional[str]]:
    """The soak server's extra arguments and interpreter (None: this one) for ``cfg``."""
    args = list(SERVER_ARGS) + (["--enable-swa-islands"] if cfg.islands else [])
    if cfg.eviction is not None:
        if cfg.target != "main" or not cfg.islands:
            raise SystemExit("--eviction needs --target main with islands on")
        args += ["--swa-islands-eviction", cfg.eviction]
    if cfg.hicache:
        if cfg.target != "main":
            raise SystemExit("--hicache needs --target main (islands with HiCache run on 0.5.23)")
        args += HICACHE_ARGS
    if cfg.speculative != "none":
        if cfg.target != "main":
            raise SystemExit("--speculative needs --target main (no drafter runs on "
                             "0.5.15.post1's CPU harness)")
        from islands_harness.speculative import mode_args

        args += mode_args(cfg.speculative)
    if cfg.target == "0.5.15":
        return args, None
    from islands_harness.main_arm import main_islands_python, main_python

    return args, main_islands_python() if cfg.islands else main_python()


def server_env(cfg: SoakConfig) -> dict[str, str]:
    """The soak server's environment: with the host tier and ``cfg.held_copies`` polls, each
    transfer held pending that long (``patches-main/0012``'s test knob)."""
    if not (cfg.hicache and cfg.held_copies > 0):
        return dict(SERVER_ENV)
    from islands_harness.main_arm import HICACHE_COPY_DELAY_KNOB

    return {**SERVER_ENV, HICACHE_COPY_DELAY_KNOB: str(cfg.held_copies)}


QUICK = dict(minutes=1.5, idle_every_s=30.0)
