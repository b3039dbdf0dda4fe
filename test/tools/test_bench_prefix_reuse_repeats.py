"""benchmarks/prefix_reuse/repeats.py: per-cell means, standard errors and issue 50's check on the
means, from hand-built runs (seconds, no server)."""

import math
import os
import pathlib
import sys

_ROOT = str(pathlib.Path(__file__).resolve().parents[2])
sys.path.insert(0, os.path.join(_ROOT, "benchmarks"))

from prefix_reuse.repeats import mean_se, summarize, to_markdown  # noqa: E402


def _rec(cached, requests=24, bound=31_500):
    return {"cached_tokens": cached, "requests": requests, "expected_shared_tokens": bound,
            "retractions": 0, "host_hit_tokens": 0}


def _run(isl_hi, hi, isl, date="2026-12-06 12:00"):
    return {"command": "prefix_reuse.py --quick", "date": date, "git_head": "abc", "runtime_s": 60,
            "pools": {"0.10-eq": {}},
            "arms": {"main_islands_hicache": {"0.10-eq": {"fanout": _rec(isl_hi)}},
                     "main_hicache": {"0.10-eq": {"fanout": _rec(hi)}},
                     "main_islands": {"0.10-eq": {"fanout": _rec(isl)}}}}


def test_mean_and_standard_error():
    assert mean_se([10]) == {"mean": 10, "se": 0.0, "n": 1}
    m = mean_se([10, 12, 14])
    assert m["mean"] == 12 and math.isclose(m["se"], 2 / math.sqrt(3))


def test_the_check_is_on_the_means_not_on_any_single_run():
    # Run 1 alone fails by 1,000 tokens (slack 24); the means pass: 30,000 against 29,500.
    runs = [_run(29_000, 30_000, 28_000), _run(31_000, 29_000, 28_500)]
    s = summarize(runs, page=1)
    [c] = s["acceptance_hicache"]
    assert (c["islands"], c["reference"], c["better"]) == (30_000, 29_500, "main_hicache")
    assert c["pass"] and c["diff"] == 500
    # Two runs: se = |a - b| / 2, so 1,000 and 500; the noise of the difference is their hypot.
    assert math.isclose(c["noise"], math.hypot(1000, 500))
    assert s["arms"]["main_hicache"]["0.10-eq"]["fanout"]["runs"] == [30_000, 29_000]
    assert s["summary"] == {"pass": 1, "fail": 0, "fail_beyond_noise": 0}


def test_a_deficit_within_noise_is_told_apart_from_one_beyond_it():
    noisy = summarize([_run(29_000, 30_000, 0), _run(31_000, 31_000, 0)], page=1)
    [c] = noisy["acceptance_hicache"]
    assert not c["pass"] and c["diff"] == -500 and -c["diff"] < 2 * c["noise"]
    assert noisy["summary"]["fail_beyond_noise"] == 0
    assert "**FAIL** (within noise)" in to_markdown(noisy)
    steady = summarize([_run(29_000, 30_000, 0), _run(29_010, 30_010, 0)], page=1)
    assert steady["summary"] == {"pass": 0, "fail": 1, "fail_beyond_noise": 1}
    assert "| **FAIL** |" in to_markdown(steady)


def test_the_mean_rounds_down_so_an_arm_never_gains_by_rounding():
    s = summarize([_run(30_000, 30_000, 0), _run(30_001, 30_000, 0)], page=1)
    assert s["arms"]["main_islands_hicache"]["0.10-eq"]["fanout"]["cached_tokens"] == 30_000


def test_markdown_lists_every_run_and_cell():
    md = to_markdown(summarize([_run(29_000, 30_000, 28_000, date="d1"),
                                _run(31_000, 29_000, 28_500, date="d2")], page=1))
    assert "1. d1 (HEAD abc)" in md and "2. d2 (HEAD abc)" in md
    assert "| 0.10-eq | fanout | **30,000** ± 1,000 (29,000, 31,000)" in md
    assert "1 PASS, 0 FAIL (0 beyond 2 × noise)." in md


def test_a_failed_boot_is_named_and_its_cells_average_the_other_runs():
    crashed = _run(30_000, 0, 28_000, date="d2")
    del crashed["arms"]["main_hicache"]
    crashed["errors"] = {"main_hicache@0.10-eq": "ConnectionError: aborted"}
    s = summarize([_run(29_000, 30_000, 28_000), crashed], page=1)
    assert s["arms"]["main_hicache"]["0.10-eq"]["fanout"]["runs"] == [30_000]
    assert s["arms"]["main_islands_hicache"]["0.10-eq"]["fanout"]["runs"] == [29_000, 30_000]
    md = to_markdown(s)
    assert "boot `main_hicache@0.10-eq` failed, no figures from it: ConnectionError: aborted" in md
