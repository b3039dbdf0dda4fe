"""Equality gate, boots: one server boot per arm (islands off, islands on), its workload run,
the pool readings from its gauges, and its log scanned for the server's own alarms.

A boot records, per request name, the prompt it sent (chained prompts are built from this boot's
own outputs, as a client would) and what it got back (``Served``). Pool readings are tokens, from
the ``--enable-metrics`` gauges ``sglang:{kv,swa}_{available,evictable,used}_tokens``.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import pathlib
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Optional

from islands_harness.client import Metrics, StreamingRequest, fetch_metrics
from islands_harness.server import SglangServer, drop_benign_warnings

from .setup import common_env, common_server_args, say, server_python, shim_dir
from .workload import Req, Step, all_reqs

SHIM_MARKER = "[wrong_frontier shim]"
CUDA_BASE_ARGS = ("--device", "cuda", "--random-seed", "0", "--skip-server-warmup")


# Server-log lines that mean the server's own accounting checks fired.
LOG_ALARMS = (
    "memory leak detected",
    "Mem Leak Detected",
    "KV double free",
    "use-after-free",
    "Traceback (most recent call last)",
)


@dataclasses.dataclass
class Served:
    output_ids: list[int]
    cached_tokens: int
    prompt_tokens: int
    sent_at_completion: Optional[int] = None  # probes: the parent's streamed tokens when sent


@dataclasses.dataclass
class BootData:
    """One arm's prompts and results by request name: a boot's, or a saved reference's."""

    prompts: dict[str, list[int]]
    results: dict[str, Served]


class DeviceServer(SglangServer):
    """islands_harness.server.SglangServer with another fixed argument set in place of its
    CPU-only BASE_ARGS (which include --disable-cuda-graph and --device cpu, and cannot be undone
    by later arguments): the GPU gate's launcher. The lifecycle (free port, health wait, process
    group stop) is SglangServer's."""

    def __init__(self, *a, base_args: tuple[str, ...] = CUDA_BASE_ARGS, **kw):
        super().__init__(*a, **kw)
        self.base_args = list(base_args)

    def command(self) -> list[str]:
        assert self.port is not None
        return [self.python, "-m", "sglang.launch_server", "--model-path", self.model_path,
                *self.base_args, "--host", self.host, "--port", str(self.port), *self.extra_args]


def gauge(metrics: Metrics, name: str, default: Optional[float] = None) -> Optional[float]:
    return metrics.value(name, default=default)


POOL_GAUGES = {
    "full": ("sglang:kv_available_tokens", "sglang:kv_evictable_tokens", "sglang:kv_used_tokens"),
    "swa": ("sglang:swa_available_tokens", "sglang:swa_evictable_tokens", "sglang:swa_used_tokens"),
}


HOST_USED = "sglang:hicache_host_used_tokens"
"""HiCache's host tier in use (tokens); absent without --enable-hierarchical-cache."""


def pool_reading(metrics) -> dict[str, Any]:
    r: dict[str, Any] = {"running": gauge(metrics, "sglang:num_running_reqs", 0.0)}
    for pool, (a, e, u) in POOL_GAUGES.items():
        r[pool] = {"available": gauge(metrics, a), "evictable": gauge(metrics, e),
                   "used": gauge(metrics, u)}
    host = gauge(metrics, HOST_USED, None)
    if host is not None:
        r["host_used"] = host
    return r


def fmt_pool(p: dict[str, Any]) -> str:
    return f"avail {p['available']:.0f} + evictable {p['evictable']:.0f} + used {p['used']:.0f}"


def stream_generate(base_url: str, ids: list[int], n: int,
                    on_progress: Callable[[list[int]], None], timeout: float) -> Served:
    """Streaming greedy /generate; `on_progress(output_ids_so_far)` after every chunk."""
    res = StreamingRequest(base_url, ids, n, timeout=timeout, on_progress=on_progress,
                           name="base").start().wait(timeout)
    return Served(res.output_ids, res.cached_tokens, res.prompt_tokens)


def alarm_lines(text: str) -> list[str]:
    """The log's alarm lines (``LOG_ALARMS``), less those of a benign warning
    (``islands_harness.server.drop_benign_warnings``)."""
    text, _ = drop_benign_warnings(text)
    return [ln.strip()[:300] for ln in text.splitlines() if any(a in ln for a in LOG_ALARMS)]


class Boot:
    """One server boot: start, workload, conservation readings, stop."""

    def __init__(self, label: str, model_dir: pathlib.Path, page: int, islands: bool,
                 args: argparse.Namespace, shim: bool = False):
        self.label = label
        self.page = page
        self.islands = islands
        self.shim = shim
        self.server_args = common_server_args(args, page) + (
            ["--enable-swa-islands"] if islands else [])
        if shim and getattr(args, "target", "0.5.15") == "main":
            # The main shim moves the frontier of main's commit-time free, which the lru order's
            # default reclaim makes at every commit at this pool. The default eviction (auto) takes
            # the window order here, whose reclaim (lazy) frees nothing at a commit: the shim would
            # free SWA the tree still owns, and the boot dies of the double frees (negative SWA
            # usage, then an allocation failure) before its outputs can be compared.
            self.server_args += ["--swa-islands-eviction", "lru"]
        self.env = common_env(args.device, page, args.kv_page_invariants)
        if shim:
            # Control only: the shim, and the server's own checks off (they would stop the server
            # at the first accounting mismatch, before the outputs can be compared).
            pp = os.environ.get("PYTHONPATH", "")
            shim_path = shim_dir(getattr(args, "target", "0.5.15"))
            self.env["PYTHONPATH"] = str(shim_path) + (os.pathsep + pp if pp else "")
            self.env["SGLANG_ENABLE_STRICT_MEM_CHECK_DURING_BUSY"] = "0"
            self.env["SGLANG_ENABLE_STRICT_MEM_CHECK_DURING_IDLE"] = "0"
            self.env["SGLANG_CHECK_KV_PAGE_INVARIANTS"] = "0"
            if args.wrong_frontier_shift is not None:
                self.env["SWA_WRONG_FRONTIER_SHIFT"] = str(args.wrong_frontier_shift)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        log = pathlib.Path(args.log_dir) / f"{stamp}-{args.device}-p{page}-{label}.log"
        kw = dict(env=self.env, omp_threads=args.omp_threads, log_path=log,
                  boot_timeout_s=args.boot_timeout, python=server_python(args))
        if args.device == "cpu":
            self.srv: SglangServer = SglangServer(model_dir, self.server_args, **kw)
        else:
            self.srv = DeviceServer(model_dir, self.server_args, **kw)
        self.request_timeout = args.request_timeout
        self.prompts: dict[str, list[int]] = {}
        self.results: dict[str, Served] = {}
        self.readings: dict[str, Any] = {}
        self.error: Optional[str] = None
        self.metrics_end = Metrics([])
        self.work_s = 0.0

    # -- lifecycle
    def start(self) -> None:
        try:
            self.srv.start()
        except Exception as e:  # noqa: BLE001
            self.error = f"boot failed: {e}"

    def stop(self) -> None:
        try:
            self.srv.stop()
        except Exception as e:  # noqa: BLE001
            self.error = self.error or f"stop failed: {e}"

    def metrics(self) -> Metrics:
        return fetch_metrics(self.srv.base_url)

    # -- workload
    def resolve(self, r: Req, partial: Optional[list[int]] = None) -> list[int]:
        if r.ids is not None:
            return list(r.ids)
        out = partial if partial is not None else self.results[r.parent].output_ids
        take = list(out) if r.take is None else list(out[:r.take])
        if r.take is not None and len(take) < r.take:
            raise RuntimeError(f"{r.name}: parent {r.parent} has only {len(take)} tokens")
        return self.prompts[r.parent] + take + list(r.extra)

    def _generate(self, r: Req, ids: list[int]) -> Served:
        self.prompts[r.name] = ids
        g = self.srv.generate(ids, r.n, timeout=self.request_timeout)
        return Served(g.output_ids, g.cached_tokens, g.prompt_tokens)

    @property
    def host_tier(self) -> bool:
        return "--enable-hierarchical-cache" in self.server_args

    def settle_probe(self) -> None:
        """With a host tier, the health probe's one cached token is written through to the host
        under a lock the next scheduler step releases, and an idle scheduler publishes no gauges:
        the same probe again (a full hit, nothing new to back up) makes that step, so the
        reading shows the pools settled."""
        import requests

        if self.host_tier:
            requests.get(f"{self.srv.base_url}/health_generate", timeout=60)

    def run(self, steps: list[Step]) -> None:
        t = time.monotonic()
        self.settle_probe()
        self.readings["boot"] = pool_reading(self.metrics())
        done = 0
        total = len(all_reqs(steps))
        try:
            for st in steps:
                if st.kind == "seq":
                    r = st.reqs[0]
                    self.results[r.name] = self._generate(r, self.resolve(r))
                elif st.kind == "conc":
                    barrier = threading.Barrier(len(st.reqs))
                    prompts = {r.name: self.resolve(r) for r in st.reqs}

                    def go(r):
                        barrier.wait()
                        return self._generate(r, prompts[r.name])

                    with ThreadPoolExecutor(len(st.reqs)) as ex:
                        futs = {r.name: ex.submit(go, r) for r in st.reqs}
                        for name, f in futs.items():
                            self.results[name] = f.result()
                elif st.kind == "midrun":
                    self._midrun(st)
                done += len(st.reqs)
                names = ", ".join(f"{r.name}(cached {self.results[r.name].cached_tokens})"
                                  for r in st.reqs)
                say(f"  [{self.label} p{self.page}] {done}/{total}: {names}")
        except Exception as e:  # noqa: BLE001
            self.error = (f"request failed after {done}/{total} requests: {e!r}; "
                          f"server log {self.srv.log_path}:\n{self.srv.log_tail(15)}")
        self.work_s = time.monotonic() - t

    def _midrun(self, st: Step) -> None:
        base, probes = st.reqs[0], st.reqs[1:]
        pending = sorted(probes, key=lambda p: p.trigger)
        ex = ThreadPoolExecutor(max(1, len(probes)))
        futs: dict[str, Any] = {}
        sent_at: dict[str, int] = {}

        def send(p: Req, so_far: list[int]) -> None:
            sent_at[p.name] = len(so_far)
            ids = self.resolve(p, partial=so_far)
            futs[p.name] = ex.submit(self._generate, p, ids)

        def on_progress(so_far: list[int]) -> None:
            while pending and len(so_far) >= pending[0].trigger:
                send(pending.pop(0), so_far)

        try:
            base_ids = self.resolve(base)
            self.prompts[base.name] = base_ids
            res = stream_generate(self.srv.base_url, base_ids, base.n, on_progress,
                                  self.request_timeout)
            self.results[base.name] = res
            while pending:  # not triggered (trigger >= n): send after the fact
                send(pending.pop(0), res.output_ids)
            for name, f in futs.items():
                s = f.result()
                s.sent_at_completion = sent_at[name]
                self.results[name] = s
        finally:
            ex.shutdown(wait=True)

    # -- conservation
    def end_of_workload_and_flush(self) -> None:
        """Reading with nothing running (the decode log of the step that finished the last
        request, or the idle log if that one is not clean yet), then /flush_cache."""
        m = self.metrics()
        self.metrics_end = m
        r = pool_reading(m)
        if not all(r[p]["used"] == 0 for p in POOL_GAUGES):
            say(f"  [{self.label} p{self.page}] end-of-workload gauges not clean yet "
                f"(running {r['running']:.0f}); waiting for the scheduler's idle log (<= 40 s)")
            deadline = time.monotonic() + 40
            while time.monotonic() < deadline:
                time.sleep(2)
                r = pool_reading(self.metrics())
                if r["running"] == 0 or all(r[p]["used"] == 0 for p in POOL_GAUGES):
                    break
        self.readings["end"] = r
        self.flush_cache()

    def flush_cache(self, tries: int = 40) -> None:
        """/flush_cache, retried: the scheduler refuses it ("pending requests") until it has
        retired the last request, which can lag the HTTP response by a scheduler step."""
        for i in range(tries):
            try:
                self.srv.flush_cache()
                return
            except Exception:  # noqa: BLE001  (ServerError: 400 "Flush cache failed")
                if i == tries - 1:
                    raise
                time.sleep(0.25)

    def after_flush(self) -> None:
        """Reading after /flush_cache. Right after boot the pools had served exactly one request,
        the server's own /health_generate probe (input_ids [0], one token), which may leave a
        token or two cached. So the gate sends that same probe again and expects the gauges to
        read exactly as right after boot; if they do not within 15 s, it waits (up to 45 s) for
        the scheduler's idle log and keeps what that one says."""
        import requests

        requests.get(f"{self.srv.base_url}/health_generate", timeout=60)
        self.settle_probe()
        boot = self.readings.get("boot")
        t = time.monotonic()
        while True:
            r = pool_reading(self.metrics())
            if boot and all(r[p] == boot[p] for p in POOL_GAUGES) and (
                    r.get("host_used") == boot.get("host_used")):
                break
            if time.monotonic() - t > 15 and (r["running"] == 0 or time.monotonic() - t > 45):
                break
            time.sleep(1)
        self.readings["flushed"] = r

    def _log_lines(self, pred) -> list[str]:
        try:
            text = pathlib.Path(self.srv.log_path).read_text(errors="replace")
        except OSError:
            return []
        return [ln.strip()[:300] for ln in text.splitlines() if pred(ln)]

    def log_alarms(self) -> list[str]:
        try:
            text = pathlib.Path(self.srv.log_path).read_text(errors="replace")
        except OSError:
            return []
        return alarm_lines(text)

    def shim_lines(self) -> list[str]:
        return self._log_lines(lambda ln: SHIM_MARKER in ln)
