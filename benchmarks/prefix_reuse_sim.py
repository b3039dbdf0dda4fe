#!/usr/bin/env python
"""The prefix-reuse replay's command: the benchmark's workloads replayed deterministically in the scheduler glue (``prefix_reuse/sim.py``). ``--help`` says what it measures and writes."""

import sys

import _bench_path  # noqa: F401  (the repository root and benchmarks/ on sys.path)
from prefix_reuse.sim import main

if __name__ == "__main__":
    sys.exit(main())
