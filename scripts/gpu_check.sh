#!/usr/bin/env bash
# What CPU cannot prove, in one call on a GPU machine (see README "GPU"):
#   1. the island unit tests with the real stack on CUDA tensors, page sizes 1/16/64 with the real
#      Triton allocator kernels (ISLANDS_TEST_DEVICE=cuda; on CPU they run under TRITON_INTERPRET);
#   2. the two-boot equality gate on a GPU attention backend, page 64, CUDA graphs, the overlap
#      scheduler, fp8 KV and a speculative mode (scripts/gpu_gate.sh);
#   3. a short admission benchmark (benchmarks/gpu_bench.sh --quick) when --model is given.
#
#   scripts/gpu_check.sh [--model PATH] [--out DIR] [--skip-setup]
#
# Needs a machine where `scripts/setup.sh --gpu` can install upstream's CUDA dependencies, or an
# environment that already has them (--skip-setup, VENV=...). Prints one PASS/FAIL line per step and
# exits non-zero if any step failed. Everything it prints is also written to OUT/gpu_check.log.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
MODEL="" OUT="${OUT:-$ROOT/.work/gpu_check}" SETUP=1
while [ $# -gt 0 ]; do
  case "$1" in
    --model) MODEL="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --skip-setup) SETUP=0; shift ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "gpu_check.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
  esac
done
mkdir -p "$OUT"
exec > >(tee "$OUT/gpu_check.log") 2>&1
command -v nvidia-smi >/dev/null || { echo "gpu_check.sh: error: no nvidia-smi: this is not a GPU machine" >&2; exit 2; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
[ "$SETUP" = 1 ] && { scripts/setup.sh --gpu || { echo "FAIL setup"; exit 1; }; }
PY="${VENV:-$ROOT/.venv}/bin/python"
fail=0
step() {  # step NAME CMD...
  local name="$1"; shift
  local t0=$(date +%s)
  if "$@"; then echo "PASS $name ($(( $(date +%s) - t0 )) s)"; else echo "FAIL $name ($(( $(date +%s) - t0 )) s)"; fail=1; fi
}
step "unit tests on cuda" env ISLANDS_TEST_DEVICE=cuda SGLANG_USE_CPU_ENGINE=0 TRITON_INTERPRET=0 \
  "$PY" -m pytest -q -m "not server" test/test_chunk_islands.py test/test_decode_islands.py test/test_island_formulas.py
step "equality gate (gpu)" scripts/gpu_gate.sh
if [ -n "$MODEL" ]; then
  step "admission benchmark (gpu, quick)" benchmarks/gpu_bench.sh --model "$MODEL" --quick
fi
echo "gpu_check: $([ $fail = 0 ] && echo all steps passed || echo some steps FAILED); log: $OUT/gpu_check.log"
exit $fail
