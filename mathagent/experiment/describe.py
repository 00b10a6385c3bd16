"""A starting ``experiment.yaml`` for an output folder that has none, from the spec.

The report (:mod:`mathagent.report`) needs the folder's question, arms, seeds and settings.
The arms and seeds stay in the spec, their one home: the file names it (``experiment:``,
relative to the repository root) and the report reads them from there. The settings are
filled from the spec's overrides and first config. What only a person can write (the
question in their words, a few words on each arm, the answer, the interpretation, the
limitations) is left for them to add: the page is written with what the runs show, and says
it was started from the spec.
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path
from typing import Any

from mathagent.experiment.schedule import Schedule
from mathagent.results.spec import Spec, repo_relative

SOFTWARE = ("trinity-rft", "vllm", "verl", "torch")


def _setting(spec: Spec, key: str) -> Any:
    """``key`` (dotted) as the first arm's runs get it."""
    return spec.setting(next(iter(spec.arms)), key)


def _versions() -> str:
    have = []
    for name in SOFTWARE:
        try:
            have.append(f"{name} {importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            continue
    return ", ".join(have) or "not recorded"


def _gpu() -> str:
    try:
        import torch

        return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU found"
    except ImportError:
        return "not recorded"


def starting_spec(spec: Spec, schedules: dict[str, Schedule]) -> dict[str, Any]:
    """The ``experiment.yaml`` a report of ``spec``'s output folder can start from."""
    first = next(iter(schedules.values()))
    evals = ", ".join(str(s) for s in first.eval_steps) or "none"
    return {
        "title": f"{', '.join(f'`{a}`' for a in spec.selectors().values())} on {spec.model} "
                 f"({first.steps} steps, seeds {', '.join(map(str, spec.seeds))})",
        "question": f"Which arm trains the policy to the higher held-out accuracy? (Started "
                    f"from {spec.path.name} by `python -m mathagent experiment`; write the "
                    "question, the answer and the limitations here.)",
        "experiment": repo_relative(spec.path.resolve()),
        "settings": {"policy": spec.model, "steps": str(first.steps),
                     "batch": f"{_setting(spec, 'buffer.batch_size')} tasks x "
                              f"{_setting(spec, 'algorithm.repeat_times')} replies",
                     "evaluation": f"held-out at steps {evals}",
                     "software": _versions()},
        "hardware": _gpu(),
    }


def write_starting_spec(spec: Spec, schedules: dict[str, Schedule]) -> Path | None:
    """Write :func:`starting_spec` as ``out/experiment.yaml`` unless the folder has one;
    the file written, or None."""
    import yaml

    from mathagent.report.spec import SPEC

    file = spec.out / SPEC
    if file.exists():
        return None
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_text(yaml.safe_dump(starting_spec(spec, schedules), sort_keys=False,
                                   allow_unicode=True))
    return file
