#!/usr/bin/env bash
# Runs sharing one GPU: one run of spec_memory_expandable.yaml's settings alone, the same with
# verl's fused kernels, then three and two runs of the first side by side, on one GPU in one
# sitting, from the repository root of a GPU install (a GPU that holds three runs' peaks: an
# H200):
#
#     bash benchmarks/engine_step_share.sh
#
# 1. the plain-PyTorch anchor of this GPU (benchmarks/engine_anchor.py), alone on the GPU;
# 2. engine_step/spec_alone.yaml: `random`, seed 0, those settings, 5 steps, no held-out
#    evaluation: the baseline, and its peak GPU memory the check for what follows;
# 3. engine_step/spec_fused.yaml: the same run with verl's fused kernels for the policy's head,
#    and bench_engine_step.py --levers fused on the two (bench_engine_step_fused.md);
# 4. engine_step/spec_triple.yaml with `--parallel 3`: seeds 0, 1 and 2 of that run side by
#    side, each with its own Ray head. Where the GPU's memory does not hold three times the run
#    alone's peak, spec_triple_fused.yaml (the fused kernels' settings) runs in its place if it
#    holds three of the fused run's peak; else the side is refused;
# 5. engine_step/spec_pair.yaml with `--parallel 2`: seeds 0 and 1, chosen the same way
#    (spec_pair_fused.yaml); it runs even where the triple was refused or failed;
# 6. benchmarks/bench_engine_step.py --levers none on the run alone (and the fused run where a
#    side ran its settings) and the runs of each side that ran to its end (a side that was
#    refused or failed is left out, and the sitting ends in failure): each phase and each run's
#    peak GPU memory. Its ratios are against the first run, the run alone: a fused side's
#    against the fused run are those two columns of the same table.
#
# Every run has PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True in its environment (torch's
# variable, from this script; the levers come from the specs only). Writes
# benchmarks/engine_step/{anchor_share.json,alone/,fused/,triple/,pair/} (triple_fused/ and
# pair_fused/ in their place) and
# benchmarks/bench_engine_step_{fused,share}.md. A run stopped midway starts again from scratch
# at the next call; a finished one is kept.
set -uo pipefail
source "$(dirname "$0")/engine_step/sitting.sh" || exit 1

experiment() {
  PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "${CLEAN[@]}" "$PY" -m mathagent experiment "$@"
}
"$PY" benchmarks/engine_anchor.py --out "$DIR/anchor_share.json" || exit 1
experiment "$DIR/spec_alone.yaml" || {
  echo "engine_step_share.sh: the run alone failed (its log is named above)" >&2; exit 1; }
FAILED=0; FUSED_OK=0
if experiment "$DIR/spec_fused.yaml"; then
  FUSED_OK=1
  "$PY" benchmarks/bench_engine_step.py "$DIR/alone/random_seed0" "$DIR/fused/random_seed0" \
    --anchor "$DIR/anchor_share.json" --labels alone "fused kernels" --levers fused \
    --out benchmarks/bench_engine_step_fused.md || FAILED=1
else
  echo "engine_step_share.sh: the run with the fused kernels failed (its log is named above)" >&2
  FAILED=1
fi
# Why n runs of the settings of a run alone (its folder's gpu_memory.csv) cannot share this GPU;
# nothing where they can.
blocker() {
  "$PY" - "$DIR/$1" "$2" <<'PY'
import sys
from pathlib import Path
from contextlib import redirect_stdout
from mathagent.experiment.commands import parallel_blocker
with redirect_stdout(sys.stderr):  # its notes; the reason alone goes to stdout
    why = parallel_blocker(Path(sys.argv[1]), int(sys.argv[2]))
print(why or "", end="")
PY
}
# The triple first; a side that fails is reported and the other still runs.
RUNS=("$DIR/alone/random_seed0"); LABELS=(alone); FUSED_LISTED=0
for side in triple pair; do
  n=$([ $side = triple ] && echo 3 || echo 2)
  spec=$side; why=$(blocker alone "$n") || { FAILED=1; continue; }
  if [ -n "$why" ] && [ $FUSED_OK = 0 ]; then
    why="$why (the fused kernels' run did not finish)"
  elif [ -n "$why" ] && [ ! -f "$DIR/fused/gpu_memory.csv" ]; then
    why="$why (the fused kernels' run has no peak memory figure)"
  elif [ -n "$why" ]; then
    fused_why=$(blocker fused "$n") || { FAILED=1; continue; }
    if [ -z "$fused_why" ]; then
      echo "engine_step_share.sh: $n runs at once of the run alone's settings: $why; the fused kernels' settings run instead"
      spec=${side}_fused; why=""
    else
      why="$why (the fused kernels' run: $fused_why)"
    fi
  fi
  if [ -n "$why" ]; then
    echo "engine_step_share.sh: $n runs at once: $why" >&2; FAILED=1; continue
  fi
  if experiment "$DIR/spec_$spec.yaml" --parallel "$n"; then
    if [ "$spec" != "$side" ] && [ $FUSED_LISTED = 0 ]; then
      RUNS+=("$DIR/fused/random_seed0"); LABELS+=("fused kernels"); FUSED_LISTED=1
    fi
    label=$([ "$spec" = "$side" ] && echo "$side" || echo "$side, fused kernels")
    for seed in $(seq 0 $((n - 1))); do
      RUNS+=("$DIR/$spec/random_seed$seed"); LABELS+=("$label, seed $seed")
    done
  else
    echo "engine_step_share.sh: the runs of spec_$spec.yaml failed (their logs are named above)" >&2
    FAILED=1
  fi
done
[ ${#RUNS[@]} -gt 1 ] || exit 1
"$PY" benchmarks/bench_engine_step.py "${RUNS[@]}" --anchor "$DIR/anchor_share.json" --levers none \
  --labels "${LABELS[@]}" --out benchmarks/bench_engine_step_share.md || exit 1
exit $FAILED
