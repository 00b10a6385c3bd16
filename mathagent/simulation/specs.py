"""The selectors of a sweep: one spec per entry, the default sweep and its ablations, checks."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import pandas as pd

from mathagent.simulation.config import SimConfig
from mathagent.simulation.world import FEATURE_KEYS, World


@dataclass(frozen=True)
class SelectorSpec:
    """One line of a sweep: a label, the selector name for ``make_selector`` and kwargs.

    ``factory`` runs a selector of your own instead (``name`` is then only a label):
    ``factory(dataset, seed=..., n_rollouts=..., **kwargs)`` returns an object with
    ``get_indices(batch_size) -> list[int]`` and ``feedback(indices, pass_rates)``, like a
    Trinity selector. It gets the seed's ``datasets.Dataset`` (``task``, the reference
    columns, and ``difficulty``, the hidden truth a fair selector leaves alone). A factory
    defined at module level also runs in the sweep's worker processes.
    """

    label: str
    name: str
    kwargs: dict = field(default_factory=dict)
    group: str = "trinity"  # trinity | bots | ablation | grid | custom
    note: str = ""
    factory: Callable | None = None

    def needs_features(self) -> bool:
        from mathagent.selectors import reads_features

        return self.factory is None and reads_features(self.name)


# The reference experiment's difficulty_based settings (its m equals the group size).
UPSTREAM_BOTS = {"lamb": 0.1, "rho": 0.1, "target_reward": 0.8, "tau": 0, "do_sample": True}
LAMB_GRID = (0.0, 0.1, 0.3)
RHO_GRID = (0.0, 0.1)
TARGET_SWEEP = (0.5, 0.95)


def _fmt(x: float) -> str:
    return f"{x:g}"


def default_specs(n_rollouts: int = 8, lamb_grid: Sequence[float] = LAMB_GRID,
                  rho_grid: Sequence[float] = RHO_GRID,
                  targets: Sequence[float] = TARGET_SWEEP) -> list[SelectorSpec]:
    """Trinity's five selectors, BOTSSelector, and the ablations of the default sweep.

    * ``difficulty_based`` and ``bots`` use the reference experiment's settings
      (:data:`UPSTREAM_BOTS`, ``m = n_rollouts``); their results must coincide.
    * ``bots rho=0``: explicit evidence only (no reference interpolation, MoPPS-like);
    * ``bots implicit``: implicit evidence only (the posterior never sees a pass rate
      directly, only through the capability estimate);
    * ``bots lamb=...``, ``bots target=...``: forgetting rate and target sweeps;
    * the ``lamb x rho`` grid for the TTB heatmap (cells already above are not repeated).
    """
    base = {**UPSTREAM_BOTS, "m": n_rollouts}
    specs = [SelectorSpec(n, n) for n in ("sequential", "shuffle", "random")]
    specs.append(SelectorSpec("offline_easy2hard", "offline_easy2hard",
                              note="easiest first by (weak, strong) reference pass rate"))
    specs.append(SelectorSpec("difficulty_based", "difficulty_based", base,
                              note="Trinity's BOTS, reference settings"))
    specs.append(SelectorSpec("bots", "bots", base, "bots",
                              note="BOTSSelector, same settings: must match difficulty_based"))
    specs.append(SelectorSpec("bots rho=0", "bots", {**base, "rho": 0.0}, "ablation",
                              note="explicit evidence only"))
    specs.append(SelectorSpec("bots implicit", "bots", {**base, "implicit_only": True},
                              "ablation", note="implicit evidence only"))
    specs.append(SelectorSpec("bots gap>=0.05", "bots", {**base, "min_anchor_gap": 0.05},
                              "ablation", note="capability update skipped when the batch's "
                              "references barely differ"))
    seen = {(base["lamb"], base["rho"]), (base["lamb"], 0.0)}
    for lamb in lamb_grid:
        if (lamb, base["rho"]) not in seen:
            specs.append(SelectorSpec(f"bots lamb={_fmt(lamb)}", "bots", {**base, "lamb": lamb},
                                      "ablation", note="forgetting-rate sweep"))
            seen.add((lamb, base["rho"]))
    for t in targets:
        specs.append(SelectorSpec(f"bots target={_fmt(t)}", "bots",
                                  {**base, "target_reward": t}, "ablation",
                                  note="target pass-rate sweep"))
    for lamb in lamb_grid:
        for rho in rho_grid:
            if (lamb, rho) not in seen:
                specs.append(SelectorSpec(f"bots lamb={_fmt(lamb)} rho={_fmt(rho)}", "bots",
                                          {**base, "lamb": lamb, "rho": rho}, "grid",
                                          note="lamb x rho grid"))
                seen.add((lamb, rho))
    return specs


def target_specs(targets: Sequence[float], n_rollouts: int = 8, baseline: str = "random",
                 name: str = "difficulty_based") -> list[SelectorSpec]:
    """``baseline`` and one ``name`` selector per ``target_reward``, otherwise the reference
    settings (:data:`UPSTREAM_BOTS`): the ``target_reward`` knob side by side.

    Labels are ``"<name> target=<t>"``; TTB and BSF are then measured against ``baseline``.
    """
    targets = list(targets)
    if not targets:
        raise ValueError("target_specs: give at least one target_reward")
    bad = [t for t in targets if not 0.0 <= float(t) <= 1.0]
    if bad:
        raise ValueError(f"target_specs: target_reward {bad[0]!r} is not a pass rate in [0, 1]")
    if len({float(t) for t in targets}) != len(targets):
        raise ValueError(f"target_specs: repeated target_reward in {targets}")
    base = {**UPSTREAM_BOTS, "m": n_rollouts}
    return [SelectorSpec(baseline, baseline)] + [
        SelectorSpec(f"{name} target={_fmt(float(t))}", name,
                     {**base, "target_reward": float(t)}, "ablation",
                     note="the target_reward knob") for t in targets]


def specs_table(specs: Sequence[SelectorSpec]) -> pd.DataFrame:
    """One row per selector label with its name, group and kwargs spread into columns."""
    rows = []
    for s in specs:
        row = {"selector": s.label, "name": s.name, "group": s.group, "note": s.note}
        if s.factory is not None:
            row["factory"] = getattr(s.factory, "__qualname__", repr(s.factory))
        row.update({k: v for k, v in s.kwargs.items()})
        rows.append(row)
    return pd.DataFrame(rows)


def check_specs(specs: Sequence[SelectorSpec], config: SimConfig, world: World | None = None,
                ) -> None:
    """Validate every spec (name, features, kwargs, ``m`` vs rollouts) before running any."""
    from mathagent.selectors import check_selector_settings

    labels = [s.label for s in specs]
    dupes = sorted({lab for lab in labels if labels.count(lab) > 1})
    if dupes:
        raise ValueError(f"duplicate selector labels in the sweep: {dupes}")
    if world is not None and world.config != config:
        raise ValueError("the world was made with a different SimConfig")
    probe = world.datasets()[0] if world is not None else None
    for s in specs:
        if s.factory is not None:
            if not callable(s.factory):
                raise ValueError(f"sweep entry {s.label!r}: factory {s.factory!r} is not "
                                 "callable")
            continue
        keys = list(FEATURE_KEYS) if s.needs_features() else None
        try:
            check_selector_settings(s.name, probe, keys, repeat_times=config.n_rollouts,
                                    **s.kwargs)
        except ValueError as exc:
            raise ValueError(f"sweep entry {s.label!r}: {exc}") from exc
