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
#   bash scripts/gpu/trinity_x8.sh wait SECONDS    follow the runs until both end or SECONDS pass,
#                                                  then `collect` what they have written so far
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
source scripts/gpu/common.sh

case "${1:?usage: trinity_x8.sh part|start|wait|collect ...}" in
part)
  copy_part "${2:?DIR}"
  ;;
start)
  if alive "$W/session.pid"; then echo "trinity_x8.sh: the runs are still going" >&2; exit 1; fi
  mkdir -p "$W"; rm -f "$W/session.pid"
  for name in $RUNS; do rm -f "$W/$name".{pid,rc,ended,t0}; done
  setup
  log "GPUs: $(nvidia-smi -L | wc -l)"
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
  bash "$0" collect   # what exists so far comes back with every call
  ;;
collect)
  mkdir -p "$OUT"; spans=""
  for name in $RUNS; do
    [ -f "$W/$name.pid" ] || continue
    pack_run "$name"
    # its start and its log's last write (a third word says it was packed while it ran)
    spans="$spans $name $(cut -d' ' -f1,2 "$W/collect/$name/start_end_epoch.txt")"
  done
  cp "$W/gpu.csv" "$OUT/" 2>/dev/null || true
  # GPU processes are the one head's workers and carry no run label: label each sample with
  # the run whose start-end span holds it
  [ ! -f "$W/gpu_apps.csv" ] || awk -F, -v OFS=, -v spans="$spans" '
    BEGIN { n = split(spans, s, " ") }
    { for (i = 1; i < n; i += 3) if ($1 + 0 >= s[i + 1] + 0 && $1 + 0 <= s[i + 2] + 0) $4 = s[i]
      print }' "$W/gpu_apps.csv" > "$OUT/gpu_apps.csv"
  nvidia-smi --query-gpu=index,name,memory.used,memory.total --format=csv || true
  ls -la "$OUT"
  ;;
*) echo "trinity_x8.sh: unknown step $1" >&2; exit 2 ;;
esac
