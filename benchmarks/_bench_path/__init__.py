"""Imported first by every benchmark command and module (a package, so that the top of
``benchmarks/`` holds commands only): puts the repository root
(``islands_harness``, ``islands_tools``) and ``benchmarks/`` (the benchmark packages) on ``sys.path``,
so a benchmark runs as ``.venv/bin/python benchmarks/NAME.py`` from anywhere, and says how to run
a benchmark module in another interpreter (``worker_env``)."""

import os
import pathlib
import sys
from typing import Dict, Mapping, Optional

BENCHMARKS = pathlib.Path(__file__).resolve().parents[1]
ROOT = BENCHMARKS.parent
for _p in (str(ROOT), str(BENCHMARKS)):
    if _p not in sys.path:
        sys.path.insert(0, _p)


def worker_env(base: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    """``base`` (default ``os.environ``) with this folder and the repository root first on
    ``PYTHONPATH``: what ``[python, "-m", "swa_hold.main_driver", ...]`` needs in another
    environment's interpreter (the 0.5.23 venvs run our workers that way)."""
    env = dict(os.environ if base is None else base)
    env["PYTHONPATH"] = os.pathsep.join([str(BENCHMARKS), str(ROOT)]
                                        + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return env
