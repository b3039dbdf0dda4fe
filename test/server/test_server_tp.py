"""Islands under tensor parallelism on the real SGLang server (CPU, tiny hybrid-SWA model): with
``--tp-size 2`` every rank runs its own scheduler and tree cache, and only determinism keeps their
island decisions identical. Two boots with islands on, TP 1 and TP 2, run the e2e workload
(`islands_harness.e2e_workload`: chunked prefill 64, so chunk islands; 24 output tokens at the
decode-island interval 64/4 = 16, so decode islands; a 1024-token SWA pool under 34 requests, so
reclaim and eviction; shared prefixes, so junctions; 8 concurrent clients, so queued hits):

- every output equal on TP 1 and TP 2, and, sequential phase, every cached-token count;
- each rank logs its tree digest (``SGLANG_SWA_ISLANDS_TREE_DIGEST=1``, ``swa_island_digest``:
  keys, value lengths, tombstones, lock counts, island marks, eviction classes, LRU orders, pool
  sizes) at idle points when it changed; after each phase, once both are idle, the two ranks'
  latest digests are equal, and after the sequential phase equal to the TP 1 server's.

Data parallelism: one ``--dp-size 2`` boot (islands on; two schedulers, each with its own tree, the
controller alternating requests between them) runs the same workload: every output equal to the
TP 1 server's, hits on both DP ranks, each DP rank's digest logged, and after ``/flush_cache``
each DP rank's tree and pools back at baseline (one node, the whole full and SWA pools free).
The CPU server starts DP 2 without ``SGLANG_CPU_OMP_THREADS_BIND`` (with ``0|1`` it refuses:
the binding must match the TP size, 1).

On sglang 0.5.23 (``.venv-main-islands``) the default eviction ``auto`` takes the window order at
this lean pool (every rank logs it, and the test asserts it), so the tree lives in the Python core
and the queued hits and eviction classes run under TP; the digest reads 0.5.15's tree only, so
there the same two boots run with upstream's own checker switched on
(``SGLANG_ENABLE_RANK_CONSENSUS_CHECKER=1``: every ``@rank_consensus`` call, ``checkpoint`` with its
``req.rid`` and ``up_to`` among them, must be made with the same arguments on every rank, or the
scheduler raises), and outputs and sequential cached tokens must equal TP 1's. A ``--dp-size 2``
boot on 0.5.23 (checker on) must give TP 1's outputs with hits, both DP ranks serving prefills,
and both back at empty pools after ``/flush_cache`` (each rank's next prefill, a 60-token prompt,
logs the full and SWA usage of that prompt alone).

The CPU server starts TP 2 only with ``SGLANG_CPU_OMP_THREADS_BIND`` naming one core set per rank
(``0|1``); without it the boot fails with a message about NUMA binding. 0.5.23 asks the same of
DP 2 (it counts ``dp_size * tp_size`` ranks), where 0.5.15 refuses a binding there.
"""

from __future__ import annotations

import re
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from islands_harness.client import generate
from islands_harness.conversations import flush_cache_when_idle
from islands_harness.e2e_workload import CONCURRENCY, SERVER_ARGS, WINDOW, make_workload
from islands_harness.main_arm import MAIN_ISLANDS_PYTHON
from islands_harness.server import SglangServer

pytestmark = pytest.mark.server

# "[time TP1] SWA islands ..." under TP 2; "[time] SWA islands ..." on a TP 1 server (rank 0)
DIGEST = re.compile(r"^\[[^\]]*?(?: TP(\d+))?\] SWA islands tree digest: (\w+) ", re.M)
# "[time DP1] SWA islands tree digest: SHA nodes=... swa_free=N" under --dp-size 2
DP_DIGEST = re.compile(r"^\[[^\]]*? DP(\d+)(?: TP\d+)?\] SWA islands tree digest: (\w+) (.*)$", re.M)
ISLAND_SETTINGS = re.compile(r"SWA islands: reclaim .*?, eviction (\w+) \(auto: ")
"""0.5.23's island cache, per rank at startup: the order the default ``auto`` resolved to."""
# "[time DP1] Prefill batch, #new-seq: 1, ..., full token usage: 0.00, swa token usage: 0.00, ..."
DP_PREFILL = re.compile(r"^\[[^\]]*? DP(\d+)(?: TP\d+)?\] Prefill batch, .*?full token usage: "
                        r"([\d.]+), swa token usage: ([\d.]+)", re.M)
IDLE_S = 4.0  # both ranks pass an idle point and log a changed digest well within this


def latest_digests(log: str) -> dict[int, str]:
    """The latest digest each rank logged: {tp rank: sha256_16}."""
    out: dict[int, str] = {}
    for m in DIGEST.finditer(log):
        out[int(m.group(1) or 0)] = m.group(2)
    return out


def latest_dp_digests(log: str) -> dict[int, tuple[str, str]]:
    """The latest digest each DP rank logged: {dp rank: (sha256_16, totals)}."""
    return {int(m.group(1)): (m.group(2), m.group(3).strip()) for m in DP_DIGEST.finditer(log)}


def run_server(model, workload, tp: int, python: str | None = None, dp: int = 1) -> dict:
    """One islands-on boot at ``tp`` x ``dp`` (``python``: another environment's interpreter,
    0.5.23)."""
    seq, conc = workload
    env = ({"SGLANG_ENABLE_RANK_CONSENSUS_CHECKER": "1"} if python
           else {"SGLANG_SWA_ISLANDS_TREE_DIGEST": "1"})
    # one core set per rank: 0.5.15 counts TP ranks only (and refuses a binding under DP 2),
    # 0.5.23 counts every rank, DP included
    ranks = tp * dp if python else tp
    if ranks > 1:
        env["SGLANG_CPU_OMP_THREADS_BIND"] = "|".join(str(r) for r in range(ranks))
    args = SERVER_ARGS + ["--enable-swa-islands", "--tp-size", str(tp), "--dp-size", str(dp)]
    with SglangServer(model, args, env=env, omp_threads=1, boot_timeout_s=600,
                      python=python) as srv:
        # start from an empty tree: a slow boot makes the harness's /health_generate poll time out
        # and send another, and a straggling health request (input [0]) may still reach the tree
        # while the first workload request runs, which changes the digest but no output
        flush_cache_when_idle(srv)
        outputs, cached, digests = {}, {}, []
        for name, ids, n, _ in seq:
            r = generate(srv.base_url, ids, n, timeout=300)
            outputs[name], cached[name] = r.output_ids, r.cached_tokens
        time.sleep(IDLE_S)
        digests.append(latest_digests(srv.log_path.read_text(errors="replace")))

        def one(item):
            name, ids, n, _ = item
            return name, generate(srv.base_url, ids, n, timeout=300).output_ids

        with ThreadPoolExecutor(CONCURRENCY) as pool:
            for name, out in pool.map(one, conc):
                outputs[name] = out
        time.sleep(IDLE_S)
        log = srv.log_path.read_text(errors="replace")
        digests.append(latest_digests(log))
        flushed, after_flush = None, {}
        if dp > 1:
            flush_cache_when_idle(srv)
            time.sleep(IDLE_S)
            flushed = latest_dp_digests(srv.log_path.read_text(errors="replace"))
            mark = len(srv.log_path.read_text(errors="replace"))
            # one fresh prompt per DP rank (the controller alternates): each rank's first prefill
            # after the flush logs its pool usage from before it
            fresh = [[int(t) % 50 + 3 for t in range(100 + i, 160 + i)] for i in range(dp)]
            for ids in fresh:
                generate(srv.base_url, ids, 2, timeout=300)
            after_flush = {}
            for m in DP_PREFILL.finditer(srv.log_path.read_text(errors="replace")[mark:]):
                after_flush.setdefault(int(m.group(1)), (m.group(2), m.group(3)))
        return {"outputs": outputs, "cached": cached, "digests": digests,
                "dp_before_flush": latest_dp_digests(log), "dp_flushed": flushed,
                "dp_prefill_ranks": {int(m.group(1)) for m in DP_PREFILL.finditer(log)},
                "dp_after_flush": after_flush,
                "consensus_checker": "Rank consensus checker is enabled" in log,
                "island_settings": ISLAND_SETTINGS.findall(log)}


def _model_and_workload():
    import json

    from islands_harness.tiny_model import build_tiny_model

    path = build_tiny_model(window=WINDOW)
    meta = json.loads((path / ".tiny_model_complete.json").read_text())
    return path, make_workload(meta["real_vocab"])


@pytest.fixture(scope="module")
def runs():
    path, workload = _model_and_workload()
    return {tp: run_server(path, workload, tp) for tp in (1, 2)}


@pytest.fixture(scope="module")
def dp_run():
    path, workload = _model_and_workload()
    return run_server(path, workload, 1, dp=2)


@pytest.fixture(scope="module")
def main_runs():
    if not MAIN_ISLANDS_PYTHON.exists():
        pytest.skip(".venv-main-islands does not exist (scripts/setup_main.sh --islands)")
    path, workload = _model_and_workload()
    return {tp: run_server(path, workload, tp, str(MAIN_ISLANDS_PYTHON)) for tp in (1, 2)}


@pytest.fixture(scope="module")
def main_dp_run():
    if not MAIN_ISLANDS_PYTHON.exists():
        pytest.skip(".venv-main-islands does not exist (scripts/setup_main.sh --islands)")
    path, workload = _model_and_workload()
    return run_server(path, workload, 1, str(MAIN_ISLANDS_PYTHON), dp=2)


def test_tp2_outputs_and_sequential_cached_tokens_equal_tp1(runs):
    one, two = runs[1], runs[2]
    assert two["outputs"] == one["outputs"]
    assert two["cached"] == one["cached"]
    assert sum(one["cached"].values()) > 0  # the workload hits the cache


def test_tp2_ranks_agree_on_the_tree_after_every_phase(runs):
    for phase, (d1, d2) in enumerate(zip(runs[1]["digests"], runs[2]["digests"])):
        assert set(d2) == {0, 1}, (phase, d2)
        assert d2[0] == d2[1], (phase, d2)
        assert set(d1) == {0}, (phase, d1)
    # sequential: the same decisions as the TP 1 server, not only between the two ranks
    assert runs[2]["digests"][0][0] == runs[1]["digests"][0][0]


def test_main_tp2_with_the_rank_consensus_checker_equals_tp1(main_runs):
    one, two = main_runs[1], main_runs[2]
    assert two["consensus_checker"]  # it ran: a divergence would have stopped the server
    # both ranks resolved the default eviction to the window order (a lean pool)
    assert len(two["island_settings"]) == 2, two["island_settings"]
    assert all(order == "window" for order in two["island_settings"]), two["island_settings"]
    assert two["outputs"] == one["outputs"]
    assert two["cached"] == one["cached"]
    assert sum(one["cached"].values()) > 0


def test_dp2_outputs_equal_tp1_and_each_dp_rank_returns_to_baseline(runs, dp_run):
    assert dp_run["outputs"] == runs[1]["outputs"]
    assert sum(dp_run["cached"].values()) > 0
    before, after = dp_run["dp_before_flush"], dp_run["dp_flushed"]
    assert set(before) == set(after) == {0, 1}, (before, after)
    for rank in (0, 1):
        assert "nodes=1 " not in before[rank][1], before  # each rank served and cached
        assert after[rank][1] == ("nodes=1 tombstones=0 full_locked=0 swa_locked=0 "
                                  "full_free=4096 swa_free=1024"), (rank, after)


def test_main_dp2_outputs_equal_tp1_and_each_dp_rank_returns_to_empty_pools(main_runs, main_dp_run):
    run = main_dp_run
    assert run["consensus_checker"]
    assert run["outputs"] == main_runs[1]["outputs"]
    assert sum(run["cached"].values()) > 0
    assert run["dp_prefill_ranks"] == {0, 1}  # both schedulers served the workload
    # each rank's first prefill after the flush: its pools hold that 60-token prompt only
    # (60 / 4096 full -> 0.01, 60 / 1024 SWA -> 0.06; anything the flush left would add to it)
    after = run["dp_after_flush"]
    assert set(after) == {0, 1}, after
    for full, swa in after.values():
        assert float(full) <= 0.02 and float(swa) <= 0.07, after
