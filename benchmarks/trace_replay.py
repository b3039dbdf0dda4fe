#!/usr/bin/env python
"""The trace replay's command: a production trace (Mooncake format) replayed at its arrival times on
each arm's real tree cache and admission (the package ``trace_replay/``). ``--help`` says what it
measures and writes."""

import sys

import _bench_path  # noqa: F401  (the repository root and benchmarks/ on sys.path)
from trace_replay.cli import main

if __name__ == "__main__":
    sys.exit(main())
