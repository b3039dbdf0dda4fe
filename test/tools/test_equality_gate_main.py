"""The two-boot equality gate on sglang 0.5.23 (``scripts/equality_gate.py --target main``) and its
negative control.

Server tests (``-m server``), run where ``.venv-main-islands`` exists (``scripts/setup_main.sh
--islands``; skipped with the reason elsewhere). Three boots in all, as for 0.5.15
(test_equality_gate.py): the quick gate boots islands off and on together, and the control
reuses its islands-off boot (``--save-reference`` / ``--reference``), so it boots once.
- ``--target main --quick`` must PASS: both boots run the 0.5.23 islands environment, islands off
  vs ``--enable-swa-islands``, byte-identical outputs, equal to HF greedy, islands hit (cache
  hits, a mid-run probe hitting a decode island), both pools conserved;
- the negative control (test/shims/wrong_frontier_main: frees SWA KV a window past main's
  frontier after every island checkpoint) must FAIL on the outputs.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

from gate_runner import quick_gate_run, run_gate

ROOT = pathlib.Path(__file__).resolve().parents[2]
GATE = ROOT / "scripts" / "equality_gate.py"
MAIN_PYTHON = ROOT / ".venv-main-islands" / "bin" / "python"
SHIM = ROOT / "test" / "shims" / "wrong_frontier_main" / "sitecustomize.py"

needs_main = pytest.mark.skipif(
    not os.access(MAIN_PYTHON, os.X_OK),
    reason="no .venv-main-islands (build it with scripts/setup_main.sh --islands)")


# EQUALITY_GATE_ONE_SERVER=1: one server alive at a time (a shared machine), at the cost of the
# overlap of one boot with the other's workload
TARGET = ("--target", "main",
          *(["--one-server"] if os.environ.get("EQUALITY_GATE_ONE_SERVER") == "1" else []))


def _run_gate(*args: str) -> tuple[int, str]:
    return run_gate(*TARGET, *args)


@pytest.fixture(scope="module")
def quick_gate(tmp_path_factory):
    return quick_gate_run(tmp_path_factory.mktemp("equality_gate_main"), *TARGET)


@pytest.mark.server
@needs_main
def assert_quick_gate_passed(gate, model: str) -> None:
    """PASS on page 1: every class identical across boots, and a mid-run probe hit more than the
    islands-off boot gives it (a decode island)."""
    rc, out, summary, _ = gate
    assert rc == 0, f"equality gate (main, {model}) failed (exit {rc}); tail:\n{out[-3000:]}"
    assert "EQUALITY GATE: PASS" in out and "target main" in out and model in out
    assert summary["target"] == "main"
    page = summary["pages"]["1"]
    for cls in ("cold", "reserve", "extension", "concurrent", "multiturn", "junction"):
        c = page["per_class"][cls]
        assert c["identical"] == c["n"] > 0, (cls, c)
    cached_on, cached_off = page["cached_on"], page["cached_off"]
    probes = [k for k in cached_on if k.startswith("ext_probe")]
    assert probes and max(cached_on[k] - cached_off[k] for k in probes) > 0, (cached_on, cached_off)
    assert cached_on["j_probe"] >= 700, cached_on


def test_main_quick_gate_passes(quick_gate):
    assert_quick_gate_passed(quick_gate, "tiny-laguna")


@pytest.mark.server
@needs_main
def test_main_negative_control_wrong_frontier_fails(quick_gate, tmp_path):
    _, _, _, ref = quick_gate
    assert ref.exists(), "the quick gate did not record an islands-off reference"
    js = tmp_path / "control.json"
    rc, out = _run_gate("--quick", "--negative-control", "--reference", str(ref),
                        "--json-out", str(js))
    assert rc == 1, f"the negative control must FAIL with exit 1, got {rc}; tail:\n{out[-3000:]}"
    assert "EQUALITY GATE: FAIL (negative control)" in out
    summary = json.loads(js.read_text())
    assert summary["shim_active"] is True, "the wrong-frontier shim did not run in the server"
    assert summary["pages"]["1"]["first_difference"] is not None, \
        "the control failed, but not on the outputs"
    assert any("outputs differ" in f for f in summary["failures"])


# ---- Gemma 4 (issue 49): the same gate and control on the tiny published-layout checkpoint -----


def _gemma4_target() -> tuple[str, ...]:
    from islands_harness.models import get_model

    m = get_model("gemma4")
    return (*TARGET, "--model", str(m.build()), "--server-args", " ".join(m.server_args),
            "--oracle-python", str(MAIN_PYTHON))


@pytest.fixture(scope="module")
def gemma4_gate(tmp_path_factory):
    return quick_gate_run(tmp_path_factory.mktemp("equality_gate_gemma4"), *_gemma4_target())


@pytest.mark.server
@needs_main
def test_gemma4_quick_gate_passes(gemma4_gate):
    """Islands off and on, tiny Gemma 4 (dense, per-layer inputs): byte-identical outputs, equal
    to transformers' Gemma 4 (5.19, decoded in .venv-main-islands), islands hit, pools
    conserved."""
    assert_quick_gate_passed(gemma4_gate, "tiny-gemma4-dense")


@pytest.mark.server
@needs_main
def test_gemma4_negative_control_wrong_frontier_fails(gemma4_gate, tmp_path):
    _, _, _, ref = gemma4_gate
    assert ref.exists(), "the Gemma 4 gate did not record an islands-off reference"
    js = tmp_path / "control.json"
    rc, out = run_gate(*_gemma4_target(), "--quick", "--negative-control", "--reference", str(ref),
                       "--json-out", str(js))
    assert rc == 1, f"the negative control must FAIL with exit 1, got {rc}; tail:\n{out[-3000:]}"
    summary = json.loads(js.read_text())
    assert summary["shim_active"] is True, "the wrong-frontier shim did not run in the server"
    assert summary["pages"]["1"]["first_difference"] is not None
    assert any("outputs differ" in f for f in summary["failures"])


# ---- fast checks ------------------------------------------------------------------------------


def test_a_benign_logged_traceback_is_no_alarm():
    """0.5.23 logs "post-warmup freeze_gc failed" with a traceback when its /freeze_gc post
    races its own port at boot (seen on a loaded machine); that is no alarm, a traceback after
    the next log record is."""
    from islands_tools.equality_gate.boot import alarm_lines

    boot = ("[t] Uvicorn running\n[t] post-warmup freeze_gc failed\n"
            "Traceback (most recent call last):\n  File x\nConnectionRefusedError: refused\n"
            "[t] The server is fired up and ready to roll!\n")
    assert alarm_lines(boot) == []
    later = boot + "[t] Exception in scheduler\nTraceback (most recent call last):\n  File y\n"
    assert alarm_lines(later) == ["Traceback (most recent call last):"]
    assert alarm_lines("[t] SWA Pool Mem Leak Detected! x\n") == ["[t] SWA Pool Mem Leak Detected! x"]


def test_a_cold_serve_off_hf_only_at_a_near_tie_on_hfs_runner_up_is_a_note():
    """The strict oracle policy: a cold serve both boots agree on fails when it parts from HF,
    unless HF's margin at that token is below NEAR_TIE_LOGITS and the server took HF's runner-up
    (float32 summation order decides such a token)."""
    from islands_harness.hf_oracle import NEAR_TIE_LOGITS
    from islands_tools.equality_gate.boot import Served
    from islands_tools.equality_gate.compare import Verdict, agreement_against_hf
    from islands_tools.equality_gate.workload import Req

    class FakeOracle:
        def __init__(self, margin):
            self.m = margin

        def margin(self, ids):
            assert ids == [1, 2, 3, 7, 8], ids  # the prompt + HF's output up to the difference
            return {"top": 9, "runner_up": 5, "margin": self.m}

    r = Req(name="c", cls="cold", expect="cold", ids=[1, 2, 3], n=4)
    served = Served(output_ids=[7, 8, 5, 6], cached_tokens=0, prompt_tokens=3)
    hf = [7, 8, 9, 6]
    verdicts = {}
    for name, margin in (("tie", NEAR_TIE_LOGITS / 2), ("gap", NEAR_TIE_LOGITS * 2)):
        v = Verdict(hf_off=False, hf_on=False)
        agreement_against_hf(r, "cold", served, served, [1, 2, 3], hf, FakeOracle(margin), True,
                             "on", v)
        verdicts[name] = v
    assert verdicts["tie"].failure is None and "NEAR TIE" in verdicts["tie"].note
    assert "cold serve differs from HF" in verdicts["gap"].failure
    other = Served(output_ids=[7, 8, 4, 6], cached_tokens=0, prompt_tokens=3)  # not the runner-up
    v = Verdict(hf_off=False, hf_on=False)
    agreement_against_hf(r, "cold", other, other, [1, 2, 3], hf, FakeOracle(1e-9), True, "on", v)
    assert v.failure and "cold serve differs from HF" in v.failure


def test_main_shim_is_test_only():
    """The 0.5.23 control shim never reaches the production path of the main target."""
    assert SHIM.is_file()
    for base in (ROOT / "python-main", ROOT / "patches-main"):
        for f in base.rglob("*"):
            if f.is_file() and f.suffix in (".py", ".patch"):
                text = f.read_text(errors="replace")
                assert "wrong_frontier" not in text and "sitecustomize" not in text, f


def test_main_target_boots_the_islands_env_with_and_without_the_flag():
    """--print-commands: both boots on .venv-main-islands' interpreter, the only differences
    --enable-swa-islands and, for the control boot (the main shim on PYTHONPATH), the lru order
    whose commit-time free the shim moves."""
    p = subprocess.run([sys.executable, str(GATE), "--target", "main", "--quick",
                        "--negative-control", "--print-commands"], cwd=ROOT,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    assert p.returncode == 0, p.stdout
    cmds = [ln for ln in p.stdout.splitlines() if "sglang.launch_server" in ln]
    envs = [ln for ln in p.stdout.splitlines() if ln.startswith("# page")]
    assert len(cmds) == 2 and len(envs) == 2, p.stdout
    assert all(c.startswith(str(MAIN_PYTHON)) for c in cmds), cmds
    off, on = cmds
    assert "--enable-swa-islands" not in off.split() and "--enable-swa-islands" in on.split()
    assert on.endswith(" --swa-islands-eviction lru"), on
    assert on.replace(" --enable-swa-islands", "").replace(" --swa-islands-eviction lru", "") == off
    assert "wrong_frontier_main" in envs[1] and "wrong_frontier" not in envs[0]
