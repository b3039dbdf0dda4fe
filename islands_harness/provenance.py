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


def code_version() -> dict[str, Any]:
    """The project commit, uncommitted changes under python/ and patches/, and a digest of the
    installed island cache module (what a server booted now imports)."""
    try:
        spec = importlib.util.find_spec("sglang.srt.mem_cache.swa_island_radix_cache")
        digest = hashlib.sha256(pathlib.Path(spec.origin).read_bytes()).hexdigest()[:16]
    except Exception as e:  # noqa: BLE001 - reported in the result instead
        digest = f"<{e!r}>"
    return {"head": git_head(),
            "dirty": (_git("status", "--porcelain", "--", "python", "patches") or "").splitlines(),
            "installed_swa_island_radix_cache_sha256_16": digest}
