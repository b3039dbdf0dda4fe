"""Equality gate, setup: paths, the progress log, what both boots are given (server arguments and
environment, identical but for ``--enable-swa-islands``), the model's identity, and the
fingerprint an islands-off reference must match to stand in for a boot.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import pathlib
import shlex
import time
from typing import Optional

from .workload import Step, workload_hash

ROOT = pathlib.Path(__file__).resolve().parents[2]

SHIM_DIR = ROOT / "test" / "shims" / "wrong_frontier"
# --target main: the 0.5.23 control shim and the environment both boots run in (islands off is
# the same patched 0.5.23 without --enable-swa-islands, as the flag promises stock behaviour)
MAIN_SHIM_DIR = ROOT / "test" / "shims" / "wrong_frontier_main"
MAIN_PYTHON = ROOT / ".venv-main-islands" / "bin" / "python"
TARGETS = ("0.5.15", "main")


def shim_dir(target: str) -> pathlib.Path:
    """The wrong-frontier control shim of ``target``."""
    return MAIN_SHIM_DIR if target == "main" else SHIM_DIR


def server_python(args: argparse.Namespace) -> Optional[str]:
    """The interpreter the boots run: ``--python``, else ``.venv-main-islands``'s for
    ``--target main``, else None (this process's, the pinned ``.venv``)."""
    if getattr(args, "python", None):
        return args.python
    if getattr(args, "target", "0.5.15") == "main":
        return str(MAIN_PYTHON)
    return None
WORK_DIR = ROOT / ".work" / "equality-gate"
DEFAULT_ORACLE_CACHE = WORK_DIR / "oracle-cache.json"

T0 = time.monotonic()


def say(msg: str) -> None:
    """One progress line, stamped with the seconds since the gate started."""
    print(f"[gate {time.monotonic() - T0:6.1f}s] {msg}", flush=True)


def elapsed_s() -> float:
    """Seconds since the gate started."""
    return time.monotonic() - T0


def common_server_args(args: argparse.Namespace, page: int) -> list[str]:
    return [
        "--page-size", str(page),
        "--chunked-prefill-size", str(args.chunk),
        "--swa-islands-decode-interval", str(args.decode_interval),  # unused with islands off
        "--max-total-tokens", str(args.max_total_tokens),
        "--swa-full-tokens-ratio", str(args.swa_ratio),
        "--enable-metrics",
        "--decode-log-interval", "1",  # pool gauges refreshed at every decode step
        "--sleep-on-idle",  # an idle boot must not eat the CPU of the one running its workload
        *shlex.split(args.server_args or ""),
    ]


def common_env(device: str, page: int, page_invariants: bool) -> dict[str, str]:
    env = {
        "SGLANG_ENABLE_STRICT_MEM_CHECK_DURING_BUSY": "1",  # assert the pool invariant each step
        "SGLANG_ENABLE_STRICT_MEM_CHECK_DURING_IDLE": "1",
    }
    if page_invariants:
        # Free lists without duplicates (double free) and no owner page in them (use-after-free),
        # every step: cheap at the default pool size, but its CPU cost is steeply non-linear in it
        # (measured here: +13% scheduler CPU at 32768 full-pool tokens, +480% at 65536).
        env["SGLANG_CHECK_KV_PAGE_INVARIANTS"] = "1"
    if device == "cpu" and page > 1:
        env["TRITON_INTERPRET"] = "1"  # the paged allocator launches Triton kernels on CPU tensors
    if device != "cpu":
        env["SGLANG_USE_CPU_ENGINE"] = "0"  # SglangServer sets it to 1 for its CPU boots
    return env


def model_hash(model_dir: pathlib.Path) -> str:
    """sha256 over the model directory's files (names and contents), in name order."""
    h = hashlib.sha256()
    for f in sorted(model_dir.iterdir()):
        if f.is_file():
            h.update(f.name.encode())
            h.update(hashlib.sha256(f.read_bytes()).digest())
    return h.hexdigest()


def model_window(model_dir: pathlib.Path) -> Optional[int]:
    """The model's sliding window (tokens) from its config.json; None if unreadable."""
    try:
        cfg = json.loads((model_dir / "config.json").read_text())
    except (OSError, ValueError):
        return None
    cfg = cfg.get("text_config", cfg)
    return cfg.get("sliding_window")


def fingerprint(page: int, steps: list[Step], args, mhash: str) -> dict:
    """What an islands-off reference must have been recorded with to stand in for a boot."""
    fp = {"page": page, "device": args.device, "workload": workload_hash(steps),
            "server_args": common_server_args(args, page),
            "env": common_env(args.device, page, args.kv_page_invariants), "model": mhash}
    if getattr(args, "target", "0.5.15") != "0.5.15":  # 0.5.15 references stay valid
        fp["target"] = args.target
    return fp
