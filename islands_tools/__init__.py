"""Tools around the SWA islands engine modules that are not part of the engine itself.

- ``pool_plan``: capacity planning for the two hybrid-SWA KV pools (``pool_plan_bytes``: bytes per
  token; ``pool_plan_shape``: model shapes); ``pool_plan_cli``: its command line (arguments, the
  table, the JSON) behind ``scripts/swa_pool_plan.py``.
- ``equality_gate``: the two-boot equality gate (the library behind ``scripts/equality_gate.py``).
- ``patches``: the patch tooling of both targets (behind ``scripts/patches.py`` and
  ``scripts/patches_main.py``).
- ``mutation_helper``: the Python side of ``scripts/mutation.sh`` (cosmic-ray over the 0.5.15
  modules).
- ``mutants_main``: targeted mutants of the 0.5.23 island code (``python -m``).
"""
