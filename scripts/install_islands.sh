#!/usr/bin/env bash
# Install SWA islands into an existing SGLang deployment: the sglang that PYTHON imports (a
# virtualenv's, a container image's) gets the series of its release and our modules:
# sglang==0.5.15.post1 patches/series (scripts/patches.py), sglang==0.5.23 patches-main/series
# (scripts/patches_main.py --series islands; the 0.5.23 target is in progress, docs/MAIN_DESIGN.md).
#
#   scripts/install_islands.sh [PYTHON]     # default: python3 on PATH
#
# Needs git (patches are applied with `git apply` to pristine copies) and either the registry
# (the pristine release wheel is downloaded once into .cache/wheels/, sha256-checked) or
# SWA_ISLANDS_WHEEL=FILE. Refuses, changing nothing, when PYTHON's sglang is another version or
# a file the series touches was changed by someone else. Re-running it is a no-op.
# Undo: PYTHON scripts/patches.py revert (0.5.23: scripts/patches_main.py revert), and restore the
# old --swa-full-tokens-ratio.
# The Dockerfile's install step is this script, so CI's test of it is what the image does.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${1:-python3}"
case "${PY:-}" in -h|--help) sed -n '2,15p' "$0"; exit 0 ;; esac

die() { echo "install_islands.sh: error: $*" >&2; exit 1; }
command -v "$PY" >/dev/null || die "no Python '$PY' (pass the deployment's interpreter)"
command -v git >/dev/null || die "git is needed to apply the patch series"
"$PY" -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("sglang") is None)' \
  || die "'$PY' has no sglang installed"

# The release, read from the installed package without importing it.
version=$("$PY" -c 'import importlib.util, pathlib, re
spec = importlib.util.find_spec("sglang")
text = (pathlib.Path(list(spec.submodule_search_locations)[0]) / "_version.py").read_text()
m = re.search(r"^__version__ = version = .([^\x27\x22]+)", text, re.M)
print(m.group(1) if m else "")') || die "could not read the sglang version of '$PY'"
if [ "$version" = 0.5.23 ]; then
  "$PY" "$ROOT/scripts/patches_main.py" apply --series islands
  "$PY" "$ROOT/scripts/patches_main.py" status | tail -n 1
  exit 0
fi
"$PY" "$ROOT/scripts/patches.py" apply
"$PY" "$ROOT/scripts/patches.py" status | tail -n 1
