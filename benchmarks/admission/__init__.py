"""The admission benchmark: how many requests run at once, and what each holds, on a lean SWA pool (real server).

Modules: setup (shape, pools, arms), workloads, run (one arm on a live server), report (acceptance, markdown, plot), cli. The command is ``benchmarks/admission.py``."""
