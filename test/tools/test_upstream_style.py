"""Our modules for sglang 0.5.23 and their tests in upstream's layout pass upstream's pre-commit
formatters as its `.pre-commit-config.yaml` pins them (issue 59): isort 5.13.2 with upstream's
`.isort.cfg` (profile black, sglang first party), black 24.10.0 and codespell 2.4.1 with its
ignore list. Each check is shown to fail on a file it must reject."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
TARGETS = (
    "python-main",
    "python/sglang/srt/mem_cache/swa_island_formulas.py",
    "python/sglang/srt/mem_cache/swa_island_queue.py",
    "upstream-tests-main",
)
CHECKS = {
    "isort": ["-m", "isort", "--check-only", "--profile", "black", "-p", "sglang"],
    "black": ["-m", "black", "--check"],
    "codespell": ["-m", "codespell_lib", "-L", "cann,thi,makro,wil,rouge,PRIS"],
}
BAD = {
    "isort": "import sys\nimport os\n",
    "black": "x = [1,2]\n",
    "codespell": '"""The recieved tokens."""\n',
}


def _run(check: str, paths) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *CHECKS[check], *map(str, paths)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )


@pytest.mark.parametrize("check", sorted(CHECKS))
def test_our_engine_modules_and_their_tests_pass(check):
    r = _run(check, TARGETS)
    assert r.returncode == 0, f"{check} rejects:\n{r.stdout}{r.stderr}"


@pytest.mark.parametrize("check", sorted(CHECKS))
def test_each_check_rejects_what_it_must(check, tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text(BAD[check])
    r = _run(check, [bad])
    assert r.returncode != 0 and "bad.py" in r.stdout + r.stderr, r.stdout + r.stderr


def _unannotated(source: str) -> list:
    import ast

    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args
            for a in args.posonlyargs + args.args + args.kwonlyargs:
                if a.arg not in ("self", "cls") and a.annotation is None:
                    out.append(f"{node.name}({a.arg})")
            if node.returns is None and node.name != "__init__":
                out.append(f"{node.name} ->")
    return out


def test_every_signature_of_our_engine_modules_is_annotated():
    files = sorted((ROOT / TARGETS[0]).rglob("*.py"))
    files += [ROOT / t for t in TARGETS[1:3]]
    assert len(files) == 7, files
    missing = {
        str(p.relative_to(ROOT)): m for p in files if (m := _unannotated(p.read_text()))
    }
    assert not missing, missing
    assert _unannotated("def f(x, y: int) -> None: ...\n") == ["f(x)"]
