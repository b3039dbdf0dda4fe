"""What the export of each release's series carries: the per-release definitions behind
``export.py``'s git machinery.

An ``ExportTarget`` names, for one pinned release, the stand-alone fix series (the patch each
carries, the fix it is based on), the islands series' order and the commit each test enters with,
the cover note's text and how to load the series. ``TARGET_0515`` is sglang 0.5.15.post1
(``patches/series``; the coupled-rollback warning is cut out of the registry commit into the
series' last commit: ``cut_rollback``), ``TARGET_MAIN`` sglang 0.5.23 (``patches-main/series``).
A patch that neither a fix nor the islands order places makes the export refuse.
"""
from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

from .lib import (
    REPO,
    SGLANG_VERSION,
    UPSTREAM_PREFIX,
    PatchesError,
    Upstream,
    load_series,
    open_upstream,
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
    "fix-torch-native-target-verify": "harness-only-torch-native-speculative-target-verify",
    "fix-torch-native-pool-swap": "harness-only-torch-native-read-the-swa-pool-the-forward-uses",
    "fix-frozen-kv-mtp-non-overlap": "frozen-kv-mtp-the-non-overlap-scheduler-path-and-on-cpu",
}
# A fix whose patch needs another fix (the same file, overlapping context): series -> its base.
MAIN_FIX_BASES = {"fix-torch-native-attention-sinks": "fix-torch-native-swa-read",
                  "fix-torch-native-target-verify": "fix-torch-native-attention-sinks",
                  "fix-torch-native-pool-swap": "fix-torch-native-swa-read"}
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
        "sinks, `fix-torch-native-target-verify` its speculative verify, "
        "`fix-torch-native-pool-swap` the translation on a pool swapped in, as the Frozen-KV "
        "MTP draft does; `fix-frozen-kv-mtp-non-overlap` lets Gemma 4's assistant drafter run "
        "without the overlap scheduler, and on CPU). "
        "`fix-torch-native-attention-sinks` changes `torch_native_backend.py` next to "
        "`fix-torch-native-swa-read` (overlapping context) and is based on it, "
        "`fix-torch-native-target-verify` on `fix-torch-native-attention-sinks` (it passes the "
        "sinks on), `fix-torch-native-pool-swap` on `fix-torch-native-swa-read` (its test "
        "reads through that translation); every other fix is based on pristine."),
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


# --------------------------------------------------------------------------------------------
# the rollback warning, cut out of the registry commit


def _replace_once(text: str, old: str, new: str, where: str) -> str:
    if text.count(old) != 1:
        raise PatchesError(
            f"cannot cut the rollback warning out of {where}: expected this text once, found it "
            f"{text.count(old)} times (update islands_tools/patches/export_targets.py):\n{old}")
    return text.replace(old, new)


def guard_islands_only(text: str) -> str:
    """swa_island_guard.check_swa_pool_plan without its islands-off (rollback) branch."""
    text = _replace_once(text, "against the island floor or the admission bind.",
                         "against the island floor.", GUARD)
    text = _replace_once(text, GUARD_ROLLBACK_DOC, "", GUARD)
    text = _replace_once(text, "    from sglang.srt.mem_cache.swa_radix_cache import SWARadixCache\n",
                         "", GUARD)
    text = _replace_once(
        text, "    if not islands and type(cache) is not SWARadixCache:\n",
        "    if not islands:\n", GUARD)
    head = "\n    if islands:\n"
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
