#!/usr/bin/env python3
"""Maintain the SWA-islands patch series (sglang 0.5.15.post1; ``--target 0.5.23`` for upstream
main): ``check``, ``apply``, ``status``, ``revert``, ``worktree``, ``refresh``, ``export``
(``--help``). The tool itself: ``islands_tools/patches/``."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from islands_tools.patches.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
