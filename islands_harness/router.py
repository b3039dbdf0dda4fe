"""SGLang's fleet router (Shepherd Model Gateway, ``smg``) in front of running workers.

    with SmgRouter(["http://127.0.0.1:30001", "http://127.0.0.1:30002"], "cache_aware",
                   log_path="router.log") as router:
        generate(router.base_url, ids, 16)

``smg launch --worker-urls URL... --policy POLICY`` from ``.venv-router`` (``scripts/setup_router.sh``),
in its own process group, on a port reserved like a server's (``server.reserve_free_port``), with
its Prometheus listener on a second reserved port (its default, 0.0.0.0:29000, would collide
between two routers and listen on every interface). ``start`` returns once ``GET /workers``
lists every worker healthy and ready; ``stop`` terminates the group and raises if anything is left.
The router forwards ``/generate`` unchanged, so a response's ``meta_info.cached_tokens`` is the
serving worker's.
"""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import time
from typing import Sequence

import requests

from islands_harness.server import HOST, REPO_ROOT, ServerError, reserve_free_port

ROUTER_VENV = REPO_ROOT / ".venv-router"
POLICIES = ("cache_aware", "round_robin")
"""The policies the fleet benchmark compares (smg takes more: random, power_of_two, ...)."""


def smg_binary(venv: pathlib.Path = ROUTER_VENV) -> pathlib.Path:
    """``VENV/bin/smg``; a ``ServerError`` naming the setup script when it is missing."""
    exe = pathlib.Path(venv) / "bin" / "smg"
    if not exe.exists():
        raise ServerError(f"no router at {exe}: run scripts/setup_router.sh (installs smg into "
                          f"{venv})")
    return exe


class SmgRouter:
    """One ``smg launch`` process in front of ``worker_urls`` with ``policy``; a context manager."""

    def __init__(self, worker_urls: Sequence[str], policy: str, *, log_path: str | os.PathLike,
                 extra_args: Sequence[str] = (), boot_timeout_s: float = 60.0,
                 shutdown_grace_s: int = 1, venv: pathlib.Path = ROUTER_VENV):
        """``shutdown_grace_s``: smg's wait for in-flight requests at SIGTERM (its default, 180 s,
        holds an idle router about 5 s; the harness stops a router only once its requests are
        answered)."""
        if not worker_urls:
            raise ValueError("a router needs at least one worker URL")
        self.worker_urls = list(worker_urls)
        self.policy = policy
        self.log_path = pathlib.Path(log_path)
        self.extra_args = [str(a) for a in extra_args]
        self.boot_timeout_s = boot_timeout_s
        self.shutdown_grace_s = shutdown_grace_s
        self.exe = smg_binary(venv)
        self.proc: subprocess.Popen | None = None
        self._reservations = []
        self.port: int | None = None

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def command(self, port: int, prometheus_port: int) -> list[str]:
        return [str(self.exe), "launch", "--host", HOST, "--port", str(port),
                "--prometheus-host", HOST, "--prometheus-port", str(prometheus_port),
                "--worker-urls", *self.worker_urls, "--policy", self.policy,
                "--log-level", "warn", "--shutdown-grace-period-secs", str(self.shutdown_grace_s),
                *self.extra_args]

    def start(self) -> "SmgRouter":
        if self.proc is not None:
            raise ServerError("router already started")
        self._reservations = [reserve_free_port(HOST), reserve_free_port(HOST)]
        self.port = self._reservations[0].port
        cmd = self.command(self.port, self._reservations[1].port)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "wb") as fh:
            fh.write(("$ " + " ".join(cmd) + "\n").encode())
            fh.flush()
            self.proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def workers(self) -> list[dict]:
        """``GET /workers``: the router's view of each worker (url, is_healthy, status, load)."""
        r = requests.get(f"{self.base_url}/workers", timeout=10)
        r.raise_for_status()
        return r.json().get("workers", [])

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.boot_timeout_s
        want = set(self.worker_urls)
        while True:
            if self.proc.poll() is not None:
                raise ServerError(f"smg exited with code {self.proc.returncode} before it was "
                                  f"ready (log {self.log_path}):\n{self._tail()}")
            try:
                ready = {w["url"] for w in self.workers()
                         if w.get("is_healthy") and w.get("status") == "ready"}
                if want <= ready:
                    return
            except (requests.RequestException, ValueError):
                pass
            if time.monotonic() > deadline:
                raise ServerError(f"smg not ready with {len(want)} workers after "
                                  f"{self.boot_timeout_s:.0f} s (log {self.log_path}):\n{self._tail()}")
            time.sleep(0.25)

    def _tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "<no log>"

    def stop(self) -> None:
        """SIGTERM the router's process group, SIGKILL after 10 s; ports released once it is gone."""
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
            self.proc = None
        for r in self._reservations:
            r.release()
        self._reservations = []

    def __enter__(self) -> "SmgRouter":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
