"""The seed's pool-bound table replayed on the real tree cache and admission (``benchmarks/seed_table.py``):
``setup`` (shape, arms, pools), ``workload``, ``alloc_kernels``, ``replay`` (one cell, any interpreter),
``run``, ``report``, ``cli``."""
