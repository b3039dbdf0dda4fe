#!/usr/bin/env python
"""The seed table's command: the seed's pool-bound table replayed on each arm's real tree cache and admission (the package ``seed_table/``). ``--help`` says what it measures and writes."""

import sys

import _bench_path  # noqa: F401  (the repository root and benchmarks/ on sys.path)
from seed_table.cli import main

if __name__ == "__main__":
    sys.exit(main())
