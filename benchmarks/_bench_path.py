"""Imported first by the benchmark modules: puts the repository root (``islands_harness``,
``islands_tools``) and this folder (the sibling benchmark modules) on ``sys.path``, so a benchmark
runs as ``.venv/bin/python benchmarks/NAME.py`` from anywhere."""

import pathlib
import sys

BENCHMARKS = pathlib.Path(__file__).resolve().parent
ROOT = BENCHMARKS.parent
for _p in (str(ROOT), str(BENCHMARKS)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
