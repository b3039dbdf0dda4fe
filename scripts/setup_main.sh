#!/usr/bin/env bash
# Build .venv-main: stock sglang 0.5.23 (upstream main) on CPU, beside the pinned .venv (issue 17).
#
#   scripts/setup_main.sh        builds (or refreshes) .venv-main; VENV=DIR picks another directory
#
# Installed the way scripts/setup.sh installs the pinned release (the shared steps are in
# scripts/lib_install.sh): the CPU build of torch first, exactly pinned, then every other package
# with --no-deps, so pip never resolves torch from sglang's metadata (torch==2.14.1, a CUDA build).
# No patch or module of the islands series is applied: this is upstream main as a user gets it,
# plus the HARNESS-ONLY upstream bug fixes of patches-main/ (scripts/patches_main.py; today the
# torch_native SWA-read fix, our series' 0001), re-applied to pristine files on every run.
# Idempotent. The pristine wheel is cached in .cache/wheels-main/ (sha256 checked).
#
# What differs from .venv, and why:
# - torch 2.13.0+cpu, not sglang 0.5.23's torch==2.14.1: the only CPU build of torch this machine's
#   package sources hold is 2.13.0 (the registry's 2.14.1 is a CUDA build).
# - sgl_kernel: the registry's sglang-kernel==0.4.10 (what 0.5.23 pins) is a CUDA-only wheel
#   (sm90/sm100 common_ops, no CPU extension), and no CPU build of the kernel package is served.
#   upstream builds its CPU kernels from source (sgl-kernel's pyproject_cpu.toml, for Xeon/AMX).
#   In its place a .pth puts islands_harness/main_compat/site on sys.path of .venv-main only: a
#   harness-only `sgl_kernel` stand-in whose CPU functions are small pure-torch equivalents
#   (islands_harness/main_compat/README.md; tests in test/tools/test_main_compat.py).
# - requirements-main-cpu.lock overrides requirements-cpu.lock where sglang 0.5.23 pins another
#   version (transformers 5.19, tokenizers 0.23, ...).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
SGLANG_VERSION="0.5.23"
TORCH_VERSION="2.13.0"
VENV="${VENV:-$ROOT/.venv-main}"

case "${1:-}" in
  -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
  "") ;;
  *) echo "setup_main.sh: error: unknown argument '$1' (try --help)" >&2; exit 2 ;;
esac

SETUP_NAME=setup_main.sh SETUP_TAG=setup_main
# shellcheck source=scripts/lib_install.sh
. "$ROOT/scripts/lib_install.sh"  # die, log, require_python311, make_venv, pip_install, have, install_cpu_*
require_python311

t0=$(date +%s)
make_venv
install_cpu_torch "$TORCH_VERSION"
WHEEL="$("$VENV/bin/python" scripts/patches_main.py fetch)" \
  || die "could not get the pristine sglang==$SGLANG_VERSION wheel (see the message above)"
have sglang "$SGLANG_VERSION" || pip_install --no-deps "$WHEEL"
install_cpu_deps requirements-main-cpu.lock  # its pins win over requirements-cpu.lock's

# The harness-only kernel stand-in, on this venv's path only (never on .venv's).
site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$ROOT/islands_harness/main_compat/site" > "$site/islands_main_compat.pth"

# Harness-only upstream fixes (patches-main/series), on pristine files from the wheel.
"$VENV/bin/python" scripts/patches_main.py apply \
  || die "the harness-only patches-main/ series was not applied (see the message above)"

SGLANG_USE_CPU_ENGINE=1 "$VENV/bin/python" -c \
  'import sglang.launch_server, sglang.srt.managers.scheduler, sglang.srt.models.laguna' \
  || die "sglang $SGLANG_VERSION does not import in $VENV (see the traceback above)"
log "done in $(( $(date +%s) - t0 )) s: $("$VENV/bin/python" -c 'import sglang; print("sglang", sglang.__version__)') (cpu) in $VENV"
