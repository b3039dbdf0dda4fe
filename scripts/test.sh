#!/usr/bin/env bash
# Run the test suite in the project's virtual environment (made by scripts/setup.sh; a missing
# environment is built first: .venv, .venv-main, .venv-main-islands, .venv-router).
#
#   scripts/test.sh                 all tests: .venv/bin/python -m pytest test -q
#   scripts/test.sh -k patches -x   extra arguments go to pytest
#   scripts/test.sh test/engine -x  leading arguments that are `test` or start with `test/` (a
#                                   group: test/engine, test/server, test/tools; a file; a node
#                                   id) replace `test` as what pytest collects
#   scripts/test.sh --quick         the contributors' loop: test/engine and test/tools without the
#                                   tests that boot a server or run for minutes (-m "not server")
#                                   and without the slow unmarked ones listed below (QUICK_IGNORE,
#                                   QUICK_SKIP); may be followed by targets and pytest arguments
#
# Tests run in TEST_WORKERS pytest-xdist workers (default 2, one per core here), a test module per
# worker at a time (--dist loadfile: a module's shared server boot stays in one process);
# TEST_WORKERS=0, or -n/-p no:xdist among the arguments, runs them in this process as before.
# With workers, OMP_WAIT_POLICY defaults to PASSIVE (below).
#
# Ends with pytest's summary line; exits non-zero on failures and when no test ran (pytest exit 5).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${VENV:-$ROOT/.venv}/bin/python"
# A fresh checkout builds what its tests need (each setup is idempotent and skipped when its
# environment exists; TEST_NO_SETUP=1 builds nothing). A missing 0.5.23 or router environment is
# not an error: the tests that need it skip, and this says so in one line.
if [ "${TEST_NO_SETUP:-0}" != 1 ]; then
  [ -x "$PY" ] || scripts/setup.sh || { echo "test.sh: error: scripts/setup.sh failed" >&2; exit 1; }
  for env in ".venv-main:scripts/setup_main.sh" ".venv-main-islands:scripts/setup_main.sh --islands" \
             ".venv-router:scripts/setup_router.sh"; do
    dir="${env%%:*}"; cmd="${env#*:}"
    [ -x "$ROOT/$dir/bin/python" ] && continue
    echo "test.sh: $dir missing: running $cmd" >&2
    $cmd || echo "test.sh: $cmd failed: the tests that need $dir will skip" >&2
  done
fi
[ -x "$PY" ] || { echo "test.sh: error: no $PY; run scripts/setup.sh first" >&2; exit 1; }
for dir in .venv-main .venv-main-islands .venv-router; do
  [ -x "$ROOT/$dir/bin/python" ] || echo "test.sh: no $dir: its tests skip (TEST_NO_SETUP=1 or its setup failed)" >&2
done

# Our modules are copied into the venv: refresh them (and the patch series) before testing.
"$PY" scripts/patches.py apply >/dev/null || { echo "test.sh: error: scripts/patches.py apply failed" >&2; exit 1; }
# Likewise the 0.5.23 islands environment, where it was built (scripts/setup_main.sh --islands).
ISLANDS_PY="$ROOT/.venv-main-islands/bin/python"
if [ -x "$ISLANDS_PY" ]; then
  "$ISLANDS_PY" scripts/patches_main.py apply --series islands >/dev/null \
    || { echo "test.sh: error: scripts/patches_main.py apply --series islands failed" >&2; exit 1; }
fi

quick=()
if [ "${1:-}" = --quick ]; then
  shift
  # Left out of the quick loop (the full suite, CI, runs them): the slowest tests of a measured
  # `--quick --durations=20` run here (20 s to 73 s each; 2026-12-03, docs/DEVELOPING.md), i.e.
  # the exports to pristine checkouts, the runs in other interpreters, the mutation and GPU
  # dry-run drivers, and all but one case of the slow parametrized engine tests.
  QUICK_IGNORE=(
    test/tools/test_patches_export.py
    test/tools/test_patches_export_main.py
    test/tools/test_bench_swa_hold_main.py
    test/tools/test_bench_cache_cost_main.py
  )
  QUICK_SKIP=(
    "test/tools/test_patches_main.py::test_fix_regression_test_fails_on_pristine_and_passes_with_the_fix"
    "test/tools/test_patches_main.py::test_islands_series_upstream_tests_pass_in_the_islands_environment"
    "test/tools/test_gpu_seed_shape.py::test_dry_run_prints_the_exact_commands_with_planner_pools_and_one_prompt_set"
    "test/tools/test_mutation_setup.py::test_machinery_finds_killed_and_surviving_mutants"
    "test/tools/test_bench_prefix_reuse.py::test_cli_help_and_plan_only"
    "test/tools/test_main_compat.py::test_standin_equals_upstream_triton_kernels_under_interpreter"
    "test/engine/test_chunk_islands.py::test_randomized_operation_sequences_keep_every_invariant[1]"
    "test/engine/test_chunk_islands.py::test_randomized_operation_sequences_keep_every_invariant[2]"
    "test/engine/test_chunk_islands.py::test_randomized_operation_sequences_keep_every_invariant[3]"
    "test/engine/test_chunk_islands.py::test_double_frees_are_structurally_impossible[1]"
    "test/engine/test_prefix_reuse.py::test_evicting_everything_evictable_skips_the_passes"
    "test/engine/test_prefix_reuse.py::test_edited_transcript_hits_up_to_the_edit[auto]"
    "test/engine/test_decode_islands.py::test_decode_island_needs_a_live_window_after_upstreams_evictor[40-16]"
    "test/engine/test_decode_islands.py::test_decode_island_needs_a_live_window_after_upstreams_evictor[32-16]"
  )
  quick=(-m "not server")
  for t in "${QUICK_IGNORE[@]}"; do quick+=(--ignore "$t"); done
  for t in "${QUICK_SKIP[@]}"; do quick+=(--deselect "$t"); done
fi

targets=()
while [ $# -gt 0 ] && { [ "$1" = test ] || [[ "$1" == test/* ]]; }; do
  targets+=("$1"); shift
done
if [ ${#targets[@]} -eq 0 ]; then
  if [ ${#quick[@]} -gt 0 ]; then targets=(test/engine test/tools); else targets=(test); fi
fi

workers=()
case " $* " in
  *" -n "*|*" -n="*|*" --numprocesses"*|*"no:xdist"*) ;;
  *) if [ "${TEST_WORKERS:-2}" != 0 ]; then
       if "$PY" -c "import xdist" 2>/dev/null; then
         workers=(-n "${TEST_WORKERS:-2}" --dist loadfile)
         # Two workers each boot servers of 2 OpenMP threads on 2 cores: idle OpenMP threads sleep
         # instead of spinning, so they leave the cores to the other worker (same thread count,
         # same arithmetic).
         export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"
       else echo "test.sh: pytest-xdist is not installed in $PY (scripts/setup.sh installs it): one process" >&2; fi
     fi ;;
esac

out="$(mktemp)"
trap 'rm -f "$out"' EXIT
"$PY" -m pytest "${targets[@]}" -q ${workers[@]+"${workers[@]}"} ${quick[@]+"${quick[@]}"} "$@" 2>&1 | tee "$out"
rc=${PIPESTATUS[0]}
summary="$(grep -E '[0-9]+ (passed|failed|error|errors|skipped|deselected|xfailed|xpassed)|no tests ran' "$out" | tail -n 1)"
echo "test.sh: ${summary:-no pytest summary line} (pytest exit $rc)"
if [ "$rc" -eq 5 ]; then
  echo "test.sh: error: no tests were collected" >&2
  exit 1
fi
exit "$rc"
