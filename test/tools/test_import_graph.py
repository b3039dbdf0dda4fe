"""No import circle among the repository's own modules, on either target (seconds, no import).

The graph is read with ``ast``, not by importing: an edge is every ``import`` / ``from ...
import`` of one of our modules, at module level or inside a function (a function-level import
hides a circle, it does not break it), and so is one under ``if TYPE_CHECKING:`` (it never runs,
but a reader follows it all the same; issue 59). ``from a.b import c`` is an edge to ``a.b.c``
when that is one of our modules, else to ``a.b``. Upstream modules are not nodes: only ours can close a circle we own.

Two graphs, one per target, since both install modules under the same ``sglang.*`` names:
- 0.5.15.post1: ``python/sglang/...`` with the harness, the tools, the benchmarks and the scripts;
- 0.5.23: ``python-main/sglang/...`` with the modules it shares from ``python/`` (``SHARED``).
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Set

import pytest

from islands_tools.patches.main_target import SHARED

REPO = Path(__file__).resolve().parents[2]


def _module_name(path: Path, base: Path) -> str:
    parts = list(path.relative_to(base).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(tree: ast.AST) -> Iterable[ast.stmt]:
    """Every import statement, those under ``if TYPE_CHECKING:`` included: a reviewer reads a
    type-only import back as a circle too (issue 59), so a module names what it needs of another
    with a ``Protocol`` instead."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
            continue
        stack.extend(ast.iter_child_nodes(node))


class Graph:
    """Modules of one target by import name, and the edges between them."""

    def __init__(self):
        self.files: Dict[str, Path] = {}  # module name -> file

    def add(self, files: Iterable[Path], base: Path) -> None:
        for f in files:
            name = _module_name(f, base)
            if name in self.files:
                continue  # a package beside a command of the same name: the package wins
            self.files[name] = f

    def add_script(self, f: Path) -> None:
        """A command run as ``__main__``: it imports, nobody imports it by this name."""
        self.files[f"<{f.relative_to(REPO)}>"] = f

    def _resolve(self, name: str) -> Optional[str]:
        return name if name in self.files else None

    def edges(self, name: str) -> Set[str]:
        path = self.files[name]
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        out: Set[str] = set()
        for node in _imports(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
                bases: List[str] = []
            else:
                if node.level:
                    parts = package.split(".") if package else []
                    parts = parts[: len(parts) - (node.level - 1)] if node.level > 1 else parts
                    base = ".".join(parts + ([node.module] if node.module else []))
                else:
                    base = node.module or ""
                bases = [base]
                targets = [f"{base}.{alias.name}" if base else alias.name for alias in node.names]
            for target in targets:
                hit = self._resolve(target)
                if hit is None and bases:
                    hit = self._resolve(bases[0])
                if hit is not None and hit != name:
                    out.add(hit)
        return out

    def cycles(self) -> List[List[str]]:
        """One circle per strongly connected component with more than one module (Tarjan),
        each written as the path that closes it."""
        graph = {name: sorted(self.edges(name)) for name in self.files}
        index: Dict[str, int] = {}
        low: Dict[str, int] = {}
        on_stack: Set[str] = set()
        stack: List[str] = []
        components: List[List[str]] = []
        counter = [0]

        def strongconnect(v: str) -> None:
            index[v] = low[v] = counter[0]
            counter[0] += 1
            stack.append(v)
            on_stack.add(v)
            for w in graph[v]:
                if w not in index:
                    strongconnect(w)
                    low[v] = min(low[v], low[w])
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    components.append(sorted(comp))

        for v in sorted(graph):
            if v not in index:
                strongconnect(v)
        return [self._circle(comp, graph) for comp in components]

    @staticmethod
    def _circle(comp: List[str], graph: Dict[str, List[str]]) -> List[str]:
        """A path ``a -> ... -> a`` inside the component (breadth first from its first module)."""
        members, start = set(comp), comp[0]
        parent: Dict[str, str] = {}
        frontier = [start]
        while frontier:
            nxt = []
            for v in frontier:
                for w in graph[v]:
                    if w == start:
                        path = [v]
                        while path[-1] != start:
                            path.append(parent[path[-1]])
                        return list(reversed(path)) + [start]
                    if w in members and w not in parent:
                        parent[w] = v
                        nxt.append(w)
            frontier = nxt
        return comp


def _py(root: Path) -> List[Path]:
    return sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)


def graph_0515() -> Graph:
    g = Graph()
    g.add(_py(REPO / "python"), REPO / "python")
    g.add(_py(REPO / "islands_harness"), REPO)
    g.add(_py(REPO / "islands_tools"), REPO)
    bench = REPO / "benchmarks"
    packages = [p for p in _py(bench) if p.parent != bench]
    g.add(packages, bench)
    for f in _py(bench):
        if f.parent == bench:
            if (bench / f.stem).is_dir():
                g.add_script(f)
            else:
                g.add([f], bench)
    for f in _py(REPO / "scripts"):
        g.add_script(f)
    return g


def graph_0523() -> Graph:
    g = Graph()
    g.add(_py(REPO / "python-main"), REPO / "python-main")
    g.add([REPO / "python" / "sglang" / rel for rel in SHARED], REPO / "python")
    return g


def _describe(cycles: List[List[str]]) -> str:
    return "; ".join(" -> ".join(c) for c in cycles)


@pytest.mark.parametrize("target,build", [("0.5.15.post1", graph_0515), ("0.5.23", graph_0523)])
def test_no_import_circle(target, build):
    g = build()
    assert len(g.files) > 3, f"{target}: too few modules found ({sorted(g.files)})"
    cycles = g.cycles()
    assert not cycles, f"{target}: import circles: {_describe(cycles)}"


def _graph_of(tmp_path: Path, files: Dict[str, str]) -> Graph:
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    g = Graph()
    g.add(_py(tmp_path), tmp_path)
    return g


def test_a_function_level_import_closes_a_circle(tmp_path):
    g = _graph_of(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/guard.py": "def check(cache):\n    from pkg.cache import Cache\n    return Cache\n",
        "pkg/cache.py": "from pkg.guard import check\nclass Cache: pass\n",
    })
    assert g.cycles() == [["pkg.cache", "pkg.guard", "pkg.cache"]]


def test_a_type_checking_import_is_an_edge_too(tmp_path):
    g = _graph_of(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/digest.py": ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                          "    from pkg.cache import Cache\nelse:\n    import os\n"),
        "pkg/cache.py": "from pkg.digest import *\n",
    })
    assert g.cycles() == [["pkg.cache", "pkg.digest", "pkg.cache"]]


def test_relative_and_from_package_imports_are_edges(tmp_path):
    g = _graph_of(tmp_path, {
        "pkg/__init__.py": "from . import a\n",
        "pkg/a.py": "from .sub import b\n",
        "pkg/sub/__init__.py": "",
        "pkg/sub/b.py": "from .. import a\n",
    })
    assert g.edges("pkg") == {"pkg.a"}
    assert g.edges("pkg.a") == {"pkg.sub.b"}
    assert g.edges("pkg.sub.b") == {"pkg.a"}
    assert g.cycles() == [["pkg.a", "pkg.sub.b", "pkg.a"]]
