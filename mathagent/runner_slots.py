"""Several tasks at once on each of Trinity's workflow runners: a lever for evaluation.

Trinity-RFT 0.6.0's scheduler (``trinity/explorer/scheduler.py``) gives a workflow runner one
task at a time: a runner is idle again only when every reply of its task has come back. In
``asynchronous`` mode its validator also caps ``explorer.runner_per_model`` at
``ceil(buffer.batch_size / engine_num)`` (16 for the Qwen configs, with only a warning), so a
held-out evaluation of 660 tasks x 4 replies keeps at most 16 x 4 = 64 agent runs in flight,
one wave of slow replies after another, while the vLLM engine could decode more sequences at
once. More runner processes would lift that, at the cost of one Ray worker
importing torch, transformers and vLLM each.

With ``MATHAGENT_RUNNER_SLOTS=K`` (K >= 2) each runner takes up to K tasks at once instead:
the scheduler lists each runner under K ids (the runner's own and K - 1 aliases, each a
:class:`Slot`), so its idle set holds K entries per runner and it hands the runner a new task
whenever one of them is free. A runner is a Ray async actor, and in this mode it already runs a task's replies
side by side, each in its own workflow instance, so K tasks on it run the same way.
Restarting a runner restarts the one actor behind all its ids once, however many of its
tasks asked for it. vLLM's ``max_num_seqs`` (128 by default in Trinity's engine) must grow
with K for it to pay (``configs/experiment_qwen_60steps.yaml`` sets both).

Limits: only for ``explorer.concurrent_mode`` ``asynchronous`` or ``multi-threading`` (in
``sequential`` mode a runner reuses one workflow instance, which tasks side by side would
share; ``train`` refuses the lever there). The scheduler takes ids from a set, so a training
batch's tasks are spread one per runner only when every id is idle (after an evaluation has
ended, as in the Qwen configs, where the two do not overlap). A runner restarted to clean up
one batch (a batch past its timeout, an aborted one) also ends the other tasks it holds, which
Trinity then retries. Trinity's runner-state report (off unless
``explorer.runner_state_report_interval`` is set) lists each runner K times, once per id.

Only :func:`install` touches Trinity; it is applied through :mod:`mathagent.compat`
(``trinity-runner-slots``) in the worker that imports Trinity's scheduler (its
RolloutCoordinator actor).
"""

from __future__ import annotations

import asyncio
import os

from mathagent.settings import positive_int

#: The number of tasks each workflow runner takes at once; unset or 1: Trinity's one.
SLOTS_ENV = "MATHAGENT_RUNNER_SLOTS"
#: Where the lever keeps a runner's restart in progress, on Trinity's RunnerWrapper.
_RESTART = "_mathagent_restart"


def slots_problem(value: str | None) -> str | None:
    """Why ``value`` (the variable's text) is not a number of slots, or None."""
    if value is None or positive_int(value) is not None:
        return None
    return f"{SLOTS_ENV}={value!r} is not a whole number of tasks a runner takes at once (1 or more)"


def slots() -> int:
    """The number of slots :data:`SLOTS_ENV` asks for (1 when unset or not a number)."""
    value = os.environ.get(SLOTS_ENV)
    return (positive_int(value) if value is not None else None) or 1


def unwanted() -> str | None:
    """Why the lever is not applied here (fewer than 2 slots asked for), or None."""
    if slots() < 2:
        return f"a speed lever, applied only with {SLOTS_ENV}=K for K of 2 or more"
    return None


def alias_ids(runner_id: int, runner_num: int, k: int) -> list[int]:
    """The ids under which runner ``runner_id`` of ``runner_num`` takes its 2nd..kth task."""
    return [runner_id + j * runner_num for j in range(1, k)]


class Slot:
    """A runner's wrapper under one of its alias ids: everything is the wrapper's (its actor,
    state, restart), except that a finished task names the alias, which the scheduler then
    marks idle again (the wrapper would name the runner's own id)."""

    def __init__(self, wrapper, runner_id: int) -> None:
        self.wrapper, self.runner_id = wrapper, runner_id

    def __getattr__(self, name: str):
        return getattr(self.wrapper, name)

    async def run_with_retry(self, *args, **kwargs):
        status, payload, _, seconds = await self.wrapper.run_with_retry(*args, **kwargs)
        return status, payload, self.runner_id, seconds


def install(scheduler_module) -> bool:
    """Patch ``Scheduler._create_runner`` (register the aliases) and
    ``RunnerWrapper.restart_runner`` (one restart for all of a runner's ids) in Trinity's
    scheduler module; False when already patched."""
    from mathagent.compat import _replace

    scheduler_cls = scheduler_module.Scheduler
    wrapper_cls = scheduler_module.RunnerWrapper
    create = scheduler_cls._create_runner
    restart = wrapper_cls.restart_runner

    async def _create_runner(self, runner_id: int):
        await create(self, runner_id)
        for alias in alias_ids(runner_id, self.runner_num, slots()):
            self.runners[alias] = Slot(self.runners[runner_id], alias)
            self.idle_runners.add(alias)

    async def restart_runner(self):
        pending = getattr(self, _RESTART, None)
        if pending is None or pending.done():
            pending = asyncio.ensure_future(restart(self))
            setattr(self, _RESTART, pending)
        await asyncio.shield(pending)

    _create_runner.__doc__ = create.__doc__
    restart_runner.__doc__ = restart.__doc__
    made = _replace(scheduler_cls, "_create_runner", _create_runner)
    return _replace(wrapper_cls, "restart_runner", restart_runner) or made
