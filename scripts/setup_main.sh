#!/usr/bin/env bash
# Build .venv-main: stock sglang 0.5.23 (upstream main) on CPU, beside the pinned .venv (issue 17).
#
#   scripts/setup_main.sh        builds (or refreshes) .venv-main; VENV=DIR picks another directory
#
# Installed the way scripts/setup.sh installs the pinned release: the CPU build of torch first,
# exactly pinned (from the machine's local wheel directory), then every other package with
# --no-deps, so pip never resolves torch from sglang's metadata (torch==2.14.1, a CUDA build).
# No patch of ours is applied: this is upstream main as a user gets it.
#
# What differs from .venv, and why:
# - torch 2.13.0+cpu, not sglang 0.5.23's torch==2.14.1: the only CPU build of torch this machine's
#   package sources hold is 2.13.0 (the registry's 2.14.1 is a CUDA build).
# - sgl_kernel: the registry's sglang-kernel==0.4.10 (what 0.5.23 pins) is a CUDA-only wheel
#   (sm90/sm100 common_ops, no CPU extension), and no CPU build of the kernel package is served.
#   upstream builds its CPU kernels from source (sgl-kernel's pyproject_cpu.toml, for Xeon/AMX).
#   In its place a .pth puts islands_harness/main_compat/site on sys.path of .venv-main only: a
#   harness-only `sgl_kernel` stand-in whose CPU functions are small pure-torch equivalents
#   (islands_harness/main_compat/README.md; tests in test/test_main_compat.py).
# - requirements-main-cpu.lock overrides requirements-cpu.lock where sglang 0.5.23 pins another
#   version (transformers 5.19, tokenizers 0.23, ...).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
SGLANG_VERSION="0.5.23"
TORCH_VERSION="2.13.0"
VENV="${VENV:-$ROOT/.venv-main}"
WHEELS="$ROOT/.cache/wheels-main"

die() { echo "setup_main.sh: error: $*" >&2; exit 1; }
log() { echo "[setup_main] $*"; }

case "${1:-}" in
  -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
  "") ;;
  *) die "unknown argument '$1' (try --help)" ;;
esac

PY="${PYTHON:-python3}"
command -v "$PY" >/dev/null || die "no '$PY' on PATH; Python 3.11 is required"
pyver=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
[ "$pyver" = "3.11" ] || die "Python $pyver is not supported (sglang==$SGLANG_VERSION ships a cp311 wheel); set PYTHON=python3.11"

t0=$(date +%s)
if [ ! -x "$VENV/bin/python" ]; then
  log "creating $VENV"
  "$PY" -m venv "$VENV" || die "could not create the virtual environment at $VENV"
fi
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check -q)
pip_install() {
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

have torch "$TORCH_VERSION" || pip_install "torch==$TORCH_VERSION"
"$VENV/bin/python" -c 'import torch, sys; sys.exit(0 if torch.version.cuda is None else 1)' \
  || die "torch in $VENV is a CUDA build; .venv-main needs the CPU build of torch==$TORCH_VERSION"

if ! have sglang "$SGLANG_VERSION"; then
  mkdir -p "$WHEELS"
  whl=$(ls "$WHEELS"/sglang-"$SGLANG_VERSION"-*.whl 2>/dev/null | head -1 || true)
  if [ -z "$whl" ]; then
    "${PIP[@]}" download --no-deps -d "$WHEELS" "sglang==$SGLANG_VERSION" \
      || die "could not download sglang==$SGLANG_VERSION"
    whl=$(ls "$WHEELS"/sglang-"$SGLANG_VERSION"-*.whl | head -1)
  fi
  pip_install --no-deps "$whl"
fi

pip_install --no-deps -r requirements-cpu.lock
pip_install --no-deps -r requirements-main-cpu.lock
pip_install --no-deps -r requirements-dev.lock
have torchvision 0.28.0 || pip_install --no-deps "torchvision==0.28.0"
"$VENV/bin/python" scripts/fix_torchvision.py

# The harness-only kernel stand-in, on this venv's path only (never on .venv's).
site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$ROOT/islands_harness/main_compat/site" > "$site/islands_main_compat.pth"

SGLANG_USE_CPU_ENGINE=1 "$VENV/bin/python" -c \
  'import sglang.launch_server, sglang.srt.managers.scheduler, sglang.srt.models.laguna' \
  || die "sglang $SGLANG_VERSION does not import in $VENV (see the traceback above)"
log "done in $(( $(date +%s) - t0 )) s: $("$VENV/bin/python" -c 'import sglang; print("sglang", sglang.__version__)') (cpu) in $VENV"
