#!/usr/bin/env bash
# Run the test suite in the project's virtual environment (made by scripts/setup.sh).
#
#   scripts/test.sh                 all tests: .venv/bin/python -m pytest test -q
#   scripts/test.sh -k patches -x   extra arguments go to pytest
#   scripts/test.sh test/engine -x  leading arguments that are `test` or start with `test/` (a
#                                   group: test/engine, test/server, test/tools; a file; a node
#                                   id) replace `test` as what pytest collects
#
# Ends with pytest's summary line; exits non-zero on failures and when no test ran (pytest exit 5).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${VENV:-$ROOT/.venv}/bin/python"
[ -x "$PY" ] || { echo "test.sh: error: no $PY; run scripts/setup.sh first" >&2; exit 1; }

# Our modules are copied into the venv: refresh them (and the patch series) before testing.
"$PY" scripts/patches.py apply >/dev/null || { echo "test.sh: error: scripts/patches.py apply failed" >&2; exit 1; }
# Likewise the 0.5.23 islands environment, where it was built (scripts/setup_main.sh --islands).
ISLANDS_PY="$ROOT/.venv-main-islands/bin/python"
if [ -x "$ISLANDS_PY" ]; then
  "$ISLANDS_PY" scripts/patches_main.py apply --series islands >/dev/null \
    || { echo "test.sh: error: scripts/patches_main.py apply --series islands failed" >&2; exit 1; }
fi

targets=()
while [ $# -gt 0 ] && { [ "$1" = test ] || [[ "$1" == test/* ]]; }; do
  targets+=("$1"); shift
done
[ ${#targets[@]} -gt 0 ] || targets=(test)

out="$(mktemp)"
trap 'rm -f "$out"' EXIT
"$PY" -m pytest "${targets[@]}" -q "$@" 2>&1 | tee "$out"
rc=${PIPESTATUS[0]}
summary="$(grep -E '[0-9]+ (passed|failed|error|errors|skipped|deselected|xfailed|xpassed)|no tests ran' "$out" | tail -n 1)"
echo "test.sh: ${summary:-no pytest summary line} (pytest exit $rc)"
if [ "$rc" -eq 5 ]; then
  echo "test.sh: error: no tests were collected" >&2
  exit 1
fi
exit "$rc"
