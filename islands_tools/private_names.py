"""Which private names of upstream sglang 0.5.23 our modules for it touch (issue 59).

A private name is one that starts with a single underscore. Upstream may rename it in any
release without a word, so each one our modules touch is a place where the series breaks
silently. ``touches`` lists them, read off the source with ``ast``:

- ``import``: ``from sglang... import _name`` of an upstream module;
- ``override``: a method ``_name`` of our class whose upstream base class (or one of its bases)
  defines ``_name``;
- ``read`` / ``write`` / ``call``: ``obj._name`` where ``_name`` is defined by upstream (a
  method, a class attribute, a ``self._name =`` in a method or a module-level name of the
  modules indexed) and, when ``obj`` is ``self``, by the upstream base classes of our class.

The upstream side is the pristine release wheel (``Upstream``), indexed over ``PACKAGES``.
``docs/PR_MAIN.md`` names each entry with its reason; ``test/tools/test_private_names.py``
checks that the two lists agree.
"""

from __future__ import annotations

import ast
import dataclasses
from typing import Dict, Iterable, List, Mapping, Optional, Set, Tuple

PACKAGES = ("srt/mem_cache/", "srt/managers/", "srt/arg_groups/", "srt/server_args.py")
"""The upstream files indexed: every module our 0.5.23 modules import from, and the classes
they subclass."""

ClassKey = Tuple[str, str]  # (package-relative module path, class name)


def is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


@dataclasses.dataclass(frozen=True, order=True)
class Touch:
    """Our ``module`` touches upstream's ``name`` (``how``: import, override, read, write,
    call); ``owner``: where upstream defines it."""

    module: str
    name: str
    how: str
    owner: str

    def row(self) -> str:
        return f"{self.module} {self.how} {self.name} ({self.owner})"


@dataclasses.dataclass
class _Class:
    names: Set[str]
    bases: List[ast.expr]
    module: str


def _rel(dotted: str) -> List[str]:
    """The package-relative paths ``sglang.a.b`` may be: ``a/b.py`` or ``a/b/__init__.py``."""
    parts = dotted.split(".")[1:]
    return ["/".join(parts) + ".py", "/".join(parts + ["__init__.py"])]


class _Module:
    """One parsed module: its imports (local name -> (module path, name)), classes and
    module-level private names."""

    def __init__(self, rel: str, source: str, exists):
        self.rel, self.tree = rel, ast.parse(source)
        self.imports: Dict[str, Tuple[str, str]] = {}
        self.classes: Dict[str, _Class] = {}
        self.names: Set[str] = set()
        for node in ast.walk(self.tree):
            if (
                isinstance(node, ast.ImportFrom)
                and node.module
                and node.module.startswith("sglang.")
            ):
                target = next(
                    (r for r in _rel(node.module) if exists(r)), _rel(node.module)[0]
                )
                for a in node.names:
                    self.imports[a.asname or a.name] = (target, a.name)
        for node in self.tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                if is_private(node.name):
                    self.names.add(node.name)
            for t in _targets(node):
                if isinstance(t, ast.Name) and is_private(t.id):
                    self.names.add(t.id)
            if isinstance(node, ast.ClassDef):
                self.classes[node.name] = _Class(
                    _class_names(node), list(node.bases), rel
                )


def _targets(node: ast.AST) -> List[ast.expr]:
    if isinstance(node, ast.Assign):
        return list(node.targets)
    if isinstance(node, (ast.AnnAssign, ast.AugAssign)):
        return [node.target]
    return []


def _class_names(cls: ast.ClassDef) -> Set[str]:
    """Private names a class defines: methods, class attributes, ``self._x`` stores."""
    out: Set[str] = set()
    for node in cls.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and is_private(
            node.name
        ):
            out.add(node.name)
        for t in _targets(node):
            if isinstance(t, ast.Name) and is_private(t.id):
                out.add(t.id)
    for node in ast.walk(cls):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.ctx, ast.Store)
            and isinstance(node.value, ast.Name)
            and node.value.id == "self"
            and is_private(node.attr)
        ):
            out.add(node.attr)
    return out


class UpstreamIndex:
    """The private names upstream defines, per class and per module, over ``files``."""

    def __init__(self, files: Mapping[str, str]):
        self.modules = {
            rel: _Module(rel, src, files.__contains__) for rel, src in files.items()
        }
        self.owners: Dict[str, Set[str]] = {}
        for rel, m in self.modules.items():
            for n in m.names:
                self.owners.setdefault(n, set()).add(rel)
            for cname, c in m.classes.items():
                for n in c.names:
                    self.owners.setdefault(n, set()).add(f"{rel}:{cname}")

    def resolve(self, module: _Module, base: ast.expr) -> Optional[ClassKey]:
        """The upstream class a base-class expression of ``module`` names, if indexed."""
        if isinstance(base, ast.Name):
            if base.id in module.classes and module.rel in self.modules:
                return (module.rel, base.id)
            if base.id in module.imports:
                rel, name = module.imports[base.id]
                m = self.modules.get(rel)
                if m is not None:
                    if name in m.classes:
                        return (rel, name)
                    if name in m.imports:  # a re-export
                        return self.resolve(m, ast.Name(id=name))
        return None

    def mro_names(self, module: _Module, bases: Iterable[ast.expr]) -> Dict[str, str]:
        """{private name: owning class} over the upstream classes ``bases`` reach."""
        out: Dict[str, str] = {}
        todo = [(module, b) for b in bases]
        seen: Set[ClassKey] = set()
        while todo:
            mod, b = todo.pop()
            key = self.resolve(mod, b)
            if key is None or key in seen:
                continue
            seen.add(key)
            c = self.modules[key[0]].classes[key[1]]
            for n in c.names:
                out.setdefault(n, f"{key[0]}:{key[1]}")
            todo += [(self.modules[key[0]], bb) for bb in c.bases]
        return out


def _how(node: ast.Attribute, parents: Mapping[ast.AST, ast.AST]) -> str:
    if isinstance(node.ctx, ast.Store):
        return "write"
    p = parents.get(node)
    return "call" if isinstance(p, ast.Call) and p.func is node else "read"


def _is_self(expr: ast.expr) -> bool:
    if isinstance(expr, ast.Name) and expr.id == "self":
        return True
    return (
        isinstance(expr, ast.Call)
        and isinstance(expr.func, ast.Name)
        and expr.func.id == "super"
    )


def touches(ours: Mapping[str, str], upstream: UpstreamIndex) -> List[Touch]:
    """Every private upstream name the modules ``ours`` ({package-relative path: source})
    touch, sorted; each (module, name, how) once."""
    found: Set[Touch] = set()
    for rel, src in ours.items():
        m = _Module(rel, src, lambda r: r in upstream.modules)
        for local, (mod, name) in m.imports.items():
            if mod in upstream.modules and is_private(name) and rel != mod:
                found.add(Touch(rel, name, "import", mod))
        parents = {c: p for p in ast.walk(m.tree) for c in ast.iter_child_nodes(p)}
        scope: Dict[ast.AST, Dict[str, str]] = {}  # node -> its class's upstream names
        for node in ast.walk(m.tree):
            if not isinstance(node, ast.ClassDef):
                continue
            inherited = upstream.mro_names(m, node.bases)
            for child in ast.walk(node):
                scope[child] = inherited
            for f in node.body:
                if (
                    isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                    and f.name in inherited
                ):
                    found.add(Touch(rel, f.name, "override", inherited[f.name]))
        for node in ast.walk(m.tree):
            if not (isinstance(node, ast.Attribute) and is_private(node.attr)):
                continue
            if _is_self(node.value):
                owner = scope.get(node, {}).get(node.attr)
            else:
                owners = upstream.owners.get(node.attr)
                owner = ", ".join(sorted(owners)) if owners else None
            if owner is not None:
                found.add(Touch(rel, node.attr, _how(node, parents), owner))
    return sorted(found)


def upstream_files(upstream, packages: Iterable[str] = PACKAGES) -> Dict[str, str]:
    """{package-relative path: source} of the pristine wheel's modules under ``packages``."""
    pk = tuple(packages)
    return {
        rel: upstream.read(rel).decode()
        for rel in upstream.files()
        if rel.endswith(".py") and rel.startswith(pk)
    }
