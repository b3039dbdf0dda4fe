"""scripts/patches.py export: the upstream-ready series, applied to a fresh pristine checkout.

The export runs into a temporary directory; a pristine sglang 0.5.15.post1 checkout (built here
from the wheel, independently of the export) gets each exported series with `git am`; every
commit is checked statically (compiles, imports only what its tree has), and the exported tests
run on each branch tip with the checkout's python/ first on PYTHONPATH (the installed, patched
sglang is shadowed: each run prints sglang.__file__)."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from export_checkout import (added_tests, am_series, assert_applied_as_exported,
                             assert_commits_import, assert_passed_on, git, pristine_checkout,
                             start_pytest)

REPO = Path(__file__).resolve().parents[2]
TOOL = REPO / "scripts" / "patches.py"
AUTHOR = ("Export Test", "export-test@example.org")

import islands_tools.patches.cli as tool  # noqa: E402  (what scripts/patches.py runs)
import islands_tools.patches.export as export  # noqa: E402
from islands_tools.patches.imports import check_commit  # noqa: E402

SERIES = [*export.FIXES, export.ISLANDS]


def base_of(series):
    return export.ISLANDS_BASE if series == export.ISLANDS else "pristine"


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    out = tmp_path_factory.mktemp("export") / "out"
    r = subprocess.run([sys.executable, str(TOOL), "export", str(out),
                        "--author", f"{AUTHOR[0]} <{AUTHOR[1]}>"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "compile and import only what exists" in r.stdout
    return out


@pytest.fixture(scope="module")
def checkout(tmp_path_factory, exported):
    """A fresh pristine checkout (from the wheel, at upstream's layout) with every exported
    series applied by git am, each on its own branch."""
    root = pristine_checkout(tmp_path_factory.mktemp("checkout") / "sglang",
                             tool.fetch_wheel(tool.DEFAULT_CACHE))
    return root, am_series(root, exported, {s: base_of(s) for s in SERIES})


def commits(root, series):
    return git(root, "rev-list", "--reverse", f"{base_of(series)}..{series}").stdout.split()


def test_help_explains_export():
    r = subprocess.run([sys.executable, str(TOOL), "export", "--help"], capture_output=True, text=True)
    assert r.returncode == 0
    for word in ("swa-islands", "fix-torch-native-swa-read", "--author", "format-patch"):
        assert word in r.stdout
    assert "export" in subprocess.run([sys.executable, str(TOOL), "--help"],
                                      capture_output=True, text=True).stdout


def test_import_check_names_missing_modules_and_names(tmp_path):
    """The static check is not vacuous: a missing module, a missing name, a syntax error."""
    pkg = tmp_path / "python" / "sglang"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("X = 1\nif True:\n    def f(): pass\n")
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", "-A")
    git(tmp_path, "commit", "-q", "-m", "base")
    (pkg / "b.py").write_text("from sglang.a import X, f, Y\nimport sglang.missing\n"
                              "from . import a\nfrom .a import Z\n")
    (pkg / "c.py").write_text("def broken(:\n")
    git(tmp_path, "add", "-A")
    git(tmp_path, "commit", "-q", "-m", "uses")
    problems = check_commit(tmp_path, "HEAD")
    assert len(problems) == 4, problems
    assert any("imports Y from sglang.a" in p for p in problems)
    assert any("imports Z from sglang.a" in p for p in problems)
    assert any("sglang.missing, which this commit does not have" in p for p in problems)
    assert any(p.startswith("python/sglang/c.py:1: does not compile") for p in problems)


def test_layout_series_files_and_cover_note(exported):
    assert sorted(p.name for p in exported.iterdir()) == sorted([*SERIES, "README.md", "repo"])
    for series in SERIES:
        listed = [l for l in (exported / series / "series").read_text().splitlines()
                  if l and not l.startswith("#")]
        assert listed == sorted(p.name for p in (exported / series).glob("*.patch")), series
    assert len(listed) == len(export.ISLANDS_ORDER) + 1  # + the rollback warning, cut out
    note = " ".join((exported / "README.md").read_text().split())
    assert f"it is based on `{export.ISLANDS_BASE}`" in note
    for t in export.HARNESS_TESTS:
        assert t in note


def test_author_is_given_and_date_is_the_repo_commit_of_the_patch(exported):
    fix = next((exported / "fix-torch-native-swa-read").glob("0001-*.patch")).read_text()
    assert f"From: {AUTHOR[0]} <{AUTHOR[1]}>\n" in fix
    src = next(p for p in tool.read_series(tool.DEFAULT_PATCHES)
               if export.slug(p) == export.FIXES["fix-torch-native-swa-read"])
    rels = [str(src.relative_to(REPO))] + [
        str(p.relative_to(REPO)) for p in export.upstream_tests("fix-torch-native-swa-read").values()]
    want = git(REPO, "log", "-1", "--format=%aD", "--", *rels).stdout.strip()
    if want:  # sources committed (always, once this test is)
        assert f"\nDate: {want}\n" in fix
    for patch in exported.rglob("*.patch"):
        assert "maintainers@users.noreply" not in patch.read_text(), patch


def test_each_series_applies_cleanly_and_matches_the_export(checkout, exported):
    root, applied = checkout
    assert list(applied) == SERIES
    assert_applied_as_exported(root, applied, exported)


def test_every_commit_compiles_and_imports_only_what_exists(checkout):
    root, _ = checkout
    n = assert_commits_import(root, {s: base_of(s) for s in SERIES})
    assert n == len(SERIES) - 1 + len(export.ISLANDS_ORDER) + 1


def test_islands_tip_is_the_repo_series_without_the_other_fixes(checkout, tmp_path):
    """Nothing lost: the islands branch ends where patches/series + our modules end, except the
    files only the DFLASH and tokenizer fixes touch, which stay pristine there."""
    root, _ = checkout
    upstream = tool.Upstream(tool.fetch_wheel(tool.DEFAULT_CACHE))
    patches = tool.read_series(tool.DEFAULT_PATCHES)
    staged = tool.stage(upstream, patches, tmp_path)
    fix_only = {r for p in patches if export.slug(p) in (export.FIXES["fix-dflash-swa-evictor"],
                                                          export.FIXES["fix-input-ids-vocab"])
                for r in tool.patch_files(p)}
    for rel, data in staged.items():
        tip = git(root, "show", f"{export.ISLANDS}:python/sglang/{rel}").stdout.encode()
        want = upstream.read(rel) if rel in fix_only else data
        assert tip == want, rel
    for src in sorted((REPO / "python" / "sglang").rglob("*.py")):
        rel = src.relative_to(REPO).as_posix()
        assert git(root, "show", f"{export.ISLANDS}:{rel}").stdout.encode() == src.read_bytes(), rel


def test_rollback_warning_is_its_own_last_commit(checkout):
    root, _ = checkout
    subjects = git(root, "log", "--reverse", "--format=%s",
                   f"{export.ISLANDS_BASE}..{export.ISLANDS}").stdout.splitlines()
    assert subjects[-1].startswith("registry: warn when a lowered SWA ratio")
    registry_commit = commits(root, export.ISLANDS)[subjects.index(
        "registry: build SWAIslandRadixCache under --enable-swa-islands")]
    reg = git(root, "show", f"{registry_commit}:{export.REGISTRY}").stdout
    guard = git(root, "show", f"{registry_commit}:{export.GUARD}").stdout
    assert re.search(r"if ctx\.server_args\.enable_swa_islands:\n(        .*\n|\n)*"
                     r"        check_swa_pool_plan\(cache, ctx\.server_args\)\n", reg)
    assert "rollback" not in guard and "SWARadixCache import" not in guard
    last = git(root, "show", "--stat", "--format=", export.ISLANDS).stdout
    assert "registry.py" in last and "swa_island_guard.py" in last and "rollback_warning" in last


def _run_tests(root: Path, series: str, tests):
    wt = root.parent / f"wt-{series}"
    git(root, "worktree", "add", "-q", "--detach", str(wt), series)
    return wt, start_pytest(sys.executable, wt, tests,
                            dict(TRITON_INTERPRET="1", PYTHONDONTWRITEBYTECODE="1"))


@pytest.fixture(scope="module")
def test_runs(checkout):
    """The exported tests of every series on its branch tip, all runs at once."""
    root, applied = checkout
    assert all(r.returncode == 0 for r in applied.values())
    runs = {}
    for series in SERIES:
        tests = added_tests(root, f"{base_of(series)}..{series}")
        assert tests, series
        runs[series] = (tests, *_run_tests(root, series, tests))
    return {s: (tests, wt, p.communicate(timeout=300)[0], p.returncode)
            for s, (tests, wt, p) in runs.items()}


@pytest.mark.parametrize("series", SERIES)
def test_exported_tests_pass_on_the_branch(test_runs, series):
    tests, wt, out, rc = test_runs[series]
    assert_passed_on(wt, out, rc)
