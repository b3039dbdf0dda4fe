"""Where a result came from: the project commit and the island cache a server booted now imports."""

from __future__ import annotations

import hashlib
import importlib.util
import pathlib
import subprocess
from typing import Any, Optional

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent


def _git(*args: str) -> Optional[str]:
    try:
        out = subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True,
                             timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def git_head() -> Optional[str]:
    """The short commit of the checkout, None outside a git checkout."""
    return _git("rev-parse", "--short", "HEAD") or None


ISLAND_MODULE = "sglang/srt/mem_cache/swa_island_radix_cache.py"


def _installed_island_module(python: Optional[str]) -> Optional[pathlib.Path]:
    """The island cache module ``python`` would import (None: this interpreter's), or None when
    that environment has none (stock sglang)."""
    if python is None:
        spec = importlib.util.find_spec("sglang.srt.mem_cache.swa_island_radix_cache")
        return pathlib.Path(spec.origin) if spec is not None and spec.origin else None
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, timeout=60, check=True).stdout.strip()
    path = pathlib.Path(purelib) / ISLAND_MODULE
    return path if path.exists() else None


def code_version(python: Optional[str] = None) -> dict[str, Any]:
    """The project commit, uncommitted changes under the module and patch folders of both
    targets, and a digest of the island cache module a server booted now with ``python`` (None:
    this interpreter) imports; None where that environment has no island module (stock)."""
    try:
        module = _installed_island_module(python)
        digest = (hashlib.sha256(module.read_bytes()).hexdigest()[:16]
                  if module is not None else None)
    except Exception as e:  # noqa: BLE001 - reported in the result instead
        digest = f"<{e!r}>"
    return {"head": git_head(),
            "dirty": (_git("status", "--porcelain", "--", "python", "patches", "python-main",
                           "patches-main") or "").splitlines(),
            "python": python,
            "installed_swa_island_radix_cache_sha256_16": digest}
