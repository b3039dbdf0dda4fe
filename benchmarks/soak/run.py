"""The soak itself: one server, the client threads, an idle point every ``idle_every_s`` seconds of
traffic, and every check (``cli``'s docstring lists them); ``Soak.report`` is the JSON report."""

from __future__ import annotations

import dataclasses
import pathlib
import threading
import time
from collections import Counter
from typing import Any, Callable, Optional

import _bench_path  # noqa: F401  (the repository root and benchmarks/ on sys.path)
from islands_harness.ops import flush_ok, mval, pool_snapshot, scrape, wait_idle
from islands_harness.server import SglangServer, drop_benign_warnings, process_tree_cpu_seconds
from soak.report import NEAR_TIE_BY_MODEL, is_near_tie
from soak.setup import (HOST_USED, LOAD_BACK, REQUEST_TIMEOUT_S, RETRACTED, TRACEBACK,
                        SoakConfig, server_command, server_env)
from soak.workload import UNCHECKED_IDS, Client, Traffic, malformed_payloads


def count_tracebacks(log: str) -> tuple[int, dict[str, int]]:
    """Tracebacks in a server log, and, apart, those of upstream's benign warnings
    (``islands_harness.server.drop_benign_warnings``)."""
    rest, benign = drop_benign_warnings(log)
    return len(TRACEBACK.findall(rest)), benign


def vocab_checked(cfg: SoakConfig) -> bool:
    """Whether the server refuses out-of-vocabulary ids with a 400: all but stock 0.5.23
    (``workload.UNCHECKED_IDS``)."""
    return cfg.islands or cfg.target != "main"


class Soak:
    def __init__(self, cfg: SoakConfig, model_dir: pathlib.Path, vocab: int, real_vocab: int,
                 log_path: pathlib.Path, progress: Callable[[str], None],
                 assistant_dir: Optional[pathlib.Path] = None):
        self.cfg, self.model_dir, self.progress = cfg, model_dir, progress
        args, python = server_command(cfg, assistant_dir)
        self.srv = SglangServer(model_dir, args, env=server_env(cfg), log_path=log_path,
                                boot_timeout_s=cfg.boot_timeout_s, sample_rss=True,
                                python=python)
        self.traffic = Traffic(real_vocab, cfg.seed)  # prompt ids in [4, real_vocab)
        self.malformed = malformed_payloads(vocab, vocab_checked=vocab_checked(cfg))
        self.spec_counters: Optional[tuple[float, float]] = None
        self.stop, self.pause = threading.Event(), threading.Event()
        self._idle_clients: set[int] = set()
        self._cv = threading.Condition()
        self.idle_points: list[dict[str, Any]] = []
        self.failures: list[str] = []
        self._checked_upto = 0  # outcomes[:n] compared with the oracle
        self._ref: dict[tuple, list[int]] = {}
        self._check = {"mismatches": [], "checked": 0, "prefixes": 0}

    def paused(self, index: int) -> None:
        with self._cv:
            self._idle_clients.add(index)
            self._cv.notify_all()
        time.sleep(0.05)

    def resume(self, index: int) -> None:
        with self._cv:
            self._idle_clients.discard(index)

    def _wait_clients_paused(self) -> None:
        with self._cv:
            while len(self._idle_clients) < self.cfg.clients:
                self._cv.wait(0.5)

    def idle_point(self, label: str, t0: float, last: dict[str, Any]) -> dict[str, Any]:
        """Traffic paused: everything idle, then the checks (see the module docstring)."""
        load = wait_idle(self.srv, timeout=REQUEST_TIMEOUT_S)
        samples = scrape(self.srv)
        cached = mval(samples, "sglang:kv_evictable_tokens", 0.0)
        flush_ok(self.srv)
        snap = pool_snapshot(self.srv)
        if self.cfg.hicache:  # the host tier too: settled with the device pools' snapshot
            snap[HOST_USED] = mval(scrape(self.srv), HOST_USED)
        if self.baseline is None:
            self.baseline = snap
        cpu = process_tree_cpu_seconds(self.srv.pid) or 0.0
        with self.traffic.lock:
            tokens, counts = self.traffic.tokens, dict(self.traffic.counts)
        point = {
            "label": label, "t_s": round(time.monotonic() - t0, 1),
            "tokens_in_use": load.get("num_tokens"), "cached_tokens_before_flush": cached,
            "pools_at_baseline": snap == self.baseline,
            "retractions": mval(samples, RETRACTED, 0.0),
            "host_loaded_tokens": mval(samples, LOAD_BACK, 0.0),
            "rss_mib": round(self.srv.tree_rss_bytes() / 2**20, 1),
            "server_cpu_s": round(cpu, 1), "tokens": tokens, "counts": counts,
        }
        d_cpu = cpu - last.get("server_cpu_s", 0.0)
        d_tok = tokens - last.get("tokens", 0)
        point["tok_per_cpu_s"] = round(d_tok / d_cpu, 1) if last and d_cpu > 0 else None
        if load.get("num_tokens"):
            self.failures.append(f"{label}: {load['num_tokens']} tokens in use once idle")
        if not point["pools_at_baseline"]:
            self.failures.append(f"{label}: pools after flush {snap} != boot {self.baseline}")
        point["outputs_checked"] = self.check_new_outputs()
        point["mismatches"] = len(self._check["mismatches"])
        self.idle_points.append(point)
        served = sum(v for k, v in counts.items() if not k.startswith(("flush", "malformed")))
        self.progress(f"[{label} {point['t_s']:.0f} s] {served} requests, "
                      f"{point['retractions']:.0f} retractions, pools "
                      f"{'at baseline' if point['pools_at_baseline'] else 'LEAKED'}, "
                      f"RSS {point['rss_mib']:.0f} MiB, {point['tok_per_cpu_s']} tok/CPU-s, "
                      f"{point['outputs_checked']} outputs checked, {point['mismatches']} mismatches")
        return point

    def run(self) -> dict[str, Any]:
        self.srv.start()
        self.progress(f"server healthy in {self.srv.boot_s:.0f} s (islands "
                      f"{'on' if self.cfg.islands else 'off'}); log {self.srv.log_path}")
        t0 = time.monotonic()
        self.baseline = None
        last = self.idle_point("boot", t0, {})  # its pool snapshot is the baseline
        threads = [threading.Thread(target=Client(self, i).run, name=f"client-{i}", daemon=True)
                   for i in range(self.cfg.clients)]
        for t in threads:
            t.start()
        traffic_s, k = 0.0, 0  # seconds of traffic so far (idle points excluded)
        try:
            while traffic_s < self.cfg.minutes * 60 and self.srv.proc.poll() is None:
                run_s = min(self.cfg.idle_every_s, self.cfg.minutes * 60 - traffic_s)
                time.sleep(run_s)
                traffic_s += run_s
                self.pause.set()
                self._wait_clients_paused()
                if self.srv.proc.poll() is not None or traffic_s >= self.cfg.minutes * 60:
                    break
                k += 1
                last = self.idle_point(f"idle {k}", t0, last)
                self.pause.clear()
        finally:
            self.stop.set()
            self.pause.clear()
            for t in threads:
                t.join(timeout=REQUEST_TIMEOUT_S)
        alive = self.srv.proc.poll() is None
        if alive:
            self.idle_point("end", t0, last)
            if self.cfg.speculative != "none":
                from islands_harness.speculative import server_accept_length

                self.spec_counters = server_accept_length(self.srv.base_url)
        else:
            self.failures.append(f"the server died (exit {self.srv.proc.returncode})")
        log = self.srv.log_path.read_text(errors="replace")
        self.srv.stop()
        try:
            return self.report(alive, log, time.monotonic() - t0)
        finally:
            self.close_oracle()

    def report(self, alive: bool, log: str, wall_s: float) -> dict[str, Any]:
        tb, known_tb = count_tracebacks(log)
        if tb:
            self.failures.append(f"{tb} traceback(s) in the server log")
        outs = self.traffic.outcomes
        self.check_new_outputs()
        cfg = self.cfg
        bound = NEAR_TIE_BY_MODEL[cfg.model]
        ties, mismatches = [], []
        for m in self._check["mismatches"]:
            (ties if is_near_tie(m, bound) else mismatches).append(m)
        checked, prefixes = self._check["checked"], self._check["prefixes"]
        if mismatches:
            self.failures.append(f"{len(mismatches)} output(s) differ from transformers")
        counts = Counter(o.kind for o in outs)
        bad = [o for o in outs if o.kind.startswith("malformed_") and o.status != 400]
        if bad:
            self.failures.append(f"{len(bad)} malformed request(s) not answered 400: "
                                 f"{sorted({(o.error, o.status) for o in bad})}")
        errors = [o for o in outs if o.error and not o.kind.startswith(("malformed", "flush"))
                  and o.status not in (400,)]
        if errors:
            self.failures.append(f"{len(errors)} request(s) failed: {errors[0].kind}: "
                                 f"{errors[0].error}")
        fivexx = sum(1 for o in outs if o.status is not None and o.status >= 500)
        if fivexx:
            self.failures.append(f"{fivexx} 5xx answer(s)")
        rss = [p["rss_mib"] for p in self.idle_points]
        if len(rss) >= 2 and rss[-1] > rss[0] * 1.10 + 64:
            self.failures.append(f"RSS grew from {rss[0]} to {rss[-1]} MiB")
        aborted = sum(1 for o in outs if o.kind == "abort" and o.finish == "abort")
        # a request that streamed or returned a token was decoding when cut: under speculative
        # decoding every decode step is a verify, so these landed mid-verify
        aborts_mid = sum(1 for o in outs if o.kind == "abort" and o.finish == "abort"
                         and o.output_ids)
        disconnects_mid = sum(1 for o in outs if o.kind == "disconnect" and (o.events or 0) > 0)
        if cfg.speculative != "none" and not aborts_mid + disconnects_mid:
            self.failures.append("--speculative: no abort or disconnect landed mid-decode")
        spec = {}
        if getattr(self, "spec_counters", None) is not None:
            tokens, verifies = self.spec_counters
            spec = {"spec_generation_tokens": tokens, "spec_verify_calls": verifies,
                    "spec_tokens_per_verify": round(tokens / verifies, 3) if verifies else None}
        loaded = self.idle_points[-1].get("host_loaded_tokens", 0.0) if self.idle_points else 0.0
        if self.cfg.hicache and not loaded:
            self.failures.append("--hicache: no token was loaded back from the host tier")
        return {
            "config": dataclasses.asdict(self.cfg), "server_args": self.srv.extra_args,
            "server_env": self.srv.extra_env, "wall_s": round(wall_s, 1), "alive": alive,
            "requests": counts, "aborted_before_finishing": aborted,
            "aborts_mid_decode": aborts_mid, "disconnects_mid_decode": disconnects_mid,
            "malformed_skipped": [] if vocab_checked(cfg) else list(UNCHECKED_IDS),
            "near_tie_logits": bound, **spec,
            "outputs_checked": checked, "abort_prefixes_checked": prefixes,
            "mismatches": mismatches[:20], "mismatch_count": len(mismatches),
            "near_ties": ties[:20], "near_tie_count": len(ties),
            "leaks": sum(1 for p in self.idle_points if not p["pools_at_baseline"]),
            "tracebacks": tb, "known_warning_tracebacks": known_tb, "http_5xx": fivexx,
            "retractions": self.idle_points[-1]["retractions"] if self.idle_points else None,
            "host_loaded_tokens": loaded,
            "peak_rss_mib": round(self.srv.peak_rss_bytes / 2**20, 1),
            "idle_points": self.idle_points, "failures": self.failures,
            "passed": not self.failures,
        }

    def oracle(self) -> tuple[Callable, Callable]:
        """``(decode(ids, n), margin(ids))``: transformers' greedy ids and next-token margin.
        Laguna in this interpreter; Gemma 4 by `.venv-main-islands`' transformers (5.19, what
        0.5.23 pins: `.venv`'s 5.12 cannot load its layout), one worker kept for the run."""
        from islands_harness.hf_oracle import OracleWorker, greedy_decode_one, next_token_margin

        if getattr(self.cfg, "model", "laguna") == "laguna":
            return (lambda ids, n: greedy_decode_one(self.model_dir, ids, n),
                    lambda ids: next_token_margin(self.model_dir, ids))
        if getattr(self, "_worker", None) is None:
            from islands_harness.main_arm import main_islands_python

            self._worker = OracleWorker(main_islands_python(), self.model_dir)
        return self._worker, self._worker.margin

    def close_oracle(self) -> None:
        if getattr(self, "_worker", None) is not None:
            self._worker.close()
            self._worker = None

    def check_new_outputs(self) -> int:
        """Compare the outcomes recorded since the last call with transformers' greedy decoding
        (every finished request exactly, every aborted one as a prefix), while traffic is paused.
        Returns how many were compared."""
        with self.traffic.lock:
            new = self.traffic.outcomes[self._checked_upto:]
            self._checked_upto += len(new)
        todo = [o for o in new if o.output_ids is not None and o.status == 200
                and o.finish in ("length", "abort")]
        decode, margin = self.oracle() if todo else (None, None)
        for o in todo:
            key = (tuple(o.ids), o.max_new)
            if key not in self._ref:
                self._ref[key] = decode(o.ids, o.max_new)
            want = self._ref[key]
            if o.finish == "length":
                self._check["checked"] += 1
                ok = o.output_ids == want
            else:
                self._check["prefixes"] += 1
                ok = o.output_ids == want[: len(o.output_ids)]
            if not ok:
                first = next((i for i, (a, b) in enumerate(zip(o.output_ids, want)) if a != b),
                             min(len(o.output_ids), len(want)))
                # the reference's next-token margin where the outputs part: a near-tie (a margin
                # of float noise) points at summation order, a wide one at wrong KV
                tie = (margin(list(o.ids) + want[:first])
                       if first < min(len(o.output_ids), len(want)) else None)
                self._check["mismatches"].append({
                    "kind": o.kind, "prompt_tokens": len(o.ids), "max_new": o.max_new,
                    "finish": o.finish, "first_diff": first, "reference_next": tie,
                    "prompt_ids": list(o.ids), "output_ids": list(o.output_ids),
                    "reference_ids": list(want)})
        return len(todo)
