"""Running ``scripts/equality_gate.py`` from the tests of either target (test_equality_gate.py,
test_equality_gate_main.py): one subprocess, its output with warnings dropped, and the quick gate
that records the islands-off reference the negative control reuses."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
GATE = ROOT / "scripts" / "equality_gate.py"
GATE_TIMEOUT_S = 1200


def run_gate(*args: str) -> tuple[int, str]:
    """(exit status, output without warning lines) of the gate run with ``args``."""
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "2")
    p = subprocess.run([sys.executable, str(GATE), *args], cwd=ROOT, env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=GATE_TIMEOUT_S)
    out = "\n".join(ln for ln in p.stdout.splitlines()
                    if "Warning" not in ln and "warnings.warn" not in ln)
    print(out[-6000:])
    return p.returncode, out


def quick_gate_run(directory: pathlib.Path, *target_args: str):
    """The quick gate in ``directory``: (exit status, output, summary json, reference path)."""
    ref, js = directory / "reference.json", directory / "quick.json"
    rc, out = run_gate(*target_args, "--quick", "--save-reference", str(ref), "--json-out", str(js))
    summary = json.loads(js.read_text()) if js.exists() else {}
    return rc, out, summary, ref
