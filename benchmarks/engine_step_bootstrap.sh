#!/usr/bin/env bash
# The evaluation-metrics lever (trinity-fast-bootstrap) off and on, on one GPU in one sitting,
# from the repository root of a GPU install:
#
#     bash benchmarks/engine_step_bootstrap.sh
#
# 1. engine_step/spec_bootstrap_off.yaml: `random`, seed 0, the fast settings and levers, 4
#    steps, held out at steps 0 and 4, with MATHAGENT_FAST_BOOTSTRAP=0 (Trinity's own metrics);
# 2. engine_step/spec_bootstrap_on.yaml: the same run with the lever;
# 3. the plain-PyTorch anchor of this GPU (benchmarks/engine_anchor.py), alone on the GPU;
# 4. benchmarks/bench_engine_step.py --levers bootstrap on the two runs: the evaluation's
#    seconds and the CPU cores of each process during it, off against on.
#
# Writes benchmarks/engine_step/{bootstrap_off/,bootstrap_on/,anchor_bootstrap.json} and
# benchmarks/bench_engine_step_bootstrap.md. A run stopped midway starts again from scratch at
# the next call; a finished one is kept. The levers come from the specs only.
set -uo pipefail
source "$(dirname "$0")/engine_step/sitting.sh" || exit 1

for side in off on; do
  "${CLEAN[@]}" "$PY" -m mathagent experiment "$DIR/spec_bootstrap_$side.yaml" || {
    echo "engine_step_bootstrap.sh: the run with the lever $side failed (its log is named above)" >&2
    exit 1; }
done
"$PY" benchmarks/engine_anchor.py --out "$DIR/anchor_bootstrap.json" || exit 1
"$PY" benchmarks/bench_engine_step.py "$DIR/bootstrap_off/random_seed0" \
  "$DIR/bootstrap_on/random_seed0" --anchor "$DIR/anchor_bootstrap.json" \
  --labels "lever off" "lever on" --levers bootstrap --out benchmarks/bench_engine_step_bootstrap.md
