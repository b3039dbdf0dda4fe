"""Apply a patch series of patches-main/ to sglang==0.5.23 (upstream main): the stock arm or islands.

patches-main/ holds the series of the 0.5.23 target, in two lists over the same patch files:

  series        the islands series (`--series islands`): stand-alone upstream fixes first, then
                the islands patches; installed with our modules (python-main/sglang/, at their
                upstream paths, plus the shared modules of python/sglang/ in SHARED) into
                .venv-main-islands (scripts/setup_main.sh --islands)
  series-stock  the stock arm `main` (`--series stock`): only the HARNESS-ONLY upstream fixes
                without which the tiny hybrid-SWA model does not run correctly on CPU; no module
                of ours. Installed into .venv-main (scripts/setup_main.sh), measured as upstream
                main. Every entry must also be in `series`.

  fetch   make sure the pristine sglang 0.5.23 wheel is in .cache/wheels-main/ (sha256 checked)
          and print its path
  check   both lists apply cleanly, in order, to the pristine wheel's files, our modules clash
          with no upstream file, and series-stock is a subset of series
  apply   --series {stock,islands}: restore every file the series or the previous apply touched
          from the pristine wheel, apply the series, install its modules (islands) and remove
          modules a previous apply installed, in the sglang package the running interpreter
          imports (or --site-packages DIR). Idempotent. Refuses if a touched file was changed by
          someone else (neither pristine nor what the last apply wrote).
  status  per file: pristine / applied / modified, and which series is installed (exit 3 when
          someone else changed a file)
  revert  back to pristine 0.5.23: touched files restored, our modules and the manifest removed

Run with the target environment's interpreter (scripts/setup_main.sh does). Reuses
``islands_tools.patches.lib`` (the wheel reader, series parser, overlay collector and git
wrapper of scripts/patches.py).
"""
from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Optional

from . import lib as P  # the wheel reader, series parser and git of scripts/patches.py

REPO = Path(__file__).resolve().parents[2]

SGLANG_VERSION = "0.5.23"
# sha256 of sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl, the release's only wheel.
WHEEL_SHA256 = "00b3cd5b265ac76c64185fbb6b95424f324ddd9f428d0306b77bc9db9d859937"
CACHE = REPO / ".cache" / "wheels-main"
PATCHES = REPO / "patches-main"
OVERLAY = REPO / "python-main" / "sglang"
# Modules of the 0.5.15 target's tree that the 0.5.23 target installs as they are: the pure
# formulas, defined once for both (package-relative paths under python/sglang/).
SHARED_ROOT = REPO / "python" / "sglang"
SHARED = ("srt/mem_cache/swa_island_formulas.py", "srt/mem_cache/swa_island_queue.py")
SERIES_FILES = {"islands": "series", "stock": "series-stock"}
MANIFEST_NAME = ".islands_harness_main_patches.json"


def fetch_wheel() -> Path:
    """The verified pristine 0.5.23 wheel: ``SWA_ISLANDS_WHEEL`` if it names one (a wheel of
    the other target is left to patches.py), else the cache, downloading into it if empty."""
    override = os.environ.get("SWA_ISLANDS_WHEEL")
    if override and Path(override).name.startswith(f"sglang-{SGLANG_VERSION}-"):
        found = [Path(override)]
    else:
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
    raise P.PatchesError(f"no sglang=={SGLANG_VERSION} wheel with sha256 {WHEEL_SHA256} among "
                         f"{', '.join(map(str, found))}; point SWA_ISLANDS_WHEEL at the release's "
                         f"wheel, or delete the mismatching file(s) in {CACHE} and run again to "
                         "re-download")


def series(name: str) -> List[Path]:
    patches = P.read_series(PATCHES, SERIES_FILES[name])
    if name == "stock":
        islands = {p.name for p in series("islands")}
        extra = [p.name for p in patches if p.name not in islands]
        if extra:
            raise P.PatchesError(f"{PATCHES / SERIES_FILES['stock']}: not in the islands series "
                                 f"{PATCHES / SERIES_FILES['islands']}: {', '.join(extra)}")
    return patches


def touched_files(patches: List[Path]) -> List[str]:
    touched: List[str] = []
    for p in patches:
        touched += [r for r in P.patch_files(p) if r not in touched]
    return touched


def overlay(name: str, upstream) -> Dict[str, Path]:
    """{package-relative path: source} of our modules the series installs (none for stock)."""
    if name == "stock":
        return {}
    out = P.collect_overlay(OVERLAY, upstream)
    for rel in SHARED:
        if upstream.has(rel):
            raise P.PatchesError(f"{rel}: a file of sglang {SGLANG_VERSION}; a shared module must be ours")
        out[rel] = SHARED_ROOT / rel
    both = sorted(set(out) & set(touched_files(series(name))))
    if both:
        raise P.PatchesError(f"both a patch and our modules provide: {', '.join(both)}")
    return out


def staged(upstream, patches: List[Path]) -> Dict[str, bytes]:
    """{package-relative path: pristine file with the whole series applied}."""
    touched = touched_files(patches)
    with tempfile.TemporaryDirectory(prefix="patches-main-") as tmp:
        wd = Path(tmp)
        P.git(wd, "init", "-q")
        for rel in touched:
            if not upstream.has(rel):
                raise P.PatchesError(f"{rel}: not a file of sglang {SGLANG_VERSION}")
            dst = wd / P.UPSTREAM_PREFIX / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.write_bytes(upstream.read(rel))
        for i, p in enumerate(patches):
            r = P.git(wd, "apply", "--whitespace=nowarn", str(p.resolve()), check=False)
            if r.returncode != 0:
                after = f" (after {', '.join(q.name for q in patches[:i])})" if i else ""
                raise P.PatchesError(f"{p.name} does not apply to pristine sglang {SGLANG_VERSION}"
                                     f"{after}:\n" + (r.stdout + r.stderr).rstrip())
        return {rel: (wd / P.UPSTREAM_PREFIX / rel).read_bytes() for rel in touched}


def site_packages() -> Path:
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        raise P.PatchesError(f"sglang is not installed for {sys.executable}; run scripts/setup_main.sh")
    return Path(list(spec.submodule_search_locations)[0]).resolve().parent


def installed_package(args, upstream) -> Path:
    site = Path(args.site_packages).resolve() if args.site_packages else site_packages()
    pkg = site / "sglang"
    vf = pkg / "_version.py"
    if not vf.is_file() or vf.read_bytes() != upstream.read("_version.py"):
        raise P.PatchesError(f"{pkg} is not an installed sglang=={SGLANG_VERSION} (checked _version.py)")
    return pkg


def write_file(path: Path, data: Optional[bytes], mode: int) -> None:
    """Atomic replace (None: remove); the new mtime invalidates the old bytecode."""
    if data is None:
        if path.is_file():
            path.unlink()
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.patches-main-tmp")
    tmp.write_bytes(data)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def _sha(b: Optional[bytes]) -> Optional[str]:
    return None if b is None else hashlib.sha256(b).hexdigest()


def read_manifest(pkg: Path) -> dict:
    path = pkg / MANIFEST_NAME
    try:
        m = json.loads(path.read_text()) if path.is_file() else {}
    except ValueError:
        m = {}
    return m if isinstance(m, dict) else {}


def file_states(pkg: Path, upstream, manifest: dict, rels) -> Dict[str, str]:
    """Per file: ``pristine`` (as in the wheel; absent for a file the wheel lacks), ``applied``
    (as the last apply wrote it) or ``modified`` (someone else changed it)."""
    recorded = manifest.get("files_sha256", {})
    out = {}
    for rel in sorted(set(rels)):
        path = pkg / rel
        have = _sha(path.read_bytes()) if path.is_file() else None
        want = _sha(upstream.read(rel)) if upstream.has(rel) else None
        if have == want:
            out[rel] = "pristine"
        elif have is not None and recorded.get(rel) == have:
            out[rel] = "applied"
        else:
            out[rel] = "modified"
    return out


def refuse_foreign(pkg: Path, states: Dict[str, str], what: str) -> None:
    foreign = [rel for rel, st in states.items() if st == "modified"]
    if foreign:
        raise P.PatchesError(f"not {what} {pkg}: changed by someone else (not pristine, not ours): "
                             f"{', '.join(foreign)}; reinstall sglang=={SGLANG_VERSION} or restore them")


def _mode(upstream, rel: str) -> int:
    return upstream.mode(rel) if upstream.has(rel) else 0o644


def cmd_fetch(args) -> int:
    print(fetch_wheel())
    return 0


def cmd_check(args) -> int:
    upstream = P.Upstream(fetch_wheel())
    for name in ("islands", "stock"):
        patches = series(name)
        out = staged(upstream, patches)
        mods = overlay(name, upstream)
        print(f"check: {name} series: {len(patches)} patch(es) apply cleanly to sglang "
              f"{SGLANG_VERSION} ({', '.join(p.name for p in patches)}; {len(out)} file(s)); "
              f"{len(mods)} module(s) of ours")
    return 0


def cmd_apply(args) -> int:
    upstream = P.Upstream(fetch_wheel())
    pkg = installed_package(args, upstream)
    patches = series(args.series)
    mods = overlay(args.series, upstream)
    manifest = read_manifest(pkg)
    previous = list(manifest.get("files_sha256", {}))
    desired: Dict[str, Optional[bytes]] = {
        rel: (upstream.read(rel) if upstream.has(rel) else None) for rel in previous}
    desired.update(staged(upstream, patches))
    desired.update({rel: src.read_bytes() for rel, src in mods.items()})
    refuse_foreign(pkg, file_states(pkg, upstream, manifest, desired), "applying to")
    changed = 0
    for rel, data in sorted(desired.items()):
        path = pkg / rel
        have = path.read_bytes() if path.is_file() else None
        if have != data:
            write_file(path, data, _mode(upstream, rel))
            changed += 1
    touched = touched_files(patches)
    mpath = pkg / MANIFEST_NAME
    text = json.dumps({"tool": "scripts/patches_main.py", "series": args.series,
                       "harness_only": args.series == "stock",
                       "sglang_version": SGLANG_VERSION, "patches": [p.name for p in patches],
                       "overlay_files": sorted(mods),
                       "files_sha256": {r: _sha(desired[r]) for r in sorted([*touched, *mods])}},
                      indent=1, sort_keys=True) + "\n"
    if not mpath.is_file() or mpath.read_text() != text:
        write_file(mpath, text.encode(), 0o644)
    print(f"apply: sglang {SGLANG_VERSION} in {pkg}: {args.series} series, {len(patches)} patch(es) "
          f"on {len(touched)} file(s), {len(mods)} module(s) of ours; {changed} file(s) changed")
    return 0


def cmd_status(args) -> int:
    upstream = P.Upstream(fetch_wheel())
    pkg = installed_package(args, upstream)
    manifest = read_manifest(pkg)
    rels = [*manifest.get("files_sha256", {}), *touched_files(series("islands"))]
    states = file_states(pkg, upstream, manifest, rels)
    if P.print_file_states(pkg, states):
        return 3
    if not manifest:
        print(f"status: {pkg}: pristine sglang {SGLANG_VERSION}")
        return 0
    name = manifest.get("series", "stock")
    current = [p.name for p in series(name)]
    note = "" if manifest.get("patches") == current else f"; this checkout's {name} series differs (run apply)"
    print(f"status: {pkg}: {name} series, {len(manifest.get('patches', []))} patch(es), "
          f"{len(manifest.get('overlay_files', []))} module(s) of ours{note}")
    return 0


def cmd_revert(args) -> int:
    upstream = P.Upstream(fetch_wheel())
    pkg = installed_package(args, upstream)
    manifest = read_manifest(pkg)
    rels = [*manifest.get("files_sha256", {}), *touched_files(series("islands"))]
    states = file_states(pkg, upstream, manifest, rels)
    refuse_foreign(pkg, states, "reverting")
    changed = 0
    for rel, st in states.items():
        if st != "pristine":
            write_file(pkg / rel, upstream.read(rel) if upstream.has(rel) else None, _mode(upstream, rel))
            changed += 1
    if (pkg / MANIFEST_NAME).exists():
        (pkg / MANIFEST_NAME).unlink()
        changed += 1
    print(f"revert: {pkg}: {changed} file(s) restored or removed; pristine sglang {SGLANG_VERSION}")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="scripts/patches_main.py", description=__doc__.split("\n\n")[0],
                                 epilog=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("fetch").set_defaults(func=cmd_fetch)
    sub.add_parser("check").set_defaults(func=cmd_check)
    p = sub.add_parser("apply")
    p.add_argument("--series", required=True, choices=sorted(SERIES_FILES),
                   help="stock: .venv-main's harness-only fixes; islands: the main islands series")
    p.add_argument("--site-packages", metavar="DIR")
    p.set_defaults(func=cmd_apply)
    for name, func in (("status", cmd_status), ("revert", cmd_revert)):
        p = sub.add_parser(name)
        p.add_argument("--site-packages", metavar="DIR")
        p.set_defaults(func=func)
    args = ap.parse_args(argv)
    try:
        return args.func(args)
    except P.PatchesError as e:
        print(f"patches_main.py: error: {e}", file=sys.stderr)
        return 1

