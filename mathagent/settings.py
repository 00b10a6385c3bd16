"""Settings: a dataclass is the schema; YAML files, dotted overrides and command-line flags fill it.

Every command declares its settings once, as dataclass fields, and reads them one way:

    @dataclass
    class TrainerConfig:
        steps: int = setting(60, help="total training steps", flag="--steps")
        seed: int = setting(0, help="seed of the sampler and the selector", flag=True)

    add_flags(parser, TrainConfig)                 # --steps, --seed (nested dataclasses walked)
    cfg = load(TrainConfig, "run.yaml", flag_overrides(args, TrainConfig))

:func:`load` builds an OmegaConf structured config from the dataclass (its defaults), merges
the YAML file or mapping, then the overrides (``{"trainer.steps": 5}`` or ``["trainer.steps=5"]``).
OmegaConf checks every value against the field's type; a wrong type, an unknown key or a value
outside a field's ``choices`` raises :class:`SettingsError`, one line naming the file and key.
A flag given on the command line is an override of its field; a flag left out leaves the
value of the file (or the dataclass default, which ``--help`` shows).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import typing
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

_META = "mathagent.setting"


class SettingsError(ValueError):
    """A setting that cannot be read: the message names the file (or source) and the key."""


def positive_int(text: str) -> int | None:
    """``text`` (an environment variable's value, say) as a whole number of 1 or more written
    in ASCII digits, spaces around it allowed; None for anything else ("²".isdigit() too)."""
    text = text.strip()
    if not (text.isascii() and text.isdigit()) or int(text) < 1:
        return None
    return int(text)


@dataclasses.dataclass(frozen=True)
class _Meta:
    help: str
    flag: str | None
    choices: tuple | None
    metavar: str | None
    to_value: Callable[[Any], Any] | None
    nargs: str | None
    invert: bool
    flag_help: str | None


def setting(default: Any = dataclasses.MISSING, *, help: str,  # noqa: A002 (argparse's name)
            flag: str | bool = False, choices: Sequence | None = None,
            metavar: str | None = None, to_value: Callable[[Any], Any] | None = None,
            nargs: str | None = None, invert: bool = False, flag_help: str | None = None,
            default_factory: Callable[[], Any] | Any = dataclasses.MISSING) -> Any:
    """A dataclass field with its help text and, if ``flag``, its command-line option.

    ``flag=True`` names the option after the field (``max_tasks`` -> ``--max-tasks``); a string
    names it. ``choices`` are checked by :func:`load` as well as by argparse. ``to_value``
    converts what the flag received into the field's value (minutes into seconds, say).
    ``nargs="*"`` lets a list flag be given with no values (an empty list). ``invert`` makes
    the flag of a bool field a switch that turns it off (``--keep-duplicates`` for
    ``drop_duplicates``), with ``flag_help`` as its help.
    """
    name = None if flag is False else flag if isinstance(flag, str) else True
    meta = _Meta(help=help, flag=name, choices=tuple(choices) if choices else None,
                 metavar=metavar, to_value=to_value, nargs=nargs, invert=invert,
                 flag_help=flag_help)
    if default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=default_factory, metadata={_META: meta})
    return dataclasses.field(default=default, metadata={_META: meta})


def _meta(f: dataclasses.Field) -> _Meta | None:
    return f.metadata.get(_META)


def _walk(schema: type, prefix: str = "") -> Iterator[tuple[str, dataclasses.Field, Any]]:
    """(dotted key, field, resolved type) of every leaf field, nested dataclasses walked."""
    hints = typing.get_type_hints(schema)
    for f in dataclasses.fields(schema):
        kind = hints[f.name]
        key = f"{prefix}{f.name}"
        if dataclasses.is_dataclass(kind):
            yield from _walk(kind, key + ".")
        else:
            yield key, f, kind


def _one_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    first = text[0] if text else type(exc).__name__
    key = next((t.split(":", 1)[1].strip() for t in text if t.strip().startswith("full_key:")), "")
    return f"{key}: {first}" if key else first


def _check_choices(schema: type, cfg: Any, where: str) -> None:
    from omegaconf import OmegaConf

    for key, f, _ in _walk(schema):
        meta = _meta(f)
        if meta and meta.choices:
            value = OmegaConf.select(cfg, key)
            if value not in meta.choices:
                raise SettingsError(f"{where}: {key}: {value!r} is not one of "
                                    f"{', '.join(map(str, meta.choices))}")


def load(schema: type[T], source: str | os.PathLike | Mapping | None = None,
         overrides: Mapping[str, Any] | Sequence[str] = (), *, where: str | None = None) -> T:
    """An instance of ``schema``: its defaults, then ``source`` (YAML path or mapping), then
    ``overrides`` (dotted keys); types and choices checked, errors raised as SettingsError."""
    import yaml
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    data: Any = {}
    if isinstance(source, str | os.PathLike):
        where = where or str(source)
        try:
            data = yaml.safe_load(Path(source).read_text())
        except OSError as exc:
            raise SettingsError(f"{source}: cannot be read ({exc.strerror or exc})") from None
        except yaml.YAMLError as exc:
            raise SettingsError(f"{source}: not valid YAML ({_one_line(exc)})") from None
        data = {} if data is None else data
    elif source is not None:
        data = dict(source)
    where = where or "settings"
    if not isinstance(data, Mapping):
        raise SettingsError(f"{where}: expected a mapping of settings, got "
                            f"{type(data).__name__}")
    try:
        cfg = OmegaConf.merge(OmegaConf.structured(schema), data)
    except OmegaConfBaseException as exc:
        raise SettingsError(f"{where}: {_one_line(exc)}") from None
    items = overrides.items() if isinstance(overrides, Mapping) else (
        _split_override(o, where) for o in overrides)
    for key, value in items:
        try:
            OmegaConf.update(cfg, key, value, merge=True, force_add=False)
        except OmegaConfBaseException as exc:
            raise SettingsError(f"{where}: override {key}={value!r}: {_one_line(exc)}") from None
        except AttributeError:  # a key below a scalar
            raise SettingsError(f"{where}: override {key}: no such setting") from None
    _check_choices(schema, cfg, where)
    return _restore_tuples(OmegaConf.to_object(cfg))


def _restore_tuples(obj: Any) -> Any:
    """OmegaConf gives tuple fields back as lists; make them the tuples they are declared."""
    hints = typing.get_type_hints(type(obj))
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value):
            _restore_tuples(value)
        elif typing.get_origin(hints[f.name]) is tuple and isinstance(value, list):
            object.__setattr__(obj, f.name, tuple(value))  # frozen dataclasses too
    return obj


def _split_override(text: str, where: str) -> tuple[str, Any]:
    import yaml

    key, sep, raw = text.partition("=")
    if not sep or not key:
        raise SettingsError(f"{where}: override {text!r} is not KEY=VALUE")
    return key.strip(), yaml.safe_load(raw) if raw else ""


def to_dict(cfg: Any) -> dict:
    """The settings as plain data (what a run records)."""
    return dataclasses.asdict(cfg)


# --------------------------------------------------------------------------------------
# Command-line flags derived from the fields
# --------------------------------------------------------------------------------------


def _flag(key: str, f: dataclasses.Field, meta: _Meta) -> str:
    return meta.flag if isinstance(meta.flag, str) else "--" + f.name.replace("_", "-")


def _dest(key: str) -> str:
    return "setting:" + key


def _argparse_type(kind: Any) -> tuple[Any, dict]:
    """(scalar type, extra argparse keywords) for a field's annotation."""
    args = [a for a in typing.get_args(kind) if a is not type(None)]
    origin = typing.get_origin(kind)
    if origin in (list, tuple, Sequence):
        return (args[0] if args else str), {"nargs": "+"}
    if args and origin is not None and len(args) == 1:  # X | None
        return _argparse_type(args[0])
    if kind is bool:
        return bool, {}
    return (kind if kind in (int, float, str, Path) else str), {}


def _default_text(f: dataclasses.Field) -> str:
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
    else:
        return "required"
    if isinstance(value, list | tuple):
        value = " ".join(map(str, value)) or "none"
    return f"default: {value}"


def add_flags(parser: argparse.ArgumentParser | argparse._ArgumentGroup, schema: type,
              *, show_defaults: bool = True) -> None:
    """One option per field of ``schema`` that declares a flag; a flag left out stays unset.

    ``show_defaults`` appends the dataclass default to the help (leave it off where a config
    file supplies the values, and say so in the command's description).
    """
    for key, f, kind in _walk(schema):
        meta = _meta(f)
        if meta is None or meta.flag is None:
            continue
        scalar, extra = _argparse_type(kind)
        if meta.nargs and extra:
            extra = {**extra, "nargs": meta.nargs}
        text = meta.help + (f" ({_default_text(f)})" if show_defaults else "")
        kwargs: dict[str, Any] = {"dest": _dest(key), "default": None, "help": text}
        if meta.invert:
            if scalar is not bool or extra:
                raise TypeError(f"setting {key}: invert=True needs a bool field")
            kwargs.update(action="store_const", const=False, help=meta.flag_help or meta.help)
        elif scalar is bool and not extra:
            kwargs["action"] = argparse.BooleanOptionalAction
        else:
            kwargs.update(type=scalar, **extra)
            if meta.choices:
                kwargs["choices"] = meta.choices
            kwargs["metavar"] = meta.metavar or (None if meta.choices else f.name.upper())
        parser.add_argument(_flag(key, f, meta), **kwargs)


def flag_overrides(args: argparse.Namespace, schema: type) -> dict[str, Any]:
    """``{dotted key: value}`` for every flag of ``schema`` given on the command line."""
    out: dict[str, Any] = {}
    for key, f, _ in _walk(schema):
        meta = _meta(f)
        value = getattr(args, _dest(key), None)
        if meta is None or value is None:
            continue
        out[key] = meta.to_value(value) if meta.to_value else value
    return out


def from_flags(schema: type[T], args: argparse.Namespace, *, where: str = "command line") -> T:
    """``schema`` from its defaults and the flags given (for commands without a config file)."""
    return load(schema, None, flag_overrides(args, schema), where=where)
