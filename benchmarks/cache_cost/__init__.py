"""The cache-cost benchmark: the per-operation cost of the tree cache as it grows and as the queue grows.

Modules: workload, ops, run, report, cli (0.5.15); main_target (sglang 0.5.23, both tree cores). The command is ``benchmarks/cache_cost.py``."""
