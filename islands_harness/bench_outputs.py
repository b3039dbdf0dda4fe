"""Where a benchmark writes its result files: only where its arguments say.

Every benchmark that writes files takes ``--out DIR`` (all its files, under their usual names)
and one option per file (``--json PATH``, ``--md PATH``, ...). Files named by their own option go
there; with ``--out`` the others go into DIR; with neither, every file goes into the run's own
folder under ``.work/`` (never ``benchmarks/results/``, so committed results change only when
someone regenerates them on purpose, e.g. ``--out benchmarks/results``).
"""

from __future__ import annotations

import argparse
import json
import pathlib
from typing import Any, Callable, Mapping, Optional


def add_output_args(ap: argparse.ArgumentParser, files: Mapping[str, str]) -> None:
    """``--out DIR`` plus ``--<kind> PATH`` for each ``kind: file name`` of ``files``."""
    names = ", ".join(files.values())
    ap.add_argument("--out", metavar="DIR", default=None,
                    help=f"write {names} into DIR (default: the run's folder under .work/; "
                         "committed results: --out benchmarks/results)")
    for kind, name in files.items():
        ap.add_argument(f"--{kind}", metavar="PATH", default=None,
                        help=f"write the {kind} here instead (default: DIR/{name})")


def output_paths(a: argparse.Namespace, files: Mapping[str, str],
                 run_dir: Optional[pathlib.Path]) -> dict[str, Optional[pathlib.Path]]:
    """``{kind: path or None}``: None where nothing asked for that file.

    A file named by its own option goes there. Otherwise it goes into ``--out`` when given, else,
    when no file option was given at all, into ``run_dir`` (None: not written).
    """
    explicit = {k: getattr(a, k) for k in files if getattr(a, k, None)}
    base = pathlib.Path(a.out) if getattr(a, "out", None) else (None if explicit else run_dir)
    out: dict[str, Optional[pathlib.Path]] = {}
    for kind, name in files.items():
        if kind in explicit:
            out[kind] = pathlib.Path(explicit[kind])
        else:
            out[kind] = base / name if base is not None else None
    return out


def write_files(paths: Mapping[str, Optional[pathlib.Path]],
                writers: Mapping[str, Callable[[pathlib.Path], None]]) -> list[str]:
    """Run ``writers[kind](path)`` for each file asked for (parents made); the paths written."""
    written = []
    for kind, path in paths.items():
        if path is None:
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        writers[kind](path)
        written.append(str(path))
    return written


def write_json(obj: Any) -> Callable[[pathlib.Path], None]:
    return lambda p: p.write_text(json.dumps(obj, indent=1) + "\n")


def write_text(text: str) -> Callable[[pathlib.Path], None]:
    return lambda p: p.write_text(text)
