"""``benchmarks/soak.py --model gemma4 --speculative mtp`` without a server: the combinations it
refuses, the server arguments it builds (Laguna's unchanged), a Gemma 4 workload whose prompts
stay below the tokenizer's vocabulary while its malformed requests stay outside the embedding's,
and the report's count of aborts and disconnects that cut a decoding request (mid-verify under
speculative decoding)."""

from __future__ import annotations

import json
import pathlib
import sys

import pytest

from islands_harness.server import REPO_ROOT
from islands_harness.speculative import ALL_MODES, MODES, frozen_kv_mtp_args, mode_args

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))

from soak import cli as soak_cli  # noqa: E402
from soak import report as soak_report  # noqa: E402
from soak import run as soak_run  # noqa: E402
from soak import setup as soak_setup  # noqa: E402
from soak import workload as soak_workload  # noqa: E402

RESULTS = REPO_ROOT / "benchmarks" / "results"
GEMMA4_VOCAB, GEMMA4_REAL_VOCAB = 704, 683  # the tiny Gemma 4's embedding rows and tokenizer


@pytest.mark.parametrize("argv,needle", [
    (["--speculative", "mtp"], "--speculative mtp needs --target main --model gemma4"),
    (["--speculative", "mtp", "--target", "main"], "--speculative mtp needs --target main --model"),
    (["--speculative", "mtp", "--model", "gemma4"], "--speculative mtp needs --target main"),
    (["--model", "gemma4"], "--model gemma4 needs --target main"),
    (["--speculative", "ngram"], "--speculative needs --target main"),
])
def test_the_soak_refuses_what_it_cannot_run_before_building_anything(argv, needle):
    with pytest.raises(SystemExit) as e:
        soak_cli.main(argv)
    assert needle in str(e.value), e.value


def test_mtp_is_the_soaks_alone_and_needs_its_assistant():
    """admission and prefix_reuse offer ``MODES`` (no draft model): mtp is not among them."""
    assert "mtp" in ALL_MODES and "mtp" not in MODES
    with pytest.raises(ValueError, match="assistant"):
        mode_args("mtp")
    assert mode_args("mtp", "/a") == frozen_kv_mtp_args("/a")
    with pytest.raises(ValueError, match="must be one of"):
        mode_args("eagle")


def test_the_server_arguments_per_model_and_mode():
    laguna, python = soak_setup.server_command(soak_setup.SoakConfig())
    assert laguna == [*soak_setup.SERVER_ARGS, "--enable-swa-islands"] and python is None
    cfg = soak_setup.SoakConfig(target="main", model="gemma4", speculative="mtp")
    try:
        bare, _ = soak_setup.server_command(cfg)
        args, _ = soak_setup.server_command(cfg, pathlib.Path("/draft"))
    except SystemExit as e:  # a machine without .venv-main-islands
        pytest.skip(str(e))
    assert bare[:2] == ["--attention-backend", "intel_amx"] and "EAGLE" not in bare
    assert args == [*bare, *frozen_kv_mtp_args(pathlib.Path("/draft"))]


def test_the_gemma4_workload_stays_in_vocabulary_and_its_malformed_ids_do_not(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"text_config": {"vocab_size": 704}}))
    (tmp_path / ".tiny_model_complete.json").write_text(json.dumps({"real_vocab": 683}))
    vocab, real = soak_setup.model_vocab(tmp_path)
    assert (vocab, real) == (GEMMA4_VOCAB, GEMMA4_REAL_VOCAB)

    class State:  # what a client reads of the soak (workload.SoakState)
        cfg = soak_setup.SoakConfig(target="main", model="gemma4")
        traffic = soak_workload.Traffic(real, 0)
        srv = None
        malformed = soak_workload.malformed_payloads(vocab)

    sent = []
    client = soak_workload.Client(State(), 0)

    def generate(kind, ids, n, rid=None):
        sent.append(list(ids))
        o = soak_workload.Outcome(kind, list(ids), n, 200, client.ids(n), "length")
        State.traffic.record(o)
        return o

    client.generate = generate
    for _ in range(200):
        for action in ("fanout", "turn", "edit", "long"):
            getattr(client, f"do_{action}")()
    assert len(sent) == 800 and all(4 <= i < real for ids in sent for i in ids)
    assert all(4 <= i < real for doc in State.traffic.docs for i in doc)
    bad = dict(State.malformed)["id_at_vocab_size"]["input_ids"]
    assert max(bad) == vocab > real


def test_stock_main_gets_no_out_of_vocabulary_ids_and_the_report_says_so():
    names = lambda cfg: [n for n, _ in soak_workload.malformed_payloads(  # noqa: E731
        704, vocab_checked=soak_run.vocab_checked(cfg))]
    everything = names(soak_setup.SoakConfig(target="main"))
    assert set(soak_workload.UNCHECKED_IDS) <= set(everything)
    assert names(soak_setup.SoakConfig()) == everything  # 0.5.15 checks ids (its 0015)
    stock = names(soak_setup.SoakConfig(target="main", islands=False))
    assert stock == [n for n in everything if n not in soak_workload.UNCHECKED_IDS]


def _soak(cfg, outcomes) -> soak_run.Soak:
    s = soak_run.Soak.__new__(soak_run.Soak)
    s.cfg, s.model_dir, s.progress, s.failures = cfg, None, lambda m: None, []
    s.traffic = soak_workload.Traffic(500, 0)
    for o in outcomes:
        s.traffic.record(o)
    s._checked_upto = len(outcomes)  # the oracle is not asked here
    s._ref, s._check = {}, {"mismatches": [], "checked": 0, "prefixes": 0}
    s.idle_points = [{"rss_mib": 100.0, "pools_at_baseline": True, "retractions": 0.0}]
    s.srv = type("S", (), {"extra_args": [], "extra_env": {}, "peak_rss_bytes": 0})()
    return s


def test_the_report_counts_aborts_and_disconnects_that_cut_a_decoding_request():
    O = soak_workload.Outcome
    outs = [O("abort", [5], 9, 200, [7, 8], "abort"), O("abort", [5], 9, 200, [], "abort"),
            O("abort", [5], 9, 200, [7] * 9, "length"), O("disconnect", [5], 0, events=3),
            O("disconnect", [5], 0, events=0), O("disconnect", [5], 0)]
    spec = soak_setup.SoakConfig(target="main", model="gemma4", speculative="mtp")
    s = _soak(spec, outs)
    s.spec_counters = (120.0, 40.0)
    rep = s.report(alive=True, log="", wall_s=1.0)
    assert (rep["aborted_before_finishing"], rep["aborts_mid_decode"]) == (2, 1)
    assert rep["disconnects_mid_decode"] == 1 and rep["passed"], rep["failures"]
    assert rep["spec_tokens_per_verify"] == 3.0 and rep["near_tie_logits"] == 1e-3
    md = soak_report.to_markdown({**rep, "idle_points": []}, command="soak")
    assert md.startswith("# Soak: sglang 0.5.23, tiny gemma4, islands on, 30.0 min, seed 0\n")
    assert "Aborted before finishing: 2 (1 of them decoding: a token out), disconnects " in md
    assert "120 generation tokens in 40 verify calls: 3.0 a call" in md
    # speculative decoding with nothing cut mid-decode fails the run; plain decoding does not
    late = [o for o in outs if not (o.output_ids or o.events)]
    assert "no abort or disconnect landed mid-decode" in "\n".join(
        _soak(spec, late).report(alive=True, log="", wall_s=1.0)["failures"])
    assert _soak(soak_setup.SoakConfig(), late).report(alive=True, log="", wall_s=1.0)["passed"]


def test_a_gemma4_near_tie_is_judged_by_its_own_bound():
    """Tiny Gemma 4 agrees with transformers to about 1e-4 (hf_oracle.NEAR_TIE_LOGITS, 1e-3):
    a flip at a margin of 1.1e-4 is a near tie there, a mismatch at Laguna's 1e-5."""
    from islands_harness.hf_oracle import NEAR_TIE_LOGITS

    assert soak_report.NEAR_TIE_BY_MODEL["gemma4"] == NEAR_TIE_LOGITS
    assert set(soak_report.NEAR_TIE_BY_MODEL) == set(soak_setup.MODELS)
    m = {"first_diff": 1, "output_ids": [1, 9], "reference_ids": [1, 8],
         "reference_next": {"top": 8, "runner_up": 9, "margin": 1.1e-4}}
    assert soak_report.is_near_tie(m, soak_report.NEAR_TIE_BY_MODEL["gemma4"])
    assert not soak_report.is_near_tie(m)


def test_an_abort_by_rid_reaches_gemma4s_decode_and_laguna_keeps_its_reach():
    """Laguna's traffic is the committed soaks' (aborts within 1.5 s); Gemma 4's reaches 6 s,
    past its queue and prefill on the CPU harness."""
    assert soak_workload.ABORT_DELAY_MAX_S == {"laguna": 1.5, "gemma4": 6.0}
    assert set(soak_workload.ABORT_DELAY_MAX_S) == set(soak_setup.MODELS)
