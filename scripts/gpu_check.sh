#!/usr/bin/env bash
# What CPU cannot prove, in one call on a GPU machine (see docs/GPU.md):
#   1. unit: the island unit tests with the real stack on CUDA tensors, page sizes 1/16/64 with the
#      real Triton allocator kernels (ISLANDS_TEST_DEVICE=cuda; on CPU they run under TRITON_INTERPRET);
#   2. hold: the hold benchmark (benchmarks/swa_hold.py, quick and production shapes) on CUDA
#      tensors: commit CPU with real kernel launches, host syncs per commit (torch's detector);
#   3. bench: the seed's headline shape (benchmarks/seed_shape.py): Gemma 4 26B-A4B text built
#      from its config alone (--load-format dummy, --skip-tokenizer-init, token-id prompts; nothing
#      downloaded), fp8 KV, page 64, chunk 16384, cap 48, --max-total-tokens per arm from the
#      planner at the seed's 37 GB; arms upstream_0.17, islands_0.17, then upstream_0.32 and
#      upstream_knobs_0.17 while time remains; its tables are printed at the end. With --model
#      (not with --bundle) also the real-checkpoint admission benchmark (gpu_bench.sh, 0.17 arms,
#      96 clients);
#   4. gate: the two-boot equality gate on a GPU attention backend, page 64, CUDA graphs, the
#      overlap scheduler, fp8 KV and a speculative mode (scripts/gpu_gate.sh), with what is left.
#
#   scripts/gpu_check.sh [--model PATH] [--out DIR] [--skip-setup] [--bundle DIR] [--steps LIST]
#                        [--budget S]
#
# Needs a machine where `scripts/setup.sh --gpu` can install upstream's CUDA dependencies, or an
# environment that already has them (--skip-setup, VENV=...). --bundle DIR: a machine with no
# network (the device tool's): unpacks what scripts/gpu_bundle.sh put in DIR into /tmp/islands-site
# and uses the machine's python3 (its CUDA torch and triton). A bundle built --with-kernel carries
# sgl-kernel for Hopper without FA3, so bench and gate run Gemma 4 on the triton backend without
# NGRAM (a tvm-ffi JIT extension) and without a grammar backend; without it they report SKIP.
# --steps unit,hold,bench,gate picks steps (default: all; they run in that order).
# --budget S (default 540): the whole run ends inside S seconds. Every step runs under `timeout`:
# unit <= 200 s, each hold run <= 120 s, bench <= BENCH_S (default 330) leaving GATE_MIN_S
# (default 180) for the gate when the gate is wanted (else all that is left), gate = what is left
# (GATE_BUDGET caps it);
# a step with too little time left is reported SKIP with the numbers. So
# `--bundle .gpu --steps bench,gate` is bench (two arms) then gate inside 9 minutes, and
# `--steps bench --budget 540` gives the bench the whole call (more arms, longer windows).
# Prints one PASS/FAIL/SKIP line per step and exits non-zero if any step failed. Everything it
# prints is also written to OUT/gpu_check.log; benchmark JSON, markdown and server logs land in OUT.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
MODEL="" OUT="${OUT:-$ROOT/.work/gpu_check}" SETUP=1 BUNDLE="" STEPS="unit,hold,bench,gate" BUDGET=540
BENCH_S="${BENCH_S:-330}" GATE_MIN_S="${GATE_MIN_S:-180}"
T0=$(date +%s)
while [ $# -gt 0 ]; do
  case "$1" in
    --model) MODEL="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --skip-setup) SETUP=0; shift ;;
    --bundle) BUNDLE="$2"; SETUP=0; shift 2 ;;
    --steps) STEPS="$2"; shift 2 ;;
    --budget) BUDGET="$2"; shift 2 ;;
    -h|--help) sed -n '2,35p' "$0"; exit 0 ;;
    *) echo "gpu_check.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
  esac
done
[[ "$BUDGET" =~ ^[0-9]+$ && "$BENCH_S" =~ ^[0-9]+$ && "$GATE_MIN_S" =~ ^[0-9]+$ ]] || {
  echo "gpu_check.sh: --budget, BENCH_S and GATE_MIN_S must be whole seconds" >&2; exit 2; }
for s_ in ${STEPS//,/ }; do
  case "$s_" in unit|hold|bench|gate) ;; *) echo "gpu_check.sh: unknown step '$s_' (unit, hold, bench, gate)" >&2; exit 2 ;; esac
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
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
step() {  # step NAME CMD...   (CMD normally starts with `timeout`)
  local name="$1"; shift
  local t0=$(date +%s) rc
  "$@"; rc=$?
  case "$rc" in
    0) echo "PASS $name ($(( $(date +%s) - t0 )) s)" ;;
    124|137) echo "FAIL $name (timed out after $(( $(date +%s) - t0 )) s)"; fail=1 ;;
    *) echo "FAIL $name (exit $rc, $(( $(date +%s) - t0 )) s)"; fail=1 ;;
  esac
}
want() { case ",$STEPS," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }
# limit CAP RESERVE MIN NAME: seconds for a step (at most CAP, leaving RESERVE for later steps);
# prints nothing and reports SKIP when that is under MIN
limit() {
  local lim=$(( $(left) - $2 - 5 ))
  [ "$lim" -gt "$1" ] && lim=$1
  if [ "$lim" -lt "$3" ]; then
    echo "SKIP $4: $(( $(left) )) s left of the ${BUDGET} s budget (needs $3 s$([ "$2" -gt 0 ] && echo ", $2 s kept for later steps"))" >&2
    return 1
  fi
  echo "$lim"
}
gate_reserve=0 bench_cap=$BUDGET  # without the gate the bench may take the whole budget
want gate && { gate_reserve=$GATE_MIN_S; bench_cap=$BENCH_S; }
echo "gpu_check: steps $STEPS, budget ${BUDGET} s ($(left) s left after setup); bench <= ${bench_cap} s$(want gate && echo ", gate >= ${GATE_MIN_S} s")"
if want unit && lim=$(limit 200 "$gate_reserve" 60 "unit tests on cuda"); then
  step "unit tests on cuda" timeout --kill-after=10 "$lim" env ISLANDS_TEST_DEVICE=cuda SGLANG_USE_CPU_ENGINE=0 TRITON_INTERPRET=0 \
    "$PY" -m pytest -q -rfE -p no:cacheprovider -m "not server" --junitxml "$OUT/unit_cuda.xml" \
    test/engine/test_chunk_islands.py test/engine/test_decode_islands.py \
    test/engine/test_island_formulas.py
fi
HOLD=(env ISLANDS_TEST_DEVICE=cuda SGLANG_USE_CPU_ENGINE=0 TRITON_INTERPRET=0 PYTHONUNBUFFERED=1 "$PY" benchmarks/swa_hold.py)
if want hold && lim=$(limit 120 "$gate_reserve" 30 "hold benchmark on cuda (quick)"); then
  step "hold benchmark on cuda (quick)" timeout --kill-after=10 "$lim" "${HOLD[@]}" --quick --repeats 7 \
    --json "$OUT/swa_hold_quick_cuda.json" --md "$OUT/swa_hold_quick_cuda.md"
fi
if want hold && lim=$(limit 120 "$gate_reserve" 30 "hold benchmark on cuda (production)"); then
  step "hold benchmark on cuda (production)" timeout --kill-after=10 "$lim" "${HOLD[@]}" --production --repeats 3 \
    --timing-decode-tokens 8 --json "$OUT/swa_hold_production_cuda.json" --md "$OUT/swa_hold_production_cuda.md"
fi
SERVE_ENV=()
# Offline: the bundle is patched already; no FA3 (GPT-OSS), no NGRAM, no grammar backend.
# SGLANG_IS_FLASHINFER_AVAILABLE=false: upstream's own switch, so nothing picks a flashinfer
# path because the import placeholder makes find_spec("flashinfer") succeed.
[ -n "$BUNDLE" ] && SERVE_ENV=(SGLANG_IS_FLASHINFER_AVAILABLE=false)
if ! "$PY" -c 'import importlib.machinery as m, sys; sys.exit(m.PathFinder.find_spec("sgl_kernel") is None)'; then
  why="sgl-kernel is not installed here, so the server cannot boot on CUDA (build the bundle with --with-kernel)"
  want bench && echo "SKIP seed-shape benchmark (gpu): $why"
  want gate && echo "SKIP equality gate (gpu): $why"
else
  if want bench && lim=$(limit "$bench_cap" "$gate_reserve" 120 "seed-shape benchmark (gpu)"); then
    step "seed-shape benchmark (gpu, dummy-weight gemma-4-26b-a4b)" timeout --kill-after=30 "$lim" \
      env "${SERVE_ENV[@]}" PYTHONUNBUFFERED=1 "$PY" benchmarks/seed_shape.py \
      --out "$OUT/seed_shape" --budget $(( lim - 20 ))
  fi
  if want bench && [ -n "$MODEL" ]; then
    if [ -n "$BUNDLE" ]; then
      echo "SKIP admission benchmark (gpu, real checkpoint): needs a real model, which a bundle does not carry"
    elif lim=$(limit 100000 "$gate_reserve" 300 "admission benchmark (gpu, real checkpoint)"); then
      step "admission benchmark (gpu, real checkpoint)" timeout --kill-after=30 "$lim" \
        benchmarks/gpu_bench.sh --model "$MODEL" --arms upstream_0.17,islands_0.17 \
        --concurrencies 96 --prompts-per-client 1 --out "$OUT/gpu_bench"
    fi
  fi
  if want gate && lim=$(limit "${GATE_BUDGET:-100000}" 0 "$GATE_MIN_S" "equality gate (gpu)"); then
    # the gate skips a model with less than GPU_GATE_MIN_LEFT s left of its own budget
    GATE_ENV=(OUT="$OUT" PYTHON="$PY" GPU_GATE_MIN_LEFT="${GPU_GATE_MIN_LEFT:-$(( GATE_MIN_S - 20 ))}")
    if [ -n "$BUNDLE" ]; then
      step "equality gate (gpu, gemma4, offline bundle)" timeout --kill-after=20 "$(( lim + 10 ))" \
        env "${SERVE_ENV[@]}" "${GATE_ENV[@]}" scripts/gpu_gate.sh --models gemma4 --no-apply --no-spec \
        --extra-server-args "--grammar-backend none --sampling-backend pytorch" --budget "$lim"
    else
      step "equality gate (gpu)" timeout --kill-after=20 "$(( lim + 10 ))" \
        env "${GATE_ENV[@]}" scripts/gpu_gate.sh --budget "$lim"
    fi
  fi
fi
if [ -f "$OUT/seed_shape/seed_shape.md" ]; then
  echo; echo "== seed-shape tables ($OUT/seed_shape/seed_shape.md)"; cat "$OUT/seed_shape/seed_shape.md"
fi
echo "gpu_check: $([ $fail = 0 ] && echo all steps passed || echo some steps FAILED) in $(( $(date +%s) - T0 )) s of ${BUDGET}; log: $OUT/gpu_check.log"
exit $fail
