#!/usr/bin/env python
"""The trace server's command: a slice of a production trace (Mooncake format), scaled down, served
by stock sglang 0.5.23 and islands on tiny Gemma 4 on CPU, checked against the in-process replay of
the same slice (the package ``trace_server/``). ``--help`` says what it measures and writes."""

import sys

import _bench_path  # noqa: F401  (the repository root and benchmarks/ on sys.path)
from trace_server.cli import main

if __name__ == "__main__":
    sys.exit(main())
