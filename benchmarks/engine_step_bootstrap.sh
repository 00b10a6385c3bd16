#!/usr/bin/env bash
# The evaluation-metrics lever (trinity-fast-bootstrap) off against on, on one GPU in one
# sitting, from the repository root of a GPU install, right after the 60-step spec's runs:
#
#     python -m mathagent experiment configs/experiment_qwen_60steps.yaml   # the lever on
#     bash benchmarks/engine_step_bootstrap.sh
#
# The lever on is the 60-step spec's `random` run (ON, default
# results/qwen_60steps/random_seed0: held out at step 0 and every 10 steps). Then:
# 1. engine_step/spec_bootstrap_off.yaml: the same arm, seed and settings with
#    MATHAGENT_FAST_BOOTSTRAP=0 (Trinity's own metrics), 4 steps, held out at steps 0 and 4;
# 2. the plain-PyTorch anchor of this GPU (benchmarks/engine_anchor.py), alone on the GPU;
# 3. benchmarks/bench_engine_step.py --levers bootstrap on the two runs: every evaluation's
#    median and the evaluation at step 0 (the same starting weights in both runs), and the CPU
#    cores of each process during them, off against on.
#
# Writes benchmarks/engine_step/{bootstrap_off/,anchor_bootstrap.json} and
# benchmarks/bench_engine_step_bootstrap.md. A run stopped midway starts again from scratch at
# the next call; a finished one is kept. The levers come from the specs only.
set -uo pipefail
source "$(dirname "$0")/engine_step/sitting.sh" || exit 1
ON=${ON:-results/qwen_60steps/random_seed0}

[ -f "$ON/params.json" ] || {
  echo "engine_step_bootstrap.sh: $ON: no laid-out run (run configs/experiment_qwen_60steps.yaml first, or set ON)" >&2
  exit 1; }
"${CLEAN[@]}" "$PY" -m mathagent experiment "$DIR/spec_bootstrap_off.yaml" || {
  echo "engine_step_bootstrap.sh: the run with the lever off failed (its log is named above)" >&2
  exit 1; }
"$PY" benchmarks/engine_anchor.py --out "$DIR/anchor_bootstrap.json" || exit 1
"$PY" benchmarks/bench_engine_step.py "$DIR/bootstrap_off/random_seed0" "$ON" \
  --anchor "$DIR/anchor_bootstrap.json" --labels "lever off" "lever on (60-step run)" \
  --levers bootstrap --out benchmarks/bench_engine_step_bootstrap.md
