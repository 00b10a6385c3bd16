#!/usr/bin/env bash
# On the GPU machine, after device_setup.sh 2: pilot + measurement of the two pass-rate
# features (scripts/gpu/features.py) on a working copy of data/arithmetic; the measured
# taskset stays in /root/work/arithmetic for run_training.sh. About 9 minutes on an H200.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu/env.sh
OUT=${OUT:-$PWD/runs/gpu_out}   # folder of the files to bring back
mkdir -p "$OUT"
W=/root/work
mkdir -p "$W"
rm -rf "$W/arithmetic"
cp -r data/arithmetic "$W/arithmetic"
python3 scripts/gpu/features.py --taskset "$W/arithmetic" --out "$OUT" --model "$GGUF_PATH" "$@" \
  2>&1 | sed "/it\/s\]/d" | tee "$OUT/features.log"
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv
