#!/usr/bin/env python
"""The fleet benchmark's command (the package ``fleet/``). ``--help`` says what it measures and writes."""

import sys

import _bench_path  # noqa: F401  (the repository root and benchmarks/ on sys.path)
from fleet.cli import main

if __name__ == "__main__":
    sys.exit(main())
