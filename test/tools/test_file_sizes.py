"""No tracked file outside ``benchmarks/results/`` is over ``MAX_LINES`` lines (issue 51): a file
that long holds more than one job for a reviewer, so it is split along a seam (a module per job),
not cut at a line. Results are what runs wrote and are left as they are; binary files do not
count."""

import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
MAX_LINES = 650
EXEMPT = ("benchmarks/results/",)


def tracked_files():
    r = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True)
    if r.returncode != 0:
        pytest.skip("not a git checkout: no list of tracked files")
    return [p for p in r.stdout.decode().split("\0") if p and not p.startswith(EXEMPT)]


def line_count(path: pathlib.Path):
    """Lines of a text file as ``wc -l`` counts them, or None for a binary file (a NUL byte)."""
    data = path.read_bytes()
    if b"\0" in data[:8192]:
        return None
    return data.count(b"\n")


def test_no_tracked_file_outside_the_results_is_over_650_lines():
    files = tracked_files()
    assert "README.md" in files
    over = {}
    for rel in files:
        path = ROOT / rel
        if not path.is_file():  # deleted in the working tree, not yet in the index
            continue
        n = line_count(path)
        if n is not None and n > MAX_LINES:
            over[rel] = n
    assert not over, (
        f"over {MAX_LINES} lines (split each along a seam, a module per job): "
        + ", ".join(f"{rel} ({n})" for rel, n in sorted(over.items(), key=lambda kv: -kv[1])))


def test_the_count_is_wc_l_and_binary_files_do_not_count(tmp_path):
    text = tmp_path / "a.py"
    text.write_text("x = 1\n" * (MAX_LINES + 1))
    assert line_count(text) == MAX_LINES + 1
    blob = tmp_path / "b.png"
    blob.write_bytes(b"\x89PNG\0" + b"\n" * 1000)
    assert line_count(blob) is None


def test_the_readme_is_at_most_150_lines():
    """The front page stays readable (issue 59): the tables live in docs/HEADLINES.md."""
    n = line_count(ROOT / "README.md")
    assert n <= 150, f"README.md has {n} lines"
