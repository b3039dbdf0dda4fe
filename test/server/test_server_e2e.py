"""The real SGLang server on CPU serves the tiny hybrid-SWA model token-for-token like transformers.

One server boot per module (`served` fixture): fp32, torch_native attention, page 1, chunked
prefill 64 (smaller than most prompts), sliding window 32 (every prompt but one is longer), and a
small KV budget: `--max-total-tokens 4096 --swa-full-tokens-ratio 0.25` gives a 4096-token full
pool and a 1024-token SWA pool, smaller than the workload's distinct tokens. So the tree evicts SWA
KV (tombstones), SWA slots are recycled while full slots stay, and full-pool slot ids run past
the SWA pool: an attention backend that reads SWA K/V with untranslated full-pool slot ids fails
here (upstream torch_native: `IndexError ... with size 1025`). A fixed temperature-0 workload of
34 requests runs once, sequentially and then from 8 threads; the tests below check claims about it.

Reference: `islands_harness.hf_oracle.greedy_decode` (transformers fp32 greedy, KV cache on).
Cold serves must match it exactly. Cache-hit re-serves (shared prefixes, exact repeats, the
concurrent phase) are expected to match too on fp32 CPU; a mismatch there is reported with the
request name and first diverging position, never skipped.
"""

from __future__ import annotations

import dataclasses
import json
import socket
import time
from concurrent.futures import ThreadPoolExecutor

import psutil
import pytest

from islands_harness.e2e_workload import (  # shared with scripts/main_smoke.py --e2e
    CHUNK, CONCURRENCY, SERVER_ARGS, WINDOW, make_workload,
)
from islands_harness.server import REPO_ROOT, PortInUseError, SglangServer, port_is_free

REQUEST_TIMEOUT_S = 300
MEASUREMENTS = REPO_ROOT / ".work" / "e2e-measurements.json"
TIMINGS: dict[str, float] = {}


@dataclasses.dataclass
class Served:
    requests: dict  # name -> (GenerateResult, kind, input_ids, max_new_tokens)
    metrics: dict[str, float]  # /metrics right after the workload


def _tree_pids(srv: SglangServer) -> list[int]:
    root = psutil.Process(srv.pid)
    return [root.pid] + [c.pid for c in root.children(recursive=True)]


@pytest.fixture(scope="module")
def tiny_model():
    from islands_harness.tiny_model import build_tiny_model
    t0 = time.monotonic()
    path = build_tiny_model(window=WINDOW)
    meta = json.loads((path / ".tiny_model_complete.json").read_text())
    return path, meta, time.monotonic() - t0


@pytest.fixture(scope="module")
def workload(tiny_model):
    _, meta, _ = tiny_model
    return make_workload(meta["real_vocab"])


@pytest.fixture(scope="module")
def oracle(tiny_model, workload):
    """HF greedy outputs keyed by (tuple(ids), max_new); computed before the server boots."""
    from islands_harness.hf_oracle import greedy_decode_one
    path, _, _ = tiny_model
    t0 = time.monotonic()
    ref = {}
    for _, ids, n, _ in workload[0] + workload[1]:
        key = (tuple(ids), n)
        if key not in ref:
            ref[key] = greedy_decode_one(path, ids, n)
    TIMINGS["hf_oracle_s"] = round(time.monotonic() - t0, 2)
    return ref


@pytest.fixture(scope="module")
def served(tiny_model, workload, oracle):
    """Boot once, run the whole workload, stop. Returns `Served`: `.requests` maps each request name
    to (GenerateResult, kind, input_ids, max_new_tokens); `.metrics` is /metrics after the run."""
    path, _, build_s = tiny_model
    seq, conc = workload
    t0 = time.monotonic()
    srv = SglangServer(path, SERVER_ARGS, sample_rss=True)
    srv.start()
    seen_pids = _tree_pids(srv)
    try:
        results = {}
        t_work = time.monotonic()
        try:
            for name, ids, n, kind in seq:
                results[name] = (srv.generate(ids, n, timeout=REQUEST_TIMEOUT_S), kind, ids, n)
            with ThreadPoolExecutor(CONCURRENCY) as ex:
                futs = {name: (ex.submit(srv.generate, ids, n, timeout=REQUEST_TIMEOUT_S), kind,
                               ids, n) for name, ids, n, kind in conc}
                for name, (f, kind, ids, n) in futs.items():
                    results[name] = (f.result(), kind, ids, n)
        except Exception as e:
            failure = (f"the server failed during the workload after {len(results)} of "
                       f"{len(seq) + len(conc)} requests: {e!r}\nserver log tail "
                       f"({srv.log_path}):\n{srv.log_tail(25)}")
        else:
            failure = None
        if failure:  # outside `except`: no chained request-library tracebacks in the report
            pytest.fail(failure, pytrace=False)
        work_s = time.monotonic() - t_work
        metrics = srv.metrics()
        seen_pids = sorted(set(seen_pids) | set(_tree_pids(srv)))
    finally:
        srv.stop()  # raises ServerStopError if any process of the tree survives
    left = [p for p in seen_pids if psutil.pid_exists(p)
            and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    assert not left, f"server processes left running after stop(): {left}"
    m = {"tiny_model_build_or_reuse_s": round(build_s, 2), **TIMINGS, "server_boot_to_healthy_s":
         round(srv.boot_s, 2), "workload_s": round(work_s, 2),
         "peak_server_tree_rss_mb": round(srv.peak_rss_bytes / 2**20, 1),
         "server_lifetime_s": round(time.monotonic() - t0, 2), "requests": len(results),
         "server_pids": seen_pids, "log": str(srv.log_path)}
    MEASUREMENTS.parent.mkdir(parents=True, exist_ok=True)
    MEASUREMENTS.write_text(json.dumps(m, indent=1) + "\n")
    print(f"\n[e2e] {m}")
    return Served(results, metrics)


def _mismatches(served, oracle, kinds):
    bad = {}
    for name, (res, kind, ids, n) in served.requests.items():
        if kind not in kinds:
            continue
        ref = oracle[(tuple(ids), n)]
        if res.output_ids != ref:
            first = next((i for i, (a, b) in enumerate(zip(res.output_ids, ref)) if a != b),
                         min(len(res.output_ids), len(ref)))
            bad[name] = {"first_diff": first, "cached_tokens": res.cached_tokens,
                         "prompt_len": len(ids), "got": res.output_ids[first:first + 4],
                         "want": ref[first:first + 4]}
    return bad


@pytest.mark.server
def test_workload_covers_window_chunk_cache_and_concurrency(served):
    reqs = served.requests
    lens = [len(ids) for _, _, ids, _ in reqs.values()]
    assert 20 <= len(reqs) <= 36
    assert sum(n > CHUNK for n in lens) >= 10 and max(lens) >= 300 and min(lens) < WINDOW
    assert sum(kind == "reserve" for _, kind, _, _ in reqs.values()) >= 10


@pytest.mark.server
def test_swa_pool_is_smaller_than_the_workload(served):
    """The SWA pool must overflow, or a backend that ignores the full->SWA slot mapping passes."""
    m = served.metrics
    swa_pool = m["sglang:swa_available_tokens"] + m["sglang:swa_evictable_tokens"] + m[
        "sglang:swa_used_tokens"]
    full_pool = m["sglang:kv_available_tokens"] + m["sglang:kv_evictable_tokens"] + m[
        "sglang:kv_used_tokens"]
    distinct = {tuple(ids) for _, _, ids, _ in served.requests.values()}
    assert swa_pool <= full_pool / 2, (swa_pool, full_pool)
    assert sum(map(len, distinct)) > 2 * swa_pool, (sum(map(len, distinct)), swa_pool)


@pytest.mark.server
def test_cold_serves_match_hf_greedy_token_for_token(served, oracle):
    bad = _mismatches(served, oracle, {"cold"})
    n = sum(kind == "cold" for _, kind, _, _ in served.requests.values())
    assert not bad, f"{len(bad)}/{n} cold requests differ from HF greedy: {bad}"


@pytest.mark.server
def test_cache_hit_serves_match_hf_greedy_token_for_token(served, oracle):
    kinds = {"prefix", "repeat", "reserve"}
    bad = _mismatches(served, oracle, kinds)
    n = sum(kind in kinds for _, kind, _, _ in served.requests.values())
    assert not bad, f"{len(bad)}/{n} cache-hit requests differ from HF greedy: {bad}"


@pytest.mark.server
def test_shared_prefixes_and_repeats_hit_the_radix_cache(served):
    for name, (res, kind, ids, _) in served.requests.items():
        assert res.prompt_tokens == len(ids), name
        assert res.completion_tokens == len(res.output_ids), name
    for name in ("prefix40_1", "prefix40_2", "prefix200_1", "prefix200_2"):
        res, _, ids, _ = served.requests[name]
        plen = int(name.split("_")[0].removeprefix("prefix"))
        assert res.cached_tokens >= plen - 1, (name, res.cached_tokens)
    for name in ("repeat_len257", "repeat_len400"):
        res, _, ids, _ = served.requests[name]
        assert res.cached_tokens >= len(ids) - 1 - WINDOW, (name, res.cached_tokens)


def test_port_in_use_is_refused_before_launch(tmp_path):
    me = psutil.Process()
    children_before = {c.pid for c in me.children(recursive=True)}
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        srv = SglangServer(tmp_path / "no-model-needed", port=port, log_path=tmp_path / "log")
        with pytest.raises(PortInUseError, match=str(port)):
            srv.start()
        assert srv.proc is None and srv.pid is None
        assert not (tmp_path / "log").exists()
    new = {c.pid for c in me.children(recursive=True)} - children_before
    assert not new, f"processes launched despite the busy port: {new}"
    assert port_is_free(port)
