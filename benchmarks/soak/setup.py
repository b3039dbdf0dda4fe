"""The soak's server and configuration: pools small enough that decode retracts, the allocator's
debug checks on, the target release and its interpreter."""

from __future__ import annotations

import dataclasses
import json
import pathlib
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
    speculative: str = "none"  # main only: "ngram" or "mtp" (islands_harness.speculative)
    model: str = "laguna"  # MODELS: "gemma4" on main only
    boot_timeout_s: float = 900.0


TARGETS = ("0.5.15", "main")
TARGET_VERSION = {"0.5.15": "0.5.15.post1", "main": "0.5.23"}
MODELS = ("laguna", "gemma4")
"""The tiny models the soak serves (``islands_harness.models``): Laguna (default, both targets)
and Gemma 4 dense (0.5.23 only; its own drafter makes ``--speculative mtp``)."""


def check_config(cfg: SoakConfig) -> None:
    """Refuse (SystemExit, naming what is needed) a combination the soak cannot run."""
    if cfg.model not in MODELS:
        raise SystemExit(f"--model must be one of {', '.join(MODELS)}, got {cfg.model!r}")
    if cfg.speculative == "mtp" and (cfg.target != "main" or cfg.model != "gemma4"):
        raise SystemExit("--speculative mtp needs --target main --model gemma4 (Frozen-KV MTP is "
                         "Gemma 4's own drafter, served by sglang 0.5.23)")
    if cfg.model != "laguna" and cfg.target != "main":
        raise SystemExit(f"--model {cfg.model} needs --target main (sglang 0.5.15.post1 does not "
                         "serve it)")
    if cfg.eviction is not None and (cfg.target != "main" or not cfg.islands):
        raise SystemExit("--eviction needs --target main with islands on")
    if cfg.hicache and cfg.target != "main":
        raise SystemExit("--hicache needs --target main (islands with HiCache run on 0.5.23)")
    if cfg.speculative != "none" and cfg.target != "main":
        raise SystemExit("--speculative needs --target main (no drafter runs on 0.5.15.post1's "
                         "CPU harness)")


def model_vocab(model_dir: pathlib.Path) -> tuple[int, int]:
    """``(vocab, real_vocab)`` of a tiny checkpoint: the embedding's rows (ids at or above are
    out of vocabulary: the malformed requests' 400s) and the tokenizer's (prompt ids lie below);
    Gemma 4 keeps the former in its ``text_config``."""
    from islands_harness.models import real_vocab

    cfg = json.loads((model_dir / "config.json").read_text())
    vocab = cfg.get("vocab_size") or cfg["text_config"]["vocab_size"]
    return int(vocab), real_vocab(model_dir)


def server_command(cfg: SoakConfig, assistant_dir: Optional[pathlib.Path] = None
                   ) -> tuple[list[str], Optional[str]]:
    """The soak server's extra arguments and interpreter (None: this one) for ``cfg``;
    ``assistant_dir``: the draft checkpoint of ``--speculative mtp`` (None while only checking
    the combination: the arguments then name no drafter)."""
    check_config(cfg)
    from islands_harness.models import get_model

    args = [*get_model(cfg.model).server_args, *SERVER_ARGS,
            *(["--enable-swa-islands"] if cfg.islands else [])]
    if cfg.eviction is not None:
        args += ["--swa-islands-eviction", cfg.eviction]
    if cfg.hicache:
        args += HICACHE_ARGS
    if cfg.speculative != "none" and (cfg.speculative != "mtp" or assistant_dir is not None):
        from islands_harness.speculative import mode_args

        args += mode_args(cfg.speculative, assistant_dir)
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
