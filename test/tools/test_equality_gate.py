"""The two-boot equality gate (scripts/equality_gate.py) and its negative control.

Server tests (``-m server``). Measured on 2 cores: 125 s for both with the HF oracle cached in
.work/ and the machine otherwise idle (quick gate 53 s, control 69 s); add ~1 min for a cold
oracle cache (a fresh checkout); 9-11 min when the cores are shared with other loaded servers.
- ``--quick`` must PASS: islands on and off give byte-identical outputs, agree with HF greedy,
  islands really hit (cache hits, a decode-island hit), both pools are conserved;
- the negative control (islands boot with test/shims/wrong_frontier, which frees SWA KV a window
  past the frontier) must FAIL on the outputs. It reuses the islands-off boot of the first test
  (``--save-reference`` / ``--reference``), so it boots once.

Fast tests (no server): the workload's shape, the shim staying off the production path, the
GPU gate script's syntax and dry run.
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
GPU_GATE = ROOT / "scripts" / "gpu_gate.sh"
SHIM = ROOT / "test" / "shims" / "wrong_frontier" / "sitecustomize.py"


_run_gate = run_gate


@pytest.fixture(scope="module")
def quick_gate(tmp_path_factory):
    return quick_gate_run(tmp_path_factory.mktemp("equality_gate"))


@pytest.mark.server
def test_quick_gate_passes(quick_gate):
    rc, out, summary, _ = quick_gate
    assert rc == 0, f"equality gate failed (exit {rc}); tail:\n{out[-3000:]}"
    assert "EQUALITY GATE: PASS" in out
    page = summary["pages"]["1"]
    for cls in ("cold", "reserve", "extension", "concurrent", "multiturn", "junction",
                "junction_pressure"):
        c = page["per_class"][cls]
        assert c["identical"] == c["n"] > 0, (cls, c)
    # The evidence lines the gate requires, as numbers: a decode-island hit beyond the prompt.
    cached_on, cached_off = page["cached_on"], page["cached_off"]
    probes = [k for k in cached_on if k.startswith("ext_probe")]
    assert probes and max(cached_on[k] - cached_off[k] for k in probes) > 0, (cached_on, cached_off)
    # required evidence (docs/equality-gate.md): the islands boot reported its island inserts
    ic = page["island_counters"]
    assert ic is not None, "the islands boot exposed no sglang:swa_island_*_inserts"
    assert ic.get("chunk", 0) > 0 and ic.get("decode", 0) >= 4, ic
    # junctions: the probes hit the whole shared 700-token prefix in the islands boot, the one
    # after pressure too (upstream's LRU may have lost it; islands reclaim the junction last)
    assert cached_on["j_probe"] >= 700 and cached_off["j_probe"] >= 700, (cached_on, cached_off)
    assert cached_on["jp_probe"] >= 700, (cached_on, cached_off)


@pytest.mark.server
def test_negative_control_wrong_frontier_fails(quick_gate, tmp_path):
    _, _, _, ref = quick_gate
    assert ref.exists(), "the quick gate did not record an islands-off reference"
    js = tmp_path / "control.json"
    rc, out = _run_gate("--quick", "--negative-control", "--reference", str(ref),
                        "--json-out", str(js))
    assert rc == 1, f"the negative control must FAIL with exit 1, got {rc}; tail:\n{out[-3000:]}"
    assert "EQUALITY GATE: FAIL (negative control)" in out
    summary = json.loads(js.read_text())
    assert summary["shim_active"] is True, "the wrong-frontier shim did not run in the server"
    first = summary["pages"]["1"]["first_difference"]
    assert first is not None, "the control failed, but not on the outputs"
    assert any("outputs differ" in f for f in summary["failures"])


# ---- fast checks ------------------------------------------------------------------------------


def _load_gate_module():
    import importlib.util

    if "equality_gate" in sys.modules:
        return sys.modules["equality_gate"]
    spec = importlib.util.spec_from_file_location("equality_gate", GATE)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["equality_gate"] = mod  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("quick", [True, False])
def test_workload_shape(quick):
    g = _load_gate_module()
    steps = g.build_workload(683, quick, 64)
    reqs = g.all_reqs(steps)
    by_name = {r.name: r for r in reqs}
    assert {r.cls for r in reqs} == set(g.CLASSES)
    assert len(by_name) == len(reqs)
    # chunked prompts (cp/(w+p) ~ 15 at chunk 512): some prompt spans >= 2 chunks
    assert max(len(r.ids) for r in reqs if r.cls == "cold") > 2 * g.CPU_CHUNK
    # every cold request starts at a distinct first token (nothing can be cached for it)
    firsts = [r.ids[0] for r in reqs if r.expect == "cold"]
    assert len(firsts) == len(set(firsts))
    # chained requests come after their parent
    seen = set()
    for r in reqs:
        assert r.parent is None or r.parent in seen, r.name
        seen.add(r.name)
    # extension links reuse >= 4 decode intervals of generated text; probes run mid-flight
    links = [r for r in reqs if r.depth_from]
    assert links and all(r.min_islands >= 4 for r in links)
    for r in links:  # the generation between the base prompt and this link's prompt
        gen, p = 0, by_name[r.parent]
        while True:
            gen += p.n
            if p.parent is None:
                break
            p = by_name[p.parent]
        assert gen >= 4 * 64 * (r.min_islands // 4), (r.name, gen)
    probes = [r for r in reqs if r.trigger is not None]
    assert probes
    for st in steps:
        if st.kind == "midrun":
            base, ps = st.reqs[0], st.reqs[1:]
            assert base.n >= 4 * 64 + 1 and ps
            for p in ps:
                # sent after >= 2 islands, its prompt past the latest one, long before the next
                assert p.parent == base.name and p.take + 8 == p.trigger < base.n
                assert p.take >= 2 * 64 and p.take % 64 == 16
    assert any(st.kind == "conc" for st in steps)
    # junctions: j_branch and j_probe share exactly 700 tokens with j_base; the pressure fill's
    # prompts exceed the gate's SWA pool (ratio 0.5 of 32768) before jp_probe comes
    base = by_name["j_base"].ids
    for name in ("j_branch", "j_probe", "jp_probe"):
        other = by_name[name].ids
        shared = next(i for i in range(len(base)) if base[i] != other[i])
        assert shared == 700, (name, shared)
    fill = [r for r in reqs if r.name.startswith("jp_fill")]
    assert sum(len(r.ids) for r in fill) > 16384 and by_name["jp_probe"].expect == "hit_on"
    names = [r.name for r in reqs]
    assert max(names.index(r.name) for r in fill) < names.index("jp_probe")
    assert g.workload_hash(steps) == g.workload_hash(g.build_workload(683, quick, 64))


def test_a_prompt_of_one_page_or_less_is_expected_cold():
    """reserve_len40 at page 64 (H200 gate, 2026-12-01): 40 tokens cannot fill a cached page."""
    g = _load_gate_module()
    r = g.Req("reserve_len40", "reserve", "hit", 16, ids=list(range(40)))
    assert g.expected_status(r, 40, 64) == "cold"
    assert g.expected_status(r, 64, 64) == "cold"  # a match leaves one token to compute
    assert g.expected_status(r, 65, 64) == "hit"
    assert g.expected_status(r, 40, 16) == "hit"
    cold = g.Req("cold_len40", "cold", "cold", 16, ids=list(range(40)))
    assert g.expected_status(cold, 4000, 1) == "cold"


def test_shim_is_test_only():
    """The control shim must never be reachable from the production path."""
    assert SHIM.is_file()
    for base in (ROOT / "python", ROOT / "patches"):
        for f in base.rglob("*"):
            if f.is_file() and f.suffix in (".py", ".patch"):
                text = f.read_text(errors="replace")
                assert "wrong_frontier" not in text and "sitecustomize" not in text, f
    import site

    for d in site.getsitepackages():
        assert not (pathlib.Path(d) / "sitecustomize.py").exists() or \
            "wrong_frontier" not in (pathlib.Path(d) / "sitecustomize.py").read_text()


def test_gpu_gate_script_is_valid_and_dry_runs():
    assert subprocess.run(["bash", "-n", str(GPU_GATE)]).returncode == 0
    p = subprocess.run(["bash", str(GPU_GATE), "--dry-run"], cwd=ROOT, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=60)
    assert p.returncode == 0, p.stdout
    for needle in ("--enable-swa-islands", "--page-size 64", "--kv-cache-dtype fp8_e4m3",
                   "--speculative-algorithm", "--attention-backend"):
        assert needle in p.stdout, needle
