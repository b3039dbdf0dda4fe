#!/usr/bin/env python3
"""Apply a patch series of patches-main/ to sglang 0.5.23 (upstream main): the stock arm or
islands (``check``, ``apply``, ``status``, ``revert``; ``--help``). The tool itself:
``islands_tools/patches/main_target.py``."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from islands_tools.patches.main_target import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
