#!/usr/bin/env bash
# Build the offline bundle that `scripts/gpu_check.sh --bundle DIR` (or `--bundle-main DIR`)
# installs on a GPU machine with no network (the `device` tool's lent machines: Python 3.12,
# torch 2.11.0+cu130 and triton 3.6 preinstalled, nothing can be fetched there, at most 64 MiB
# travels with a call).
#
#   scripts/gpu_bundle.sh [--with-kernel] [DIR]                   0.5.15.post1; DIR default .gpu
#   scripts/gpu_bundle.sh --target 0.5.23 [--with-kernel] [DIR]   0.5.23; DIR default .gpu-main
#
# Both DIRs are ignored by git (build outputs: upstream code, never committed).
# --target 0.5.15.post1 (default): DIR/site.tar.xz is a ready site-packages tree for that Python:
#   - the patched engine exactly as scripts/setup.sh built it in .venv (pristine 0.5.15.post1 +
#     patches/series + our modules), with its dist-info, without bytecode or the cp311 .so;
#   - cp312 manylinux builds of requirements-cpu.lock's pins, less the large or compiled packages
#     the GPU image already has (IMAGE_PROVIDES below);
#   - with --with-kernel: sglang-kernel 0.4.4 (upstream's pin) for Hopper only, without its FA3
#     library flash_ops (1.7 GB of the wheel's 1.8 GB), flash-MLA and the sm100 build, plus
#     apache-tvm-ffi (sglang's pin), through which sglang's JIT kernels compile on the device.
#     That lets the server boot on CUDA with the triton attention backend (verified on an H200,
#     2026-12-01). The 615 MB wheel is downloaded once into .cache/wheels.
# --target 0.5.23: DIR/site.tar.xz holds three trees (gpu_check.sh --bundle-main puts them
#   together on the device) and DIR/bundle.json says what is in it:
#   - common/: cp312 builds of requirements-cpu.lock's pins with requirements-main-cpu.lock's
#     overrides (apache-tvm-ffi 0.1.11 among them), less IMAGE_PROVIDES;
#   - main/: the arm `main`, pristine sglang 0.5.23 from the release wheel with
#     patches-main/series-stock (scripts/patches_main.py apply --series stock --site-packages),
#     as .venv-main has it; without bytecode, without the wheel's cp311 Rust extensions, which
#     Python 3.12 cannot import (0.5.23 then uses its Python TreeCore, as the islands arm does),
#     and without sglang/multimodal_gen (diffusion serving, 3 MB; the LLM server imports none of
#     it);
#   - main_islands.overlay/: the files that `apply --series islands` changes or adds on top of
#     main/ (the islands series and our modules): main_islands = main/ + this;
#   - with --with-kernel: sglang-kernel 0.4.10 (0.5.23's pin; 373 MB wheel, downloaded once into
#     .cache/wheels-main) for Hopper only (sm90 common_ops, spatial_ops), into common/. Its
#     extensions are built against torch==2.14.1 (its Requires-Dist): on torch 2.11.0 they need
#     five libtorch/libc10 symbols that 2.11.0 does not export (torch::Library::_def with the new
#     Tag vector among them), so gpu_check.sh's `main` step reports SKIP on the lent machines
#     until their image has torch 2.14 (it checks by importing the kernel there, every run).
# flashinfer cannot be carried for either target; scripts/gpu_offline/sitecustomize.py turns its
# imports into placeholders that raise if anything calls them.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
KERNEL=0 DIR="" TARGET=0.5.15.post1
while [ $# -gt 0 ]; do
  case "$1" in
    --with-kernel) KERNEL=1 ;;
    --target) TARGET="${2:-}"; shift ;;
    -h|--help) sed -n '2,40p' "$0"; exit 0 ;;
    -*) echo "gpu_bundle.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
    *) DIR="$1" ;;
  esac
  shift
done
case "$TARGET" in
  0.5.15.post1) DIR="${DIR:-$ROOT/.gpu}" PY="$ROOT/.venv/bin/python" SETUP=scripts/setup.sh
                KERNEL_PIN="sglang-kernel==0.4.4" WHEELS=.cache/wheels ;;
  0.5.23) DIR="${DIR:-$ROOT/.gpu-main}" PY="$ROOT/.venv-main/bin/python" SETUP=scripts/setup_main.sh
          KERNEL_PIN="sglang-kernel==0.4.10" WHEELS=.cache/wheels-main ;;
  *) echo "gpu_bundle.sh: unknown --target '$TARGET' (0.5.15.post1 or 0.5.23)" >&2; exit 2 ;;
esac
[ -x "$PY" ] || { echo "gpu_bundle.sh: error: no $(basename "$(dirname "$(dirname "$PY")")"): run $SETUP first" >&2; exit 1; }
KERNEL_VERSION="${KERNEL_PIN#*==}"

# Everything the locks pin, at those versions, except what the GPU image already has and is
# large or compiled against its torch (its package list: the device tool's KINDS.md). Pure
# Python packages travel even where the image has some version: its versions were not what
# sglang needs (pydantic 2.14 needs typing-inspection's `introspection`, absent there).
IMAGE_PROVIDES="aiohttp charset-normalizer frozenlist hf-xet markupsafe multidict networkx numpy
pillow propcache psutil pyyaml regex safetensors scipy sentencepiece sympy tiktoken triton uvloop yarl"
CP312=(--only-binary=:all: --python-version 3.12 --implementation cp
       --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64
       --platform manylinux2014_x86_64 --platform manylinux1_x86_64)
LOCKS=(requirements-cpu.lock)
[ "$TARGET" = 0.5.23 ] && LOCKS+=(requirements-main-cpu.lock)  # its pins win

pins=$("$PY" - "$IMAGE_PROVIDES" "${LOCKS[@]}" <<'PYEOF'
import re, sys
norm = lambda s: re.sub(r"[-_.]+", "-", s.strip().lower())
skip = {norm(n) for n in sys.argv[1].split()}
pins = {}
for lock in sys.argv[2:]:  # a later lock's pin replaces an earlier one's
    for line in open(lock):
        line = line.split("#")[0].strip()
        if line and norm(line.split("==")[0]) not in skip:
            pins[norm(line.split("==")[0])] = line
print(" ".join(pins.values()))
PYEOF
)
STAGE="$(mktemp -d)"
trap 'rm -rf "$STAGE"' EXIT

# kernel_wheel: the cached wheel of $KERNEL_PIN (downloaded once); prints its path
kernel_wheel() {
  mkdir -p "$WHEELS"
  local whl
  whl=$(ls "$WHEELS"/sglang_kernel-"$KERNEL_VERSION"-*.whl 2>/dev/null | head -n 1 || true)
  if [ -z "$whl" ]; then
    echo "[bundle] downloading $KERNEL_PIN (once)" >&2
    "$PY" -m pip download -q --disable-pip-version-check --no-deps "${CP312[@]}" \
      -d "$WHEELS" "$KERNEL_PIN" >&2
    whl=$(ls "$WHEELS"/sglang_kernel-"$KERNEL_VERSION"-*.whl | head -n 1)
  fi
  echo "$whl"
}
# extract_kernel WHEEL OUT: the wheel without FA3 (flash_ops), flash-MLA, the sm100 build and the
# cp310-only InfLLM extension (none of them loads or is used here)
extract_kernel() {
  "$PY" - "$1" "$2" <<'PYEOF'
import sys, zipfile
whl, out = sys.argv[1:]
skip = ("sgl_kernel/flash_ops.", "sgl_kernel/flashmla_ops.", "sgl_kernel/sm100/",
        "sgl_kernel/infllm_ops.")
with zipfile.ZipFile(whl) as z:
    for info in z.infolist():
        if not info.filename.startswith(skip):
            z.extract(info, out)
PYEOF
}

if [ "$TARGET" = 0.5.15.post1 ]; then
  "$PY" scripts/patches.py apply >/dev/null
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
    whl=$(kernel_wheel)
    # sglang's JIT kernels (sglang/jit_kernel: RoPE, KV store, ...) compile on the device with its
    # nvcc through tvm-ffi; take the version the pristine wheel pins.
    tvm_pin=$(unzip -p .cache/wheels/sglang-*.whl '*/METADATA' | sed -n 's/^Requires-Dist: \(apache-tvm-ffi==[0-9.]*\).*/\1/p' | head -n 1)
    [ -n "$tvm_pin" ] || { echo "gpu_bundle.sh: error: no apache-tvm-ffi pin in the sglang wheel" >&2; exit 1; }
    echo "[bundle] $tvm_pin (cp312)"
    "$PY" -m pip install -q --disable-pip-version-check --no-deps --no-compile "${CP312[@]}" \
      --platform manylinux_2_24_x86_64 --target "$SITE_OUT" "$tvm_pin"
    echo "[bundle] $(basename "$whl") for sm90, without flash_ops / flashmla_ops / sm100"
    extract_kernel "$whl" "$SITE_OUT"
  fi
else
  WHEEL="$("$PY" scripts/patches_main.py fetch)"
  echo "[bundle] cp312 packages -> common"
  # shellcheck disable=SC2086
  "$PY" -m pip install -q --disable-pip-version-check --no-deps --no-compile "${CP312[@]}" \
    --platform manylinux_2_24_x86_64 --target "$STAGE/common" $pins
  echo "[bundle] $(basename "$WHEEL") -> main (no cp311 extensions), series-stock"
  "$PY" - "$WHEEL" "$STAGE/main" <<'PYEOF'
import sys, zipfile
whl, out = sys.argv[1:]
with zipfile.ZipFile(whl) as z:
    for info in z.infolist():
        n = info.filename
        if (n.startswith(("sglang/", "sglang-")) and not n.endswith(".so")
                and "/__pycache__/" not in n and not n.startswith("sglang/multimodal_gen/")):
            z.extract(info, out)
PYEOF
  "$PY" scripts/patches_main.py apply --series stock --site-packages "$STAGE/main"
  cp -a "$STAGE/main" "$STAGE/islands"
  "$PY" scripts/patches_main.py apply --series islands --site-packages "$STAGE/islands"
  echo "[bundle] main_islands.overlay: what the islands series changes on main"
  "$PY" - "$STAGE/main" "$STAGE/islands" "$STAGE/main_islands.overlay" <<'PYEOF'
import filecmp, os, pathlib, shutil, sys
main, isl, out = map(pathlib.Path, sys.argv[1:])
files = lambda d: {p.relative_to(d) for p in d.rglob("*") if p.is_file()}
gone = files(main) - files(isl)
if gone:
    sys.exit(f"gpu_bundle.sh: the islands series removes files of main: {sorted(map(str, gone))}")
changed = sorted(r for r in files(isl) if not (main / r).is_file()
                 or not filecmp.cmp(main / r, isl / r, shallow=False))
for r in changed:
    (out / r).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(isl / r, out / r)
print(f"[bundle]   {len(changed)} file(s): " + ", ".join(str(r) for r in changed[:6])
      + (" ..." if len(changed) > 6 else ""))
PYEOF
  rm -rf "$STAGE/islands"
  kernel_torch=""
  if [ "$KERNEL" = 1 ]; then
    whl=$(kernel_wheel)
    kernel_torch=$(unzip -p "$whl" '*.dist-info/METADATA' | sed -n 's/^Requires-Dist: torch==\([0-9.]*\).*/\1/p' | head -n 1)
    echo "[bundle] $(basename "$whl") for sm90 (built for torch==${kernel_torch:-?}), without flash_ops / flashmla_ops / sm100 / infllm_ops"
    extract_kernel "$whl" "$STAGE/common"
  fi
  "$PY" - "$STAGE" "$TARGET" "$KERNEL" "$KERNEL_VERSION" "$kernel_torch" <<'PYEOF'
import json, pathlib, sys
stage, target, kernel, kver, ktorch = sys.argv[1:]
stage = pathlib.Path(stage)
m = json.loads((stage / "main/sglang/.islands_harness_main_patches.json").read_text())
o = json.loads((stage / "main_islands.overlay/sglang/.islands_harness_main_patches.json").read_text())
info = {"target": target, "sglang": m["sglang_version"], "python": "cp312",
        "trees": {"common": "pure-Python and cp312 dependencies",
                  "main": "series " + m["series"], "main_islands": "main + main_islands.overlay"},
        "series": {"main": m["patches"], "main_islands": o["patches"]},
        "overlay_files": sorted(str(p.relative_to(stage / "main_islands.overlay"))
                                for p in (stage / "main_islands.overlay").rglob("*") if p.is_file()),
        "kernel": f"sglang-kernel=={kver}" if kernel == "1" else None,
        "kernel_torch": ktorch or None}
(stage / "bundle.json").write_text(json.dumps(info, indent=1) + "\n")
PYEOF
fi
mkdir -p "$DIR"
rm -rf "$DIR/whl" "$DIR/sglang.tar.xz" "$DIR/bundle.json"
echo "[bundle] compressing $(du -sh "$STAGE" | cut -f1) -> $DIR/site.tar.xz"
if [ "$TARGET" = 0.5.23 ]; then
  cp "$STAGE/bundle.json" "$DIR/bundle.json"
  tar -C "$STAGE" -cf - common main main_islands.overlay bundle.json | xz -T2 -6 > "$DIR/site.tar.xz"
else
  tar -C "$SITE_OUT" -cf - . | xz -T2 -6 > "$DIR/site.tar.xz"
fi
echo "[bundle] done: $(du -sh "$DIR/site.tar.xz" | cut -f1) ($(stat -c %s "$DIR/site.tar.xz") bytes) in $DIR (a device call carries 64 MiB in all)"
