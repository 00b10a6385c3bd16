#!/usr/bin/env bash
# Every 5 s: the GPU's memory and load (FILE.csv) and each GPU process's memory with the run it
# belongs to (FILE_apps.csv: epoch, pid, MiB, the MATHAGENT_RUN_LABEL of its environment).
# Usage: setsid bash scripts/gpu/gpu_monitor.sh FILE &   (stops when FILE's folder is removed)
set -u
f=${1:?usage: gpu_monitor.sh FILE}
while [ -d "$(dirname "$f")" ]; do
  nvidia-smi --query-gpu=timestamp,memory.used,utilization.gpu --format=csv,noheader >> "$f.csv"
  now=$(date +%s)
  nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits | tr -d ' ' |
  while IFS=, read -r pid mib; do
    run=$(tr '\0' '\n' < "/proc/$pid/environ" 2>/dev/null | sed -n 's/^MATHAGENT_RUN_LABEL=//p')
    echo "$now,$pid,$mib,${run:-?}"
  done >> "${f}_apps.csv"
  sleep 5
done
