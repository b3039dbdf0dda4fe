"""The `main` comparison arm: stock upstream main (sglang 0.5.23) in `.venv-main`, default
settings, no patch of ours (only the harness-only `patches-main/` series, the torch_native SWA-read
fix without which the CPU server crashes). Built by `scripts/setup_main.sh`."""

from __future__ import annotations

import pathlib

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
MAIN_VERSION = "0.5.23"
MAIN_PYTHON = REPO_ROOT / ".venv-main" / "bin" / "python"


def main_python() -> str:
    """The interpreter of `.venv-main`; a clear error when it was never built."""
    if not MAIN_PYTHON.exists():
        raise SystemExit(f"the 'main' arm needs sglang {MAIN_VERSION} in {MAIN_PYTHON.parent.parent}"
                         ": build it with scripts/setup_main.sh")
    return str(MAIN_PYTHON)
