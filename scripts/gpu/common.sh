# Shared by trinity_h200.sh and trinity_x8.sh (sourced from the repository root, after B, W
# and OUT are set): the environment, the bundle's `part` step, the setup before the runs and
# the packing of one run's results.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export RAY_USAGE_STATS_ENABLED=0 PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
log() { echo "[$(date +%H:%M:%S)] $*"; }
alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
# tar's exit status 1 means a file changed while it was read: a run still writing its files
# is packed as it stands (`wait` packs after every call, the runs may still be going)
tar_ok() { [ "$1" -eq 1 ]; }

# follow PIDFILE LOG PATTERN SECONDS: print each new last line of LOG matching PATTERN while
# the detached job of PIDFILE runs, for at most SECONDS (the `wait` step of a job script)
follow() {
  local t0 last= cur; t0=$(date +%s)
  while alive "$1"; do
    cur=$(grep -aE "$3" "$2" | tail -1 || true)
    [ "$cur" != "$last" ] && { log "$cur"; last=$cur; }
    [ $(( $(date +%s) - t0 )) -ge "$4" ] && { log "still running"; break; }
    sleep 10
  done
}

# copy one bundle part (DIR/part?? and DIR/SHA256SUMS) to $B
copy_part() {
  mkdir -p "$B"; cp "${1:?DIR}"/part?? "$B"/; [ -f "$1/SHA256SUMS" ] && cp "$1/SHA256SUMS" "$B"/
  ls -la "$B" | tail -n +2
}

# copy one part of the Qwen model file (DIR/q?? and DIR/QSHA256SUMS, from
# `qwen_features.sh split_model`) to $Q
copy_qpart() {
  mkdir -p "$Q"; cp "${1:?DIR}"/q?? "$Q"/; [ -f "$1/QSHA256SUMS" ] && cp "$1/QSHA256SUMS" "$Q"/
  ls "$Q" | xargs
}

# join_model FILE: join the model parts in $Q into FILE (once), each part and the whole file
# checked against QSHA256SUMS
join_model() {
  [ -f "$1" ] && return 0
  (cd "$Q" && grep ' q' QSHA256SUMS | sha256sum --quiet -c -) || { echo "a model part is corrupt" >&2; exit 2; }
  cat "$Q"/q?? > "$1.tmp"
  local want; want=$(awk '$2 == "model.gguf" {print $1}' "$Q/QSHA256SUMS")
  [ "$(sha256sum "$1.tmp" | cut -d' ' -f1)" = "$want" ] || { echo "joined model file: wrong sha256" >&2; exit 2; }
  mv "$1.tmp" "$1"; rm -f "$Q"/q??
}

# install the bundle (once), run from a copy of the project (so the checkout can change while
# the runs go on: this changes the working directory), check the imports, export the model file
# MODEL_FILE (default: the bundled one) to MODEL_DIR (default $W/model; one folder per model
# file, so runs of another policy on the same machine never reuse it) (SKIP_EXPORT=1: not).
# In two halves, so that a caller can start other work beside the export, the longest step
# (one CPU core for one to two minutes): setup_begin starts the export in the background and
# checks the imports beside it; setup_end waits for it. `setup` is both.
setup_begin() {
  SETUP_T0=$(date +%s); EXPORT_PID=
  [ -d "$B/site" ] || bash scripts/gpu/install_bundle.sh "$B" "$B"
  source "$B/env.sh"
  # whether this machine's processes write the bytecode of what they import (the bundle's is
  # written at install; the project's own modules are compiled by each process if not)
  log "PYTHONDONTWRITEBYTECODE=${PYTHONDONTWRITEBYTECODE:-(unset)}"
  # the project copy the runs work in; kept while a run started earlier still works in it
  # (a run made again beside it)
  local pidf live=""
  for pidf in "$W"/*.pid; do if alive "$pidf"; then live="$live $(basename "$pidf" .pid)"; fi; done
  if [ -n "$live" ]; then
    log "the project copy $W/proj is kept: run(s)$live work in it"
  else
    rm -rf "$W/proj"; mkdir -p "$W/proj"
    tar --exclude=./.gpubundle --exclude=./.qwenparts --exclude=./.git --exclude=./.venv \
      --exclude=./runs --exclude=./.gpucache -cf - . | tar -xf - -C "$W/proj"
  fi
  cd "$W/proj"
  export PYTHONPATH="$W/proj:$PYTHONPATH"
  if [ -z "${SKIP_EXPORT:-}" ] && [ ! -d "${MODEL_DIR:-$W/model}" ]; then
    python3 -m mathagent export-model "${MODEL_DIR:-$W/model}" \
      --model "${MODEL_FILE:-$(ls "$B"/*.gguf)}" > "$W/export.log" 2>&1 < /dev/null &
    EXPORT_PID=$!
    # a script that ends before setup_end (a failed step, set -e) stops the export it started
    trap 'if [ -n "${EXPORT_PID:-}" ]; then kill "$EXPORT_PID" 2>/dev/null || true; fi' EXIT
  fi
  [ -n "${SKIP_CHECK:-}" ] || python3 -c "import torch, transformers, vllm, trinity, verl, agentscope, ray; print('versions:', \
torch.__version__, 'transformers', transformers.__version__, 'vllm', vllm.__version__, \
'ray', ray.__version__, 'agentscope', agentscope.__version__)"
}
# setup_end fails (status 1, one line naming the export's log) when the export did
setup_end() {
  if [ -n "${EXPORT_PID:-}" ]; then
    local rc=0
    wait "$EXPORT_PID" || rc=$?
    EXPORT_PID=
    grep -av "it/s" "$W/export.log" | tail -2 || true
    [ "$rc" -eq 0 ] || { echo "export-model failed (exit $rc): $W/export.log" >&2; return 1; }
  fi
  log "setup took $(( $(date +%s) - SETUP_T0 )) s"
}
setup() { setup_begin; setup_end || exit 1; }

# call_left: seconds until CALL_END (the Unix time by which the command that runs these steps
# must have returned, set by whoever starts it: the machine ends a command at its limit, and
# whatever `collect` had not yet packed is lost); fails when CALL_END is unset
call_left() {
  [ -n "${CALL_END:-}" ] || return 1
  echo $(( CALL_END - $(date +%s) ))
}

# a line the agent printed (a reply's continuation lines carry the runner's prefix and no log
# level) or a vLLM access line that succeeded; lines naming an error, and 4xx/5xx answers,
# are kept
CHATTER='"(GET|POST) /[^"]*" [23]\d\d |\(WorkflowRunner pid=\d+\)\S* (?!INFO|WARNING|ERROR)(?!.*(Error|Traceback|Exception))'

# buffer_samples NAME JOB DIR: the replies of the first and last explore step
# (samples.jsonl), one row per explore step (buffer_steps.csv) and one per step and task
# (buffer_tasks.csv, the pass rates a selector was fed) from the experience buffer
# of JOB into DIR (scripts/gpu/buffer_samples.py, decoding with the run's model folder, as
# `start` recorded it in $W/NAME.model); a run with no buffer yet, or one that cannot be read
# within 120 s (every `wait` collects again), is packed without them. With CALL_END set (see
# `call_left`), the bound also keeps 20 s of the call for packing.
buffer_samples() {
  local said bound=120 left
  if left=$(call_left); then bound=$(( left - 20 < bound ? left - 20 : bound )); fi
  if [ "$bound" -lt 5 ]; then log "$1: no buffer samples: the call ends in ${left:-0} s"; return; fi
  if said=$( (if [ -f "$B/env.sh" ]; then source "$B/env.sh"; fi
              model=$(cat "$W/$1.model" 2>/dev/null || echo "$W/model")
              tok=(); [ -d "$model" ] && tok=(--tokenizer "$model")
              timeout "$bound" python3 scripts/gpu/buffer_samples.py "$2" "$3" "${tok[@]}") 2>&1); then
    log "$1: $(echo "$said" | tail -1)"
  else
    [ $? -eq 124 ] && said="stopped after $bound s"
    rm -rf "$3"; log "$1: no buffer samples: $(echo "$said" | tail -1)"
  fi
}

# pack run NAME (event files, configs, meta files, the log, its start and end) into
# $OUT/NAME.tgz, finished or not
pack_run() {
  local name=$1 d=$W/collect/$1 job
  rm -rf "$d"; mkdir -p "$d"
  # a run that stopped before Trinity made its folders has none
  job=$(find "$W/ckpt/$name" -name params.json -printf '%h\n' 2>/dev/null | head -1 || true)
  if [ -n "$job" ]; then
    (cd "$job" && find . -path ./global_step_\* -prune -o -path ./buffer -prune -o -type f \
      \( -name 'events.out.tfevents*' -o -name '*.yaml' -o -name '*.json' \) -size -8M -print \
      | tar -cf - -T -) | tar -xf - -C "$d" || tar_ok $?
    buffer_samples "$name" "$job" "$d/samples"
  fi
  cp "$W"/runs/$name/train/*/trinity_config.yaml "$d/launched_config.yaml" 2>/dev/null || true
  # the log without the agent's printed replies and vLLM's access lines (nearly all of its
  # bytes once the agent runs), at most its first and last 3 MB: the start-up milestones and
  # the latest steps both come back
  grep -avP "$CHATTER" "$W/$name.log" > "$d/quiet.log" || true
  if [ "$(stat -c %s "$d/quiet.log")" -le 6000000 ]; then mv "$d/quiet.log" "$d/train.log"
  else { head -c 3000000 "$d/quiet.log"; echo; echo "[... the middle of the log was cut ...]"
         tail -c 3000000 "$d/quiet.log"; } > "$d/train.log"; rm "$d/quiet.log"; fi
  # the start, the log's last write and, for a run packed while it goes on, "running": its
  # last write is then no end
  echo "$(cat "$W/$name.t0") $(stat -c %Y "$W/$name.log")$(alive "$W/$name.pid" && echo " running")" \
    > "$d/start_end_epoch.txt"
  tar -czf "$OUT/$name.tgz" -C "$W/collect" "$name"
}
