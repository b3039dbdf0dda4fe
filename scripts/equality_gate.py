#!/usr/bin/env python3
"""The two-boot equality gate's command (``scripts/equality_gate.sh`` wraps it): SWA islands must
be invisible in the outputs. The gate itself, its policy and its options:
``islands_tools/equality_gate/`` (``--help``)."""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

from islands_tools.equality_gate.cli import *  # noqa: E402,F401,F403 (the names tests read)
from islands_tools.equality_gate.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
