#!/usr/bin/env bash
# GPU equality gate: the two-boot SWA-islands gate (scripts/equality_gate.py --device cuda) on a
# real GPU serving stack, with tiny random-weight hybrid-SWA models built on the spot (the GPU
# machine has no network). One call, meant to finish inside --budget seconds (default 570).
#
#   scripts/gpu_gate.sh                      Gemma 4 text, then GPT-OSS if the budget allows
#   scripts/gpu_gate.sh --dry-run            print the commands, run nothing
#   scripts/gpu_gate.sh --models gemma4 --full --budget 900
#   scripts/gpu_gate.sh --control            also the negative control (wrong frontier) on Gemma 4
#   scripts/gpu_gate.sh --no-apply --no-spec --extra-server-args "--grammar-backend none"
#                                            what gpu_check.sh --bundle runs (see there)
#
# Each model: two boots, identical except --enable-swa-islands, both with
#   page 64; CUDA graphs on and the overlap scheduler on (sglang's defaults: nothing disables
#   them); fp8 e4m3 KV cache (--kv-cache-dtype fp8_e4m3); bf16 weights; NGRAM speculative
#   decoding (topk 1: with page > 1 this release allows topk > 1 only on flashinfer); chunked
#   prefill 2880 = 15 x (w + p) for w = 128, p = 64 (production: 16384 / 1088 = 15); decode
#   islands every 256 tokens, so the extension links reach 4 decode islands in ~1 k tokens.
# Attention backend: Gemma 4 -> triton (this release accepts only trtllm_mha, which is SM100-only,
# or triton for Gemma 4 on Hopper); GPT-OSS -> fa3.
# The HF oracle runs fp32 on the GPU and only REPORTS (bf16 weights + fp8 KV are not fp32): the
# pass/fail criterion is off == on, byte for byte, like-for-like cache status.
# After each gate the server logs are grepped for what actually ran (CUDA graph, overlap,
# speculative accept lengths, fp8 KV), so a silently disabled feature shows up in the summary.
#
# Needs an NVIDIA GPU and a Python (PYTHON=..., default python3) with sglang 0.5.15.post1's CUDA
# build (sgl-kernel, flashinfer and the rest of its GPU dependencies) and transformers >= 5.12
# (Gemma4TextConfig). The series is applied into that sglang first (scripts/patches.py apply,
# idempotent; it needs the pristine wheel in .cache/wheels or network once).
# Outputs: $OUT (set by the device runner) or .work/gpu-gate: gate logs, JSON summaries, server
# logs. Exit: 0 every gate that ran passed; 1 a gate failed; 2 could not run.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

PY="${PYTHON:-python3}"
GATE_OUT="${OUT:-$ROOT/.work/gpu-gate}"
MODELS="gemma4,gpt-oss"
WORKLOAD="--quick"
BUDGET=570
DRY=0
CONTROL=0
APPLY=1
SPEC=1
EXTRA_SERVER_ARGS=""
WINDOW=128
PAGE=64
CHUNK=2880
INTERVAL=256
MIN_LEFT_FOR_MODEL=${GPU_GATE_MIN_LEFT:-240}

usage() { sed -n '2,30p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) DRY=1 ;;
    --models) MODELS="$2"; shift ;;
    --full) WORKLOAD="" ;;
    --quick) WORKLOAD="--quick" ;;
    --budget) BUDGET="$2"; shift ;;
    --control) CONTROL=1 ;;
    --no-apply) APPLY=0 ;;          # the installed sglang is already patched (a gpu_check bundle)
    --no-spec) SPEC=0 ;;            # no NGRAM: its corpus is a tvm-ffi JIT extension
    --extra-server-args) EXTRA_SERVER_ARGS="$2"; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "gpu_gate.sh: unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done

START=$(date +%s)
left() { echo $(( BUDGET - ($(date +%s) - START) )); }
say() { echo "[gpu_gate $(( $(date +%s) - START ))s] $*"; }
show() { printf '+'; printf ' %q' "$@"; printf '\n'; }

backend_for() {
  case "$1" in
    gemma4) echo triton ;;
    gpt-oss) echo fa3 ;;
  esac
}

server_args_for() {
  local spec=""
  [ "$SPEC" = 1 ] && spec="--speculative-algorithm NGRAM --speculative-num-draft-tokens 8
       --speculative-ngram-max-bfs-breadth 1 --speculative-ngram-min-bfs-breadth 1"
  echo "--attention-backend $(backend_for "$1") --dtype bfloat16 --kv-cache-dtype fp8_e4m3" \
       $spec "--cuda-graph-max-bs 16 --max-running-requests 16 --mem-fraction-static 0.3" \
       $EXTRA_SERVER_ARGS
}

build_gate_cmd() {  # model-name model-dir extra-gate-args...  -> the array CMD
  local name="$1" dir="$2"; shift 2
  CMD=("$PY" scripts/equality_gate.py --device cuda --oracle-device cuda --model "$dir"
       --pages "$PAGE" --chunk "$CHUNK" --decode-interval "$INTERVAL"
       --max-total-tokens 131072 --swa-ratio 0.5
       --server-args "$(server_args_for "$name")"
       --log-dir "$GATE_OUT/logs" --oracle-cache "$GATE_OUT/oracle-cache.json")
  [ -z "$WORKLOAD" ] || CMD+=("$WORKLOAD")
  CMD+=("$@")
}

IFS=',' read -r -a MODEL_LIST <<< "$MODELS"
for m in "${MODEL_LIST[@]}"; do
  [ -n "$(backend_for "$m")" ] || { echo "gpu_gate.sh: unknown model '$m' (gemma4, gpt-oss)" >&2; exit 2; }
done

if [ "$DRY" = 1 ]; then
  say "dry run: commands only (budget ${BUDGET}s, outputs in $GATE_OUT)"
  show nvidia-smi --query-gpu=name,memory.total --format=csv
  show "$PY" -c "import torch, sglang, transformers; assert torch.cuda.is_available()"
  show "$PY" scripts/patches.py apply
  for m in "${MODEL_LIST[@]}"; do
    show "$PY" scripts/gpu_tiny_models.py --arch "$m" --window "$WINDOW" --out "$GATE_OUT/models/$m"
    extra=(--json-out "$GATE_OUT/$m.json")
    [ "$CONTROL" = 1 ] && [ "$m" = gemma4 ] && extra+=(--save-reference "$GATE_OUT/$m-ref.json")
    build_gate_cmd "$m" "$GATE_OUT/models/$m" "${extra[@]}"; show "${CMD[@]}"
    # ... whose two boots run these servers (the gate's own --print-commands; a local Python
    # with the project's dependencies is enough for that):
    dry_py="$PY"; [ -x "$ROOT/.venv/bin/python" ] && dry_py="$ROOT/.venv/bin/python"
    "$dry_py" scripts/equality_gate.py "${CMD[@]:2}" --print-commands 2>/dev/null \
      | sed -e "s#^$ROOT/.venv/bin/python #$PY #" -e 's/^/    /'
    if [ "$CONTROL" = 1 ] && [ "$m" = gemma4 ]; then
      build_gate_cmd "$m" "$GATE_OUT/models/$m" --negative-control \
        --reference "$GATE_OUT/$m-ref.json" --json-out "$GATE_OUT/$m-control.json"
      show "${CMD[@]}"
    fi
  done
  exit 0
fi

mkdir -p "$GATE_OUT/logs"
say "preflight"
if ! nvidia-smi --query-gpu=name,memory.total --format=csv,noheader; then
  echo "gpu_gate.sh: no NVIDIA GPU visible (nvidia-smi failed)" >&2; exit 2
fi
if ! "$PY" - <<'EOF'
import importlib.metadata as md
import torch, transformers
assert torch.cuda.is_available(), "torch sees no GPU"
try:
    v = md.version("sglang")
except md.PackageNotFoundError:
    raise SystemExit("sglang is not installed for this Python (needs the 0.5.15.post1 CUDA build)")
assert v == "0.5.15.post1", f"sglang {v}, the series is for 0.5.15.post1"
from transformers import Gemma4TextConfig  # noqa: F401  (transformers >= 5.12)
print(f"torch {torch.__version__} on {torch.cuda.get_device_name(0)}, sglang {v}, "
      f"transformers {transformers.__version__}")
EOF
then
  echo "gpu_gate.sh: this Python cannot run the GPU gate (PYTHON=$PY); see --help" >&2; exit 2
fi
if [ "$APPLY" = 1 ] && ! "$PY" scripts/patches.py apply; then
  echo "gpu_gate.sh: applying the patch series failed" >&2; exit 2
fi

declare -A RESULT
worst=0
for m in "${MODEL_LIST[@]}"; do
  remaining=$(left)
  if [ "$remaining" -lt "$MIN_LEFT_FOR_MODEL" ]; then
    say "$m: skipped, ${remaining}s left of the ${BUDGET}s budget"
    RESULT[$m]="SKIPPED (budget)"
    continue
  fi
  say "$m: building the tiny model"
  if ! dir="$("$PY" scripts/gpu_tiny_models.py --arch "$m" --window "$WINDOW" \
               --out "$GATE_OUT/models/$m" 2>"$GATE_OUT/$m-build.log" | tail -n 1)"; then
    say "$m: model build failed:"; tail -n 20 "$GATE_OUT/$m-build.log"
    RESULT[$m]="ERROR (model build)"; worst=2; continue
  fi
  extra=(--json-out "$GATE_OUT/$m.json")
  [ "$CONTROL" = 1 ] && [ "$m" = gemma4 ] && extra+=(--save-reference "$GATE_OUT/$m-ref.json")
  build_gate_cmd "$m" "$dir" "${extra[@]}"
  say "$m: gate ($(( $(left) - 10 ))s allowed)"; show "${CMD[@]}"
  timeout --kill-after=20 $(( $(left) - 10 )) "${CMD[@]}" 2>&1 | tee "$GATE_OUT/$m-gate.log" \
    | grep -v -e 'Warning' -e 'warnings.warn'
  rc=${PIPESTATUS[0]}
  case "$rc" in
    0) RESULT[$m]="PASS" ;;
    1) RESULT[$m]="FAIL"; worst=1 ;;
    124|137) RESULT[$m]="ERROR (timed out)"; [ $worst = 1 ] || worst=2 ;;
    *) RESULT[$m]="ERROR (exit $rc)"; [ $worst = 1 ] || worst=2 ;;
  esac
  # What actually ran (a feature silently switched off would otherwise pass unnoticed).
  for log in $(ls -t "$GATE_OUT"/logs/*-cuda-p${PAGE}-*.log 2>/dev/null | head -n 2); do
    say "$m: $(basename "$log"): cuda graph $(grep -c 'cuda graph: True' "$log") decode lines;" \
        "accept len seen $(grep -c 'accept len' "$log"); overlap-disabled notices" \
        "$(grep -ci 'overlap schedul.*disabled\|disable_overlap_schedule=True' "$log");" \
        "fp8 KV mentions $(grep -ci 'fp8_e4m3' "$log")"
  done
  if [ "$CONTROL" = 1 ] && [ "$m" = gemma4 ] && [ "$rc" != 2 ] && [ "$(left)" -gt 120 ]; then
    build_gate_cmd "$m" "$dir" --negative-control --reference "$GATE_OUT/$m-ref.json" \
      --json-out "$GATE_OUT/$m-control.json"
    say "$m: negative control (must FAIL)"; show "${CMD[@]}"
    timeout --kill-after=20 $(( $(left) - 10 )) "${CMD[@]}" 2>&1 | tee "$GATE_OUT/$m-control.log" \
      | grep -e 'EQUALITY GATE' -e 'identical' -e 'shim'
    crc=${PIPESTATUS[0]}
    if [ "$crc" = 1 ]; then RESULT[$m-control]="FAILED as it must"
    else RESULT[$m-control]="DID NOT FAIL (exit $crc)"; worst=1; fi
  fi
done

say "summary (budget ${BUDGET}s, used $(( $(date +%s) - START ))s):"
for k in "${!RESULT[@]}"; do echo "  $k: ${RESULT[$k]}"; done
ran=0
for k in "${!RESULT[@]}"; do [ "${RESULT[$k]}" = "SKIPPED (budget)" ] || ran=1; done
if [ "$ran" = 0 ]; then
  say "no gate ran: nothing was checked"; [ "$worst" = 1 ] || worst=2
fi
exit "$worst"
