"""Importing a benchmark module changes nothing in the importing process's environment.

A test process imports benchmark modules (the reports, to regenerate committed results; the
workloads, to test them) and then, in the same pytest worker, may run engine tests: a module that
set, say, ``SGLANG_SWA_EVICTION_INTERVAL`` at import would change how every later stack in that
process evicts. Commands set what their run needs in ``main`` instead.
"""

import json
import os
import pathlib
import subprocess
import sys

_ROOT = pathlib.Path(__file__).resolve().parents[2]
BENCHMARKS = _ROOT / "benchmarks"

_PROBE = r"""
import importlib, json, os, pathlib, sys
bench = pathlib.Path(sys.argv[1])
sys.path[:0] = [str(bench), str(bench.parent)]
before = dict(os.environ)
failed, names = [], []
for p in sorted(bench.rglob("*.py")):
    name = ".".join(p.relative_to(bench).with_suffix("").parts).removesuffix(".__init__")
    names.append(name)
    try:
        importlib.import_module(name)
    except Exception as e:
        failed.append(f"{name}: {type(e).__name__}: {e}")
after = dict(os.environ)
TORCH_OWN = {"TORCHINDUCTOR_CACHE_DIR"}  # set by torch's inductor when it first loads: not ours
changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k) and k not in TORCH_OWN)
print(json.dumps({"names": names, "failed": failed, "changed": changed}))
"""


def test_importing_every_benchmark_module_leaves_the_environment_alone():
    env = dict(os.environ, SGLANG_USE_CPU_ENGINE="1", TRITON_INTERPRET="1")
    env.pop("SGLANG_SWA_EVICTION_INTERVAL", None)
    p = subprocess.run([sys.executable, "-c", _PROBE, str(BENCHMARKS)], capture_output=True,
                       text=True, timeout=300, env=env, cwd=_ROOT)
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert "cache_cost.main_target" in out["names"] and "prefix_reuse.report" in out["names"]
    assert out["failed"] == []
    assert out["changed"] == []


def test_the_top_of_benchmarks_holds_commands_only():
    """Each file at the top of ``benchmarks/`` is a command: a script whose ``--help`` says what
    it does (its library is the package beside it)."""
    for p in sorted(BENCHMARKS.iterdir()):
        if p.is_dir():
            continue
        assert p.suffix in (".py", ".sh"), f"{p.name}: not a command"
        text = p.read_text()
        if p.suffix == ".py":
            assert 'if __name__ == "__main__":' in text, f"{p.name}: not a command"
        else:
            assert text.startswith("#!"), f"{p.name}: not a command"
