"""benchmarks/decode_reuse.py without a server: the log scan it measures with, its CLI, and the
committed result (schema, the claims it backs, and that the markdown table is rendered from it)."""

import json
import pathlib
import sys

import pytest

from islands_harness.client import Metrics
from islands_harness.conversations import LogScan

_ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(_ROOT / "benchmarks"))

from decode_reuse import cli as dr_cli  # noqa: E402
from decode_reuse import report as dr_report  # noqa: E402
from decode_reuse import run as dr_run  # noqa: E402
from decode_reuse import setup as dr_setup  # noqa: E402

RESULT_JSON = _ROOT / "benchmarks" / "results" / "decode_reuse.json"
RESULT_MD = _ROOT / "benchmarks" / "results" / "decode_reuse.md"
MAIN_RESULT_JSON = _ROOT / "benchmarks" / "results" / "decode_reuse_main.json"
MAIN_RESULT_MD = _ROOT / "benchmarks" / "results" / "decode_reuse_main.md"

# Line formats of sglang 0.5.15.post1 with the metrics patch (hold fragment on the decode line).
LOG = """\
[2026-11-29 17:52:15] Prefill batch, #new-seq: 1, #new-token: 512, #cached-token: 0, full token usage: 0.01, swa token usage: 0.03, #running-req: 0, #queue-req: 0, #pending-token: 0, cpu graph: False, input throughput (token/s): 1.50
[2026-11-29 17:52:16] Prefill batch, #new-seq: 1, #new-token: 28, #cached-token: 2256, full token usage: 0.04, swa token usage: 0.01, #running-req: 1, #queue-req: 0, #pending-token: 0, cpu graph: False, input throughput (token/s): 1.50
[2026-11-29 17:52:17] Decode batch, #running-req: 1, #full token: 1002, full token usage: 0.02, #swa token: 36, swa token usage: 0.00, swa held/req: 36 (max 36), islands: 2 chunk + 0 decode, swa reclaimed: 966 at commit + 0 cold + 0 window, #tombstone token: 966, cpu graph: False, gen throughput (token/s): 0.45, #queue-req: 0
[2026-11-29 17:52:18] Decode batch, #running-req: 2, #full token: 2400, full token usage: 0.04, #swa token: 612, swa token usage: 0.04, swa held/req: 36 (max 36), islands: 4 chunk + 3 decode, swa reclaimed: 966 at commit + 0 cold + 0 window, #tombstone token: 966, cpu graph: False, gen throughput (token/s): 0.45, #queue-req: 0
"""
METRICS = """\
# HELP sglang:swa_island_chunk_inserts Prefix inserts at chunk commits whose SWA lock covers one window (total).
sglang:swa_island_chunk_inserts{model_name="m"} 5.0
sglang:swa_island_decode_inserts{model_name="m"} 4.0
"""


def test_log_scan_sums_prefill_and_takes_swa_peaks(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("[old] Prefill batch, #new-seq: 1, #new-token: 999, #cached-token: 0, "
                   "full token usage: 0.50, swa token usage: 0.90, #running-req: 0\n")
    scan = LogScan(log, swa_pool=16384)  # starts at the current end: the old line is skipped
    with open(log, "a") as f:
        f.write(LOG + "[2026-11-29 17:52:19] Decode batch, #running-req: 1, #swa tok")  # partial
    s = scan.stats()
    assert (s.prefill_new_tokens, s.prefill_cached_tokens) == (540, 2256)
    assert s.peak_swa_used_decode == 612
    assert s.peak_swa_used_prefill == round(0.03 * 16384)
    assert s.peak_swa_used == 612
    assert (s.chunk_islands, s.decode_islands) == (4, 3)
    assert s.decode_lines == 2


def test_log_scan_without_the_islands_fragment(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("")
    scan = LogScan(log)
    log.write_text("[t] Decode batch, #running-req: 1, #full token: 0, full token usage: 0.00, "
                   "#swa token: 7, swa token usage: 0.00, cpu graph: False\n")
    s = scan.stats()
    assert s.decode_islands is None and s.peak_swa_used == 7 and s.peak_swa_used_prefill == 0


def test_island_inserts_by_kind():
    m = Metrics.parse(METRICS)
    assert m.value("sglang:swa_island_decode_inserts") == 4.0
    assert m.value("sglang:swa_island_chunk_inserts") == 5.0
    assert Metrics.parse("sglang:swa_used_tokens 3.0\n").value(
        "sglang:swa_island_decode_inserts", default=None) is None


def test_cli_help():
    with pytest.raises(SystemExit) as e:
        dr_cli.main(["--help"])
    assert e.value.code == 0


def test_main_arm_boots_the_other_release_with_upstreams_arguments(monkeypatch):
    """``main``: upstream's arguments and environment, the interpreter of .venv-main; only
    ``main`` boots it; the default arms leave it out."""
    assert dr_setup.ARMS["main"] == dr_setup.ARMS["upstream"] == []
    assert "main" not in dr_setup.ARM_ENV
    seen = []

    class Boot(Exception):
        pass

    class FakeServer:  # stands in for the boot only: run_arm stops at start()
        def __init__(self, model, args, boot_timeout_s, env, python, **kw):
            seen.append((list(args), python))

        def start(self):
            raise Boot

    monkeypatch.setattr(dr_run, "SglangServer", FakeServer)
    monkeypatch.setattr(dr_setup, "main_python", lambda: "/venv-main/bin/python")
    for arm in ("upstream", "main"):
        with pytest.raises(Boot):
            dr_run.run_arm(_ROOT, 100, arm, dr_setup.quick_shape(1), [])
    assert seen == [(dr_setup.SERVER_ARGS, None),
                    (dr_setup.SERVER_ARGS, "/venv-main/bin/python")]


def test_main_knobs_and_main_islands_arms_boot_their_environments(monkeypatch):
    """``main_knobs`` (and its halves): .venv-main with main's knobs in the environment;
    ``main_islands``: .venv-main-islands with --enable-swa-islands and no knob (its guard refuses
    the free variable set explicitly)."""
    from islands_harness import main_arm

    assert main_arm.MAIN_KNOBS_ENV == {"SGLANG_OPT_UNIFIED_CACHE_FREE_OUT_OF_WINDOW_SLOTS": "0",
                                       "SGLANG_OPT_RELEASE_PREFILL_SWA": "1"}
    seen = []

    class Boot(Exception):
        pass

    class FakeServer:
        def __init__(self, model, args, boot_timeout_s, env, python, **kw):
            seen.append((list(args), env, python))

        def start(self):
            raise Boot

    monkeypatch.setattr(dr_run, "SglangServer", FakeServer)
    monkeypatch.setattr(dr_setup, "main_python", lambda: "/venv-main/bin/python")
    monkeypatch.setattr(dr_setup, "main_islands_python",
                        lambda: "/venv-main-islands/bin/python")
    arms = ("main_knobs", "main_free_off", "main_release_prefill", "main_islands")
    for arm in arms:
        with pytest.raises(Boot):
            dr_run.run_arm(_ROOT, 100, arm, dr_setup.quick_shape(1), [])
    sa = dr_setup.SERVER_ARGS
    assert seen == [
        (sa, main_arm.MAIN_KNOBS_ENV, "/venv-main/bin/python"),
        (sa, main_arm.MAIN_FREE_OFF_ENV, "/venv-main/bin/python"),
        (sa, main_arm.MAIN_RELEASE_PREFILL_ENV, "/venv-main/bin/python"),
        (sa + ["--enable-swa-islands"], None, "/venv-main-islands/bin/python")]


def test_model_option_reaches_the_arms_and_refuses_arms_that_do_not_serve_it(monkeypatch, capsys):
    """``--model gemma4``: the model's server arguments follow every arm's own (the CLI stopped
    at the first boot), its checkpoint is the one booted; the 0.5.15.post1 arms are refused by
    name."""
    from islands_harness.models import get_model

    g4 = list(get_model("gemma4").server_args)
    seen = []

    class Boot(Exception):
        pass

    class FakeServer:
        def __init__(self, model, args, boot_timeout_s, env, python, **kw):
            seen.append((pathlib.Path(model).name, list(args)))

        def start(self):
            raise Boot

    monkeypatch.setattr(dr_run, "SglangServer", FakeServer)
    monkeypatch.setattr(dr_setup, "main_islands_python", lambda: "/venv-main-islands/bin/python")
    monkeypatch.setattr(dr_run, "code_version", lambda python: {})
    with pytest.raises(Boot):
        dr_cli.main(["--quick", "--model", "gemma4", "--arms", "main_islands,main"])
    assert seen == [(get_model("gemma4").build().name,
                     dr_setup.SERVER_ARGS + ["--enable-swa-islands"] + g4)]
    with pytest.raises(SystemExit) as e:
        dr_cli.main(["--model", "gemma4", "--arms", "main,upstream,islands"])
    assert e.value.code == 2 and "arms upstream, islands" in capsys.readouterr().err


def test_main_islands_python_names_the_build_step_when_missing(monkeypatch, tmp_path):
    from islands_harness import main_arm

    monkeypatch.setattr(main_arm, "MAIN_ISLANDS_PYTHON", tmp_path / "nope" / "bin" / "python")
    with pytest.raises(SystemExit, match="setup_main.sh --islands"):
        main_arm.main_islands_python()


def test_outputs_are_compared_against_the_first_arm_without_upstream():
    arms = {"main": {"_outputs": {"a": [1, 2]}}, "main_knobs": {"_outputs": {"a": [1, 2]}},
            "main_islands": {"_outputs": {"a": [1, 3]}}}
    eq = dr_report.compare_outputs(arms)
    assert eq["reference"] == "main" and eq["arms_compared"] == ["main_islands", "main_knobs"]
    assert eq["differ"] == {"main_islands:a": {"first_diff": 1}} and not eq["all_equal"]
    assert "reference" not in dr_report.compare_outputs(
        {"upstream": {"_outputs": {}}, "main": {"_outputs": {}}})


def test_hf_check_finds_the_first_token_that_is_not_transformers_greedy(tmp_path):
    """The reference arm's outputs against transformers' greedy of the same inputs: HF's own
    continuation passes, one changed token is reported at its index, and the table says so."""
    from islands_harness.hf_oracle import greedy_decode_one
    from islands_harness.tiny_model import build_tiny_model

    model = build_tiny_model(tmp_path / "m", window=16, layers=4, hidden=64, vocab=512, seed=3)
    prompt = list(range(5, 45))
    good = greedy_decode_one(model, prompt, 12)
    bad = good[:7] + [(good[7] + 1) % 500] + good[8:]
    arms = {"main": {"_inputs": {"a": prompt, "b": prompt}, "_outputs": {"a": good, "b": bad}},
            "main_islands": {"_inputs": {}, "_outputs": {}}}
    hf = dr_report.hf_check(model, arms)
    assert hf == {"reference": "main", "requests": 2, "differ": {"b": {"first_diff": 7}},
                  "all_equal": False}
    r = json.loads(MAIN_RESULT_JSON.read_text())
    assert "Transformers' greedy" in dr_report.markdown({**r, "hf": hf})


def test_committed_result_backs_the_claims_and_renders_the_committed_table():
    assert RESULT_JSON.exists(), f"{RESULT_JSON} is missing: README quotes it"
    r = json.loads(RESULT_JSON.read_text())
    assert set(r["arms"]) == {"upstream", "upstream_knobs", "islands", "main"}
    assert r["command"].startswith(".venv/bin/python benchmarks/decode_reuse.py")
    keys = {"hit_tokens_on_running_output", "expected_min_hit_tokens", "prefill_tokens_computed",
            "peak_swa_used", "cached_share_per_turn", "phases"}
    for arm, a in r["arms"].items():
        assert keys <= set(a), (arm, keys - set(a))
        assert a["phases"]["follow_up"]["a_running_when_b_done"], arm
    isl = r["arms"]["islands"]
    sh = r["shape"]
    assert isl["expected_min_hit_tokens"] == sh["k"] * sh["interval"]
    assert isl["hit_tokens_on_running_output"] >= isl["expected_min_hit_tokens"]
    assert isl["decode_islands"]
    # main (stock 0.5.23) inserts generated text only at finish, like both 0.5.15 arms
    for name in ("upstream", "upstream_knobs", "main"):
        up = r["arms"][name]
        assert up["hit_tokens_on_running_output"] == 0, name
        assert isl["prefill_tokens_computed"] < up["prefill_tokens_computed"], name
        assert up["decode_islands"] is None, name
    assert isl["peak_swa_used"] < r["arms"]["upstream"]["peak_swa_used"]
    assert r["outputs"]["all_equal"] is True
    assert r["outputs"]["arms_compared"] == ["islands", "main", "upstream_knobs"]
    assert {n: dr_report.admitted_after_previous_finished(a)
            for n, a in r["arms"].items()} == {n: [] for n in r["arms"]}
    assert dr_report.markdown(r) == RESULT_MD.read_text()


def test_committed_main_result_backs_issue_27s_decode_claims():
    """``decode_reuse_main.json`` (sglang 0.5.23, with the 0.5.15 ``islands`` arm in the same run):
    main_islands hits the running output at least k * interval (the issue's 256 of 264), main and
    main_knobs 0; the agents' cached share per turn at least islands' on 0.5.15; outputs equal
    across arms and to transformers' greedy decoding."""
    r = json.loads(MAIN_RESULT_JSON.read_text())
    assert list(r["arms"]) == ["main", "main_knobs", "main_islands", "islands"]
    sh, isl = r["shape"], r["arms"]["main_islands"]
    assert isl["expected_min_hit_tokens"] == sh["k"] * sh["interval"] == 256
    assert isl["hit_tokens_on_running_output"] >= 256
    for name in ("main", "main_knobs"):
        a = r["arms"][name]
        assert a["hit_tokens_on_running_output"] == 0, name
        assert isl["prefill_tokens_computed"] < a["prefill_tokens_computed"], name
        assert all(x >= y for x, y in zip(isl["cached_share_per_turn"], a["cached_share_per_turn"]))
    ref = r["arms"]["islands"]["cached_share_per_turn"]
    # like with like: every while_running turn of every arm was admitted while its previous ran
    assert {n: dr_report.admitted_after_previous_finished(a)
            for n, a in r["arms"].items()} == {n: [] for n in r["arms"]}
    assert all(x >= y for x, y in zip(isl["cached_share_per_turn"], ref)), (
        isl["cached_share_per_turn"], ref)
    assert r["outputs"]["all_equal"] is True and r["outputs"]["reference"] == "main"
    assert r["hf"] == {"reference": "main", "requests": r["outputs"]["requests_compared"],
                       "differ": {}, "all_equal": True}  # and so every arm: transformers' greedy
    assert dr_report.markdown(r) == MAIN_RESULT_MD.read_text()


def test_turns_admitted_after_the_previous_finished_are_named_in_the_table():
    """A while_running turn whose previous turn had finished (stream lag past --run-on) measures a
    finished transcript's hit, not a running output's: the table names it, per arm."""
    r = json.loads(MAIN_RESULT_JSON.read_text())
    assert "Admitted after the previous turn" not in dr_report.markdown(r)
    arm = r["arms"]["islands"]
    arm["phases"]["agents"]["per_turn"][2]["prev_running_at_admit"] -= 1
    arm["phases"]["conversation_while_running"]["turns"][1]["prev_running_at_admit"] = False
    late = dr_report.admitted_after_previous_finished(arm)
    agents = len(arm["phases"]["agents"]["turns"])
    assert late == ["conversation turn 2", f"agents turn 3 (1 of {agents})"]
    assert f"islands: conversation turn 2, agents turn 3 (1 of {agents})" in dr_report.markdown(r)
