#!/usr/bin/env bash
# Workstation (registry access, any x86_64 Linux): build the offline bundle of the GPU set for a
# machine that has no network, in parts small enough to copy one at a time.
#
#   bash scripts/gpu/build_bundle.sh OUTDIR
#
# What goes in: every pin of requirements/gpu.lock whose marker holds on the target (CPython
# $PY, default 3.12, x86_64 Linux), except packages the target image already has
# ($HAVE, default scripts/gpu/h200-image-packages.txt) and those scripts/gpu/bundle-drop.txt
# leaves out; vllm's wheel trimmed of kernels the one-GPU path never loads (FlashAttention-2,
# MoE, its Rust frontend, deep_gemm builds for other Pythons); all installed with --no-deps into
# one folder and packed with xz; plus, under models/<name>/ (the layout of the model cache, where
# `mathagent.models` finds a model offline), the GGUF file of the bundled model
# smollm2-135m-instruct (the notebooks' default; its package is not carried) and of each model
# named in $MODELS (default qwen2.5-coder-0.5b, the experiment's policy; MODELS= for none).
# Written to OUTDIR:
#   part00, part01, ...   at most $PART_MIB MiB each (default 40: one part and the
#                         repository, about 14 MiB, travel to the GPU machine together)
#   SHA256SUMS            checksums of every part and of the joined bundle.tar
# scripts/gpu/install_bundle.sh unpacks them on the target. About 7 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUTDIR=${1:?usage: build_bundle.sh OUTDIR}
PY=${PY:-3.12}; HAVE=${HAVE:-scripts/gpu/h200-image-packages.txt}; PART_MIB=${PART_MIB:-40}
PYTHON=${PYTHON:-python3}; MODELS=${MODELS-qwen2.5-coder-0.5b}
[ -e "$OUTDIR" ] && [ -n "$(ls -A "$OUTDIR" 2>/dev/null)" ] && [ -z "${FORCE:-}" ] && {
  echo "build_bundle.sh: $OUTDIR is not empty; set FORCE=1 to replace its contents" >&2; exit 2; }
BUNDLED=$("$PYTHON" -c "from mathagent.models import DEFAULT_MODEL; print(DEFAULT_MODEL)")
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
PL=(--only-binary=:all: --python-version "$PY" --implementation cp --abi "cp${PY/./}"
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform linux_x86_64)
for n in $(seq 5 40); do PL+=(--platform "manylinux_2_${n}_x86_64"); done
PIP=("$PYTHON" -m pip --disable-pip-version-check)

echo "[bundle] choosing pins"
"$PYTHON" scripts/gpu/bundle_list.py requirements/gpu.lock --have "$HAVE" \
  --drop scripts/gpu/bundle-drop.txt --python "$PY" > "$W/pins.txt"
# Two pure-Python dependencies exist only as source distributions: built into wheels here.
SDIST_ONLY='^(antlr4-python3-runtime|word2number)=='
grep -Ev "$SDIST_ONLY" "$W/pins.txt" > "$W/binary.txt"
echo "[bundle] downloading $(wc -l < "$W/binary.txt") wheels"
"${PIP[@]}" download -q --no-deps "${PL[@]}" -d "$W/whl" -r "$W/binary.txt"
grep -E "$SDIST_ONLY" "$W/pins.txt" | xargs -r "${PIP[@]}" wheel -q --no-deps -w "$W/whl"

echo "[bundle] trimming vllm"
other_pythons=()
for v in 310 311 312 313 314; do
  [ "$v" = "${PY/./}" ] || other_pythons+=("vllm/third_party/deep_gemm/_C.cpython-$v-x86_64-linux-gnu.so")
done
zip -q -d "$W"/whl/vllm-*.whl 'vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so' 'vllm/_moe_C.abi3.so' \
  'vllm/vllm-rs' "${other_pythons[@]}" >/dev/null
"${PIP[@]}" install -q --no-deps --no-compile --target "$W/site" "${PL[@]}" "$W"/whl/*.whl

echo "[bundle] packing (xz -9)"
mkdir -p "$W/b"
(cd "$W" && tar --exclude=site/xgrammar/lib/libxgrammar.a --exclude=site/ray/jars \
   --exclude=site/pycountry/locales --exclude='site/mistral_common/data/tekken_*.json' \
   -cf - site | xz -T0 -9 > b/site.tar.xz)
for m in $(printf '%s\n' "$BUNDLED" $MODELS | sort -u); do   # as the model cache holds them
  f=$("$PYTHON" -m mathagent models "$m" | sed -n 's/^file: //p')
  mkdir -p "$W/b/models/$m"; cp "$f" "$W/b/models/$m/"
done
cp "$W/pins.txt" "$W/b/PINS.txt"
git rev-parse HEAD > "$W/b/BUILT_FROM" 2>/dev/null || echo unknown > "$W/b/BUILT_FROM"
(cd "$W/b" && tar -cf ../bundle.tar .)
mkdir -p "$OUTDIR"; rm -f "$OUTDIR"/part?? "$OUTDIR/SHA256SUMS"
split -b "${PART_MIB}M" -d "$W/bundle.tar" "$OUTDIR/part"
(cd "$W" && sha256sum bundle.tar) > "$OUTDIR/SHA256SUMS"
(cd "$OUTDIR" && sha256sum part??) >> "$OUTDIR/SHA256SUMS"
ls -la "$OUTDIR"
echo "[bundle] $(wc -l < "$W/pins.txt") packages, $(du -m "$W/bundle.tar" | cut -f1) MiB in $(ls "$OUTDIR"/part?? | wc -l) parts"
