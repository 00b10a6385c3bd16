"""``experiment.yaml``: the short, hand-written part of a results folder's report.

Everything a report states about its runs is computed from the run folders; what only a
person knows is written here once: the question, a few words on each arm, the settings
(policy, steps, batch, evaluation set and schedule, hardware, software), the figures'
captions, a few sentences of answer and interpretation, and the limitations. Prose cites
computed values by name in braces (``{mean_random}``, ``{z_bots_vs_random}``;
:func:`mathagent.report.stats.named_values` lists them), never by typing a number.

A folder that ``python -m mathagent experiment`` fills names its spec (``experiment:``), the
one home of the arms' configs and the seeds (:mod:`mathagent.results.spec`); the report takes
them from there. An arm is named here as its runs report it: by its selector
(``difficulty_based``), not by the spec's arm name (``difficulty``, the run folders' prefix),
because the prose, ``baseline`` and the pages cite the selector names. Each run folder must be
one of the spec's runs (``<spec arm>_seed<seed>``) with that arm's selector and that seed.
A folder without a spec (runs made before it, ``train-local`` runs, a tidy table) gives the
arms' configs and the seeds here.

Keys (``title`` and ``question`` always; the rest as the folder needs):

==================  =====================================================================
``title``           the page's heading
``question``        what the experiment asks, one paragraph
``experiment``      the spec the runs were made from (``configs/experiment_qwen.yaml``,
                    relative to the repository root): the arms, their configs and the seeds
``arms``            arm (the selector name the runs report) -> ``{config: PATH, about: TEXT}``;
                    with ``experiment``, only ``{about: TEXT}`` (the arms are the spec's)
``baseline``        the arm the others are set against (default: the first)
``seeds``           the planned seeds; a planned run with no folder shows as "not run"
                    (with ``experiment``, the spec's: not given here)
``table``           a tidy CSV holding the runs, for a folder without run folders
``start_point``     a ``start_point.csv`` (:class:`mathagent.results.StartPoint`): the
                    held-out accuracy of the weights every run starts from, measured once
``settings``        setting -> value, shown as given (``policy``, ``steps``, ``batch``,
                    ``evaluation``, ``software`` are required where there are arms)
``hardware``        the GPU model of every run, or ``{default: GPU, RUN_FOLDER: GPU, ...}``
``figures``         file in the folder -> caption (the results figures ``training_curves.png``,
                    ``effective_task_ratio.png`` and ``behaviour.png`` are drawn from the runs
                    where missing)
``tables``          a list of ``{file: CSV, caption: TEXT, columns: {col: label}, decimals: N}``,
                    ``{runs: FOLDER, caption: TEXT}`` (the run folders under it, one row each)
                    ``{tutorial_log: FILE, caption: TEXT}`` (what each notebook did),
                    ``{text: FILE, caption: TEXT}`` (a short log, quoted as it is) or
                    ``{selector: RUN_FOLDER, taskset: PATH, caption: TEXT}`` (the run's
                    selector replayed on the pass rates it was fed, over the taskset at
                    ``PATH``, relative to the repository root: each batch's pass rate, what
                    the references implied of it, its pinned references and the capability,
                    :func:`mathagent.report.stats.selector_replay`)
``values``          name -> ``{file: CSV or parquet, column: COL, stat: mean|min|max|sum|count,
                    decimals: N}``: numbers of files the prose cites
``answer``          the answer in a few sentences (the top README's answer block shows it)
``interpretation``  what the numbers mean
``limitations``     a list of sentences
==================  =====================================================================

A missing or misspelt key, a file that is not there, a name the prose cites that nothing
computes, an arm's config or the seeds given both here and in the spec: one
:class:`ReportError` line naming the file and the key.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SPEC = "experiment.yaml"
#: Settings an experiment with arms must state.
REQUIRED_SETTINGS = ("policy", "steps", "batch", "evaluation", "software")
STATS = ("mean", "min", "max", "sum", "count")
TABLE_KINDS = ("file", "runs", "tutorial_log", "text", "selector")
KEYS = ("title", "question", "experiment", "arms", "baseline", "seeds", "table", "start_point",
        "settings", "hardware", "figures", "tables", "values", "answer", "interpretation",
        "limitations")


class ReportError(ValueError):
    """A report that cannot be written; the message is one line naming the file and key."""


@dataclass(frozen=True)
class Arm:
    name: str
    config: str
    about: str


@dataclass(frozen=True)
class Experiment:
    """One results folder's ``experiment.yaml``, checked (see the module docstring)."""

    folder: Path
    title: str
    question: str
    experiment: str | None = None
    arms: tuple[Arm, ...] = ()
    baseline: str | None = None
    seeds: tuple[int, ...] = ()
    table: str | None = None
    start_point: str | None = None
    settings: dict[str, str] = field(default_factory=dict)
    hardware: dict[str, str] = field(default_factory=dict)
    figures: dict[str, str] = field(default_factory=dict)
    tables: tuple[dict, ...] = ()
    values: dict[str, dict] = field(default_factory=dict)
    answer: str = ""
    interpretation: str = ""
    limitations: tuple[str, ...] = ()
    #: With ``experiment``: each run folder the spec plans -> (its arm's selector, its seed).
    planned: dict[str, tuple[str, int]] = field(default_factory=dict)

    @property
    def arm_names(self) -> list[str]:
        return [a.name for a in self.arms]

    def gpu(self, run: str) -> str:
        """The GPU model run folder ``run`` used (``-`` where the spec names none)."""
        return self.hardware.get(run, self.hardware.get("default", "-"))


def _text(data: dict, key: str, where: str, required: bool = False) -> str:
    value = data.get(key)
    if value is None:
        if required:
            raise ReportError(f"{where}: no {key!r} (required)")
        return ""
    if not isinstance(value, str | int | float) or isinstance(value, bool):
        raise ReportError(f"{where}: {key!r} must be text, not {type(value).__name__}")
    return " ".join(str(value).split())


def _mapping(data: dict, key: str, where: str) -> dict:
    value = data.get(key) or {}
    if not isinstance(value, dict):
        raise ReportError(f"{where}: {key!r} must be a mapping, not {type(value).__name__}")
    return value


def _file(folder: Path, name: Any, where: str) -> str:
    """``name``, a file or folder relative to ``folder`` that must exist."""
    if not isinstance(name, str) or not name:
        raise ReportError(f"{where}: needs a file name, got {name!r}")
    if not (folder / name).exists():
        raise ReportError(f"{where}: {folder / name}: no such file")
    return name


def _arms(data: dict, where: str, root: Path) -> tuple[Arm, ...]:
    arms = []
    for name, arm in _mapping(data, "arms", where).items():
        at = f"{where}: arms.{name}"
        if not isinstance(arm, dict) or "config" not in arm:
            raise ReportError(f"{at}: needs config (the arm's config file) and about")
        unknown = set(arm) - {"config", "about"}
        if unknown:
            raise ReportError(f"{at}: unknown key(s) {', '.join(sorted(unknown))}")
        config = str(arm["config"])
        if not (root / config).is_file():
            raise ReportError(f"{at}.config: {config}: no such file")
        arms.append(Arm(str(name), config, _text(arm, "about", at)))
    return tuple(arms)


def _from_spec(data: dict, where: str) -> tuple[str, tuple[Arm, ...], tuple[int, ...],
                                                dict[str, tuple[str, int]]]:
    """``experiment``'s spec read: its path as given, the arms (each ``about`` from ``data``),
    the seeds and the planned runs (:attr:`Experiment.planned`)."""
    from mathagent.results.spec import SpecError, load_spec, repo_path, repo_relative

    given = data["experiment"]
    if not isinstance(given, str) or not given:
        raise ReportError(f"{where}: experiment: the spec's path, relative to the repository "
                          f"root (e.g. configs/experiment_qwen.yaml), not {given!r}")
    file = repo_path(given)
    if not file.is_file():
        raise ReportError(f"{where}: experiment: {given}: no such file (the spec's path, "
                          "relative to the repository root)")
    if "seeds" in data:
        raise ReportError(f"{where}: seeds: the spec {given} holds them (experiment:); "
                          "give them in one place")
    try:
        spec = load_spec(file)
        selectors = spec.selectors()
    except SpecError as exc:
        raise ReportError(f"{where}: experiment: {exc}") from None
    by_selector: dict[str, str] = {}
    for arm, selector in selectors.items():
        if selector in by_selector:
            raise ReportError(f"{where}: experiment: {given}: arms {by_selector[selector]} and "
                              f"{arm} both run selector {selector!r}, which the report names "
                              "its arms by")
        by_selector[selector] = arm
    about = _mapping(data, "arms", where)
    for name, arm in about.items():
        at = f"{where}: arms.{name}"
        if name not in by_selector:
            raise ReportError(f"{at}: not an arm of {given} (its arms, by the selector their "
                              f"runs report: {', '.join(by_selector)})")
        if not isinstance(arm, dict):
            raise ReportError(f"{at}: needs about (a few words on the arm)")
        if "config" in arm:
            raise ReportError(f"{at}.config: the spec {given} holds the arm's config "
                              "(experiment:); give it in one place")
        unknown = set(arm) - {"about"}
        if unknown:
            raise ReportError(f"{at}: unknown key(s) {', '.join(sorted(unknown))}")
    texts = {name: _text(arm, "about", f"{where}: arms.{name}") for name, arm in about.items()}
    arms = tuple(Arm(selectors[arm], repo_relative(config), texts.get(selectors[arm], ""))
                 for arm, config in spec.arms.items())
    planned = {run.name: (selectors[run.arm], run.seed) for run in spec.runs()}
    return given, arms, spec.seeds, planned


def _tables(data: dict, where: str, folder: Path) -> tuple[dict, ...]:
    tables = data.get("tables") or []
    if not isinstance(tables, list):
        raise ReportError(f"{where}: 'tables' must be a list")
    out = []
    for i, table in enumerate(tables):
        at = f"{where}: tables[{i}]"
        kinds = [k for k in TABLE_KINDS if isinstance(table, dict) and k in table]
        if len(kinds) != 1:
            raise ReportError(f"{at}: needs exactly one of {', '.join(TABLE_KINDS)}")
        keys = {"taskset"} if kinds[0] == "selector" else {"columns", "decimals"}
        unknown = set(table) - {kinds[0], "caption"} - keys
        if unknown:
            raise ReportError(f"{at}: unknown key(s) {', '.join(sorted(unknown))}")
        _file(folder, table[kinds[0]], f"{at}.{kinds[0]}")
        out.append({"kind": kinds[0], "source": table[kinds[0]],
                    "caption": _text(table, "caption", at, required=True),
                    "columns": table.get("columns"),
                    "decimals": _whole(table.get("decimals", 3), f"{at}.decimals")})
        if kinds[0] == "selector":
            out[-1]["taskset"] = _taskset(table.get("taskset"), f"{at}.taskset")
    return tuple(out)


def _taskset(name: Any, at: str) -> str:
    """``name``, a taskset folder relative to the repository root that must exist."""
    from mathagent import paths

    if not isinstance(name, str) or not name:
        raise ReportError(f"{at}: needs the taskset folder the run trained on, relative to the "
                          f"repository root (data/arithmetic_qwen), got {name!r}")
    if not (paths.REPO_ROOT / name).is_dir():
        raise ReportError(f"{at}: {paths.REPO_ROOT / name}: no such folder")
    return name


def _whole(value: Any, at: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 12:
        raise ReportError(f"{at}: {value!r} is not a whole number of decimals (0-12)")
    return value


def _values(data: dict, where: str, folder: Path) -> dict[str, dict]:
    out = {}
    for name, value in _mapping(data, "values", where).items():
        at = f"{where}: values.{name}"
        if not isinstance(value, dict) or {"file", "column"} - set(value):
            raise ReportError(f"{at}: needs file and column (stat and decimals optional)")
        unknown = set(value) - {"file", "column", "stat", "decimals"}
        if unknown:
            raise ReportError(f"{at}: unknown key(s) {', '.join(sorted(unknown))}")
        stat = value.get("stat", "mean")
        if stat not in STATS:
            raise ReportError(f"{at}.stat: {stat!r} is not one of {', '.join(STATS)}")
        _file(folder, value["file"], f"{at}.file")
        out[str(name)] = {"file": value["file"], "column": str(value["column"]), "stat": stat,
                          "decimals": _whole(value.get("decimals", 3), f"{at}.decimals")}
    return out


def read_spec(folder: str | Path) -> Experiment:
    """The checked ``experiment.yaml`` of results folder ``folder``."""
    import yaml

    from mathagent import paths

    folder = Path(folder)
    file = folder / SPEC
    if not file.is_file():
        raise ReportError(f"{file}: no such file (the experiment's question, arms, settings and "
                          "prose; see the docstring of mathagent/report/spec.py)")
    try:
        data = yaml.safe_load(file.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" at line {mark.line + 1}" if mark is not None else ""
        raise ReportError(f"{file}: not YAML{line}") from None
    where = str(file)
    if not isinstance(data, dict):
        raise ReportError(f"{where}: not a mapping of keys")
    unknown = set(data) - set(KEYS)
    if unknown:
        raise ReportError(f"{where}: unknown key(s) {', '.join(sorted(map(str, unknown)))}; "
                          f"known: {', '.join(KEYS)}")
    if "experiment" in data:
        experiment, arms, seeds, planned = _from_spec(data, where)
    else:
        experiment, arms, planned = None, _arms(data, where, paths.REPO_ROOT), {}
        seeds = data.get("seeds") or []
        if not isinstance(seeds, list) or not all(isinstance(s, int) for s in seeds):
            raise ReportError(f"{where}: 'seeds' must be a list of whole numbers")
    names = [a.name for a in arms]
    baseline = _text(data, "baseline", where) or (names[0] if names else None)
    if arms and baseline not in names:
        raise ReportError(f"{where}: baseline {baseline!r} is not an arm ({', '.join(names)})")
    settings = {str(k): _text(data["settings"], k, f"{where}: settings")
                for k in _mapping(data, "settings", where)}
    if arms:
        missing = [k for k in REQUIRED_SETTINGS if not settings.get(k)]
        if missing:
            raise ReportError(f"{where}: settings lack {', '.join(missing)}")
    hardware = data.get("hardware")
    hardware = ({"default": _text(data, "hardware", where)} if not isinstance(hardware, dict)
                else {str(k): str(v) for k, v in hardware.items()})
    if arms and not hardware.get("default") and not any(hardware.values()):
        raise ReportError(f"{where}: no 'hardware' (the GPU model the runs used)")
    figures = {str(k): _text(data["figures"], k, f"{where}: figures", required=True)
               for k in _mapping(data, "figures", where)}
    limits = data.get("limitations") or []
    if not isinstance(limits, list) or not all(isinstance(x, str) for x in limits):
        raise ReportError(f"{where}: 'limitations' must be a list of sentences")
    table = data.get("table")
    start = data.get("start_point")
    return Experiment(
        folder=folder, title=_text(data, "title", where, required=True),
        question=_text(data, "question", where, required=True), experiment=experiment,
        arms=arms, baseline=baseline,
        seeds=tuple(seeds), table=_file(folder, table, f"{where}: table") if table else None,
        start_point=_file(folder, start, f"{where}: start_point") if start else None,
        settings=settings, hardware=hardware, figures=figures,
        tables=_tables(data, where, folder), values=_values(data, where, folder),
        answer=_text(data, "answer", where), interpretation=_text(data, "interpretation", where),
        limitations=tuple(" ".join(x.split()) for x in limits), planned=planned)
