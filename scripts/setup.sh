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

die() { echo "setup.sh: error: $*" >&2; exit 1; }
log() { echo "[setup] $*"; }

PY="${PYTHON:-python3}"
command -v "$PY" >/dev/null || die "no '$PY' on PATH; Python 3.11 is required"
pyver=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
[ "$pyver" = "3.11" ] || die "Python $pyver is not supported: sglang==$SGLANG_VERSION ships only a cp311 wheel; use Python 3.11 (set PYTHON=python3.11)"

t0=$(date +%s)
if [ ! -x "$VENV/bin/python" ]; then
  log "creating $VENV"
  "$PY" -m venv "$VENV" || die "could not create the virtual environment at $VENV"
fi
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check -q)

# The pristine release wheel: base of patches/series and what we install. Downloaded once into
# .cache/wheels/ and checked against its sha256 by scripts/patches.py; later runs need no network.
WHEEL="$("$VENV/bin/python" scripts/patches.py fetch)" \
  || die "could not get the pristine sglang==$SGLANG_VERSION wheel (see the message above)"

pip_install() {  # pip_install WHAT... : installs, or names the package that failed
  "${PIP[@]}" install "$@" || die "pip could not install: $* (is the package registry reachable, and does the version exist?)"
}

have() { "$VENV/bin/python" - "$1" "$2" <<'PYEOF'
import sys
from importlib.metadata import version, PackageNotFoundError
try:
    sys.exit(0 if version(sys.argv[1]).split("+")[0] == sys.argv[2] else 1)
except PackageNotFoundError:
    sys.exit(1)
PYEOF
}

if [ "$MODE" = gpu ]; then
  # Upstream's own pins: the wheel's metadata (torch, sgl-kernel, flashinfer, ...).
  have sglang "$SGLANG_VERSION" || pip_install "$WHEEL"
  pip_install -r requirements-dev.lock --no-deps
else
  # torch first, exactly pinned: on this machine kind pip takes the CPU build from local disk.
  # Never let pip resolve torch from a range: that would pull a multi-GB CUDA build.
  have torch "$TORCH_VERSION" || pip_install "torch==$TORCH_VERSION"
  "$VENV/bin/python" -c 'import torch, sys; sys.exit(0 if torch.version.cuda is None else 1)' \
    || die "torch in $VENV is a CUDA build; the CPU path needs the CPU build of torch==$TORCH_VERSION"
  # sglang pins torch==2.11.0 (a CUDA build from the registry): install the wheel without deps.
  have sglang "$SGLANG_VERSION" || pip_install --no-deps "$WHEEL"
  # Pure-Python (and CPU) dependencies that importing the server needs, exactly pinned.
  pip_install --no-deps -r requirements-cpu.lock
  pip_install --no-deps -r requirements-dev.lock
  # torchvision: sglang/srt/utils/common.py imports torchvision.io unconditionally. The registry's
  # torchvision is linked against CUDA torch and fails to import beside CPU torch
  # ("operator torchvision::nms does not exist"). We install the real package and guard its fake-op
  # registrations (scripts/fix_torchvision.py) rather than shipping a stub: every torchvision API
  # that sglang or transformers touch stays the real one, and the guard is a no-op where the ops load.
  have torchvision 0.28.0 || pip_install --no-deps "torchvision==0.28.0"
  "$VENV/bin/python" scripts/fix_torchvision.py
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
