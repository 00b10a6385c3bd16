#!/usr/bin/env bash
# Run on the workstation (not on the GPU machine) before the GPU jobs.
#
# The GPU machine has torch, transformers, pandas, pyarrow, numpy and tensorboard but no
# gguf, datasets or trinity-rft, and accepts at most 64 MiB of files per job. This script
#   * splits the bundled 98 MB GGUF into two halves in the git-ignored folders
#     .model_part1/ and .model_part2/ (sent with two consecutive jobs and joined there,
#     checked against the sha256 written here), and
#   * downloads the missing pure-Python (and two small binary) wheels for CPython 3.12
#     into the git-ignored .whl/ folder.
# Ray is not sent (its wheel alone exceeds the limit); scripts/gpu/shim
# satisfies Trinity's import of it, see the shim's docstring.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
GGUF=$($PY -c "from mathagent.grpo import locate_model; print(locate_model())")
rm -rf .model_part1 .model_part2
mkdir -p .model_part1 .model_part2
split -n 2 -d "$GGUF" .model_part1/gguf.part
mv .model_part1/gguf.part01 .model_part2/
sha256sum "$GGUF" | cut -d' ' -f1 > .model_part1/sha256
basename "$GGUF" > .model_part1/name
mkdir -p .whl
$PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
  trinity-rft==0.6.0 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 omegaconf==2.3.1 \
  latex2sympy2_extended==1.11.0 math-verify==0.9.0 sqlalchemy==2.1.9 greenlet==3.5.6 \
  gguf==0.19.0
# Two dependencies exist only as source distributions: build their (pure-Python) wheels.
$PY -m pip wheel -q --no-deps -w .whl antlr4-python3-runtime==4.9.3 word2number==1.1
ls -la .model_part1 .model_part2 .whl
