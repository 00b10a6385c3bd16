#!/usr/bin/env bash
# On the GPU machine: the side-by-side training runs (scripts/gpu/train_runs.py).
# Uses the taskset measured by run_features.sh when this machine still has it, else the
# committed data/arithmetic (which carries the measured columns once they are committed).
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu/env.sh
OUT=${OUT:-$PWD/runs/gpu_out}   # folder of the files to bring back
mkdir -p "$OUT"
W=/root/work
TASKSET=$W/arithmetic; [ -f "$TASKSET/train.parquet" ] || TASKSET=$PWD/data/arithmetic
python3 scripts/gpu/train_runs.py --taskset "$TASKSET" --model "$GGUF_PATH" --out "$OUT" \
  --work "$W/runs" "$@" 2>&1 | tee "$OUT/train_runs.log"
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv
