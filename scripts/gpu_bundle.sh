#!/usr/bin/env bash
# Build the offline bundle that `scripts/gpu_check.sh --bundle DIR` installs on a GPU machine with
# no network (the `device` tool's lent machines: Python 3.12, torch 2.11.0+cu130 and triton 3.6
# preinstalled, nothing can be fetched there, at most 64 MiB travels with a call).
#
#   scripts/gpu_bundle.sh [--with-kernel] [DIR]      default DIR: .gpu (ignored by git)
#
# DIR/site.tar.xz is a ready site-packages tree for that Python:
#   - the patched engine exactly as scripts/setup.sh built it in .venv (pristine 0.5.15.post1 +
#     patches/series + our modules), with its dist-info, without bytecode or the cp311 .so;
#   - cp312 manylinux builds of requirements-cpu.lock's pins, less the large or compiled packages
#     the GPU image already has (IMAGE_PROVIDES below);
#   - with --with-kernel: sglang-kernel 0.4.4 (upstream's pin) for Hopper only, without its FA3
#     library flash_ops (1.7 GB of the wheel's 1.8 GB), flash-MLA and the sm100 build, plus
#     apache-tvm-ffi (sglang's pin), through which sglang's JIT kernels compile on the device.
#     That lets the server boot on CUDA with the triton attention backend (verified on an H200,
#     2026-12-01). The 615 MB wheel is downloaded once into .cache/wheels.
# flashinfer cannot be carried either; scripts/gpu_offline/sitecustomize.py turns its imports
# into placeholders that raise if anything calls them.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
KERNEL=0 DIR="$ROOT/.gpu"
while [ $# -gt 0 ]; do
  case "$1" in
    --with-kernel) KERNEL=1 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    -*) echo "gpu_bundle.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
    *) DIR="$1" ;;
  esac
  shift
done
PY="$ROOT/.venv/bin/python"
[ -x "$PY" ] || { echo "gpu_bundle.sh: error: no .venv: run scripts/setup.sh first" >&2; exit 1; }

# Everything requirements-cpu.lock pins, at those versions, except what the GPU image already has
# and is large or compiled against its torch (its package list: the device tool's KINDS.md). Pure
# Python packages travel even where the image has some version: its versions were not what
# sglang needs (pydantic 2.14 needs typing-inspection's `introspection`, absent there).
IMAGE_PROVIDES="aiohttp charset-normalizer frozenlist hf-xet markupsafe multidict networkx numpy
pillow propcache psutil pyyaml regex safetensors scipy sentencepiece sympy tiktoken triton uvloop yarl"
KERNEL_PIN="sglang-kernel==0.4.4"
CP312=(--only-binary=:all: --python-version 3.12 --implementation cp
       --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64
       --platform manylinux2014_x86_64 --platform manylinux1_x86_64)

pins=$("$PY" - "$IMAGE_PROVIDES" <<'PYEOF'
import re, sys
norm = lambda s: re.sub(r"[-_.]+", "-", s.strip().lower())
skip = {norm(n) for n in sys.argv[1].split()}
pins = []
for line in open("requirements-cpu.lock"):
    line = line.split("#")[0].strip()
    if line and norm(line.split("==")[0]) not in skip:
        pins.append(line)
print(" ".join(pins))
PYEOF
)
"$PY" scripts/patches.py apply >/dev/null
STAGE="$(mktemp -d)"
trap 'rm -rf "$STAGE"' EXIT
SITE_OUT="$STAGE/site"
echo "[bundle] cp312 packages -> site"
# shellcheck disable=SC2086
"$PY" -m pip install -q --disable-pip-version-check --no-deps --no-compile "${CP312[@]}" \
  --target "$SITE_OUT" $pins
SITE=$("$PY" -c 'import sglang, os; print(os.path.dirname(os.path.dirname(sglang.__file__)))')
echo "[bundle] patched engine from $SITE"
(cd "$SITE" && tar --exclude=__pycache__ --exclude='*.so' -cf - sglang sglang-*.dist-info) \
  | tar -C "$SITE_OUT" -xf -
if [ "$KERNEL" = 1 ]; then
  mkdir -p .cache/wheels
  whl=$(ls .cache/wheels/sglang_kernel-0.4.4-*.whl 2>/dev/null | head -n 1 || true)
  if [ -z "$whl" ]; then
    echo "[bundle] downloading $KERNEL_PIN (615 MB, once)"
    "$PY" -m pip download -q --disable-pip-version-check --no-deps "${CP312[@]}" \
      -d .cache/wheels "$KERNEL_PIN"
    whl=$(ls .cache/wheels/sglang_kernel-0.4.4-*.whl | head -n 1)
  fi
  # sglang's JIT kernels (sglang/jit_kernel: RoPE, KV store, ...) compile on the device with its
  # nvcc through tvm-ffi; take the version the pristine wheel pins.
  tvm_pin=$(unzip -p .cache/wheels/sglang-*.whl '*/METADATA' | sed -n 's/^Requires-Dist: \(apache-tvm-ffi==[0-9.]*\).*/\1/p' | head -n 1)
  [ -n "$tvm_pin" ] || { echo "gpu_bundle.sh: error: no apache-tvm-ffi pin in the sglang wheel" >&2; exit 1; }
  echo "[bundle] $tvm_pin (cp312)"
  "$PY" -m pip install -q --disable-pip-version-check --no-deps --no-compile "${CP312[@]}" \
    --platform manylinux_2_24_x86_64 --target "$SITE_OUT" "$tvm_pin"
  echo "[bundle] $(basename "$whl") for sm90, without flash_ops / flashmla_ops / sm100"
  "$PY" - "$whl" "$SITE_OUT" <<'PYEOF'
import sys, zipfile
whl, out = sys.argv[1:]
skip = ("sgl_kernel/flash_ops.", "sgl_kernel/flashmla_ops.", "sgl_kernel/sm100/")
with zipfile.ZipFile(whl) as z:
    for info in z.infolist():
        if not info.filename.startswith(skip):
            z.extract(info, out)
PYEOF
fi
mkdir -p "$DIR"
rm -rf "$DIR/whl" "$DIR/sglang.tar.xz"
echo "[bundle] compressing $(du -sh "$SITE_OUT" | cut -f1) -> $DIR/site.tar.xz"
tar -C "$SITE_OUT" -cf - . | xz -T2 -6 > "$DIR/site.tar.xz"
echo "[bundle] done: $(du -sh "$DIR/site.tar.xz" | cut -f1) in $DIR (a device call carries 64 MiB in all)"
