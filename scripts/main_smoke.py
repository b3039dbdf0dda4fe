"""Boot stock sglang 0.5.23 (`.venv-main`, scripts/setup_main.sh) on the tiny hybrid-SWA model
through the harness and compare a few temperature-0 outputs with transformers (issue 17).

    .venv/bin/python scripts/main_smoke.py [--python .venv-main/bin/python] [--boot-timeout 180]
    .venv/bin/python scripts/main_smoke.py --e2e     # test_server_e2e's 34-request workload
    .venv/bin/python scripts/main_smoke.py --e2e --oracle-only   # compute/cache the oracle only

Runs under the pinned `.venv` (the harness, the tiny model builder and the HF oracle live there);
only the server runs on `--python`. Server arguments: the harness's `BASE_ARGS` plus the e2e
test's `islands_harness.e2e_workload.SERVER_ARGS` (page 1, chunk 64, 4096-token full pool, SWA
ratio 0.25, metrics). One boot. Prints one JSON report (boot time, per-request match, first
diverging position, cached tokens, log path) and exits 0 only when every output equals the
oracle's.

Default workload: 7 requests (cold prompts around window and chunk, an exact repeat, a shared
prefix). `--e2e`: `islands_harness.e2e_workload.make_workload`, test_server_e2e's 34 requests
(sequential, then 8 threads), the oracle cached in `.work/main-smoke-oracle-<model dir name>.json`;
the report then also lists the server's `/metrics` names that mention swa/token/cache, for porting
the benchmarks to main.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import random
import sys
import time
from concurrent.futures import ThreadPoolExecutor

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from islands_harness.e2e_workload import (  # noqa: E402  (test_server_e2e's, shared)
    CONCURRENCY, SERVER_ARGS, WINDOW, make_workload,
)
from islands_harness.server import ServerStartError, SglangServer  # noqa: E402


def workload(vocab_hi: int, seed: int = 1234):
    """(name, ids, max_new): cold prompts shorter and longer than window and chunk, an exact
    repeat, and two prompts sharing a 200-token prefix."""
    rng = random.Random(seed)

    def toks(n):
        return [rng.randrange(4, vocab_hi) for _ in range(n)]

    out = []
    for n in (20, 65, 150, 257):
        out.append((f"len{n}", toks(n), 16))
    out.append(("repeat_len257", out[-1][1], 16))
    prefix = toks(200)
    for j in range(2):
        out.append((f"prefix200_{j}", prefix + toks(5 + 23 * j), 16))
    return out


def e2e_workload(vocab_hi: int):
    """make_workload (test_server_e2e's) as (sequential, concurrent) lists of (name, ids, max_new)."""
    seq, conc = make_workload(vocab_hi)
    return ([(n, ids, m) for n, ids, m, _ in seq], [(n, ids, m) for n, ids, m, _ in conc])


def first_diff(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", default=str(REPO / ".venv-main" / "bin" / "python"))
    ap.add_argument("--boot-timeout", type=float, default=180.0)
    ap.add_argument("--e2e", action="store_true", help="test_server_e2e's workload")
    ap.add_argument("--oracle-only", action="store_true", help="compute (and cache) the oracle, no boot")
    ap.add_argument("--extra", nargs=argparse.REMAINDER, default=[],
                    help="more server arguments (after the e2e ones)")
    a = ap.parse_args(argv)

    from islands_harness.hf_oracle import greedy_decode_one
    from islands_harness.tiny_model import build_tiny_model

    report: dict = {"python": a.python}
    t0 = time.monotonic()
    path = build_tiny_model(window=WINDOW)
    meta = json.loads((path / ".tiny_model_complete.json").read_text())
    if a.e2e:
        seq, conc = e2e_workload(meta["real_vocab"])
    else:
        seq, conc = workload(meta["real_vocab"]), []
    cache = REPO / ".work" / f"main-smoke-oracle-{path.name}.json" if a.e2e else None
    cached = json.loads(cache.read_text()) if cache and cache.exists() else {}
    ref = {}
    for name, ids, n in seq + conc:
        key = json.dumps([ids, n])
        if key not in cached:
            cached[key] = greedy_decode_one(path, ids, n)
        ref[name] = cached[key]
    if cache:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_name(f"{cache.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(cached))
        os.replace(tmp, cache)  # atomic: a concurrent reader sees the old file or the new one
    report["oracle_s"] = round(time.monotonic() - t0, 2)
    report["requests_planned"] = len(seq) + len(conc)
    if a.oracle_only:
        print(json.dumps(report, indent=1))
        return 0

    srv = SglangServer(path, [*SERVER_ARGS, *a.extra], python=a.python,
                       boot_timeout_s=a.boot_timeout)
    try:
        srv.start()
    except ServerStartError as e:
        report.update(booted=False, log=str(srv.log_path), error=str(e)[-4000:])
        print(json.dumps(report, indent=1))
        return 1
    report.update(booted=True, boot_s=round(srv.boot_s, 2), log=str(srv.log_path))
    rows = []

    def one(name, ids, n):
        t = time.monotonic()
        try:
            r = srv.generate(ids, n, timeout=300)
        except Exception as e:  # noqa: BLE001 - reported, not hidden
            return {"name": name, "error": repr(e)[:1000]}
        d = first_diff(r.output_ids, ref[name])
        return {"name": name, "prompt": len(ids), "match": d is None, "first_diff": d,
                "cached_tokens": r.cached_tokens, "s": round(time.monotonic() - t, 2),
                "server": r.output_ids[:8], "oracle": ref[name][:8]}

    try:
        t_work = time.monotonic()
        rows += [one(*q) for q in seq]
        if conc:
            with ThreadPoolExecutor(CONCURRENCY) as ex:
                rows += list(ex.map(lambda q: one(*q), conc))
        report["workload_s"] = round(time.monotonic() - t_work, 2)
        if any("error" in r for r in rows):
            report["log_tail"] = srv.log_tail(12)  # a server that died mid-workload says why
        elif a.e2e:
            m = srv.metrics()
            report["metrics"] = {k: v for k, v in sorted(m.items())
                                 if any(w in k for w in ("swa", "token", "cache", "running",
                                                         "queue"))}
    finally:
        srv.stop()
    report["requests"] = rows
    report["all_match"] = all(r.get("match") for r in rows)
    print(json.dumps(report, indent=1))
    return 0 if report["all_match"] else 1


if __name__ == "__main__":
    sys.exit(main())
