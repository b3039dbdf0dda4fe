#!/usr/bin/env bash
# Demo: boot the real SGLang server on CPU with a tiny hybrid sliding-window model, run a short
# multi-turn chat through the OpenAI-compatible API, print cached tokens and SWA / full KV pool
# usage per turn, then the two hits islands add (a branch inside a prefill chunk, a follow-up
# sent while its predecessor streams), stock and islands side by side; every server is stopped
# by its PID.
#
#   scripts/demo.sh                          sglang 0.5.23 on tiny Gemma 4: arms main, main islands
#   scripts/demo.sh --target 0.5.15.post1    the pinned release on tiny Laguna: upstream, islands
#   scripts/demo.sh --extra-server-args '--max-running-requests 4' --turns 6
#   scripts/demo.sh --help
#
# Builds the environment the target needs first if it is missing: .venv-main-islands
# (scripts/setup_main.sh --islands) for 0.5.23, .venv (scripts/setup.sh) for 0.5.15.post1.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
target=0.5.23
prev=
for arg in "$@"; do
  case "$arg" in --target=*) target="${arg#--target=}" ;; esac
  [ "$prev" = --target ] && target="$arg"
  prev="$arg"
done
case "$target" in
  0.5.23) venv=.venv-main-islands; setup=(scripts/setup_main.sh --islands) ;;
  0.5.15.post1) venv=.venv; setup=(scripts/setup.sh) ;;
  *) echo "demo.sh: error: --target must be 0.5.23 or 0.5.15.post1, got '$target'" >&2; exit 2 ;;
esac
if [ ! -x "$venv/bin/python" ]; then
  echo "[demo] $venv missing: running ${setup[*]}" >&2
  "${setup[@]}"
fi
exec "$venv/bin/python" scripts/demo.py "$@"
