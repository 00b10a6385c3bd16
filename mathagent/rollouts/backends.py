"""Backends of the measurement driver: one endpoint, a Ray fan-out, local dispatch.

A backend has ``run_batch(tasks, n, seed) -> list[list[dict]]`` (for each task, ``n``
records with keys :data:`mathagent.rollouts.records.ROLLOUT_KEYS`) and ``settings()``;
a dispatcher (:class:`RayFanout`, :class:`_LocalDispatch`) has ``map_unordered(jobs)``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from mathagent import paths
from mathagent.rollouts.runner import arun_rollouts
from mathagent.run_sync import run_sync
from mathagent.serving import ModelSettings

# --------------------------------------------------------------------------------------
# Backends
# --------------------------------------------------------------------------------------


class EndpointBackend:
    """The workflow + judge against one OpenAI-compatible endpoint, a chunk at a time.

    ``run_batch`` runs every rollout of the chunk concurrently (``concurrency`` at most),
    each bounded by ``timeout`` seconds; failures come back as failed records (``error``
    set, NaN reward). Seeds: one per rollout from ``(seed, row, rollout)``.
    """

    name = "endpoint"
    seeds_per_task = True

    def __init__(self, settings: ModelSettings, options: Any = None, lenient: bool = False,
                 concurrency: int = 8, timeout: float = 300.0, keep_response: bool = True):
        from mathagent.agent import AgentOptions

        if not settings.base_url:
            raise ValueError("EndpointBackend needs settings.base_url")
        self.model_settings = settings
        self.options = options or AgentOptions(console_output=False)
        self.lenient = lenient
        self.concurrency = int(concurrency)
        self.timeout = float(timeout)
        self.keep_response = keep_response
        self.on_rollout: Callable[[dict], None] | None = None

    def settings(self) -> dict:
        """What was measured and how (for provenance and resume checks)."""
        return {"backend": "endpoint", **self.model_settings.describe(),
                **self.options.describe(), "lenient": self.lenient,
                "judge": "lenient_judge" if self.lenient else "gsm8k_judge",
                "concurrency": self.concurrency, "timeout": self.timeout}

    def run_batch(self, tasks: list[dict], n: int, seed: int) -> list[list[dict]]:
        return run_sync(arun_rollouts(tasks, self.model_settings, n=n, seed=seed,
                                       options=self.options, lenient=self.lenient,
                                       concurrency=self.concurrency, timeout=self.timeout,
                                       keep_response=self.keep_response,
                                       on_rollout=self.on_rollout))


class _BackendActor:
    """Holds one backend inside a Ray worker process."""

    def __init__(self, factory: Callable[[], Any]):
        self.backend = factory()

    def settings(self) -> dict:
        return self.backend.settings()

    def seeds_per_task(self) -> bool:
        return bool(getattr(self.backend, "seeds_per_task", False))

    def run_batch(self, tasks: list[dict], n: int, seed: int) -> list[list[dict]]:
        return self.backend.run_batch(tasks, n, seed)


class RayFanout:
    """Spread chunks over several backends (one per endpoint or GPU) with Ray actors.

    ``factories`` are picklable zero-argument callables that build a backend inside its
    actor, e.g. ``functools.partial(EndpointBackend, settings_for_gpu_k)``; what they
    reference must be importable by the Ray workers (a package module, not a script). Each actor
    holds one chunk at a time; chunks are handed out as actors free up, so a slow endpoint
    simply takes fewer chunks. ``address`` is passed to ``ray.init`` when Ray is not yet
    initialised: ``"local"`` starts a private single-machine Ray, ``"auto"`` joins a
    running cluster (``ray start --head`` on a multi-node GPU cluster).
    """

    name = "ray"

    def __init__(self, factories: Sequence[Callable[[], Any]], address: str = "local",
                 num_cpus: int | None = None):
        import ray

        if not factories:
            raise ValueError("RayFanout needs at least one backend factory")
        if not ray.is_initialized():
            init = {"address": address, "include_dashboard": False, "log_to_driver": False,
                    "logging_level": "ERROR"}
            if address == "local":
                # Workers must import mathagent even when it is not pip-installed.
                init["runtime_env"] = {"env_vars": {"PYTHONPATH": paths.pythonpath_with_repo()}}
                init["num_cpus"] = num_cpus or max(2, len(factories))
            ray.init(**init)
            if address == "local":
                # the private Ray's daemons go with this process, also when it is SIGKILLed
                from mathagent.reaper import children_of_this_process, reap_when_gone

                reap_when_gone(children_of_this_process())
        # Actors wait on HTTP, not CPU: num_cpus=0 lets any number share a small machine.
        actor_cls = ray.remote(num_cpus=0)(_BackendActor)
        self._ray = ray
        self.actors = [actor_cls.remote(f) for f in factories]
        self._settings = ray.get([a.settings.remote() for a in self.actors])
        self.seeds_per_task = all(ray.get([a.seeds_per_task.remote() for a in self.actors]))

    def settings(self) -> dict:
        first = dict(self._settings[0])
        first["fanout"] = "ray"
        first["endpoints"] = [s.get("base_url") for s in self._settings]
        return first

    def map_unordered(self, jobs: Sequence[tuple[list[dict], int, int]]
                      ) -> Iterator[tuple[int, list[list[dict]]]]:
        """Run ``(tasks, n, seed)`` jobs; yield ``(job index, results)`` as they finish."""
        ray = self._ray
        pending = list(enumerate(jobs))[::-1]
        running: dict[Any, tuple[int, Any]] = {}
        idle = list(self.actors)
        while pending or running:
            while idle and pending:
                actor = idle.pop()
                index, (tasks, n, seed) = pending.pop()
                running[actor.run_batch.remote(tasks, n, seed)] = (index, actor)
            done, _ = ray.wait(list(running), num_returns=1)
            index, actor = running.pop(done[0])
            idle.append(actor)
            yield index, ray.get(done[0])

    def shutdown(self) -> None:
        for actor in self.actors:
            with contextlib.suppress(Exception):
                self._ray.kill(actor)
        self.actors = []


class _LocalDispatch:
    """Run jobs one after the other on a single in-process backend."""

    def __init__(self, backend: Any):
        self.backend = backend
        self.seeds_per_task = bool(getattr(backend, "seeds_per_task", False))

    def settings(self) -> dict:
        get = getattr(self.backend, "settings", None)
        return dict(get()) if callable(get) else {"backend": type(self.backend).__name__}

    def map_unordered(self, jobs):
        for index, (tasks, n, seed) in enumerate(jobs):
            yield index, self.backend.run_batch(tasks, n, seed)
