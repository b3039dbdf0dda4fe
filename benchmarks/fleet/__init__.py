"""The fleet benchmark: islands behind SGLang's router (smg), per routing policy.

Modules: run (the workers and the router, measured), report, cli. The command is ``benchmarks/fleet.py``."""
