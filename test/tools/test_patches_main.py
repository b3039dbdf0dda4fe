"""The series of the 0.5.23 target (patches-main/, scripts/patches_main.py; issue 27).

- ``series`` (islands) and ``series-stock`` (the stock arm `main`) apply to the pristine 0.5.23
  wheel, and the stock list never carries a patch the islands list lacks;
- ``apply --series islands`` installs the series and our modules idempotently, ``--series stock``
  takes them away again, ``revert`` restores the release, and a file someone else changed is
  refused, changing nothing;
- the islands environment (``.venv-main-islands``, ``scripts/setup_main.sh --islands``) holds this
  checkout's islands series, and the stock one (``.venv-main``) only ``series-stock``.

Skips when the pristine wheel is not in .cache/wheels-main/ (scripts/setup_main.sh fetches it).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "patches_main.py"
MAIN_PY = REPO / ".venv-main" / "bin" / "python"
ISLANDS_PY = REPO / ".venv-main-islands" / "bin" / "python"


def _load():
    spec = importlib.util.spec_from_file_location("patches_main_under_test", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


PM = _load()
WHEELS = [w for w in sorted(PM.CACHE.glob(f"sglang-{PM.SGLANG_VERSION}-*.whl"))
          if PM.P.sha256_file(w) == PM.WHEEL_SHA256]
if not WHEELS:
    pytest.skip("the pristine sglang 0.5.23 wheel is not in .cache/wheels-main (scripts/setup_main.sh)",
                allow_module_level=True)
WHEEL = WHEELS[0]


@pytest.fixture(scope="module")
def upstream():
    return PM.P.Upstream(WHEEL)


def run(*args, python=sys.executable, env=None, cwd=REPO):
    return subprocess.run([str(python), str(SCRIPT), *map(str, args)], capture_output=True,
                          text=True, timeout=600, cwd=str(cwd), env=env)


def minimal_site(tmp_path: Path, upstream) -> Path:
    """A site-packages holding what apply reads of an installed 0.5.23: its version and the files
    the islands series touches."""
    site = tmp_path / "site"
    for rel in ["_version.py", *PM.touched_files(PM.series("islands"))]:
        dst = site / "sglang" / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_bytes(upstream.read(rel))
    return site


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ---- the two lists --------------------------------------------------------------------------

def test_check_passes_on_both_series():
    r = run("check")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "islands series" in r.stdout and "stock series" in r.stdout


def test_stock_series_is_the_islands_series_harness_fixes_only():
    islands = [p.name for p in PM.series("islands")]
    stock = [p.name for p in PM.series("stock")]
    assert stock and set(stock) <= set(islands)
    assert islands[: len(stock)] == stock, "the stock arm's fixes head the islands series"


def test_a_stock_patch_missing_from_the_islands_series_is_refused(tmp_path, monkeypatch):
    patches = tmp_path / "patches-main"
    shutil.copytree(PM.PATCHES, patches)
    extra = patches / "0099-only-in-stock.patch"
    shutil.copy(next(patches.glob("0001-*.patch")), extra)
    (patches / "series-stock").write_text((patches / "series-stock").read_text() + extra.name + "\n")
    monkeypatch.setattr(PM, "PATCHES", patches)
    with pytest.raises(PM.P.PatchesError, match="0099-only-in-stock.patch"):
        PM.series("stock")


# ---- apply / status / revert on a scratch install --------------------------------------------

def test_apply_islands_is_idempotent_and_stock_takes_our_modules_away(tmp_path, upstream):
    site = minimal_site(tmp_path, upstream)
    pkg = site / "sglang"
    r = run("apply", "--series", "islands", "--site-packages", site)
    assert r.returncode == 0, r.stdout + r.stderr
    again = run("apply", "--series", "islands", "--site-packages", site)
    assert again.returncode == 0 and "0 file(s) changed" in again.stdout, again.stdout + again.stderr

    staged = PM.staged(upstream, PM.series("islands"))
    modules = PM.overlay("islands", upstream)
    assert "srt/mem_cache/swa_island_formulas.py" in modules
    for rel, data in staged.items():
        assert (pkg / rel).read_bytes() == data, rel
    for rel, src in modules.items():
        assert (pkg / rel).read_bytes() == src.read_bytes(), rel
    manifest = json.loads((pkg / PM.MANIFEST_NAME).read_text())
    assert manifest["series"] == "islands" and not manifest["harness_only"]
    assert manifest["patches"] == [p.name for p in PM.series("islands")]
    assert manifest["overlay_files"] == sorted(modules)
    status = run("status", "--site-packages", site)
    assert status.returncode == 0 and "islands series" in status.stdout, status.stdout

    r = run("apply", "--series", "stock", "--site-packages", site)
    assert r.returncode == 0, r.stdout + r.stderr
    for rel in modules:
        assert not (pkg / rel).exists(), rel
    stock = PM.staged(upstream, PM.series("stock"))
    for rel in PM.touched_files(PM.series("islands")):
        want = stock.get(rel, upstream.read(rel))
        assert (pkg / rel).read_bytes() == want, rel
    manifest = json.loads((pkg / PM.MANIFEST_NAME).read_text())
    assert manifest["series"] == "stock" and manifest["harness_only"] and not manifest["overlay_files"]

    r = run("revert", "--site-packages", site)
    assert r.returncode == 0, r.stdout + r.stderr
    assert not (pkg / PM.MANIFEST_NAME).exists()
    for rel in PM.touched_files(PM.series("islands")):
        assert (pkg / rel).read_bytes() == upstream.read(rel), rel
    assert "pristine sglang 0.5.23" in run("status", "--site-packages", site).stdout


def test_apply_and_revert_refuse_a_file_someone_else_changed_and_change_nothing(tmp_path, upstream):
    site = minimal_site(tmp_path, upstream)
    assert run("apply", "--series", "islands", "--site-packages", site).returncode == 0
    rel = PM.touched_files(PM.series("islands"))[-1]
    edited = site / "sglang" / rel
    edited.write_bytes(edited.read_bytes() + b"\n# a hand edit\n")
    before = {p: sha(p) for p in (site / "sglang").rglob("*") if p.is_file()}
    for args in (("apply", "--series", "stock"), ("revert",)):
        r = run(*args, "--site-packages", site)
        assert r.returncode == 1 and rel in r.stderr, r.stderr
        assert {p: sha(p) for p in (site / "sglang").rglob("*") if p.is_file()} == before
    st = run("status", "--site-packages", site)
    assert st.returncode == 3 and f"modified  {rel}" in st.stdout


def test_apply_requires_a_series():
    r = run("apply")
    assert r.returncode == 2 and "--series" in r.stderr


# ---- what the environments hold ------------------------------------------------------------

def _installed_manifest(python: Path) -> dict:
    pkg = next(python.parent.parent.glob("lib/python*/site-packages/sglang"))
    return pkg, json.loads((pkg / PM.MANIFEST_NAME).read_text())


@pytest.mark.skipif(not ISLANDS_PY.exists(),
                    reason=".venv-main-islands does not exist (scripts/setup_main.sh --islands)")
def test_islands_environment_holds_this_checkouts_islands_series():
    pkg, manifest = _installed_manifest(ISLANDS_PY)
    assert manifest["series"] == "islands", "run scripts/setup_main.sh --islands"
    assert manifest["patches"] == [p.name for p in PM.series("islands")], (
        "the installed series is not this checkout's: run scripts/setup_main.sh --islands")
    for rel, digest in manifest["files_sha256"].items():
        assert sha(pkg / rel) == digest, rel
    for rel in manifest["overlay_files"]:
        src = (PM.OVERLAY / rel) if (PM.OVERLAY / rel).is_file() else (PM.SHARED_ROOT / rel)
        assert (pkg / rel).read_bytes() == src.read_bytes(), f"{rel} is stale: rerun setup_main.sh --islands"


@pytest.mark.skipif(not MAIN_PY.exists(), reason=".venv-main does not exist (scripts/setup_main.sh)")
def test_stock_environment_holds_only_the_stock_series():
    pkg, manifest = _installed_manifest(MAIN_PY)
    assert manifest.get("series", "stock") == "stock" and manifest["harness_only"]
    assert manifest["patches"] == [p.name for p in PM.series("stock")]
    assert not manifest.get("overlay_files")
    assert not (pkg / "srt" / "mem_cache" / "swa_island_formulas.py").exists()
