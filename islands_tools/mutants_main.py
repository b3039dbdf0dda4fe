"""Targeted mutants of the 0.5.23 island code (window order and its candidate index, queued hits,
the scheduler hook, the default reclaim, the decode islands' committed length, the admission
reserve of queued windows): each one is written into ``.venv-main-islands``' installed copy, the
upstream-layout unit tests that cover it run, and the copy is restored (also on failure or
Ctrl-C). A mutant the tests do not
kill is a hole in them. Complements ``scripts/mutation.sh`` (cosmic-ray over the 0.5.15 modules).

    .venv-main-islands/bin/python -m islands_tools.mutants_main            run every mutant
    .venv-main-islands/bin/python -m islands_tools.mutants_main --list     name them, run nothing
    .venv-main-islands/bin/python -m islands_tools.mutants_main --only unlock   those named so

Run it on an installed series (``scripts/patches_main.py apply --series islands``); exit status 1
when a mutant survives.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TESTS = REPO / "upstream-tests-main" / "swa-islands" / "test"
COMP = "srt/mem_cache/unified_cache/components/swa_island.py"
QUEUED = "srt/mem_cache/swa_island_queue.py"
CACHE = "srt/mem_cache/swa_island_radix_cache.py"
SCHED = "srt/managers/scheduler.py"
POLICY = "srt/managers/schedule_policy.py"
FORMULAS = "srt/mem_cache/swa_island_formulas.py"
RUN = ("registered/unit/mem_cache/test_swa_island_queued_hits.py",
       "registered/unit/mem_cache/test_swa_island_eviction_order.py",
       "registered/unit/mem_cache/test_swa_island_eviction_index.py",
       "registered/unit/managers/test_request_queued_hook.py",
       "registered/unit/mem_cache/test_swa_island_unified_radix_cache.py",
       "registered/unit/mem_cache/test_swa_island_decode_islands.py",
       "registered/unit/mem_cache/test_swa_admission_reserve_hook.py",
       "registered/unit/mem_cache/test_swa_island_reclaim.py")

# (name, file under the sglang package, exact text, replacement)
MUTANTS = (
    ("decode islands fire when L % interval == 0 (the seed's modulo trigger)", FORMULAS,
     '    return committed_len - last_island_len >= interval\n',
     '    return committed_len > last_island_len and committed_len % interval == 0\n'),
    ("a queued hit is not its window's class", COMP,
     '            if any_queued and cur in queued:\n',
     '            if False:\n'),
    ('the walk does not skip queued windows', COMP,
     '                while cursor is not None and self.eviction_class(cursor) == QUEUED:\n',
     '                while False:\n'),
    ('earliest queued hit first', QUEUED,
     '        for node in reversed(self._hit.values()):\n',
     '        for node in self._hit.values():\n'),
    ('a queued hit goes by its latest waiting request', QUEUED,
     '            n = left.get(node, self._count[node]) - 1\n',
     '            n = -1 if node in left else 0\n'),
    ("a queued hit's eviction does not restart the walk", COMP,
     '            self._walk_done, self._walk_cursor = False, None\n',
     '            pass\n'),
    ('a WINDOW stamp hides a queued hit below it', COMP,
     '            if category >= WINDOW and not any_queued:  # no queued hit below\n',
     '            if category >= WINDOW:  # no queued hit below\n'),
    ('collected waiting requests stay queued', COMP,
     '        self.queued.hits.reap()  # drop requests garbage-collected while queued\n',
     '        pass  # drop requests garbage-collected while queued\n'),
    ('a checkpoint moves no queued hit', CACHE,
     '                self._queue_match(waiting)\n',
     '                pass\n'),
    ('the first checkpoint keeps the queued hit', CACHE,
     '            component.queued.drop(req)\n',
     '            pass\n'),
    ('a commit stops at an SWA branch', CACHE,
     '        if self._continues_past_branch(req, branching, up_to):\n',
     '        if False:\n'),
    ("a finished request's commit goes on past an SWA branch", CACHE,
     '            and req.swa_branching_seqlen is None\n            and not req.finished()\n',
     '            and req.swa_branching_seqlen is None\n'),
    ('a release keeps the queued hit', CACHE,
     '            self._swa_island_component.queued.drop(req)\n',
     '            pass\n'),
    ('the next page is read one token late', CACHE,
     '        nxt = token_ids[hit : hit + page + (1 if is_eagle else 0)]\n',
     '        nxt = token_ids[hit + 1 : hit + 1 + page + (1 if is_eagle else 0)]\n'),
    ('continuing looks under the child, not its parent', QUEUED,
     '            by_edge = self._at.get(child.parent)\n',
     '            by_edge = self._at.get(child)\n'),
    ("a decode island counts only computed tokens (not the launched step's)", CACHE,
     '    return req.owned_kv_len()\n',
     '    return len(req.origin_input_ids) + len(req.output_ids) - 1\n'),
    ('the scheduler does not tell the cache', SCHED,
     '            self.tree_cache.on_request_queued(req)\n',
     ''),
    ("the window order's default reclaim is auto", FORMULAS,
     '    return "lazy" if eviction == "window" else "auto"\n',
     '    return "auto"\n'),
    ('a given reclaim is ignored', CACHE,
     '        reclaim = params.swa_islands_reclaim or default_reclaim(eviction)\n',
     '        reclaim = default_reclaim(eviction)\n'),
    ('admission spends the queued windows', POLICY,
     'self.memory_budget.swa_offset += self.tree_cache.swa_admission_reserve(',
     'self.memory_budget.swa_offset += 0 * self.tree_cache.swa_admission_reserve('),
    ('the queued reserve is not capped by what is held', FORMULAS,
     '    return max(0, min(queued_hits * window_lock_tokens(window_left, page_size), held))\n',
     '    return max(0, queued_hits * window_lock_tokens(window_left, page_size))\n'),
    ('the reserve holds while nothing runs', CACHE,
     '        if component is None or self.disable or running_batch.is_empty():\n',
     '        if component is None or self.disable:\n'),
    ('the reserve counts locked and tombstoned hits', COMP,
     '            if data.value is not None and data.lock_ref == 0:\n',
     '            if True:\n'),
    ("a match end's window stays among the candidates", COMP,
     '            if category >= WINDOW:\n',
     '            if False:\n'),
    ("an insert end's window leaves the candidates", COMP,
     '                cold.unfile(cur.id)\n                self._file(RETENTION, cur)\n',
     '                cold.unfile(cur.id)\n'),
    ('a cold tombstone files the window above it', COMP,
     '        keeps_classes = (\n',
     '        keeps_classes = False and (\n'),
    ('a retention tombstone files nothing above it', COMP,
     '            and self.eviction_class(node) == COLD\n',
     '            and self.eviction_class(node) <= RETENTION\n'),
    ("a window end's tombstone or deletion files nothing above it", COMP,
     '        keeps_classes = (\n            EvictLayer.DEVICE in target\n            and not self._is_window_end(node)\n            and self.eviction_class(node) == COLD\n',
     '        keeps_classes = EvictLayer.DEVICE in target and (\n            self._is_window_end(node) or self.eviction_class(node) == COLD\n'),
    ('a pass takes no cold head', COMP,
     '            head = self._cold_head(node, tail)\n',
     '            head = None\n'),
    ("a window's first node leaves the candidates with its cold head", COMP,
     '        return need > 0 and not self._has_cold_head(length, need)\n',
     '        return need > 0\n'),
    ("an unlock files a retention end's window as COLD", COMP,
     '                cls = category if self._settles_with(covered, len(cur.key)) else COLD\n',
     '                cls = COLD\n'),
    ("an unlock files past its end's window by the end's class", COMP,
     '                cls = category if self._settles_with(covered, len(cur.key)) else COLD\n',
     '                cls = category\n'),
    ("an unlock's window runs on through a tombstone", COMP,
     '                category = COLD\n',
     '                pass\n'),
    ('a head shorter than a window is split off', COMP,
     '        return length - tail >= self.window_span\n',
     '        return length - tail >= 1\n'),
    ('the head is measured from the farthest end', COMP,
     '                tail = min(len(node.key), span - below)\n',
     '                tail = len(node.key)\n'),
    ('auto eviction ignores the pool', FORMULAS,
     '    return "lru" if lazy_fits else "window"\n',
     '    return "lru"\n'),
    ('the cache resolves auto as if every pool fitted', CACHE,
     '        eviction = resolve_eviction(params.swa_islands_eviction, fits or not swa_tree)\n',
     '        eviction = resolve_eviction(params.swa_islands_eviction, True)\n'),
    ("host tier: a node no end's span reaches is backed up", COMP,
     '        rest = min(\n            self._host_backup_span - self._below_to_end(node), self.sliding_window_size\n        )\n',
     '        rest = self.sliding_window_size\n'),
    ('host tier: a backup reads past its own lock', COMP,
     '        rest = min(\n            self._host_backup_span - self._below_to_end(node), self.sliding_window_size\n        )\n',
     '        rest = self._host_backup_span - self._below_to_end(node)\n'),
    ('host tier: an end does not split its span off', COMP,
     '            self._split_window_start(node, self._host_backup_span)\n',
     '            pass\n'),
    ("host tier: an end's class covers the window only", COMP,
     '        if self.tree_core is not None and self.tree_core.has_swa_host_pool:\n',
     '        if False:\n'),
    ('host tier: a hit on the host leaves its window in tombstoning order', COMP,
     '            self._refresh_host_window(node)\n',
     '            pass\n'),
    ('host tier: a host hit refreshes the window without its extra page', COMP,
     '            end, self.tree_core.root_node, self._host_backup_span, host_lru.in_list\n',
     '            end, self.tree_core.root_node, self.sliding_window_size, host_lru.in_list\n'),
    ('host tier: the backup span is the window', FORMULAS,
     '    return _ceil_page(window, page_size) + page_size\n',
     '    return _ceil_page(window, page_size)\n'),
)


def sglang_root() -> Path:
    import sglang

    return Path(sglang.__file__).resolve().parent


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--list", action="store_true", help="name the mutants and exit")
    ap.add_argument("--only", metavar="TEXT", default="",
                    help="run only the mutants whose name contains TEXT (default: all)")
    a = ap.parse_args(argv)
    if a.list:
        for name, rel, *_ in MUTANTS:
            print(f"{rel}: {name}")
        return 0
    root = sglang_root()
    mutants = [m for m in MUTANTS if a.only in m[0]]
    if not mutants:
        print(f"no mutant's name contains {a.only!r} (--list names them)", file=sys.stderr)
        return 2
    for name, rel, old, _ in mutants:  # every mutant must apply before any runs
        count = (root / rel).read_text().count(old)
        if count != 1:
            print(f"mutant {name!r}: its text occurs {count} times in {root / rel} "
                  "(is the islands series applied?)", file=sys.stderr)
            return 2
    env = {**os.environ, "SGLANG_USE_CPU_ENGINE": "1", "OMP_NUM_THREADS": "1"}
    survivors = []
    with tempfile.TemporaryDirectory() as tmp:
        tests = Path(tmp) / "test"
        shutil.copytree(TESTS, tests)
        for i, (name, rel, old, new) in enumerate(mutants, 1):
            path = root / rel
            src = path.read_text()
            path.write_text(src.replace(old, new))
            try:
                r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p",
                                    "no:cacheprovider", *RUN], cwd=tests, env=env,
                                   capture_output=True, text=True)
            finally:
                path.write_text(src)
            verdict = "killed" if r.returncode else "SURVIVED"
            if not r.returncode:
                survivors.append(name)
            print(f"[{i}/{len(mutants)}] {verdict}: {name}", flush=True)
    print(f"{len(mutants) - len(survivors)} of {len(mutants)} killed")
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())
