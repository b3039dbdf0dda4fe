#!/usr/bin/env bash
# Two-boot equality gate: SWA islands must be invisible in the outputs (CPU, tiny hybrid model).
#
#   scripts/equality_gate.sh --quick             page 1, small workload (~1-2 min on 2 idle cores)
#   scripts/equality_gate.sh                     full: pages 1 and 16
#   scripts/equality_gate.sh --quick --negative-control    must FAIL (exit 1): wrong frontier
#   scripts/equality_gate.sh --help
#
# Exit 0 pass, 1 fail, 2 could not run. Server logs: .work/equality-gate/logs/.
# Creates .venv with scripts/setup.sh first if it is missing.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
if [ ! -x .venv/bin/python ]; then
  echo "[equality_gate] .venv missing: running scripts/setup.sh" >&2
  scripts/setup.sh
fi
exec .venv/bin/python scripts/equality_gate.py "$@"
