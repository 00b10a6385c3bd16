# Sourced by the GPU scripts (on the GPU machine, from the repository root).
export PYTHONPATH="/root/site:$PWD/scripts/gpu/shim:$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1
export MATHAGENT_RUNS=/root/work/runs
GGUF_PATH=/root/mathagent_model/$(cat /root/mathagent_model/name 2>/dev/null || echo missing.gguf)
export GGUF_PATH
