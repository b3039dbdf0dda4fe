#!/usr/bin/env python
"""The GPU seed-shape benchmark's command (the package ``seed_shape/``). ``--help`` says what it measures and writes."""

import sys

import _bench_path  # noqa: F401  (the repository root and benchmarks/ on sys.path)
from seed_shape.cli import main

if __name__ == "__main__":
    sys.exit(main())
