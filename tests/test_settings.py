"""mathagent.settings: dataclass schema, YAML and overrides through OmegaConf, flags derived."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

import pytest

from mathagent.settings import SettingsError, add_flags, flag_overrides, from_flags, load, setting


@dataclass
class Inner:
    steps: int = setting(60, help="total steps", flag="--steps")
    lr: float = setting(1e-5, help="learning rate")
    device: str = setting("cpu", help="where to train", flag=True, choices=["cpu", "cuda"])
    limit_s: float = setting(0.0, help="time limit", flag="--limit", metavar="MIN",
                             to_value=lambda minutes: 60.0 * minutes)


@dataclass
class Outer:
    inner: Inner = field(default_factory=Inner)
    keys: list[str] = setting(default_factory=lambda: ["a", "b"], help="columns", flag=True)
    max_tasks: int | None = setting(None, help="keep the first N", flag=True)
    lenient: bool = setting(True, help="lenient judge", flag=True)


def test_defaults_file_then_overrides(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("inner: {steps: 5, lr: 0.1}\nkeys: [x]\n")
    cfg = load(Outer, path, {"inner.steps": 7})
    assert isinstance(cfg, Outer) and isinstance(cfg.inner, Inner)
    assert (cfg.inner.steps, cfg.inner.lr, cfg.keys, cfg.max_tasks) == (7, 0.1, ["x"], None)
    assert load(Outer, None, ["inner.device=cuda", "max_tasks=3"]).max_tasks == 3
    assert load(Outer).inner.steps == 60


@pytest.mark.parametrize(("source", "overrides", "message"), [
    ("inner: {steps: many}\n", {}, "run.yaml: inner.steps: Value 'many'"),
    ("inner: {stepz: 1}\n", {}, "run.yaml: inner.stepz: Key 'stepz' not in 'Inner'"),
    ("", {"inner.nope": 1}, "run.yaml: override inner.nope=1: inner.nope: Key 'nope'"),
    ("inner: {device: tpu}\n", {}, "run.yaml: inner.device: 'tpu' is not one of cpu, cuda"),
    ("- a list\n", {}, "run.yaml: expected a mapping of settings, got list"),
    ("inner: {steps: [1\n", {}, "run.yaml: not valid YAML"),
])
def test_bad_settings_are_one_line_naming_file_and_key(tmp_path, source, overrides, message):
    path = tmp_path / "run.yaml"
    path.write_text(source)
    with pytest.raises(SettingsError) as err:
        load(Outer, path, overrides)
    assert str(err.value).startswith(f"{path.parent}/{message}")
    assert "\n" not in str(err.value)


def test_missing_file_is_named(tmp_path):
    with pytest.raises(SettingsError, match="nowhere.yaml: cannot be read"):
        load(Outer, tmp_path / "nowhere.yaml")


def test_flags_come_from_the_fields():
    parser = argparse.ArgumentParser()
    add_flags(parser, Outer)
    text = parser.format_help()
    for flag in ("--steps", "--device", "--limit", "--keys", "--max-tasks", "--lenient",
                 "--no-lenient"):
        assert flag in text
    assert "--lr" not in text  # a field without a flag is a file setting only
    assert "total steps (default: 60)" in " ".join(text.split())
    args = parser.parse_args(["--steps", "3", "--limit", "2", "--keys", "p", "q", "--no-lenient"])
    assert flag_overrides(args, Outer) == {"inner.steps": 3, "inner.limit_s": 120.0,
                                           "keys": ["p", "q"], "lenient": False}
    cfg = from_flags(Outer, args)
    assert (cfg.inner.steps, cfg.inner.device, cfg.lenient) == (3, "cpu", False)
    assert flag_overrides(parser.parse_args([]), Outer) == {}
    with pytest.raises(SystemExit):
        parser.parse_args(["--device", "tpu"])


@dataclass
class Columns:
    keep: tuple[str, ...] = setting(("a", "b"), flag=True, nargs="*", help="columns to keep")
    drop_duplicates: bool = setting(True, flag="--keep-duplicates", invert=True,
                                    help="drop duplicates", flag_help="keep duplicates")


def test_empty_lists_inverted_switches_and_tuples():
    parser = argparse.ArgumentParser()
    add_flags(parser, Columns)
    assert "keep duplicates" in parser.format_help()
    assert "--no-keep-duplicates" not in parser.format_help()
    cfg = from_flags(Columns, parser.parse_args(["--keep", "--keep-duplicates"]))
    assert cfg.keep == () and cfg.drop_duplicates is False  # a tuple field stays a tuple
    cfg = from_flags(Columns, parser.parse_args([]))
    assert cfg.keep == ("a", "b") and cfg.drop_duplicates is True
    assert load(Columns, None, {"keep": ["x"]}).keep == ("x",)
