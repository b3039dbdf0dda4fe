"""scripts/patches.py --target 0.5.23 export: the main series as upstream would receive it, applied
to a fresh pristine sglang 0.5.23 checkout.

The export runs into a temporary directory; a clone of its repo whose `main` is checked blob by
blob against the wheel (the pristine release at upstream's layout python/sglang/...) gets each
exported series with `git am`; every commit is checked statically (compiles, imports only what its
tree has). Then, in one worktree of that clone (so the bytecode of one run serves the next), every
test of a series runs at the series' tip with .venv-main's interpreter and the worktree's python/
first on PYTHONPATH (.venv-main's installed sglang is shadowed: each run prints sglang.__file__).
With SWA_EXPORT_ENTRY_RUNS=1 each test also runs at the commit it enters with (two more runs, about
a minute: left out of CI).

Skips when the pristine 0.5.23 wheel is not in .cache/wheels-main/ (scripts/setup_main.sh fetches
it); the test runs skip without .venv-main.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from export_checkout import (added_tests, am_series, assert_applied_as_exported,
                             assert_commits_import, assert_passed_on, git, series_names,
                             start_pytest, verified_clone)

REPO = Path(__file__).resolve().parents[2]
TOOL = REPO / "scripts" / "patches.py"
MAIN_PY = REPO / ".venv-main" / "bin" / "python"
AUTHOR = ("Export Test", "export-test@example.org")

import islands_tools.patches.export as export  # noqa: E402
import islands_tools.patches.main_target as PM  # noqa: E402

MAIN = export.TARGET_MAIN
SERIES = [*MAIN.fixes, export.ISLANDS]
WHEELS = [w for w in sorted(PM.CACHE.glob(f"sglang-{PM.SGLANG_VERSION}-*.whl"))
          if PM.P.sha256_file(w) == PM.WHEEL_SHA256]
if not WHEELS:
    pytest.skip("the pristine sglang 0.5.23 wheel is not in .cache/wheels-main (scripts/setup_main.sh)",
                allow_module_level=True)


def base_of(series):
    """The branch a series is exported on, in the checkout (whose pristine branch is `pristine`)."""
    base = MAIN.base_of(series)
    return "pristine" if base == "main" else base


def fix_patch(series):
    return next(p for p in PM.series("islands") if export.slug(p) == MAIN.fixes[series])


def island_patches():
    """patches-main/series without the stand-alone fixes, in the series' order."""
    return [p for p in PM.series("islands") if export.slug(p) not in MAIN.fixes.values()]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    out = tmp_path_factory.mktemp("export-main") / "out"
    r = subprocess.run([sys.executable, str(TOOL), "--target", "0.5.23", "export", str(out),
                        "--author", f"{AUTHOR[0]} <{AUTHOR[1]}>"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "sglang 0.5.23" in r.stdout and "compile and import only what exists" in r.stdout
    return out


@pytest.fixture(scope="module")
def checkout(tmp_path_factory, exported):
    """Pristine 0.5.23 (checked against the wheel) with every exported series applied by git am."""
    root = verified_clone(exported / "repo", tmp_path_factory.mktemp("checkout-main") / "sglang",
                          WHEELS[0])
    return root, am_series(root, exported, {s: base_of(s) for s in SERIES})


def commits(root, series):
    return git(root, "rev-list", "--reverse", f"{base_of(series)}..{series}").stdout.split()


def test_layout_series_files_and_cover_note(exported):
    assert sorted(p.name for p in exported.iterdir()) == sorted([*SERIES, "README.md", "repo"])
    for series in SERIES:
        listed = series_names(exported, series)
        assert listed == sorted(p.name for p in (exported / series).glob("*.patch")), series
        assert len(listed) == (len(island_patches()) if series == export.ISLANDS else 1), series
    note = " ".join((exported / "README.md").read_text().split())
    assert "# SWA islands for sglang 0.5.23" in note
    assert f"it is based on `{MAIN.islands_base}`" in note
    assert "no change to the Rust core" in note


def test_each_series_applies_as_exported_and_every_commit_imports_only_what_exists(checkout, exported):
    """git am of every series on pristine 0.5.23 ends on the export's trees; one commit per patch,
    each compiling and importing only what its tree has."""
    root, applied = checkout
    assert list(applied) == SERIES
    assert_applied_as_exported(root, applied, exported)
    n = assert_commits_import(root, {s: base_of(s) for s in SERIES})
    assert n == len(MAIN.fixes) + len(island_patches())


def test_fix_series_are_their_patch_and_regression_test(checkout):
    root, _ = checkout
    upstream = PM.P.Upstream(WHEELS[0])
    for series in MAIN.fixes:
        patch = fix_patch(series)
        changed = git(root, "diff", "--name-only", f"{base_of(series)}..{series}").stdout.split()
        tests = sorted((MAIN.upstream_tests / series).rglob("test_*.py"))
        assert tests, series
        assert sorted(changed) == sorted(
            [f"python/sglang/{r}" for r in PM.touched_files([patch])]
            + [t.relative_to(MAIN.upstream_tests / series).as_posix() for t in tests]), series
        # a fix based on another one: its tip is pristine + the base's patch(es) + its own
        chain = [fix_patch(b) for b in MAIN.base_chain(series)]
        for rel, data in PM.staged(upstream, [*chain, patch]).items():
            assert git(root, "show", f"{series}:python/sglang/{rel}").stdout.encode() == data, rel


def test_islands_series_is_the_main_series_in_order(checkout):
    """One commit per island patch of patches-main/series, in its order, with its message."""
    root, _ = checkout
    subjects = git(root, "log", "--reverse", "--format=%s",
                   f"{MAIN.islands_base}..{export.ISLANDS}").stdout.splitlines()
    assert subjects == [export.patch_message(p).split("\n", 1)[0] for p in island_patches()]


def test_islands_tip_is_the_main_series_and_modules_without_the_other_fix(checkout):
    """Nothing lost: the islands tip holds what scripts/patches_main.py installs (the islands
    series on pristine files, our modules and the shared ones) without the stand-alone fixes it
    is not based on (a file only they touch stays pristine), and every island test."""
    root, _ = checkout
    upstream = PM.P.Upstream(WHEELS[0])
    under = {MAIN.fixes[s] for s in MAIN.base_chain(export.ISLANDS)}
    tip_patches = [p for p in PM.series("islands")
                   if export.slug(p) in under or export.slug(p) not in MAIN.fixes.values()]
    staged = PM.staged(upstream, tip_patches)
    for rel in PM.touched_files(PM.series("islands")):
        tip = git(root, "show", f"{export.ISLANDS}:python/sglang/{rel}").stdout.encode()
        assert tip == staged.get(rel, upstream.read(rel)), rel
    modules = PM.overlay("islands", upstream)
    assert "srt/mem_cache/swa_island_formulas.py" in modules
    for rel, src in modules.items():
        assert git(root, "show", f"{export.ISLANDS}:python/sglang/{rel}").stdout.encode() == src.read_bytes(), rel
    src = MAIN.upstream_tests / export.ISLANDS
    for t in sorted(p for p in src.rglob("*.py") if "__pycache__" not in p.parts):
        rel = t.relative_to(src).as_posix()
        assert git(root, "show", f"{export.ISLANDS}:{rel}").stdout.encode() == t.read_bytes(), rel
    formulas = git(root, "show", f"{export.ISLANDS}:test/registered/unit/mem_cache/"
                   "test_swa_island_formulas.py").stdout
    assert "register_cpu_ci(" in formulas and "def test_pool_check_" in formulas


def test_each_island_test_enters_with_the_patch_export_names(checkout):
    root, _ = checkout
    by_subject = {export.patch_message(p).split("\n", 1)[0]: export.slug(p) for p in island_patches()}
    entered = {}
    for c in commits(root, export.ISLANDS):
        name = by_subject[git(root, "log", "-1", "--format=%s", c).stdout.strip()]
        entered.update({t: name for t in added_tests(root, f"{c}^..{c}")})
    last = export.slug(island_patches()[-1])
    for t, name in entered.items():
        assert name == MAIN.test_entry.get(t, last), t
    assert set(MAIN.test_entry) <= set(entered)


@pytest.fixture(scope="module")
def test_runs(checkout):
    """[(series, revision, tests, output, returncode)]: in one worktree, one after the other,
    every test of each series at its tip; with SWA_EXPORT_ENTRY_RUNS=1 first the tests a commit
    adds at that commit (where it is not the tip)."""
    if not MAIN_PY.exists():
        pytest.skip(".venv-main does not exist (scripts/setup_main.sh)")
    root, applied = checkout
    assert all(r.returncode == 0 for r in applied.values())
    wt = root.parent / "wt-main"
    git(root, "worktree", "add", "-q", "--detach", str(wt), "pristine")
    plan = []
    for series in SERIES:
        cs = commits(root, series)
        if os.environ.get("SWA_EXPORT_ENTRY_RUNS") == "1":
            plan += [(series, c, added_tests(root, f"{c}^..{c}")) for c in cs[:-1]]
        plan.append((series, series, added_tests(root, f"{base_of(series)}..{series}")))
    runs = []
    for series, rev, tests in plan:
        if not tests:
            continue
        git(wt, "checkout", "-q", "--detach", rev)
        p = start_pytest(MAIN_PY, wt, tests, {})
        out = p.communicate(timeout=600)[0]
        runs.append((series, rev, tests, out, p.returncode))
    return wt, runs


@pytest.mark.parametrize("series", SERIES)
def test_exported_tests_pass_where_they_enter_and_on_the_tip(test_runs, series):
    wt, runs = test_runs
    mine = [r for r in runs if r[0] == series]
    assert mine and mine[-1][1] == series, "the tip of the series ran"
    for _, rev, tests, out, rc in mine:
        assert_passed_on(wt, out, rc)
