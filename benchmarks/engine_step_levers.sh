#!/usr/bin/env bash
# The speed levers of spec_levers.yaml (padding removal, MATHAGENT_VARLEN_ATTN=1; log-probabilities
# in blocks, MATHAGENT_BATCHED_LOGPROBS=1; several tasks a workflow runner,
# MATHAGENT_RUNNER_SLOTS=4) against the same run without them, on one GPU, in one sitting, from
# the repository root of a GPU install (measured: benchmarks/bench_engine_step_levers.md):
#
#     bash benchmarks/engine_step_levers.sh
#
# 1. tests/test_varlen_attention.py, whose CUDA checks (PyTorch's varlen_attn against SDPA per
#    sequence, forward and gradients, and a packed Qwen2 row) run only where a GPU is; if they
#    fail, the levers run is left out and only the run without levers is made;
# 2. the plain-PyTorch anchor of this GPU (benchmarks/engine_anchor.py), alone on the GPU;
# 3. the engine step's run with the levers (engine_step/spec_levers.yaml: random, seed 0, the
#    fast settings, 8 steps, held-out at step 8), then the same run without them
#    (engine_step/spec_fast8.yaml); a run that fails does not stop the next;
# 4. benchmarks/bench_engine_step.py on the two: each phase, the lever rows, the goals, and
#    whether the run with the levers learns as the committed run of its arm and seed did, and as
#    the run without them did.
#
# Writes benchmarks/engine_step/{anchor_levers.json,levers/,fast8/,same_learning_levers.png}
# and benchmarks/bench_engine_step_levers.md. A run takes about the committed fast run's
# start-up and 8 of its steps (benchmarks/engine_step/fast/random_seed0/timings.json). A run
# stopped midway starts again from scratch at the next call; a finished one is kept. The levers
# come from the specs only: any set in this shell are unset for the runs.
set -uo pipefail
source "$(dirname "$0")/engine_step/sitting.sh" || exit 1

LEVERS=1
"${CLEAN[@]}" "$PY" -m pytest tests/test_varlen_attention.py -q -p no:cacheprovider
case $? in
  0) ;;
  1) LEVERS=0; echo "engine_step_levers.sh: a varlen check failed; the run with the levers is left out" >&2 ;;
  *) echo "engine_step_levers.sh: tests/test_varlen_attention.py did not run (pytest's exit above)" >&2; exit 1 ;;
esac
"$PY" benchmarks/engine_anchor.py --out "$DIR/anchor_levers.json" || exit 1
if [ "$LEVERS" = 1 ] && ! "${CLEAN[@]}" "$PY" -m mathagent experiment "$DIR/spec_levers.yaml"; then
  LEVERS=0; echo "engine_step_levers.sh: the run with the levers failed (its log is named above)" >&2
fi
"${CLEAN[@]}" "$PY" -m mathagent experiment "$DIR/spec_fast8.yaml" || {
  echo "engine_step_levers.sh: the run without the levers failed (its log is named above)" >&2; exit 1; }
[ "$LEVERS" = 1 ] || exit 1
"$PY" benchmarks/bench_engine_step.py "$DIR/fast8/random_seed0" "$DIR/levers/random_seed0" \
  --anchor "$DIR/anchor_levers.json" --labels "no levers" levers --levers levers \
  --same-learning "$DIR/levers/random_seed0" results/trinity_qwen/random_seed0 "$DIR/fast8/random_seed0" \
  --figure "$DIR/same_learning_levers.png" --out benchmarks/bench_engine_step_levers.md
