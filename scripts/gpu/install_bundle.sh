#!/usr/bin/env bash
# Offline GPU machine: check and unpack the parts written by scripts/gpu/build_bundle.sh.
#
#   bash scripts/gpu/install_bundle.sh PARTS_DIR DEST
#
# PARTS_DIR holds part00, part01, ... and SHA256SUMS (copied there one call at a time if need
# be). DEST receives site/ (the packages; put DEST/site on PYTHONPATH, DEST/site/bin on PATH),
# models/ (the model cache of `mathagent.models`, as models/<name>/<file>: the bundled
# smollm2-135m-instruct's GGUF file and those of the models build_bundle.sh added) and env.sh,
# which sets all three. The parts are removed once unpacked.
set -euo pipefail
PARTS=${1:?usage: install_bundle.sh PARTS_DIR DEST}; DEST=${2:?usage: install_bundle.sh PARTS_DIR DEST}
t0=$(date +%s)
cd "$PARTS"
[ -f SHA256SUMS ] || { echo "install_bundle.sh: $PARTS/SHA256SUMS is missing" >&2; exit 2; }
missing=$(awk '$2 ~ /^part/ {print $2}' SHA256SUMS | while read -r p; do [ -f "$p" ] || echo "$p"; done)
[ -z "$missing" ] || { echo "install_bundle.sh: parts not copied yet: $(echo $missing)" >&2; exit 2; }
bad=$(grep ' part' SHA256SUMS | sha256sum -c - 2>/dev/null | grep -v ': OK$' | cut -d: -f1 | xargs || true)
[ -z "$bad" ] || { echo "install_bundle.sh: corrupt part(s), copy again: $bad" >&2; exit 2; }
mkdir -p "$DEST"
cat part?? | tar -xf - -C "$DEST"
rm -f part??
cd "$DEST"
xz -T0 -dc site.tar.xz | tar -xf - && rm site.tar.xz
# The wheels were installed without bytecode (a smaller bundle). Written here once, on every
# core: a process that finds none compiles each module it imports, and where Python writes none
# (PYTHONDONTWRITEBYTECODE) every process does, every time: about 2 ms a module on a
# workstation core, thousands of modules for each Ray worker that imports Trinity and vLLM.
# A file that does not compile (a template, an old test) is left as it is: importing it would
# fail the same way.
python3 -m compileall -q -j 0 site > compileall.log 2>&1 \
  || echo "install_bundle.sh: $(grep -c '^\*\*\*' compileall.log) files of site/ do not compile (left as they are; $DEST/compileall.log)"
# console scripts (ray, vllm, trinity) were written for the build machine's interpreter
for f in site/bin/*; do
  [ -f "$f" ] || continue   # (compileall's __pycache__ for the few scripts named *.py)
  head -c2 "$f" | grep -q '#!' && sed -i '1s|^#!.*python.*$|#!/usr/bin/env python3|' "$f"
done
mkdir -p models
# flashinfer is not in the bundle (bundle-drop.txt): vLLM samples with its own torch code
# instead of importing it (a vLLM server started without this dies with "No module named
# 'flashinfer'" once it samples: notebook 02's did)
cat > env.sh <<ENV
export PYTHONPATH="$DEST/site\${PYTHONPATH:+:\$PYTHONPATH}" PATH="$DEST/site/bin:\$PATH"
export VLLM_USE_FLASHINFER_SAMPLER=0 MATHAGENT_MODEL_CACHE="$DEST/models"
ENV
echo "install_bundle.sh: $(wc -l < PINS.txt) packages in $DEST/site in $(( $(date +%s) - t0 )) s; source $DEST/env.sh"
