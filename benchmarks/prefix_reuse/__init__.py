"""The prefix-reuse benchmark: cached tokens per workload class at three SWA pools (real server), and its deterministic replay.

Modules: arms (shape, arms, pools), workloads (scripts, expected-hit oracle), clients, run (one boot), report, cli; sim and replay (the replay in the scheduler glue). The command is ``benchmarks/prefix_reuse.py``."""
