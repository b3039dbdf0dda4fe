"""The servers of ``test_server_ops.py`` and what checks them: the shape and arguments of the three
servers (``on``, ``off``, ``retract``) and of the three refused launches, the fleet that boots them
concurrently (once per module: the fixtures stay in the test module), the islands-off reference,
the recovery check after a failure path, prompts, log and metric helpers, and the report the module
writes (``REPORT``)."""

from __future__ import annotations

import json
import os
import pathlib
import random
import re
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Sequence

import psutil
import pytest
import requests

from islands_harness import sched_log
from islands_harness.ops import (
    REQ_TIMEOUT_S,
    flush_ok,
    mval,
    pool_snapshot,
    post_generate,
    wait_idle,
)
from islands_harness.server import (
    BASE_ARGS,
    BOOT_ATTEMPTS,
    DEFAULT_LOG_DIR,
    HOST,
    REPO_ROOT,
    SglangServer,
    bind_failed,
    process_tree_cpu_seconds,
    reserve_free_port,
)

WINDOW = 32  # HF sliding_window of the tiny model
W = WINDOW + 1  # the model window as the cache counts it (sliding_window_size + 1)
PAGE = 1
CHUNK = 128
DECODE_INTERVAL = 32
HOLD_BOUND = W + 2 * PAGE + DECODE_INTERVAL  # 67: island (w + p) + decode tail (interval + p)
ISLAND_FLOOR = CHUNK + W + PAGE  # 162

COMMON_ARGS = [
    "--page-size", str(PAGE),
    "--chunked-prefill-size", str(CHUNK),
    "--enable-metrics",
    "--decode-log-interval", "1",
    "--enable-cache-report",
    # An idle scheduler otherwise polls in a busy loop (measured here: 0.28 CPU-s/s per idle
    # server on a loaded machine, 0.008 with this flag); three mostly idle servers would eat the
    # two cores the busy one needs. It polls its sockets with a 1 s timeout instead.
    "--sleep-on-idle",
]
# eager reclaim: the SWA below every island is freed at the insert, so the counts below are exact
ISLAND_ARGS = ["--enable-swa-islands", "--swa-islands-decode-interval", str(DECODE_INTERVAL),
               "--swa-islands-reclaim", "eager"]
BIG_POOL = ["--max-total-tokens", "20000"]
RETRACT_POOL = 250
SERVER_ENV = {"SGLANG_REQUEST_STATE_WAIT_TIMEOUT": "1"}
RETRACT_ENV = {**SERVER_ENV, "SGLANG_INIT_NEW_TOKEN_RATIO": "0.05"}

BOOT_TIMEOUT_S = 900  # three servers boot at once on two shared cores

ISLAND_CHUNK = ("sglang:swa_island_chunk_inserts", {})
ISLAND_DECODE = ("sglang:swa_island_decode_inserts", {})
ISLAND_FREED = ("sglang:swa_freed_at_commit_tokens", {})
TOMBSTONES = ("sglang:swa_tombstone_tokens", {})
HELD_MAX = ("sglang:swa_held_tokens_per_req_max", {})
ABORTED = ("sglang:num_aborted_requests_total", {})
RETRACTED = ("sglang:num_retracted_requests_total", {})



def hold_fragments(log: str) -> list[dict[str, str]]:
    """The SWA hold fragments of the Decode log lines (`sched_log.HOLD`), in log order."""
    return [m.groupdict() for m in sched_log.HOLD.finditer(log)]


CHUNK_128_LINE = re.compile(rf"Prefill batch, #new-seq: \d+, #new-token: {CHUNK},")

REPORT: dict[str, Any] = {}
REPORT_PATH = REPO_ROOT / ".work" / "server-ops-report.json"


# ---- prompts ---------------------------------------------------------------------------------

_VOCAB_HI: list[int] = []


def prompt(name: str, n: int) -> list[int]:
    """`n` token ids, a fixed function of `name` (ids 0..3 are special, so never drawn)."""
    rng = random.Random(name)
    return [rng.randrange(4, _VOCAB_HI[0]) for _ in range(n)]


# ---- server log ------------------------------------------------------------------------------

def log_offset(srv: SglangServer) -> int:
    return srv.log_path.stat().st_size


def log_since(srv: SglangServer, offset: int) -> str:
    with open(srv.log_path, "rb") as f:
        f.seek(offset)
        return f.read().decode(errors="replace")


def wait_log(srv: SglangServer, offset: int, pattern: re.Pattern | str, *, count: int = 1,
             timeout: float = REQ_TIMEOUT_S) -> None:
    pat = re.compile(pattern) if isinstance(pattern, str) else pattern
    deadline = time.monotonic() + timeout
    while len(pat.findall(log_since(srv, offset))) < count:
        assert srv.proc is not None and srv.proc.poll() is None, "server exited"
        assert time.monotonic() < deadline, f"{pat.pattern!r} x{count} not in the log in {timeout} s"
        time.sleep(0.05)


def wait_decoding(srv: SglangServer, offset: int, running: int = 1, steps: int = 2, *,
                  before=None) -> None:
    """Until `steps` decode log lines with at least `running` requests appear after `offset`.
    `before`: a request future that must still be in flight meanwhile (fails at once if it
    finished first, instead of waiting out the timeout for lines that can no longer come)."""
    pat = re.compile(r"Decode batch, #running-req: (\d+)")
    deadline = time.monotonic() + REQ_TIMEOUT_S
    while sum(int(n) >= running for n in pat.findall(log_since(srv, offset))) < steps:
        assert before is None or not before.done(), (
            f"the request finished before {steps} decode steps with {running} running")
        assert time.monotonic() < deadline, "no decode steps in the log"
        time.sleep(0.05)


# ---- servers ---------------------------------------------------------------------------------

def record_cpu(name: str, srv: SglangServer) -> None:
    """CPU seconds (user + system) used so far by a running server's process tree."""
    if srv.proc is None or srv.proc.poll() is not None:
        return
    total = process_tree_cpu_seconds(srv.pid)
    if total is not None:
        REPORT.setdefault("server_cpu_s", {})[name] = round(total, 1)


class Fleet:
    """Boots the module's servers concurrently; `get(name)` waits for one and fails only its users.

    Right after a server is healthy, its pool baseline (`pool_snapshot`) is read before anything
    else talks to it."""

    def __init__(self, model_path):
        self.model_path = model_path
        self.servers: dict[str, SglangServer] = {}
        self.baselines: dict[str, dict[str, float]] = {}
        self.errors: dict[str, BaseException] = {}
        self.threads: dict[str, threading.Thread] = {}
        self.stamp = time.strftime("%Y%m%d-%H%M%S")

    def launch(self, name: str, args: list[str], env: dict[str, str]) -> None:
        srv = SglangServer(self.model_path, args, env=env, boot_timeout_s=BOOT_TIMEOUT_S,
                           log_path=DEFAULT_LOG_DIR / f"ops-{name}-{self.stamp}.log")
        self.servers[name] = srv
        t = threading.Thread(target=self._boot, args=(name,), name=f"boot-{name}", daemon=True)
        self.threads[name] = t
        t.start()

    def _boot(self, name: str) -> None:
        srv = self.servers[name]
        try:
            srv.start()
            self.baselines[name] = pool_snapshot(srv)
            REPORT.setdefault("boot_s", {})[name] = round(srv.boot_s, 1)
        except BaseException as e:  # reported by get()
            self.errors[name] = e

    def get(self, name: str) -> SglangServer:
        self.threads[name].join()
        if name in self.errors:
            pytest.fail(f"server {name!r} did not boot: {self.errors[name]}", pytrace=False)
        return self.servers[name]

    def stop_all(self) -> list[str]:
        problems = []
        for name, srv in self.servers.items():
            self.threads[name].join()
            record_cpu(name, srv)
            try:
                srv.stop()
            except Exception as e:
                problems.append(f"{name}: {e}")
        return problems


def tiny_model_path() -> pathlib.Path:
    """The tiny Laguna checkpoint (window 32); ``prompt`` draws ids below its real vocabulary."""
    from islands_harness.tiny_model import MARKER, build_tiny_model

    path = build_tiny_model(window=WINDOW)
    _VOCAB_HI[:] = [json.loads((path / MARKER).read_text())["real_vocab"]]
    return path


class Reference:
    """Cold greedy outputs of the islands-off server (flush before every request), computed one at
    a time on a worker thread: `prefetch` early, so they run while the islands server works."""

    def __init__(self, srv: SglangServer):
        self.srv = srv
        self.futures: dict[tuple, Any] = {}
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="reference")
        self.exclusive = threading.Lock()  # held by a test that uses the off server itself

    def _run(self, ids, n) -> list[int]:
        with self.exclusive:
            flush_ok(self.srv)
            return post_generate(self.srv, ids, n)["output_ids"]

    def prefetch(self, ids: Sequence[int], n: int):
        key = (tuple(ids), n)
        if key not in self.futures:
            self.futures[key] = self.pool.submit(self._run, list(ids), n)
        return self.futures[key]

    def __call__(self, ids: Sequence[int], n: int) -> list[int]:
        return self.prefetch(ids, n).result()


def probes():
    """Under the window (no island), and two chunks plus one decode island."""
    return [(prompt("probe-short", 20), 24), (prompt("probe-long", 200), 36)]


def check_recovered(srv: SglangServer, fleet: Fleet, name: str, ref: Reference, label: str) -> None:
    """Idle with nothing in use, pools back to the boot baseline, probe outputs = islands-off."""
    load = wait_idle(srv)
    assert load["num_tokens"] == 0, f"{label}: tokens still in use once idle: {load}"
    snap = pool_snapshot(srv)
    assert snap == fleet.baselines[name], (
        f"{label}: pools after flush differ from boot: {snap} vs {fleet.baselines[name]}")
    for ids, n in probes():
        flush_ok(srv)
        out = post_generate(srv, ids, n)["output_ids"]
        assert out == ref(ids, n), f"{label}: probe of {len(ids)} tokens differs from islands-off"
    flush_ok(srv)
    REPORT.setdefault("recovered", []).append(label)


def island_counts(samples) -> dict[str, float]:
    return {"chunk": mval(samples, ISLAND_CHUNK), "decode": mval(samples, ISLAND_DECODE),
            "freed": mval(samples, ISLAND_FREED), "tombstone": mval(samples, TOMBSTONES),
            "held_max": mval(samples, HELD_MAX), "aborted": mval(samples, ABORTED, 0.0)}


def delta(a: dict, b: dict) -> dict:
    return {k: b[k] - a[k] for k in ("chunk", "decode", "freed", "aborted")}


# ---- refused launches ------------------------------------------------------------------------

def _launch_expecting_failure(model, extra: list[str], log_path, timeout: float = BOOT_TIMEOUT_S):
    """Launch sglang in its own process group; wait for it to exit. Returns a result dict with the
    exit code, the log, whether /health ever answered, and the processes still alive after it."""
    reservation = reserve_free_port()  # held until this launch is over
    port = reservation.port
    cmd = [sys.executable, "-m", "sglang.launch_server", "--model-path", str(model), *BASE_ARGS,
           "--host", HOST, "--port", str(port), *extra]
    env = dict(os.environ, SGLANG_USE_CPU_ENGINE="1", OMP_NUM_THREADS="2", PYTHONUNBUFFERED="1")
    seen: dict[int, psutil.Process] = {}
    healthy = False
    t0 = time.monotonic()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, cwd=str(REPO_ROOT), start_new_session=True)
        try:
            while proc.poll() is None and time.monotonic() - t0 < timeout:
                try:
                    root = psutil.Process(proc.pid)
                    for p in [root, *root.children(recursive=True)]:
                        seen.setdefault(p.pid, p)
                except psutil.NoSuchProcess:
                    pass
                try:
                    healthy |= requests.get(f"http://{HOST}:{port}/health", timeout=2).ok
                except requests.RequestException:
                    pass
                time.sleep(0.5)
            rc = proc.poll()
            _, alive = psutil.wait_procs(list(seen.values()), timeout=30)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)
            for p in seen.values():
                try:
                    p.kill()
                except psutil.NoSuchProcess:
                    pass
            reservation.release()
    return {"rc": rc, "wall_s": round(time.monotonic() - t0, 1), "healthy": healthy,
            "alive": [p.pid for p in alive],
            "log": pathlib.Path(log_path).read_bytes().decode(errors="replace")}


def _non_hybrid_model(base, out):
    """The tiny Laguna checkpoint with every layer full attention and sliding_window 0:
    is_hybrid_swa_model() is False for Laguna without a sliding window (weights are shared)."""
    out.mkdir(parents=True, exist_ok=True)
    for f in base.iterdir():
        if f.is_file() and f.name != "config.json" and not f.name.startswith("."):
            (out / f.name).symlink_to(f)
    cfg = json.loads((base / "config.json").read_text())
    cfg["layer_types"] = ["full_attention"] * len(cfg["layer_types"])
    cfg["sliding_window"] = 0
    (out / "config.json").write_text(json.dumps(cfg, indent=1))
    return out


class BadStarts:
    """The three refused launches, run concurrently on threads. `start()` is idempotent: the fleet
    starts them as soon as its servers are up (the tests leave a core mostly idle), and the
    startup tests start them themselves when run alone."""

    def __init__(self, model_path, tmp):
        nonhybrid = _non_hybrid_model(model_path, tmp / "tiny-laguna-full-only")
        common = COMMON_ARGS + ISLAND_ARGS
        self.cases = {
            "non_hybrid": (nonhybrid, common + ["--max-total-tokens", "2000"]),
            "disable_radix_cache": (model_path, common + BIG_POOL + ["--disable-radix-cache"]),
            # SWA pool = 0.05 x 2000 = 100 tokens < floor 128 + 33 + 1 = 162
            "ratio_below_floor": (model_path, common + ["--max-total-tokens", "2000",
                                                        "--swa-full-tokens-ratio", "0.05"]),
        }
        self.results: dict[str, dict] = {}
        self.threads: list[threading.Thread] = []
        self.lock = threading.Lock()
        self.stamp = time.strftime("%Y%m%d-%H%M%S")

    def _run(self, name: str) -> None:
        """One refused launch; a launch whose log says a port it tried to bind was taken (sglang
        picks its distributed-init port among the ephemeral ones, which a concurrent boot may
        take first) is launched again on fresh ports, as ``SglangServer.start`` retries a boot."""
        model, extra = self.cases[name]
        try:
            for attempt in range(1, BOOT_ATTEMPTS + 1):
                result = _launch_expecting_failure(
                    model, extra, DEFAULT_LOG_DIR / f"ops-bad-{name}-{self.stamp}-{attempt}.log")
                if not bind_failed(result["log"]):
                    break
            self.results[name] = result
        except BaseException as e:
            self.results[name] = {"rc": None, "healthy": None, "alive": [], "log": repr(e)}

    def start(self) -> None:
        with self.lock:
            if self.threads:
                return
            DEFAULT_LOG_DIR.mkdir(parents=True, exist_ok=True)
            for name in self.cases:
                t = threading.Thread(target=self._run, args=(name,), name=f"bad-{name}",
                                     daemon=True)
                t.start()
                self.threads.append(t)

    def join(self) -> dict[str, dict]:
        self.start()
        for t in self.threads:
            t.join()
        REPORT["bad_starts"] = {n: {k: v for k, v in r.items() if k != "log"}
                                for n, r in self.results.items()}
        return self.results
