"""Maintain the SWA-islands patch series on pristine sglang==0.5.15.post1.

The project never commits upstream files. It ships two things:

  * patches/series + patches/NNNN-*.patch: small `git format-patch` patches against the
    upstream layout (a/python/sglang/...), applied in the order listed in patches/series
    (one file name per line; blank lines and '#' comments are ignored);
  * our own modules: every file under python/sglang/ in this repository that is not an
    upstream file, copied over the installed package at the same relative path.

Pristine upstream files always come from the release wheel, downloaded once with
`pip download --no-deps sglang==0.5.15.post1` into .cache/wheels/ and checked against its
sha256; later runs need no network.

Subcommands:
  fetch               make sure the pristine wheel is in .cache/ and print its path
  check               every patch in the series applies cleanly, in order, to pristine files
  apply               build the patched engine in an installed sglang package (default: the
                      running interpreter's), idempotently; refuses if someone else changed a
                      file it touches
  status              pristine / patched (series hash) / modified by someone else, per file
  revert              back to the pristine release: touched files restored, our modules removed
  worktree DIR        git repo with the pristine files committed as "upstream 0.5.15.post1"
                      and one commit per patch (git am), for editing patches as real code
  refresh DIR         rewrite patches/*.patch and patches/series from such a worktree
                      (git format-patch, deterministic output)
  export DIR          the series as upstream would receive it: three stand-alone fix series
                      with regression tests and the islands series with our modules and
                      tests, as git format-patch files + a cover note (islands_tools/patches/export.py);
                      with --target 0.5.23 the same for patches-main/series on pristine 0.5.23
                      (two stand-alone fixes and the islands series)

Editing or adding a patch:
  scripts/patches.py worktree /tmp/wt [--with python/sglang/srt/some/file.py | --all]
  cd /tmp/wt; edit python/sglang/...; git commit --amend (or git rebase -i upstream-0.5.15.post1)
                                        or git commit (a new patch, appended to the series)
  scripts/patches.py refresh /tmp/wt    # also re-checks the new series
  scripts/patches.py apply              # or scripts/setup.sh
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from .lib import (  # some only re-exported, for test_patches
    BASE_MESSAGE,
    BASE_TAG,
    DEFAULT_CACHE,
    DEFAULT_OVERLAY,
    DEFAULT_PATCHES,
    MANIFEST_NAME,
    SERIES_HEADER,
    SGLANG_VERSION,
    UPSTREAM_PREFIX,
    WHEEL_SHA256,
    ApplyFailure,
    PatchesError,
    Upstream,
    _patch_name,
    _write,
    fetch_wheel,
    git,
    load_series,
    log,
    open_upstream,
    patch_files,
    print_file_states,
    read_series,
    series_sha256,
    stage,
    warn,
)
from .export import add_export_parser


# --------------------------------------------------------------------------------------------
# subcommands


def cmd_fetch(args) -> int:
    print(fetch_wheel(Path(args.cache_dir)))
    return 0


def cmd_check(args) -> int:
    upstream = open_upstream(args)
    patches, touched, overlay = load_series(args, upstream)
    with tempfile.TemporaryDirectory(prefix="patches-check-") as tmp:
        stage(upstream, patches, Path(tmp))
    for p in patches:
        log(f"ok  {p.name}")
    log(
        f"check: {len(patches)} patch(es) apply cleanly to pristine sglang {SGLANG_VERSION} "
        f"({len(touched)} upstream file(s); {len(overlay)} overlay file(s) clash with nothing)"
    )
    return 0


def default_site_packages() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        raise PatchesError(
            f"sglang is not installed for {sys.executable}; run scripts/setup.sh, "
            "or pass --site-packages DIR"
        )
    pkg = Path(list(spec.submodule_search_locations)[0]).resolve()
    if pkg == DEFAULT_OVERLAY.resolve():
        raise PatchesError("the 'sglang' found first on sys.path is this repo's python/sglang")
    return pkg.parent


def _atomic_write(path: Path, data: bytes, mode: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.patches-tmp")
    tmp.write_bytes(data)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def _drop_bytecode(path: Path) -> None:
    cache = path.parent / "__pycache__"
    if path.suffix == ".py" and cache.is_dir():
        for pyc in cache.glob(f"{path.stem}.*.pyc"):
            pyc.unlink()
        if not any(cache.iterdir()):
            cache.rmdir()


def _set_files(pkg: Path, desired: Dict[str, Optional[bytes]], modes: Dict[str, int]) -> int:
    """Make pkg/rel hold desired[rel] (None: absent). Returns the number of files changed."""
    changed = 0
    for rel in sorted(desired):
        path = pkg / rel
        want = desired[rel]
        have = path.read_bytes() if path.is_file() else None
        if want == have:
            continue
        changed += 1
        if want is None:
            path.unlink()
            _drop_bytecode(path)
            d = path.parent  # remove directories that only our overlay created and that are empty now
            while d != pkg and d.is_dir() and not any(d.iterdir()):
                d.rmdir()
                d = d.parent
        else:
            _atomic_write(path, want, modes.get(rel, 0o644))
    return changed


def installed_package(args, upstream: "Upstream") -> Path:
    """The installed sglang package that ``--site-packages`` (or the running interpreter)
    names, checked to be the pinned release."""
    site = Path(args.site_packages).resolve() if args.site_packages else default_site_packages()
    pkg = site / "sglang"
    version_file = pkg / "_version.py"
    if not version_file.is_file() or version_file.read_bytes() != upstream.read("_version.py"):
        raise PatchesError(f"{pkg} is not an installed sglang=={SGLANG_VERSION} (checked _version.py)")
    return pkg


def read_manifest(pkg: Path) -> Optional[dict]:
    """What the last ``apply`` recorded in the package (None: no apply, or unreadable)."""
    path = pkg / MANIFEST_NAME
    if not path.is_file():
        return None
    try:
        m = json.loads(path.read_text())
        return m if isinstance(m, dict) else None
    except ValueError:
        warn(f"{path} is unreadable")
        return None


def file_states(pkg: Path, upstream: "Upstream", manifest: Optional[dict],
                rels: Sequence[str]) -> Dict[str, str]:
    """Per file: ``pristine`` (as in the wheel; for a file the wheel lacks: absent), ``applied``
    (as the last apply wrote it) or ``modified`` (neither: someone else changed it). A manifest
    written before apply recorded per-file hashes cannot tell the two apart: not pristine counts
    as applied there."""
    applied = (manifest or {}).get("files_sha256") or {}
    unverifiable = manifest is not None and "files_sha256" not in manifest
    out = {}
    for rel in sorted(set(rels)):
        path = pkg / rel
        have = path.read_bytes() if path.is_file() else None
        want = upstream.read(rel) if upstream.has(rel) else None
        if have == want:
            out[rel] = "pristine"
        elif have is not None and (unverifiable
                                   or applied.get(rel) == hashlib.sha256(have).hexdigest()):
            out[rel] = "applied"
        else:
            out[rel] = "modified"
    return out


def recorded_files(manifest: Optional[dict]) -> List[str]:
    m = manifest or {}
    return list(m.get("patched_files", [])) + list(m.get("overlay_files", []))


def refuse_foreign_edits(pkg: Path, states: Dict[str, str], what: str) -> None:
    foreign = [rel for rel, st in states.items() if st == "modified"]
    if foreign:
        raise PatchesError(
            f"not {what} {pkg}: changed by someone else since the last apply (neither pristine "
            f"nor as scripts/patches.py wrote them): " + ", ".join(foreign)
            + f". Restore them (pip install --force-reinstall --no-deps sglang=={SGLANG_VERSION}) "
            "or move your changes into a patch")


def cmd_apply(args) -> int:
    upstream = open_upstream(args)
    pkg = installed_package(args, upstream)
    manifest_path = pkg / MANIFEST_NAME
    manifest_before = read_manifest(pkg)
    previous = recorded_files(manifest_before)
    if manifest_path.is_file() and manifest_before is None:
        warn(f"{manifest_path} is unreadable; restoring only the files the series touches")

    def pristine(rel: str) -> Optional[bytes]:
        return upstream.read(rel) if upstream.has(rel) else None

    modes = {r: upstream.mode(r) for r in upstream.files()}
    patches, touched, overlay = load_series(args, upstream)
    refuse_foreign_edits(pkg, file_states(pkg, upstream, manifest_before, [*previous, *touched]),
                         "applying to")
    restore = {rel: pristine(rel) for rel in set(previous) | set(touched)}
    try:
        with tempfile.TemporaryDirectory(prefix="patches-apply-") as tmp:
            patched = stage(upstream, patches, Path(tmp))
    except ApplyFailure:
        # Never leave a half-patched engine: every file we ever touched goes back to pristine.
        _set_files(pkg, restore, modes)
        if manifest_path.exists():
            manifest_path.unlink()
        print(f"patches.py: {pkg}: restored {len(restore)} file(s) to pristine; series not applied", file=sys.stderr)
        raise

    desired = dict(restore)
    desired.update(patched)
    for rel, src in overlay.items():
        desired[rel] = src.read_bytes()
        modes[rel] = 0o755 if os.access(src, os.X_OK) else 0o644
    changed = _set_files(pkg, desired, modes)
    s_hash = series_sha256(patches)
    o_hash = hashlib.sha256()
    for rel in sorted(overlay):
        o_hash.update(rel.encode() + b"\0" + desired[rel] + b"\0")
    manifest = {
        "tool": "scripts/patches.py",
        "sglang_version": SGLANG_VERSION,
        "wheel_sha256": WHEEL_SHA256,
        "series_sha256": s_hash,
        "patches": [p.name for p in patches],
        "patched_files": sorted(touched),
        "overlay_files": sorted(overlay),
        "overlay_sha256": o_hash.hexdigest(),
        "files_sha256": {rel: hashlib.sha256(desired[rel]).hexdigest()
                         for rel in sorted(set(touched) | set(overlay)) if desired[rel] is not None},
    }
    text = json.dumps(manifest, indent=1, sort_keys=True) + "\n"
    if not manifest_path.is_file() or manifest_path.read_text() != text:
        _atomic_write(manifest_path, text.encode(), 0o644)
    log(
        f"apply: sglang {SGLANG_VERSION} in {pkg}: {len(patches)} patch(es) on {len(touched)} "
        f"upstream file(s), {len(overlay)} overlay file(s), series {s_hash[:12]}; "
        f"{changed} file(s) changed"
    )
    return 0


def cmd_status(args) -> int:
    """Print the package's state file by file and in one line; exit 0, or 3 if someone else
    changed a file the series or the last apply touches."""
    upstream = open_upstream(args)
    pkg = installed_package(args, upstream)
    manifest = read_manifest(pkg)
    patches, touched, overlay = load_series(args, upstream)
    states = file_states(pkg, upstream, manifest, [*recorded_files(manifest), *touched])
    if print_file_states(pkg, states):
        return 3
    if manifest is None and all(st == "pristine" for st in states.values()):
        print(f"status: {pkg}: pristine sglang {SGLANG_VERSION}")
        return 0
    applied = (manifest or {}).get("series_sha256", "?")
    current = series_sha256(patches)
    note = "" if applied == current else f"; this checkout's series is {current[:12]} (run apply)"
    print(f"status: {pkg}: patched, series {applied[:12]} "
          f"({len((manifest or {}).get('patches', []))} patches, "
          f"{len((manifest or {}).get('overlay_files', []))} modules){note}")
    return 0


def cmd_revert(args) -> int:
    """Restore every file the last apply touched from the pristine wheel and remove our
    modules and the manifest. Idempotent; refuses (changing nothing) if someone else changed
    one of those files."""
    upstream = open_upstream(args)
    pkg = installed_package(args, upstream)
    manifest = read_manifest(pkg)
    if manifest is None and (pkg / MANIFEST_NAME).is_file():
        raise PatchesError(f"{pkg / MANIFEST_NAME} is unreadable: cannot tell which files to restore")
    _, touched, _ = load_series(args, upstream)
    rels = [*recorded_files(manifest), *touched]
    states = file_states(pkg, upstream, manifest, rels)
    refuse_foreign_edits(pkg, states, "reverting")
    modes = {r: upstream.mode(r) for r in upstream.files()}
    changed = _set_files(pkg, {rel: (upstream.read(rel) if upstream.has(rel) else None)
                               for rel in states}, modes)
    if (pkg / MANIFEST_NAME).exists():
        (pkg / MANIFEST_NAME).unlink()
        changed += 1
    log(f"revert: {pkg}: " + (f"{changed} file(s) restored or removed; pristine sglang {SGLANG_VERSION}"
                             if changed else f"already pristine sglang {SGLANG_VERSION}"))
    return 0


def _norm_rel(path: str) -> str:
    p = path.strip().lstrip("/")
    for prefix in ("python/", "sglang/"):
        if p.startswith(prefix):
            p = p[len(prefix):]
    return p


def cmd_worktree(args) -> int:
    upstream = open_upstream(args)
    patches = read_series(Path(args.patches_dir))
    wt = Path(args.dir).resolve()
    if wt.exists() and (not wt.is_dir() or any(wt.iterdir())):
        raise PatchesError(f"{wt} exists and is not empty")
    if args.all:
        files = upstream.files()
    else:
        files = []
        for p in patches:
            files += [r for r in patch_files(p) if r not in files and upstream.has(r)]
        for w in args.with_files or []:
            rel = _norm_rel(w)
            if not upstream.has(rel):
                raise PatchesError(f"--with {w}: not a file of pristine sglang {SGLANG_VERSION}")
            if rel not in files:
                files.append(rel)
    wt.mkdir(parents=True, exist_ok=True)
    git(wt, "init", "-q")
    git(wt, "symbolic-ref", "HEAD", "refs/heads/main")
    for rel in files:
        _write(wt / UPSTREAM_PREFIX / rel, upstream.read(rel), upstream.mode(rel))
    if files:
        git(wt, "add", "--", "python")
    git(wt, "commit", "-q", "--allow-empty", "-m", BASE_MESSAGE, ident=True)
    git(wt, "tag", BASE_TAG)
    for p in patches:
        r = git(wt, "am", "-q", "--whitespace=nowarn", str(p.resolve()), check=False)
        if r.returncode != 0:
            raise PatchesError(
                f"patch {p.name} does not apply in {wt} (git am):\n{(r.stdout + r.stderr).rstrip()}\n"
                f"the worktree is left mid-am for inspection (cd {wt}; git am --show-current-patch)"
            )
    log(
        f"worktree: {wt}: {BASE_MESSAGE} ({len(files)} pristine file(s), tag {BASE_TAG}) "
        f"+ {len(patches)} patch commit(s)"
    )
    log(
        f"  edit python/sglang/... there, `git commit --amend` / `git rebase -i {BASE_TAG}` / `git commit` "
        f"(new patch), then: {Path(sys.argv[0]).as_posix()} refresh {wt}"
    )
    return 0


def cmd_refresh(args) -> int:
    wt = Path(args.dir).resolve()
    patches_dir = Path(args.patches_dir)
    if not (wt / ".git").exists():
        raise PatchesError(f"{wt} is not a git worktree made by `patches.py worktree`")
    if git(wt, "rev-parse", "-q", "--verify", f"refs/tags/{BASE_TAG}", check=False).returncode != 0:
        raise PatchesError(f"{wt} has no tag {BASE_TAG}; make it with `patches.py worktree`")
    gitdir = Path(git(wt, "rev-parse", "--absolute-git-dir").stdout.strip())
    for busy in ("rebase-apply", "rebase-merge", "MERGE_HEAD", "CHERRY_PICK_HEAD"):
        if (gitdir / busy).exists():
            raise PatchesError(f"{wt}: a git am/rebase/merge is in progress; finish or abort it first")
    dirty = git(wt, "status", "--porcelain").stdout.rstrip()
    if dirty:
        raise PatchesError(f"{wt} has uncommitted changes; commit (or --amend) them first:\n{dirty}")
    if git(wt, "merge-base", "--is-ancestor", BASE_TAG, "HEAD", check=False).returncode != 0:
        raise PatchesError(f"HEAD of {wt} does not descend from {BASE_TAG}")
    rng = f"{BASE_TAG}..HEAD"
    if git(wt, "rev-list", "--merges", rng).stdout.strip():
        raise PatchesError(f"{wt}: merge commits in {rng}; keep the history linear")
    for c in git(wt, "rev-list", "--reverse", rng).stdout.split():
        names = git(wt, "diff-tree", "--no-commit-id", "--name-only", "-r", c).stdout.split()
        if not names:
            raise PatchesError(f"{wt}: commit {c[:12]} changes nothing; drop it")
        bad = [n for n in names if not n.startswith(UPSTREAM_PREFIX)]
        if bad:
            raise PatchesError(f"{wt}: commit {c[:12]} touches files outside {UPSTREAM_PREFIX}: {bad}")

    with tempfile.TemporaryDirectory(prefix="patches-refresh-") as tmp:
        out = Path(tmp)
        git(
            wt, "-c", "core.abbrev=12", "-c", "diff.noprefix=false", "-c", "diff.mnemonicPrefix=false",
            "format-patch", "--quiet", "--zero-commit", "--no-signature", "--no-numbered",
            "--no-thread", "--no-renames", "--no-binary", "--stat=72", "-o", str(out), rng,
        )
        generated = sorted(out.glob("*.patch"))
        new: Dict[str, bytes] = {}
        for f in generated:
            name = _patch_name(f.name)
            if name in new:
                raise PatchesError(f"two patches map to the file name {name}")
            new[name] = f.read_bytes()

    patches_dir.mkdir(parents=True, exist_ok=True)
    old = read_series(patches_dir) if (patches_dir / "series").is_file() else []
    changed = 0
    for p in old:
        if p.name not in new:
            p.unlink()
            changed += 1
    for name, data in new.items():
        path = patches_dir / name
        if not path.is_file() or path.read_bytes() != data:
            path.write_bytes(data)
            changed += 1
    series_text = SERIES_HEADER + "".join(f"{n}\n" for n in new)
    series = patches_dir / "series"
    if not series.is_file() or series.read_text() != series_text:
        series.write_text(series_text)
    strays = sorted(p.name for p in patches_dir.glob("*.patch") if p.name not in new)
    if strays:
        warn(f"patch files in {patches_dir} that the series does not list: {', '.join(strays)}")
    log(f"refresh: {len(new)} patch(es) in {patches_dir} from {wt} ({changed} file(s) written or removed)")
    return cmd_check(args)


# --------------------------------------------------------------------------------------------


def _add_site_packages_option(p: argparse.ArgumentParser) -> None:
    """``--site-packages DIR``: the installed sglang a subcommand works on."""
    p.add_argument(
        "--site-packages", metavar="DIR",
        help="directory that contains the installed 'sglang' package "
        "(default: the one the running interpreter imports)",
    )


def _add_location_options(ap: argparse.ArgumentParser) -> None:
    """The options every subcommand shares: the target release, where the series, our modules
    and the wheel live."""
    ap.add_argument(
        "--target", default=SGLANG_VERSION, choices=[SGLANG_VERSION, "0.5.23"],
        help="the release whose series to work on (default: %(default)s); 0.5.23 is upstream "
        "main's islands series, patches-main/series (fetch, check, apply, status, revert, "
        "export)",
    )
    ap.add_argument(
        "--patches-dir", default=str(DEFAULT_PATCHES), metavar="DIR",
        help="directory holding 'series' and the *.patch files (default: %(default)s)",
    )
    ap.add_argument(
        "--overlay-dir", default=str(DEFAULT_OVERLAY), metavar="DIR",
        help="our own modules, laid out like the sglang package (default: %(default)s)",
    )
    ap.add_argument(
        "--cache-dir", default=str(DEFAULT_CACHE), metavar="DIR",
        help="where the pristine wheel is kept (default: %(default)s); "
        "env SWA_ISLANDS_WHEEL=FILE uses that wheel instead",
    )


def _add_fetch_parser(sub) -> None:
    p = sub.add_parser("fetch", help="download the pristine wheel into the cache if missing; print its path")
    p.set_defaults(func=cmd_fetch)


def _add_check_parser(sub) -> None:
    p = sub.add_parser(
        "check",
        help="check that every patch of the series applies cleanly, in order, to pristine files",
        description="Apply the series to pristine copies of the touched files in a temporary "
        "directory. Exits 1 naming the first patch that does not apply, with its rejected hunks.",
    )
    p.set_defaults(func=cmd_check)


def _add_apply_parser(sub) -> None:
    p = sub.add_parser(
        "apply",
        help="build the patched engine in an installed sglang package",
        description="Restore every file a patch touches (and every file a previous apply "
        f"recorded in sglang/{MANIFEST_NAME}) from pristine, apply the series, and copy our own "
        "modules over the package. Idempotent. If a patch does not apply, the touched files "
        "are left pristine and the exit status is 1.",
    )
    _add_site_packages_option(p)
    p.set_defaults(func=cmd_apply)


def _add_status_parser(sub) -> None:
    p = sub.add_parser(
        "status",
        help="say whether an installed sglang is pristine, patched (and by "
        "which series) or changed by someone else, file by file",
        description="Compare every file the series or the last apply touches with the pristine "
        f"wheel and with what apply recorded in sglang/{MANIFEST_NAME}. Exit 0 (pristine or "
        "patched), 3 (a file changed by someone else), 1 (not sglang " + SGLANG_VERSION + ").",
    )
    _add_site_packages_option(p)
    p.set_defaults(func=cmd_status)


def _add_revert_parser(sub) -> None:
    p = sub.add_parser(
        "revert",
        help="restore an installed sglang to the pristine release (our patches and modules out)",
        description="Restore every file the last apply touched from the pristine wheel, remove "
        f"our modules and sglang/{MANIFEST_NAME}. Idempotent. Refuses, changing nothing, when the "
        f"installed sglang is not {SGLANG_VERSION} or when someone else changed one of those "
        "files (named in the message).",
    )
    _add_site_packages_option(p)
    p.set_defaults(func=cmd_revert)


def _add_worktree_parser(sub) -> None:
    p = sub.add_parser(
        "worktree",
        help="make a git repo with pristine files + one commit per patch, for editing patches",
        description=f"Create a git repository in DIR: the pristine files the series touches "
        f"committed as '{BASE_MESSAGE}' (tag {BASE_TAG}), then each patch applied with git am "
        "as its own commit. Edit, amend or add commits there, then run `refresh DIR`.",
    )
    p.add_argument("dir", metavar="DIR", help="new (or empty) directory")
    p.add_argument("--all", action="store_true", help="commit the whole pristine sglang tree")
    p.add_argument(
        "--with", dest="with_files", action="append", metavar="PATH",
        help="also commit this pristine file (python/sglang/..., repeatable); "
        "needed to start a patch on a file no patch touches yet",
    )
    p.set_defaults(func=cmd_worktree)


def _add_refresh_parser(sub) -> None:
    p = sub.add_parser(
        "refresh",
        help="regenerate patches/*.patch and patches/series from a worktree",
        description=f"Write one patch per commit in DIR since {BASE_TAG} (git format-patch, "
        "deterministic: zero commit ids, no signature, 12-digit blob ids, names lower-cased), "
        "replace the listed patches and the series, then run check.",
    )
    p.add_argument("dir", metavar="DIR", help="a worktree made by `patches.py worktree`")
    p.set_defaults(func=cmd_refresh)


def build_parser() -> argparse.ArgumentParser:
    """The command line: the shared location options, then one subparser per COMMAND, in the
    order ``--help`` lists them."""
    ap = argparse.ArgumentParser(
        prog="scripts/patches.py",
        description=__doc__.split("\n\n", 1)[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_location_options(ap)
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="COMMAND")
    for add in (_add_fetch_parser, _add_check_parser, _add_apply_parser, _add_status_parser,
                _add_revert_parser, _add_worktree_parser, _add_refresh_parser, add_export_parser):
        add(sub)
    return ap


MAIN_TARGET = "0.5.23"


def run_main_target(args) -> int:
    """``--target 0.5.23``: the same subcommands on the 0.5.23 target's islands series
    (patches-main/series, islands_tools/patches/main_target.py; export: export.py's 0.5.23
    target). Not there yet: worktree, refresh."""
    from . import main_target as patches_main

    if args.cmd == "export":
        return args.func(args)
    if args.cmd in ("worktree", "refresh"):
        raise PatchesError(f"{args.cmd} does not support --target {MAIN_TARGET} yet "
                           "(docs/MAIN_DESIGN.md); edit patches-main/ by hand and run check")
    argv = [args.cmd]
    if args.cmd == "apply":
        argv += ["--series", "islands"]
    if getattr(args, "site_packages", None):
        argv += ["--site-packages", args.site_packages]
    return patches_main.main(argv)


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.target == MAIN_TARGET:
            return run_main_target(args)
        return args.func(args)
    except PatchesError as e:
        print(f"patches.py: error: {e}", file=sys.stderr)
        return 1

