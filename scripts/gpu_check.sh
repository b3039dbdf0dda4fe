#!/usr/bin/env bash
# What CPU cannot prove, in one call on a GPU machine (see README "GPU"):
#   1. the island unit tests with the real stack on CUDA tensors, page sizes 1/16/64 with the real
#      Triton allocator kernels (ISLANDS_TEST_DEVICE=cuda; on CPU they run under TRITON_INTERPRET);
#   2. the hold benchmark (benchmarks/swa_hold.py, quick and production shapes) on CUDA tensors:
#      commit CPU with real kernel launches, and host syncs per commit counted by torch's own
#      CUDA sync detector;
#   3. the two-boot equality gate on a GPU attention backend, page 64, CUDA graphs, the overlap
#      scheduler, fp8 KV and a speculative mode (scripts/gpu_gate.sh);
#   4. a short admission benchmark (benchmarks/gpu_bench.sh --quick) when --model is given.
#
#   scripts/gpu_check.sh [--model PATH] [--out DIR] [--skip-setup] [--bundle DIR] [--steps LIST]
#
# Needs a machine where `scripts/setup.sh --gpu` can install upstream's CUDA dependencies, or an
# environment that already has them (--skip-setup, VENV=...). --bundle DIR: a machine with no
# network (the device tool's): unpacks what scripts/gpu_bundle.sh put in DIR into /tmp/islands-site
# and uses the machine's python3 (its CUDA torch and triton). A bundle built --with-kernel carries
# sgl-kernel for Hopper without FA3, so step 3 runs Gemma 4 on the triton backend without NGRAM
# (a tvm-ffi JIT extension) and without a grammar backend; without it, steps 3 and 4 report SKIP.
# --steps unit,hold,gate,bench picks steps (default: all). Prints one PASS/FAIL/SKIP line per
# step and exits non-zero if any step failed. Everything it prints is also written to
# OUT/gpu_check.log; the benchmark's JSON and markdown land in OUT too.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
MODEL="" OUT="${OUT:-$ROOT/.work/gpu_check}" SETUP=1 BUNDLE="" STEPS="unit,hold,gate,bench"
while [ $# -gt 0 ]; do
  case "$1" in
    --model) MODEL="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --skip-setup) SETUP=0; shift ;;
    --bundle) BUNDLE="$2"; SETUP=0; shift 2 ;;
    --steps) STEPS="$2"; shift 2 ;;
    -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
    *) echo "gpu_check.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
  esac
done
mkdir -p "$OUT"
exec > >(tee "$OUT/gpu_check.log") 2>&1
command -v nvidia-smi >/dev/null || { echo "gpu_check.sh: error: no nvidia-smi: this is not a GPU machine" >&2; exit 2; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
[ "$SETUP" = 1 ] && { scripts/setup.sh --gpu || { echo "FAIL setup"; exit 1; }; }
PY="${VENV:-$ROOT/.venv}/bin/python"
if [ -n "$BUNDLE" ]; then
  SITE=/tmp/islands-site
  [ -f "$BUNDLE/site.tar.xz" ] || { echo "gpu_check.sh: error: $BUNDLE/site.tar.xz missing (run scripts/gpu_bundle.sh here first)" >&2; exit 2; }
  rm -rf "$SITE" && mkdir -p "$SITE"
  tar -C "$SITE" -xJf "$BUNDLE/site.tar.xz" || { echo "FAIL bundle install"; exit 1; }
  export PYTHONPATH="$ROOT/scripts/gpu_offline:$SITE:$ROOT${PYTHONPATH:+:$PYTHONPATH}"
  export ISLANDS_ABSENT_KERNELS="sgl_kernel,flashinfer"  # placeholders only where not installed
  PY=python3
fi
"$PY" -c 'import torch, triton; print("torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__, torch.cuda.get_device_name(0))'
fail=0
step() {  # step NAME CMD...
  local name="$1"; shift
  local t0=$(date +%s)
  if "$@"; then echo "PASS $name ($(( $(date +%s) - t0 )) s)"; else echo "FAIL $name ($(( $(date +%s) - t0 )) s)"; fail=1; fi
}
want() { case ",$STEPS," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }
want unit && step "unit tests on cuda" env ISLANDS_TEST_DEVICE=cuda SGLANG_USE_CPU_ENGINE=0 TRITON_INTERPRET=0 \
  timeout 200 "$PY" -m pytest -q -rfE -p no:cacheprovider -m "not server" --junitxml "$OUT/unit_cuda.xml" \
  test/test_chunk_islands.py test/test_decode_islands.py test/test_island_formulas.py
HOLD=(timeout 120 env ISLANDS_TEST_DEVICE=cuda SGLANG_USE_CPU_ENGINE=0 TRITON_INTERPRET=0 PYTHONUNBUFFERED=1 "$PY" benchmarks/swa_hold.py)
want hold && step "hold benchmark on cuda (quick)" "${HOLD[@]}" --quick --repeats 7 \
  --json "$OUT/swa_hold_quick_cuda.json" --md "$OUT/swa_hold_quick_cuda.md"
want hold && step "hold benchmark on cuda (production)" "${HOLD[@]}" --production --repeats 3 --timing-decode-tokens 8 \
  --json "$OUT/swa_hold_production_cuda.json" --md "$OUT/swa_hold_production_cuda.md"
if ! "$PY" -c 'import importlib.machinery as m, sys; sys.exit(m.PathFinder.find_spec("sgl_kernel") is None)'; then
  want gate && echo "SKIP equality gate (gpu): sgl-kernel is not installed here, so the server cannot boot on CUDA (build the bundle with --with-kernel)"
  want bench && [ -n "$MODEL" ] && echo "SKIP admission benchmark (gpu, quick): same reason"
elif [ -n "$BUNDLE" ]; then
  # Offline: the bundle is patched already; no FA3 (GPT-OSS), no NGRAM, no grammar backend.
  # SGLANG_IS_FLASHINFER_AVAILABLE=false: upstream's own switch, so nothing picks a flashinfer
  # path because the import placeholder makes find_spec("flashinfer") succeed.
  want gate && step "equality gate (gpu, gemma4, offline bundle)" env PYTHON="$PY" OUT="$OUT" \
    SGLANG_IS_FLASHINFER_AVAILABLE=false scripts/gpu_gate.sh --models gemma4 --no-apply --no-spec \
    --extra-server-args "--grammar-backend none --sampling-backend pytorch" \
    --budget "${GATE_BUDGET:-570}"
  want bench && [ -n "$MODEL" ] && echo "SKIP admission benchmark (gpu, quick): needs a real model, which a bundle does not carry"
else
  want gate && step "equality gate (gpu)" scripts/gpu_gate.sh
  if want bench && [ -n "$MODEL" ]; then
    step "admission benchmark (gpu, quick)" benchmarks/gpu_bench.sh --model "$MODEL" --quick
  fi
fi
echo "gpu_check: $([ $fail = 0 ] && echo all steps passed || echo some steps FAILED); log: $OUT/gpu_check.log"
exit $fail
