"""The series of the 0.5.23 target (patches-main/, scripts/patches_main.py; issue 27).

- ``series`` (islands) and ``series-stock`` (the stock arm `main`) apply to the pristine 0.5.23
  wheel, and the stock list never carries a patch the islands list lacks;
- ``apply --series islands`` installs the series and our modules idempotently, ``--series stock``
  takes them away again, ``revert`` restores the release, and a file someone else changed is
  refused, changing nothing;
- each stand-alone fix's regression test (``upstream-tests-main/<series>/``, upstream's layout)
  fails on the pristine release (a fix the export bases on another fix: on pristine + that fix)
  and passes with its patch, run by ``.venv-main``'s interpreter on a copy of the wheel's package;
- the islands environment (``.venv-main-islands``, ``scripts/setup_main.sh --islands``) holds this
  checkout's islands series, and the stock one (``.venv-main``) only ``series-stock``.

Skips when the pristine wheel is not in .cache/wheels-main/ (scripts/setup_main.sh fetches it).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "patches_main.py"
MAIN_PY = REPO / ".venv-main" / "bin" / "python"
ISLANDS_PY = REPO / ".venv-main-islands" / "bin" / "python"
UPSTREAM_TESTS = REPO / "upstream-tests-main"
# Each stand-alone fix of the islands series and the directory of its regression test.
FIXES = {"fix-input-ids-vocab": "0002-tokenizer-manager-refuse-input-ids-outside-the-vocab.patch",
         "fix-torch-native-swa-read": "0001-harness-only-torch-native-translate-swa-kv-reads.patch",
         "fix-hicache-cpu-device": "0012-harness-only-hicache-on-a-cpu-device-pool.patch",
         "fix-gemma4-router-norm-native":
             "0014-layernorm-gemma4rmsnorm-native-path-applies-a-folded-sc.patch",
         "fix-torch-native-attention-sinks": "0013-harness-only-torch-native-attention-sinks.patch",
         "fix-torch-native-target-verify":
             "0016-harness-only-torch-native-speculative-target-verify.patch",
         "fix-torch-native-pool-swap":
             "0018-harness-only-torch-native-read-the-swa-pool-the-forward-uses.patch",
         "fix-frozen-kv-mtp-non-overlap":
             "0017-frozen-kv-mtp-the-non-overlap-scheduler-path-and-on-cpu.patch"}


import islands_tools.patches.main_target as PM  # noqa: E402  (what scripts/patches_main.py runs)
from islands_tools.patches.export import TARGET_MAIN  # noqa: E402

# A fix series based on another fix (its patch needs that one's context): series -> its base, as
# the export bases its branch. Its regression test runs on the base and on the base + the fix.
FIX_BASES = TARGET_MAIN.fix_bases


def fix_chain(series: str) -> list:
    """The patches of the fix series under ``series``, the one on pristine first."""
    chain = []
    while series in FIX_BASES:
        series = FIX_BASES[series]
        chain.insert(0, PM.PATCHES / FIXES[series])
    return chain

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


def test_swa_islands_wheel_names_the_pristine_wheel(tmp_path, monkeypatch):
    """``SWA_ISLANDS_WHEEL`` (install_islands.sh's offline install) is used when it names a 0.5.23
    wheel, even with an empty cache; a 0.5.15 wheel there is the other target's and is ignored;
    a 0.5.23 wheel that is not the release's is refused."""
    monkeypatch.setattr(PM, "CACHE", tmp_path / "empty-cache")
    offline = tmp_path / "offline" / WHEEL.name
    offline.parent.mkdir()
    shutil.copy(WHEEL, offline)
    monkeypatch.setenv("SWA_ISLANDS_WHEEL", str(offline))
    assert PM.fetch_wheel() == offline
    (tmp_path / "empty-cache").mkdir()
    shutil.copy(WHEEL, tmp_path / "empty-cache" / WHEEL.name)
    monkeypatch.setenv("SWA_ISLANDS_WHEEL", str(tmp_path / "sglang-0.5.15.post1-py3-none-any.whl"))
    assert PM.fetch_wheel() == tmp_path / "empty-cache" / WHEEL.name
    offline.write_bytes(b"not the release")
    monkeypatch.setenv("SWA_ISLANDS_WHEEL", str(offline))
    with pytest.raises(PM.P.PatchesError, match="sha256"):
        PM.fetch_wheel()


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


def test_patches_py_target_0_5_23_drives_the_main_series(tmp_path, upstream):
    """scripts/patches.py --target 0.5.23 check/apply/status/revert work on patches-main/series;
    the subcommands the main target lacks (worktree, refresh) say so."""
    site = minimal_site(tmp_path, upstream)
    patches_py = REPO / "scripts" / "patches.py"

    def pp(*args):
        return subprocess.run([sys.executable, str(patches_py), "--target", "0.5.23", *map(str, args)],
                              capture_output=True, text=True, timeout=600, cwd=str(REPO))

    assert "islands series" in pp("check").stdout
    r = pp("apply", "--site-packages", site)
    assert r.returncode == 0 and "islands series" in r.stdout, r.stdout + r.stderr
    manifest = json.loads((site / "sglang" / PM.MANIFEST_NAME).read_text())
    assert manifest["patches"] == [p.name for p in PM.series("islands")]
    assert "islands series" in pp("status", "--site-packages", site).stdout
    assert pp("revert", "--site-packages", site).returncode == 0
    assert not (site / "sglang" / PM.MANIFEST_NAME).exists()
    r = pp("worktree", tmp_path / "wt")  # export: test_patches_export_main.py
    assert r.returncode == 1 and "worktree does not support --target 0.5.23 yet" in r.stderr


def test_install_islands_installs_the_main_series_into_an_existing_0_5_23(tmp_path, upstream):
    """scripts/install_islands.sh reads the release of PYTHON's sglang and applies its series."""
    site = minimal_site(tmp_path, upstream)
    (site / "sglang" / "__init__.py").write_bytes(b"")  # a regular package shadows the venv's
    env = dict(os.environ, PYTHONPATH=str(site))
    for changed in ("", "0 file(s) changed"):
        r = subprocess.run(["bash", str(REPO / "scripts" / "install_islands.sh"), sys.executable],
                           capture_output=True, text=True, timeout=600, env=env)
        assert r.returncode == 0, r.stdout + r.stderr
        assert changed in r.stdout and "islands series" in r.stdout.splitlines()[-1], r.stdout
    manifest = json.loads((site / "sglang" / PM.MANIFEST_NAME).read_text())
    assert manifest["series"] == "islands"
    assert manifest["patches"] == [p.name for p in PM.series("islands")]


# ---- the stand-alone fixes' regression tests, on the pristine release and with their fix -----

@pytest.fixture(scope="module")
def pristine_package(tmp_path_factory):
    """The wheel's whole sglang package (a copy shadows the installed one on PYTHONPATH)."""
    root = tmp_path_factory.mktemp("pristine-0.5.23")
    with zipfile.ZipFile(WHEEL) as z:
        z.extractall(root, [n for n in z.namelist() if n.startswith("sglang/")])
    return root


def _run_upstream_test(series: str, python_root: Path, tmp_path: Path):
    tests = sorted((UPSTREAM_TESTS / series).rglob("test_*.py"))
    assert tests, f"no regression test under {UPSTREAM_TESTS / series}"
    work = tmp_path / "checkout"
    shutil.copytree(UPSTREAM_TESTS / series / "test", work / "test")
    env = dict(os.environ, PYTHONPATH=str(python_root), SGLANG_USE_CPU_ENGINE="1",
               OMP_NUM_THREADS="2")
    return subprocess.run([str(MAIN_PY), "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           *[str(work / t.relative_to(UPSTREAM_TESTS / series)) for t in tests]],
                          capture_output=True, text=True, timeout=600, cwd=str(work), env=env)


@pytest.mark.skipif(not MAIN_PY.exists(), reason=".venv-main does not exist (scripts/setup_main.sh)")
@pytest.mark.parametrize("series", sorted(FIXES))
def test_fix_regression_test_fails_on_pristine_and_passes_with_the_fix(
        series, pristine_package, tmp_path):
    """On pristine (a based fix: pristine + its base fixes, FIX_BASES) the test fails; with the
    fix's patch on top it passes."""
    patch = PM.PATCHES / FIXES[series]
    islands = [p.name for p in PM.series("islands")]
    assert patch.name in islands
    base = fix_chain(series)
    assert all(islands.index(b.name) < islands.index(patch.name) for b in base), (
        "a fix's base comes before it in the series")

    def package(name, patches):
        if not patches:
            return pristine_package
        root = tmp_path / name
        shutil.copytree(pristine_package / "sglang", root / "python" / "sglang")
        for p in patches:
            r = subprocess.run(["git", "apply", str(p)], cwd=str(root), capture_output=True,
                               text=True)
            assert r.returncode == 0, f"{p.name}: {r.stderr}"
        return root / "python"

    bad = _run_upstream_test(series, package("base", base), tmp_path / "pristine")
    assert bad.returncode == 1 and " failed" in bad.stdout, bad.stdout[-3000:] + bad.stderr[-2000:]
    good = _run_upstream_test(series, package("fixed", [*base, patch]), tmp_path / "fixed-run")
    assert good.returncode == 0, good.stdout[-3000:] + good.stderr[-2000:]


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


# ---- the islands series' own tests, and its flag on the launcher --------------------------

@pytest.mark.skipif(not ISLANDS_PY.exists(),
                    reason=".venv-main-islands does not exist (scripts/setup_main.sh --islands)")
def test_islands_series_upstream_tests_pass_in_the_islands_environment(tmp_path):
    """upstream-tests-main/swa-islands/ (upstream's layout) on the installed islands series."""
    src = UPSTREAM_TESTS / "swa-islands" / "test"
    tests = sorted(src.rglob("test_*.py"))
    assert tests
    shutil.copytree(src, tmp_path / "test")
    env = dict(os.environ, SGLANG_USE_CPU_ENGINE="1", OMP_NUM_THREADS="2")
    env.pop("PYTHONPATH", None)
    r = subprocess.run([str(ISLANDS_PY), "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        *[str(tmp_path / "test" / t.relative_to(src)) for t in tests]],
                       capture_output=True, text=True, timeout=600, cwd=str(tmp_path), env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]


def _launch(python: Path, *argv):
    sys.path.insert(0, str(REPO))
    from islands_harness.e2e_workload import WINDOW
    from islands_harness.tiny_model import build_tiny_model

    env = dict(os.environ, SGLANG_USE_CPU_ENGINE="1", OMP_NUM_THREADS="2")
    env.pop("PYTHONPATH", None)
    return subprocess.run([str(python), "-m", "sglang.launch_server", "--model-path",
                           str(build_tiny_model(window=WINDOW)), "--device", "cpu",
                           "--attention-backend", "torch_native", *argv],
                          capture_output=True, text=True, timeout=300, env=env)


@pytest.mark.skipif(not ISLANDS_PY.exists(),
                    reason=".venv-main-islands does not exist (scripts/setup_main.sh --islands)")
def test_launcher_refuses_an_uncovered_combination_before_loading_the_model():
    r = _launch(ISLANDS_PY, "--enable-swa-islands", "--disable-radix-cache")
    assert r.returncode != 0
    assert ("--enable-swa-islands cannot be used here: --disable-radix-cache builds a cache "
            "without a radix tree") in r.stderr, r.stderr[-3000:]
    assert "Load weight" not in r.stderr + r.stdout


@pytest.mark.skipif(not MAIN_PY.exists(), reason=".venv-main does not exist (scripts/setup_main.sh)")
def test_stock_arm_does_not_know_the_flag():
    r = _launch(MAIN_PY, "--enable-swa-islands")
    assert r.returncode == 2 and "unrecognized arguments: --enable-swa-islands" in r.stderr, (
        r.stderr[-3000:])


# ---- the islands environment on the CPU server ---------------------------------------------

def _post(base: str, ids, max_new: int = 4):
    import urllib.error
    import urllib.request

    body = json.dumps({"input_ids": ids,
                       "sampling_params": {"max_new_tokens": max_new, "temperature": 0}}).encode()
    req = urllib.request.Request(base + "/generate", data=body,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")


@pytest.mark.server
@pytest.mark.skipif(not ISLANDS_PY.exists(),
                    reason=".venv-main-islands does not exist (scripts/setup_main.sh --islands)")
def test_islands_environment_answers_out_of_vocab_input_ids_with_a_400_and_keeps_serving():
    """Stock 0.5.23 dies on such a request (the scheduler's IndexError in the embedding takes the
    server down); with the main series it is a 400 and the server keeps answering. The boot (no
    island flag, a set ratio) also logs the rollback warning."""
    sys.path.insert(0, str(REPO))
    from islands_harness.e2e_workload import SERVER_ARGS, WINDOW
    from islands_harness.server import SglangServer
    from islands_harness.tiny_model import build_tiny_model

    path = build_tiny_model(window=WINDOW)
    vocab = json.loads((path / "config.json").read_text())["vocab_size"]
    with SglangServer(path, SERVER_ARGS, python=str(ISLANDS_PY), boot_timeout_s=300) as srv:
        status, before = _post(srv.base_url, [5, 6, 7, 8])
        assert status == 200, before
        for ids, bad in (([5, 6, vocab, 8], vocab), ([5, -1, 7], -1)):
            status, body = _post(srv.base_url, ids)
            assert status == 400, (status, body)
            assert f"out-of-vocabulary token id {bad}; valid range is [0, {vocab})" in body, body
        status, after = _post(srv.base_url, [5, 6, 7, 8])
        assert status == 200 and after["output_ids"] == before["output_ids"], after
        assert srv.proc.poll() is None
        log = srv.log_path.read_text(errors="replace")
    # the same boot, without the flag at a set ratio of 0.25 (1024 SWA tokens): the rollback
    # warning (patch 0008) with stock main's decode hold, 32 + 32 + 128 tokens per request
    assert ("SWA pool of 1024 tokens (--swa-full-tokens-ratio 0.25) binds admission at about 5.0 "
            "decoding requests without --enable-swa-islands: each holds up to 192 tokens") in log, (
        log[-3000:])
