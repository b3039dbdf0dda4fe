"""Speculative decoding with islands on sglang 0.5.23 (issue 58): NGRAM and Gemma 4's own drafter
(Frozen-KV MTP, a tiny assistant in the published layout) on the CPU server, stock main
(`.venv-main`) and islands (`.venv-main-islands`), every output checked against transformers'
greedy decoding (`islands_harness.hf_oracle`; speculative decoding is lossless at temperature 0).

Boots, each shared by the tests that read it (Gemma 4 dense unless named; e2e arguments: page 1,
chunk 64, a 4,096-token full and a 1,024-token SWA pool, so chunk commits, decode islands,
reclaim and eviction all happen):
- ``islands``: NGRAM (5 draft tokens): the e2e workload (34 requests, 8 clients), a branch inside
  a chunk, a follow-up while its predecessor streams, the cadence probe
  (`islands_harness.speculative.cadence_probe`: a request accepting whole drafts, followed up at
  4 marks while it runs), then a flush: pools at baseline;
- ``stock``: NGRAM on stock main: the e2e workload's sequential part and the cadence probe, for
  the outputs, hits and accept length islands must match or beat;
- ``mutant`` and ``mutant_plain``: islands with the seed's modulo trigger
  (`test/shims/modulo_cadence_main`), with and without NGRAM: the cadence probe catches it under
  speculative decoding and passes it under plain decoding;
- ``moe``: Gemma 4 MoE (26B-A4B's block) with NGRAM in a 250-token pool, 4 requests in one batch,
  so speculative decode retracts;
- ``mtp`` and ``mtp_stock``: Frozen-KV MTP (`--speculative-algorithm EAGLE` with the assistant,
  promoted by sglang), the e2e workload's sequential part (its drafter reads the target's sliding
  window after every commit, island, reclaim and eviction at the lean pool), with the SWA read
  audit (`test/shims/swa_read_audit_main`: every sliding-layer read on a live slot), then a flush.
Laguna with NGRAM and Gemma 4 with Frozen-KV MTP (both arms): the quick soak
(`benchmarks/soak.py --speculative ngram`, `--model gemma4 --speculative mtp`, committed).
"""

from __future__ import annotations

import random
import re

import pytest
import requests
from test_gemma4_main import (
    GEMMA4,
    GEMMA4_MOE,
    ISLANDS,
    RETRACT_ARGS,
    RETRACT_NEW,
    _differ,
    _e2e,
    _needs,
    _pool_used,
    _probes,
    hf,
)

from islands_harness.conversations import flush_cache_when_idle
from islands_harness.e2e_workload import CHUNK, SERVER_ARGS, make_workload
from islands_harness.main_arm import MAIN_ISLANDS_PYTHON, MAIN_PYTHON
from islands_harness.models import real_vocab
from islands_harness.server import REPO_ROOT, SglangServer, drop_benign_warnings
from islands_harness.speculative import (
    NGRAM_DRAFT_TOKENS,
    build_assistant,
    cadence_probe,
    frozen_kv_mtp_args,
    ngram_args,
    server_accept_length,
)

pytestmark = pytest.mark.server

INTERVAL = CHUNK // 4  # the decode-island interval at chunk 64
MARKS = (96, 192, 288, 384)  # follow-ups of the cadence probe, > INTERVAL + 5 apart
SHIM = "test/shims/modulo_cadence_main"
AUDIT = "test/shims/swa_read_audit_main"


def _cadence(srv, model_path, *, draft_tokens: int = NGRAM_DRAFT_TOKENS, warm: bool = True,
             marks=MARKS):
    rng = random.Random(58)
    prompt = [rng.randrange(4, real_vocab(model_path)) for _ in range(200)]
    flush_cache_when_idle(srv)
    return cadence_probe(srv, prompt, marks=marks, interval=INTERVAL, draft_tokens=draft_tokens,
                         max_new=marks[-1] + 400, warm=warm)


def _flushed(srv, run: dict) -> dict:
    """The server's accept-length counters, its pools after a flush, and its log, into ``run``."""
    run["accept"] = server_accept_length(srv.base_url)
    flush_cache_when_idle(srv)
    srv.generate([5, 6, 7], 2)  # a tick: the gauges refresh on the scheduler's log path
    run["used_after_flush"] = _pool_used(srv)
    run["log"] = srv.log_path.read_text(errors="replace")
    return run


def _boot(python, args, env=None):
    path = GEMMA4.build()
    return path, SglangServer(path, [*GEMMA4.server_args, *SERVER_ARGS, *args, "--sleep-on-idle"],
                              python=str(python), env=env, boot_timeout_s=600)


def _audited_reads(log: str) -> dict:
    """``{kind: (reads, dead)}``: the last count the SWA read audit logged per kind of read
    (``decode``: the drafter's steps under Frozen-KV MTP; ``verify``: the target's)."""
    counts = {}
    for m in re.finditer(r"\[swa_read_audit\] pid=\d+ (decode|verify): (\d+) reads, (\d+) dead",
                         log):
        counts[m.group(1)] = (int(m.group(2)), int(m.group(3)))
    return counts


@pytest.fixture(scope="module")
def islands():
    _needs(MAIN_ISLANDS_PYTHON)
    path, server = _boot(MAIN_ISLANDS_PYTHON, [*ISLANDS, *ngram_args()])
    with server as srv:
        run = {"model": path, "e2e": _e2e(srv), **_probes(srv), "cadence": _cadence(srv, path)}
        return _flushed(srv, run)


@pytest.fixture(scope="module")
def stock():
    _needs(MAIN_PYTHON)
    path, server = _boot(MAIN_PYTHON, ngram_args())
    with server as srv:
        return _flushed(srv, {"seq": _sequential(srv, path), "cadence": _cadence(srv, path)})


def _sequential(srv, model_path) -> dict:
    """The e2e workload's sequential part from a flushed tree: {name: (output_ids, cached)}."""
    seq, _ = make_workload(real_vocab(model_path))
    flush_cache_when_idle(srv)
    out = {}
    for name, ids, n, _ in seq:
        r = srv.generate(ids, n)
        out[name] = (r.output_ids, r.cached_tokens)
    return out


@pytest.fixture(scope="module")
def oracle(islands):
    seq, conc = make_workload(real_vocab(islands["model"]))
    items = {name: (ids, n) for name, ids, n, _ in [*seq, *conc]}
    with hf(islands["model"]) as w:
        refs = {k: w(ids, n) for k, (ids, n) in sorted(items.items())}
        refs["follow_up_b"] = w(islands["follow_up"].b_input_ids, 8)
        rng = random.Random(58)
        prompt = [rng.randrange(4, real_vocab(islands["model"])) for _ in range(200)]
        refs["cadence_a"] = w(prompt, MARKS[-1])  # A streamed this much before its abort
        prompts = {name: ids for name, (ids, _) in items.items()}
        return refs, prompts


def test_ngram_outputs_equal_transformers_on_both_arms(islands, stock, oracle):
    refs, prompts = oracle
    with hf(islands["model"]) as w:
        for runs in (islands["e2e"], stock["seq"]):
            outs = {k: v[0] for k, v in runs.items()}
            wrong = _differ(outs, {k: refs[k] for k in outs}, prompts, w)
            assert not wrong, f"{len(wrong)} of {len(outs)} differ from transformers: {wrong}"
    assert {k: v[0] for k, v in stock["seq"].items()} == {
        k: islands["e2e"][k][0] for k in stock["seq"]}
    a_on, a_off = (arm["cadence"].a_output_ids[:MARKS[-1]] for arm in (islands, stock))
    assert a_on == a_off == refs["cadence_a"]


def test_ngram_accepts_whole_drafts_and_islands_accept_at_least_as_much(islands, stock):
    on, off = islands["cadence"], stock["cadence"]
    assert on.a_accept_length >= NGRAM_DRAFT_TOKENS - 0.5, on.a_accept_length
    assert on.a_accept_length >= off.a_accept_length
    for arm in (islands, stock):
        tokens, verifies = arm["accept"]
        assert verifies > 0 and tokens / verifies > 1.0, arm["accept"]
    assert islands["accept"][0] / islands["accept"][1] >= stock["accept"][0] / stock["accept"][1]


def test_decode_islands_fire_on_accumulated_progress_under_ngram(islands, stock):
    probe = islands["cadence"]
    assert all(probe.a_running), "A finished before a follow-up: nothing was running"
    assert probe.a_equals_w, "A did not repeat W's continuation (the corpus did not draft it)"
    assert not probe.violations(), (probe.hits, probe.gaps(), probe.bound)
    assert probe.min_islands() >= MARKS[-1] // (INTERVAL + NGRAM_DRAFT_TOKENS)
    # stock main publishes nothing of a running request: a follow-up hits the prompt, or the
    # previous follow-up's prompt (cached once it finished), never more of A's output
    off = stock["cadence"]
    seen = [off.prompt_len] + [off.prompt_len + m for m in off.marks[:-1]]
    assert all(h <= s for h, s in zip(off.hits, seen)), (off.hits, seen)


def test_ngram_hits_at_least_stock_and_the_probes_hit_as_without_it(islands, stock, oracle):
    refs, _ = oracle
    seq, _ = make_workload(real_vocab(islands["model"]))
    fewer = {name: (islands["e2e"][name][1], stock["seq"][name][1]) for name, *_ in seq
             if islands["e2e"][name][1] < stock["seq"][name][1]}
    assert not fewer, f"islands hit less than stock main (islands, stock): {fewer}"
    # as test_gemma4_main's plain-decoding boots: a branch inside a chunk hits to the branch (stock
    # main: to the chunk end before it), a follow-up hits the running output's islands
    assert islands["branch_cached"] == 700
    on = islands["follow_up"]
    assert on.a_running_when_b_done and on.b_cached_tokens >= on.expected_min_hit
    assert on.b_output_ids == refs["follow_up_b"]


def test_pools_return_to_baseline_after_a_flush(islands, stock):
    for arm in (islands, stock):
        swa_used, full_usage = arm["used_after_flush"]
        assert swa_used <= 4 and full_usage < 0.01, arm["used_after_flush"]
        log, _ = drop_benign_warnings(arm["log"])
        for alarm in ("Traceback (most recent call last)", "Mem Leak Detected"):
            assert alarm not in log, alarm


# ---- the seed's negative control: a modulo trigger --------------------------------------------

def _mutant(spec: bool):
    _needs(MAIN_ISLANDS_PYTHON)
    path = GEMMA4.build()
    args = [*GEMMA4.server_args, *SERVER_ARGS, *ISLANDS, *(ngram_args() if spec else [])]
    env = {"PYTHONPATH": str(REPO_ROOT / SHIM)}
    with SglangServer(path, args, python=str(MAIN_ISLANDS_PYTHON), env=env,
                      boot_timeout_s=600) as srv:
        probe = _cadence(srv, path, draft_tokens=NGRAM_DRAFT_TOKENS if spec else 1, warm=spec,
                         marks=MARKS if spec else MARKS[:2])
        return probe, srv.log_path.read_text(errors="replace")


@pytest.fixture(scope="module")
def mutant():
    return _mutant(spec=True)


@pytest.fixture(scope="module")
def mutant_plain():
    return _mutant(spec=False)


def test_a_modulo_trigger_passes_plain_decoding_and_fails_speculative_decoding(
        mutant, mutant_plain):
    for probe, log in (mutant, mutant_plain):
        assert "[modulo_cadence shim]" in log and "installed" in log
        assert all(probe.a_running)
    plain, _ = mutant_plain
    assert not plain.violations(), (plain.hits, plain.gaps())
    spec, _ = mutant
    assert spec.a_accept_length >= NGRAM_DRAFT_TOKENS - 0.5
    assert spec.violations(), (
        f"the modulo trigger survived speculative decoding: gaps {spec.gaps()} <= {spec.bound}")


# ---- Gemma 4 MoE: speculative decode retracts ---------------------------------------------

@pytest.fixture(scope="module")
def moe():
    _needs(MAIN_ISLANDS_PYTHON)
    path = GEMMA4_MOE.build()
    rng = random.Random(3)
    vocab = real_vocab(path)
    retract = [[rng.randrange(4, vocab) for _ in range(40)] for _ in range(4)]
    args = [*GEMMA4_MOE.server_args, *RETRACT_ARGS, *ISLANDS, *ngram_args()]
    env = {"SGLANG_INIT_NEW_TOKEN_RATIO": "0.05", "SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION": "4"}
    with SglangServer(path, args, python=str(MAIN_ISLANDS_PYTHON), env=env,
                      boot_timeout_s=600) as srv:
        r = requests.post(f"{srv.base_url}/generate", timeout=600, json={
            "input_ids": retract, "sampling_params": {"temperature": 0, "max_new_tokens": RETRACT_NEW,
                                                      "ignore_eos": True}})
        r.raise_for_status()
        return {"path": path, "retract": retract, "batch": r.json(),
                "log": srv.log_path.read_text(errors="replace")}


def test_moe_speculative_decode_retracts_and_every_output_equals_transformers(moe):
    assert "KV cache pool is full. Retract requests." in moe["log"]
    assert sum(o["meta_info"].get("num_retractions", 0) for o in moe["batch"]) >= 1
    outs = [o["output_ids"] for o in moe["batch"]]
    with hf(moe["path"]) as w:
        refs = w.greedy_decode(moe["retract"], RETRACT_NEW)
        wrong = _differ(dict(enumerate(outs)), dict(enumerate(refs)),
                        dict(enumerate(moe["retract"])), w)
    assert not wrong, wrong


# ---- Gemma 4's own drafter: Frozen-KV MTP ------------------------------------------------

def _mtp(python, args):
    _needs(python)
    path = GEMMA4.build()
    assistant = build_assistant(path, MAIN_ISLANDS_PYTHON)
    path, server = _boot(python, [*args, *frozen_kv_mtp_args(assistant)],
                         env={"PYTHONPATH": str(REPO_ROOT / AUDIT)})
    seq, _ = make_workload(real_vocab(path))
    rng = random.Random(3)
    # past main's decode SWA evictor (every 128 tokens): the drafter reads behind a freed region
    seq = [*seq, ("long", [rng.randrange(4, real_vocab(path)) for _ in range(150)], 300, "cold")]
    with server as srv:
        flush_cache_when_idle(srv)
        outs = {name: srv.generate(ids, n) for name, ids, n, _ in seq}
        run = {"model": path, "seq": seq, "outs": {k: r.output_ids for k, r in outs.items()},
               "cached": {k: r.cached_tokens for k, r in outs.items()}}
        return _flushed(srv, run)


@pytest.fixture(scope="module")
def mtp():
    return _mtp(MAIN_ISLANDS_PYTHON, ISLANDS)


@pytest.fixture(scope="module")
def mtp_stock():
    return _mtp(MAIN_PYTHON, [])


def test_frozen_kv_mtp_outputs_equal_transformers_and_stock(mtp, mtp_stock):
    assert "promoting --speculative-algorithm EAGLE to FROZEN_KV_MTP" in mtp["log"]
    with hf(mtp["model"]) as w:
        refs = {name: w(ids, n) for name, ids, n, _ in mtp["seq"]}
        prompts = {name: ids for name, ids, _, _ in mtp["seq"]}
        wrong = _differ(mtp["outs"], refs, prompts, w)
    assert not wrong, wrong
    assert mtp["outs"] == mtp_stock["outs"]
    fewer = {k: (mtp["cached"][k], mtp_stock["cached"][k]) for k in mtp["cached"]
             if mtp["cached"][k] < mtp_stock["cached"][k]}
    assert not fewer, f"islands hit less than stock main (islands, stock): {fewer}"


def test_with_islands_the_drafter_and_the_target_read_only_live_swa_kv(mtp, mtp_stock):
    """Gemma 4's assistant reads the target's sliding window, one key further back than the
    target's own (its query sits at the last committed position). With islands every read of a
    sliding layer, the draft's and the target's, lands on a live SWA slot
    (``test/shims/swa_read_audit_main``). Stock main's target does too; its drafter's oldest key
    is freed by main's decode evictor once a request decodes past it (docs/MAIN.md), which costs
    drafts, not outputs, and is not asserted here."""
    for arm in (mtp, mtp_stock):
        counts = _audited_reads(arm["log"])
        assert set(counts) == {"decode", "verify"}, counts  # the drafter's and the target's
        assert all(reads > 0 for reads, _ in counts.values()), counts
        assert counts["verify"][1] == 0, counts  # the target reads live KV on both arms
    assert "first dead read" not in mtp["log"]
    assert _audited_reads(mtp["log"])["decode"][1] == 0


def test_frozen_kv_mtp_accepts_drafts_and_islands_accept_at_least_as_much(mtp, mtp_stock):
    (tokens, verifies), (tokens_off, verifies_off) = mtp["accept"], mtp_stock["accept"]
    assert verifies > 0 and tokens / verifies > 1.0, mtp["accept"]
    assert tokens / verifies >= tokens_off / verifies_off, (mtp["accept"], mtp_stock["accept"])
    for arm in (mtp, mtp_stock):
        swa_used, full_usage = arm["used_after_flush"]
        assert swa_used <= 4 and full_usage < 0.01, arm["used_after_flush"]
        log, _ = drop_benign_warnings(arm["log"])
        for alarm in ("Traceback (most recent call last)", "Mem Leak Detected"):
            assert alarm not in log, alarm
