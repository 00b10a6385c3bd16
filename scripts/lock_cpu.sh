#!/usr/bin/env bash
# Regenerate requirements/cpu.lock from requirements/cpu.in with uv's universal resolution: one
# lock for CPython 3.11 and 3.12 (markers choose where they need different versions), keeping
# the committed pins where it can (UPGRADE=1 resolves afresh). Needs registry access.
#
# torch is installed first, on its own (scripts/install.sh): its CPU build needs no CUDA
# libraries, and the CUDA build brings its own. So the packages only torch's CUDA build needs
# (the Linux-only nvidia-*, triton and cuda-* wheels reached through torch alone) are left out
# of the lock; torch itself stays pinned.
# Usage: bash scripts/lock_cpu.sh   (UV=/path/to/uv to choose the binary; default .venv's)
set -euo pipefail
cd "$(dirname "$0")/.."
UV=${UV:-.venv/.uv/bin/uv}
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
[ -n "${UPGRADE:-}" ] || grep -v '^#' requirements/cpu.lock > "$W/lock.txt"   # preferences
"$UV" pip compile requirements/cpu.in --universal --python-version 3.11 --no-header \
  --annotation-style line --quiet --index-strategy unsafe-best-match -o "$W/lock.txt"
python3 - "$W/lock.txt" > "$W/out.txt" <<'PY'
import re
import sys

lines = [ln.rstrip("\n") for ln in open(sys.argv[1]) if ln.strip() and not ln.startswith("#")]
via, rows = {}, []
for line in lines:
    pin, _, note = line.partition("  # via ")
    name = re.split(r"[=\[ ]", pin, maxsplit=1)[0].lower()
    via[name] = {v.strip().split("[")[0].lower() for v in note.split(",") if v.strip()}
    rows.append((name, pin.strip()))
# reached through torch alone (directly or through another such package), Linux only
torch_only = set()
while True:
    more = {n for n, p in rows if n not in torch_only and via[n]
            and via[n] <= {"torch"} | torch_only and "sys_platform == 'linux'" in p}
    if not more:
        break
    torch_only |= more
for name, pin in rows:
    if name not in torch_only:
        print(pin)
print(f"lock_cpu: left out {len(torch_only)} packages of torch's CUDA build: "
      f"{' '.join(sorted(torch_only))}", file=sys.stderr)
PY
{
  echo "# The CPU set, fully resolved for CPython 3.11 and 3.12 (uv pip compile --universal of"
  echo "# requirements/cpu.in; regenerate with scripts/lock_cpu.sh). torch is installed first, on its"
  echo "# own (scripts/install.sh); the packages only its CUDA build needs are not listed."
  cat "$W/out.txt"
} > requirements/cpu.lock
echo "requirements/cpu.lock: $(grep -c '==' requirements/cpu.lock) pins"
