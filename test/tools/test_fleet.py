"""benchmarks/fleet.py and islands_harness/router.py: the real router (``smg`` from .venv-router)
in front of two stand-in HTTP workers (seconds: how it starts, routes by each policy and stops),
the per-worker and fleet records from scheduler log lines, the comparison rules and the report,
plus one smoke run on two real workers behind the router."""

import http.server
import json
import os
import pathlib
import subprocess
import sys
import threading

import pytest

_ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(_ROOT / "benchmarks"))
sys.path.insert(0, str(_ROOT))

from fleet.report import assemble, compare, plot, to_markdown  # noqa: E402
from fleet.run import fleet_record, worker_record  # noqa: E402
from islands_harness.client import generate  # noqa: E402
from islands_harness.router import ROUTER_VENV, SmgRouter  # noqa: E402
from islands_harness.server import ServerError, port_is_free  # noqa: E402

needs_router = pytest.mark.skipif(not (ROUTER_VENV / "bin" / "smg").exists(),
                                  reason="no .venv-router: run scripts/setup_router.sh")


class _Worker(http.server.BaseHTTPRequestHandler):
    """Answers what smg probes at registration, and /generate with the worker's own port as
    ``cached_tokens`` (so a response says which worker served it)."""
    protocol_version = "HTTP/1.1"

    def _json(self, obj):
        body = json.dumps(obj).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if "models" in self.path:
            return self._json({"object": "list", "data": [{"id": "tiny", "object": "model"}]})
        return self._json({"model_path": "tiny", "is_generation": True})

    def do_POST(self):
        n = int(self.headers.get("Content-Length", 0))
        ids = json.loads(self.rfile.read(n) or b"{}").get("input_ids") or []
        port = self.server.server_address[1]
        self._json({"text": "", "output_ids": [1], "meta_info": {
            "prompt_tokens": len(ids), "completion_tokens": 1, "cached_tokens": port, "id": "x"}})

    def log_message(self, *a):
        pass


@pytest.fixture
def workers():
    servers = [http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Worker) for _ in range(2)]
    for s in servers:
        threading.Thread(target=s.serve_forever, daemon=True).start()
    yield servers
    for s in servers:
        s.shutdown()
        s.server_close()


def _urls(servers):
    return [f"http://127.0.0.1:{s.server_address[1]}" for s in servers]


def _served_by(base_url, ids):
    return generate(base_url, ids, 1, timeout=30).cached_tokens


@needs_router
def test_round_robin_alternates_and_stop_frees_the_port(workers, tmp_path):
    ports = {s.server_address[1] for s in workers}
    with SmgRouter(_urls(workers), "round_robin", log_path=tmp_path / "r.log") as r:
        assert {w["url"] for w in r.workers()} == set(_urls(workers))
        served = [_served_by(r.base_url, [1, 2, 3]) for _ in range(4)]
        port = r.port
    assert set(served) == ports and served[0] != served[1] and served[:2] == served[2:]
    assert r.proc is None and port_is_free(port)
    assert (tmp_path / "r.log").read_text().startswith("$ ")


@needs_router
def test_cache_aware_keeps_a_shared_prefix_on_one_worker(workers, tmp_path):
    """Requests that share a 1500-token document go where the first one went, whichever worker
    that was; the fleet benchmark's cache_aware arm relies on it."""
    import random

    rng = random.Random(0)
    docs = [[rng.randrange(1000) for _ in range(1500)] for _ in range(3)]
    with SmgRouter(_urls(workers), "cache_aware", log_path=tmp_path / "r.log") as r:
        served = [[_served_by(r.base_url, d + [rng.randrange(1000) for _ in range(200)])
                   for _ in range(5)] for d in docs]
    for per_doc in served:
        assert len(set(per_doc)) == 1, served


def test_a_missing_router_names_its_setup_script(tmp_path):
    with pytest.raises(ServerError, match="scripts/setup_router.sh"):
        SmgRouter(["http://127.0.0.1:1"], "round_robin", log_path=tmp_path / "r.log",
                  venv=tmp_path / "nothing")
    with pytest.raises(ValueError):
        SmgRouter([], "round_robin", log_path=tmp_path / "r.log")


@needs_router
def test_a_router_whose_worker_never_answers_fails_within_its_timeout(tmp_path):
    with pytest.raises(ServerError, match="not ready|exited"):
        SmgRouter(["http://127.0.0.1:9"], "round_robin", log_path=tmp_path / "r.log",
                  extra_args=["--worker-startup-timeout-secs", "2"], boot_timeout_s=6).start()


# ------------------------------------------------------------------------------ records, report

def _decode(run, queue, swa=100):
    return (f"[2026-12-04 02:00:00] Decode batch, #running-req: {run}, #full token: 10, "
            f"full token usage: 0.01, #swa token: {swa}, swa token usage: 0.10, "
            f"#queue-req: {queue}, ")


def _prefill(new_seq, new_tok, cached, run=0, queue=0):
    return (f"[2026-12-04 02:00:00] Prefill batch, #new-seq: {new_seq}, #new-token: {new_tok}, "
            f"#cached-token: {cached}, full token usage: 0.01, swa token usage: 0.10, "
            f"#running-req: {run}, #queue-req: {queue}, ")


def test_worker_record_reads_its_log_slice():
    counted = {"requests": 2.0, "prompt_tokens": 1500.0, "cached_tokens": 1200.0}
    w = worker_record([_prefill(1, 300, 1200, 0, 3), _prefill(1, 0, 0, 1, 3), _decode(2, 3, 400),
                       _decode(4, 1, 500), _decode(4, 0, 450),
                       "[2026-12-04 02:00:01] #retracted_reqs: 1, x"], counted)
    assert w["requests"] == 2 and w["prompt_tokens"] == 1500 and w["cached_tokens"] == 1200
    assert w["cached_tokens_log"] == 1200 and w["retractions"] == 1
    assert w["running_while_queued"] == 3.0 and w["queued_steps"] == 2
    assert w["max_running"] == 4 and w["peak_swa_used"] == 500


def _rows(cached, n=4):
    return [{"order": [i], "prompt_tokens": 100, "cached_tokens": cached, "input_ids": [i] * 100,
             "output_ids": [7]} for i in range(n)]


def _fleet(arm, cached, rwq=15.0, retractions=0):
    worker = {"requests": 2, "prompt_tokens": 200, "cached_tokens": cached * 2,
              "cached_tokens_log": cached * 2,
              "running_while_queued": rwq, "queued_steps": 6, "max_running": 16,
              "retractions": retractions, "peak_swa_used": 900}
    rec = fleet_record(_rows(cached), [worker, dict(worker)], 1.0)
    return {"arm": arm, "pool": "0.10-eq", "policies": {"cache_aware": {"fanout": rec}}}


def test_fleet_record_combines_responses_and_workers():
    rec = _fleet("islands", 50)["policies"]["cache_aware"]["fanout"]
    assert rec["cached_tokens"] == 200 == rec["cached_tokens_workers"] == rec["cached_tokens_log"]
    assert rec["cached_share"] == 0.5 and rec["requests_per_worker"] == [2, 2]
    assert rec["running_while_queued"] == 15.0


def test_comparison_takes_the_best_reference_and_the_slack():
    fleets = [_fleet("upstream", 40), _fleet("main", 60), _fleet("islands", 59),
              _fleet("main_islands", 58, rwq=13.0)]
    rows = {r["arm"]: r for r in compare(fleets)}
    assert set(rows) == {"islands", "main_islands"}
    # best reference is main: 240 tokens; slack one page per request (4)
    assert rows["islands"]["reference_arm"] == "main" and rows["islands"]["result"] == "PASS"
    assert rows["main_islands"]["result"] == "FAIL"
    assert "running" in rows["main_islands"]["detail"]
    assert compare([_fleet("islands", 10)]) == []  # nothing to compare with
    # an arm that hardly queued is not judged on running while queued
    few = _fleet("main_islands", 60, rwq=2.0)
    for w in few["policies"]["cache_aware"]["fanout"]["workers"]:
        w["queued_steps"] = 1
    (row,) = compare([_fleet("main", 60), few])
    assert row["result"] == "PASS" and not row["running_judged"]


def test_report_and_plot(tmp_path):
    meta = {"command": "x", "date": "d", "git_head": "h", "preset": "smoke", "runtime_s": 60.0,
            "router": "smg 1.13.0", "omp_threads": 1,
            "machine": {"cpus": 2, "load_start": [1, 1, 1], "load_end": [1, 1, 1]}}
    res = assemble([_fleet("upstream", 40), _fleet("islands", 30)], meta)
    res["png"] = str(tmp_path / "f.png")
    md = to_markdown(res)
    assert "| fanout | " in md and "**FAIL**" in md and "0 PASS, 1 FAIL." in md
    plot(res, tmp_path / "f.png")
    assert (tmp_path / "f.png").stat().st_size > 1000


@pytest.mark.parametrize("stem", ["fleet_quick", "fleet_quick_repeat", "fleet_quick_window"])
def test_committed_result_regenerates_byte_identical(tmp_path, stem):
    """The committed markdown is what --from-json writes from the committed JSON, the plot named
    as committed (``--png``: the markdown names the plot by its output path; the JSON keeps the
    path the run wrote, ``.work/fleet/run2.png`` for the repeat). The comparison is recomputed
    from the fleets: the JSONs of fleet_quick and _repeat keep the one of their run, from before
    running while queued was judged only where both arms queue."""
    committed = _ROOT / "benchmarks" / "results" / f"{stem}.md"
    r = subprocess.run([sys.executable, "benchmarks/fleet.py", "--quick", "--from-json",
                        str(committed.with_suffix(".json")), "--md", str(tmp_path / f"{stem}.md"),
                        "--png", str(tmp_path / f"{stem}.png")],
                       cwd=_ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / f"{stem}.md").read_text() == committed.read_text()


def test_cli_refuses_an_unknown_policy():
    r = subprocess.run([sys.executable, "benchmarks/fleet.py", "--policies", "lottery"], cwd=_ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "unknown or no policies" in r.stderr


# ------------------------------------------------------------------------------- real workers

@needs_router
@pytest.mark.server
def test_smoke_fleet_of_two_island_workers(tmp_path):
    """Two islands workers behind cache_aware, the fanout class: every request answered by one
    worker, the responses' cached tokens equal the workers' counters and logs, and the fleet hits."""
    r = subprocess.run([sys.executable, "benchmarks/fleet.py", "--smoke", "--arms", "islands",
                        "--pools", "0.10-eq", "--policies", "cache_aware", "--classes", "fanout",
                        "--out", str(tmp_path), "--log-dir", str(tmp_path / "logs")],
                       cwd=_ROOT, capture_output=True, text=True, timeout=900,
                       env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert r.returncode == 0, r.stderr[-4000:]
    res = json.loads((tmp_path / "fleet_smoke.json").read_text())
    rec = res["fleets"][0]["policies"]["cache_aware"]["fanout"]
    assert rec["requests"] == sum(rec["requests_per_worker"]) > 0
    assert rec["cached_tokens"] == rec["cached_tokens_workers"] == rec["cached_tokens_log"] > 0
    assert (tmp_path / "fleet_smoke.md").exists() and (tmp_path / "fleet_smoke.png").exists()
