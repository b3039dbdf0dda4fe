"""Gemma 4, the seed's model family, on sglang 0.5.23: the tiny published-layout checkpoints
(`islands_harness.tiny_gemma4`) served by stock main (`.venv-main`) and by main with islands
(`.venv-main-islands`, `--enable-swa-islands`), every output checked against transformers' own
Gemma 4 (`islands_harness.hf_oracle`).

Four boots, each shared by the tests that read it (e2e arguments: page 1, chunk 64, a 4,096-token
full and a 1,024-token SWA pool):
- ``islands`` (dense): the e2e workload (chunk and decode islands, reclaim and eviction at the lean
  SWA pool, junctions, queued hits under 8 clients), a branch inside a chunk, a follow-up while its
  predecessor streams, malformed requests, an abort mid-prefill, then a flush: pools at baseline;
- ``stock`` (dense): the same workload and probes, for the hits islands add;
- ``moe`` (islands): 26B-A4B's MoE block in a 250-token pool, admission's decode estimates
  lowered, 4 requests of 40 + 100 tokens in one batch, so decode retracts; retracted requests' outputs and a few longer prompts equal transformers';
- ``tp2`` (dense, islands, ``--tp-size 2``): the sequential e2e workload equal to TP 1.
The equality gate and its negative control run on Gemma 4 in test/tools/test_equality_gate_main.py.
"""

from __future__ import annotations

import json
import pathlib
import random
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from islands_harness.client import StreamingRequest, fetch_metrics, generate
from islands_harness.conversations import flush_cache_when_idle, follow_up_while_running
from islands_harness.e2e_workload import CHUNK, CONCURRENCY, SERVER_ARGS, make_workload
from islands_harness.hf_oracle import OracleWorker, parts_at_near_tie
from islands_harness.main_arm import MAIN_ISLANDS_PYTHON, MAIN_PYTHON
from islands_harness.models import get_model, real_vocab
from islands_harness.server import SglangServer, drop_benign_warnings

pytestmark = pytest.mark.server

GEMMA4, GEMMA4_MOE = get_model("gemma4"), get_model("gemma4-moe")
ISLANDS = ["--enable-swa-islands"]
BRANCH_PROMPT, BRANCH_AT = 900, 700  # the branch falls inside the chunk [640, 704)
FOLLOW_K, INTERVAL, FOLLOW_DELTA = 16, CHUNK // 4, 8  # B carries 16 decode islands + 8 tokens
RETRACT_NEW = 100  # two admitted requests of 40 + 100 tokens outgrow the 250-token full pool
RETRACT_ARGS = ["--page-size", "1", "--chunked-prefill-size", "64", "--max-total-tokens", "250",
                "--enable-metrics", "--sleep-on-idle"]


def _needs(python) -> None:
    if not python.exists():
        pytest.skip(f"no {python.parent.parent.name} (scripts/setup_main.sh"
                    f"{' --islands' if 'islands' in str(python) else ''})")


def _e2e(srv) -> dict:
    """The e2e workload: sequential, then 8 clients; {name: (output_ids, cached_tokens)}."""
    seq, conc = make_workload(real_vocab(srv.model_path))
    flush_cache_when_idle(srv)
    out = {}
    for name, ids, n, _ in seq:
        r = generate(srv.base_url, ids, n, timeout=600)
        out[name] = (r.output_ids, r.cached_tokens)

    def one(item):
        name, ids, n, _ = item
        r = generate(srv.base_url, ids, n, timeout=600)
        return name, (r.output_ids, r.cached_tokens)

    with ThreadPoolExecutor(CONCURRENCY) as pool:
        out.update(pool.map(one, conc))
    return out


def _probes(srv) -> dict:
    """A branch inside a chunk and a follow-up while the predecessor streams, from a flushed
    tree; the cached tokens of each."""
    rng = random.Random(49)
    vocab = real_vocab(srv.model_path)
    flush_cache_when_idle(srv)
    p = [rng.randrange(4, vocab) for _ in range(BRANCH_PROMPT)]
    srv.generate(p, 8)
    q = p[:BRANCH_AT] + [rng.randrange(4, vocab) for _ in range(60)]
    branch = srv.generate(q, 8)
    flush_cache_when_idle(srv)
    prompt = [rng.randrange(4, vocab) for _ in range(200)]
    fu = follow_up_while_running(srv, prompt, k=FOLLOW_K, delta=FOLLOW_DELTA, interval=INTERVAL,
                                 a_max_new=800, abort_a=True, log=lambda *_: None)
    return {"branch_cached": branch.cached_tokens, "branch_ids": q, "branch_out": branch.output_ids,
            "follow_up": fu}


def _pool_used(srv) -> tuple[float, float]:
    m = fetch_metrics(srv.base_url)
    return (m.value("sglang:swa_used_tokens", default=0.0, agg=max),
            m.value("sglang:full_token_usage", default=0.0, agg=max))


def _abort_mid_prefill(srv) -> dict:
    """A 1,500-token prompt (24 chunks) aborted after its second chunk; the server then serves."""
    rng = random.Random(7)
    ids = [rng.randrange(4, real_vocab(srv.model_path)) for _ in range(1500)]
    mark = len(srv.log_path.read_text(errors="replace"))
    req = StreamingRequest(srv.base_url, ids, 8, name="abort").start()
    deadline = time.monotonic() + 300
    while srv.log_path.read_text(errors="replace")[mark:].count("Prefill batch") < 2:
        assert time.monotonic() < deadline, "the long prompt never started its prefill"
        time.sleep(0.05)
    req.abort()
    res = req.wait(300)
    return {"generated": len(res.output_ids) if res else None, "aborted": req.aborted}


def _bad_input(srv) -> dict:
    """Malformed /generate bodies: {case: (status, text)}."""
    cfg = json.loads((pathlib.Path(srv.model_path) / "config.json").read_text())
    vocab = cfg["text_config"]["vocab_size"]  # the embedding's rows: ids below it are served

    def post(ids):
        r = requests.post(f"{srv.base_url}/generate", timeout=300, json={
            "input_ids": ids, "sampling_params": {"temperature": 0, "max_new_tokens": 4}})
        return r.status_code, r.text

    return {"vocab": vocab, "id_at_vocab": post([5, 6, vocab]), "negative": post([5, -1, 7]),
            "empty": post([]), "strings": post(["a", "b"])}


@pytest.fixture(scope="module")
def islands():
    _needs(MAIN_ISLANDS_PYTHON)
    path = GEMMA4.build()
    args = [*GEMMA4.server_args, *SERVER_ARGS, *ISLANDS, "--sleep-on-idle"]
    with SglangServer(path, args, python=str(MAIN_ISLANDS_PYTHON), boot_timeout_s=600) as srv:
        run = {"e2e": _e2e(srv), **_probes(srv), "bad": _bad_input(srv)}
        run["after_bad"] = srv.generate(run["branch_ids"], 8).output_ids
        run["abort"] = _abort_mid_prefill(srv)
        run["after_abort"] = srv.generate(run["branch_ids"], 8).output_ids
        flush_cache_when_idle(srv)
        srv.generate([5, 6, 7], 2)  # a tick: the gauges refresh on the scheduler's log path
        run["used_after_flush"] = _pool_used(srv)
        run["log"] = srv.log_path.read_text(errors="replace")
        run["model"] = path
        return run


@pytest.fixture(scope="module")
def stock():
    _needs(MAIN_PYTHON)
    path = GEMMA4.build()
    args = [*GEMMA4.server_args, *SERVER_ARGS, "--sleep-on-idle"]
    with SglangServer(path, args, python=str(MAIN_PYTHON), boot_timeout_s=600) as srv:
        return {"e2e": _e2e(srv), **_probes(srv)}


def hf(model_dir) -> OracleWorker:
    """transformers' Gemma 4 greedy, run by .venv-main-islands' transformers (5.19, what 0.5.23
    pins): the published layout's vision tower needs it (`.venv` has 5.12)."""
    return OracleWorker(str(MAIN_ISLANDS_PYTHON), model_dir)


@pytest.fixture(scope="module")
def oracle(islands):
    seq, conc = make_workload(real_vocab(islands["model"]))
    items = {name: (ids, n) for name, ids, n, _ in [*seq, *conc]}
    with hf(islands["model"]) as w:
        refs = {k: w(ids, n) for k, (ids, n) in sorted(items.items())}
        refs["follow_up_b"] = w(islands["follow_up"].b_input_ids, 8)
    return refs


def _differ(outs: dict, refs: dict, prompts: dict, worker: OracleWorker) -> dict:
    """The outputs that differ from transformers' other than at a near-tie (hf_oracle's
    NEAR_TIE_LOGITS: sglang's and transformers' Gemma 4 agree to about 1e-4 in log-probability,
    so a step whose two best tokens are closer may go either way)."""
    return {k: (outs[k], refs[k]) for k in refs if outs[k] != refs[k]
            and not parts_at_near_tie(outs[k], refs[k], prompts[k], worker.margin)}


def test_gemma4_islands_outputs_equal_transformers(islands, oracle):
    outs = {k: v[0] for k, v in islands["e2e"].items()}
    refs = {k: v for k, v in oracle.items() if k in outs}
    assert set(outs) == set(refs)
    seq, conc = make_workload(real_vocab(islands["model"]))
    prompts = {name: ids for name, ids, _, _ in [*seq, *conc]}
    with hf(islands["model"]) as w:
        wrong = _differ(outs, refs, prompts, w)
    assert not wrong, f"{len(wrong)} of {len(refs)} differ from transformers' Gemma 4: {wrong}"


def test_gemma4_stock_outputs_equal_islands_and_islands_hit_at_least_as_much(islands, stock):
    assert {k: v[0] for k, v in stock["e2e"].items()} == {k: v[0] for k, v in islands["e2e"].items()}
    seq, _ = make_workload(real_vocab(islands["model"]))
    fewer = {name: (islands["e2e"][name][1], stock["e2e"][name][1]) for name, *_ in seq
             if islands["e2e"][name][1] < stock["e2e"][name][1]}
    assert not fewer, f"islands hit less than stock main (islands, stock): {fewer}"
    assert sum(islands["e2e"][n][1] for n, *_ in seq) > 0


def test_gemma4_a_branch_inside_a_chunk_hits_to_the_branch_with_islands_only(islands, stock):
    assert islands["branch_cached"] == BRANCH_AT, islands["branch_cached"]
    assert stock["branch_cached"] < BRANCH_AT, stock["branch_cached"]
    assert islands["branch_out"] == stock["branch_out"]


def test_gemma4_a_follow_up_hits_the_running_output_with_islands_only(islands, stock, oracle):
    on, off = islands["follow_up"], stock["follow_up"]
    assert on.a_running_when_b_done, "A finished before B: nothing was running"
    assert on.b_cached_tokens >= on.expected_min_hit, (on.b_cached_tokens, on.expected_min_hit)
    assert off.b_cached_tokens <= off.prompt_len, "stock main hit output of a running request"
    assert on.b_output_ids == off.b_output_ids == oracle["follow_up_b"]


def test_gemma4_malformed_requests_get_400_and_the_server_keeps_serving(islands):
    bad = islands["bad"]
    v = bad["vocab"]
    assert bad["id_at_vocab"][0] == 400 and f"out-of-vocabulary token id {v}" in bad["id_at_vocab"][1]
    assert bad["negative"][0] == 400 and "out-of-vocabulary token id -1" in bad["negative"][1]
    assert bad["empty"][0] == 400 and "input_ids cannot be empty" in bad["empty"][1]
    assert bad["strings"][0] in (400, 422), bad["strings"]
    assert islands["after_bad"] == islands["branch_out"]


def test_gemma4_abort_mid_prefill_loses_nothing_and_pools_return_to_baseline(islands):
    assert islands["abort"]["aborted"]
    assert islands["after_abort"] == islands["branch_out"]
    swa_used, full_usage = islands["used_after_flush"]
    assert swa_used <= 4 and full_usage < 0.01, islands["used_after_flush"]  # the tick's own tokens
    log, _ = drop_benign_warnings(islands["log"])
    for alarm in ("Traceback (most recent call last)", "Mem Leak Detected"):
        assert alarm not in log, alarm


@pytest.fixture(scope="module")
def moe():
    _needs(MAIN_ISLANDS_PYTHON)
    path = GEMMA4_MOE.build()
    rng = random.Random(3)
    vocab = real_vocab(path)
    retract = [[rng.randrange(4, vocab) for _ in range(40)] for _ in range(4)]
    longer = [[rng.randrange(4, vocab) for _ in range(n)] for n in (5, 70, 150)]
    args = [*GEMMA4_MOE.server_args, *RETRACT_ARGS, *ISLANDS]
    # 0.5.23 sizes a request's decode headroom by its max_new_tokens (clipped at this estimate):
    # clipped at 4, and the full pool at a 0.05 new-token ratio, 3 requests are admitted that
    # outgrow the pool
    env = {"SGLANG_INIT_NEW_TOKEN_RATIO": "0.05", "SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION": "4"}
    with SglangServer(path, args, python=str(MAIN_ISLANDS_PYTHON), env=env,
                      boot_timeout_s=600) as srv:
        r = requests.post(f"{srv.base_url}/generate", timeout=600, json={
            "input_ids": retract, "sampling_params": {"temperature": 0, "max_new_tokens": RETRACT_NEW,
                                                      "ignore_eos": True}})
        r.raise_for_status()
        batch = r.json()
        longer_out = [srv.generate(p, 16).output_ids for p in longer]
        log = srv.log_path.read_text(errors="replace")
    return {"path": path, "retract": retract, "batch": batch, "longer": longer,
            "longer_out": longer_out, "log": log}


def test_gemma4_moe_retracts_and_every_output_equals_transformers(moe):
    assert "KV cache pool is full. Retract requests." in moe["log"]
    assert sum(o["meta_info"].get("num_retractions", 0) for o in moe["batch"]) >= 1
    prompts = [*moe["retract"], *moe["longer"]]
    outs = [o["output_ids"] for o in moe["batch"]] + moe["longer_out"]
    with hf(moe["path"]) as w:
        refs = w.greedy_decode(moe["retract"], RETRACT_NEW) + w.greedy_decode(moe["longer"], 16)
        wrong = _differ(dict(enumerate(outs)), dict(enumerate(refs)), dict(enumerate(prompts)), w)
    assert not wrong, wrong


@pytest.fixture(scope="module")
def tp2():
    _needs(MAIN_ISLANDS_PYTHON)
    path = GEMMA4.build()
    seq, _ = make_workload(real_vocab(path))
    args = [*GEMMA4.server_args, *SERVER_ARGS, *ISLANDS, "--tp-size", "2"]
    env = {"SGLANG_CPU_OMP_THREADS_BIND": "0|1"}
    with SglangServer(path, args, python=str(MAIN_ISLANDS_PYTHON), env=env, omp_threads=1,
                      boot_timeout_s=600) as srv:
        flush_cache_when_idle(srv)
        return {name: generate(srv.base_url, ids, n, timeout=600).output_ids
                for name, ids, n, _ in seq}


def test_gemma4_tp2_outputs_equal_tp1(islands, tp2):
    assert tp2 == {k: islands["e2e"][k][0] for k in tp2}
