#!/usr/bin/env python3
"""Plan --swa-full-tokens-ratio for a hybrid sliding-window-attention model under SWA islands
(``--help`` says how). The command of ``islands_tools/pool_plan_cli.py``. Run it with the
project's .venv/bin/python (SGLang installed; --model-config is then read through SGLang's
ModelConfig), or with a bare python3: without an installed SGLang the engine formulas import from
the working tree's python/ (standard library only) and --model-config reads config.json directly.
"""

import importlib.util
import os
import sys

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)  # islands_tools
if importlib.util.find_spec("sglang") is None:
    # No SGLang installed: the working tree's python/sglang holds swa_island_guard, which needs
    # only the standard library (an installed sglang package always takes precedence).
    sys.path.append(os.path.join(_ROOT, "python"))

from islands_tools.pool_plan_cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
