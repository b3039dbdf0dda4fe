"""Test-wide environment: set before anything imports sglang or triton.

- ``SGLANG_USE_CPU_ENGINE=1``: makes ``sglang.srt.utils.is_cpu()`` true, so every custom op takes
  its native path on this CPU-only machine.
- ``TRITON_INTERPRET=1``: the paged allocator (page size > 1) launches Triton kernels even for CPU
  tensors; the interpreter runs them. It must be set before triton is first imported.
- ``SGLANG_DEBUG_MEMORY_POOL=1``: upstream's allocator debug checks, and every island free asserts
  its preconditions (live, page-aligned, listed once: the allocator's ``free_swa_pages``).
"""
import os

os.environ.setdefault("SGLANG_USE_CPU_ENGINE", "1")
os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("OMP_NUM_THREADS", "2")
os.environ.setdefault("SGLANG_DEBUG_MEMORY_POOL", "1")  # island frees assert their preconditions


def pytest_sessionstart(session):
    """Refuse to test a stale engine: our modules under python/sglang must be the installed ones
    (``scripts/patches.py apply`` copies them into the venv; ``scripts/test.sh`` runs it first)."""
    import importlib.util
    import pathlib

    import pytest

    repo = pathlib.Path(__file__).resolve().parent.parent
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.origin:
        return
    site = pathlib.Path(spec.origin).parent
    ours = repo / "python" / "sglang"
    stale = [
        str(src.relative_to(ours))
        for src in sorted(ours.rglob("*.py"))
        if (site / src.relative_to(ours)).read_bytes() != src.read_bytes()
    ] if site.resolve() != ours.resolve() else []
    if stale:
        pytest.exit(
            "installed sglang is stale against python/sglang (" + ", ".join(stale)
            + "): run `.venv/bin/python scripts/patches.py apply`",
            returncode=3,
        )
