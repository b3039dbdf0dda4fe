#!/usr/bin/env bash
# Build sglang 0.5.23 (upstream main) environments on CPU, beside the pinned .venv.
#
#   scripts/setup_main.sh            .venv-main: the stock arm `main` (issue 17): stock 0.5.23 plus only
#                                    the HARNESS-ONLY fixes of patches-main/series-stock
#   scripts/setup_main.sh --islands  .venv-main-islands: 0.5.23 with the main islands series
#                                    (patches-main/series) and our modules (python-main/sglang/ and the
#                                    shared ones of python/sglang/, scripts/patches_main.py)
#   VENV=DIR scripts/setup_main.sh [--islands]   another directory (never .venv-main for --islands)
#
# Installed the way scripts/setup.sh installs the pinned release (the shared steps are in
# scripts/lib_install.sh): the CPU build of torch first, exactly pinned, then every other package
# with --no-deps, so pip never resolves torch from sglang's metadata (torch==2.14.1, a CUDA build).
# The series is re-applied to pristine files on every run (scripts/patches_main.py apply --series
# stock|islands). Idempotent. The pristine wheel is cached in .cache/wheels-main/ (sha256 checked).
# The two environments never share files, so the stock arm stays stock whatever the islands one gets.
#
# What differs from .venv, and why:
# - torch 2.13.0+cpu, not sglang 0.5.23's torch==2.14.1: the only CPU build of torch this machine's
#   package sources hold is 2.13.0 (the registry's 2.14.1 is a CUDA build).
# - sgl_kernel: the registry's sglang-kernel==0.4.10 (what 0.5.23 pins) is a CUDA-only wheel
#   (sm90/sm100 common_ops, no CPU extension), and no CPU build of the kernel package is served.
#   upstream builds its CPU kernels from source (sgl-kernel's pyproject_cpu.toml, for Xeon/AMX).
#   In its place a .pth puts islands_harness/main_compat/site on sys.path of these venvs only: a
#   harness-only `sgl_kernel` stand-in whose CPU functions are small pure-torch equivalents
#   (islands_harness/main_compat/README.md; tests in test/tools/test_main_compat.py).
# - requirements-main-cpu.lock overrides requirements-cpu.lock where sglang 0.5.23 pins another
#   version (transformers 5.19, tokenizers 0.23, ...).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
SGLANG_VERSION="0.5.23"
TORCH_VERSION="2.13.0"
SERIES=stock

case "${1:-}" in
  -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
  --islands) SERIES=islands ;;
  "") ;;
  *) echo "setup_main.sh: error: unknown argument '$1' (try --help)" >&2; exit 2 ;;
esac
if [ "$SERIES" = islands ]; then
  VENV="${VENV:-$ROOT/.venv-main-islands}"
  # The stock arm is measured as upstream main: it never gets the islands series.
  if [ "$(cd "$(dirname "$VENV")" 2>/dev/null && pwd)/$(basename "$VENV")" = "$ROOT/.venv-main" ]; then
    echo "setup_main.sh: error: .venv-main is the stock arm; --islands builds .venv-main-islands (or VENV=DIR)" >&2
    exit 2
  fi
else
  VENV="${VENV:-$ROOT/.venv-main}"
fi

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

# The series (stock: patches-main/series-stock; islands: patches-main/series and our modules),
# on pristine files from the wheel.
"$VENV/bin/python" scripts/patches_main.py apply --series "$SERIES" \
  || die "the $SERIES series of patches-main/ was not applied (see the message above)"

IMPORTS='import sglang.launch_server, sglang.srt.managers.scheduler, sglang.srt.models.laguna'
[ "$SERIES" = islands ] && IMPORTS="$IMPORTS, sglang.srt.mem_cache.swa_island_formulas"
SGLANG_USE_CPU_ENGINE=1 "$VENV/bin/python" -c "$IMPORTS" \
  || die "sglang $SGLANG_VERSION does not import in $VENV (see the traceback above)"
log "done in $(( $(date +%s) - t0 )) s: $("$VENV/bin/python" -c 'import sglang; print("sglang", sglang.__version__)') (cpu, $SERIES series) in $VENV"
