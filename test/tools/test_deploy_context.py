"""deploy/Dockerfile's build context holds what its install step runs: the files its COPY lines
name, laid out as in the image, are enough for `scripts/patches.py` to import and run (CI cannot
build images; test/server/test_deploy.py runs the same install step from the repository)."""

from __future__ import annotations

import glob
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "deploy" / "Dockerfile"


def copy_lines():
    """(sources, destination) of every COPY line, continuation lines joined."""
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    for line in text.splitlines():
        words = line.split()
        if words and words[0] == "COPY":
            yield words[1:-1], words[-1]


def build_context(dest_root: Path) -> Path:
    """The image's /opt/swa-islands as the COPY lines lay it out, under ``dest_root``."""
    opt = None
    for sources, dest in copy_lines():
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
