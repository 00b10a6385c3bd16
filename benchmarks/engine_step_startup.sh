#!/usr/bin/env bash
# The start-up levers and the evaluation without log-probabilities, in one sitting on one GPU,
# from the repository root of a GPU install:
#
#     bash benchmarks/engine_step_startup.sh
#
# 1. the plain-PyTorch anchor of this GPU (benchmarks/engine_anchor.py), alone on the GPU;
# 2. engine_step/spec_startup_cold.yaml: the 60-step spec's `random` run, seed 0, 3 steps,
#    held out at step 0 only, with vLLM's compile cache empty: vLLM compiles its graphs;
# 3. engine_step/spec_startup_warm.yaml: the same run again: vLLM loads the graphs the first
#    run left in the cache the experiment command keeps (mathagent.experiment.vllm_cache);
# 4. engine_step/spec_startup_levers.yaml: the same with the rollout coordinator and its
#    workflow runners made beside vLLM's start (MATHAGENT_EARLY_RUNNERS=1), and evaluation
#    requests without log-probabilities (MATHAGENT_EVAL_NO_LOGPROBS=1);
# 5. benchmarks/bench_engine_step.py --levers startup on the three runs
#    (benchmarks/bench_engine_step_startup.md): each start-up milestone, vLLM's torch.compile
#    seconds and whether its graphs came from the cache, the evaluation of the starting
#    weights (the same work in the three runs, two of them without the evaluation lever), and
#    the goals.
#
# The first run must compile: where the cache's first slot already holds a cache and that run
# is not laid out yet, the sitting stops before it starts anything (move the slot's files
# aside). Writes benchmarks/engine_step/{anchor_startup.json,startup_cold/,startup_warm/,
# startup_levers/}. A run stopped midway starts again from scratch at the next call; a finished
# one is kept.
set -uo pipefail
source "$(dirname "$0")/engine_step/sitting.sh" || exit 1

SLOT0=$("$PY" -c "from mathagent.experiment.vllm_cache import cache_root; print(cache_root() / 'slot0')") || exit 1
if [ ! -d "$DIR/startup_cold/random_seed0" ] && \
   [ -n "$(ls -A "$SLOT0" 2>/dev/null | grep -vx '.lock')" ]; then
  echo "engine_step_startup.sh: $SLOT0 holds a vLLM compile cache already, so the first run would not compile (move its files aside to measure a start from nothing)" >&2
  exit 1
fi
"$PY" benchmarks/engine_anchor.py --out "$DIR/anchor_startup.json" || exit 1
for name in cold warm levers; do
  "${CLEAN[@]}" "$PY" -m mathagent experiment "$DIR/spec_startup_$name.yaml" || {
    echo "engine_step_startup.sh: the run of spec_startup_$name.yaml failed (its log is named above)" >&2
    exit 1; }
done
"$PY" benchmarks/bench_engine_step.py "$DIR"/startup_{cold,warm,levers}/random_seed0 \
  --anchor "$DIR/anchor_startup.json" --levers startup \
  --labels "compiled" "graphs from the cache" "the cache and both levers" \
  --out benchmarks/bench_engine_step_startup.md
