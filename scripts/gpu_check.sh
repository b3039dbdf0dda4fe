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
#   4. main: the same seed shape on sglang 0.5.23 (benchmarks/seed_shape.py --target 0.5.23):
#      arms main_0.17 (stock) and main_islands_0.17 (the islands series, --enable-swa-islands),
#      then main_0.32 and main_islands_0.32 while time remains; its tables are printed at the end;
#   5. gate: the two-boot equality gate on a GPU attention backend, page 64, CUDA graphs, the
#      overlap scheduler, fp8 KV and a speculative mode (scripts/gpu_gate.sh), with what is left;
#   6. spec: the 0.5.23 seed shape decoding speculatively (benchmarks/seed_shape.py --target
#      0.5.23 --speculative ngram: NGRAM, 16 draft tokens a step), main_0.17 then
#      main_islands_0.17; SKIP where sglang-kernel does not load (as main) or NGRAM's corpus (a
#      tvm-ffi JIT extension) cannot build.
#
#   scripts/gpu_check.sh [--model PATH] [--out DIR] [--skip-setup] [--bundle DIR]
#                        [--bundle-main DIR] [--steps LIST] [--budget S]
#
# Needs a machine where `scripts/setup.sh --gpu` can install upstream's CUDA dependencies, or an
# environment that already has them (--skip-setup, VENV=...). --bundle DIR: a machine with no
# network (the device tool's): unpacks what scripts/gpu_bundle.sh put in DIR into /tmp/islands-site
# and uses the machine's python3 (its CUDA torch and triton). A bundle built --with-kernel carries
# sgl-kernel for Hopper without FA3, so bench and gate run Gemma 4 on the triton backend without
# NGRAM (a tvm-ffi JIT extension) and without a grammar backend; without it they report SKIP.
# --bundle-main DIR: the same for sglang 0.5.23 (`scripts/gpu_bundle.sh --target 0.5.23
# --with-kernel`, 46 MB): unpacked into /tmp/islands-main-site, where main/ (stock) and
# main_islands/ (main/ + the islands overlay) each get an interpreter (bin/python-main,
# bin/python-main-islands: the machine's python3 on that tree); without --steps it runs `main`
# alone (the two bundles do not fit in one call's 64 MiB). Without a bundle the main step serves
# with MAIN_PYTHON and MAIN_ISLANDS_PYTHON (default .venv-main's and .venv-main-islands'; on a GPU
# they need a CUDA torch and sglang-kernel). The step first imports sglang-kernel in both and
# reports SKIP with the reason where it does not load: 0.5.23 pins sglang-kernel 0.4.10, built
# for torch 2.14.1, whose extensions need libtorch symbols that torch 2.11 (the lent machines'
# python) lacks.
# --steps unit,hold,bench,main,gate,spec picks steps (default: unit,hold,bench,gate; they run in
# that order, spec after main). --budget S (default 540): the whole run ends inside S seconds. Every step runs under
# `timeout`: unit <= 200 s, each hold run <= 120 s, bench <= BENCH_S (default 330) leaving
# MAIN_MIN_S (default 240) for main when it is wanted and GATE_MIN_S (default 180) for the gate
# when the gate is wanted (else all that is left), main <= MAIN_S (default 330) leaving GATE_MIN_S
# when the gate is wanted (else all that is left), gate = what is left (GATE_BUDGET caps it);
# a step with too little time left is reported SKIP with the numbers. So
# `--bundle .gpu --steps bench,gate` is bench (two arms) then gate inside 9 minutes,
# `--steps bench --budget 540` gives the bench the whole call (more arms, longer windows), and
# `--bundle-main .gpu-main --steps main --budget 540` gives 0.5.23 the whole call (main_0.17,
# main_islands_0.17, then main_0.32: three arms of up to 165 s).
# Prints one PASS/FAIL/SKIP line per step and exits non-zero if any step failed. Everything it
# prints is also written to OUT/gpu_check.log; benchmark JSON, markdown and server logs land in OUT.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
MODEL="" OUT="${OUT:-$ROOT/.work/gpu_check}" SETUP=1 BUNDLE="" BUNDLE_MAIN="" STEPS="" BUDGET=540
BENCH_S="${BENCH_S:-330}" GATE_MIN_S="${GATE_MIN_S:-180}" MAIN_S="${MAIN_S:-330}" MAIN_MIN_S="${MAIN_MIN_S:-240}"
T0=$(date +%s)
while [ $# -gt 0 ]; do
  case "$1" in
    --model) MODEL="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --skip-setup) SETUP=0; shift ;;
    --bundle) BUNDLE="$2"; SETUP=0; shift 2 ;;
    --bundle-main) BUNDLE_MAIN="$2"; shift 2 ;;
    --steps) STEPS="$2"; shift 2 ;;
    --budget) BUDGET="$2"; shift 2 ;;
    -h|--help) sed -n '2,55p' "$0"; exit 0 ;;
    *) echo "gpu_check.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
  esac
done
# --bundle-main alone is a 0.5.23 call: nothing of 0.5.15.post1 is there to set up or test
[ -n "$BUNDLE_MAIN" ] && [ -z "$BUNDLE" ] && { SETUP=0; STEPS="${STEPS:-main}"; }
STEPS="${STEPS:-unit,hold,bench,gate}"
for n_ in "$BUDGET" "$BENCH_S" "$GATE_MIN_S" "$MAIN_S" "$MAIN_MIN_S"; do
  [[ "$n_" =~ ^[0-9]+$ ]] || {
    echo "gpu_check.sh: --budget, BENCH_S, GATE_MIN_S, MAIN_S and MAIN_MIN_S must be whole seconds" >&2; exit 2; }
done
for s_ in ${STEPS//,/ }; do
  case "$s_" in unit|hold|bench|main|gate|spec) ;; *) echo "gpu_check.sh: unknown step '$s_' (unit, hold, bench, main, gate, spec)" >&2; exit 2 ;; esac
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
MAIN_SITE=""
MAIN_PY="${MAIN_PYTHON:-$ROOT/.venv-main/bin/python}" MAIN_ISL_PY="${MAIN_ISLANDS_PYTHON:-$ROOT/.venv-main-islands/bin/python}"
# the 0.5.23 benchmark's driver: an interpreter whose `sglang` has our formulas (0.5.15.post1's
# environment, or a bare python3 with python/ on its path: scripts/swa_pool_plan.py's way)
MAIN_DRIVER=("$PY")
if [ -n "$BUNDLE_MAIN" ]; then
  MAIN_SITE="${ISLANDS_MAIN_SITE:-/tmp/islands-main-site}"
  [ -f "$BUNDLE_MAIN/site.tar.xz" ] || { echo "gpu_check.sh: error: $BUNDLE_MAIN/site.tar.xz missing (run scripts/gpu_bundle.sh --target 0.5.23 here first)" >&2; exit 2; }
  rm -rf "$MAIN_SITE" && mkdir -p "$MAIN_SITE/bin"
  tar -C "$MAIN_SITE" -xJf "$BUNDLE_MAIN/site.tar.xz" && cp -a "$MAIN_SITE/main" "$MAIN_SITE/main_islands" \
    && cp -a "$MAIN_SITE/main_islands.overlay/." "$MAIN_SITE/main_islands/" \
    || { echo "FAIL bundle install (0.5.23)"; exit 1; }
  # one interpreter per arm: the machine's python3 (its CUDA torch and triton) on that arm's tree;
  # PYTHONPATH is set, not appended to, so the driver's own path never reaches a server
  for arm_ in main main_islands; do
    cat > "$MAIN_SITE/bin/python-${arm_//_/-}" <<WRAP
#!/usr/bin/env bash
export PYTHONPATH="$ROOT/scripts/gpu_offline:$MAIN_SITE/$arm_:$MAIN_SITE/common"
export ISLANDS_ABSENT_KERNELS="sgl_kernel,flashinfer" SGLANG_IS_FLASHINFER_AVAILABLE=false
exec python3 "\$@"
WRAP
    chmod +x "$MAIN_SITE/bin/python-${arm_//_/-}"
  done
  MAIN_PY="$MAIN_SITE/bin/python-main" MAIN_ISL_PY="$MAIN_SITE/bin/python-main-islands"
  MAIN_DRIVER=(env "PYTHONPATH=$ROOT/python:$MAIN_SITE/common:$ROOT" python3)
  echo "0.5.23 bundle: $(tr -d '\n ' < "$MAIN_SITE/bundle.json" | cut -c1-160)..."
fi
if [ "$SETUP" = 1 ] || [ -n "$BUNDLE" ] || [ -x "$PY" ]; then
  "$PY" -c 'import torch, triton; print("torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__, torch.cuda.get_device_name(0))'
else
  python3 -c 'import torch, triton; print("torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__, torch.cuda.get_device_name(0))'
fi
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
# without a later step the bench (or main) may take the whole budget
gate_reserve=0 bench_cap=$BUDGET bench_reserve=0 main_cap=$BUDGET
want gate && { gate_reserve=$GATE_MIN_S; bench_cap=$BENCH_S; main_cap=$MAIN_S; }
want main && { bench_cap=$BENCH_S; bench_reserve=$MAIN_MIN_S; }
bench_reserve=$(( bench_reserve + gate_reserve ))
echo "gpu_check: steps $STEPS, budget ${BUDGET} s ($(left) s left after setup); $(want bench && echo "bench <= ${bench_cap} s, ")$(want main && echo "main <= ${main_cap} s$(want bench && echo " (>= ${MAIN_MIN_S} s kept)"), ")$(want gate && echo "gate >= ${GATE_MIN_S} s" || echo "no gate")"
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
if { want bench || want gate; } && ! "$PY" -c 'import importlib.machinery as m, sys; sys.exit(m.PathFinder.find_spec("sgl_kernel") is None)'; then
  why="sgl-kernel is not installed here, so the server cannot boot on CUDA (build the bundle with --with-kernel)"
  want bench && echo "SKIP seed-shape benchmark (gpu): $why"
  want gate && echo "SKIP equality gate (gpu): $why"
  KERNEL_0515=0
else
  KERNEL_0515=1
fi
if [ "$KERNEL_0515" = 1 ]; then
  if want bench && lim=$(limit "$bench_cap" "$bench_reserve" 120 "seed-shape benchmark (gpu)"); then
    step "seed-shape benchmark (gpu, dummy-weight gemma-4-26b-a4b)" timeout --kill-after=30 "$lim" \
      env "${SERVE_ENV[@]}" PYTHONUNBUFFERED=1 "$PY" benchmarks/seed_shape.py \
      --out "$OUT/seed_shape" --budget $(( lim - 20 ))
  fi
  if want bench && [ -n "$MODEL" ]; then
    if [ -n "$BUNDLE" ]; then
      echo "SKIP admission benchmark (gpu, real checkpoint): needs a real model, which a bundle does not carry"
    elif lim=$(limit 100000 "$bench_reserve" 300 "admission benchmark (gpu, real checkpoint)"); then
      step "admission benchmark (gpu, real checkpoint)" timeout --kill-after=30 "$lim" \
        benchmarks/gpu_bench.sh --model "$MODEL" --arms upstream_0.17,islands_0.17 \
        --concurrencies 96 --prompts-per-client 1 --out "$OUT/gpu_bench"
    fi
  fi
fi
# main_kernel PY: why sglang-kernel cannot serve 0.5.23 from this interpreter (nothing if it can).
# The real extension registers torch.ops.sgl_kernel.rmsnorm; a placeholder or a stand-in does not.
MAIN_KERNEL_CHECK='
import sys
def why():
    try:
        import torch
    except BaseException as e:
        return f"torch does not import: {type(e).__name__}: {e}"
    from importlib.metadata import requires, version
    try:
        kv = version("sglang-kernel")
        pin = next((r.split(";")[0].strip() for r in requires("sglang-kernel") or ()
                    if r.startswith("torch")), "torch ?")
    except Exception:
        kv = pin = None
    try:
        import sgl_kernel
        if kv is None or getattr(sgl_kernel, "__version__", "") == "0+absent":
            return "sglang-kernel is not installed for this interpreter (a bundle: build it --with-kernel)"
        torch.ops.sgl_kernel.rmsnorm
    except BaseException as e:
        lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()] or [""]
        # sgl_kernel wraps the loader error; keep the line that names the missing symbol
        detail = next((ln for ln in lines[1:] if "undefined symbol" in ln or "Error:" in ln), "")
        msg = (lines[0] + (f" ({detail})" if detail else ""))[:400]
        return (f"sglang-kernel {kv} (built for {pin}) does not load with this python'"'"'s torch "
                f"{torch.__version__}: {type(e).__name__}: {msg}")
    return None
w = why()
print(f"KERNEL-NO: {w}" if w else "KERNEL-OK")
'
main_kernel() {
  local out
  out=$("$1" -c "$MAIN_KERNEL_CHECK" 2>"$OUT/main_kernel_check.err")
  case "$out" in
    *KERNEL-OK*) ;;
    *KERNEL-NO:*) echo "${out##*KERNEL-NO: }" ;;
    *) echo "the sglang-kernel check did not finish: $(tail -n 1 "$OUT/main_kernel_check.err")" ;;
  esac
}
main_why() {  # why the 0.5.23 arms cannot serve here (nothing if they can)
  local p_ w_=""
  for p_ in "$MAIN_PY" "$MAIN_ISL_PY"; do
    [ -n "$w_" ] && break
    if [ ! -x "$p_" ]; then w_="no interpreter $p_ (set MAIN_PYTHON / MAIN_ISLANDS_PYTHON, or --bundle-main)"
    else w_=$(main_kernel "$p_"); [ -n "$w_" ] && w_="$w_ ($p_)"; fi
  done
  echo "$w_"
}
if want main; then
  why=$(main_why)
  if [ -n "$why" ]; then
    echo "SKIP 0.5.23 seed-shape benchmark (gpu): $why"
  elif lim=$(limit "$main_cap" "$gate_reserve" 120 "0.5.23 seed-shape benchmark (gpu)"); then
    step "0.5.23 seed-shape benchmark (gpu, dummy-weight gemma-4-26b-a4b, main vs main islands)" \
      timeout --kill-after=30 "$lim" env PYTHONUNBUFFERED=1 "${MAIN_DRIVER[@]}" benchmarks/seed_shape.py \
      --target 0.5.23 --main-python "$MAIN_PY" --main-islands-python "$MAIN_ISL_PY" \
      --out "$OUT/seed_shape_main" --budget $(( lim - 20 ))
  fi
fi
if want spec; then
  why=$(main_why)
  if [ -z "$why" ] && ! out_=$(timeout 300 "$MAIN_PY" -c 'from sglang.kernels.ops.speculative.ngram_corpus import get_ngram_corpus_cls; get_ngram_corpus_cls()' 2>&1); then
    why="NGRAM's corpus extension does not build: $(echo "$out_" | tail -n 1 | cut -c1-300)"
  fi
  if [ -n "$why" ]; then
    echo "SKIP 0.5.23 speculative seed shape (gpu): $why"
  elif lim=$(limit "$main_cap" "$gate_reserve" 120 "0.5.23 speculative seed shape (gpu)"); then
    step "0.5.23 speculative seed shape (gpu, NGRAM, main vs main islands)" \
      timeout --kill-after=30 "$lim" env PYTHONUNBUFFERED=1 "${MAIN_DRIVER[@]}" benchmarks/seed_shape.py \
      --target 0.5.23 --speculative ngram --arms main_0.17,main_islands_0.17 \
      --main-python "$MAIN_PY" --main-islands-python "$MAIN_ISL_PY" \
      --out "$OUT/seed_shape_spec" --budget $(( lim - 20 ))
  fi
fi
if [ "$KERNEL_0515" = 1 ]; then
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
for d_ in seed_shape seed_shape_main seed_shape_spec; do
  if [ -f "$OUT/$d_/seed_shape.md" ]; then
    echo; echo "== seed-shape tables ($OUT/$d_/seed_shape.md)"; cat "$OUT/$d_/seed_shape.md"
  fi
done
echo "gpu_check: $([ $fail = 0 ] && echo all steps passed || echo some steps FAILED) in $(( $(date +%s) - T0 )) s of ${BUDGET}; log: $OUT/gpu_check.log"
exit $fail
