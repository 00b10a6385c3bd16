#!/usr/bin/env bash
# The tutorial's notebooks on one offline H200, GPU cells executed: `pytest --nbmake
# --overwrite` (the README's test command for the notebooks, quick variant) in a copy of the
# project, the executed notebooks, their timings and the logs of what they started packed
# for results/notebooks_h200/. Steps, each a command run from the repository root:
#
#   bash scripts/gpu/notebooks.sh part DIR      copy one bundle part (build_bundle.sh) to $B
#   bash scripts/gpu/notebooks.sh start         install the bundle (unless installed), copy the
#                                               project, export the bundled model, then detached:
#                                               the notebooks (see below)
#   bash scripts/gpu/notebooks.sh start tutorial   the same, but the notebooks run through
#                                               `python -m mathagent tutorial --smoke` (the same
#                                               quick variant; the executed copies and figures in
#                                               $W/tutorial, its summary at the end of the log)
#   bash scripts/gpu/notebooks.sh wait SECONDS  follow them, then `collect`
#   bash scripts/gpu/notebooks.sh collect       executed notebooks, timings, logs -> $OUT
#
# The GPU cells: notebook 02 serves the exported bundled model with vLLM (TRINITY_MODEL_PATH,
# serving.choose_endpoint), notebook 04 makes a short real Trinity-RFT run of a one-GPU config
# (launch.run_smoke) and trains with train-local on cuda, notebook 05 reads what is committed.
#
# It may share the machine with scripts/gpu/qwen_features.sh (whose measurements write
# $QW/measure.log): notebooks 01-03 start once that vLLM server is ready (two vLLM servers
# starting at once confuse each other's memory profiling), notebooks 04 and 05 once the
# measurements have ended and that server is stopped (the Trinity run needs the GPU's memory).
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${B:-/root/bundle}      # bundle parts, then the unpacked site-packages
W=${W:-/root/nb}          # project copy, model folder, logs
QW=${QW:-/root/qwen}      # qwen_features.sh's folder, when it runs beside
OUT=${OUT:-$W/out}
source scripts/gpu/common.sh

case "${1:?usage: notebooks.sh part|start|wait|collect ...}" in
part)
  copy_part "${2:?DIR}"
  ;;
start)
  mode=${2:-nbmake}
  case "$mode" in nbmake|tutorial) ;; *) echo "start: unknown mode $mode (nbmake or tutorial)" >&2; exit 2;; esac
  mkdir -p "$W" "$OUT"
  setup   # the bundle, the project copy in $W/proj (cd), the bundled model in $W/model
  setsid bash scripts/gpu/gpu_monitor.sh "$W/gpu" > /dev/null 2>&1 < /dev/null &
  if [ "$mode" = tutorial ]; then
    cat > "$W/notebooks.sh" <<EOF
set -u
cd "$W/proj"
export TRINITY_MODEL_PATH="$W/model" MATHAGENT_MODEL_PATH="$W/model"
s=\$(date +%s); echo "[\$(date +%H:%M:%S)] notebooks 01-05 (tutorial): start"
python3 -m mathagent tutorial --smoke --out "$W/tutorial" < /dev/null
rc=\$?; echo "[\$(date +%H:%M:%S)] notebooks 01-05 (tutorial): exit \$rc after \$(( \$(date +%s) - s )) s"
echo "all notebooks ended"
EOF
  else
    # MATHAGENT_RUNS: pytest would otherwise give the session a folder of its own under /tmp
    # (conftest.py), removed at its end; collect packs proj/runs
    cat > "$W/notebooks.sh" <<EOF
set -u
cd "$W/proj"
export TRINITY_MODEL_PATH="$W/model" MATHAGENT_MODEL_PATH="$W/model" MATHAGENT_RUNS="$W/proj/runs"
if [ -f "$QW/vllm.pid" ] && kill -0 \$(cat "$QW/vllm.pid") 2>/dev/null; then
  until grep -q "vllm ready" "$QW/measure.log" 2>/dev/null; do sleep 5; done
fi
s=\$(date +%s); echo "[\$(date +%H:%M:%S)] notebooks 01-03: start"
python3 -m pytest -p no:cacheprovider --nbmake --overwrite --durations=0 -v \
  notebooks/01_*.ipynb notebooks/02_*.ipynb notebooks/03_*.ipynb < /dev/null
rc=\$?; echo "[\$(date +%H:%M:%S)] notebooks 01-03: exit \$rc after \$(( \$(date +%s) - s )) s"
if [ -f "$QW/measure.pid" ]; then
  while kill -0 \$(cat "$QW/measure.pid") 2>/dev/null; do sleep 5; done
  kill \$(cat "$QW/vllm.pid") 2>/dev/null && echo "[\$(date +%H:%M:%S)] stopped the measurements' vLLM server"
  while kill -0 \$(cat "$QW/vllm.pid") 2>/dev/null; do sleep 2; done
fi
s=\$(date +%s); echo "[\$(date +%H:%M:%S)] notebooks 04-05: start"
python3 -m pytest -p no:cacheprovider --nbmake --overwrite --durations=0 -v \
  notebooks/04_*.ipynb notebooks/05_*.ipynb < /dev/null
rc=\$?; echo "[\$(date +%H:%M:%S)] notebooks 04-05: exit \$rc after \$(( \$(date +%s) - s )) s"
echo "all notebooks ended"
EOF
  fi
  setsid bash "$W/notebooks.sh" > "$W/notebooks.log" 2>&1 < /dev/null & echo $! > "$W/notebooks.pid"
  log "the notebooks started (log $W/notebooks.log)"
  ;;
wait)
  follow "$W/notebooks.pid" "$W/notebooks.log" "notebooks [0-9-]+|PASSED|FAILED|stopped|^\[[0-9]/[0-9]\]" "${2:?SECONDS}"
  grep -aE "notebooks [0-9-]+|PASSED|FAILED|passed|failed|^\[[0-9]/[0-9]\]|^  [0-9][0-9]_" "$W/notebooks.log" | tail -n 12
  bash "$0" collect
  ;;
collect)
  mkdir -p "$OUT"
  items=$(cd "$W" && for f in proj/notebooks proj/runs tutorial notebooks.log notebooks.sh gpu.csv gpu_apps.csv; do
    [ -e "$f" ] && echo "$f"; done | xargs || true)
  # the notebooks' figures and the runs' logs, not their checkpoints
  [ -z "$items" ] || tar -czf "$OUT/notebooks_h200.tgz" -C "$W" --exclude='*.safetensors' \
    --exclude='*.pt' --exclude='*.bin' --exclude='global_step_*' \
    $items || tar_ok $?
  ls -la "$OUT"
  ;;
*)
  echo "unknown step $1" >&2; exit 2
  ;;
esac
