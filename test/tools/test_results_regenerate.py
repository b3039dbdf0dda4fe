"""Every committed result regenerates byte-identical from its JSON (issue 28: same outputs).

Every markdown under ``benchmarks/results/`` is one of three kinds, and this module names each:

- ``RENDERED``: ``STEM.md`` is what ``module.function`` (the report that wrote it) renders from
  ``STEM.json`` today, byte for byte;
- ``FLEET``: the fleet's results, regenerated through ``fleet.py --from-json`` in ``test_fleet.py``
  (the comparison is recomputed there; the plot's name comes from the output path);
- ``ANALYSES``: written by hand from other results (repeats, the equality gate's runs, the GPU
  session logs, the mutation run), each with the results it reads; they have no JSON of their own.

A markdown in none of them fails ``test_every_committed_markdown_is_accounted_for``: a new result
must be rendered by its benchmark, and a new analysis said to be one.
"""

import importlib
import json
import pathlib
import sys

import pytest

_ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(_ROOT / "benchmarks"))
sys.path.insert(0, str(_ROOT))
RESULTS = _ROOT / "benchmarks" / "results"


def _cases(module, function, *stems):
    return [(module, function, s) for s in stems]


RENDERED = (
    _cases("prefix_reuse.report", "to_markdown",
           "prefix_reuse_quick", "prefix_reuse_quick_main", "prefix_reuse_quick_main_auto",
           "prefix_reuse_quick_main_islands", "prefix_reuse_quick_main_islands_auto",
           "prefix_reuse_quick_main_islands_repeat", "prefix_reuse_quick_main_window",
           "prefix_reuse_quick_main_window_queued", "prefix_reuse_quick_main_window_touch",
           "prefix_reuse_quick_main_gemma4", "prefix_reuse_quick_main_gemma4_ngram", "prefix_reuse_quick_main_ngram",
           "prefix_reuse_quick_main_hicache",
           "prefix_reuse_quick_main_hicache_gemma4",
           *(f"prefix_reuse_repeats_main_hicache{x}/r{k}"
             for x in ("", "_window", "_window_gemma4_cell") for k in (1, 2, 3)),
           *(f"prefix_reuse_repeats_main_hicache_window_fanout_cell/r{k}" for k in (1, 2, 3, 4)),
           *(f"prefix_reuse_repeats_main_hicache_{x}/r{k}"
             for x in ("lean_device", "gemma4", "window_lean_device")
             for k in (1, 2)),
           *(f"prefix_reuse_repeats_main_hicache_window_gemma4/r{k}" for k in range(1, 6)))
    + _cases("prefix_reuse.repeats", "to_markdown", "prefix_reuse_repeats_main_hicache/summary",
             "prefix_reuse_repeats_main_hicache_window/summary",
             "prefix_reuse_repeats_main_hicache_window_lean_device/summary",
             "prefix_reuse_repeats_main_hicache_window_gemma4/summary",
             "prefix_reuse_repeats_main_hicache_window_gemma4_cell/summary",
             "prefix_reuse_repeats_main_hicache_window_fanout_cell/summary",
             "prefix_reuse_repeats_main_hicache_lean_device/summary",
             "prefix_reuse_repeats_main_hicache_gemma4/summary")
    + _cases("prefix_reuse.sim", "to_markdown", "prefix_reuse_sim", "prefix_reuse_sim_main",
             "prefix_reuse_sim_main_latency2", "prefix_reuse_sim_main_24seeds",
             "prefix_reuse_sim_main_24seeds_latency2", "prefix_reuse_sim_main_hicache")
    + _cases("admission.report", "to_markdown",
             "admission", "admission_agent_while_running", "admission_quick",
             "admission_quick_main", "admission_quick_main_auto", "admission_quick_main_gemma4",
             "admission_quick_main_gemma4_ngram")
    + _cases("cache_cost.report", "to_markdown", "cache_cost", "cache_cost_before")
    + _cases("cache_cost.main_target", "report", "cache_cost_main", "cache_cost_main_chunk256",
             "cache_cost_main_chunk512", "cache_cost_main_interval64")
    + _cases("decode_reuse.report", "markdown", "decode_reuse", "decode_reuse_main",
             "decode_reuse_main_gemma4")
    + _cases("swa_hold.report", "to_markdown",
             "swa_hold_quick", "swa_hold_production", "swa_hold_main_quick",
             "swa_hold_main_production", "swa_hold_main_production_gemma4",
             "swa_hold_main_production_gemma4_spec",
             "gpu/swa_hold_quick_cuda", "gpu/swa_hold_production_cuda",
             "gpu/2026-12-01/swa_hold_quick_cuda", "gpu/2026-12-01/swa_hold_production_cuda")
    + _cases("seed_table.report", "to_markdown", "seed_table", "seed_table_980k")
    + _cases("trace_replay.report", "to_markdown", "trace_replay_15min",
             "trace_replay_10min_speed2", "trace_replay_10min_speed05",
             "trace_replay_hour_islands_010", "trace_replay_hour_speed2")
    + _cases("trace_server.report", "to_markdown", "trace_server")
    + _cases("soak.report", "to_markdown",
             "soak_30min", "soak_30min_main", "soak_30min_main_window", "soak_quick_off",
             "soak_quick_main_hicache", "soak_quick_main_hicache_held2", "soak_quick_main_ngram",
             "soak_quick_main_mtp", "soak_quick_main_mtp_off", "soak_quick_main_gemma4_ngram")
)

FLEET = ("fleet_quick", "fleet_quick_repeat", "fleet_quick_window")
"""Regenerated in ``test_fleet.py::test_committed_result_regenerates_byte_identical``."""

ANALYSES = {
    "equality_gate_main": "the 0.5.23 gate's runs: equality_gate_main_{quick,window,full_p16,control,hicache,ngram,ngram_control,mtp,mtp_control}.json",
    "mutation_report": "the cosmic-ray run of scripts/mutation.sh, with a verdict per survivor",
    "prefix_reuse_repeats": "repeated prefix_reuse runs on 0.5.15, each with its own JSON + md",
    "prefix_reuse_repeats_main": "repeated runs on 0.5.23: prefix_reuse_repeats_main_{queued,launched,reserve}/*.json",
    "swa_hold_main_rollback": "the rollback read off swa_hold_main_production.json",
    "gpu/README": "the GPU sessions: what ran, their logs and the results beside them",
    "gpu/2026-12-01/README": "the H200 session of 2026-12-01",
}


@pytest.mark.parametrize("module,function,stem", RENDERED, ids=[c[2] for c in RENDERED])
def test_committed_markdown_regenerates_from_its_json(module, function, stem):
    render = getattr(importlib.import_module(module), function)
    result = json.loads((RESULTS / f"{stem}.json").read_text())
    assert render(result) == (RESULTS / f"{stem}.md").read_text()


def test_every_committed_markdown_is_accounted_for():
    """Each markdown under benchmarks/results is rendered, a fleet result or a named analysis,
    exactly one of them; every rendered or fleet stem has its JSON beside it."""
    on_disk = sorted(str(p.relative_to(RESULTS).with_suffix("")) for p in RESULTS.rglob("*.md"))
    rendered = [c[2] for c in RENDERED]
    named = rendered + list(FLEET) + list(ANALYSES)
    assert len(named) == len(set(named)), "a stem listed twice"
    assert sorted(named) == on_disk
    assert all((RESULTS / f"{s}.json").is_file() for s in rendered + list(FLEET))
