#!/usr/bin/env python
"""The SWA hold benchmark's command (the package ``swa_hold/``). ``--help`` says what it measures and writes."""

import sys

import _bench_path  # noqa: F401  (the repository root and benchmarks/ on sys.path)
from swa_hold.cli import main

if __name__ == "__main__":
    sys.exit(main())
