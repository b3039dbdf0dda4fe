"""islands_harness/bench_outputs.py: a benchmark writes its files only where its arguments say."""

import argparse
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "benchmarks"))

from islands_harness.bench_outputs import add_output_args, output_paths, write_files, write_text  # noqa: E402

FILES = {"json": "b.json", "md": "b.md", "png": "b.png"}


def _parse(argv):
    ap = argparse.ArgumentParser()
    add_output_args(ap, FILES)
    return ap.parse_args(argv)


@pytest.mark.parametrize("argv, want", [
    ([], {"json": "RUN/b.json", "md": "RUN/b.md", "png": "RUN/b.png"}),
    (["--out", "D"], {"json": "D/b.json", "md": "D/b.md", "png": "D/b.png"}),
    (["--json", "x.json"], {"json": "x.json", "md": None, "png": None}),
    (["--out", "D", "--md", "r.md"], {"json": "D/b.json", "md": "r.md", "png": "D/b.png"}),
])
def test_output_paths(argv, want):
    got = output_paths(_parse(argv), FILES, pathlib.Path("RUN"))
    assert {k: (str(v) if v else None) for k, v in got.items()} == want


def test_write_files_writes_only_the_files_asked_for(tmp_path):
    paths = output_paths(_parse(["--md", str(tmp_path / "sub" / "r.md")]), FILES, None)
    written = write_files(paths, {"json": pytest.fail, "md": write_text("x"), "png": pytest.fail})
    assert written == [str(tmp_path / "sub" / "r.md")]
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == ["r.md"]


def test_no_benchmark_defaults_into_the_committed_results():
    """No benchmark's argument defaults name benchmarks/results (a run without --out never
    rewrites committed results)."""
    bench = pathlib.Path(__file__).resolve().parents[2] / "benchmarks"
    modules = sorted(bench.rglob("*.py"))
    assert len(modules) > 30 and any(p.parent.name == "prefix_reuse" for p in modules)
    offenders = [str(p.relative_to(bench)) for p in modules
                 if 'RESULTS /' in p.read_text() or '"benchmarks" / "results"' in p.read_text()]
    assert offenders == []
