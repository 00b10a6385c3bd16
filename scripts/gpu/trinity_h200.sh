#!/usr/bin/env bash
# One-GPU Trinity-RFT runs on an offline H200 machine, driven from the repository root.
# What ran for results/trinity_h200*/ and results/trinity_h200_rollout_probe/ (see their
# READMEs). Steps, each its own command:
#
#   bash scripts/gpu/trinity_h200.sh part DIR        copy one bundle part (DIR/part?? and
#                                                    DIR/SHA256SUMS) to $B
#   bash scripts/gpu/trinity_h200.sh qpart DIR       copy one part of the Qwen model file (DIR/q??
#                                                    and DIR/QSHA256SUMS) to $Q
#   bash scripts/gpu/trinity_h200.sh cache FILE      a vLLM compile cache that `collect` packed in an
#                                                    earlier stretch (vllm_cache_<run>.tgz): that run,
#                                                    when `start` makes it next, begins from it
#   bash scripts/gpu/trinity_h200.sh pilot           the Qwen policy's pilot pair (below), with
#                                                    `start` on the joined Qwen model file
#   bash scripts/gpu/trinity_h200.sh qwen SEED...    the Qwen policy's pair per SEED (random_qwen_seedN,
#                                                    difficulty_qwen_seedN): the Qwen configs with
#                                                    the seed (the random run also QWEN_LEVER),
#                                                    on the joined Qwen model file; QWEN_ONLY=NAME
#                                                    starts only the named runs (a stretch too
#                                                    short for a pair), and can name the third
#                                                    arm, bots_qwen_seedN (config_bots_qwen.yaml)
#   bash scripts/gpu/trinity_h200.sh start RUN...    install the bundle; export the model while
#                                                    each RUN's Ray head starts; then per RUN a
#                                                    detached `train`
#   bash scripts/gpu/trinity_h200.sh experiment SEED...
#                                                    `start` for the 40-step experiment of
#                                                    results/trinity_h200/: per SEED, random and
#                                                    difficulty_based with EXPERIMENT_ARGS; then,
#                                                    detached, `local SEED...` (LOCAL=0: not;
#                                                    LOCAL_SEEDS="1 2": those seeds instead)
#   bash scripts/gpu/trinity_h200.sh local SEED...   once no Trinity run is alive: train-local
#                                                    with configs/train_local_trinity.yaml, both
#                                                    selectors, per SEED (scripts/gpu/train_runs.py)
#   bash scripts/gpu/trinity_h200.sh settings        print the extra `train` settings of each step
#                                                    (KEY=VALUE, one line per step and run)
#   bash scripts/gpu/trinity_h200.sh wait SECONDS    follow the runs until all end or SECONDS pass,
#                                                    then `collect` what they have written so far;
#                                                    with CALL_END (Unix time the call must end by)
#                                                    set, it stops COLLECT_S (90) s before it
#   bash scripts/gpu/trinity_h200.sh collect         pack each run's event files, configs and logs
#                                                    into $OUT (default $W/out), finished or not
#   bash scripts/gpu/trinity_h200.sh again NAME...   after a failed try: stop run NAME's processes,
#                                                    keep its files in $W/tries/NAME.K; the next
#                                                    `qwen`/`start` makes it anew (set-up ~30 s)
#
# RUN is NAME=CONFIG (e.g. random=configs/config_random_arithmetic.yaml); every run gets the
# same extra train arguments from $TRAIN_ARGS, and run NAME also those in $ARGS_NAME. Runs share
# the GPU: each has its own Ray head (all 16 CPUs, the one GPU) and so its own colocated vLLM
# engine and trainer.
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${B:-/root/bundle}            # bundle parts, then the unpacked site-packages
Q=${Q:-/root/qparts}            # parts of the Qwen model file
W=${W:-/root/trinity}           # model, project copy, runs, logs
OUT=${OUT:-$W/out}
source scripts/gpu/common.sh
# The model is export-model's float32 export (setup). The experiment's settings, the same in
# every stretch of GPU time: 40 steps, evaluation on the
# held-out split at step 0 and every 10 steps (tune() takes the interval from the tuner block),
# vLLM with torch.compile and CUDA graphs (the configs' enforce_eager: true decodes at about
# 20 ms a step, the rollout phase's floor), and one seed for the selector's and vLLM's sampling.
EXPERIMENT_ARGS="buffer.total_steps=40 tuner.algorithm.eval_interval_steps=10 explorer.rollout_model.enforce_eager=false"
# The Qwen policy's pilot (results/trinity_h200_qwen_pilot/): the random selector, seed 0, 20
# steps, held-out evaluation at steps 0, 10 and 20, CUDA graphs. Two runs side by side that
# differ in the start-up lever under test (Trinity's asynchronous runners: 16 runner processes,
# each running a task's rollouts concurrently, against 32 single-rollout runners) and in the
# learning rate (the upstream 1e-6 against 5e-6).
PILOT_ARGS="buffer.total_steps=20 tuner.algorithm.eval_interval_steps=10 explorer.rollout_model.enforce_eager=false explorer.eval_on_startup=true"
PILOT_RUNS="pilot_seq32_lr1e6 pilot_async16_lr5e6"
# (Both runs name their runners and evaluate at step 0: the Qwen configs have since taken the
# asynchronous runners and dropped the step-0 evaluation. They have also since turned the
# agent's console output off in the runners, and fixed the trainer's micro-batches at 4
# sequences where the pilot's trainer batched by tokens.)
export ARGS_pilot_seq32_lr1e6="algorithm.optimizer.lr=1e-6 tuner.algorithm.learning_rate=1e-6 \
explorer.concurrent_mode=sequential explorer.max_repeat_times_per_runner=1 explorer.runner_per_model=32"
export ARGS_pilot_async16_lr5e6="algorithm.optimizer.lr=5e-6 tuner.algorithm.learning_rate=5e-6 \
explorer.concurrent_mode=asynchronous explorer.max_repeat_times_per_runner=null explorer.runner_per_model=16"
# The Qwen policy's pair (random and difficulty_based side by side, one seed), the same in
# every stretch: configs/config_{random,difficulty}_qwen.yaml with the seed set here (and the
# random run's start-up lever, QWEN_LEVER below). The configs hold the experiment's settings
# and say why: 16 steps at the upstream batch (16 tasks x 8 rollouts), held-out evaluation at
# steps 8 and 16 (the base model's, the same for every run, measured once), and the trainer's
# fixed micro-batches of 4 sequences that let two trainers share the GPU. The four stretches
# before them set these same values here, as extra `train` settings.
# A start-up lever tried side by side in a pair: the random run gets QWEN_LEVER, the
# difficulty-based run keeps Trinity's default (QWEN_LEVER= gives both the same start). It
# changes when the runners start, not what they run. Trinity prepares at most
# explorer.runner_prepare_concurrency (default 8) workflow runners at a time, each one a Ray
# worker that imports Trinity's explorer (torch, vLLM's config, Ray) and AgentScope before it is
# ready, so a run's 16 runners come up in two waves: in the four stretches so far the first
# runner was ready 0.8-1.1 minutes after the models, the last 0.5-0.7 minutes after it. The cap
# is Trinity's guard against a crash of concurrent prepares (a glibc getenv/setenv race); a
# runner whose prepare fails is made again, twice at most. The two runs share the machine's
# CPUs, so the random run's 16 prepares at once also slow the other run's: the pair compares
# the lever under the same load, not each run alone.
# In the fourth stretch (explorer.runner_prepare_concurrency=16) it did not pay: the random
# run's runners were ready 0.20 minutes after the other's. Empty since: both runs start alike.
QWEN_LEVER=${QWEN_LEVER-}
seed_args() {
  echo "buffer.explorer_input.taskset.data_selector.seed=$1 explorer.rollout_model.seed=$1"
}
# pairs RUN_SUFFIX CONFIG_SUFFIX SEED...: per SEED the random and the difficulty_based run,
# NAME=configs/config_<selector>_CONFIG_SUFFIX.yaml into the array `specs`, the seed's settings
# into ARGS_NAME (NAME: <selector>RUN_SUFFIX_seed<SEED>)
pairs() {
  local run=$1 conf=$2 seed sel; shift 2; specs=()
  for seed in "${@:?SEED...}"; do
    for sel in random difficulty; do
      export "ARGS_${sel}${run}_seed$seed=$(seed_args "$seed")"
      specs+=("${sel}${run}_seed$seed=configs/config_${sel}_${conf}.yaml")
    done
  done
}

# run_env NAME: the environment of run NAME (its Ray head's, so its workers', and its
# `train`'s): its label, folders, model and vLLM compile cache; sets `name`
run_env() {
  name=$1
  export MATHAGENT_RUN_LABEL=$name MATHAGENT_RUNS=$W/runs/$name
  export TRINITY_CHECKPOINT_ROOT_DIR=$W/ckpt/$name TRINITY_MODEL_PATH=${MODEL_DIR:-$W/model}
  # vLLM's compile cache per run: runs compiling at the same time do not share files
  export VLLM_CACHE_ROOT=$W/vllm_cache/$name
  # vLLM's compiled artifacts name the folder they were compiled in (the whole path), so a
  # carried cache serves only the run whose VLLM_CACHE_ROOT made it (`collect` writes that
  # path into it as .packed_from): in any other folder vLLM fails to find its artifacts
  if [ -d "$W/vllm_cache_seed" ] && [ ! -e "$VLLM_CACHE_ROOT" ]; then
    local from; from=$(cat "$W/vllm_cache_seed/.packed_from" 2>/dev/null || true)
    if [ "$from" = "$VLLM_CACHE_ROOT" ]; then
      mkdir -p "$W/vllm_cache"; cp -r "$W/vllm_cache_seed" "$VLLM_CACHE_ROOT"
      log "$name: vLLM starts from the carried compile cache"
    else
      log "$name: compiles anew; the carried compile cache was made in ${from:-a folder it does not record}"
    fi
  fi
}

# qwen_pair SEED...: `pairs` for the Qwen experiment, the random runs with QWEN_LEVER; per SEED
# the third arm too (bots_qwen_seedN: configs/config_bots_qwen.yaml with the seed) in `arms`,
# started only when QWEN_ONLY names it; with QWEN_ONLY (run names), only those runs (each must
# be one of the pairs' or the arms')
qwen_pair() {
  local seed own name spec found keep=()
  pairs _qwen qwen "$@"
  arms=()
  for seed in "$@"; do
    own="ARGS_random_qwen_seed$seed"; export "$own=${!own} $QWEN_LEVER"
    export "ARGS_bots_qwen_seed$seed=$(seed_args "$seed")"
    arms+=("bots_qwen_seed$seed=configs/config_bots_qwen.yaml")
  done
  [ -n "${QWEN_ONLY:-}" ] || return 0
  for name in $QWEN_ONLY; do
    found=""
    for spec in "${specs[@]}" "${arms[@]}"; do
      [ "${spec%%=*}" = "$name" ] && keep+=("$spec") && found=1
    done
    [ -n "$found" ] || { echo "QWEN_ONLY: $name is not a run of qwen $* (${specs[*]%%=*} ${arms[*]%%=*})" >&2; exit 2; }
  done
  specs=("${keep[@]}")
}

case "${1:?usage: trinity_h200.sh part|qpart|pilot|qwen|start|experiment|local|settings|wait|collect|again ...}" in
part)
  copy_part "${2:?DIR}"
  ;;
qpart)
  copy_qpart "${2:?DIR}"
  ;;
cache)
  # unpacked once into $W/vllm_cache_seed; a file that is not a readable tar.gz is refused
  f=${2:?FILE}; mkdir -p "$W"; rm -rf "$W/vllm_cache_seed.tmp"; mkdir "$W/vllm_cache_seed.tmp"
  if ! tar -xzf "$f" -C "$W/vllm_cache_seed.tmp" 2>/dev/null; then
    rm -rf "$W/vllm_cache_seed.tmp"; echo "cache: $f is not a vLLM compile cache packed by collect (tar.gz)" >&2; exit 2
  fi
  rm -rf "$W/vllm_cache_seed"; mv "$W/vllm_cache_seed.tmp" "$W/vllm_cache_seed"
  log "vLLM compile cache ready for the next runs: $(du -sm "$W/vllm_cache_seed" | cut -f1) MB in $W/vllm_cache_seed"
  ;;
pilot)
  mkdir -p "$W"; join_model "$W/qwen.gguf"
  specs=()
  for name in $PILOT_RUNS; do specs+=("$name=configs/config_random_qwen.yaml"); done
  MODEL_FILE=$W/qwen.gguf MODEL_DIR=$W/qwen-model TRAIN_ARGS="$PILOT_ARGS $(seed_args 0) ${TRAIN_ARGS:-}" bash "$0" start "${specs[@]}"
  ;;
settings)
  echo "experiment $EXPERIMENT_ARGS"
  for name in $PILOT_RUNS; do own="ARGS_$name"; echo "$name $PILOT_ARGS ${!own}"; done
  qwen_pair 0; for spec in "${specs[@]}"; do name=${spec%%=*}; own="ARGS_$name"; echo "$name ${!own}"; done
  ;;
qwen)
  shift
  qwen_pair "$@"
  # a pair held 113,152 MiB at the end of its first update (results/trinity_h200_qwen_mb4/):
  # on a smaller GPU (an H100's ~80 GiB) only one run at a time
  gpu_mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | head -1 || true)
  if [ "${#specs[@]}" -gt 1 ] && [[ "$gpu_mib" =~ ^[0-9]+$ ]] && [ "$gpu_mib" -lt "${QWEN_PAIR_MIB:-120000}" ]; then
    echo "qwen: a pair needs about 113 GiB of GPU memory and this GPU has $gpu_mib MiB; set QWEN_ONLY to one of ${specs[*]%%=*} ${arms[*]%%=*}" >&2
    exit 2
  fi
  mkdir -p "$W"; join_model "$W/qwen.gguf"
  MODEL_FILE=$W/qwen.gguf MODEL_DIR=$W/qwen-model TRAIN_ARGS="${TRAIN_ARGS:-}" bash "$0" start "${specs[@]}"
  ;;
start)
  shift
  # the Ray heads start beside the model's export; each `train` once the model is there
  setup_begin
  # one GPU monitor per machine: a second `start` (runs made again after a failed one) keeps
  # the first's, where two would write every sample twice
  if ! alive "$W/gpu_monitor.pidof"; then
    setsid bash scripts/gpu/gpu_monitor.sh "$W/gpu" > /dev/null 2>&1 < /dev/null &
    echo $! > "$W/gpu_monitor.pidof"
  fi
  for spec in "$@"; do
    run_env "${spec%%=*}"
    python3 -m mathagent ray start --temp-dir "/tmp/ray_$name" \
      --object-store-memory $((4 * 1024**3)) 2>&1 | grep -v "starting Ray head" | tail -2
  done
  if ! setup_end; then   # no run without its model: the heads started here are stopped
    for spec in "$@"; do
      run_env "${spec%%=*}"; python3 -m mathagent ray stop 2>&1 | tail -1 || true
    done
    exit 1
  fi
  for spec in "$@"; do
    run_env "${spec%%=*}"; config=${spec#*=}
    echo "$TRINITY_MODEL_PATH" > "$W/$name.model"   # the model of the run (collect decodes with it)
    date +%s > "$W/$name.t0"
    # a process session of its own: it outlives this command; its id is recorded to follow it
    own="ARGS_$name"
    setsid bash -c "echo \$\$ > $W/$name.pid; exec python3 -m mathagent train --config $config \
--compare none ${TRAIN_ARGS:-} ${!own:-}" > "$W/$name.log" 2>&1 < /dev/null &
    log "started $name ($config)"
  done
  ;;
experiment)
  shift
  pairs "" arithmetic "$@"
  TRAIN_ARGS="$EXPERIMENT_ARGS ${TRAIN_ARGS:-}" bash "$0" start "${specs[@]}"
  if [ "${LOCAL:-1}" != 0 ]; then
    # shellcheck disable=SC2086  # LOCAL_SEEDS is a list of seeds
    set -- ${LOCAL_SEEDS:-$@}
    setsid bash "$0" local "$@" > "$W/local.out" 2>&1 < /dev/null &
    log "train-local runs for seed(s) $* start when the Trinity runs end"
  fi
  ;;
local)
  shift; mkdir -p "$W/local"; echo $$ > "$W/local/pid"
  source "$B/env.sh"; cd "$W/proj"; export PYTHONPATH="$W/proj:$PYTHONPATH"
  sleep 10   # the runs' pid files are written by their own detached sessions
  while true; do
    running=0
    for pidf in "$W"/*.pid; do alive "$pidf" && running=$((running + 1)); done
    [ $running -eq 0 ] && break
    sleep 5
  done
  log "train-local: start"
  python3 scripts/gpu/train_runs.py --config configs/train_local_trinity.yaml \
    --selectors random difficulty_based --seeds "${@:?SEED...}" --steps 40 \
    --time-limit "${LOCAL_MINUTES:-10}" --taskset data/arithmetic --model "$(ls "$B"/*.gguf)" \
    --out "$W/local/out" --work "$W/local/work" > "$W/local/train_runs.log" 2>&1 || true
  log "train-local: ended"; touch "$W/local/ended"
  ;;
again)
  # runs NAME... once more on this machine after a failed try: stop what this script started
  # for each (its `train` session, its Ray head and the processes the head recorded), keep the
  # try's files in $W/tries/NAME.K, and leave the bundle, the model and the run's compile cache;
  # then `qwen` (QWEN_ONLY=NAME) or `start` starts it anew
  shift
  if [ -f "$B/env.sh" ]; then source "$B/env.sh"; fi
  for name in "${@:?NAME...}"; do
    [ -f "$W/$name.pid" ] || { echo "again: $name is no run of this machine (no $W/$name.pid)" >&2; exit 2; }
  done
  for name in "$@"; do
    # the `train` session (setsid: its id is its process group's), then its Ray head and what
    # the head recorded (mathagent ray stop escalates to SIGKILL itself)
    if alive "$W/$name.pid"; then kill -- "-$(cat "$W/$name.pid")" 2>/dev/null || true; fi
    run_env "$name"
    said=$(python3 -m mathagent ray stop 2>&1 || true); echo "$said" | tail -1
    if echo "$said" | grep -q "still running:"; then
      echo "again: $name: its Ray head's processes outlived \`ray stop\`; its files stay where they are" >&2
      exit 1
    fi
    for _ in $(seq 30); do alive "$W/$name.pid" || break; sleep 1; done
    if alive "$W/$name.pid"; then kill -KILL -- "-$(cat "$W/$name.pid")" 2>/dev/null || true; sleep 1; fi
    k=1; while [ -e "$W/tries/$name.$k" ]; do k=$((k + 1)); done
    mkdir -p "$W/tries/$name.$k"
    for f in "$W/$name".*; do mv "$f" "$W/tries/$name.$k/"; done
    for d in runs ckpt collect; do
      if [ -e "$W/$d/$name" ]; then mv "$W/$d/$name" "$W/tries/$name.$k/$d"; fi
    done
    log "$name: its try is kept in $W/tries/$name.$k; start it anew (qwen with QWEN_ONLY=$name, or start)"
  done
  ;;
wait)
  limit=${2:?SECONDS}; t0=$(date +%s); declare -A last
  # with CALL_END set, stop following COLLECT_S (default 90) seconds before it, so that the
  # collect below comes back with the call
  if left=$(call_left); then
    left=$(( left - ${COLLECT_S:-90} )); [ "$left" -lt 0 ] && left=0
    [ "$left" -lt "$limit" ] && { log "following for $left s, not $limit: the call ends at CALL_END"; limit=$left; }
  fi
  while true; do
    running=0
    for pidf in "$W"/*.pid; do
      name=$(basename "$pidf" .pid)
      cur=$(grep -aoE "Explore step [0-9]+|Training at step [0-9]+ finished|Evaluation on \\S+ at step [0-9]+|Traceback" \
        "$W/$name.log" | tail -1 || true)
      [ "$cur" != "${last[$name]:-}" ] && { log "$name: $cur"; last[$name]=$cur; }
      # an explorer or trainer that logged its failure ends the run, though its processes
      # (a trainer waiting for a weight sync that never comes) may live on: not followed
      if alive "$pidf" && grep -aqE "\[(explorer|trainer)\.py:[0-9]+\] Error in (Explorer|Trainer):" "$W/$name.log"; then
        if [ -z "${last[$name.failed]:-}" ]; then
          last[$name.failed]=1
          log "$name failed; what is left of it stays until \`again $name\`; the error:"
          grep -aE "\[(explorer|trainer)\.py:[0-9]+\] Error in (Explorer|Trainer):" "$W/$name.log" \
            | head -1 | cut -c1-300 || true
          # the exception a process logged at level ERROR last (the cause, e.g. vLLM's)
          grep -aE " ERROR .*[A-Za-z]+(Error|Exception): " "$W/$name.log" | tail -1 | cut -c1-400 || true
        fi
      elif alive "$pidf"; then running=$((running + 1))
      elif [ ! -f "$W/$name.ended" ]; then
        touch "$W/$name.ended"; log "$name ended; last lines:"
        grep -av "it/s\]" "$W/$name.log" | tail -n 15 | cut -c1-400 || true
      fi
    done
    if [ -f "$W/local/pid" ] && [ ! -f "$W/local/ended" ]; then
      running=$((running + 1))
      cur=$(for f in "$W"/local/work/*/metrics.csv; do if [ -f "$f" ]; then
        echo "$(basename "$(dirname "$f")") $(( $(wc -l < "$f") - 1 )) rows"; fi; done | xargs)
      if [ "$cur" != "${last[local]:-}" ]; then log "train-local: ${cur:-waiting}"; last[local]=$cur; fi
    elif [ -f "$W/local/ended" ] && [ -z "${last[local_end]:-}" ]; then
      last[local_end]=1; log "train-local ended; last lines:"; tail -n 8 "$W/local/train_runs.log"
    fi
    [ $running -eq 0 ] && { log "no run goes on"; break; }
    [ $(( $(date +%s) - t0 )) -ge "$limit" ] && { log "$running run(s) still running"; break; }
    sleep 15
  done
  tail -n 3 "$W"/gpu.csv 2>/dev/null || true
  # what exists so far comes back with every call: a machine lost between calls loses
  # only what ran after the last one
  bash "$0" collect
  ;;
collect)
  mkdir -p "$OUT"
  for pidf in "$W"/*.pid; do
    pack_run "$(basename "$pidf" .pid)"
  done
  cp "$W/gpu.csv" "$W/gpu_apps.csv" "$OUT/" 2>/dev/null || true
  if [ -d "$W/local" ]; then   # the train-local runs: tables, logs, event files; no checkpoints
    tar -czf "$OUT/local.tgz" -C "$W" --exclude='checkpoint*' local || tar_ok $?
  fi
  # each run's vLLM compile cache, once, when small enough to come back
  # (vllm_cache_<run>.tgz): a later stretch can start that run from it (`cache FILE`) instead
  # of compiling again. A cache is packed once the run's log says its vLLM engine is ready
  # (before, it may be half written) and then marked with the folder it serves (.packed_from):
  # a marked cache, carried in or packed earlier, is home already (a second collect in one call
  # leaves the first one's file in OUT). Optional: a cache not ready, too large or changed
  # while packing is left behind, with a line saying so.
  for cache in "$W"/vllm_cache/*/; do
    [ -d "$cache" ] || continue
    cache=${cache%/}; name=$(basename "$cache")
    [ -f "$cache/.packed_from" ] && continue
    if ! grep -aq "init engine (profile, create kv cache, warmup model) took" "$W/$name.log" 2>/dev/null; then
      echo "vLLM compile cache $cache: its engine is not ready yet, not packed"; continue
    fi
    size=$(du -sm "$cache" | cut -f1)
    if [ "$size" -gt 40 ]; then
      echo "vLLM compile cache $cache: $size MB, over 40 MB, not packed"
    elif echo "$cache" > "$cache/.packed_from" && \
        tar -czf "$OUT/vllm_cache_$name.tgz" -C "$cache" . 2>/dev/null; then
      echo "vLLM compile cache $cache: $size MB, packed as vllm_cache_$name.tgz"
    else
      rm -f "$OUT/vllm_cache_$name.tgz" "$cache/.packed_from"
      echo "vLLM compile cache $cache: changed while packing, not packed"
    fi
  done
  nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv || true
  ls -la "$OUT"
  ;;
*) echo "trinity_h200.sh: unknown step $1" >&2; exit 2 ;;
esac
