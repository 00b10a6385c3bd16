#!/usr/bin/env bash
# The memory levers off and on, on one GPU in one sitting, from the repository root of a GPU
# install:
#
#     bash benchmarks/engine_step_memory.sh
#
# 1. engine_step/spec_memory_before.yaml: the 60-step spec's `random` run, seed 0, its settings
#    and levers, 4 steps, held out at step 0 (the starting weights);
# 2. engine_step/spec_memory.yaml: the same run with micro-batches of 4 for the update and 8
#    for the log-prob passes and a 2 GiB KV cache for vLLM;
# 3. the plain-PyTorch anchor of this GPU (benchmarks/engine_anchor.py), alone on the GPU;
# 4. benchmarks/bench_engine_step.py --levers memory on the first two runs: the trainer's,
#    vLLM's and the run's peak GPU memory, what the smaller micro-batches cost the training
#    step, and the step-0 evaluation with the smaller KV cache;
# 5. engine_step/spec_memory_expandable.yaml: the first run with the 2 GiB KV cache alone, and
#    PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True for the run's processes (the smaller
#    micro-batches left torch's caching allocator holding far more than the tensors used);
# 6. benchmarks/bench_engine_step.py --levers expandable on the first run and this one.
#
# Writes benchmarks/engine_step/{memory_before/,memory/,memory_expandable/,anchor_memory.json}
# and benchmarks/bench_engine_step_memory{,_expandable}.md. A run stopped midway starts again
# from scratch at the next call; a finished one is kept. The levers come from the specs only;
# the allocator's variable, torch's own, from this script for the third run alone.
set -uo pipefail
source "$(dirname "$0")/engine_step/sitting.sh" || exit 1

for side in memory_before memory; do
  "${CLEAN[@]}" "$PY" -m mathagent experiment "$DIR/spec_$side.yaml" || {
    echo "engine_step_memory.sh: the run of spec_$side.yaml failed (its log is named above)" >&2
    exit 1; }
done
"$PY" benchmarks/engine_anchor.py --out "$DIR/anchor_memory.json" || exit 1
"$PY" benchmarks/bench_engine_step.py "$DIR/memory_before/random_seed0" "$DIR/memory/random_seed0" \
  --anchor "$DIR/anchor_memory.json" --labels "before" "memory levers" --levers memory \
  --out benchmarks/bench_engine_step_memory.md || exit 1
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "${CLEAN[@]}" "$PY" -m mathagent experiment \
  "$DIR/spec_memory_expandable.yaml" || {
  echo "engine_step_memory.sh: the run of spec_memory_expandable.yaml failed (its log is named above)" >&2
  exit 1; }
"$PY" benchmarks/bench_engine_step.py "$DIR/memory_before/random_seed0" \
  "$DIR/memory_expandable/random_seed0" --anchor "$DIR/anchor_memory.json" \
  --labels "before" "expandable segments" --levers expandable \
  --out benchmarks/bench_engine_step_memory_expandable.md
