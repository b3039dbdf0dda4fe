"""Fast checks of the server harness pieces that need no server: tiny model, oracle, helpers."""

from __future__ import annotations

import hashlib
import json
import random
import socket
import subprocess
import sys

import pytest

from islands_harness import sched_log
from islands_harness import tiny_model as tm
from islands_harness.client import Metrics, generate_body
from islands_harness.server import (BASE_ARGS, PORT_RESERVATIONS, SglangServer, bind_failed,
                                    ephemeral_port_range, harness_port_range,
                                    pick_free_port, port_is_free, reserve_free_port)


def _digest(path):
    return {f.name: hashlib.sha256(f.read_bytes()).hexdigest()
            for f in sorted(path.iterdir()) if f.is_file()}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("tiny") / "model"
    return tm.build_tiny_model(out, window=16, layers=4, hidden=64, vocab=512, seed=3)


def test_layer_types_alternate_sliding_and_full_and_end_full():
    assert tm.layer_types_for(4) == ["sliding_attention", "full_attention"] * 2
    assert tm.layer_types_for(3) == ["sliding_attention", "full_attention", "full_attention"]


def test_default_dir_names_every_parameter():
    d = tm.default_model_dir(window=32, layers=4, hidden=128, vocab=1024, seed=0)
    assert d.name == "tiny-laguna-w32-l4-h128-v1024-s0" and d.parent == tm.DEFAULT_CACHE


def test_tiny_model_is_hybrid_dense_fp32_with_chat_template(built):
    cfg = json.loads((built / "config.json").read_text())
    assert cfg["architectures"] == ["LagunaForCausalLM"]
    assert cfg["sliding_window"] == 16 and cfg["dtype"] == "float32"
    assert set(cfg["layer_types"]) == {"sliding_attention", "full_attention"}
    assert cfg["layer_types"][-1] == "full_attention"
    assert cfg["mlp_layer_types"] == ["dense"] * 4
    assert cfg["vocab_size"] % 64 == 0
    tok_cfg = json.loads((built / "tokenizer_config.json").read_text())
    assert tok_cfg["chat_template"] == tm.CHAT_TEMPLATE
    assert (built / tm.MARKER).is_file()


def test_tiny_model_build_is_deterministic(built, tmp_path):
    again = tm.build_tiny_model(tmp_path / "again", window=16, layers=4, hidden=64, vocab=512,
                                seed=3)
    assert _digest(again) == _digest(built)


def test_complete_dir_is_reused_and_half_built_dir_is_rebuilt(built, tmp_path):
    before = (built / "model.safetensors").stat().st_mtime_ns
    assert tm.build_tiny_model(built, window=16, layers=4, hidden=64, vocab=512, seed=3) == built
    assert (built / "model.safetensors").stat().st_mtime_ns == before

    half = tmp_path / "half"
    half.mkdir()
    (half / "config.json").write_text("{}")  # no marker: an interrupted build
    out = tm.build_tiny_model(half, window=16, layers=4, hidden=64, vocab=512, seed=3)
    assert out == half.resolve() and tm.is_complete(out)
    assert _digest(out) == _digest(built)


def test_oracle_returns_exactly_max_new_tokens_greedy(built):
    from islands_harness.hf_oracle import greedy_decode
    prompts = [list(range(4, 40)), [5, 6, 7]]
    a = greedy_decode(built, prompts, [12, 5])
    assert [len(x) for x in a] == [12, 5]
    assert greedy_decode(built, prompts, [12, 5]) == a  # deterministic
    assert len(set(a[0])) > 1  # peaky random weights: not a single repeated token


def test_metrics_parse_keeps_labels_and_skips_comments():
    text = ('# HELP sglang:swa_used_tokens x\n# TYPE sglang:swa_used_tokens gauge\n'
            'sglang:swa_used_tokens{model_name="m",engine_type="unified"} 57.0\n'
            'sglang:kv_used_tokens 3\n'
            'sglang:evicted_tokens_total{cache_type="swa"} 5\n'
            'sglang:evicted_tokens_total{cache_type="full"} 2\n'
            'sglang:bad_value{x="y"} not-a-number\n')
    m = Metrics.parse(text)
    assert m.last_per_name() == {"sglang:swa_used_tokens": 57.0, "sglang:kv_used_tokens": 3.0,
                                 "sglang:evicted_tokens_total": 2.0}
    assert m.value("sglang:evicted_tokens_total") == 7.0
    assert m.value("sglang:evicted_tokens_total", {"cache_type": "swa"}) == 5.0
    assert m.value("sglang:evicted_tokens_total", agg=max) == 5.0
    assert m.value("sglang:swa_used_tokens", {"model_name": "m"}) == 57.0
    assert "sglang:bad_value" not in m and "sglang:kv_used_tokens" in m
    with pytest.raises(KeyError, match="sglang:bad_value"):
        m.value("sglang:bad_value")
    assert m.value("sglang:bad_value", default=0.0) == 0.0


def test_pool_tokens_is_available_plus_evictable_plus_used():
    m = Metrics.parse('sglang:swa_available_tokens{model_name="m"} 1000\n'
                      'sglang:swa_evictable_tokens{model_name="m"} 300\n'
                      'sglang:swa_used_tokens{model_name="m"} 525\n'
                      'sglang:kv_used_tokens{model_name="m"} 4096\n')
    assert m.pool_tokens("swa") == 1825
    assert m.pool_tokens("kv") == 4096  # stock 0.5.23: only the used gauge
    assert Metrics.parse("").pool_tokens("swa") == 0


def test_generate_body_is_greedy_on_token_ids():
    b = generate_body([5, 6], 4, rid="r1", sampling_params={"ignore_eos": False})
    assert b == {"input_ids": [5, 6], "rid": "r1", "sampling_params": {
        "temperature": 0, "max_new_tokens": 4, "ignore_eos": False}}


def _real_decode_line(hold):
    """A `Decode batch` line as the patched scheduler writes it: upstream's PoolStats formats the
    usage parts, the reporter prefixes the running requests."""
    from sglang.srt.managers.scheduler_components.pool_stats_observer import PoolStats

    stats = PoolStats(full_num_used=1002, full_token_usage=0.02, full_available_size=60000,
                      full_evictable_size=0, is_hybrid_swa=True, swa_num_used=36,
                      swa_token_usage=0.01, swa_available_size=4000, swa_evictable_size=10,
                      swa_hold=hold)
    return ("[2026-11-29 17:52:17] Decode batch, #running-req: 3, "
            + ", ".join(stats.get_decode_usage_msg_parts()) + ", cpu graph: False, #queue-req: 2")


def test_sched_log_parses_the_lines_the_real_writer_formats():
    from sglang.srt.mem_cache.base_prefix_cache import SWAHoldStats

    hold = SWAHoldStats(held_per_req_mean=36.4, held_per_req_max=40, chunk_islands=4,
                        decode_islands=3, freed_at_commit=966, reclaimed_cold=7,
                        reclaimed_window=2, tombstone_tokens=900)
    e = sched_log.parse_line(_real_decode_line(hold))
    assert e == {"kind": "decode", "t": "2026-11-29 17:52:17", "run": 3, "full_tok": 1002,
                 "full_use": 0.02, "swa_tok": 36, "swa_use": 0.01, "queue": 2, "held_mean": 36,
                 "held_max": 40, "chunk_islands": 4, "decode_islands": 3, "freed": 966,
                 "cold": 7, "window": 2, "tomb": 900}
    plain = sched_log.parse_line(_real_decode_line(None))
    assert plain["swa_tok"] == 36 and "chunk_islands" not in plain
    parsed = sched_log.parse_lines([_real_decode_line(hold), "noise",
                                    "[t] KV cache pool is full. Retract requests. "
                                    "#retracted_reqs: 2, #new_token_ratio: 0.5"])
    assert len(parsed["decode"]) == 1 and parsed["retract_events"] == [2]


def test_free_port_leaves_room_for_sglang_derived_ports():
    """The port and its +10000 gRPC port lie below the kernel's ephemeral range, which is where a
    running server's own sockets (its NCCL/gloo port from get_free_port(), client sockets) land."""
    eph_lo, eph_hi = ephemeral_port_range()
    lo, hi = harness_port_range()
    assert (lo, hi) == (10000, eph_lo - 10000)
    if (eph_lo, eph_hi) == (32768, 60999):
        assert (lo, hi) == (10000, 22768)
    for _ in range(20):
        p = pick_free_port()
        assert lo <= p < hi and p + 10000 < eph_lo and port_is_free(p)


def test_a_reserved_port_is_handed_out_to_nobody_else_until_released():
    """Two reservations with the same seeded choice: the second skips the held port; once it is
    released the same choice gets it. The lock is an flock, so another process sees it too."""
    first = reserve_free_port(rng=random.Random(11))
    try:
        second = reserve_free_port(rng=random.Random(11))
        assert second.port != first.port
        second.release()
        probe = subprocess.run(
            [sys.executable, "-c",
             "import fcntl, sys; f = open(sys.argv[1], 'a')\n"
             "try:\n    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB); print('free')\n"
             "except BlockingIOError:\n    print('held')",
             str(PORT_RESERVATIONS / f"{first.port}.lock")],
            capture_output=True, text=True, check=True)
        assert probe.stdout.strip() == "held"
    finally:
        first.release()
    again = reserve_free_port(rng=random.Random(11))
    assert again.port == first.port
    again.release()


@pytest.mark.parametrize("line, failed", [
    ("ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', 43330): "
     "address already in use", True),
    ("zmq.error.ZMQError: Address already in use (addr='tcp://127.0.0.1:20001')", True),
    ("RuntimeError: The server socket has failed to listen on any local network address. "
     "port: 29500, useIpv6: 0, code: -98, name: EADDRINUSE, message: address already in use", True),
    ("ValueError: --enable-swa-islands needs a hybrid SWA model", False),
])
def test_bind_failures_are_told_apart_from_other_boot_failures(line, failed):
    assert bind_failed("boot...\n" + line + "\nshutdown") is failed


def test_command_puts_caller_args_after_the_cpu_base_args():
    srv = SglangServer("/m", ["--page-size", "1"], port=12345)
    srv.port = 12345
    cmd = srv.command()
    assert cmd[1:5] == ["-m", "sglang.launch_server", "--model-path", "/m"]
    assert cmd[5:5 + len(BASE_ARGS)] == list(BASE_ARGS)
    assert cmd[-2:] == ["--page-size", "1"]
    assert "--port" in cmd and cmd[cmd.index("--port") + 1] == "12345"


def test_port_is_free_sees_a_listening_socket():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        assert not port_is_free(s.getsockname()[1])



def test_process_tree_cpu_seconds_counts_children():
    import os
    import subprocess
    import sys
    import time

    from islands_harness.server import process_tree_cpu_seconds

    assert process_tree_cpu_seconds(None) is None
    # The child burns 0.6 s of CPU, its own clock; /proc's tick-sampled utime + stime may read a
    # tick or two less on a loaded machine (0.29 of a 0.3-s burn, once), hence the 0.3 s asked.
    busy = ("import time\nt = time.process_time()\nwhile time.process_time() - t < 0.6: pass\n"
            "time.sleep(60)")
    child = subprocess.Popen([sys.executable, "-c", busy])
    try:
        deadline = time.monotonic() + 30
        while process_tree_cpu_seconds(child.pid) < 0.3 and time.monotonic() < deadline:
            time.sleep(0.1)
        spent = process_tree_cpu_seconds(child.pid)
        assert spent >= 0.3
        # this process's tree includes the busy child
        assert process_tree_cpu_seconds(os.getpid()) >= spent
    finally:
        child.kill()
        child.wait()
    assert process_tree_cpu_seconds(child.pid) is None


def test_code_version_reads_the_island_module_of_the_environment_a_server_boots():
    """A main arm's provenance is its own environment's module (or None in stock main), never the
    0.5.15 module of the interpreter running the benchmark."""
    import pathlib as _pathlib

    from islands_harness.provenance import ISLAND_MODULE, code_version

    repo = _pathlib.Path(__file__).resolve().parents[2]
    here = code_version()
    assert here["python"] is None and len(here["installed_swa_island_radix_cache_sha256_16"]) == 16
    for venv, has_module in ((".venv-main-islands", True), (".venv-main", False)):
        python = repo / venv / "bin" / "python"
        if not python.exists():
            continue
        there = code_version(str(python))
        digest = there["installed_swa_island_radix_cache_sha256_16"]
        if not has_module:
            assert digest is None, there
            continue
        purelib = next((repo / venv / "lib").glob("python3*/site-packages"))
        import hashlib as _hashlib

        want = _hashlib.sha256((purelib / ISLAND_MODULE).read_bytes()).hexdigest()[:16]
        assert digest == want != here["installed_swa_island_radix_cache_sha256_16"], there


class _StreamServer:
    """A local HTTP server speaking `/generate`'s SSE stream: one token every 20 ms up to 500,
    ending early with an error chunk once `/abort_request` names its rid (as sglang's stream of
    an aborted request may), or at once with an error chunk when `fail_after` tokens were sent."""

    def __init__(self, fail_after=None):
        import http.server
        import threading

        aborted, seen = threading.Event(), {}
        self.aborted, self.seen = aborted, seen

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if self.path == "/abort_request":
                    seen["abort_rid"] = body["rid"]
                    aborted.set()
                    self.send_response(200)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                seen["generate_rid"] = body["rid"]
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                out = []
                for i in range(500):
                    if aborted.is_set() or (fail_after is not None and i == fail_after):
                        self.wfile.write(b'data: {"error": {"message": "aborted"}}\n\n')
                        return
                    out.append(i)
                    chunk = {"output_ids": out, "meta_info": {"completion_tokens": len(out)}}
                    self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                    self.wfile.flush()
                    aborted.wait(0.02)
                self.wfile.write(b"data: [DONE]\n\n")

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def test_an_aborted_stream_ends_without_an_error_and_keeps_what_it_streamed():
    from islands_harness.client import ServerError, StreamingRequest

    srv = _StreamServer()
    try:
        s = StreamingRequest(srv.url, [1, 2, 3], 500, name="turn2").start()
        got = s.wait_generated(5, timeout=30)
        s.abort()
        res = s.wait(timeout=30)
        assert srv.seen["abort_rid"] == srv.seen["generate_rid"] == s.rid
        assert s.rid.startswith("turn2-") and s.error is None
        assert res.output_ids[:len(got)] == got and len(res.output_ids) < 500
        s.abort()  # once the stream ended: nothing sent, nothing raised
    finally:
        srv.close()
    failing = _StreamServer(fail_after=3)
    try:  # the same error chunk without an abort is an error
        s = StreamingRequest(failing.url, [1], 500).start()
        with pytest.raises(ServerError, match="aborted"):
            s.wait(timeout=30)
    finally:
        failing.close()
