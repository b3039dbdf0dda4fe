"""Operating a running server over HTTP: greedy requests, load and idleness, /flush_cache, /metrics
samples, the pool gauges read the same way every time, and a raw streaming client whose
connection can be killed mid-request. Used by the server tests and ``benchmarks/soak.py``.

    from islands_harness.ops import post_generate, wait_idle, pool_snapshot
    out = post_generate(srv, [5, 6, 7], 8)["output_ids"]
    wait_idle(srv); snap = pool_snapshot(srv)   # {gauge: tokens}

Failures raise ``ServerError`` (a non-200 answer, a server that does not go idle, a stream that
ends early); ``mval`` raises ``KeyError`` for a metric that is not exported.
"""

from __future__ import annotations

import json
import socket
import struct
import time
from typing import Sequence

import requests

from islands_harness.client import Metrics, ServerError, fetch_metrics, generate_body
from islands_harness.server import SglangServer

REQ_TIMEOUT_S = 600
IDLE_TIMEOUT_S = 180

TICK_IDS = list(range(5, 13))  # 8 tokens < w + p: never an island
TICK_NEW = 4
POOL_GAUGES = (
    "sglang:kv_available_tokens", "sglang:kv_evictable_tokens", "sglang:kv_used_tokens",
    "sglang:swa_available_tokens", "sglang:swa_evictable_tokens", "sglang:swa_used_tokens",
)


def post_generate(srv: SglangServer, ids: Sequence[int], n: int, *, rid: str | None = None,
                  extra_key: str | None = None, timeout: float = REQ_TIMEOUT_S) -> dict:
    """A greedy `/generate` (`client.generate_body`); the response JSON."""
    fields = {k: v for k, v in (("rid", rid), ("extra_key", extra_key)) if v is not None}
    r = requests.post(f"{srv.base_url}/generate", json=generate_body(ids, n, **fields),
                      timeout=timeout)
    if r.status_code != 200:
        raise ServerError(f"/generate -> {r.status_code}: {r.text[:300]}")
    return r.json()


def post_generate_batch(srv: SglangServer, prompts: Sequence[Sequence[int]], n: int, *,
                        timeout: float = REQ_TIMEOUT_S) -> list[dict]:
    """Greedy `/generate` on several prompts in one HTTP request (a batch body); one response JSON
    per prompt, in order. The tokenizer manager forwards the whole batch to the scheduler in one
    go, so the requests arrive together however loaded the client's machine is (separate HTTP
    requests from threads can reach the scheduler many decode steps apart)."""
    body = generate_body([], n)
    body["input_ids"] = [list(p) for p in prompts]
    r = requests.post(f"{srv.base_url}/generate", json=body, timeout=timeout)
    if r.status_code != 200:
        raise ServerError(f"/generate (batch of {len(prompts)}) -> {r.status_code}: {r.text[:300]}")
    outs = r.json()
    if not isinstance(outs, list) or len(outs) != len(prompts):
        raise ServerError(f"/generate (batch of {len(prompts)}) answered {str(outs)[:300]}")
    return outs


def flush(srv: SglangServer, timeout_q: float | None = None) -> requests.Response:
    url = f"{srv.base_url}/flush_cache" + (f"?timeout={timeout_q}" if timeout_q else "")
    return requests.post(url, timeout=REQ_TIMEOUT_S)


def flush_ok(srv: SglangServer) -> None:
    """Flush once the scheduler is fully idle. A plain /flush_cache right after the last response
    can still find the overlap scheduler's last batch in place (is_fully_idle() false) and answer
    400, so this uses the deferred form (?timeout=), which flushes as soon as it is idle."""
    r = flush(srv, timeout_q=IDLE_TIMEOUT_S)
    if r.status_code != 200:
        raise ServerError(f"/flush_cache?timeout= on an idle server -> {r.status_code}: {r.text}")


def get_load(srv: SglangServer) -> dict:
    """The server's load summed over its DP ranks in the legacy ``/get_load`` shape
    (``num_reqs``: running + waiting, ``num_waiting_reqs``, ``num_tokens``: tokens in use).
    0.5.15 serves ``/get_load`` (its ``/v1/loads`` answered 500 on the CPU server here); 0.5.23
    dropped it, so a 404 falls back to ``/v1/loads`` (core section)."""
    r = requests.get(f"{srv.base_url}/get_load", timeout=60)
    if r.status_code != 404:
        r.raise_for_status()
        loads = r.json()
        return {"num_reqs": sum(d["num_reqs"] for d in loads),
                "num_waiting_reqs": sum(d["num_waiting_reqs"] for d in loads),
                "num_tokens": sum(d["num_tokens"] for d in loads)}
    r = requests.get(f"{srv.base_url}/v1/loads", params={"include": "core"}, timeout=60)
    r.raise_for_status()
    loads = r.json()["loads"]
    running = sum(d["num_running_reqs"] for d in loads)
    waiting = sum(d["num_waiting_reqs"] for d in loads)
    return {"num_reqs": running + waiting, "num_waiting_reqs": waiting,
            "num_tokens": sum(d["num_total_tokens"] for d in loads)}


def wait_idle(srv: SglangServer, timeout: float = IDLE_TIMEOUT_S) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        load = get_load(srv)
        if load["num_reqs"] == 0 and load["num_waiting_reqs"] == 0:
            return load
        if time.monotonic() > deadline:
            raise ServerError(f"server not idle after {timeout} s: {load}")
        time.sleep(0.2)


def scrape(srv: SglangServer) -> Metrics:
    """/metrics, parsed (`client.Metrics`)."""
    return fetch_metrics(srv.base_url, timeout=60)


def mval(samples: Metrics, metric: tuple[str, dict] | str, default: float | None = None) -> float:
    """Sum of the samples of a metric whose labels include the given ones (KeyError if none and
    no default)."""
    name, labels = (metric, {}) if isinstance(metric, str) else metric
    return samples.value(name, labels, **({} if default is None else {"default": default}))


def tick(srv: SglangServer) -> None:
    """A short request: its decode steps push the island metrics of everything before it."""
    post_generate(srv, TICK_IDS, TICK_NEW)


def pool_snapshot(srv: SglangServer, settle_s: float = 60.0) -> dict[str, float]:
    """Pool gauges read the same way every time: flush, one tick, scrape once the gauges show the
    tick finished (nothing in use). The gauges are published by scheduler steps, so a scrape right
    after the tick's response can still show its last decode step (its tokens in use, not yet
    cached); the idle scheduler publishes the finished state shortly after."""
    flush_ok(srv)
    tick(srv)
    deadline = time.monotonic() + settle_s
    while True:
        s = scrape(srv)
        snap = {name: mval(s, name) for name in POOL_GAUGES}
        in_use = snap.get("sglang:kv_used_tokens", 0) + snap.get("sglang:swa_used_tokens", 0)
        if in_use == 0 or time.monotonic() > deadline:
            return snap
        time.sleep(0.2)


def open_request(srv: SglangServer, ids: Sequence[int], n: int, rid: str, *,
                 stream: bool) -> socket.socket:
    """POST /generate on a raw socket, so the test can kill the connection mid-request."""
    body = json.dumps(generate_body(ids, n, rid=rid, stream=stream)).encode()
    s = socket.create_connection((srv.host, srv.port), timeout=REQ_TIMEOUT_S)
    s.sendall(b"POST /generate HTTP/1.1\r\nHost: %s:%d\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % (srv.host.encode(), srv.port, len(body)) + body)
    return s


def read_events(s: socket.socket, k: int) -> int:
    buf = b""
    while buf.count(b"data:") < k:
        chunk = s.recv(65536)
        if not chunk:
            raise ServerError(f"stream ended after {buf.count(b'data:')} events")
        buf += chunk
    return buf.count(b"data:")


def kill_connection(s: socket.socket) -> None:
    """Close with RST (SO_LINGER 0), as a killed client would."""
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()
