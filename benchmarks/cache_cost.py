#!/usr/bin/env python
"""The cache-cost benchmark's command on sglang 0.5.15.post1 (the package ``cache_cost/``). ``--help`` says what it measures and writes."""

import sys

import _bench_path  # noqa: F401  (the repository root and benchmarks/ on sys.path)
from cache_cost.cli import main

if __name__ == "__main__":
    sys.exit(main())
