#!/usr/bin/env bash
# The run with the speed levers alone for 16 steps, then two such runs sharing the GPU, on one
# GPU in one sitting, from the repository root of a GPU install (measured:
# benchmarks/bench_engine_step_pair.md):
#
#     bash benchmarks/engine_step_pair.sh
#
# 1. the plain-PyTorch anchor of this GPU (benchmarks/engine_anchor.py), alone on the GPU;
# 2. engine_step/spec_levers16.yaml: `random`, seed 0, the fast settings and the three levers,
#    16 steps, held out at steps 8 and 16 as the committed run of that arm and seed
#    (results/trinity_qwen/random_seed0): the same-learning check at both steps, and the
#    run alone;
# 3. engine_step/spec_pair.yaml with `--parallel 2`: seeds 0 and 1 of that run side by side,
#    8 steps, each with its own Ray head (a GPU whose memory does not hold two runs' peaks is
#    refused by the experiment command);
# 4. benchmarks/bench_engine_step.py on the three runs: each phase of the run alone and of the
#    pair's two, and the run alone's held-out accuracy against the committed run's.
#
# Writes benchmarks/engine_step/{anchor_pair.json,levers16/,pair/,same_learning_levers16.png}
# and benchmarks/bench_engine_step_pair.md. A run stopped midway starts again from scratch at
# the next call; a finished one is kept. The levers come from the specs only.
set -uo pipefail
source "$(dirname "$0")/engine_step/sitting.sh" || exit 1

"$PY" benchmarks/engine_anchor.py --out "$DIR/anchor_pair.json" || exit 1
"${CLEAN[@]}" "$PY" -m mathagent experiment "$DIR/spec_levers16.yaml" || {
  echo "engine_step_pair.sh: the run alone failed (its log is named above)" >&2; exit 1; }
"${CLEAN[@]}" "$PY" -m mathagent experiment "$DIR/spec_pair.yaml" --parallel 2 || {
  echo "engine_step_pair.sh: the pair failed (its logs are named above)" >&2; exit 1; }
"$PY" benchmarks/bench_engine_step.py "$DIR/levers16/random_seed0" "$DIR/pair/random_seed0" \
  "$DIR/pair/random_seed1" --anchor "$DIR/anchor_pair.json" \
  --labels alone "pair, seed 0" "pair, seed 1" --levers none \
  --same-learning "$DIR/levers16/random_seed0" results/trinity_qwen/random_seed0 \
  --figure "$DIR/same_learning_levers16.png" --out benchmarks/bench_engine_step_pair.md
