#!/usr/bin/env bash
# Workstation (any OS, needs registry access): regenerate requirements/gpu.lock from
# requirements/gpu.in and requirements/gpu-overrides.txt with uv's resolver, for CPython
# 3.11 and newer (a universal resolution: where 3.11 and 3.12 need different versions, markers
# choose; pip evaluates them also with --no-deps).
# pip cannot resolve this set (see gpu-overrides.txt), hence uv and its --override.
# The committed lock's pins are the resolver's preferences: a package added to gpu.in brings its
# own requirements and moves no pin it does not have to (UPGRADE=1 resolves afresh instead).
# Usage: bash scripts/gpu/lock.sh   (UV=/path/to/uv to choose the binary)
set -euo pipefail
cd "$(dirname "$0")/../.."
UV=${UV:-uv}
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
[ -n "${UPGRADE:-}" ] || cp requirements/gpu.lock "$W/lock.txt"   # uv prefers an output file's pins
"$UV" pip compile requirements/gpu.in --override requirements/gpu-overrides.txt --universal \
  --python-version 3.11 --no-header --no-annotate --quiet -o "$W/lock.txt"
{
  echo "# The GPU set, fully resolved: regenerate with scripts/gpu/lock.sh (uv pip compile --universal"
  echo "# of requirements/gpu.in with requirements/gpu-overrides.txt, for CPython 3.11 and newer)."
  echo "# Install with --no-deps (docs/install.md, section \"GPU\"):"
  echo "#   pip install torch==2.11.0 --index-url https://download.pytorch.org/whl/cu130"
  echo "#   pip install --no-deps -r requirements/gpu.lock && pip install --no-deps -e ."
  cat "$W/lock.txt"
} > requirements/gpu.lock
echo "requirements/gpu.lock: $(grep -c '==' requirements/gpu.lock) pins"
