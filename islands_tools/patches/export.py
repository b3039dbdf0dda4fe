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
from typing import Callable, Dict, List, Optional, Tuple

from .imports import check_commit
from .lib import (
    REPO,
    SGLANG_VERSION,
    UPSTREAM_PREFIX,
    PatchesError,
    Upstream,
    _patch_name,
    _write,
    git,
    git_env,
    load_series,
    log,
    open_upstream,
    warn,
)

UPSTREAM_TESTS = REPO / "upstream-tests"
ISLANDS = "swa-islands"
FIXES = {  # series name -> the patch it carries (its name without number and .patch)
    "fix-torch-native-swa-read": "torch-native-translate-swa-kv-reads",
    "fix-dflash-swa-evictor": "dflash-run-the-swa-decode-evictor-like-the-eagle-pat",
    "fix-input-ids-vocab": "tokenizer-manager-refuse-input-ids-outside-the-vocab",
}
ISLANDS_BASE = "fix-torch-native-swa-read"
# The island commits, in order: the named upstream steps and hooks first, then the flags, their
# plumbing and the registry that builds the cache (so the cache enters after every hook it
# overrides and every name it imports, e.g. SWAHoldStats from the metrics hook), then the rest.
ISLANDS_ORDER = [
    "swa-radix-cache-name-the-commit-step-let-the-caller-",
    "swa-radix-cache-one-walk-over-a-request-s-swa-lock-r",
    "swa-radix-cache-name-the-swa-eviction-steps",
    "allocator-free-the-swa-kv-of-whole-live-pages-withou",
    "scheduler-tell-the-tree-cache-about-decode-progress",
    "metrics-report-the-swa-hold-of-running-requests-thro",
    "admission-keep-the-swa-a-tree-cache-reserves-for-the",
    "scheduler-tell-the-tree-cache-a-request-joined-the-w",
    "admission-lock-a-prefix-match-through-the-tree-cache",
    "server-args-enable-swa-islands-swa-islands-decode-in",
    "cache-params-pass-the-overlap-schedule-and-the-swa-i",
    "registry-build-swaislandradixcache-under-enable-swa-",
    "kv-canary-walk-subclasses-of-swaradixcache-like-swar",
]
ROLLBACK_FROM = "registry-build-swaislandradixcache-under-enable-swa-"
ROLLBACK_TESTS = {"test/registered/unit/mem_cache/test_swa_ratio_rollback_warning.py"}
# Our engine tests copied to upstream's layout (they import nothing of our harness).
REPO_TESTS = {"test_island_formulas.py": "test/registered/unit/mem_cache/test_swa_island_formulas.py"}
# Our engine tests on the real stack that need islands_harness (sim, stack, invariants): listed
# in the cover note, not exported.
HARNESS_TESTS = ["test_chunk_islands.py", "test_decode_islands.py", "test_queued_hits.py",
                 "test_prefix_reuse.py", "test_match_lock.py", "test_admission_reserve.py",
                 "test_guard.py", "test_island_metrics.py"]
CI_HEADER = ('\nfrom sglang.test.ci.ci_register import register_cpu_ci\n\n'
             'register_cpu_ci(est_time=5, suite="base-a-test-cpu")\n')
# Text of ours that must not reach upstream: our files and paths upstream does not have.
LEAKS = re.compile(r"islands_harness|islands_tools|\bbenchmarks/|\bscripts/|\bpatches/|"
                   r"\bpatches-main/|\bupstream-tests(?:-main)?/|"
                   r"docs/PR\.md|\bREADME\b|\btest/(?:engine/|server/|tools/)?test_\w+")
TEST_ENV = "SGLANG_USE_CPU_ENGINE=1 TRITON_INTERPRET=1"

REGISTRY = UPSTREAM_PREFIX + "srt/mem_cache/registry.py"
GUARD = UPSTREAM_PREFIX + "srt/mem_cache/swa_island_guard.py"
REGISTRY_CHECKS = """\
    from sglang.srt.mem_cache.swa_island_guard import (
        check_swa_islands_cache,
        check_swa_pool_plan,
    )

    if ctx.server_args.enable_swa_islands:
        check_swa_islands_cache(cache, ctx.is_hybrid_swa)
    check_swa_pool_plan(cache, ctx.server_args)
"""
REGISTRY_CHECKS_ISLANDS_ONLY = """\
    if ctx.server_args.enable_swa_islands:
        from sglang.srt.mem_cache.swa_island_guard import (
            check_swa_islands_cache,
            check_swa_pool_plan,
        )

        check_swa_islands_cache(cache, ctx.is_hybrid_swa)
        check_swa_pool_plan(cache, ctx.server_args)
"""
GUARD_ROLLBACK_DOC = """\
    - Islands off on ``SWARadixCache`` with a ratio below 0.8: a pool that binds admission below
      the request pool's size (``admission_bind`` at ``hold_without_islands``), a warning. The
      ratio was lowered for islands and must move back with them.
"""
REGISTRY_POOL_PARAGRAPH = "It also checks the SWA pool"
REGISTRY_POOL_ISLANDS_ONLY = (
    "With islands it also checks the SWA pool against the island pool formulas "
    "(swa_island_guard): a pool below one request's island floor (one chunk + window + page) "
    "is an error and one below the floor of the request pool's concurrency a warning.")
ROLLBACK_MESSAGE = """\
registry: warn when a lowered SWA ratio binds SWARadixCache admission

Without --enable-swa-islands, on SWARadixCache with --swa-full-tokens-ratio
below upstream's default of 0.8, create_tree_cache now logs a warning when the
SWA pool binds admission below the request pool: each running request holds
about one prefill chunk of SWA KV there (admission_bind at
hold_without_islands), and the warning names a ratio that removes the bind.

This is the coupled rollback of islands: a ratio lowered for islands must move
back when the flag is dropped. It changes what stock SWARadixCache deployments
log (nothing else), so it is a commit of its own.
"""


@dataclass
class Step:
    """One commit of an exported branch."""
    message: str
    patch: Optional[Path] = None
    files: Dict[str, bytes] = field(default_factory=dict)  # upstream path -> contents
    sources: List[Path] = field(default_factory=list)  # repo files that date the commit


@dataclass(frozen=True)
class ExportTarget:
    """What the export of one release's series needs to know about it."""
    version: str  # the pinned release the series applies to
    upstream_tests: Path  # <series>/<upstream path>: the regression tests of each series
    fixes: Dict[str, str]  # stand-alone series name -> the slug of the patch it carries
    islands_base: str  # the fix series the islands series is based on
    # islands commits in order (slugs); None: the series' own order without the fixes
    islands_order: Optional[List[str]]
    # upstream test path -> the slug of the islands commit it enters with (unnamed tests: the
    # last commit); None: every island test enters with the first commit that adds a module
    test_entry: Optional[Dict[str, str]]
    rollback_cut: bool  # cut the coupled-rollback warning out of the registry commit
    harness_tests: List[str]  # our engine tests that are not exported (cover note)
    test_env: str  # the environment the exported tests run with on CPU
    # the cover note: how the fixes relate to islands, the islands order (before the list of
    # module entries), the bullets after that list, how to run the tests, what they do
    fixes_note: str
    order_note: str
    order_notes: List[str]
    running_note: str
    test_notes: List[str]
    # (args) -> (pristine upstream, the series' patches, {package path: our module's source})
    load: Callable[..., Tuple[Upstream, List[Path], Dict[str, Path]]]
    # stand-alone series -> the fix series it is based on (a fix not named: on pristine); the
    # base must come earlier in ``fixes``, whose branches are built in order
    fix_bases: Dict[str, str] = field(default_factory=dict)

    def base_of(self, series: str) -> str:
        """The branch a series is based on: ``main`` (pristine) or a fix series."""
        if series == ISLANDS:
            return self.islands_base
        return self.fix_bases.get(series, "main")

    def base_chain(self, series: str) -> List[str]:
        """The fix series under a series, the one on pristine first."""
        chain, base = [], self.base_of(series)
        while base != "main":
            if base in chain or base not in self.fixes:
                raise PatchesError(f"the base of {series} ({base}) is not a fix series of the "
                                   "target, or the bases form a cycle")
            chain.insert(0, base)
            base = self.base_of(base)
        return chain

    def base_text(self, series: str) -> str:
        """What a series applies to, in words: 'pristine sglang==V[ + the X series ...]'."""
        return " + ".join([f"pristine sglang=={self.version}",
                           *(f"the {b} series" for b in self.base_chain(series))])

    @property
    def base_tag(self) -> str:
        return f"upstream-{self.version}"

    @property
    def base_message(self) -> str:
        return f"upstream {self.version}"


def _load_0515(args):
    upstream = open_upstream(args)
    patches, _, overlay = load_series(args, upstream)
    return upstream, patches, overlay


def _load_main(args):
    """patches-main/series and the modules ``main_target`` installs with it (ours under
    python-main/sglang/ and the shared ones, e.g. swa_island_formulas.py)."""
    from . import main_target as patches_main

    upstream = Upstream(patches_main.fetch_wheel())
    return upstream, patches_main.series("islands"), patches_main.overlay("islands", upstream)


TARGET_0515 = ExportTarget(
    version=SGLANG_VERSION,
    upstream_tests=UPSTREAM_TESTS,
    fixes=FIXES,
    islands_base=ISLANDS_BASE,
    islands_order=ISLANDS_ORDER,
    test_entry=None,
    rollback_cut=True,
    harness_tests=HARNESS_TESTS,
    test_env=TEST_ENV,
    fixes_note=(
        "- The three fixes are upstream bug fixes independent of islands, each a PR of its own "
        "with its regression test. The islands series does not contain them; it is based on "
        f"`{ISLANDS_BASE}`, without which the CPU (torch_native) server reads sliding-window KV "
        "with full-pool slot ids and crashes on any hybrid SWA model. It does not need the other "
        "two fixes."),
    order_note=(
        "- Islands order: the named `SWARadixCache` steps, the allocator method and the scheduler, "
        "metrics, admission and queue hooks first (each a no-op for existing caches), then the "
        "flags, the cache parameters and the registry that builds `SWAIslandRadixCache`. Every "
        "commit imports only what exists: our modules enter with the first patch that imports "
        "them:"),
    order_notes=[
        "- The coupled-rollback warning (without islands, a lowered `--swa-full-tokens-ratio` "
        "that binds `SWARadixCache` admission) is cut out of the registry patch into the "
        "series' last commit: it changes what stock deployments log. Before it, the pool checks "
        "run only under `--enable-swa-islands`.",
    ],
    running_note=(
        f"On a checkout with a series applied: `{TEST_ENV} python -m pytest <test files> -q` "
        "(CPU: `SGLANG_USE_CPU_ENGINE=1` as in sglang's CPU image; `TRITON_INTERPRET=1` for the "
        "page-size-16 case, whose paged allocator launches Triton kernels on CPU tensors; without "
        "it that case is skipped). No test loads weights or starts a server."),
    test_notes=[
        "- `fix-dflash-swa-evictor`: the test runs DFLASH's real `prepare_for_decode` and the "
        "real SWA evictor on a real hybrid pool and `SWARadixCache`, on CPU; no drafter runs "
        "(DFLASH end to end needs a GPU drafter and is not tested here).",
        "- `swa-islands`: `test_swa_island_formulas.py` is our formula test as it is; "
        "`test_swa_island_radix_cache.py` and `test_swa_ratio_rollback_warning.py` build the "
        "real stack with `create_tree_cache` (`swa_islands_stack.py` beside them) and drive "
        "one request's chunked prefill through `PrefillAdder` and `ScheduleBatch`.",
    ],
    load=_load_0515,
)

MAIN_VERSION = "0.5.23"
MAIN_UPSTREAM_TESTS = REPO / "upstream-tests-main"
MAIN_FIXES = {  # series name -> the patches-main patch it carries
    "fix-torch-native-swa-read": "harness-only-torch-native-translate-swa-kv-reads",
    "fix-input-ids-vocab": "tokenizer-manager-refuse-input-ids-outside-the-vocab",
    "fix-hicache-cpu-device": "harness-only-hicache-on-a-cpu-device-pool",
    "fix-gemma4-router-norm-native": "layernorm-gemma4rmsnorm-native-path-applies-a-folded-sc",
    # after its base: build_repo branches each fix from its base, in this order
    "fix-torch-native-attention-sinks": "harness-only-torch-native-attention-sinks",
}
# A fix whose patch needs another fix (the same file, overlapping context): series -> its base.
MAIN_FIX_BASES = {"fix-torch-native-attention-sinks": "fix-torch-native-swa-read"}
_MAIN_UNIT = "test/registered/unit/"
# Each island test of the 0.5.23 series enters with the patch it tests (a test not named here:
# with the series' last patch; a helper beside the tests: with the first test that imports it).
MAIN_TEST_ENTRY = {
    _MAIN_UNIT + "arg_groups/test_swa_islands_args.py":
        "server-args-enable-swa-islands-swa-islands-reclaim-s",
    _MAIN_UNIT + "mem_cache/test_swa_island_formulas.py":
        "server-args-enable-swa-islands-swa-islands-reclaim-s",
    _MAIN_UNIT + "mem_cache/test_swa_island_unified_radix_cache.py":
        "registry-build-swaislandunifiedradixcache-under-enab",
    _MAIN_UNIT + "mem_cache/test_unified_radix_cache_swa_commit.py":
        "registry-build-swaislandunifiedradixcache-under-enab",
    _MAIN_UNIT + "managers/test_decode_progress_hook.py":
        "scheduler-tell-the-tree-cache-about-decode-progress",
    _MAIN_UNIT + "mem_cache/test_swa_island_decode_islands.py":
        "scheduler-tell-the-tree-cache-about-decode-progress",
}

TARGET_MAIN = ExportTarget(
    version=MAIN_VERSION,
    upstream_tests=MAIN_UPSTREAM_TESTS,
    fixes=MAIN_FIXES,
    islands_base="fix-torch-native-swa-read",
    islands_order=None,
    test_entry=MAIN_TEST_ENTRY,
    rollback_cut=False,
    harness_tests=[],
    test_env="SGLANG_USE_CPU_ENGINE=1",
    fixes_note=(
        "- The fixes are upstream bug fixes independent of islands, each a PR of its own with "
        "its regression test. The islands series does not contain them; it is based on "
        "`fix-torch-native-swa-read`, without which the CPU (torch_native) server reads "
        "sliding-window KV with full-pool slot ids and crashes on any hybrid SWA model. It does "
        "not need the others (`fix-hicache-cpu-device` lets HiCache run on the CPU engine, "
        "`fix-gemma4-router-norm-native` makes Gemma 4 MoE route correctly on the native norm "
        "path, `fix-torch-native-attention-sinks` gives the CPU backend GPT-OSS's attention "
        "sinks). `fix-torch-native-attention-sinks` changes `torch_native_backend.py` next to "
        "`fix-torch-native-swa-read` (overlapping context) and is based on it; every other fix "
        "is based on pristine."),
    order_note=(
        "- Islands order: the flags and their resolution step first, then the cache parameters, "
        "the registry that builds `SWAIslandUnifiedRadixCache`, then the scheduler hooks the "
        "cache answers (each a no-op for every other cache). Every commit imports only what "
        "exists: our modules enter with the first patch that imports them:"),
    order_notes=[
        "- Islands live in the controller: a `UnifiedRadixCache` subclass that uses only what "
        "both tree cores already answer (`insert`/`checkpoint`, `lock`/`release_swa`, `evict`), "
        "so they run on the default Rust tree core and on the Python core alike. No "
        "`TreeComponent` subclass, no tree-core method, no change to the Rust core.",
        "- Our modules enter whole, as the series' tip has them: the island cache's "
        "`on_decode_progress` override, for instance, enters with the registry commit and is "
        "called once the scheduler hook's commit adds the call.",
        "- Each test enters with the patch it tests (listed under each series above).",
    ],
    running_note=(
        "On a checkout with a series applied: `SGLANG_USE_CPU_ENGINE=1 python -m pytest "
        "<test files> -q` (CPU, as in sglang's CPU image). No test loads weights or starts a "
        "server."),
    test_notes=[
        "- `swa-islands`: `test_swa_island_formulas.py` is our formula test as it is (the "
        "formulas are shared with the same series for 0.5.15); the `mem_cache` tests build the "
        "SWA stack themselves (`swa_islands_stack.py` beside them; the unified radix cache kit "
        "imports `sglang.test.test_utils`, which needs the benchmark extras) and run once per "
        "tree core (`python`, `rust`).",
    ],
    load=_load_main,
    fix_bases=MAIN_FIX_BASES,
)
TARGETS = {TARGET_0515.version: TARGET_0515, TARGET_MAIN.version: TARGET_MAIN}


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
            "islands_tools/patches/export.py places an island test that does not exist or with a patch "
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
            "islands_tools/patches/export.py places every patch of the series once (the target's "
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
# the rollback warning, cut out of the registry commit


def _replace_once(text: str, old: str, new: str, where: str) -> str:
    if text.count(old) != 1:
        raise PatchesError(
            f"cannot cut the rollback warning out of {where}: expected this text once, found it "
            f"{text.count(old)} times (update islands_tools/patches/export.py):\n{old}")
    return text.replace(old, new)


def guard_islands_only(text: str) -> str:
    """swa_island_guard.check_swa_pool_plan without its islands-off (rollback) branch."""
    text = _replace_once(text, "against the island floor or the admission bind.",
                         "against the island floor.", GUARD)
    text = _replace_once(text, GUARD_ROLLBACK_DOC, "", GUARD)
    text = _replace_once(text, "    from sglang.srt.mem_cache.swa_radix_cache import SWARadixCache\n",
                         "", GUARD)
    text = _replace_once(
        text, "    if kind is not SWAIslandRadixCache and kind is not SWARadixCache:\n",
        "    if kind is not SWAIslandRadixCache:\n", GUARD)
    head = "\n    if kind is SWAIslandRadixCache:\n"
    tail = "\n        return\n\n    if ratio >= 0.8:"
    before, _, rest = _replace_once(text, head, head, GUARD).partition(head)
    block, _, after = _replace_once(rest, tail, tail, GUARD).partition(tail)
    if re.search(r"^\S", after, re.M):
        raise PatchesError(f"{GUARD}: check_swa_pool_plan must stay the module's last definition")
    lines = [l[4:] if l.startswith("    ") else l for l in block.split("\n")]
    return before + "\n" + "\n".join(lines) + "\n"


def cut_rollback(workdir: Path) -> Dict[str, str]:
    """Rewrite the registry and guard in workdir without the rollback warning; returns the
    full versions, which the next commit restores."""
    full = {p: (workdir / p).read_text() for p in (REGISTRY, GUARD)}
    (workdir / REGISTRY).write_text(
        _replace_once(full[REGISTRY], REGISTRY_CHECKS, REGISTRY_CHECKS_ISLANDS_ONLY, REGISTRY))
    (workdir / GUARD).write_text(guard_islands_only(full[GUARD]))
    return full


def registry_message(message: str) -> str:
    paragraphs = message.split("\n\n")
    hits = [i for i, p in enumerate(paragraphs) if p.startswith(REGISTRY_POOL_PARAGRAPH)]
    if len(hits) != 1:
        raise PatchesError(f"the registry patch's message has no paragraph starting "
                           f"'{REGISTRY_POOL_PARAGRAPH}' to cut the rollback warning from")
    paragraphs[hits[0]] = "\n".join(textwrap.wrap(REGISTRY_POOL_ISLANDS_ONLY, 72))
    return "\n\n".join(paragraphs)


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
