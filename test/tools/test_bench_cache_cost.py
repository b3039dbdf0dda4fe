"""benchmarks/cache_cost.py: per-operation cost of the tree cache, islands against upstream.

The --quick run (about 2 minutes) is marked ``server`` like the suite's other tests that run for
minutes (``-m "not server"`` skips it); the rest take seconds."""

import json
import os
import pathlib
import sys

import pytest

_ROOT = str(pathlib.Path(__file__).resolve().parents[2])
sys.path.insert(0, os.path.join(_ROOT, "benchmarks"))

from cache_cost import cli as cache_cost  # noqa: E402
from cache_cost import report  # noqa: E402
from cache_cost import run  # noqa: E402
from cache_cost.ops import clone_tree, evict_swa, size_facts, summary  # noqa: E402
from cache_cost.workload import Shape  # noqa: E402

ISLANDS_ONLY = {"decode_island", "queued_refresh"}


def _check_cell(arm, op, cell):
    if cell is None:
        assert arm == "upstream" and op in ISLANDS_ONLY, (arm, op)
        return
    assert set(cell) == {"median_us", "p90_us", "n"}, (arm, op)
    assert cell["n"] > 0 and 0 < cell["median_us"] <= cell["p90_us"], (arm, op, cell)


@pytest.mark.server  # slow: about 2 minutes
def test_quick_writes_every_cell_json_md_and_plot(tmp_path):
    assert cache_cost.main(["--quick", "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "cache_cost.json").read_text())
    preset = cache_cost.PRESETS["quick"]
    want = f".venv/bin/python benchmarks/cache_cost.py --quick --out {tmp_path}"
    assert result["command"] == want
    assert result["arms"] == list(run.ARM_ORDER) and result["git_head"]
    for arm in run.ARM_ORDER:
        for w, sizes in preset.sizes.items():
            for n in sizes:
                r = result["size_sweep"][arm][str(w)][str(n)]
                assert set(r["ops"]) == set(report.SIZE_OPS), (arm, w, n)
                for op, cell in r["ops"].items():
                    _check_cell(arm, op, cell)
                for facts in (r["facts"], r["facts_nocold"]):
                    assert facts["tokens_cached"] >= facts["swa_tokens_live"] > 0
                    assert facts["nodes"] >= facts["live_swa_nodes"] > 0
                assert r["facts"]["build_evictions"] == 0  # the pools hold the whole build
                assert r["facts"]["path_nodes"] >= 1  # the probed transcript ends are cached
        for q in preset.queue:
            ops = result["queue_sweep"][arm][str(q)]["ops"]
            assert set(ops) == set(report.QUEUE_OPS), (arm, q)
            for op, cell in ops.items():
                _check_cell(arm, op, cell)
    # tokens cached grow with the size and are the same workload in every arm
    for w, sizes in preset.sizes.items():
        tokens = [result["size_sweep"]["upstream"][str(w)][str(n)]["facts"]["tokens_cached"]
                  for n in sizes]
        assert tokens == sorted(tokens) and len(set(tokens)) == len(tokens)
        for arm in run.ARM_ORDER:
            assert tokens == [result["size_sweep"][arm][str(w)][str(n)]["facts"]["tokens_cached"]
                              for n in sizes]
    assert {r["verdict"] for r in result["analysis"]["size"]} <= {"PASS", "FAIL", "note", "n/a",
                                                                   "per node"}
    md = (tmp_path / "cache_cost.md").read_text()
    assert result["command"] in md and "## Window 32" in md and "## Waiting queue" in md
    assert "| evict_64_nocold | 512 |" in md
    assert (tmp_path / "cache_cost.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("arm", ["islands_lazy", "upstream"])
@pytest.mark.parametrize("share", [0.5, 0.95])
def test_a_clone_evicts_as_the_original_and_leaves_it_untouched(arm, share):
    """The evictions are timed on clones: a clone must behave like the tree it copies (same
    evicted tokens, same facts and island stats after) and leave the original as it was, with
    requests queued (queued hits) and deep enough to reach the windows (0.95 of the evictable)."""
    built = run.build(arm, Shape(32), 8, 0)
    tree, stack = built.stack.tree, built.stack
    probes = run.Probes(built.traffic, built.rows, 0)
    reqs = run.queue_requests(built.sched, [probes.queued() for _ in range(4)], "t")
    before = size_facts(tree)
    free_before = stack.allocator.swa_available_size()
    clone = clone_tree(tree, stack.kv_pool, stack.req_to_token_pool, shared=reqs)
    k = int(tree.swa_evictable_size() * share)
    got = evict_swa(clone, k)
    assert size_facts(tree) == before and stack.allocator.swa_available_size() == free_before
    clone.sanity_check()
    want = evict_swa(tree, k)
    assert got == want
    assert size_facts(clone) == size_facts(tree)
    assert (clone.token_to_kv_pool_allocator.swa_available_size()
            == stack.allocator.swa_available_size())
    if arm != "upstream":
        assert clone.stats == tree.stats
        assert clone.stats.reclaimed_window > 0 or share < 0.9  # the windows were reached


def test_summary_and_slope():
    assert summary([]) is None
    assert summary([3.0, 1.0, 2.0]) == {"median_us": 2.0, "p90_us": 3.0, "n": 3}
    assert report._slope([10, 100, 1000], [1, 10, 100]) == 1.0
    assert report._slope([10, 100], [5, 5]) == 0.0
    assert report._verdict("evict_64_nocold", [1.0, 1.3], 0.0, 0.0) == "FAIL"
    assert report._verdict("evict_64_nocold", [1.0, 1.1], 0.5, 0.0) == "FAIL"
    assert report._verdict("evict_64_nocold", [1.0, 1.1], 0.1, 0.0) == "PASS"
    assert report._verdict("on_request_queued", [100.0], 0.0, 0.0) == "note"
    # above the limit, within it per path node: named as such; a steeper curve still fails
    assert report._verdict("lock_inc", [1.0, 1.8], 0.0, 0.0, [0.9, 1.1]) == "per node"
    assert report._verdict("lock_inc", [1.0, 1.8], 0.0, 0.0, [0.9, 1.3]) == "FAIL"
    assert report._verdict("lock_inc", [1.0, 1.8], 0.5, 0.0, [0.9, 1.1]) == "FAIL"


def test_help_explains_the_sweeps(capsys):
    with pytest.raises(SystemExit):
        cache_cost.parse_args(["--help"])
    out = capsys.readouterr().out
    assert "--quick" in out and "--out DIR" in out and "queue" in out and "upstream" in out


RESULTS = pathlib.Path(_ROOT) / "benchmarks" / "results"


def test_markdown_shows_only_what_the_run_measured():
    """Path nodes (columns, the per-path-node ratio and its verdict's note) appear for a run that
    recorded them, not for one from before (cache_cost_before); the note that `islands_auto`
    built `islands_lazy`'s tree is written only where the JSON shows the same trees."""
    after = json.loads((RESULTS / "cache_cost.json").read_text())
    before = json.loads((RESULTS / "cache_cost_before.json").read_text())
    md_after, md_before = report.to_markdown(after), report.to_markdown(before)
    for needle in ("/ path nodes |", "| max ratio per path node |", "`per node`: above the limit"):
        assert needle in md_after and needle not in md_before, needle
    assert "| sweep | op | arm | max ratio | slope (upstream) | verdict |\n|---|---|---|---|---|---|\n" \
        in md_before
    same = "builds the same tree as `islands_lazy`"
    assert same in md_after and same in md_before
    cell = next(iter(next(iter(before["size_sweep"]["islands_auto"].values())).values()))
    cell["facts"]["nodes"] += 1
    assert same not in report.to_markdown(before)
