"""The SWA hold benchmark's arms and shapes (``benchmarks/swa_hold.py``).

An arm is ``(islands, --swa-islands-reclaim, env while the arm runs)``; a shape is the workload
and its pools, in tokens. Importing this module sets the CPU-engine environment
(``SGLANG_USE_CPU_ENGINE=1``, ``TRITON_INTERPRET=1``, unless already set) before anything imports
triton or sglang.
"""

from __future__ import annotations

import os

# Must be set before anything imports triton or sglang.
os.environ.setdefault("SGLANG_USE_CPU_ENGINE", "1")
os.environ.setdefault("TRITON_INTERPRET", "1")

import contextlib  # noqa: E402
import dataclasses  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from typing import Dict, Iterator, Optional  # noqa: E402

import _bench_path  # noqa: E402,F401  (puts the repository root on sys.path)
from islands_harness.knobs import UPSTREAM_KNOBS_ENV as KNOBS  # noqa: E402

ARMS = {
    # name: (islands, --swa-islands-reclaim, env while the arm runs)
    "upstream": (False, None, {}),
    "upstream_knobs": (False, None, dict(KNOBS)),
    "islands_eager": (True, "eager", {}),
    "islands": (True, "lazy", {}),  # the default policy
}
ARM_ORDER = ("upstream", "upstream_knobs", "islands_eager", "islands")
ISLAND_ARMS = tuple(a for a in ARM_ORDER if ARMS[a][0])
ISLAND_FREE_FUNCTION = "free_swa_pages"
"""The allocator method the island cache frees SWA with, timed inside each commit (the result's
``island_free_function``; earlier runs timed ``free_live_swa_pages``, its name before)."""


@dataclasses.dataclass
class Shape:
    window: int  # w as the cache counts it: tree.sliding_window_size + 1
    page: int
    chunk: int
    prompt: int
    n_requests: int
    decode_tokens: int
    decode_interval: Optional[int] = None  # islands only; None: the cache's default (cp/4)
    full_pool: Optional[int] = None  # None: everything fits (see pool_sizes)
    swa_pool: Optional[int] = None  # None: as large as the full pool (upstream never evicts)
    seed: int = 0
    accept_max: Optional[int] = None  # speculative decoding (0.5.23): 1..accept_max tokens a step

    def pool_sizes(self):
        need = self.n_requests * (self.prompt + self.decode_tokens + self.page) + 4 * self.chunk
        need = -(-need // self.page) * self.page
        full = self.full_pool or need
        swa = self.swa_pool or full
        return full, swa


QUICK = Shape(window=64, page=1, chunk=256, prompt=1024, n_requests=3, decode_tokens=150)
PRODUCTION = Shape(window=1024, page=64, chunk=16384, prompt=32768, n_requests=3, decode_tokens=4608)
TINY = Shape(window=16, page=1, chunk=64, prompt=256, n_requests=2, decode_tokens=40)


def log(msg: str) -> None:
    print(f"[swa_hold {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def arm_env(env: Dict[str, str]) -> Iterator[None]:
    """Set ``env`` and unset the knobs it does not name, restoring everything afterwards."""
    from islands_harness.stack import env_overrides

    removed = {k: os.environ.pop(k) for k in KNOBS if k not in env and k in os.environ}
    try:
        with env_overrides(env):
            yield
    finally:
        os.environ.update(removed)
