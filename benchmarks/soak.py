#!/usr/bin/env python
"""The soak's command (the package ``soak/``). ``--help`` says what it sends and checks."""

import sys

import _bench_path  # noqa: F401  (the repository root and benchmarks/ on sys.path)
from soak.cli import main

if __name__ == "__main__":
    sys.exit(main())
