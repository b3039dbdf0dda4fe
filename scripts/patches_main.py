#!/usr/bin/env python3
"""Apply the HARNESS-ONLY patch series patches-main/ to stock sglang==0.5.23 in .venv-main.

Not the islands series (patches/, scripts/patches.py): patches-main/ holds only upstream bug fixes
that stop the tiny hybrid-SWA model from running correctly on CPU with stock 0.5.23 (issue 17),
so that `.venv-main` can be measured as "upstream main". No module of ours is installed.

  fetch   make sure the pristine sglang 0.5.23 wheel is in .cache/wheels-main/ (sha256 checked)
          and print its path
  check   every patch of patches-main/series applies cleanly, in order, to the pristine wheel's files
  apply   restore the files the series touches from the pristine wheel, then apply the series, in
          the sglang package the running interpreter imports (or --site-packages DIR).
          Idempotent: re-running never applies a patch twice. Refuses if a touched file was
          changed by someone else (neither pristine nor what the last apply wrote).

Run with .venv-main's interpreter (scripts/setup_main.sh does). Reuses scripts/patches_lib.py
(the wheel reader, series parser and git wrapper of scripts/patches.py).
"""
from __future__ import annotations

import argparse
import hashlib
import importlib.util
import os
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Optional

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))
import patches_lib as P  # noqa: E402  (the wheel reader, series parser and git of patches.py)

SGLANG_VERSION = "0.5.23"
# sha256 of sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl, the release's only wheel.
WHEEL_SHA256 = "00b3cd5b265ac76c64185fbb6b95424f324ddd9f428d0306b77bc9db9d859937"
CACHE = REPO / ".cache" / "wheels-main"
PATCHES = REPO / "patches-main"
MANIFEST_NAME = ".islands_harness_main_patches.json"


def fetch_wheel() -> Path:
    found = sorted(CACHE.glob(f"sglang-{SGLANG_VERSION}-*.whl"))
    if not found:
        CACHE.mkdir(parents=True, exist_ok=True)
        print(f"[patches_main] downloading sglang=={SGLANG_VERSION} into {CACHE}", file=sys.stderr)
        r = subprocess.run(
            [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q", "download",
             "--no-deps", "--only-binary=:all:", "--python-version", "3.11", "--implementation",
             "cp", "--abi", "cp311", "--platform", "manylinux_2_34_x86_64", "-d", str(CACHE),
             f"sglang=={SGLANG_VERSION}"],
            stdout=sys.stderr)
        if r.returncode != 0:
            raise P.PatchesError(f"could not download sglang=={SGLANG_VERSION} (is the registry reachable?)")
        found = sorted(CACHE.glob(f"sglang-{SGLANG_VERSION}-*.whl"))
    for whl in found:
        if P.sha256_file(whl) == WHEEL_SHA256:
            return whl
    raise P.PatchesError(f"no sglang=={SGLANG_VERSION} wheel with sha256 {WHEEL_SHA256} in {CACHE}; "
                         "delete the mismatching file(s) and run again to re-download")


def staged(upstream) -> Dict[str, bytes]:
    """{package-relative path: pristine file with the whole series applied}."""
    patches = P.read_series(PATCHES)
    touched: List[str] = []
    for p in patches:
        touched += [r for r in P.patch_files(p) if r not in touched]
    with tempfile.TemporaryDirectory(prefix="patches-main-") as tmp:
        wd = Path(tmp)
        P.git(wd, "init", "-q")
        for rel in touched:
            if not upstream.has(rel):
                raise P.PatchesError(f"{rel}: not a file of sglang {SGLANG_VERSION}")
            dst = wd / P.UPSTREAM_PREFIX / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.write_bytes(upstream.read(rel))
        for p in patches:
            r = P.git(wd, "apply", "--whitespace=nowarn", str(p.resolve()), check=False)
            if r.returncode != 0:
                raise P.PatchesError(f"{p.name} does not apply to pristine sglang {SGLANG_VERSION}:\n"
                                     + (r.stdout + r.stderr).rstrip())
        return {rel: (wd / P.UPSTREAM_PREFIX / rel).read_bytes() for rel in touched}


def site_packages() -> Path:
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        raise P.PatchesError(f"sglang is not installed for {sys.executable}; run scripts/setup_main.sh")
    return Path(list(spec.submodule_search_locations)[0]).resolve().parent


def write_file(path: Path, data: bytes, mode: int) -> None:
    """Atomic replace; the new mtime invalidates the old bytecode."""
    tmp = path.with_name(f".{path.name}.patches-main-tmp")
    tmp.write_bytes(data)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def _sha(b: Optional[bytes]) -> Optional[str]:
    return None if b is None else hashlib.sha256(b).hexdigest()


def cmd_fetch(args) -> int:
    print(fetch_wheel())
    return 0


def cmd_check(args) -> int:
    out = staged(P.Upstream(fetch_wheel()))
    names = [p.name for p in P.read_series(PATCHES)]
    print(f"check: {len(names)} harness-only patch(es) apply cleanly to sglang {SGLANG_VERSION} "
          f"({', '.join(names)}; {len(out)} file(s))")
    return 0


def cmd_apply(args) -> int:
    upstream = P.Upstream(fetch_wheel())
    site = Path(args.site_packages).resolve() if args.site_packages else site_packages()
    pkg = site / "sglang"
    vf = pkg / "_version.py"
    if not vf.is_file() or vf.read_bytes() != upstream.read("_version.py"):
        raise P.PatchesError(f"{pkg} is not an installed sglang=={SGLANG_VERSION} (checked _version.py)")
    desired = staged(upstream)
    mpath = pkg / MANIFEST_NAME
    try:
        manifest = json.loads(mpath.read_text()) if mpath.is_file() else {}
    except ValueError:
        manifest = {}
    recorded = manifest.get("files_sha256", {})
    # Files a previous apply patched that the series no longer touches go back to pristine.
    for rel in recorded:
        if rel not in desired and upstream.has(rel):
            desired[rel] = upstream.read(rel)
    foreign = []
    for rel in desired:
        path = pkg / rel
        have = _sha(path.read_bytes()) if path.is_file() else None
        if have not in (_sha(upstream.read(rel)), _sha(desired[rel]), recorded.get(rel)):
            foreign.append(rel)
    if foreign:
        raise P.PatchesError(f"{pkg}: changed by someone else (not pristine, not ours): "
                             f"{', '.join(foreign)}; reinstall sglang=={SGLANG_VERSION} or restore them")
    changed = 0
    for rel, data in sorted(desired.items()):
        path = pkg / rel
        if not path.is_file() or path.read_bytes() != data:
            write_file(path, data, upstream.mode(rel))
            changed += 1
    names = [p.name for p in P.read_series(PATCHES)]
    touched = sorted({r for p in P.read_series(PATCHES) for r in P.patch_files(p)})
    text = json.dumps({"tool": "scripts/patches_main.py", "harness_only": True,
                       "sglang_version": SGLANG_VERSION, "patches": names,
                       "files_sha256": {r: _sha(desired[r]) for r in touched}},
                      indent=1, sort_keys=True) + "\n"
    if not mpath.is_file() or mpath.read_text() != text:
        write_file(mpath, text.encode(), 0o644)
    print(f"apply: sglang {SGLANG_VERSION} in {pkg}: {len(names)} harness-only patch(es) on "
          f"{len(touched)} file(s); {changed} file(s) changed")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="scripts/patches_main.py", description=__doc__.split("\n\n")[0],
                                 epilog=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("fetch").set_defaults(func=cmd_fetch)
    sub.add_parser("check").set_defaults(func=cmd_check)
    p = sub.add_parser("apply")
    p.add_argument("--site-packages", metavar="DIR")
    p.set_defaults(func=cmd_apply)
    args = ap.parse_args(argv)
    try:
        return args.func(args)
    except P.PatchesError as e:
        print(f"patches_main.py: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
