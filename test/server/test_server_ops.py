"""Operating SWA islands on the real SGLang server (CPU): metrics, failure paths, tenants, bad starts.

Servers (all on the tiny hybrid-SWA model, window 32 -> w = 33 as the cache counts it, page 1,
chunked prefill 128 so most prompts take several chunks, --enable-metrics, --decode-log-interval 1,
--enable-cache-report, --sleep-on-idle, the same environment):

- ``on``: ``--enable-swa-islands --swa-islands-decode-interval 32 --swa-islands-reclaim eager``, a generous 20000-token pool;
- ``off``: the same arguments without the island flags. It only computes reference outputs: every
  comparison is cold vs cold (``/flush_cache`` before each reference request, distinct prompts or a
  flush on the islands server too);
- ``retract``: islands on, a 250-token full pool (200-token SWA pool, just above the island floor
  128 + 33 + 1 = 162) and ``SGLANG_INIT_NEW_TOKEN_RATIO=0.05``, so the scheduler over-admits and
  must retract decoding requests. Its last test stops it with SIGTERM.

The three boot concurrently, once per module. Startup-error cases launch (and must lose) three more
servers, also concurrently, as soon as the fleet is up. ``SGLANG_REQUEST_STATE_WAIT_TIMEOUT=1``
(default 4 s) makes the tokenizer notice a disconnected non-streaming client within a second, also
while its prefill produces no output.

After every failure path the islands server is checked the same way (``check_recovered``): once
idle, ``/get_load`` reports 0 tokens in use (nothing leaked or still locked), then after
``/flush_cache`` and a fixed 8-token tick request the pool gauges of ``/metrics`` equal the values
read the same way right after boot, and a fixed probe workload gives the islands-off outputs.
Concurrent bystander requests of every failure path must give the islands-off outputs too.

Island metrics are pushed from the decode log path, so every scrape that checks them follows a
tick (a short request whose decode steps run the log path after the state being checked).

Numbers seen are written to ``.work/server-ops-report.json`` and printed at module teardown.

The servers' arguments, the fleet, the reference and the recovery check: ``server_ops_fleet.py``
(the fixtures that boot them stay here, so the module boots them once).
"""

from __future__ import annotations

import json
import math
import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Sequence

import psutil
import pytest
import requests

from islands_harness.ops import (
    REQ_TIMEOUT_S,
    flush,
    flush_ok,
    kill_connection,
    mval,
    open_request,
    post_generate,
    post_generate_batch,
    read_events,
    scrape,
    tick,
    wait_idle,
)
from islands_harness.server import SglangServer
from server_ops_fleet import (
    BIG_POOL,
    CHUNK,
    CHUNK_128_LINE,
    COMMON_ARGS,
    DECODE_INTERVAL,
    HELD_MAX,
    HOLD_BOUND,
    ISLAND_ARGS,
    ISLAND_FLOOR,
    PAGE,
    REPORT,
    REPORT_PATH,
    RETRACT_ENV,
    RETRACT_POOL,
    RETRACTED,
    SERVER_ENV,
    TOMBSTONES,
    W,
    BadStarts,
    Fleet,
    Reference,
    check_recovered,
    delta,
    hold_fragments,
    island_counts,
    log_offset,
    log_since,
    probes,
    prompt,
    record_cpu,
    tiny_model_path,
    wait_decoding,
    wait_log,
)

pytestmark = pytest.mark.server


# ---- the servers (booted once per module) ---------------------------------------------------

@pytest.fixture(scope="module", autouse=True)
def report():
    """Set up first, torn down last: writes what the module saw."""
    t0 = time.monotonic()
    yield REPORT
    REPORT["module_wall_s"] = round(time.monotonic() - t0, 1)
    REPORT_PATH.parent.mkdir(parents=True, exist_ok=True)
    REPORT_PATH.write_text(json.dumps(REPORT, indent=1) + "\n")
    print(f"\n[server-ops] {json.dumps(REPORT)}")


@pytest.fixture(scope="module")
def model_path():
    return tiny_model_path()


@pytest.fixture(scope="module")
def fleet(model_path, bad):
    f = Fleet(model_path)
    f.launch("on", COMMON_ARGS + BIG_POOL + ISLAND_ARGS, SERVER_ENV)
    f.launch("off", COMMON_ARGS + BIG_POOL, SERVER_ENV)
    f.launch("retract", COMMON_ARGS + ["--max-total-tokens", str(RETRACT_POOL)] + ISLAND_ARGS,
             RETRACT_ENV)

    def then_bad_starts():
        for t in f.threads.values():
            t.join()
        bad.start()

    threading.Thread(target=then_bad_starts, name="bad-starts-after-boot", daemon=True).start()
    yield f
    problems = f.stop_all()
    REPORT["logs"] = {n: str(s.log_path) for n, s in f.servers.items()}
    assert not problems, f"servers left running after stop(): {problems}"


@pytest.fixture(scope="module")
def on(fleet):
    return fleet.get("on")


@pytest.fixture(scope="module")
def off(fleet):
    return fleet.get("off")


@pytest.fixture(scope="module")
def retract(fleet):
    return fleet.get("retract")


@pytest.fixture(scope="module")
def ref(off):
    r = Reference(off)
    for ids, n in probes():
        r.prefetch(ids, n)
    yield r
    r.pool.shutdown(wait=True, cancel_futures=True)


@pytest.fixture(scope="module")
def bad(model_path, tmp_path_factory):
    b = BadStarts(model_path, tmp_path_factory.mktemp("bad-starts"))
    yield b
    for t in b.threads:
        t.join()


@pytest.fixture(scope="module")
def bad_starts(bad):
    return bad.join()


# ---- 1. metrics ------------------------------------------------------------------------------

def test_island_metrics_match_a_known_workload(on, ref, fleet):
    """N cold prompts of P tokens, G new tokens each, concurrently.

    Chunk islands: every middle-chunk commit (``stash_chunked_request``, ceil(P/128) - 1 =
    floor((P-1)/128) of them when a request's chunks are full) and the final-chunk commit
    (``cache_unfinished_req`` in the prefill result phase, since G > 1 leaves the request
    unfinished) has L > w + p, so it inserts an island: at least N * (floor((P-1)/128) + 1); a
    prefill batch shared with another request can cut one more chunk (at most one more each).
    Decode islands: after prefill the committed length is P; decode step j commits P + j; the hook
    runs for unfinished requests (j <= G-2) and fires every 32 committed tokens: floor((G-2)/32)
    each."""
    N, P, G = 3, 300, 66
    prompts = [prompt(f"metrics-{i}", P) for i in range(N)]
    for p in prompts:
        ref.prefetch(p, G)

    flush_ok(on)
    tick(on)
    m0 = island_counts(scrape(on))
    off0 = log_offset(on)
    polled: list[float] = []
    stop = threading.Event()

    def poll():
        while not stop.is_set():
            polled.append(mval(scrape(on), HELD_MAX))
            stop.wait(0.5)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    try:
        with ThreadPoolExecutor(N) as ex:
            outs = list(ex.map(lambda p: post_generate(on, p, G), prompts))
    finally:
        stop.set()
        poller.join()
    tick(on)
    m1 = island_counts(scrape(on))
    d = delta(m0, m1)
    lines = hold_fragments(log_since(on, off0))

    REPORT["metrics"] = {"workload": {"N": N, "P": P, "G": G}, "before": m0, "after": m1,
                         "delta": d, "held_max_log": max(int(x["held_max"]) for x in lines),
                         "held_max_polled": max(polled), "polls": len(polled),
                         "decode_log_lines": len(lines)}
    assert [o["output_ids"] for o in outs] == [ref(p, G) for p in prompts], (
        "workload outputs differ from islands-off")
    assert all(o["meta_info"]["cached_tokens"] == 0 for o in outs)

    lo_chunk = N * ((P - 1) // CHUNK + 1)
    assert lo_chunk <= d["chunk"] <= N * (math.ceil(P / CHUNK) + 1), d
    assert d["decode"] >= N * ((G - 2) // DECODE_INTERVAL), d
    assert d["decode"] <= N * ((G - 1) // DECODE_INTERVAL), d
    assert d["freed"] > 0, d
    # Flushed before, no pressure eviction in a 16000-token SWA pool: every tombstoned token is
    # one an island freed eagerly. Per request, everything below the last decode island's
    # frontier (P + 32k - (w + p), k = floor((G-2)/32) islands) is tombstoned except the window
    # before the prompt's end, [P - window_left, P) with window_left = w - 1 (page 1), kept live
    # as its re-serve point: 330 - 32 = 298 here.
    k = (G - 2) // DECODE_INTERVAL
    per_request = P + DECODE_INTERVAL * k - (W + PAGE) - (W - 1)
    assert N * per_request == 894
    assert m1["tombstone"] == d["freed"] == N * per_request, (m1, d, N * per_request)

    assert lines, "no 'swa held/req ... #tombstone token' fragment on the Decode log lines"
    held_log = [int(x["held_max"]) for x in lines]
    assert max(held_log) <= HOLD_BOUND, f"max held/req {max(held_log)} > w + 2p + 32 = {HOLD_BOUND}"
    assert max(held_log) > 0
    assert polled and max(polled) <= HOLD_BOUND, polled
    # The last Decode line and Prometheus come from the same report call.
    last = [int(lines[-1][k]) for k in ("chunk_islands", "decode_islands", "freed", "tomb")]
    assert last == [m1["chunk"], m1["decode"], m1["freed"], m1["tombstone"]], (lines[-1], m1)

    flush_ok(on)
    tick(on)
    m2 = island_counts(scrape(on))
    REPORT["metrics"]["after_flush"] = m2
    assert m2["tombstone"] == 0, m2
    assert (m2["chunk"], m2["decode"], m2["freed"]) == (m1["chunk"], m1["decode"], m1["freed"])


def test_islands_off_server_reports_no_island_series(off):
    tick(off)
    names = {n for n, _, _ in scrape(off).samples}
    assert "sglang:swa_available_tokens" in names  # hybrid SWA pools are reported ...
    assert not [n for n in names if "swa_island" in n or "swa_tombstone" in n or "swa_held" in n]
    assert "swa held/req" not in off.log_path.read_text(errors="replace")  # ... islands are not


# ---- 3. tenant isolation ---------------------------------------------------------------------

def _completion(srv: SglangServer, ids: Sequence[int], salt: str) -> dict:
    r = requests.post(f"{srv.base_url}/v1/completions", timeout=REQ_TIMEOUT_S, json={
        "model": srv.model_path, "prompt": list(ids), "max_tokens": 2, "temperature": 0,
        "cache_salt": salt})
    assert r.status_code == 200, r.text[:300]
    details = r.json()["usage"].get("prompt_tokens_details") or {}
    return {"cached_tokens": details.get("cached_tokens", 0) or 0}


@pytest.mark.parametrize("name", ["on", "off"])
def test_tenants_with_different_extra_keys_never_share_cache(name, fleet, ref):
    """`extra_key` on /generate (GenerateReqInput.extra_key) and `cache_salt` on the OpenAI API
    (ServingBase._compute_extra_key: cache_salt + extra_key) namespace the radix tree. Islands
    insert decode islands with the request's key (RadixKey(..., req.extra_key))."""
    srv = fleet.get(name)
    with ref.exclusive:  # no reference flush on the off server in between
        got = _tenant_checks(srv)
    REPORT.setdefault("tenants", {})[name] = got


def _tenant_checks(srv: SglangServer) -> dict:
    flush_ok(srv)
    p = prompt("tenant-prompt", 100)
    got = {}
    for label, key in (("a1", "tenant-a"), ("b1", "tenant-b"), ("none1", None),
                       ("a2", "tenant-a"), ("b2", "tenant-b"), ("none2", None)):
        got[label] = post_generate(srv, p, 2, extra_key=key)["meta_info"]["cached_tokens"]
    assert got["a1"] == got["b1"] == got["none1"] == 0, got
    assert got["a2"] > 0 and got["b2"] > 0 and got["none2"] > 0, got

    # A long generation under tenant A (two decode islands on the islands server), then its
    # prompt + output as a new prompt: tenant B must match nothing, tenant A a long prefix.
    q = prompt("tenant-decode", 100)
    out = post_generate(srv, q, 70, extra_key="tenant-a")["output_ids"]
    follow = q + out[:64]
    got["follow_b"] = post_generate(srv, follow, 2, extra_key="tenant-b")["meta_info"]["cached_tokens"]
    got["follow_a"] = post_generate(srv, follow, 2, extra_key="tenant-a")["meta_info"]["cached_tokens"]
    assert got["follow_b"] == 0 and got["follow_a"] > len(q), got

    c = prompt("tenant-openai", 100)
    got["oa_s1"] = _completion(srv, c, "salt-1")["cached_tokens"]
    got["oa_s2"] = _completion(srv, c, "salt-2")["cached_tokens"]
    got["oa_s1_again"] = _completion(srv, c, "salt-1")["cached_tokens"]
    assert got["oa_s1"] == got["oa_s2"] == 0 and got["oa_s1_again"] > 0, got
    return got


# ---- 2. failure paths on the islands server --------------------------------------------------

LONG_PROMPT = 4000  # 32 chunks (context 4096): a prefill long enough to be cut mid-way
LONG_NEW = 8
BYSTANDER_P, BYSTANDER_G = 60, 48


def _start_bystander(pool, srv, name, ref):
    ids = prompt(name, BYSTANDER_P)
    ref.prefetch(ids, BYSTANDER_G)
    off0 = log_offset(srv)
    fut = pool.submit(post_generate, srv, ids, BYSTANDER_G)
    wait_decoding(srv, off0)
    return ids, fut


def test_client_disconnect_mid_prefill(on, ref, fleet):
    """A non-streaming client killed during its prefill. The tokenizer notices on its next
    wait timeout (SGLANG_REQUEST_STATE_WAIT_TIMEOUT=1: <= 1 s) and aborts; the scheduler drops
    the chunked request between two chunks (process_pending_chunked_abort). A streaming client
    would be aborted only by the response's background task, 2 s after the disconnect."""
    flush_ok(on)
    tick(on)
    m0 = island_counts(scrape(on))
    with ThreadPoolExecutor(2) as pool:
        b_ids, b_fut = _start_bystander(pool, on, "bystander-disc-prefill", ref)
        off0 = log_offset(on)
        s = open_request(on, prompt("disc-prefill", LONG_PROMPT), LONG_NEW, rid="disc-prefill",
                         stream=False)
        wait_log(on, off0, CHUNK_128_LINE)  # prefill under way
        kill_connection(s)
        b_out = b_fut.result()["output_ids"]
    wait_idle(on)
    tick(on)
    m1 = island_counts(scrape(on))
    d = delta(m0, m1)
    victim_chunks = d["chunk"] - 1  # the bystander's single chunk is one final-chunk island
    REPORT["disconnect_mid_prefill"] = {"delta": d, "victim_chunk_islands": victim_chunks,
                                        "full_prefill_would_give": math.ceil(LONG_PROMPT / CHUNK)}
    assert d["aborted"] == 1, d
    assert 1 <= victim_chunks < math.ceil(LONG_PROMPT / CHUNK), (
        f"victim not cut mid-prefill: {victim_chunks} chunk islands")
    assert b_out == ref(b_ids, BYSTANDER_G), "bystander output changed by the disconnect"
    check_recovered(on, fleet, "on", ref, "disconnect mid-prefill")


def test_client_disconnect_mid_decode(on, ref, fleet):
    """A streaming client killed after 6 tokens: Starlette cancels the stream and the response's
    background task aborts the rid 2 s later (TokenizerManager.create_abort_task), so G is large
    enough that the victim cannot finish first on a fast machine."""
    G = 2000
    flush_ok(on)
    tick(on)
    m0 = island_counts(scrape(on))
    with ThreadPoolExecutor(2) as pool:
        b_ids, b_fut = _start_bystander(pool, on, "bystander-disc-decode", ref)
        s = open_request(on, prompt("disc-decode", 100), G, rid="disc-decode", stream=True)
        events = read_events(s, 6)  # tokens are streaming: the victim is decoding
        kill_connection(s)
        b_out = b_fut.result()["output_ids"]
    wait_idle(on)
    tick(on)
    m1 = island_counts(scrape(on))
    d = delta(m0, m1)
    bystander_decode = (BYSTANDER_G - 2) // DECODE_INTERVAL
    victim_decode = d["decode"] - bystander_decode
    REPORT["disconnect_mid_decode"] = {"delta": d, "events_read": events,
                                       "victim_decode_islands": victim_decode,
                                       "full_decode_would_give": (G - 2) // DECODE_INTERVAL}
    assert d["aborted"] == 1, d
    assert 0 <= victim_decode < (G - 2) // DECODE_INTERVAL, d
    assert b_out == ref(b_ids, BYSTANDER_G), "bystander output changed by the disconnect"
    check_recovered(on, fleet, "on", ref, "disconnect mid-decode")


def _abort(srv, rid):
    r = requests.post(f"{srv.base_url}/abort_request", json={"rid": rid}, timeout=60)
    assert r.status_code == 200, r.text
    return r


def test_abort_request_by_rid_mid_prefill_and_mid_decode(on, ref, fleet):
    """POST /abort_request {"rid": ...} (AbortReq; abort_all=False)."""
    flush_ok(on)
    tick(on)
    m0 = island_counts(scrape(on))
    with ThreadPoolExecutor(2) as pool:
        b_ids, b_fut = _start_bystander(pool, on, "bystander-abort-prefill", ref)
        off0 = log_offset(on)
        v_fut = pool.submit(post_generate, on, prompt("abort-prefill", LONG_PROMPT), LONG_NEW,
                            rid="abort-prefill")
        wait_log(on, off0, CHUNK_128_LINE, count=2)  # the first chunk is committed
        _abort(on, "abort-prefill")
        v1 = v_fut.result()
        b_out = b_fut.result()["output_ids"]
    assert v1["meta_info"]["finish_reason"]["type"] == "abort", v1["meta_info"]
    assert b_out == ref(b_ids, BYSTANDER_G)
    wait_idle(on)
    tick(on)
    m1 = island_counts(scrape(on))
    d1 = delta(m0, m1)
    victim_chunks = d1["chunk"] - 1

    # The victim first and the bystander joining its decode: the other order races (a bystander
    # of 48 tokens can finish before the victim is admitted on a loaded machine).
    G = 2000
    with ThreadPoolExecutor(2) as pool:
        off1 = log_offset(on)
        v_fut = pool.submit(post_generate, on, prompt("abort-decode", 100), G, rid="abort-decode")
        wait_decoding(on, off1, before=v_fut)
        off2 = log_offset(on)
        b2_ids, b2_fut = _start_bystander(pool, on, "bystander-abort-decode", ref)
        wait_decoding(on, off2, running=2, steps=5, before=v_fut)
        _abort(on, "abort-decode")
        v2 = v_fut.result()
        b2_out = b2_fut.result()["output_ids"]
    wait_idle(on)
    tick(on)
    m2 = island_counts(scrape(on))
    REPORT["abort_request"] = {
        "prefill": {"completion_tokens": v1["meta_info"]["completion_tokens"],
                    "victim_chunk_islands": victim_chunks, "delta": d1},
        "decode": {"completion_tokens": v2["meta_info"]["completion_tokens"],
                   "delta": delta(m1, m2)}}
    assert v1["meta_info"]["completion_tokens"] == 0, v1["meta_info"]
    assert 1 <= victim_chunks < math.ceil(LONG_PROMPT / CHUNK), d1
    assert v2["meta_info"]["finish_reason"]["type"] == "abort", v2["meta_info"]
    assert 0 < v2["meta_info"]["completion_tokens"] < G, v2["meta_info"]
    assert b2_out == ref(b2_ids, BYSTANDER_G)
    check_recovered(on, fleet, "on", ref, "abort_request")


def test_flush_cache_refuses_or_defers_while_busy_and_flushes_when_idle(on, ref, fleet):
    """Documented in this release (http_server.flush_cache, SchedulerFlushWrapper): without
    `timeout` a busy server answers 400 "Flush cache failed." and flushes nothing; with
    `?timeout=S` the flush waits until the scheduler is idle (or S passes) and then answers 200."""
    # G: enough decode steps left after the third that the plain flush lands while the request
    # still runs, however fast the steps (60 was not, once, in a CI-like run)
    ids, G = prompt("flush-inflight", 200), 400
    ref.prefetch(ids, G)
    flush_ok(on)
    with ThreadPoolExecutor(1) as pool:
        off0 = log_offset(on)
        fut = pool.submit(post_generate, on, ids, G)
        wait_decoding(on, off0, steps=3, before=fut)
        busy = flush(on)  # plain form: refused while a request runs
        t0 = time.monotonic()
        deferred = flush(on, timeout_q=REQ_TIMEOUT_S)
        deferred_s = time.monotonic() - t0
        busy_log = log_since(on, off0)
        out = fut.result()
    REPORT["flush_cache"] = {"busy": [busy.status_code, busy.text.strip()],
                             "deferred": [deferred.status_code, deferred.text.split(".")[0]],
                             "deferred_wait_s": round(deferred_s, 2)}
    assert busy.status_code == 400 and "Flush cache failed" in busy.text, busy.text
    assert "Cache not flushed because there are pending requests" in busy_log
    assert deferred.status_code == 200 and "Cache flushed" in deferred.text, deferred.text
    assert out["output_ids"] == ref(ids, G), "the in-flight request changed by the flush attempts"
    assert out["meta_info"]["finish_reason"]["type"] == "length"
    wait_idle(on)
    time.sleep(1)  # past the overlap scheduler's trailing step: the plain form on an idle server
    idle = flush(on)
    REPORT["flush_cache"]["idle"] = [idle.status_code, idle.text.split(".")[0]]
    assert idle.status_code == 200 and "Cache flushed" in idle.text
    tick(on)
    assert mval(scrape(on), TOMBSTONES) == 0
    check_recovered(on, fleet, "on", ref, "flush_cache")


def test_release_and_resume_memory_occupation(on, ref, fleet):
    """Runs on CPU without --enable-memory-saver (the adapter is a no-op there, and
    torch_memory_saver is not installed): release flushes the cache, resume restores nothing.
    Only ever called idle: the scheduler asserts idleness and would die otherwise."""
    wait_idle(on)
    rel = requests.post(f"{on.base_url}/release_memory_occupation", json={}, timeout=REQ_TIMEOUT_S)
    res = requests.post(f"{on.base_url}/resume_memory_occupation", json={}, timeout=REQ_TIMEOUT_S)
    REPORT["memory_occupation"] = {"release": rel.status_code, "resume": res.status_code}
    assert rel.status_code == 200, rel.text[:300]
    assert res.status_code == 200, res.text[:300]
    check_recovered(on, fleet, "on", ref, "release/resume memory occupation")


# ---- retraction and SIGTERM (the small-pool islands server) ----------------------------------

def test_retraction_under_pool_exhaustion(retract, ref, fleet):
    """4 requests of 40 + 48 tokens over-admitted into a 250-token pool (new-token ratio 0.05):
    decode runs out of KV and retracts; retracted requests are re-prefilled and still give the
    islands-off outputs. The 4 go in one batch body so they run together: sent from 4 threads
    they once reached a loaded scheduler far enough apart that the first finished early and
    nothing retracted."""
    N, P, G = 4, 40, 48
    prompts = [prompt(f"retract-{i}", P) for i in range(N)]
    for p in prompts:
        ref.prefetch(p, G)
    flush_ok(retract)
    m0 = scrape(retract)
    off0 = log_offset(retract)
    outs = post_generate_batch(retract, prompts, G)
    log = log_since(retract, off0)
    m1 = scrape(retract)
    per_req = [o["meta_info"].get("num_retractions", 0) for o in outs]
    retracted = mval(m1, RETRACTED, 0.0) - mval(m0, RETRACTED, 0.0)
    REPORT["retraction"] = {"num_retractions_per_req": per_req, "metric_delta": retracted,
                            "log_lines": log.count("KV cache pool is full. Retract requests."),
                            "held_max_log": max((int(x["held_max"]) for x in hold_fragments(log)),
                                                default=None)}
    assert "KV cache pool is full. Retract requests." in log
    assert retracted >= 1 and sum(per_req) >= 1, REPORT["retraction"]
    assert [o["output_ids"] for o in outs] == [ref(p, G) for p in prompts], (
        "retracted requests' outputs changed")
    check_recovered(retract, fleet, "retract", ref, "retraction")


def test_sigterm_drains_in_flight_request_and_exits_cleanly(retract, ref):
    ids, G = prompt("sigterm-inflight", 40), 60
    ref.prefetch(ids, G)
    root = psutil.Process(retract.pid)
    tree = [root, *root.children(recursive=True)]
    record_cpu("retract", retract)
    with ThreadPoolExecutor(1) as pool:
        off0 = log_offset(retract)
        fut = pool.submit(post_generate, retract, ids, G)
        wait_decoding(retract, off0, steps=3)
        t0 = time.monotonic()
        os.kill(retract.pid, signal.SIGTERM)  # the launcher process only, as an orchestrator would
        out = fut.result()
    rc = retract.proc.wait(timeout=180)
    exit_s = time.monotonic() - t0
    gone, alive = psutil.wait_procs(tree, timeout=30)
    log = retract.log_path.read_text(errors="replace")
    REPORT["sigterm"] = {"returncode": rc, "exit_s": round(exit_s, 1), "tree": len(tree),
                         "alive_after": [p.pid for p in alive]}
    retract.stop()  # no-op cleanup; raises if any process of the group survived
    assert out["meta_info"]["finish_reason"]["type"] == "length", out["meta_info"]
    assert out["output_ids"] == ref(ids, G), "the drained request's output changed"
    assert "SIGTERM received" in log and "Gracefully exiting" in log
    assert not alive, f"processes left after SIGTERM: {[p.pid for p in alive]}"
    # The launcher ends itself with kill_process_tree(include_parent=True), i.e. SIGKILL, after
    # the drain and the schedulers' ShutdownReq: -9, not 0, in this release.
    assert rc in (0, -signal.SIGKILL), rc


# ---- 4. bad input at startup -----------------------------------------------------------------

def _assert_refused(r: dict, *messages: str) -> None:
    tail = "\n".join(r["log"].splitlines()[-15:])
    assert r["rc"] is not None and r["rc"] != 0, f"exit code {r['rc']}; log tail:\n{tail}"
    assert not r["healthy"], "the server answered /health"
    for m in messages:
        assert m in r["log"], f"{m!r} not in the log; tail:\n{tail}"
    assert not r["alive"], f"processes left running: {r['alive']}"


def test_startup_refuses_islands_on_a_non_hybrid_model(bad_starts):
    _assert_refused(bad_starts["non_hybrid"], "--enable-swa-islands cannot be used here",
                    "not a hybrid sliding-window model")


def test_startup_refuses_islands_with_disable_radix_cache(bad_starts):
    _assert_refused(bad_starts["disable_radix_cache"], "--enable-swa-islands cannot be used here",
                    "--disable-radix-cache builds a chunk cache")


def test_startup_refuses_a_ratio_below_the_island_floor(bad_starts):
    _assert_refused(bad_starts["ratio_below_floor"], "SWA pool of 100 tokens",
                    f"below the island floor of a single request ({ISLAND_FLOOR} tokens: one "
                    f"chunk of {CHUNK} + window {W} + page {PAGE})",
                    "Raise --swa-full-tokens-ratio")
