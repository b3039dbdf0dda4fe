#!/usr/bin/env python
"""The prefix-reuse benchmark's command (the package ``prefix_reuse/``). ``--help`` says what it measures and writes."""

import sys

import _bench_path  # noqa: F401  (the repository root and benchmarks/ on sys.path)
from prefix_reuse.cli import main

if __name__ == "__main__":
    sys.exit(main())
