#!/usr/bin/env bash
# The spec's admission benchmark on a GPU: SWA islands vs upstream SGLang at real
# --swa-full-tokens-ratio values, seeded random 32k-in/16k-out through
# `python -m sglang.bench_serving`, client concurrency 24 (latency-bound) then 96
# (pool-bound) at a server cap of --max-running-requests 48. One server boot per arm;
# a table at the end. The CPU-scaled version of the same question is benchmarks/admission.py.
#
#   benchmarks/gpu_bench.sh --model /models/gemma-4-26b-a4b [--extra-server-args "..."]
#   benchmarks/gpu_bench.sh --model /models/x --dry-run      # print the commands only
#
# Run `benchmarks/gpu_bench.sh --help` for every option.
set -euo pipefail

usage() {
  cat <<'EOF'
usage: benchmarks/gpu_bench.sh --model PATH [options]

Boots `python -m sglang.launch_server` once per arm and runs `python -m sglang.bench_serving`
(seeded random, 32768 input / 16384 output tokens, range ratio 1.0, so every arm gets the
same token totals) at each client concurrency (default 24, then 96) against a server cap of
--max-running-requests 48. Prints a table at the end (also OUT/table.md).

Arms (default: all, in this order):
  chunk_cache          --disable-radix-cache (the server sizes the SWA pool; ratio ignored)
  upstream_0.32        --swa-full-tokens-ratio 0.32
  upstream_0.17        --swa-full-tokens-ratio 0.17
  upstream_knobs_0.17  0.17 + SGLANG_OPT_SWA_SPLIT_LEAF_ON_INSERT=1
                             SGLANG_OPT_SWA_RELEASE_LEAF_LOCK_AFTER_WINDOW=1
  islands_0.17         --enable-swa-islands --swa-full-tokens-ratio 0.17
  islands_0.10         --enable-swa-islands --swa-full-tokens-ratio 0.10

options:
  --model PATH               model path or HF id (required; also the bench tokenizer)
  --out DIR                  results directory (default benchmarks/results/gpu/<timestamp>)
  --arms LIST                comma list of arms (default: all six)
  --concurrencies "24 96"    client concurrencies, run in this order per boot
  --prompts-per-client K     num prompts = K x concurrency (default 2)
  --input-len N              random input tokens (default 32768)
  --output-len N             random output tokens (default 16384)
  --cap N                    --max-running-requests (default 48)
  --chunk N                  --chunked-prefill-size (default 16384)
  --page N                   --page-size (default 64)
  --dataset NAME             bench_serving dataset: random (ShareGPT-sampled tokens; needs
                             --dataset-path offline) or random-ids (default random)
  --dataset-path FILE        local ShareGPT json for --dataset random
  --seed N                   bench_serving seed (default 1)
  --decode-log-interval N    server decode log interval (default 40; 1 costs a host sync per
                             request per step on the islands hold report)
  --extra-server-args STR    added to every boot, e.g. "--tp 1 --kv-cache-dtype fp8_e4m3
                             --quantization fp8 --speculative-algorithm EAGLE ..."
  --python BIN               interpreter with sglang + the islands patches (default python3)
  --host H / --port P        server address (default 127.0.0.1:30000)
  --boot-timeout S           seconds to wait for /health_generate (default 1800)
  --dry-run                  print the commands, run nothing
  -h, --help                 this help
EOF
}

MODEL=""
OUT=""
ARMS="chunk_cache,upstream_0.32,upstream_0.17,upstream_knobs_0.17,islands_0.17,islands_0.10"
CONCURRENCIES="24 96"
PROMPTS_PER_CLIENT=2
INPUT_LEN=32768
OUTPUT_LEN=16384
CAP=48
CHUNK=16384
PAGE=64
DATASET=random
DATASET_PATH=""
SEED=1
DECODE_LOG_INTERVAL=40
EXTRA_SERVER_ARGS=""
PY=python3
HOST=127.0.0.1
PORT=30000
BOOT_TIMEOUT=1800
DRY=0

die() { echo "gpu_bench.sh: $*" >&2; exit 2; }
need() { [[ $# -ge 2 && -n "$2" ]] || die "$1 needs a value"; }

while [[ $# -gt 0 ]]; do
  case "$1" in
    --model) need "$@"; MODEL="$2"; shift 2 ;;
    --out) need "$@"; OUT="$2"; shift 2 ;;
    --arms) need "$@"; ARMS="$2"; shift 2 ;;
    --concurrencies) need "$@"; CONCURRENCIES="$2"; shift 2 ;;
    --prompts-per-client) need "$@"; PROMPTS_PER_CLIENT="$2"; shift 2 ;;
    --input-len) need "$@"; INPUT_LEN="$2"; shift 2 ;;
    --output-len) need "$@"; OUTPUT_LEN="$2"; shift 2 ;;
    --cap) need "$@"; CAP="$2"; shift 2 ;;
    --chunk) need "$@"; CHUNK="$2"; shift 2 ;;
    --page) need "$@"; PAGE="$2"; shift 2 ;;
    --dataset) need "$@"; DATASET="$2"; shift 2 ;;
    --dataset-path) need "$@"; DATASET_PATH="$2"; shift 2 ;;
    --seed) need "$@"; SEED="$2"; shift 2 ;;
    --decode-log-interval) need "$@"; DECODE_LOG_INTERVAL="$2"; shift 2 ;;
    --extra-server-args) [[ $# -ge 2 ]] || die "$1 needs a value"; EXTRA_SERVER_ARGS="$2"; shift 2 ;;
    --python) need "$@"; PY="$2"; shift 2 ;;
    --host) need "$@"; HOST="$2"; shift 2 ;;
    --port) need "$@"; PORT="$2"; shift 2 ;;
    --boot-timeout) need "$@"; BOOT_TIMEOUT="$2"; shift 2 ;;
    --dry-run) DRY=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; die "unknown option: $1" ;;
  esac
done

[[ -n "$MODEL" ]] || { usage >&2; die "--model PATH is required"; }
for v in PROMPTS_PER_CLIENT INPUT_LEN OUTPUT_LEN CAP CHUNK PAGE SEED DECODE_LOG_INTERVAL PORT BOOT_TIMEOUT; do
  [[ "${!v}" =~ ^[0-9]+$ ]] || die "${v,,} must be a whole number, got '${!v}'"
done
for c in $CONCURRENCIES; do [[ "$c" =~ ^[0-9]+$ ]] || die "bad concurrency '$c'"; done
OUT="${OUT:-benchmarks/results/gpu/$(date +%Y%m%d-%H%M%S)}"
BASE_URL="http://$HOST:$PORT"
read -r -a EXTRA <<<"$EXTRA_SERVER_ARGS"

# name -> "env assignments|server args"
arm_spec() {
  case "$1" in
    chunk_cache) echo "|--disable-radix-cache" ;;
    upstream_0.32) echo "|--swa-full-tokens-ratio 0.32" ;;
    upstream_0.17) echo "|--swa-full-tokens-ratio 0.17" ;;
    upstream_knobs_0.17)
      echo "SGLANG_OPT_SWA_SPLIT_LEAF_ON_INSERT=1 SGLANG_OPT_SWA_RELEASE_LEAF_LOCK_AFTER_WINDOW=1|--swa-full-tokens-ratio 0.17" ;;
    islands_0.17) echo "|--enable-swa-islands --swa-full-tokens-ratio 0.17" ;;
    islands_0.10) echo "|--enable-swa-islands --swa-full-tokens-ratio 0.10" ;;
    *) return 1 ;;
  esac
}
IFS=',' read -r -a ARM_LIST <<<"$ARMS"
for a in "${ARM_LIST[@]}"; do arm_spec "$a" >/dev/null || die "unknown arm '$a'"; done

show() { printf '+'; printf ' %q' "$@"; printf '\n'; }

metric_sum() {  # metric_sum NAME: sum of sglang:NAME over its label sets (0 when absent)
  curl -fsS "$BASE_URL/metrics" 2>/dev/null |
    awk -v n="sglang:$1" '$1 ~ "^"n"({|$)" {s += $NF} END {printf "%d\n", s}'
}

SERVER_PID=""
SAMPLER_PID=""
stop_server() {
  if [[ -n "$SAMPLER_PID" ]]; then kill "$SAMPLER_PID" 2>/dev/null || true; wait "$SAMPLER_PID" 2>/dev/null || true; SAMPLER_PID=""; fi
  [[ -n "$SERVER_PID" ]] || return 0
  kill -TERM -- "-$SERVER_PID" 2>/dev/null || true
  for _ in $(seq 60); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 1; done
  kill -KILL -- "-$SERVER_PID" 2>/dev/null || true
  wait "$SERVER_PID" 2>/dev/null || true
  SERVER_PID=""
}
trap stop_server EXIT
trap 'stop_server; exit 130' INT TERM

[[ $DRY -eq 1 ]] || mkdir -p "$OUT"
echo "gpu_bench: model $MODEL, arms ${ARM_LIST[*]}, concurrencies $CONCURRENCIES, out $OUT" >&2

for arm in "${ARM_LIST[@]}"; do
  spec="$(arm_spec "$arm")"
  read -r -a ENVS <<<"${spec%%|*}"
  read -r -a ARGS <<<"${spec#*|}"
  SERVER_CMD=("$PY" -m sglang.launch_server --model-path "$MODEL" --host "$HOST" --port "$PORT"
    --max-running-requests "$CAP" --chunked-prefill-size "$CHUNK" --page-size "$PAGE"
    --enable-metrics --decode-log-interval "$DECODE_LOG_INTERVAL"
    "${ARGS[@]}" "${EXTRA[@]}")
  log="$OUT/$arm.server.log"
  echo "== $arm" >&2
  if [[ $DRY -eq 1 ]]; then
    if [[ ${#ENVS[@]} -gt 0 ]]; then show env "${ENVS[@]}" "${SERVER_CMD[@]}"; else show "${SERVER_CMD[@]}"; fi
  else
    setsid env "${ENVS[@]}" "${SERVER_CMD[@]}" >"$log" 2>&1 &
    SERVER_PID=$!
    t0=$(date +%s)
    until curl -fsS -o /dev/null "$BASE_URL/health_generate" 2>/dev/null; do
      kill -0 "$SERVER_PID" 2>/dev/null || { tail -40 "$log" >&2; die "$arm: server exited during boot (log $log)"; }
      (( $(date +%s) - t0 < BOOT_TIMEOUT )) || { stop_server; die "$arm: not healthy after ${BOOT_TIMEOUT}s"; }
      sleep 5
    done
    echo "   healthy after $(( $(date +%s) - t0 )) s; $(grep -m1 -o 'swa size: [0-9]*, full size: [0-9]*' "$log" || true)" >&2
  fi
  for c in $CONCURRENCIES; do
    n=$(( PROMPTS_PER_CLIENT * c ))
    tag="${arm}_c$c"
    BENCH_CMD=("$PY" -m sglang.bench_serving --backend sglang --host "$HOST" --port "$PORT"
      --model "$MODEL" --dataset-name "$DATASET" --random-input-len "$INPUT_LEN"
      --random-output-len "$OUTPUT_LEN" --random-range-ratio 1.0 --num-prompts "$n"
      --max-concurrency "$c" --seed "$SEED" --flush-cache --disable-tqdm
      --output-file "$OUT/$tag.jsonl" --tag "$tag")
    [[ -z "$DATASET_PATH" ]] || BENCH_CMD+=(--dataset-path "$DATASET_PATH")
    if [[ $DRY -eq 1 ]]; then
      show "${BENCH_CMD[@]}"
      continue
    fi
    r0=$(metric_sum num_retracted_requests_total)
    lines0=$(wc -l <"$log")
    # running requests over time: /metrics once a second while the benchmark runs
    ( while :; do
        printf '%s %s\n' "$(date +%s.%N)" \
          "$(curl -fsS "$BASE_URL/metrics" 2>/dev/null | awk '$1 ~ /^sglang:num_running_reqs/ {print $NF; exit}')"
        sleep 1
      done ) >"$OUT/$tag.running.txt" 2>/dev/null &
    SAMPLER_PID=$!
    "${BENCH_CMD[@]}" 2>&1 | tee "$OUT/$tag.bench.log" >&2
    kill "$SAMPLER_PID" 2>/dev/null || true; wait "$SAMPLER_PID" 2>/dev/null || true; SAMPLER_PID=""
    r1=$(metric_sum num_retracted_requests_total)
    max_log=$(tail -n +"$((lines0 + 1))" "$log" | grep -o '#running-req: [0-9]*' | awk '{if ($2 > m) m = $2} END {print m + 0}')
    printf '{"arm": "%s", "concurrency": %d, "retractions": %d, "max_running_log": %d}\n' \
      "$arm" "$c" "$((r1 - r0))" "$max_log" >"$OUT/$tag.server.json"
  done
  [[ $DRY -eq 1 ]] || stop_server
done

TABLE_CMD=("$PY" - "$OUT" "$ARMS" "$CONCURRENCIES")
if [[ $DRY -eq 1 ]]; then
  echo "(dry run: the table would be built from $OUT/<arm>_c<C>.jsonl and .server.json)" >&2
  exit 0
fi
"${TABLE_CMD[@]}" <<'PY' | tee "$OUT/table.md"
import json, os, re, sys
out, arms, concs = sys.argv[1], sys.argv[2].split(","), sys.argv[3].split()
def load(p):
    try:
        with open(p) as f:
            lines = [l for l in f if l.strip()]
        return json.loads(lines[-1]) if lines else {}
    except FileNotFoundError:
        return {}
def running(p):
    vals = []
    try:
        for line in open(p):
            parts = line.split()
            if len(parts) == 2:
                vals.append(float(parts[1]))
    except FileNotFoundError:
        pass
    return (max(vals) if vals else None, sum(vals) / len(vals) if vals else None)
def swa_pool(arm):
    try:
        m = re.search(r"swa size: (\d+), full size: (\d+)", open(os.path.join(out, arm + ".server.log")).read())
        return (int(m[1]), int(m[2])) if m else (None, None)
    except FileNotFoundError:
        return (None, None)
f = lambda x, nd=1: "-" if x is None else (f"{x:,.{nd}f}" if isinstance(x, float) else f"{x:,}")
for c in concs:
    base = load(os.path.join(out, f"upstream_0.17_c{c}.jsonl"))
    print(f"\n### client concurrency {c} (server cap from --cap)\n")
    print("| arm | SWA pool | full pool | max running | mean running | retractions | output tok/s | x upstream_0.17 | mean E2E s | x upstream_0.17 | accept len | completed |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for arm in arms:
        b = load(os.path.join(out, f"{arm}_c{c}.jsonl"))
        s = load(os.path.join(out, f"{arm}_c{c}.server.json"))
        mx, mean = running(os.path.join(out, f"{arm}_c{c}.running.txt"))
        mx = max(x for x in (mx, s.get("max_running_log")) if x is not None) if (mx is not None or s.get("max_running_log") is not None) else None
        swa, full = swa_pool(arm)
        thr, lat = b.get("output_throughput"), b.get("mean_e2e_latency_ms")
        bt, bl = base.get("output_throughput"), base.get("mean_e2e_latency_ms")
        print(f"| {arm} | {f(swa)} | {f(full)} | {f(mx, 0) if isinstance(mx, float) else f(mx)} | {f(mean)} | {f(s.get('retractions'))} | "
              f"{f(thr, 0)} | {f(thr / bt, 3) if thr and bt else '-'} | {f(lat / 1000 if lat else None)} | "
              f"{f(lat / bl, 3) if lat and bl else '-'} | {f(b.get('accept_length'), 2)} | {f(b.get('completed'))} |")
PY
