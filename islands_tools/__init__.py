"""Tools around the SWA islands engine modules that are not part of the engine itself.

- ``pool_plan``: capacity planning for the two hybrid-SWA KV pools (the library behind
  ``scripts/swa_pool_plan.py``).
"""
