#!/usr/bin/env bash
# Build the patched SGLang engine from the pinned upstream release.
#
#   scripts/setup.sh             CPU environment in .venv (default; what CI and the demo use)
#   scripts/setup.sh --gpu       GPU environment: sglang's real CUDA dependencies, as upstream pins them
#   scripts/setup.sh --pristine  the stock release only (no patches, no modules): an install to
#                                try scripts/install_islands.sh on; VENV=DIR picks the directory
#
# Idempotent: re-running re-applies our modules and patches/series to pristine upstream files,
# so it is also the way to pick up an edited patch or module.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
SGLANG_VERSION="0.5.15.post1"
TORCH_VERSION="2.13.0"
VENV="${VENV:-$ROOT/.venv}"
MODE=cpu
PRISTINE=0
for a in "$@"; do
  case "$a" in
    --gpu) MODE=gpu ;;
    --pristine) PRISTINE=1 ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) echo "setup.sh: unknown argument '$a' (try --help)" >&2; exit 2 ;;
  esac
done

SETUP_NAME=setup.sh SETUP_TAG=setup
# shellcheck source=scripts/lib_install.sh
. "$ROOT/scripts/lib_install.sh"  # die, log, require_python311, make_venv, pip_install, have, install_cpu_*
require_python311

t0=$(date +%s)
make_venv

# The pristine release wheel: base of patches/series and what we install. Downloaded once into
# .cache/wheels/ and checked against its sha256 by scripts/patches.py; later runs need no network.
WHEEL="$("$VENV/bin/python" scripts/patches.py fetch)" \
  || die "could not get the pristine sglang==$SGLANG_VERSION wheel (see the message above)"

if [ "$MODE" = gpu ]; then
  # Upstream's own pins: the wheel's metadata (torch, sgl-kernel, flashinfer, ...).
  have sglang "$SGLANG_VERSION" || pip_install "$WHEEL"
  pip_install -r requirements-dev.lock --no-deps
else
  install_cpu_torch "$TORCH_VERSION"
  # sglang pins torch==2.11.0 (a CUDA build from the registry): install the wheel without deps.
  have sglang "$SGLANG_VERSION" || pip_install --no-deps "$WHEEL"
  install_cpu_deps  # requirements-cpu.lock, requirements-dev.lock, torchvision (+ its guard)
fi

if [ "$PRISTINE" = 1 ]; then
  log "pristine: patches and modules not applied"
  [ "$MODE" != cpu ] || SGLANG_USE_CPU_ENGINE=1 "$VENV/bin/python" -c \
    'import sglang.launch_server, sglang.srt.managers.scheduler, sglang.srt.models.laguna' \
    || die "the pristine engine does not import"
else
  log "materialising the patched engine (our modules + patches/series)"
  "$VENV/bin/python" scripts/patches.py apply || die "patched engine not built (see the message above)"

  if [ "$MODE" = cpu ]; then
    SGLANG_USE_CPU_ENGINE=1 "$VENV/bin/python" -c \
      'import sglang.launch_server, sglang.srt.managers.scheduler, sglang.srt.models.laguna, sglang.srt.mem_cache.swa_island_radix_cache' \
      || die "the patched engine does not import"
  fi
fi
log "done in $(( $(date +%s) - t0 )) s: $("$VENV/bin/python" -c 'import sglang; print("sglang", sglang.__version__)') ($MODE) in $VENV"
