"""Each image's build context holds what its install step runs (deploy/Dockerfile: 0.5.15.post1,
deploy/Dockerfile.main: 0.5.23): the files its COPY lines name, laid out as in the image, are
enough for the patch tooling to import and run, and for the 0.5.23 series to check against its
release (CI cannot build images; test/server/test_deploy.py runs the same install step from the
repository)."""

from __future__ import annotations

import glob
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "deploy" / "Dockerfile"
DOCKERFILE_MAIN = REPO / "deploy" / "Dockerfile.main"


def copy_lines(dockerfile: Path = DOCKERFILE):
    """(sources, destination) of every COPY line, continuation lines joined."""
    text = dockerfile.read_text().replace("\\\n", " ")
    for line in text.splitlines():
        words = line.split()
        if words and words[0] == "COPY":
            yield words[1:-1], words[-1]


def build_context(dest_root: Path, dockerfile: Path = DOCKERFILE) -> Path:
    """The image's /opt/swa-islands as the COPY lines lay it out, under ``dest_root``."""
    opt = None
    for sources, dest in copy_lines(dockerfile):
        assert dest.startswith("/opt/swa-islands/"), dest
        target = dest_root / dest.lstrip("/")
        opt = dest_root / "opt" / "swa-islands"
        for src in sources:
            matches = sorted(glob.glob(str(REPO / src.rstrip("/"))))
            assert matches, f"COPY {src}: nothing in the repository matches"
            for m in matches:
                m = Path(m)
                if m.is_dir():
                    shutil.copytree(m, target, dirs_exist_ok=True)
                else:
                    target.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(m, target / m.name)
    assert opt is not None, "no COPY line"
    return opt


def test_the_install_step_finds_every_script_it_runs(tmp_path):
    opt = build_context(tmp_path)
    install = (opt / "scripts" / "install_islands.sh").read_text()
    for script in ("patches.py", "patches_main.py"):
        if f"scripts/{script}" in install:
            assert (opt / "scripts" / script).exists(), f"install_islands.sh runs {script}"
    for script in sorted((opt / "scripts").glob("patches*.py")):
        r = subprocess.run([sys.executable, str(script), "--help"], capture_output=True,
                           text=True, timeout=120, cwd=tmp_path)
        assert r.returncode == 0, (script.name, r.stderr[-2000:])
    r = subprocess.run([sys.executable, str(opt / "scripts" / "patches.py"), "--help"],
                       capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert "export" in r.stdout


def test_a_context_missing_an_imported_module_fails_here(tmp_path):
    """The check above can fail: without the patch tooling's lib module, patches.py does not
    import."""
    opt = build_context(tmp_path)
    (opt / "islands_tools" / "patches" / "lib.py").unlink()
    r = subprocess.run([sys.executable, str(opt / "scripts" / "patches.py"), "--help"],
                       capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode != 0 and "islands_tools.patches.lib" in r.stderr


def test_the_0_5_23_image_holds_its_series_and_modules(tmp_path):
    """deploy/Dockerfile.main's context: scripts/patches_main.py finds the series, our modules
    and the shared ones, and checks the series against the pristine wheel (when it is cached)."""
    opt = build_context(tmp_path, DOCKERFILE_MAIN)
    assert "FROM ${SGLANG_IMAGE}" in DOCKERFILE_MAIN.read_text()
    assert "lmsysorg/sglang:v0.5.23" in DOCKERFILE_MAIN.read_text()
    for rel in ("patches-main/series", "python-main/sglang/srt/mem_cache/swa_island_radix_cache.py",
                "python/sglang/srt/mem_cache/swa_island_formulas.py",
                "python/sglang/srt/mem_cache/swa_island_queue.py"):
        assert (opt / rel).is_file(), rel
    wheels = sorted((REPO / ".cache" / "wheels-main").glob("sglang-0.5.23-*.whl"))
    if not wheels:
        pytest.skip("no pristine sglang 0.5.23 wheel in .cache/wheels-main (scripts/setup_main.sh)")
    cache = opt / ".cache" / "wheels-main"
    cache.mkdir(parents=True)
    shutil.copy2(wheels[0], cache / wheels[0].name)
    r = subprocess.run([sys.executable, str(opt / "scripts" / "patches_main.py"), "check"],
                       capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "islands series" in r.stdout
