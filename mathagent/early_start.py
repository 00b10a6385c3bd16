"""Start-up levers for Trinity-RFT 0.6.0: work that needs no GPU, started before the GPU's.

Trinity's launcher and explorer start a run's parts one after another, though several of them
wait on nothing before them. Each lever here moves one part earlier; none changes what a run
computes. They are applied through :mod:`mathagent.compat`, in ``train`` and in the Ray worker
that imports the upstream module they patch.

* ``trinity-early-explorer`` (``MATHAGENT_EARLY_EXPLORER=1``, :func:`install_early_explorer`):
  the launcher (modes ``both`` and ``colocate``, ``trinity/cli/launcher.py``) asks the
  explorer to ``prepare()`` (vLLM, its runners, the step-0 evaluation) only once the trainer's
  actor is made too, though ``prepare()`` needs nothing of it; with the lever ``prepare()``
  runs as soon as the explorer's actor is made, beside the trainer's constructor.
* ``trinity-early-runners`` (``MATHAGENT_EARLY_RUNNERS=1``, :func:`install_early_runners` and
  :func:`install_model_wait`): ``Explorer.prepare`` (``trinity/explorer/explorer.py``) makes
  its rollout coordinator only once every model is ready (vLLM's engine started, compiled
  and its CUDA graphs captured); the coordinator then builds its experience pipeline and
  makes the workflow runners, each a Ray worker that imports Trinity's explorer before its
  constructor ends. With the lever the coordinator is made, and its ``prepare()`` called, as
  soon as the model actors have their names (a runner's constructor looks its model up by
  name), beside vLLM's start. A runner's ``prepare()`` asks its model for the server's address,
  which a model not yet ready refuses, and then polls the server for a minute only; with the
  lever it first waits, up to :data:`MODEL_WAIT_S`, for the model to say it is ready. The
  explorer's other steps (the weight-sync group, the step-0 evaluation) keep their order.
  Trinity makes and prepares at most ``explorer.runner_prepare_concurrency`` runners at once
  (16 in the Qwen configs, which have 16), so where there are more runners than that, the
  others are made once the first ones are prepared. The lever acts only where the rollout
  model is a vLLM engine and there are no auxiliary models (:func:`early_runners_misfit`):
  the experience pipeline the coordinator builds asks auxiliary models for their servers at
  once, and other engines make no named actor to wait for; elsewhere Trinity's order stays.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time

#: Set to 1 to apply ``trinity-early-explorer``.
EARLY_EXPLORER_ENV = "MATHAGENT_EARLY_EXPLORER"
#: Set to 1 to apply ``trinity-early-runners``.
EARLY_RUNNERS_ENV = "MATHAGENT_EARLY_RUNNERS"
#: Seconds a workflow runner made early waits for its model to be ready (vLLM's start-up on a
#: GPU that several runs share takes minutes).
MODEL_WAIT_S = 1800.0
#: Seconds between two looks (at the model actors' names, at a model's readiness).
POLL_S = 0.5


def early_explorer_unwanted() -> str | None:
    if os.environ.get(EARLY_EXPLORER_ENV) != "1":
        return f"a start-up lever, applied only with {EARLY_EXPLORER_ENV}=1"
    return None


def early_runners_unwanted() -> str | None:
    if os.environ.get(EARLY_RUNNERS_ENV) != "1":
        return f"a start-up lever, applied only with {EARLY_RUNNERS_ENV}=1"
    return None


class _Submitted:
    """Stands for an actor method whose call was already made: ``remote()`` returns it."""

    def __init__(self, ref) -> None:
        self._ref = ref

    def remote(self):
        return self._ref


class _Started:
    """An actor handle whose ``prepare()`` was already asked for: ``prepare.remote()`` returns
    that call (an object ref, or a future of it); every other attribute is the handle's own."""

    def __init__(self, handle, prepared) -> None:
        self._handle, self._prepared = handle, prepared

    def __getattr__(self, name: str):
        if name == "prepare":
            return _Submitted(self._prepared)
        return getattr(self._handle, name)


def _swap_get_actor(cls, make):
    """Set ``cls.get_actor`` to the classmethod ``make(config)``; returns what restores it."""
    own = cls.__dict__.get("get_actor")
    cls.get_actor = classmethod(lambda klass, config: make(config))

    def restore() -> None:
        if own is None:
            del cls.get_actor
        else:
            cls.get_actor = own
    return restore


# --------------------------------------------------------------------------------------
# trinity-early-explorer
# --------------------------------------------------------------------------------------


def install_early_explorer(launcher) -> bool:
    """Patch Trinity's launcher module ``launcher`` (``trinity.cli.launcher``); False when it
    already was. Ray runs an actor's calls once its constructor has returned, so the explorer's
    ``prepare()``, asked for when its handle is made, starts as soon as the explorer exists,
    whatever the launcher waits for in between."""
    from mathagent.compat import _replace

    original = launcher.both

    def both(config):
        # the explorer class both() imports, looked up now (so also a stand-in put there)
        from trinity.explorer import explorer as explorer_module

        cls = explorer_module.Explorer
        make = cls.get_actor  # bound to the class

        def started(actor_config):
            handle = make(actor_config)
            return _Started(handle, handle.prepare.remote())

        restore = _swap_get_actor(cls, started)
        try:
            return original(config)
        finally:
            restore()

    both.__doc__ = original.__doc__
    if not _replace(launcher, "both", both):
        return False
    # run_stage() finds the stage function in MODE_MAP, which holds the original
    for mode, stage in list(launcher.MODE_MAP.items()):
        if stage is original:
            launcher.MODE_MAP[mode] = launcher.both
    return True


# --------------------------------------------------------------------------------------
# trinity-early-runners
# --------------------------------------------------------------------------------------


def early_runners_misfit(explorer_config) -> str | None:
    """Why the coordinator cannot be made early for ``explorer_config``, or None."""
    engine = explorer_config.rollout_model.engine_type
    if not engine.startswith("vllm"):
        return f"the rollout model's engine is {engine!r}, not vLLM"
    if explorer_config.auxiliary_models:
        return "the experience pipeline would ask the auxiliary models for their servers early"
    return None


def model_actor_names(explorer_config) -> list[tuple[str, str]]:
    """``(name, namespace)`` of each model actor Trinity's allocator makes for
    ``explorer_config`` (the names a workflow runner's constructor looks up)."""
    from trinity.common.models.allocator import Allocator

    allocator = Allocator(explorer_config)
    models = [("rollout", explorer_config.rollout_model)]
    models += [(f"auxiliary_{i}", aux) for i, aux in enumerate(explorer_config.auxiliary_models)]
    return [(allocator.get_actor_name(role, engine_id, 0), model.ray_namespace)
            for role, model in models for engine_id in range(model.engine_num)]


def _named(name: str, namespace: str) -> bool:
    import ray

    try:
        ray.get_actor(name, namespace=namespace)
    except ValueError:
        return False
    return True


async def _prepare_once_named(coordinator, names: list[tuple[str, str]]) -> None:
    """The coordinator's ``prepare()``, asked for once every model actor has its name."""
    while not all(_named(name, namespace) for name, namespace in names):
        await asyncio.sleep(POLL_S)
    await coordinator.prepare.remote()


def install_early_runners(explorer_module) -> bool:
    """Patch ``Explorer.prepare`` of Trinity's explorer module (``trinity.explorer.explorer``);
    False when it already was. Trinity's own ``prepare()`` runs unchanged, but the coordinator
    it asks for was made when ``prepare()`` began, and its ``prepare()`` call is the one
    started then. Where ``prepare()`` fails, the coordinator is stopped."""
    import ray

    from mathagent.compat import _replace

    cls = explorer_module.Explorer
    original = cls.prepare

    async def prepare(self) -> None:
        misfit = early_runners_misfit(self.config.explorer)
        if misfit is not None:
            self.logger.info(f"{EARLY_RUNNERS_ENV}=1 left unused: {misfit}")
            return await original(self)
        coordinator_cls = explorer_module.RolloutCoordinator  # looked up now: a stand-in too
        handle = coordinator_cls.get_actor(self.config)
        started = asyncio.ensure_future(
            _prepare_once_named(handle, model_actor_names(self.config.explorer)))
        # its failure is raised where Trinity awaits it; where the models failed first, the
        # task is cancelled and its own failure, if any, is not reported a second time
        started.add_done_callback(lambda task: task.cancelled() or task.exception())
        restore = _swap_get_actor(coordinator_cls, lambda config: _Started(handle, started))
        try:
            await original(self)
        except BaseException:
            started.cancel()
            with contextlib.suppress(Exception):  # Ray going down: the first error counts
                ray.kill(handle)
            raise
        finally:
            restore()
        if isinstance(self.rollout_coordinator, _Started):
            self.rollout_coordinator = handle

    prepare.__doc__ = original.__doc__
    return _replace(cls, "prepare", prepare)


async def wait_until_ready(model, timeout: float = MODEL_WAIT_S) -> None:
    """Return once the model actor ``model`` says it is ready (Trinity's ``ready()``)."""
    deadline = time.monotonic() + timeout
    while not await model.ready.remote():
        if time.monotonic() > deadline:
            raise TimeoutError(f"the rollout model was not ready after {timeout:.0f} s "
                               f"({EARLY_RUNNERS_ENV}=1 made its workflow runner early)")
        await asyncio.sleep(POLL_S)


def install_model_wait(model_module) -> bool:
    """Patch ``ModelWrapper.prepare`` of Trinity's model module
    (``trinity.common.models.model``); False when it already was. A wrapper that must ask its
    model for the server's address (a runner's; the explorer's own wrapper is given it) first
    waits for the model to be ready."""
    from mathagent.compat import _replace

    cls = model_module.ModelWrapper
    original = cls.prepare

    async def prepare(self) -> None:
        model = getattr(self, "model", None)
        if self.config.enable_openai_api and self.api_address is None and model is not None:
            await wait_until_ready(model)
        return await original(self)

    prepare.__doc__ = original.__doc__
    return _replace(cls, "prepare", prepare)
