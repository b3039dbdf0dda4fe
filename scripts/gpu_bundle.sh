#!/usr/bin/env bash
# Build the offline bundle that `scripts/gpu_check.sh --bundle DIR` installs on a GPU machine with
# no network (the `device` tool's lent machines: Python 3.12, torch 2.11.0+cu130 and triton 3.6
# preinstalled, nothing can be fetched there, at most 64 MiB travels with a call).
#
#   scripts/gpu_bundle.sh [DIR]      default DIR: .gpu (ignored by git)
#
# DIR gets:
#   sglang.tar.xz   the patched engine exactly as scripts/setup.sh built it in .venv (pristine
#                   0.5.15.post1 + patches/series + our modules), without bytecode or the cp311 .so
#   whl/            cp312 manylinux wheels of requirements-cpu.lock's pins, less the large or
#                   compiled packages the GPU image already has (IMAGE_PROVIDES below)
#
# What it cannot carry: sglang-kernel==0.4.4 (a 615 MB wheel) and flashinfer. Without them the
# server does not boot on CUDA, so the bundle runs the tree-cache/pool/allocator tests and the hold
# benchmark on CUDA tensors only; scripts/gpu_offline/sitecustomize.py turns `from sgl_kernel import
# X` into a placeholder that raises if X is ever called.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
DIR="${1:-$ROOT/.gpu}"
case "$DIR" in -h|--help) sed -n '2,19p' "$0"; exit 0 ;; esac
PY="$ROOT/.venv/bin/python"
[ -x "$PY" ] || { echo "gpu_bundle.sh: error: no .venv: run scripts/setup.sh first" >&2; exit 1; }

# Everything requirements-cpu.lock pins, at those versions, except what the GPU image already has
# and is large or compiled against its torch (its package list: the device tool's KINDS.md). Pure
# Python packages travel even where the image has some version: its versions were not what
# sglang needs (pydantic 2.14 needs typing-inspection's `introspection`, absent there).
IMAGE_PROVIDES="aiohttp charset-normalizer frozenlist hf-xet markupsafe multidict networkx numpy
pillow propcache psutil pyyaml regex safetensors scipy sentencepiece sympy tiktoken triton uvloop yarl"

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
rm -rf "$DIR/whl" && mkdir -p "$DIR/whl"
echo "[bundle] wheels (cp312, manylinux) -> $DIR/whl"
# shellcheck disable=SC2086
"$PY" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
  --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
  -d "$DIR/whl" $pins
SITE=$("$PY" -c 'import sglang, os; print(os.path.dirname(os.path.dirname(sglang.__file__)))')
echo "[bundle] patched engine from $SITE -> $DIR/sglang.tar.xz"
tar -C "$SITE" --exclude=__pycache__ --exclude='*.so' -cf - sglang | xz -T2 -6 > "$DIR/sglang.tar.xz"
du -sh "$DIR/whl" "$DIR/sglang.tar.xz"
echo "[bundle] done: $(du -sh "$DIR" | cut -f1) in $DIR"
