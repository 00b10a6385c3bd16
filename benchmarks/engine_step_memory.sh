#!/usr/bin/env bash
# The memory levers against the 60-step spec's `bots` run, on one GPU in one sitting, from the
# repository root of a GPU install, right after the 60-step spec's runs:
#
#     python -m mathagent experiment configs/experiment_qwen_60steps.yaml
#     bash benchmarks/engine_step_memory.sh
#
# The before is the 60-step spec's `bots` run (BEFORE, default results/qwen_60steps/bots_seed0).
# Then:
# 1. engine_step/spec_memory.yaml: the same arm, seed and levers, 4 steps, no held-out
#    evaluation, with micro-batches of 4 for the update and 8 for the log-prob passes and a
#    2 GiB KV cache for vLLM;
# 2. the plain-PyTorch anchor of this GPU (benchmarks/engine_anchor.py), alone on the GPU;
# 3. benchmarks/bench_engine_step.py --levers memory on the two runs: the trainer's and vLLM's
#    peak GPU memory and the run's, and what the smaller micro-batches cost the training step.
#
# Writes benchmarks/engine_step/{memory/,anchor_memory.json} and
# benchmarks/bench_engine_step_memory.md. A run stopped midway starts again from scratch at the
# next call; a finished one is kept. The levers come from the specs only.
set -uo pipefail
source "$(dirname "$0")/engine_step/sitting.sh" || exit 1
BEFORE=${BEFORE:-results/qwen_60steps/bots_seed0}

need_run "$BEFORE" BEFORE
# The run has no evaluation, so the experiment's own report of its folder cannot be written;
# the laid-out run is what this needs.
"${CLEAN[@]}" "$PY" -m mathagent experiment "$DIR/spec_memory.yaml"
[ -f "$DIR/memory/bots_seed0/params.json" ] || {
  echo "engine_step_memory.sh: the run of spec_memory.yaml did not finish (its log is named above)" >&2
  exit 1; }
"$PY" benchmarks/engine_anchor.py --out "$DIR/anchor_memory.json" || exit 1
"$PY" benchmarks/bench_engine_step.py "$BEFORE" "$DIR/memory/bots_seed0" \
  --anchor "$DIR/anchor_memory.json" --labels "60-step run" "memory levers" \
  --levers memory --out benchmarks/bench_engine_step_memory.md
