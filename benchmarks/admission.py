#!/usr/bin/env python
"""The admission benchmark's command (the package ``admission/``). ``--help`` says what it measures and writes."""

import sys

import _bench_path  # noqa: F401  (the repository root and benchmarks/ on sys.path)
from admission.cli import main

if __name__ == "__main__":
    sys.exit(main())
