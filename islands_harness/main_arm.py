"""The comparison arms on upstream main (sglang 0.5.23).

- ``main``: stock 0.5.23 in `.venv-main`, default settings, no patch of ours (only the
  harness-only `patches-main/` series, the torch_native SWA-read fix without which the CPU server
  crashes). Built by `scripts/setup_main.sh`.
- ``main_knobs`` (and its halves ``main_free_off``, ``main_release_prefill``): the same
  interpreter with main's own two off-by-default SWA knobs in the environment
  (:data:`MAIN_KNOBS_ENV`).
- ``main_islands``: 0.5.23 with the main islands series (`patches-main/series`) and our modules in
  `.venv-main-islands`, booted with ``--enable-swa-islands``. Built by
  `scripts/setup_main.sh --islands`.
"""

from __future__ import annotations

import pathlib

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
MAIN_VERSION = "0.5.23"
MAIN_PYTHON = REPO_ROOT / ".venv-main" / "bin" / "python"
MAIN_ISLANDS_PYTHON = REPO_ROOT / ".venv-main-islands" / "bin" / "python"

MAIN_FREE_OFF_ENV = {"SGLANG_OPT_UNIFIED_CACHE_FREE_OUT_OF_WINDOW_SLOTS": "0"}
"""Main's commit-time free of a request's out-of-window SWA turned off (default on): the chunk
goes into the tree live, tree-owned and evictable, so a request diverging inside it can hit up to
its divergence."""
MAIN_RELEASE_PREFILL_ENV = {"SGLANG_OPT_RELEASE_PREFILL_SWA": "1"}
"""Main's release of the prompt's SWA leaf lock once decode moved a window past it (default off)."""
MAIN_KNOBS_ENV = {**MAIN_FREE_OFF_ENV, **MAIN_RELEASE_PREFILL_ENV}
"""Both knobs together: the ``main_knobs`` arm (issue 27 item 2)."""
HICACHE_COPY_DELAY_KNOB = "SGLANG_TEST_HICACHE_CPU_COPY_DELAY_POLLS"
HICACHE_COPY_DELAY_POLLS = 4
HICACHE_COPY_DELAY_ENV = {HICACHE_COPY_DELAY_KNOB: str(HICACHE_COPY_DELAY_POLLS)}
"""``patches-main/0012``'s test knob for HiCache on the CPU harness: each transfer's ack is seen
at its 4th poll, and a backup's copy reads the device pool only then, as a GPU's asynchronous
copy may. So an abort, a retraction or a free lands while a backup or a load is pending, and a
free of a slot that a pending backup reads reaches the host copy (the HiCache server tests run
with it; the soak with ``--held-copies``)."""


def main_python() -> str:
    """The interpreter of `.venv-main`; a clear error when it was never built."""
    if not MAIN_PYTHON.exists():
        raise SystemExit(f"the 'main' arm needs sglang {MAIN_VERSION} in {MAIN_PYTHON.parent.parent}"
                         ": build it with scripts/setup_main.sh")
    return str(MAIN_PYTHON)


def main_islands_python() -> str:
    """The interpreter of `.venv-main-islands`; a clear error when it was never built."""
    if not MAIN_ISLANDS_PYTHON.exists():
        raise SystemExit(f"the 'main_islands' arm needs sglang {MAIN_VERSION} with the main islands "
                         f"series in {MAIN_ISLANDS_PYTHON.parent.parent}: build it with "
                         "scripts/setup_main.sh --islands")
    return str(MAIN_ISLANDS_PYTHON)
