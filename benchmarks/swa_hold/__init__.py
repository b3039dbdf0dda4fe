"""The SWA hold benchmark on the real tree cache: what each running request pins, per chunk commit and decode step.

Modules: setup, run, result, report, cli (0.5.15); target_main, main_driver (sglang 0.5.23, run in its environments) and model_shape (the pools' layers and head dims, 0.5.23). The command is ``benchmarks/swa_hold.py``."""
