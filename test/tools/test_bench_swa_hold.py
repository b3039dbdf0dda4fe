"""benchmarks/swa_hold.py on a tiny shape (seconds): JSON schema, islands' hold bound, and that
upstream holds more than islands."""

import json
import os
import pathlib
import sys

import pytest

_ROOT = str(pathlib.Path(__file__).resolve().parents[2])
sys.path.insert(0, os.path.join(_ROOT, "benchmarks"))

from swa_hold import cli as swa_hold  # noqa: E402

ARM_KEYS = {
    "max_swa_held_per_running_req",
    "mean_swa_held_per_running_req",
    "max_dead_swa_per_running_req",
    "commit_cpu_seconds_median",
    "commit_cpu_seconds_p90",
    "after_commit",
    "with_chunk_in_flight",
    "decode",
    "host_syncs",
}


def _check(result, w, p, syncs=True):
    assert set(result["shape"]) >= {"window", "page", "chunk", "prompt", "n_requests", "decode_tokens"}
    assert result["shape"]["window"] == w and result["shape"]["page"] == p
    assert set(result["arms"]) == {"upstream", "upstream_knobs", "islands_eager", "islands"}
    for arm, a in result["arms"].items():
        assert ARM_KEYS <= set(a), (arm, ARM_KEYS - set(a))
        assert a["commit_cpu_seconds_median"] > 0 and a["commit_cpu_seconds_p90"] > 0
        assert a["commits_per_run"] > 0
    up, knobs, eager, isl = (result["arms"][k]
                             for k in ("upstream", "upstream_knobs", "islands_eager", "islands"))
    for a in (eager, isl):
        # the island (floor_p(L) - t <= w + 2p - 1) plus an unaligned tail, whatever the reclaim
        assert a["max_swa_held_per_running_req"] <= w + 2 * p
        assert a["chunk_islands"] == a["commits_per_run"]
        assert a["decode_islands"] >= 1
        assert a["max_swa_held_per_running_req"] < up["max_swa_held_per_running_req"]
        if syncs:  # the island commit path is sync-free (debug checks off in the benchmark)
            assert a["host_syncs"]["syncs_per_commit_max"] == 0
    # eager: nothing dead after a commit; the default (ample pool: lazy) keeps it cached
    assert eager["max_dead_swa_per_running_req"] == 0
    assert isl["max_dead_swa_per_running_req"] > 0
    # upstream: a whole chunk stays SWA-locked per running request, and the earlier ones are dead
    assert up["max_swa_held_per_running_req"] >= result["shape"]["chunk"]
    assert up["max_dead_swa_per_running_req"] > 0
    # the knobs cap the lock at about a window, but leave the rest of the chunk live (dead)
    assert knobs["max_swa_held_per_running_req"] <= w + p
    assert knobs["max_dead_swa_per_running_req"] > 0
    if syncs:  # the upstream commit path is sync-free here
        assert up["host_syncs"]["syncs_per_commit_max"] == 0
    # eager's SWA free is timed inside each island commit, and only there
    assert 0 < eager["commit_free_thread_cpu_seconds_median"] < eager["commit_thread_cpu_seconds_median"]
    assert up["commit_free_thread_cpu_seconds_median"] is None
    floor = result["ratios_vs_upstream"]["islands_eager"]["upstream_plus_free_thread_cpu_median"]
    assert floor == pytest.approx(1 + eager["commit_free_thread_cpu_seconds_median"]
                                  / up["commit_thread_cpu_seconds_median"])
    acc = result["acceptance"]
    assert acc["islands_eager_held_le_w_plus_p"] is (eager["max_swa_held_per_running_req"] <= w + p)
    assert acc["islands_eager_dead_after_commit"] == 0
    assert result["device"].startswith("cpu")


def test_cli_tiny_writes_json_and_md(tmp_path, capsys):
    jp, mp = tmp_path / "r.json", tmp_path / "r.md"
    assert swa_hold.main(["--tiny", "--repeats", "1", "--check", "--json", str(jp), "--md", str(mp)]) == 0
    result = json.loads(jp.read_text())
    assert result["command"].startswith("python benchmarks/swa_hold.py --tiny")
    _check(result, swa_hold.TINY.window, swa_hold.TINY.page)
    md = mp.read_text()
    assert "| metric | upstream | upstream_knobs | islands_eager | islands |" in md
    assert "of which the SWA free" in md and "KV device: cpu" in md
    assert "CUDA syncs" not in md  # only a CUDA stack runs torch's sync detector
    assert md.strip() in capsys.readouterr().out
    # what the markdown names is stored as run
    assert result["island_free_function"] == "free_swa_pages"
    assert result["arm_reclaim"] == {"upstream": None, "upstream_knobs": None,
                                     "islands_eager": "eager", "islands": "lazy"}
    assert "(`free_swa_pages`)" in md and "with lazy reclaim" in md


RESULTS = pathlib.Path(_ROOT) / "benchmarks" / "results"


def test_markdown_names_what_the_run_measured_from_its_json():
    """The free's name and the reclaim note come from the JSON, not today's code: the 2026-11-29
    H200 run timed ``free_live_swa_pages`` and had no reclaim policy; a JSON without the record
    falls back to today's name, and to the reclaim its arm set implies."""
    from swa_hold.report import to_markdown

    gpu = json.loads((RESULTS / "gpu" / "swa_hold_quick_cuda.json").read_text())
    md = to_markdown(gpu)
    assert "(`free_live_swa_pages`), thread CPU ms median" in md
    assert "with lazy reclaim" not in md  # islands freed at commit then
    del gpu["island_free_function"]
    assert "(`free_swa_pages`), thread CPU ms median" in to_markdown(gpu)
    gpu["arm_reclaim"] = {"upstream": None, "upstream_knobs": None, "islands": "lazy"}
    assert "with lazy reclaim" in to_markdown(gpu)
    cpu = json.loads((RESULTS / "swa_hold_quick.json").read_text())
    assert "arm_reclaim" not in cpu and "with lazy reclaim" in to_markdown(cpu)  # 4 arms: lazy


def test_markdown_carries_the_profile_of_the_json():
    """``--profile``'s cProfile tables are part of the result's markdown (``to_markdown``), from
    the arms' ``commit_profile`` in the JSON."""
    from swa_hold.report import to_markdown

    result = json.loads((RESULTS / "swa_hold_quick.json").read_text())
    md = to_markdown(result)
    assert md.count("<details><summary>cProfile of the commit path: ") == 4
    assert md.endswith("</details>\n")
    for a in result["arms"].values():
        del a["commit_profile"]
    assert "cProfile" not in to_markdown(result)


@pytest.mark.parametrize("page", [4])
def test_core_paged(page):
    shape = swa_hold.Shape(window=16, page=page, chunk=64, prompt=256, n_requests=2,
                           decode_tokens=24, decode_interval=8)
    result = swa_hold.bench(shape, repeats=1, count_syncs=False, check=True)
    _check(result, 16, page, syncs=False)


def test_arm_env_sets_and_unsets_knobs(monkeypatch):
    for k in swa_hold.KNOBS:
        monkeypatch.setenv(k, "1")
    with swa_hold.arm_env({}):
        assert not any(k in os.environ for k in swa_hold.KNOBS)
    assert all(os.environ[k] == "1" for k in swa_hold.KNOBS)
    for k in swa_hold.KNOBS:
        monkeypatch.delenv(k)
    with swa_hold.arm_env(swa_hold.ARMS["upstream_knobs"][2]):
        assert all(os.environ[k] == "1" for k in swa_hold.KNOBS)
    assert not any(k in os.environ for k in swa_hold.KNOBS)
