"""`scripts/patches.py export DIR`: the series as upstream would receive it.

DIR/repo is a git repository: the pristine release (the package from the wheel, at upstream's
layout python/sglang/...) committed on `main` (tag upstream-VERSION), and one branch per series:

  fix-torch-native-swa-read  patch 0001 + a regression test          (from pristine)
  fix-dflash-swa-evictor     patch 0012 + a regression test          (from pristine)
  fix-input-ids-vocab        patch 0015 + a regression test          (from pristine)
  swa-islands                the other patches, reordered so that every commit imports only what
                             exists; each new module of ours (python/sglang/... here) enters with
                             the first patch that imports it, with the island tests; the coupled-
                             rollback warning is cut out of the registry patch into the last
                             commit. Based on fix-torch-native-swa-read (the CPU server needs it)

Each series is written with `git format-patch` into DIR/<series>/ with a `series` file, and
DIR/README.md is the cover note. Regression tests live in upstream-tests/<series>/ at their
upstream path; test/**/test_island_formulas.py is exported too. Commits carry --author (default:
`git config user.name/email` here) and the date of the repo commit that last touched what they
carry. The export checks every commit statically (``imports``) and refuses text
that names this repo's files (islands_harness, benchmarks/, scripts/, a README upstream lacks).
What each release's export carries (its fixes, the islands order, where each test enters, the
cover note's text) is defined in ``export_targets``; this module builds and writes it.

`scripts/patches.py --target 0.5.23 export DIR` writes the 0.5.23 (upstream main) series the same
way, from patches-main/series (``main_target``'s list and modules), on pristine 0.5.23:

  fix-torch-native-swa-read  patches-main 0001 + its regression test    (from pristine)
  fix-input-ids-vocab        patches-main 0002 + its regression test    (from pristine)
  fix-hicache-cpu-device     patches-main 0012 + its regression test    (from pristine)
  fix-gemma4-router-norm-native
                             patches-main 0014 + its regression test    (from pristine)
  fix-torch-native-attention-sinks
                             patches-main 0013 + its regression test    (on
                             fix-torch-native-swa-read, whose context it needs: the target's
                             ``fix_bases``; a based fix comes after its base in MAIN_FIXES)
  swa-islands                every other patch of patches-main/series, in the series' order; our
                             modules (python-main/sglang/... and the shared modules patches_main
                             installs) enter with the first patch that imports them; a test of
                             upstream-tests-main/swa-islands/ enters with the patch MAIN_TEST_ENTRY
                             names (one it does not name: with the series' last patch), a helper
                             beside the tests with the first test that imports it. Based on
                             fix-torch-native-swa-read
"""
from __future__ import annotations

import datetime
import re
import subprocess
import tempfile
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from .export_targets import (  # noqa: F401  (re-exported: the tests and the CLI read them here)
    CI_HEADER,
    FIXES,
    GUARD,
    HARNESS_TESTS,
    ISLANDS,
    ISLANDS_BASE,
    ISLANDS_ORDER,
    LEAKS,
    REGISTRY,
    REPO_TESTS,
    ROLLBACK_FROM,
    ROLLBACK_MESSAGE,
    ROLLBACK_TESTS,
    TARGET_0515,
    TARGET_MAIN,
    TARGETS,
    ExportTarget,
    cut_rollback,
    registry_message,
)
from .imports import check_commit
from .lib import (
    REPO,
    SGLANG_VERSION,
    UPSTREAM_PREFIX,
    PatchesError,
    _patch_name,
    _write,
    git,
    git_env,
    log,
    warn,
)


@dataclass
class Step:
    """One commit of an exported branch."""
    message: str
    patch: Optional[Path] = None
    files: Dict[str, bytes] = field(default_factory=dict)  # upstream path -> contents
    sources: List[Path] = field(default_factory=list)  # repo files that date the commit


def _wrap(paragraph: str, width: int = 72) -> str:
    return "\n".join(textwrap.wrap(paragraph, width, break_on_hyphens=False,
                                  break_long_words=False)) + "\n"


def slug(patch: Path) -> str:
    return re.sub(r"^\d+-", "", patch.name)[: -len(".patch")]


# --------------------------------------------------------------------------------------------
# what goes where


def patch_message(patch: Path) -> str:
    """Subject and body of a format-patch file (git mailinfo), as a commit message."""
    with tempfile.TemporaryDirectory(prefix="patches-export-msg-") as tmp:
        msg, diff = Path(tmp) / "msg", Path(tmp) / "diff"
        with open(patch, "rb") as f:
            r = subprocess.run(["git", "mailinfo", str(msg), str(diff)], stdin=f,
                               capture_output=True, env=git_env(), cwd=tmp)
        if r.returncode != 0:
            raise PatchesError(f"git mailinfo cannot read {patch.name}: {r.stderr.decode()}")
        info = r.stdout.decode()
        subject = re.search(r"^Subject: (.*)$", info, re.M).group(1).strip()
        body = msg.read_text().strip()
    return subject + "\n" + (f"\n{body}\n" if body else "")


def upstream_tests(series: str, target: Optional[ExportTarget] = None) -> Dict[str, Path]:
    """upstream-tests/<series>/** (the target's directory): {upstream path: source}."""
    root = (target or TARGET_0515).upstream_tests / series
    if not root.is_dir():
        return {}
    return {p.relative_to(root).as_posix(): p for p in sorted(root.rglob("*"))
            if p.is_file() and "__pycache__" not in p.parts and not p.name.endswith(".pyc")}


def repo_test(name: str) -> Path:
    found = sorted(p for p in (REPO / "test").rglob(name) if "__pycache__" not in p.parts)
    if len(found) != 1:
        raise PatchesError(f"need exactly one test/**/{name} to export, found {len(found)}")
    return found[0]


def with_ci_header(src: str) -> str:
    """Our pytest file with upstream's CI registration after its module docstring."""
    tree_doc = re.match(r'(""".*?"""\n)', src, re.S)
    if not tree_doc:
        raise PatchesError("an exported test needs a module docstring (the header goes after it)")
    return tree_doc.group(1) + CI_HEADER + src[tree_doc.end():]


def module_entries(steps: List[Tuple[str, Path]], overlay: Dict[str, Path]) -> Dict[str, List[str]]:
    """{patch slug: our modules (package-relative) that enter with it}: a module enters with the
    first patch whose added lines import it, with the modules it imports in turn."""
    dotted = {rel: "sglang." + rel[: -len(".py")].replace("/", ".").removesuffix(".__init__")
              for rel in overlay if rel.endswith(".py")}
    other = sorted(set(overlay) - set(dotted))
    if other:
        raise PatchesError(f"the export places only Python modules of ours; found {other}")

    def imported_by(text: str) -> List[str]:
        return [rel for rel, mod in dotted.items()
                if re.search(rf"\b(from|import)\s+{re.escape(mod)}\b", text)]

    entries: Dict[str, List[str]] = {}
    placed: set = set()
    for name, patch in steps:
        added = "\n".join(l[1:] for l in patch.read_text().splitlines() if l.startswith("+"))
        todo = [rel for rel in imported_by(added) if rel not in placed]
        while todo:
            rel = todo.pop(0)
            if rel in placed:
                continue
            placed.add(rel)
            entries.setdefault(name, []).append(rel)
            todo += [r for r in imported_by(overlay[rel].read_text()) if r not in placed]
    missing = sorted(set(dotted) - placed)
    if missing:
        raise PatchesError(f"no patch of the islands series imports {missing}; cannot place them")
    return entries


def islands_order(patches: List[Path], target: ExportTarget) -> List[str]:
    """Slugs of the islands commits, in order."""
    if target.islands_order is not None:
        return list(target.islands_order)
    return [slug(p) for p in patches if slug(p) not in target.fixes.values()]


def island_test_entries(order: List[str], tests: Dict[str, bytes],
                        target: ExportTarget) -> Dict[str, str]:
    """{upstream test path: slug of the islands commit it enters with}, from the target's
    ``test_entry``: a test it does not name enters with the last commit, a helper module beside
    the tests (not ``test_*``) with the earliest test that imports it (the last commit if none)."""
    named = target.test_entry or {}
    stale = sorted(t for t in named if t not in tests)
    unknown = sorted({n for n in named.values() if n not in order})
    if stale or unknown:
        raise PatchesError(
            "islands_tools/patches/export_targets.py places an island test that does not exist or with a patch "
            f"the islands series lacks (test_entry): tests {stale}, patches {unknown}")
    at = {t: named.get(t, order[-1]) for t in tests if Path(t).name.startswith("test_")}
    for t in sorted(set(tests) - set(at)):
        mod = Path(t).stem
        users = [at[u] for u in at
                 if re.search(rf"^\s*(from|import)\s+{re.escape(mod)}\b", tests[u].decode(), re.M)]
        at[t] = min(users, key=order.index) if users else order[-1]
    return at


def plan(patches: List[Path], overlay: Dict[str, Path],
         target: Optional[ExportTarget] = None) -> Dict[str, List[Step]]:
    """{series: its commits}, fixes first; the islands' registry step is split later (0.5.15)."""
    target = target or TARGET_0515
    by_slug = {slug(p): p for p in patches}
    order = islands_order(patches, target)
    placed = list(target.fixes.values()) + order
    unplaced = sorted(set(by_slug) - set(placed))
    if unplaced or len(set(placed)) != len(placed) or set(placed) - set(by_slug):
        raise PatchesError(
            "islands_tools/patches/export_targets.py places every patch of the series once (the target's "
            f"fixes and islands order: FIXES, ISLANDS_ORDER); not placed: {unplaced}, "
            f"placed but not in the series: {sorted(set(placed) - set(by_slug))}")
    out: Dict[str, List[Step]] = {}
    for series, name in target.fixes.items():
        tests = upstream_tests(series, target)
        if not tests:
            raise PatchesError(f"no regression test in {target.upstream_tests / series}")
        msg = patch_message(by_slug[name]) + "\n" + _wrap(
            "Regression test: " + ", ".join(tests) + " (CPU).")
        out[series] = [Step(msg, by_slug[name], {t: s.read_bytes() for t, s in tests.items()},
                            [by_slug[name], *tests.values()])]
    entries = module_entries([(n, by_slug[n]) for n in order], overlay)
    sources = {t: s for t, s in upstream_tests(ISLANDS, target).items() if t not in ROLLBACK_TESTS}
    tests = {t: s.read_bytes() for t, s in sources.items()}
    for ours, t in REPO_TESTS.items():
        sources[t] = repo_test(ours)
        tests[t] = with_ci_header(sources[t].read_text()).encode()
    if target.test_entry is None:  # every test with the first commit that adds a module
        first = next(n for n in order if n in entries)
        enters = {t: first for t in tests}
    else:
        enters = island_test_entries(order, tests, target)
    steps = []
    for name in order:
        step = Step(patch_message(by_slug[name]), by_slug[name], sources=[by_slug[name]])
        for rel in entries.get(name, []):
            step.files[UPSTREAM_PREFIX + rel] = overlay[rel].read_bytes()
            step.sources.append(overlay[rel])
        for t in tests:
            if enters[t] == name:
                step.files[t] = tests[t]
                step.sources.append(sources[t])
        if step.files:
            step.message += "\n" + _wrap("New files: " + ", ".join(step.files) + ".")
        steps.append(step)
    out[ISLANDS] = steps
    return out


# --------------------------------------------------------------------------------------------
# the repository


def resolve_author(arg: Optional[str]) -> Tuple[str, str]:
    """--author "Name <mail>", else this repo's `git config user.name/email`."""
    if not arg:
        def cfg(key: str) -> str:
            r = subprocess.run(["git", "config", key], cwd=REPO, capture_output=True, text=True)
            return r.stdout.strip()
        arg = f"{cfg('user.name')} <{cfg('user.email')}>"
    m = re.fullmatch(r"\s*([^<>]*?)\s*<([^<>\s]+@[^<>\s]+)>\s*", arg)
    if not m or not m.group(1):
        raise PatchesError(f"author {arg!r} is not 'Name <mail>'; pass --author \"Name <mail>\"")
    name, email = m.groups()
    if re.search(r"\.(example|invalid|test|localhost)$", email, re.I):
        warn(f"author {name} <{email}> looks like a placeholder (reserved domain); "
             "pass --author \"Name <mail>\" for a series to send")
    return name, email


def date_of(sources: List[Path]) -> str:
    """Date of the repo commit that last touched any of sources (now if none did)."""
    rels = [str(p.relative_to(REPO)) for p in sources]
    r = git(REPO, "log", "-1", "--format=%aI", "--", *rels, check=False)
    return r.stdout.strip() or datetime.datetime.now(datetime.timezone.utc).isoformat()


def run_git(repo: Path, *args: str, ident=None, date=None, stdin=None) -> str:
    env = git_env(ident=True)
    if ident:
        env.update(GIT_AUTHOR_NAME=ident[0], GIT_AUTHOR_EMAIL=ident[1], GIT_AUTHOR_DATE=date,
                   GIT_COMMITTER_NAME=ident[0], GIT_COMMITTER_EMAIL=ident[1],
                   GIT_COMMITTER_DATE=date)
    r = subprocess.run(["git", *args], cwd=repo, env=env, input=stdin, capture_output=True,
                       text=True)
    if r.returncode != 0:
        raise PatchesError(f"git {' '.join(args)} failed in {repo}:\n{(r.stdout + r.stderr).strip()}")
    return r.stdout


def init_pristine(repo: Path, upstream, target: Optional[ExportTarget] = None) -> None:
    target = target or TARGET_0515
    repo.mkdir(parents=True)
    run_git(repo, "init", "-q")
    run_git(repo, "symbolic-ref", "HEAD", "refs/heads/main")
    for rel in upstream.files():
        _write(repo / UPSTREAM_PREFIX / rel, upstream.read(rel), upstream.mode(rel))
    run_git(repo, "add", "-A")
    run_git(repo, "commit", "-q", "-m", target.base_message)
    run_git(repo, "tag", target.base_tag)


def commit_step(repo: Path, step: Step, ident, message: Optional[str] = None) -> None:
    if step.patch is not None:
        run_git(repo, "apply", "--index", "--whitespace=nowarn", str(step.patch.resolve()))
    for path, data in step.files.items():
        _write(repo / path, data, 0o644)
    run_git(repo, "add", "-A")
    run_git(repo, "commit", "-q", "--no-verify", "-F", "-", ident=ident,
            date=date_of(step.sources), stdin=message or step.message)


def build_islands(repo: Path, steps: List[Step], ident,
                  target: Optional[ExportTarget] = None) -> None:
    """The islands branch; with ``rollback_cut`` (0.5.15) the registry step is committed without
    the rollback warning, which becomes the branch's last commit."""
    target = target or TARGET_0515
    run_git(repo, "checkout", "-q", "-b", ISLANDS, target.islands_base)
    rollback = None
    for step in steps:
        if not target.rollback_cut or slug(step.patch) != ROLLBACK_FROM:
            commit_step(repo, step, ident)
            continue
        run_git(repo, "apply", "--index", "--whitespace=nowarn", str(step.patch.resolve()))
        for path, data in step.files.items():
            _write(repo / path, data, 0o644)
        full = cut_rollback(repo)
        commit_step(repo, Step(step.message, None, {}, step.sources), ident,
                    registry_message(step.message))
        tests = {t: s for t, s in upstream_tests(ISLANDS).items() if t in ROLLBACK_TESTS}
        files = {p: t.encode() for p, t in full.items()}
        files.update({t: s.read_bytes() for t, s in tests.items()})
        msg = ROLLBACK_MESSAGE + "\n" + _wrap("Regression test: " + ", ".join(tests) + " (CPU).")
        guard_src = REPO / "python" / GUARD[len("python/"):]
        rollback = Step(msg, None, files, [step.patch, guard_src, *tests.values()])
    if not target.rollback_cut:
        return
    if rollback is None:
        raise PatchesError(f"no islands patch {ROLLBACK_FROM} to cut the rollback warning from")
    commit_step(repo, rollback, ident)


def build_repo(repo: Path, upstream, steps: Dict[str, List[Step]], ident,
               target: Optional[ExportTarget] = None) -> None:
    target = target or TARGET_0515
    init_pristine(repo, upstream, target)
    built = {"main"}
    for series in target.fixes:
        base = target.base_of(series)
        if base not in built:
            raise PatchesError(f"{series} is based on {base}, which must come before it in the "
                               "target's fixes (a fix series, built in order)")
        run_git(repo, "checkout", "-q", "-b", series, base)
        built.add(series)
        for step in steps[series]:
            commit_step(repo, step, ident)
    build_islands(repo, steps[ISLANDS], ident, target)
    run_git(repo, "checkout", "-q", "main")


def series_base(series: str, target: Optional[ExportTarget] = None) -> str:
    return (target or TARGET_0515).base_of(series)


def check_branches(repo: Path, target: Optional[ExportTarget] = None) -> int:
    """Static check of every commit of every exported branch; returns the number checked."""
    target = target or TARGET_0515
    problems, n = [], 0
    for series in [*target.fixes, ISLANDS]:
        rng = f"{series_base(series, target)}..{series}"
        for c in run_git(repo, "rev-list", "--reverse", rng).split():
            n += 1
            subject = run_git(repo, "log", "-1", "--format=%s", c).strip()
            problems += [f"{series} '{subject}': {p}" for p in check_commit(repo, c, git_env())]
    if problems:
        raise PatchesError("exported commits that would not import:\n  " + "\n  ".join(problems))
    return n


# --------------------------------------------------------------------------------------------
# the series


def leaks(text: str) -> List[str]:
    """Lines of a patch (message or added code) that name files of this repo."""
    head, _, diff = text.partition("\n---\n")
    lines = head.splitlines() + [l for l in diff.splitlines()
                                 if l.startswith("+") and not l.startswith("+++")]
    return [l for l in lines if LEAKS.search(l)]


def write_series(repo: Path, out: Path, series: str,
                 target: Optional[ExportTarget] = None) -> List[str]:
    target = target or TARGET_0515
    dest = out / series
    with tempfile.TemporaryDirectory(prefix="patches-export-fp-") as tmp:
        run_git(repo, "-c", "core.abbrev=12", "-c", "diff.noprefix=false",
                "-c", "diff.mnemonicPrefix=false", "format-patch", "--quiet", "--zero-commit",
                "--no-signature", "--no-thread", "--no-renames", "--no-binary", "--stat=72",
                "-o", tmp, f"{series_base(series, target)}..{series}")
        dest.mkdir(parents=True)
        names, bad = [], []
        for f in sorted(Path(tmp).glob("*.patch")):
            name = _patch_name(f.name)
            text = f.read_text()
            bad += [f"{series}/{name}: {l.strip()}" for l in leaks(text)]
            (dest / name).write_text(text)
            names.append(name)
    if bad:
        raise PatchesError("exported text names files of this repo that upstream lacks:\n  "
                           + "\n  ".join(bad))
    base = target.base_text(series)
    (dest / "series").write_text(
        f"# {series}: {len(names)} patch(es) on {base}, in this order (git am).\n"
        "# Written by `scripts/patches.py export`; see ../README.md.\n"
        + "".join(f"{n}\n" for n in names))
    return names


def _commits(repo: Path, series: str, target: ExportTarget) -> List[str]:
    return run_git(repo, "rev-list", "--reverse",
                   f"{series_base(series, target)}..{series}").split()


def _tests_added(repo: Path, rng: str) -> List[str]:
    out = run_git(repo, "diff", "--name-only", "--diff-filter=A", rng, "--", "test")
    return [t for t in out.split() if Path(t).name.startswith("test_")]


def cover_note(repo: Path, entries: Dict[str, List[str]], names: Dict[str, List[str]],
               target: Optional[ExportTarget] = None) -> str:
    target = target or TARGET_0515
    lines = [
        f"# SWA islands for sglang {target.version}: the series for upstream", "",
        f"Written by `scripts/patches.py export`. `repo/` holds pristine sglang {target.version} "
        "(the package of the release wheel at `python/sglang/`, branch `main`, tag "
        f"`{target.base_tag}`) and one branch per series; each directory below holds that branch "
        "as `git format-patch` files and a `series` file, applied with `git am` in that order. "
        "The files under `python/sglang/` are the wheel's; whether upstream's release tag has "
        "the same ones was not checked here.", "",
        "## Series", "",
    ]
    for series in [*target.fixes, ISLANDS]:
        base = (f"`{target.base_of(series)}`" if target.base_of(series) != "main"
                else "pristine")
        lines.append(f"### `{series}/` (on {base}; {len(names[series])} patch(es))")
        lines.append("")
        for i, c in enumerate(_commits(repo, series, target), 1):
            subject = run_git(repo, "log", "-1", "--format=%s", c).strip()
            added = _tests_added(repo, f"{c}^..{c}") if target.test_entry is not None else []
            lines.append(f"{i}. {subject}" + (" (tests: " + ", ".join(
                f"`{Path(t).name}`" for t in added) + ")" if added else ""))
        lines.append("")
        tests = _tests_added(repo, f"{series_base(series, target)}..{series}")
        lines.append("Tests: " + ", ".join(f"`{t}`" for t in tests) + ".")
        lines.append("")
    lines += ["## Order and dependencies", "", target.fixes_note, target.order_note]
    lines += [f"  - {p}: " + ", ".join(f"`python/sglang/{m}`" for m in mods)
              for p, mods in entries.items()]
    lines += [
        *target.order_notes,
        "- No help text or message names a file upstream lacks (the export refuses such text).",
        "",
        "## Running the tests", "",
        target.running_note, "",
        *target.test_notes,
    ]
    if target.harness_tests:
        lines.append(
            "- Not exported: our other engine tests on the real stack need our harness (a "
            "model-free copy of the scheduler loop, the stack builder and tree invariants): "
            + ", ".join(f"`{t}`" for t in target.harness_tests) + ".")
    lines.append("")
    out = []
    for line in lines:
        indent = re.match(r"(\s*(?:- |\d+\. )?)", line).group(1)
        out.append(textwrap.fill(line, 100, subsequent_indent=" " * len(indent),
                                 break_on_hyphens=False, break_long_words=False)
                   if not line.startswith("#") else line)
    return "\n".join(out)


def cmd_export(args) -> int:
    target = TARGETS[getattr(args, "target", None) or SGLANG_VERSION]
    out = Path(args.dir).resolve()
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise PatchesError(f"{out} exists and is not empty")
    upstream, patches, overlay = target.load(args)
    ident = resolve_author(args.author)
    steps = plan(patches, overlay, target)
    sources = sorted({str(s.relative_to(REPO)) for st in steps.values() for s_ in st
                      for s in s_.sources})
    dirty = git(REPO, "status", "--porcelain", "--", *sources, check=False).stdout.rstrip()
    if dirty:
        warn(f"uncommitted changes in what the export reads (dated by the last commit):\n{dirty}")
    by_slug = {slug(p): p for p in patches}
    order = islands_order(patches, target)
    entries = module_entries([(n, by_slug[n]) for n in order], overlay)
    repo = out / "repo"
    build_repo(repo, upstream, steps, ident, target)
    checked = check_branches(repo, target)
    names = {s: write_series(repo, out, s, target) for s in [*target.fixes, ISLANDS]}
    (out / "README.md").write_text(cover_note(
        repo, {patch_message(by_slug[n]).split("\n", 1)[0]: m for n, m in entries.items()},
        names, target))
    for s, n in names.items():
        log(f"export: {out / s}: {len(n)} patch(es)")
    log(f"export: sglang {target.version}: {checked} commit(s) compile and import only what "
        f"exists; author {ident[0]} <{ident[1]}>; cover note {out / 'README.md'}; git repo {repo}")
    return 0


def add_export_parser(sub) -> None:
    p = sub.add_parser(
        "export",
        help="write the upstream-ready series (fixes apart, new modules in, tests) into DIR",
        description=__doc__.split("\n\n", 1)[1],
        formatter_class=__import__("argparse").RawDescriptionHelpFormatter,
    )
    p.add_argument("dir", metavar="DIR", help="new (or empty) directory")
    p.add_argument("--author", metavar='"NAME <MAIL>"',
                   help="author and committer of the exported commits "
                   "(default: git config user.name/email of this repo)")
    p.set_defaults(func=cmd_export)
