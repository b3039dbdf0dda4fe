"""The seed's headline shape on a GPU (Gemma 4 26B-A4B text, EAGLE, 32k-in / 16k-out).

Modules: setup (arms, profiles, planner pools, commands), run (one arm on a live server), report, cli. The command is ``benchmarks/seed_shape.py``."""
