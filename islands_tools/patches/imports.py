"""Static checks of one commit of an exported series (``export``, and the test that
applies the export to a pristine checkout): every Python file the commit adds or changes
compiles, and every ``sglang`` import in it names a module of that commit's tree and, for
``from M import x``, a name M defines at top level (or a submodule M.x). No code is imported.

Upstream packages live at ``python/sglang/...``; files elsewhere (tests) are checked too, with
their ``sglang`` imports resolved against ``python/``."""
from __future__ import annotations

import ast
import subprocess
from pathlib import Path
from typing import Dict, List, Optional, Set

PACKAGE_ROOT = "python/"


class TreeView:
    """Paths and file contents of one commit, read through one `git cat-file --batch`."""

    def __init__(self, repo: Path, commit: str, env: Optional[Dict[str, str]] = None):
        self.repo, self.commit, self.env = repo, commit, env
        out = subprocess.run(
            ["git", "ls-tree", "-r", "--full-tree", commit], cwd=repo, env=env,
            capture_output=True, text=True, check=True,
        ).stdout
        self.blobs: Dict[str, str] = {}
        for line in out.splitlines():
            meta, path = line.split("\t", 1)
            self.blobs[path] = meta.split()[2]
        self.dirs: Set[str] = {p.rsplit("/", 1)[0] for p in self.blobs if "/" in p}
        for d in list(self.dirs):
            while "/" in d:
                d = d.rsplit("/", 1)[0]
                self.dirs.add(d)
        self._cat = subprocess.Popen(
            ["git", "cat-file", "--batch"], cwd=repo, env=env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        )

    def read(self, path: str) -> bytes:
        self._cat.stdin.write(self.blobs[path].encode() + b"\n")
        self._cat.stdin.flush()
        header = self._cat.stdout.readline().split()
        data = self._cat.stdout.read(int(header[2]))
        self._cat.stdout.read(1)  # the newline after the contents
        return data

    def close(self) -> None:
        self._cat.stdin.close()
        self._cat.wait()

    def changed(self) -> List[str]:
        """Files the commit adds or modifies (against its first parent)."""
        out = subprocess.run(
            ["git", "diff-tree", "--root", "--no-commit-id", "-r", "--name-only",
             "--diff-filter=AM", self.commit],
            cwd=self.repo, env=self.env, capture_output=True, text=True, check=True,
        ).stdout
        return out.split()


_BLOB_NAMES: Dict[str, Optional[Set[str]]] = {}  # blob id -> top-level names (None: any name)


def top_level_names(tree: ast.Module) -> Optional[Set[str]]:
    """Names a module defines at import time; None where it cannot be known statically
    (``from x import *``, a module ``__getattr__``)."""
    names: Set[str] = set()
    todo = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if node.name == "__getattr__":
                return None
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                names |= {n.id for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for a in node.names:
                if a.name == "*":
                    return None
                names.add(a.asname or a.name.split(".")[0])
        elif isinstance(node, (ast.If, ast.Try, ast.With, ast.For, ast.While)):
            for field in ("body", "orelse", "finalbody"):
                todo += getattr(node, field, [])
            for h in getattr(node, "handlers", []):
                todo += h.body
    return names


def module_file(view: TreeView, dotted: str) -> Optional[str]:
    """The file of module ``dotted`` in the tree; '' for a namespace package; None: absent."""
    base = PACKAGE_ROOT + dotted.replace(".", "/")
    for cand in (base + ".py", base + "/__init__.py"):
        if cand in view.blobs:
            return cand
    return "" if base in view.dirs else None


def _names_of(view: TreeView, path: str) -> Optional[Set[str]]:
    blob = view.blobs[path]
    if blob not in _BLOB_NAMES:
        try:
            _BLOB_NAMES[blob] = top_level_names(ast.parse(view.read(path)))
        except SyntaxError:
            _BLOB_NAMES[blob] = None  # reported where it is a changed file
    return _BLOB_NAMES[blob]


def _absolute(node: ast.ImportFrom, path: str) -> Optional[str]:
    if not node.level:
        return node.module
    if not path.startswith(PACKAGE_ROOT):
        return None
    parts = path[len(PACKAGE_ROOT):].split("/")[:-1]
    if node.level > 1:
        parts = parts[: len(parts) - (node.level - 1)]
    return ".".join(parts + ([node.module] if node.module else []))


def import_problems(view: TreeView, path: str, tree: ast.Module) -> List[str]:
    problems = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            wanted = [(a.name, None) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            mod = _absolute(node, path)
            wanted = [(mod, [a.name for a in node.names])] if mod else []
        else:
            continue
        for mod, names in wanted:
            if mod != "sglang" and not mod.startswith("sglang."):
                continue
            where = f"{path}:{node.lineno}"
            file = module_file(view, mod)
            if file is None:
                problems.append(f"{where}: imports {mod}, which this commit does not have")
                continue
            defined = _names_of(view, file) if file else None
            for name in names or []:
                if name == "*" or module_file(view, f"{mod}.{name}") is not None:
                    continue
                if defined is not None and name not in defined:
                    problems.append(f"{where}: imports {name} from {mod}, which does not define it")
    return problems


def check_commit(repo: Path, commit: str, env: Optional[Dict[str, str]] = None) -> List[str]:
    """Problems of ``commit``: a changed .py file that does not compile, or one of its sglang
    imports that this commit's tree cannot satisfy. Empty when all is well."""
    view = TreeView(repo, commit, env)
    try:
        problems = []
        for path in view.changed():
            if not path.endswith(".py"):
                continue
            src = view.read(path)
            try:
                compile(src, path, "exec", dont_inherit=True)
                tree = ast.parse(src, path)
            except SyntaxError as e:
                problems.append(f"{path}:{e.lineno}: does not compile: {e.msg}")
                continue
            problems += import_problems(view, path, tree)
        return problems
    finally:
        view.close()
