"""Boot the real SGLang server (`python -m sglang.launch_server`) on CPU, talk to it, stop it.

    from islands_harness.server import SglangServer
    with SglangServer(model_dir, extra_args=["--page-size", "1", "--chunked-prefill-size", "64"]) as srv:
        r = srv.generate([5, 6, 7], max_new_tokens=8)
        r.output_ids, r.cached_tokens

The server runs with the interpreter of this process (the project's `.venv`), in its own process
group, with `SGLANG_USE_CPU_ENGINE=1` and the fixed CPU argument set `BASE_ARGS` (torch_native
attention, fp32, no CUDA graphs, no warmup, no grammar backend, random seed 0). Caller arguments
come after `BASE_ARGS`, so they win where argparse keeps the last value.

Lifecycle guarantees:
- a requested port that is already taken raises `PortInUseError` before anything is launched;
- without one, the server gets a port reserved for its lifetime (`reserve_free_port`: below the
  kernel's ephemeral range, so no socket a running server opens on its own takes it, and held by
  an `flock` that every harness process honours); a boot whose port was taken anyway is retried on
  a fresh port, up to `BOOT_ATTEMPTS` boots, each retry logged on stderr;
- `start()` returns only once `/health_generate` answers 200; if the process exits first, or the
  boot timeout passes, it stops what it started and raises `ServerStartError` with the log tail;
- `stop()` sends SIGTERM to the whole process group, SIGKILL after `grace_s`, and raises
  `ServerStopError` if any process of the group (or any descendant seen while running) survives.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import pathlib
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Iterable, Sequence

import psutil
import requests

from islands_harness.client import GenerateResult, ServerError, fetch_metrics, generate

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
DEFAULT_LOG_DIR = REPO_ROOT / ".work" / "server-logs"
HOST = "127.0.0.1"

BASE_ARGS = (
    "--device", "cpu",
    "--attention-backend", "torch_native",
    "--dtype", "float32",
    "--disable-cuda-graph",
    "--skip-server-warmup",
    "--grammar-backend", "none",
    "--random-seed", "0",
    "--mem-fraction-static", "0.05",
)


class PortInUseError(ServerError):
    pass


class ServerStartError(ServerError):
    pass


class ServerStopError(ServerError):
    pass


def port_is_free(port: int, host: str = HOST) -> bool:
    """True when `host:port` can be bound (same test as the server's own bind: SO_REUSEADDR)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


GRPC_PORT_OFFSET = 10000
"""sglang's default ``SGLANG_GRPC_PORT`` is ``--port + 10000`` (validated to be <= 65535)."""
PORT_RESERVATIONS = pathlib.Path(tempfile.gettempdir()) / "islands-harness-ports"
BOOT_ATTEMPTS = 3

BENIGN_TRACEBACK_WARNINGS = ("post-warmup freeze_gc failed",)
"""Warnings the server logs with a traceback and survives, which are not an alarm: sglang 0.5.23's
HTTP server posts /freeze_gc after warmup (also with ``--skip-server-warmup``) and, on a loaded
machine, can do so before its own port accepts connections (a ConnectionRefusedError traceback at
boot, before any request). Every other traceback is an alarm."""


def drop_benign_warnings(text: str) -> tuple[str, dict[str, int]]:
    """A server log without the records of :data:`BENIGN_TRACEBACK_WARNINGS` (a record: the
    warning's line and the lines up to the next one that starts with ``[``, a timestamp), and the
    tracebacks each dropped warning carried."""
    kept, dropped, current = [], {}, None
    for ln in text.splitlines(keepends=True):
        warning = next((w for w in BENIGN_TRACEBACK_WARNINGS if w in ln), None)
        if warning is not None:
            current = warning
            dropped.setdefault(warning, 0)
            continue
        if current is not None and ln.startswith("["):
            current = None
        if current is None:
            kept.append(ln)
        elif ln.startswith("Traceback (most recent call last)"):
            dropped[current] += 1
    return "".join(kept), {w: n for w, n in dropped.items() if n}
"""Boots tried on fresh ports when a chosen port is taken before the server binds it."""


def ephemeral_port_range() -> tuple[int, int]:
    """The kernel's ephemeral ports ``[lo, hi]``: what ``bind(0)`` hands out, so what sglang's own
    ``get_free_port()`` (its NCCL/gloo port) and every client socket of any process may take."""
    try:
        lo, hi = pathlib.Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(lo), int(hi)
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def harness_port_range() -> tuple[int, int]:
    """Ports ``[lo, hi)`` the harness hands out: ``port`` and ``port + 10000`` both below the
    ephemeral range, so no socket a running server opens on its own can take a port the
    harness gives to another server. ``[10000, 22768)`` with Linux's default range."""
    eph_lo, _ = ephemeral_port_range()
    hi = min(eph_lo, 65536) - GRPC_PORT_OFFSET
    if hi - 10000 < 1000:
        raise ServerError(
            f"the ephemeral port range starts at {eph_lo}: no room below it for a server port "
            f"and its +{GRPC_PORT_OFFSET} gRPC port")
    return 10000, hi


class PortReservation:
    """A port no other harness process hands out while this is held: an exclusive ``flock`` on
    ``PORT_RESERVATIONS/<port>.lock`` (released by ``release()`` or when the process dies)."""

    def __init__(self, port: int, fh):
        self.port = port
        self._fh = fh

    def release(self) -> None:
        if self._fh is not None:
            fcntl.flock(self._fh, fcntl.LOCK_UN)
            self._fh.close()
            self._fh = None


def reserve_free_port(host: str = HOST, rng: random.Random | None = None) -> PortReservation:
    """A random port of :func:`harness_port_range` that no other harness process holds and that
    is free, with ``port + 10000``, right now."""
    rng = rng or random.Random()
    lo, hi = harness_port_range()
    PORT_RESERVATIONS.mkdir(parents=True, exist_ok=True)
    for _ in range(200):
        port = rng.randrange(lo, hi)
        fh = open(PORT_RESERVATIONS / f"{port}.lock", "a")
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.close()
            continue
        reservation = PortReservation(port, fh)
        if port_is_free(port, host) and port_is_free(port + GRPC_PORT_OFFSET, host):
            return reservation
        reservation.release()
    raise ServerError(f"no free port found on {host} in [{lo}, {hi})")


def pick_free_port(host: str = HOST) -> int:
    """A free port for a server started by hand (see :func:`reserve_free_port`); the port is not
    held, so prefer ``SglangServer(port=None)``, which reserves it for the server's lifetime."""
    r = reserve_free_port(host)
    r.release()
    return r.port


_BIND_FAILED = re.compile(r"address already in use|\[Errno 98\]", re.IGNORECASE)


def bind_failed(log_text: str) -> bool:
    """Whether a boot log says a port the server tried to bind was taken."""
    return bool(_BIND_FAILED.search(log_text))


def process_tree_cpu_seconds(pid: int | None) -> float | None:
    """User + system CPU seconds used so far by ``pid`` and its descendants (the server's scheduler,
    tokenizer manager and detokenizer); None when the process is gone."""
    if pid is None:
        return None
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return None
    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.NoSuchProcess:
            pass
    return total


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _group_members(pgid: int) -> list[psutil.Process]:
    members = []
    for p in psutil.process_iter(["pid"]):
        try:
            if os.getpgid(p.pid) == pgid and _alive(p):
                members.append(p)
        except (ProcessLookupError, psutil.NoSuchProcess, PermissionError):
            continue
    return members


class SglangServer:
    """One real `sglang.launch_server` process tree on 127.0.0.1 (see the module docstring)."""

    def __init__(
        self,
        model_path: str | os.PathLike,
        extra_args: Iterable[str] = (),
        *,
        port: int | None = None,
        host: str = HOST,
        omp_threads: int = 2,
        env: dict[str, str] | None = None,
        log_path: str | os.PathLike | None = None,
        boot_timeout_s: float = 300.0,
        grace_s: float = 15.0,
        python: str | None = None,
        sample_rss: bool = False,
        rss_interval_s: float = 0.25,
    ):
        self.model_path = str(model_path)
        self.extra_args = [str(a) for a in extra_args]
        self.host = host
        self.requested_port = port
        self.port: int | None = None
        self.omp_threads = omp_threads
        self.extra_env = dict(env or {})
        self.log_path = pathlib.Path(log_path) if log_path else None
        self._auto_log = log_path is None
        self.boot_timeout_s = boot_timeout_s
        self.grace_s = grace_s
        self.python = python or sys.executable
        self.sample_rss = sample_rss
        self.rss_interval_s = rss_interval_s

        self.proc: subprocess.Popen | None = None
        self.boot_s: float | None = None
        self.peak_rss_bytes = 0
        self._seen: dict[int, psutil.Process] = {}
        self._log_fh = None
        self._sampler: threading.Thread | None = None
        self._sampler_stop = threading.Event()
        self._reservation: PortReservation | None = None
        self.boot_retries = 0  # boots retried on a fresh port (see start)

    # ---- lifecycle -------------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        if self.port is None:
            raise ServerError("server not started")
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def command(self) -> list[str]:
        assert self.port is not None
        return [self.python, "-m", "sglang.launch_server", "--model-path", self.model_path,
                *BASE_ARGS, "--host", self.host, "--port", str(self.port), *self.extra_args]

    def start(self) -> "SglangServer":
        """Boot and wait until healthy. Without a requested port the server gets a reserved one
        (:func:`reserve_free_port`); if a port is still taken at boot (a process outside the
        harness bound it after the check), the boot is retried on a fresh port, up to
        ``BOOT_ATTEMPTS`` boots, each retry logged on stderr."""
        if self.proc is not None:
            raise ServerError("server already started")
        if self.requested_port is not None:
            if not port_is_free(self.requested_port, self.host):
                raise PortInUseError(
                    f"port {self.requested_port} on {self.host} is already in use; "
                    f"not launching sglang (pick another port or stop whatever listens there)")
            self.port = self.requested_port
            return self._boot()
        for attempt in range(1, BOOT_ATTEMPTS + 1):
            self._reservation = reserve_free_port(self.host)
            self.port = self._reservation.port
            try:
                return self._boot()
            except ServerStartError:
                if attempt == BOOT_ATTEMPTS or not bind_failed(self.log_tail(400)):
                    raise
                self.boot_retries += 1
                print(f"[islands_harness.server] port {self.port} was taken before the server "
                      f"bound it (boot {attempt} of {BOOT_ATTEMPTS}, log {self.log_path}); "
                      f"retrying on a fresh port", file=sys.stderr)
        raise AssertionError("unreachable")

    def _boot(self) -> "SglangServer":
        if self._auto_log:
            DEFAULT_LOG_DIR.mkdir(parents=True, exist_ok=True)
            self.log_path = DEFAULT_LOG_DIR / f"sglang-{self.port}-{time.strftime('%Y%m%d-%H%M%S')}.log"
        self.log_path.parent.mkdir(parents=True, exist_ok=True)

        env = dict(os.environ)
        env["SGLANG_USE_CPU_ENGINE"] = "1"  # is_cpu() true: native CPU fallbacks, no vllm RoPE
        env["OMP_NUM_THREADS"] = str(self.omp_threads)
        env.setdefault("PYTHONUNBUFFERED", "1")
        env.update(self.extra_env)

        # a retry on a caller's log path appends, so the failed boot stays readable
        self._log_fh = open(self.log_path, "ab" if self.boot_retries else "wb")
        self._log_fh.write(("$ " + " ".join(self.command()) + "\n").encode())
        self._log_fh.flush()
        t0 = time.monotonic()
        self.proc = subprocess.Popen(self.command(), stdout=self._log_fh, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env=env, cwd=str(REPO_ROOT),
                                     start_new_session=True)
        if self.sample_rss:
            self._sampler_stop.clear()
            self._sampler = threading.Thread(target=self._sample_loop, name="rss-sampler",
                                             daemon=True)
            self._sampler.start()
        try:
            self._wait_healthy(t0)
        except BaseException:
            self._stop_quietly()
            raise
        self.boot_s = time.monotonic() - t0
        return self

    def _wait_healthy(self, t0: float) -> None:
        deadline = t0 + self.boot_timeout_s
        url = f"{self.base_url}/health_generate"
        while True:
            self._remember_tree()
            rc = self.proc.poll()
            if rc is not None:
                raise ServerStartError(
                    f"sglang server exited with code {rc} before becoming healthy "
                    f"(log {self.log_path}):\n{self.log_tail()}")
            try:
                if requests.get(url, timeout=10).status_code == 200:
                    return
            except requests.RequestException:
                pass
            if time.monotonic() > deadline:
                raise ServerStartError(
                    f"sglang server not healthy after {self.boot_timeout_s:.0f} s "
                    f"(log {self.log_path}):\n{self.log_tail()}")
            time.sleep(0.5)

    def log_tail(self, lines: int = 40) -> str:
        if not self.log_path or not self.log_path.exists():
            return "<no log>"
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def _remember_tree(self) -> None:
        """Record every descendant seen, so stop() can check them even if they left the group."""
        if self.proc is None:
            return
        try:
            root = psutil.Process(self.proc.pid)
            for p in [root, *root.children(recursive=True)]:
                self._seen.setdefault(p.pid, p)
        except psutil.NoSuchProcess:
            pass

    def tree_rss_bytes(self) -> int:
        """Resident set size of the server process and all its descendants, in bytes."""
        if self.proc is None:
            return 0
        try:
            root = psutil.Process(self.proc.pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return 0
        total = 0
        for p in procs:
            self._seen.setdefault(p.pid, p)
            try:
                total += p.memory_info().rss
            except psutil.NoSuchProcess:
                pass
        return total

    def _sample_loop(self) -> None:
        while not self._sampler_stop.is_set():
            self.peak_rss_bytes = max(self.peak_rss_bytes, self.tree_rss_bytes())
            self._sampler_stop.wait(self.rss_interval_s)

    def stop(self) -> None:
        """Terminate the whole process group by PID; raise if anything is left running. The port
        reservation is released once the group is gone."""
        if self.proc is None:
            self._release_port()
            return
        self._sampler_stop.set()
        if self._sampler is not None:
            self._sampler.join(timeout=5)
        self._remember_tree()
        pgid = self.proc.pid  # start_new_session: the leader's pid is the group id
        try:
            os.killpg(pgid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + self.grace_s
        while time.monotonic() < deadline:
            self.proc.poll()
            if not _group_members(pgid) and not [p for p in self._seen.values() if _alive(p)]:
                break
            time.sleep(0.2)
        leftovers = {p.pid: p for p in _group_members(pgid)}
        leftovers.update({p.pid: p for p in self._seen.values() if _alive(p)})
        for p in leftovers.values():
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        psutil.wait_procs(list(leftovers.values()), timeout=10)
        if self._log_fh:
            self._log_fh.close()
            self._log_fh = None
        survivors = [p.pid for p in _group_members(pgid)] + [
            p.pid for p in self._seen.values() if _alive(p)]
        self.proc = None
        if not survivors:
            self._release_port()
        if survivors:
            raise ServerStopError(f"sglang processes still running after SIGKILL: "
                                  f"{sorted(set(survivors))}")

    def _release_port(self) -> None:
        if self._reservation is not None:
            self._reservation.release()
            self._reservation = None

    def _stop_quietly(self) -> None:
        try:
            self.stop()
        except ServerStopError as e:  # the start error is the one to report
            print(f"[islands_harness.server] {e}", file=sys.stderr)

    def __enter__(self) -> "SglangServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ---- requests --------------------------------------------------------------------------
    def generate(self, input_ids: Sequence[int], max_new_tokens: int, *, ignore_eos: bool = True,
                 sampling_params: dict[str, Any] | None = None,
                 timeout: float = 600.0) -> GenerateResult:
        """One greedy (temperature 0) `/generate` request on token ids (`client.generate`)."""
        return generate(self.base_url, input_ids, max_new_tokens, ignore_eos=ignore_eos,
                        sampling_params=sampling_params, timeout=timeout)

    def flush_cache(self, wait_s: float = 60.0) -> None:
        """Flush the radix cache once the server is idle.

        A plain /flush_cache refuses (400) while any request is running or waiting, which includes
        the short moment after a response before the overlap scheduler retires its last batch;
        ``?timeout=S`` makes the server wait up to S seconds for idleness instead.
        """
        r = requests.post(f"{self.base_url}/flush_cache", params={"timeout": wait_s},
                          timeout=wait_s + 60)
        if r.status_code != 200:
            raise ServerError(f"/flush_cache returned {r.status_code}: {r.text[:500]}")

    def server_info(self) -> dict[str, Any]:
        """GET /server_info (the same payload as the deprecated /get_server_info: server args,
        scheduler info such as max_total_num_tokens, and per-DP internal_states)."""
        r = requests.get(f"{self.base_url}/server_info", timeout=60)
        r.raise_for_status()
        return r.json()

    def metrics(self) -> dict[str, float]:
        """`/metrics` as `{name: value}`, the last sample of each name (needs `--enable-metrics`;
        `client.fetch_metrics` keeps the labels)."""
        return fetch_metrics(self.base_url).last_per_name()


def raise_keyboard_interrupt_on_signals() -> None:
    """SIGINT and SIGTERM both raise KeyboardInterrupt, so `with SglangServer(...)` / `finally:
    stop()` run. (A process started in the background by a non-interactive shell inherits SIGINT
    ignored, and an unhandled SIGTERM would skip cleanup and orphan the server.)"""
    fired = []

    def _raise(signum, frame):
        if fired:  # already stopping: let cleanup finish
            return
        fired.append(signum)
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGINT, _raise)
    signal.signal(signal.SIGTERM, _raise)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m islands_harness.server",
        description="Boot the real SGLang server on CPU (tiny hybrid-SWA model by default) and keep "
                    "it running until Ctrl-C. Arguments after `--` go to sglang.launch_server.",
        epilog="example: python -m islands_harness.server --port 30000 -- --page-size 1 "
               "--chunked-prefill-size 512 --enable-metrics")
    ap.add_argument("--model", default=None, help="model directory (default: the tiny model)")
    ap.add_argument("--window", type=int, default=32, help="tiny-model sliding window")
    ap.add_argument("--port", type=int, default=None, help="default: a free port")
    ap.add_argument("--omp-threads", type=int, default=2)
    ap.add_argument("--log", default=None, help="server log file")
    ap.add_argument("--boot-timeout", type=float, default=300.0)
    ap.add_argument("extra", nargs=argparse.REMAINDER, help="-- then sglang arguments")
    a = ap.parse_args(argv)
    extra = a.extra[1:] if a.extra[:1] == ["--"] else a.extra
    model = a.model
    if model is None:
        from islands_harness.tiny_model import build_tiny_model
        model = build_tiny_model(window=a.window)
    srv = SglangServer(model, extra, port=a.port, omp_threads=a.omp_threads, log_path=a.log,
                       boot_timeout_s=a.boot_timeout)
    raise_keyboard_interrupt_on_signals()
    try:
        srv.start()
    except KeyboardInterrupt:
        print("interrupted while booting; the server was stopped", flush=True)
        return 130  # start() already stopped what it launched
    print(f"sglang up at {srv.base_url} (pid {srv.pid}, boot {srv.boot_s:.1f} s, log {srv.log_path});"
          f" Ctrl-C to stop", flush=True)
    try:
        while srv.proc.poll() is None:
            time.sleep(1)
        print(f"server exited with code {srv.proc.returncode}; log tail:\n{srv.log_tail()}")
    except KeyboardInterrupt:
        print("stopping", flush=True)
    finally:
        srv.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
