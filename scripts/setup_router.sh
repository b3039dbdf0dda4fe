#!/usr/bin/env bash
# Build .venv-router: the SGLang fleet router, Shepherd Model Gateway (`smg`, pinned), for
# benchmarks/fleet.py and test/tools/test_fleet.py.
#
#   scripts/setup_router.sh          .venv-router (idempotent; seconds once the wheel is cached)
#   VENV=DIR scripts/setup_router.sh another directory
#
# Why smg and not sglang-router: smg is where SGLang's router went (its maintainers moved the
# Rust router out of the sglang repository and kept developing it as smg); sglang-router 0.3.2 is
# the last release of the old package. Both are Rust binaries behind a Python launcher that run
# on CPU; smg takes running workers with `smg launch --worker-urls ... --policy ...`.
# The router is its own environment: it shares no package with the engines' venvs.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
SMG_VERSION="1.13.0"
case "${1:-}" in
  -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
  "") ;;
  *) echo "setup_router.sh: error: unknown argument '$1' (try --help)" >&2; exit 2 ;;
esac
VENV="${VENV:-$ROOT/.venv-router}"
SETUP_NAME=setup_router.sh SETUP_TAG=setup_router SGLANG_VERSION="(router)"
# shellcheck source=scripts/lib_install.sh
. "$ROOT/scripts/lib_install.sh"  # die, log, make_venv, pip_install
PY="${PYTHON:-python3}"
command -v "$PY" >/dev/null || die "no '$PY' on PATH"
make_venv
if "$VENV/bin/smg" --help >/dev/null 2>&1 && \
   [ "$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("smg"))' 2>/dev/null)" = "$SMG_VERSION" ]; then
  log "smg $SMG_VERSION already in $VENV"
  exit 0
fi
log "installing smg==$SMG_VERSION into $VENV"
pip_install "smg==$SMG_VERSION"
"$VENV/bin/smg" --help >/dev/null || die "smg installed but does not run"
log "done: $VENV/bin/smg"
