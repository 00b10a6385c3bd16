#!/usr/bin/env bash
# On the GPU machine. Phase 1 (job sent with .model_part1/ and .whl/): keep the first model
# half under /root and install the wheels sent along into /root/site, then check imports.
# Phase 2 (the next job, sent with .model_part2/): join the halves and check the sha256.
set -euo pipefail
cd "$(dirname "$0")/../.."
M=/root/mathagent_model
mkdir -p "$M"
case "${1:?phase 1 or 2}" in
1)
  cp .model_part1/* "$M"/
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /root/site .whl/*.whl
  source scripts/gpu/env.sh
  python3 -m pip list 2>/dev/null | grep -iE "^(torch|transformers|pyarrow|pandas|numpy|huggingface.hub|accelerate|tensorboard|sympy|fsspec) "
  python3 scripts/gpu/check_imports.py
  ;;
2)
  cp .model_part2/* "$M"/
  cat "$M"/gguf.part00 "$M"/gguf.part01 > "$M/$(cat "$M"/name)"
  rm "$M"/gguf.part00 "$M"/gguf.part01
  echo "$(cat "$M"/sha256)  $M/$(cat "$M"/name)" | sha256sum -c -
  ;;
esac
