"""Server boots that cannot collide (islands_harness.server): ports reserved below the ephemeral
range for each server's lifetime, and a boot whose port was taken anyway retried on a fresh one.

Real `sglang.launch_server` on the tiny hybrid model (CPU)."""

from __future__ import annotations

import fcntl
import socket
from concurrent.futures import ThreadPoolExecutor

import pytest

import islands_harness.server as harness
from islands_harness.server import PORT_RESERVATIONS, SglangServer, harness_port_range

pytestmark = pytest.mark.server

ARGS = ["--page-size", "1", "--max-total-tokens", "4096", "--sleep-on-idle"]
BOOT_TIMEOUT_S = 900  # several servers boot at once on two shared cores
N_SERVERS = 4


@pytest.fixture(scope="module")
def tiny_model():
    from islands_harness.tiny_model import build_tiny_model

    return build_tiny_model(window=32)


def port_held(port: int) -> bool:
    """Whether some harness process holds ``port``'s reservation (the lock can't be taken)."""
    with open(PORT_RESERVATIONS / f"{port}.lock", "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(f, fcntl.LOCK_UN)
        return False


def test_servers_booted_together_get_distinct_held_ports_and_all_serve(tiny_model):
    servers = [SglangServer(tiny_model, ARGS, boot_timeout_s=BOOT_TIMEOUT_S)
               for _ in range(N_SERVERS)]
    try:
        with ThreadPoolExecutor(N_SERVERS) as ex:
            list(ex.map(lambda s: s.start(), servers))
        ports = [s.port for s in servers]
        lo, hi = harness_port_range()
        assert len(set(ports)) == N_SERVERS and all(lo <= p < hi for p in ports), ports
        assert all(port_held(p) for p in ports)
        outs = [s.generate([5, 6, 7, 8], max_new_tokens=4).output_ids for s in servers]
        assert all(len(o) == 4 for o in outs) and len({tuple(o) for o in outs}) == 1, outs
    finally:
        for s in servers:
            s.stop()
    assert not any(port_held(p) for p in ports)


def test_a_port_taken_before_the_server_binds_it_is_retried_on_a_fresh_one(
        tiny_model, monkeypatch, capfd):
    """The first reservation hands out a port something else listens on (what a process outside
    the harness does between the check and the bind): that boot fails to bind, the retry boots on
    another port and serves."""
    real = harness.reserve_free_port
    held = real()  # a port of the harness range (port + 10000 a valid gRPC port), held by us
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
            busy.bind((harness.HOST, held.port))
            busy.listen(1)
            taken = held.port
            calls = []

            def first_one_taken(host=harness.HOST, rng=None):
                calls.append(1)
                if len(calls) == 1:
                    return harness.PortReservation(taken, None)
                return real(host, rng)

            monkeypatch.setattr(harness, "reserve_free_port", first_one_taken)
            srv = SglangServer(tiny_model, ARGS, boot_timeout_s=BOOT_TIMEOUT_S)
            with srv:
                assert srv.boot_retries == 1 and srv.port != taken and len(calls) == 2
                assert len(srv.generate([5, 6, 7, 8], max_new_tokens=4).output_ids) == 4
    finally:
        held.release()
    err = capfd.readouterr().err
    assert f"port {taken} was taken before the server bound it (boot 1 of 3" in err
