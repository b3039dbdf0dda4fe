#!/usr/bin/env bash
# Mutation testing of our engine modules (python/sglang/srt/mem_cache/swa_island_*.py) with cosmic-ray.
#
#   scripts/mutation.sh                              every swa_island_*.py, every mutant (hours, see below)
#   scripts/mutation.sh guard                        one module: a path, a file stem, or what follows swa_island_
#   scripts/mutation.sh --max-mutants 25 guard       smoke run: a seeded random sample of 25 mutants per module
#   scripts/mutation.sh --list-survivors             survivors of the latest session; runs nothing
#
# Never writes the working tree or .venv. A session directory (.work/mutation/session-DATE, or
# --session DIR) gets a snapshot of the tree (tracked and untracked-but-not-ignored files; --rev REV
# takes a commit instead) and, per worker, a copy of it plus a private copy of the installed sglang
# package (w1/tree, w1/site). cosmic-ray mutates the worker's copy; the test command installs that
# copy into the worker's sglang with scripts/patches.py apply --site-packages and runs the tests
# there (PYTHONPATH puts it before .venv's). On exit, also on Ctrl-C or failure, every worker copy is
# restored from the snapshot and its sglang re-applied; a session resumed with --session is checked
# the same way first. Run it from a clean tree: the snapshot is what gets tested.
#
# Steps: baseline (the unmutated suite once, cosmic-ray baseline: a red suite stops the run), then
# per module cosmic-ray init, cr-filter-operators (EXCLUDE_OPERATORS below), the --max-mutants
# sample, cosmic-ray exec with a running count, cr-report; then the markdown report: per module
# killed / survived / timeout / incompetent / skipped and a table of every survivor with an empty
# verdict column ("equivalent because ..." / "killed by test ...").
#
# Options:
#   --max-mutants N    run a seeded random sample of N mutants per module, record the rest as skipped
#   --seed S           seed of that sample (default 0)
#   -j N, --jobs N     parallel workers (default 1). cosmic-ray's local distributor is sequential;
#                      N > 1 uses its http distributor with N workers on 127.0.0.1, one tree each
#   --timeout SEC      per-mutant test timeout (default: 2 x baseline x N + 60 s; listed as timeout,
#                      counted as killed: mostly mutants that loop forever)
#   --tests "FILES"    test files instead of TESTS below (missing files are skipped)
#   --session DIR      session directory; an existing one is resumed: its pending mutants run, on its
#                      snapshot, without a new baseline
#   --report PATH      markdown report (default .work/mutation/report.md; always also DIR/report.md)
#   --list-survivors   print the survivors of --session DIR (default: the latest session) and exit
#   --report-only      rewrite the report of --session DIR (default: the latest) and exit
#   --print-config M   print the cosmic-ray config generated for module M and exit
#   --rev REV          snapshot commit REV (git archive) instead of the working tree
#   --all-operators    do not exclude EXCLUDE_OPERATORS
#   --root DIR         project to mutate (default: this repository); sessions go to DIR/.work/mutation
#   --plain            run the tests directly in the snapshot, without a patched sglang copy (for
#                      projects other than this one; the script's own test uses it)
#   -h, --help         this text
#
# Cost (idle 2-core machine, 1 worker): the engine tests take ~90 s unmutated; a survivor costs that,
# a killed mutant the time to its first failure (~10-15 s: the module's own tests run first), a
# mutant that loops forever the timeout. cosmic-ray makes
# ~500 mutants of the guard and ~700-800 of the radix cache (before EXCLUDE_OPERATORS): a full run is a
# matter of hours (about 10-15 h on such a machine), a --max-mutants 25 smoke run of one module
# 10-20 min. Machines with more cores: -j.
set -euo pipefail

# ---- knobs --------------------------------------------------------------------------------------
# The engine tests, in this order (after the module's own, see FIRST_TESTS); missing files are skipped.
TESTS="test/engine/test_chunk_islands.py test/engine/test_decode_islands.py test/engine/test_prefix_reuse.py test/engine/test_queued_hits.py test/engine/test_eviction_cost.py test/engine/test_island_metrics.py test/engine/test_guard.py test/engine/test_island_formulas.py test/tools/test_bench_swa_hold.py"
PYTEST_ARGS='-x -q -p no:cacheprovider -m "not server"'
MODULE_GLOB="python/sglang/srt/mem_cache/swa_island_*.py"
# Per module, the tests that exercise it most directly go first: same tests, same kills, but -x
# stops at the first failure sooner. Key: the module's file stem.
declare -A FIRST_TESTS=(
  [swa_island_eviction]="test/engine/test_eviction_cost.py test/engine/test_queued_hits.py test/engine/test_prefix_reuse.py"
  [swa_island_formulas]="test/engine/test_island_formulas.py test/engine/test_guard.py"
  [swa_island_guard]="test/engine/test_guard.py test/engine/test_island_formulas.py"
  [swa_island_radix_cache]="test/engine/test_island_formulas.py test/engine/test_chunk_islands.py test/engine/test_decode_islands.py test/engine/test_prefix_reuse.py"
  [swa_island_window_eviction]="test/engine/test_prefix_reuse.py test/engine/test_eviction_cost.py test/engine/test_queued_hits.py test/engine/test_chunk_islands.py"
)
# Operators whose mutants are pure noise for these modules; cr-filter-operators records them as
# skipped (regexes matched from the start of the operator name). EXCLUDE_WHY[i] is EXCLUDE_OPERATORS[i]'s reason.
EXCLUDE_OPERATORS=(
  'core/ReplaceComparisonOperator_(Eq|NotEq|Lt|LtE|Gt|GtE)_(Is|IsNot)$'
  'core/ReplaceComparisonOperator_(Is_Eq|IsNot_NotEq)$'
)
EXCLUDE_WHY=(
  "a value comparison made an identity test (a < b -> a is b, a == b -> a is not b): on ints and strs the outcome depends on CPython's caches (small ints -5..256, interned strings), not on what a test checks; the _Eq/_NotEq mutants of the same comparison ask the deterministic question"
  "is -> ==, is not -> != : equivalent by construction for objects without their own __eq__; ours compare with None, classes and radix-tree nodes (upstream TreeNode defines only __lt__)"
)

# ---- environment --------------------------------------------------------------------------------
SCRIPT_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VENV:-$SCRIPT_ROOT/.venv}"
PY="$VENV/bin/python"
log() { echo "[mutation] $*"; }
die() { echo "mutation.sh: error: $*" >&2; exit 1; }
usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed -E 's/^# ?//'; }

ROOT="$SCRIPT_ROOT"; MAX_MUTANTS=0; SEED=0; JOBS=1; TIMEOUT=""; SESSION=""; REPORT=""; MODE=run
PRINT_MODULE=""; REV=""; ALL_OPS=0; PLAIN=0; MODULE_ARGS=(); TESTS_GIVEN=0
need() { [ $# -ge 2 ] || die "$1 needs a value (try --help)"; }
while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --max-mutants) need "$@"; MAX_MUTANTS="$2"; shift 2 ;;
    --seed) need "$@"; SEED="$2"; shift 2 ;;
    -j|--jobs) need "$@"; JOBS="$2"; shift 2 ;;
    -j[0-9]*) JOBS="${1#-j}"; shift ;;
    --timeout) need "$@"; TIMEOUT="$2"; shift 2 ;;
    --tests) need "$@"; TESTS="$2"; TESTS_GIVEN=1; FIRST_TESTS=(); shift 2 ;;
    --session) need "$@"; SESSION="$2"; shift 2 ;;
    --report) need "$@"; REPORT="$2"; shift 2 ;;
    --list-survivors) MODE=survivors; shift ;;
    --report-only) MODE=report; shift ;;
    --print-config) need "$@"; MODE=config; PRINT_MODULE="$2"; shift 2 ;;
    --rev) need "$@"; REV="$2"; shift 2 ;;
    --all-operators) ALL_OPS=1; shift ;;
    --root) need "$@"; ROOT="$(cd "$2" && pwd)" || die "no directory $2"; shift 2 ;;
    --plain) PLAIN=1; shift ;;
    --) shift; MODULE_ARGS+=("$@"); break ;;
    -*) die "unknown option '$1' (try --help)" ;;
    *) MODULE_ARGS+=("$1"); shift ;;
  esac
done
for n in "$MAX_MUTANTS" "$SEED" "$JOBS"; do [[ "$n" =~ ^[0-9]+$ ]] || die "not a number: '$n'"; done
[ "$JOBS" -ge 1 ] || die "-j must be at least 1"
[ -z "$TIMEOUT" ] || [[ "$TIMEOUT" =~ ^[0-9]+([.][0-9]+)?$ ]] || die "--timeout: not a number of seconds: '$TIMEOUT'"
[ -x "$PY" ] || die "no $PY; run scripts/setup.sh first"
"$PY" -c 'import cosmic_ray' 2>/dev/null \
  || die "cosmic-ray is not installed in $VENV; run scripts/setup.sh (it installs requirements-dev.lock)"
[[ "$ROOT" != *"'"* ]] || die "the project path must not contain a single quote: $ROOT"
BASE="$ROOT/.work/mutation"
REPORT="${REPORT:-$BASE/report.md}"

# ---- the Python side (islands_tools/mutation_helper.py): config, sampling, exec monitor, report --------
HELPER_PY="$SCRIPT_ROOT/islands_tools/mutation_helper.py"
helper() { "$PY" "$HELPER_PY" "$@"; }

# ---- modules and tests --------------------------------------------------------------------------
git_ro() { GIT_OPTIONAL_LOCKS=0 git -C "$ROOT" "$@"; }  # read-only git: never takes the index lock
in_source() {  # PATH: is it in what the snapshot will be taken from (the tree, or --rev)?
  if [ -n "$REV" ]; then git_ro cat-file -e "$REV:$1" 2>/dev/null; else [ -f "$ROOT/$1" ]; fi
}
resolve_module() {  # ARG -> path relative to ROOT
  local a="$1" c
  if [[ "$a" = /* ]]; then
    case "$a" in "$ROOT"/*) a="${a#"$ROOT"/}" ;; *) die "$a is outside the project $ROOT" ;; esac
  fi
  for c in "$a" "python/sglang/srt/mem_cache/$a" "python/sglang/srt/mem_cache/$a.py" \
           "python/sglang/srt/mem_cache/swa_island_$a.py"; do
    if in_source "$c"; then echo "$c"; return 0; fi
  done
  die "no module '$a' in ${REV:+commit $REV of }$ROOT (a path, a stem such as swa_island_guard, or 'guard')"
}
tests_for() {  # MODULE-STEM TREE -> existing test files, the module's own first
  local stem="$1" tree="$2" t out=() seen=" "
  local first=""; if [ -n "$stem" ]; then first="${FIRST_TESTS[$stem]:-}"; fi
  for t in $first $TESTS; do
    case "$seen" in *" $t "*) continue ;; esac
    seen+="$t "
    if [ -f "$tree/$t" ]; then out+=("$t"); fi
  done
  echo "${out[*]:-}"
}
config_for() {  # MODULE TIMEOUT TREE [URL...] -> TOML on stdout
  local m="$1" timeout="$2" tree="$3"; shift 3
  local tests; tests="$(tests_for "$(basename "$m" .py)" "$tree")"
  [ -n "$tests" ] || die "none of the test files exists in $tree: $TESTS"
  local plain=(); [ "$PLAIN" = 1 ] && plain=(--plain)
  local ex=() i
  if [ "$ALL_OPS" != 1 ]; then
    for i in "${!EXCLUDE_OPERATORS[@]}"; do ex+=(--exclude "${EXCLUDE_OPERATORS[$i]}|||${EXCLUDE_WHY[$i]}"); done
  fi
  # shellcheck disable=SC2086
  helper config --module "$m" --tests $tests --pytest-args="$PYTEST_ARGS" --timeout "$timeout" \
    --py "$PY" --cache "$SCRIPT_ROOT/.cache/wheels" "${plain[@]}" "${ex[@]}" --urls "$@"
}

latest_session() {
  local s="${SESSION:-$BASE/latest}"
  [ -d "$s" ] || die "no session ${SESSION:-under $BASE} (run scripts/mutation.sh first, or pass --session DIR)"
  (cd "$s" && pwd -P)
}

case "$MODE" in
  survivors) helper survivors --session "$(latest_session)"; exit 0 ;;
  report)
    s="$(latest_session)"; helper report --session "$s" --out "$s/report.md" --out "$REPORT"
    log "report: $REPORT"; exit 0 ;;
  config)
    m="$(resolve_module "$PRINT_MODULE")"; config_for "$m" "${TIMEOUT:-600}" "$ROOT"; exit 0 ;;
esac

# ---- session ------------------------------------------------------------------------------------
MODULES=()
if [ ${#MODULE_ARGS[@]} -gt 0 ]; then
  for a in "${MODULE_ARGS[@]}"; do MODULES+=("$(resolve_module "$a")"); done
fi
RESUME=0
if [ -n "$SESSION" ] && [ -f "$SESSION/meta.json" ]; then
  RESUME=1; SESSION="$(cd "$SESSION" && pwd)"
  [ ${#MODULES[@]} -gt 0 ] || read -r -a MODULES <<<"$(helper get "$SESSION/meta.json" modules)"
  PLAIN="$(helper get "$SESSION/meta.json" plain)"
  [ "$TESTS_GIVEN" = 1 ] || TESTS="$(helper get "$SESSION/meta.json" tests)"
else
  if [ ${#MODULES[@]} -eq 0 ]; then
    if [ -n "$REV" ]; then
      while IFS= read -r f; do
        # shellcheck disable=SC2053
        [[ "$f" == $MODULE_GLOB ]] && MODULES+=("$f")
      done < <(git_ro ls-tree -r --name-only "$REV" -- "$(dirname "$MODULE_GLOB")")
    else
      for f in "$ROOT"/$MODULE_GLOB; do [ -f "$f" ] && MODULES+=("${f#"$ROOT"/}"); done
    fi
    [ ${#MODULES[@]} -gt 0 ] || die "no module matches $MODULE_GLOB under $ROOT"
  fi
  SESSION="${SESSION:-$BASE/session-$(date +%Y%m%d-%H%M%S)}"
  [ ! -e "$SESSION" ] || [ -z "$(ls -A "$SESSION")" ] || die "$SESSION exists and is not a session"
  mkdir -p "$SESSION"; SESSION="$(cd "$SESSION" && pwd)"
fi
SNAP="$SESSION/snapshot"
META="$SESSION/meta.json"
WORKER_PIDS=()
INTERRUPTED=0

restore_workers() {  # every worker copy back to the snapshot; its sglang re-applied
  local w m
  for w in "$SESSION"/w*/; do
    [ -d "$w/tree" ] || continue
    for m in "${MODULES[@]}"; do
      if ! cmp -s "$SNAP/$m" "$w/tree/$m"; then
        cp -p "$SNAP/$m" "$w/tree/$m"
        log "restored $m in ${w%/} (it was left mutated)"
      fi
    done
    if [ "$PLAIN" != 1 ] && [ -d "$w/site/sglang" ]; then
      (cd "$w/tree" && "$PY" scripts/patches.py --cache-dir "$SCRIPT_ROOT/.cache/wheels" apply \
        --site-packages "$w/site" >/dev/null) || log "warning: re-applying ${w%/}/site failed"
    fi
  done
  return 0
}
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [ ${#WORKER_PIDS[@]} -gt 0 ] || [ -n "${MON_PID:-}" ]; then
    helper killtree ${MON_PID:-} "${WORKER_PIDS[@]}" || true
  fi
  if [ -d "$SNAP" ]; then restore_workers; fi
  if [ "$INTERRUPTED" = 1 ] && compgen -G "$SESSION/*.sqlite" >/dev/null; then
    helper report --session "$SESSION" --out "$SESSION/report.md" --out "$REPORT" 2>/dev/null || true
    log "interrupted: partial report in $REPORT; resume with: scripts/mutation.sh --session $SESSION"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'INTERRUPTED=1; exit 130' INT
trap 'INTERRUPTED=1; exit 143' TERM

if [ "$RESUME" = 1 ]; then
  log "resuming $SESSION"
  [ -d "$SNAP" ] || die "$SESSION has no snapshot/"
  (cd "$SNAP" && sha256sum -c --quiet "$SESSION/snapshot.sha256") \
    || die "the snapshot in $SESSION changed since it was taken; start a new session"
else
  log "session $SESSION"
  mkdir -p "$SNAP"
  if [ -n "$REV" ]; then
    git_ro archive --format=tar "$REV" | tar -x -C "$SNAP" || die "git archive $REV failed"
    source_desc="commit $(git_ro rev-parse --short "$REV")"
  elif git_ro rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    (cd "$ROOT" && git_ro ls-files -z -c -o --exclude-standard \
      | while IFS= read -r -d '' f; do [ -f "$f" ] && printf '%s\0' "$f"; done \
      | tar --null -T - -cf -) | tar -x -C "$SNAP"
    source_desc="the working tree at $(date '+%Y-%m-%d %H:%M:%S') (HEAD $(git_ro rev-parse --short HEAD 2>/dev/null || echo none))"
  else
    tar -C "$ROOT" --exclude=./.work --exclude=./.git --exclude=./.venv --exclude=./.cache -cf - . | tar -x -C "$SNAP"
    source_desc="$ROOT (not a git repository)"
  fi
  for m in "${MODULES[@]}"; do [ -f "$SNAP/$m" ] || die "$m is not in the snapshot (untracked and ignored?)"; done
  (cd "$SNAP" && sha256sum "${MODULES[@]}") >"$SESSION/snapshot.sha256"
  differs=()
  for m in "${MODULES[@]}"; do
    if git_ro rev-parse --verify -q HEAD >/dev/null 2>&1; then
      git_ro show "HEAD:$m" 2>/dev/null | cmp -s - "$SNAP/$m" || differs+=("$m")
    fi
  done
  helper meta "$META" "session=${SESSION#"$ROOT"/}" "created=$(date '+%Y-%m-%d %H:%M:%S')" "source=$source_desc" \
    "pytest_args=$PYTEST_ARGS" "cosmic_ray=$("$PY" -c 'from importlib.metadata import version; print(version("cosmic-ray"))')" \
    "plain=$PLAIN"
  helper meta --json "$META" "modules=$("$PY" -c 'import json,sys; print(json.dumps(sys.argv[1:]))' "${MODULES[@]}")" \
    "differs_from_head=$("$PY" -c 'import json,sys; print(json.dumps(sys.argv[1:]))' "${differs[@]}")" \
    "max_mutants=$MAX_MUTANTS" "seed=$SEED" \
    "excluded_operators=$(if [ "$ALL_OPS" = 1 ]; then echo '[]'; else "$PY" -c 'import json,sys; print(json.dumps(sys.argv[1:]))' "${EXCLUDE_OPERATORS[@]}"; fi)"
  [ ${#differs[@]} -eq 0 ] || log "note: differs from HEAD (uncommitted changes are what gets tested): ${differs[*]}"
fi
[ -n "$(tests_for "" "$SNAP")" ] || die "none of the test files exists in the snapshot: $TESTS"
helper meta --json "$META" "jobs=$JOBS" \
  "tests=$("$PY" -c 'import json,sys; print(json.dumps(sys.argv[1:]))' $(tests_for "" "$SNAP"))"
mkdir -p "$BASE" && ln -sfn "$SESSION" "$BASE/latest"

# Workers: a copy of the snapshot each, and (engine mode) a private copy of the installed sglang.
SITE_SRC=""
if [ "$PLAIN" != 1 ]; then
  [ -f "$SNAP/scripts/patches.py" ] || die "$ROOT has no scripts/patches.py (use --plain for other projects)"
  SITE_SRC="$("$PY" -c 'import importlib.util, os; print(os.path.dirname(os.path.dirname(importlib.util.find_spec("sglang").origin)))')" \
    || die "sglang is not installed in $VENV; run scripts/setup.sh"
fi
for k in $(seq 1 "$JOBS"); do
  w="$SESSION/w$k"
  if [ ! -d "$w/tree" ]; then
    mkdir -p "$w"; cp -a "$SNAP" "$w/tree.tmp" && mv "$w/tree.tmp" "$w/tree"
  fi
  if [ "$PLAIN" != 1 ] && [ ! -d "$w/site/sglang" ]; then
    log "worker $k: copying the installed sglang ($(du -sh "$SITE_SRC/sglang" | cut -f1))"
    rm -rf "$w/site"; mkdir -p "$w/site.tmp"; cp -a "$SITE_SRC/sglang" "$w/site.tmp/" && mv "$w/site.tmp" "$w/site"
    rm -f "$w"/site/sglang/srt/mem_cache/__pycache__/swa_island_*.pyc
  fi
done
restore_workers   # also builds each worker's engine from its tree (patches + our modules)

# ---- baseline -----------------------------------------------------------------------------------
W1="$SESSION/w1/tree"
bsec="$(helper get "$META" baseline_s)"
if [ "$RESUME" = 1 ] && [ -n "$bsec" ]; then
  log "baseline: green in $bsec s when the session started (the snapshot is unchanged); not re-run"
else
  config_for "${MODULES[0]}" "${TIMEOUT:-3600}" "$W1" >"$SESSION/baseline.toml"
  log "baseline: the unmutated tests once ($(tests_for "" "$W1" | wc -w) files; ~90 s for the engine tests on an idle 2-core machine)"
  t0=$(date +%s.%N)
  set +e
  (cd "$W1" && "$VENV/bin/cosmic-ray" baseline "$SESSION/baseline.toml" --session-file "$SESSION/baseline.sqlite") \
    >"$SESSION/baseline.log" 2>&1 &
  MON_PID=$!; wait "$MON_PID"; brc=$?; MON_PID=""
  set -e
  bsec=$("$PY" -c "import sys; print(round(float(sys.argv[2]) - float(sys.argv[1]), 1))" "$t0" "$(date +%s.%N)")
  if [ "$brc" -ne 0 ]; then
    helper meta "$META" "baseline=RED (exit $brc)"
    tail -n 40 "$SESSION/baseline.log" >&2
    die "baseline is red: the tests fail with no mutation (full log: $SESSION/baseline.log); every mutant would count as killed"
  fi
  helper meta "$META" "baseline=green in $bsec s" "baseline_s=$bsec"
  log "baseline green in $bsec s"
fi
if [ -z "$TIMEOUT" ]; then
  TIMEOUT=$("$PY" -c "import sys, math; print(math.ceil(2 * float(sys.argv[1]) * int(sys.argv[2]) + 60))" "$bsec" "$JOBS")
fi
helper meta "$META" "timeout=$TIMEOUT"
log "per-mutant timeout $TIMEOUT s"

# ---- http workers for -j > 1 --------------------------------------------------------------------
URLS=()
if [ "$JOBS" -gt 1 ]; then
  for k in $(seq 1 "$JOBS"); do
    w="$SESSION/w$k"; rm -f "$w/port"
    (cd "$w/tree" && exec "$PY" "$HELPER_PY" http-worker "$w/port" >"$w/worker.log" 2>&1) &
    WORKER_PIDS+=($!)
  done
  for k in $(seq 1 "$JOBS"); do
    w="$SESSION/w$k"
    for _ in $(seq 1 300); do [ -s "$w/port" ] && break; sleep 0.1; done
    [ -s "$w/port" ] || die "worker $k did not start (see $w/worker.log)"
    URLS+=("http://127.0.0.1:$(cat "$w/port")")
  done
  log "$JOBS http workers: ${URLS[*]}"
fi

# ---- per module ---------------------------------------------------------------------------------
for m in "${MODULES[@]}"; do
  stem="$(basename "$m" .py)"
  cfg="$SESSION/$stem.toml"; db="$SESSION/$stem.sqlite"
  config_for "$m" "$TIMEOUT" "$W1" "${URLS[@]}" >"$cfg"
  if [ ! -f "$db" ]; then
    (cd "$W1" && "$VENV/bin/cosmic-ray" init "$cfg" "$db.tmp") || die "cosmic-ray init failed for $m"
    mv "$db.tmp" "$db"
    "$VENV/bin/cr-filter-operators" "$db" "$cfg" || die "cr-filter-operators failed for $m"
    c="$(helper counts "$db")"
    log "$m: $(echo "$c" | "$PY" -c 'import json,sys; c=json.load(sys.stdin); print("%d mutants, %d of them excluded by operator" % (c["total"], c["skipped-operator"]))')"
    if [ "$MAX_MUTANTS" -gt 0 ]; then log "$(helper sample "$db" "$MAX_MUTANTS" "$SEED")"; fi
  fi
  set +e
  "$PY" "$HELPER_PY" exec --config "$cfg" --db "$db" --cwd "$W1" --label "$stem" --jobs "$JOBS" \
    --timings "$SESSION/$stem.timings.tsv" --log "$SESSION/$stem.exec.log" &
  MON_PID=$!; wait "$MON_PID"; xrc=$?; MON_PID=""
  set -e
  [ "$xrc" -eq 0 ] || die "cosmic-ray exec failed for $m (exit $xrc; log $SESSION/$stem.exec.log)"
  restore_workers
  "$VENV/bin/cr-report" --show-diff --surviving-only "$db" >"$SESSION/$stem.cr-report.txt"
  log "$m: cr-report (survivors with diffs: $SESSION/$stem.cr-report.txt):"
  tail -n 3 "$SESSION/$stem.cr-report.txt" | sed 's/^/    /'
done

helper report --session "$SESSION" --out "$SESSION/report.md" --out "$REPORT"
helper survivors --session "$SESSION"
log "report: $REPORT (and $SESSION/report.md)"
