"""The verdict of a preflight: what passed, what is wrong, what the launch machine needs.

:class:`Preflight` is what every check appends to (the checks of
:mod:`~mathagent.launch.machine_checks`, :mod:`~mathagent.launch.attention` and
:mod:`~mathagent.launch.data_checks`) and what :func:`~mathagent.launch.checks.preflight`
returns. It depends on nothing else in the package, so the checks import it and
:mod:`~mathagent.launch.checks` imports the checks, with no import running back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Preflight:
    """Outcome of :func:`~mathagent.launch.checks.preflight`: what passed, what is wrong, what
    the launch machine needs."""

    passed: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    requirements: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    checked_config: Any = None

    @property
    def ok(self) -> bool:
        return not self.problems

    def report(self) -> str:
        lines = [f"  ok    {m}" for m in self.passed]
        lines += [f"  FAIL  {m}" for m in self.problems]
        lines += [f"  note  {m}" for m in self.notes]
        if self.requirements:
            lines += ["", "Requirements of the launch machine (not checkable here):"]
            lines += [f"  - {m}" for m in self.requirements]
        return "\n".join(lines)
