"""What the export tests share (test_patches_export.py: sglang 0.5.15.post1;
test_patches_export_main.py: 0.5.23): a pristine checkout of a release wheel at upstream's layout,
the exported series applied to it with ``git am``, and the exported tests run on a tree of it with
that tree's ``python/`` first on PYTHONPATH (the interpreter's installed sglang is shadowed: each
run prints ``sglang.__file__``)."""
from __future__ import annotations

import hashlib
import os
import re
import subprocess
import zipfile
from pathlib import Path
from typing import Dict, List, Mapping, Sequence, Tuple


def git(cwd, *args, check=True):
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM="1", LC_ALL="C",
               GIT_AUTHOR_NAME="T", GIT_AUTHOR_EMAIL="t@example.invalid",
               GIT_COMMITTER_NAME="T", GIT_COMMITTER_EMAIL="t@example.invalid")
    r = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True)
    if check:
        assert r.returncode == 0, f"git {' '.join(args)}:\n{r.stdout}{r.stderr}"
    return r


def pristine_checkout(root: Path, wheel: Path) -> Path:
    """The wheel's ``sglang/`` package at ``root/python/sglang/`` (upstream's layout), committed
    on branch ``pristine``; built from the wheel itself, independently of the export."""
    with zipfile.ZipFile(wheel) as z:
        for info in z.infolist():
            if info.filename.startswith("sglang/") and not info.is_dir():
                dst = root / "python" / info.filename
                dst.parent.mkdir(parents=True, exist_ok=True)
                dst.write_bytes(z.read(info))
                if (info.external_attr >> 16) & 0o111:
                    dst.chmod(0o755)
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "pristine")
    git(root, "branch", "pristine")
    return root


def wheel_tree(wheel: Path) -> Dict[str, Tuple[str, str]]:
    """{path at upstream's layout (python/sglang/...): (git file mode, git blob id)} of the
    wheel's ``sglang/`` package, computed from the wheel itself."""
    out = {}
    with zipfile.ZipFile(wheel) as z:
        for info in z.infolist():
            if info.filename.startswith("sglang/") and not info.is_dir():
                data = z.read(info)
                mode = "100755" if (info.external_attr >> 16) & 0o111 else "100644"
                out["python/" + info.filename] = (
                    mode, hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest())
    return out


def verified_clone(repo: Path, dest: Path, wheel: Path) -> Path:
    """A clone of the export's git repo whose ``main`` is checked, blob by blob and mode by mode,
    to be exactly the wheel's package at upstream's layout; its ``pristine`` branch is that
    ``main``. Cheaper than :func:`pristine_checkout` (no hashing into a new object store)."""
    git(dest.parent, "clone", "-q", "--shared", str(repo), str(dest))
    tree = {}
    for line in git(dest, "ls-tree", "-r", "main").stdout.splitlines():
        meta, path = line.split("\t", 1)
        mode, _, blob = meta.split()
        tree[path] = (mode, blob)
    want = wheel_tree(wheel)
    assert tree == want, (sorted(set(tree) ^ set(want))[:20],
                          [p for p in tree if p in want and tree[p] != want[p]][:20])
    git(dest, "branch", "pristine", "main")
    return dest


def series_names(exported: Path, series: str) -> List[str]:
    """The patch files an exported series' ``series`` file lists, in order."""
    return [l for l in (exported / series / "series").read_text().splitlines()
            if l and not l.startswith("#")]


def am_series(root: Path, exported: Path, bases: Mapping[str, str]):
    """Each exported series applied with ``git am`` on its own branch from its base:
    {series: the git am result} (a failed am is aborted, the branch left at its base)."""
    applied = {}
    for series, base in bases.items():
        git(root, "checkout", "-q", "-b", series, base)
        r = git(root, "am", "-q", *[str(exported / series / n) for n in series_names(exported, series)],
                check=False)
        applied[series] = r
        if r.returncode != 0:
            git(root, "am", "--abort", check=False)
    return applied


def assert_applied_as_exported(root: Path, applied, exported: Path) -> None:
    """Every series applied with ``git am`` and ends on the tree of the export's own branch."""
    for series, r in applied.items():
        assert r.returncode == 0, f"{series} does not apply with git am:\n{r.stdout}{r.stderr}"
        mine = git(root, "rev-parse", f"{series}^{{tree}}").stdout
        theirs = git(exported / "repo", "rev-parse", f"{series}^{{tree}}").stdout
        assert mine == theirs, series


def assert_commits_import(root: Path, bases: Mapping[str, str]) -> int:
    """Every commit of every series compiles and imports only what its tree has (the export's own
    static check, run again on the applied checkout); returns the number of commits."""
    from islands_tools.patches.imports import check_commit

    n = 0
    for series, base in bases.items():
        for c in git(root, "rev-list", "--reverse", f"{base}..{series}").stdout.split():
            subject = git(root, "log", "-1", "--format=%s", c).stdout
            assert check_commit(root, c) == [], (series, subject)
            n += 1
    return n


def added_tests(root: Path, rng: str) -> List[str]:
    """The ``test_*`` files a revision range adds under ``test/``."""
    added = git(root, "diff", "--name-only", "--diff-filter=A", rng, "--", "test").stdout.split()
    return [t for t in added if Path(t).name.startswith("test_")]


PYTEST_CODE = ("import sys, sglang; print('SGLANG_FILE', sglang.__file__, flush=True); "
               "import pytest; sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', *sys.argv[1:]]))")


def pytest_env(tree: Path, extra: Dict[str, str]) -> Dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(tree / "python"), SGLANG_USE_CPU_ENGINE="1",
                OMP_NUM_THREADS="1", **extra)


def start_pytest(python, tree: Path, tests: Sequence[str], extra_env: Dict[str, str]):
    """pytest on ``tests`` (paths in ``tree``) by ``python``, with ``tree/python`` first on
    PYTHONPATH; a Popen whose output (stdout and stderr) is text."""
    return subprocess.Popen([str(python), "-c", PYTEST_CODE, *tests], cwd=tree,
                            env=pytest_env(tree, extra_env), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def assert_passed_on(tree: Path, out: str, rc: int) -> None:
    """The run imported the tree's sglang, and every test passed, none skipped."""
    used = re.search(r"^SGLANG_FILE (.*)$", out, re.M)
    assert used and Path(used.group(1)).resolve() == (tree / "python/sglang/__init__.py").resolve(), out[-3000:]
    assert rc == 0, out[-4000:]
    summary = [l for l in out.splitlines() if re.search(r"\d+ passed", l)]
    assert summary and "skipped" not in summary[-1], out[-2000:]
