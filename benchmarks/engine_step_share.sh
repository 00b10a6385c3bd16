#!/usr/bin/env bash
# Runs sharing one GPU: three, then two runs of spec_memory_expandable.yaml's settings side by
# side, on one GPU in the sitting of benchmarks/engine_step_memory.sh (run that first: its run
# with those settings alone and its anchor are this one's baseline), from the repository root
# of a GPU install:
#
#     bash benchmarks/engine_step_memory.sh && bash benchmarks/engine_step_share.sh
#
# 1. engine_step/spec_triple.yaml with `--parallel 3`: `random`, seeds 0, 1 and 2, those
#    settings, 5 steps, no held-out evaluation, each with its own Ray head (refused where the
#    GPU's memory does not hold three times the peak of that run alone);
# 2. engine_step/spec_pair.yaml with `--parallel 2`: seeds 0 and 1 of the same run (it runs
#    even where the triple was refused or failed);
# 3. benchmarks/bench_engine_step.py --levers none on that run alone, the pair's
#    two and the triple's three (those that finished): each phase and each run's peak GPU
#    memory.
#
# Writes benchmarks/engine_step/{triple/,pair/} and benchmarks/bench_engine_step_share.md. A run
# stopped midway starts again from scratch at the next call; a finished one is kept.
set -uo pipefail
source "$(dirname "$0")/engine_step/sitting.sh" || exit 1

ALONE=$DIR/memory_expandable/random_seed0
[ -d "$ALONE" ] && [ -f "$DIR/anchor_memory.json" ] || {
  echo "engine_step_share.sh: no $ALONE or $DIR/anchor_memory.json: run benchmarks/engine_step_memory.sh first" >&2
  exit 1; }
# The triple first; a side that fails is reported and the other still runs.
RUNS=("$ALONE"); LABELS=(alone); FAILED=0
for side in triple pair; do
  n=$([ $side = triple ] && echo 3 || echo 2)
  # n times the peak of the run alone (its folder's gpu_memory.csv) against this GPU's memory.
  "$PY" - "$DIR/memory_expandable" "$n" <<'PY' || { FAILED=1; continue; }
import sys
from pathlib import Path
from mathagent.experiment.commands import parallel_blocker
if why := parallel_blocker(Path(sys.argv[1]), int(sys.argv[2])):
    sys.exit(f"engine_step_share.sh: {sys.argv[2]} runs at once: {why}")
PY
  if PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "${CLEAN[@]}" "$PY" -m mathagent \
      experiment "$DIR/spec_$side.yaml" --parallel "$n"; then
    for seed in $(seq 0 $((n - 1))); do
      RUNS+=("$DIR/$side/random_seed$seed"); LABELS+=("$side, seed $seed")
    done
  else
    echo "engine_step_share.sh: the runs of spec_$side.yaml failed (their logs are named above)" >&2
    FAILED=1
  fi
done
[ ${#RUNS[@]} -gt 1 ] || exit 1
"$PY" benchmarks/bench_engine_step.py "${RUNS[@]}" --anchor "$DIR/anchor_memory.json" --levers none \
  --labels "${LABELS[@]}" --out benchmarks/bench_engine_step_share.md || exit 1
exit $FAILED
