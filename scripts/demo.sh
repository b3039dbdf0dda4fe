#!/usr/bin/env bash
# Demo: boot the real SGLang server on CPU with a tiny hybrid sliding-window model, run a short
# multi-turn chat through the OpenAI-compatible API, print cached tokens and SWA / full KV pool
# usage per turn, and shut the server down by its PID.
#
#   scripts/demo.sh                         the default arms (see ARMS in scripts/demo.py)
#   scripts/demo.sh --arm upstream= --arm 'islands=--enable-swa-islands'
#   scripts/demo.sh --extra-server-args '--max-running-requests 4' --turns 6
#   scripts/demo.sh --help
#
# Creates .venv with scripts/setup.sh first if it is missing.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
if [ ! -x .venv/bin/python ]; then
  echo "[demo] .venv missing: running scripts/setup.sh" >&2
  scripts/setup.sh
fi
exec .venv/bin/python scripts/demo.py "$@"
