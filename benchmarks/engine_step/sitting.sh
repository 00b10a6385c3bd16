# Sourced by benchmarks/engine_step_*.sh, each one sitting of engine-step runs on the GPU: the
# repository root as the working folder, PY (the Python: $PYTHON, else python), DIR (the runs'
# folder) and CLEAN, a command prefix that unsets every lever variable mathagent.compat knows
# (LEVER_ENVS): each spec sets its own levers, and none may come from the calling shell.
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
PY=${PYTHON:-python}
DIR=benchmarks/engine_step
_lever_names=$("$PY" -c "from mathagent.compat import LEVER_ENVS; print(' '.join(LEVER_ENVS))") || exit 1
CLEAN=(env)
for _name in $_lever_names; do CLEAN+=(-u "$_name"); done
