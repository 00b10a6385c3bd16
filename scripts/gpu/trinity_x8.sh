#!/usr/bin/env bash
# The two 8-GPU Trinity-RFT runs on an offline 8-GPU H200 machine, driven from the repository
# root: configs/config_random_x8_arithmetic.yaml, then configs/config_difficulty_x8_arithmetic.yaml
# (the reference layout, mode both: 4 vLLM engines and 4 trainer GPUs, NCCL weight sync, with
# the bundled model and taskset). Steps, each its own command:
#
#   bash scripts/gpu/trinity_x8.sh part DIR        copy one bundle part (DIR/part?? and
#                                                  DIR/SHA256SUMS) to $B
#   bash scripts/gpu/trinity_x8.sh start           install the bundle, export the model, one Ray
#                                                  head for the machine, then one detached
#                                                  session that runs random, then difficulty
#   bash scripts/gpu/trinity_x8.sh wait SECONDS    follow the runs until both end or SECONDS pass
#   bash scripts/gpu/trinity_x8.sh collect         pack each run's event files, configs and logs
#                                                  into $OUT/<name>.tgz (default $W/out)
#
# Each run needs all 8 GPUs, so the runs take turns on the one head (all CPUs and GPUs). Both
# get the extra train arguments in $TRAIN_ARGS, run NAME also those in $ARGS_NAME. The NVLink
# multicast settings below reach every Ray worker: the head starts from this shell, and `train`
# passes its NCCL_*, TORCH_SYMM_MEM_* and NVSHMEM_* variables on in the runtime_env.
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${B:-/root/bundle}            # bundle parts, then the unpacked site-packages
W=${W:-/root/trinity_x8}        # model, project copy, runs, logs
OUT=${OUT:-$W/out}
RUNS="random difficulty"        # in this order; NAME runs configs/config_NAME_x8_arithmetic.yaml
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export RAY_USAGE_STATS_ENABLED=0 PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
log() { echo "[$(date +%H:%M:%S)] $*"; }
alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

case "${1:?usage: trinity_x8.sh part|start|wait|collect ...}" in
part)
  mkdir -p "$B"; cp "${2:?DIR}"/part?? "$B"/; [ -f "$2/SHA256SUMS" ] && cp "$2/SHA256SUMS" "$B"/
  ls -la "$B" | tail -n +2
  ;;
start)
  if alive "$W/session.pid"; then echo "trinity_x8.sh: the runs are still going" >&2; exit 1; fi
  mkdir -p "$W"; rm -f "$W/session.pid"
  for name in $RUNS; do rm -f "$W/$name".{pid,rc,ended,t0}; done
  t0=$(date +%s)
  [ -d "$B/site" ] || bash scripts/gpu/install_bundle.sh "$B" "$B"
  source "$B/env.sh"
  # a copy of the project to run from, so the checkout can change while the runs go on
  rm -rf "$W/proj"; mkdir -p "$W/proj"
  tar --exclude=./.gpubundle --exclude=./.git --exclude=./.venv -cf - . | tar -xf - -C "$W/proj"
  cd "$W/proj"
  export PYTHONPATH="$W/proj:$PYTHONPATH"
  [ -n "${SKIP_CHECK:-}" ] || python3 -c "import torch, transformers, vllm, trinity, verl, agentscope, ray; print('versions:', \
torch.__version__, 'transformers', transformers.__version__, 'vllm', vllm.__version__, \
'ray', ray.__version__, 'agentscope', agentscope.__version__)"
  log "GPUs: $(nvidia-smi -L | wc -l)"
  [ -d "$W/model" ] || python3 -m mathagent export-model "$W/model" --gguf "$(ls "$B"/*.gguf)" \
    2>&1 | grep -v "it/s" | tail -2
  log "setup took $(( $(date +%s) - t0 )) s"
  setsid bash scripts/gpu/gpu_monitor.sh "$W/gpu" > /dev/null 2>&1 < /dev/null &
  # one head for both runs, offering every CPU and GPU of the machine
  python3 -m mathagent ray start --temp-dir /tmp/ray_x8 --state-file "$W/ray.json" \
    --object-store-memory $((4 * 1024**3)) 2>&1 | grep -v "starting Ray head" | tail -2
  python3 -m mathagent ray status --state-file "$W/ray.json"
  RAY_HEAD=$(python3 -c "import json, sys; print(json.load(open(sys.argv[1]))['address'])" \
    "$W/ray.json")
  export W RUNS RAY_HEAD TRINITY_MODEL_PATH=$W/model TRAIN_ARGS=${TRAIN_ARGS:-}
  for name in $RUNS; do export "ARGS_$name"; done
  # a process session of its own: it outlives this command. Each run starts once no process
  # holds GPU memory any more (at most 5 minutes after the previous one); the head is stopped
  # after the last run.
  setsid bash -c '
    echo $$ > "$W/session.pid"
    for name in $RUNS; do
      for _ in $(seq 60); do
        [ -z "$(nvidia-smi --query-compute-apps=pid --format=csv,noheader)" ] && break; sleep 5
      done
      own="ARGS_$name"
      date +%s > "$W/$name.t0"
      MATHAGENT_RUN_LABEL=$name MATHAGENT_RUNS=$W/runs/$name \
      TRINITY_CHECKPOINT_ROOT_DIR=$W/ckpt/$name python3 -m mathagent train \
        --config "configs/config_${name}_x8_arithmetic.yaml" --compare none \
        --ray-address "$RAY_HEAD" $TRAIN_ARGS ${!own:-} > "$W/$name.log" 2>&1 < /dev/null &
      echo $! > "$W/$name.pid"
      wait $!; echo $? > "$W/$name.rc"
    done
    python3 -m mathagent ray stop --state-file "$W/ray.json"' > "$W/session.log" 2>&1 < /dev/null &
  for _ in $(seq 20); do [ -f "$W/session.pid" ] && break; sleep 0.5; done
  log "started $RUNS one after the other on the head at $RAY_HEAD"
  ;;
wait)
  limit=${2:?SECONDS}; t0=$(date +%s); declare -A last
  while true; do
    for name in $RUNS; do
      [ -f "$W/$name.pid" ] || continue
      cur=$(grep -aoE "Explore step [0-9]+|Training at step [0-9]+ finished|Eval.*step [0-9]+|Traceback" \
        "$W/$name.log" | tail -1 || true)
      [ "$cur" != "${last[$name]:-}" ] && { log "$name: $cur"; last[$name]=$cur; }
      if ! alive "$W/$name.pid" && [ ! -f "$W/$name.ended" ]; then
        touch "$W/$name.ended"; log "$name ended (exit $(cat "$W/$name.rc" 2>/dev/null || echo ?)); last lines:"
        grep -av "it/s\]" "$W/$name.log" | tail -n 15 | cut -c1-400
      fi
    done
    alive "$W/session.pid" || { log "all runs ended"; break; }
    [ $(( $(date +%s) - t0 )) -ge "$limit" ] && { log "runs still going"; break; }
    sleep 15
  done
  tail -n 8 "$W"/gpu.csv 2>/dev/null || true
  ;;
collect)
  mkdir -p "$OUT"; spans=""
  for name in $RUNS; do
    [ -f "$W/$name.pid" ] || continue
    d=$W/collect/$name; rm -rf "$d"; mkdir -p "$d"
    job=$(find "$W/ckpt/$name" -name params.json -printf '%h\n' | head -1)
    if [ -n "$job" ]; then
      (cd "$job" && find . -path ./global_step_\* -prune -o -path ./buffer -prune -o -type f \
        \( -name 'events.out.tfevents*' -o -name '*.yaml' -o -name '*.json' \) -size -8M -print \
        | tar -cf - -T -) | tar -xf - -C "$d"
    fi
    cp "$W"/runs/$name/train/*/trinity_config.yaml "$d/launched_config.yaml" 2>/dev/null || true
    tail -c 6000000 "$W/$name.log" > "$d/train.log"
    span="$(cat "$W/$name.t0") $(stat -c %Y "$W/$name.log")"
    echo "$span" > "$d/start_end_epoch.txt"; spans="$spans $name $span"
    tar -czf "$OUT/$name.tgz" -C "$W/collect" "$name"
  done
  cp "$W/gpu.csv" "$OUT/" 2>/dev/null || true
  # GPU processes are the one head's workers and carry no run label: label each sample with
  # the run whose start-end span holds it
  [ ! -f "$W/gpu_apps.csv" ] || awk -F, -v OFS=, -v spans="$spans" '
    BEGIN { n = split(spans, s, " ") }
    { for (i = 1; i < n; i += 3) if ($1 + 0 >= s[i + 1] + 0 && $1 + 0 <= s[i + 2] + 0) $4 = s[i]
      print }' "$W/gpu_apps.csv" > "$OUT/gpu_apps.csv"
  nvidia-smi --query-gpu=index,name,memory.used,memory.total --format=csv
  ls -la "$OUT"
  ;;
*) echo "trinity_x8.sh: unknown step $1" >&2; exit 2 ;;
esac
