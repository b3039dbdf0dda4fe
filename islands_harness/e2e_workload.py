"""The e2e workload and server arguments shared by test/server/test_server_e2e.py (the pinned,
patched engine) and scripts/main_smoke.py --e2e (stock sglang 0.5.23 in .venv-main, issue 17).

`SERVER_ARGS` go after the harness's `BASE_ARGS` (islands_harness.server): page 1, chunked
prefill 64, a 4096-token full pool and a 1024-token SWA pool (ratio 0.25), metrics on. The tiny
model is built with sliding window `WINDOW`. `make_workload` is the fixed temperature-0 workload
of 34 requests: 20 sequential, then 14 from `CONCURRENCY` threads.
"""

from __future__ import annotations

import random

WINDOW = 32
CHUNK = 64
MAX_NEW = 24
CONCURRENCY = 8
SERVER_ARGS = [
    "--page-size", "1",
    "--chunked-prefill-size", str(CHUNK),
    "--max-total-tokens", "4096",
    "--swa-full-tokens-ratio", "0.25",
    "--enable-metrics",
]


def make_workload(vocab_hi: int, seed: int = 1234):
    """(sequential, concurrent) lists of (name, input_ids, max_new_tokens, kind).

    kind: "cold" (nothing of it can be cached), "prefix" (shares a cached prefix longer than the
    window), "repeat" (the exact prompt was served before), "reserve" (served before, again under
    concurrency).
    """
    rng = random.Random(seed)

    def toks(n):
        return [rng.randrange(4, vocab_hi) for _ in range(n)]  # ids 0..3 are special

    seq = []
    for n in (20, 33, 65, 150, 257, 400):
        seq.append((f"len{n}", toks(n), MAX_NEW - (n % 9), "cold"))
        if n >= 257:
            # Straight after the original: with a 1024-token SWA pool, later traffic tombstones
            # the original's SWA KV and upstream then matches nothing of it (cached_tokens 0).
            seq.append((f"repeat_len{n}", seq[-1][1], MAX_NEW, "repeat"))
    for plen in (40, 200):
        prefix = toks(plen)
        for j in range(3):
            seq.append((f"prefix{plen}_{j}", prefix + toks(5 + 23 * j), MAX_NEW,
                        "cold" if j == 0 else "prefix"))

    conc = [(f"conc_{name}", ids, n, "reserve") for name, ids, n, _ in seq]
    shared = toks(120)
    for j in range(4):
        conc.append((f"conc_new{j}", shared + toks(30 + 40 * j), MAX_NEW - 2 * j,
                     "cold" if j == 0 else "prefix"))
    for n in (90, 310):
        conc.append((f"conc_len{n}", toks(n), 16, "cold"))
    return seq, conc
