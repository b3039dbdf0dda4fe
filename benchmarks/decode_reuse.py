#!/usr/bin/env python
"""The decode-reuse benchmark's command (the package ``decode_reuse/``). ``--help`` says what it measures and writes."""

import sys

import _bench_path  # noqa: F401  (the repository root and benchmarks/ on sys.path)
from decode_reuse.cli import main

if __name__ == "__main__":
    sys.exit(main())
