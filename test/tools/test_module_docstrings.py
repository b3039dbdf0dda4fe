"""Our engine modules open with a short docstring (issue 51): what the module owns, its invariant,
its units, at most 20 lines; the design prose lives in docs/DESIGN.md (0.5.15.post1, python/) and
docs/MAIN_DESIGN.md (0.5.23, python-main/). Read with ``ast``, nothing imported."""

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MAX_LINES = 20
MODULES = sorted(p for root in ("python", "python-main") for p in (REPO / root).rglob("*.py")
                 if "__pycache__" not in p.parts)


def module_docstring(path: Path) -> str:
    """The module's docstring: the first string statement at the top that is not the license
    (0.5.15.post1's modules put upstream's license string after ``from __future__``)."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            continue
        if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)):
            break
        if "Licensed under the Apache License" not in node.value.value:
            return node.value.value.strip()
    return ""


def test_the_engine_modules_are_found():
    names = {p.name for p in MODULES}
    assert {"swa_island_radix_cache.py", "swa_island_guard.py", "swa_island.py"} <= names


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(REPO)))
def test_module_docstring_is_at_most_20_lines(path):
    doc = module_docstring(path)
    assert doc, f"{path.relative_to(REPO)}: no module docstring"
    n = len(doc.splitlines())
    assert n <= MAX_LINES, (f"{path.relative_to(REPO)}: module docstring of {n} lines (at most "
                            f"{MAX_LINES}; the design goes to docs/DESIGN.md or docs/MAIN_DESIGN.md)")
