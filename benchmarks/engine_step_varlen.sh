#!/usr/bin/env bash
# The padding-removal lever (MATHAGENT_VARLEN_ATTN=1, mathagent.compat's
# transformers-varlen-attention) against the fast settings it would join, on one GPU, in one
# sitting, from the repository root of a GPU install:
#
#     bash benchmarks/engine_step_varlen.sh
#
# 1. tests/test_varlen_attention.py, whose CUDA checks (PyTorch's varlen_attn against SDPA per
#    sequence, forward and gradients, and a packed Qwen2 row) run only where a GPU is;
# 2. the plain-PyTorch anchor of this GPU (benchmarks/engine_anchor.py);
# 3. the engine step's run (benchmarks/engine_step/spec.yaml: random, seed 0, 16 steps, the fast
#    settings) twice, one after the other: padded (sdpa), then with padding removed;
# 4. benchmarks/bench_engine_step.py on the two: each phase, the lever rows, the goals, and
#    whether the unpadded run learns as the committed run of its arm and seed did.
#
# Writes benchmarks/engine_step/{anchor_varlen.json,padded/,varlen/,same_learning_varlen.png}
# and benchmarks/bench_engine_step_varlen.md. About 12 minutes a run (the committed fast
# run's). Stops at the first step that fails; a run stopped midway starts again from scratch
# at the next call, a finished one is kept.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
DIR=benchmarks/engine_step

env -u MATHAGENT_VARLEN_ATTN "$PY" -m pytest tests/test_varlen_attention.py -q -p no:cacheprovider
"$PY" benchmarks/engine_anchor.py --out "$DIR/anchor_varlen.json"
env -u MATHAGENT_VARLEN_ATTN "$PY" -m mathagent experiment "$DIR/spec.yaml" --out "$DIR/padded"
MATHAGENT_VARLEN_ATTN=1 "$PY" -m mathagent experiment "$DIR/spec.yaml" --out "$DIR/varlen"
"$PY" benchmarks/bench_engine_step.py "$DIR/padded/random_seed0" "$DIR/varlen/random_seed0" \
  --anchor "$DIR/anchor_varlen.json" --labels padded varlen --levers varlen \
  --same-learning "$DIR/varlen/random_seed0" results/trinity_qwen/random_seed0 \
  --figure "$DIR/same_learning_varlen.png" --out benchmarks/bench_engine_step_varlen.md
