# Shared install steps of scripts/setup.sh (.venv, the pinned 0.5.15.post1) and
# scripts/setup_main.sh (.venv-main, stock 0.5.23). Sourced, not run.
#
# The caller sets ROOT (repo root, cwd), VENV, SETUP_NAME (for messages: "setup.sh"),
# SETUP_TAG (log prefix: "setup") and SGLANG_VERSION, then calls, in order:
#   require_python311; make_venv           then PIP, pip_install and have are defined
#   install_cpu_torch TORCH_VERSION        the CPU build, exactly pinned; never a CUDA build
#   install_cpu_deps [LOCK...]             requirements-cpu.lock, then each LOCK (its pins win),
#                                          requirements-dev.lock, torchvision + its guard
# All pip installs of packages other than torch are --no-deps: pip never resolves torch from
# sglang's metadata (a CUDA build).

die() { echo "$SETUP_NAME: error: $*" >&2; exit 1; }
log() { echo "[$SETUP_TAG] $*"; }

require_python311() {  # sets PY
  PY="${PYTHON:-python3}"
  command -v "$PY" >/dev/null || die "no '$PY' on PATH; Python 3.11 is required"
  local pyver
  pyver=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  [ "$pyver" = "3.11" ] || die "Python $pyver is not supported: sglang==$SGLANG_VERSION ships only a cp311 wheel; use Python 3.11 (set PYTHON=python3.11)"
}

make_venv() {  # creates $VENV if needed; defines PIP
  if [ ! -x "$VENV/bin/python" ]; then
    log "creating $VENV"
    "$PY" -m venv "$VENV" || die "could not create the virtual environment at $VENV"
  fi
  PIP=("$VENV/bin/python" -m pip --disable-pip-version-check -q)
}

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

install_cpu_torch() {  # install_cpu_torch VERSION
  # torch first, exactly pinned: on this machine kind pip takes the CPU build from local disk.
  # Never let pip resolve torch from a range: that would pull a multi-GB CUDA build.
  have torch "$1" || pip_install "torch==$1"
  "$VENV/bin/python" -c 'import torch, sys; sys.exit(0 if torch.version.cuda is None else 1)' \
    || die "torch in $VENV is a CUDA build; the CPU path needs the CPU build of torch==$1"
}

install_cpu_deps() {  # install_cpu_deps [LOCK...]
  # Pure-Python (and CPU) dependencies that importing the server needs, exactly pinned.
  pip_install --no-deps -r requirements-cpu.lock
  local lock
  for lock in "$@"; do pip_install --no-deps -r "$lock"; done
  pip_install --no-deps -r requirements-dev.lock
  # torchvision: sglang/srt/utils/common.py imports torchvision.io unconditionally. The registry's
  # torchvision is linked against CUDA torch and fails to import beside CPU torch
  # ("operator torchvision::nms does not exist"). We install the real package and guard its fake-op
  # registrations (scripts/fix_torchvision.py) rather than shipping a stub: every torchvision API
  # that sglang or transformers touch stays the real one, and the guard is a no-op where the ops load.
  have torchvision 0.28.0 || pip_install --no-deps "torchvision==0.28.0"
  "$VENV/bin/python" scripts/fix_torchvision.py
}
