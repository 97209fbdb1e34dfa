"""Command-line flags generated from configuration dataclasses: one place for names, defaults and help (ch. 5b, A1).

A field with `metadata={"help": ...}` becomes a flag: `--field-name` (or `metadata["flag"]`), its type from
the annotation (`int | None` accepts 'none'), `choices`, `nargs` and a `parse` function from the metadata, the
default from a given instance (e.g. the profile's) or `cli_default` (text the command resolves, e.g.
'auto'). Booleans get `--name/--no-name`. Validation stays in
the dataclass: a bad value fails there with the same message as in Python."""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from typing import Any, Callable, ClassVar

_SCALARS: dict[Any, Callable[[str], Any]] = {int: int, float: float, str: str}


def shared_field(config_class: type, name: str, default: Any = dataclasses.MISSING, **metadata: Any):
    """A field declared once, in `config_class`, reused by another configuration: its default, help text and
    parser, with `default` and any metadata (e.g. help=...) changed where the other configuration differs
    (`BenchConfig` shares the data, run and recipe fields it names) (chapter 5)."""
    source = next((f for f in dataclasses.fields(config_class) if f.name == name), None)
    if source is None:
        raise ValueError(f"{config_class.__name__} has no field {name!r}")
    default = source.default if default is dataclasses.MISSING else default
    return dataclasses.field(default=default, metadata={**source.metadata, **metadata})


def _parser_for(annotation: Any) -> tuple[Callable[[str], Any] | None, bool]:
    """(converter, is_bool) for a field annotation; Optional scalars accept 'none'."""
    if annotation is bool:
        return None, True
    args = typing.get_args(annotation)
    optional = typing.get_origin(annotation) in (typing.Union, types.UnionType) and type(None) in args
    base = next((a for a in args if a is not type(None)), annotation) if optional else annotation
    if base is bool:
        return None, True
    convert = _SCALARS.get(base)
    if convert is None:
        raise TypeError(f"no command-line parser for fields of type {annotation!r}: give metadata['parse']")
    if not optional:
        return convert, False
    return (lambda raw: None if raw.strip().lower() == "none" else convert(raw)), False


def _friendly(convert: Callable[[str], Any], name: str) -> Callable[[str], Any]:
    """The converter, its ValueError turned into argparse's one-line 'argument --x: ...' message."""
    def parse(raw: str) -> Any:
        try:
            return convert(raw)
        except ValueError as err:
            raise argparse.ArgumentTypeError(f"{raw!r} is not a valid {name} ({err})") from None
    parse.__name__ = name  # argparse names the converter in some messages
    return parse


def flag_fields(cls) -> list[dataclasses.Field]:
    """The fields of a config class that are command-line flags (those with help text)."""
    return [f for f in dataclasses.fields(cls) if "help" in f.metadata]


def flag_name(f: dataclasses.Field) -> str:
    """`--learning-rate` for `learning_rate`, unless the metadata names the flag."""
    return f.metadata.get("flag", "--" + f.name.replace("_", "-"))


def add_config_flags(parser: argparse.ArgumentParser, cls, defaults=None, skip: tuple[str, ...] = (),
                     required: tuple[str, ...] = ()) -> None:
    """Add one flag per helped field of `cls`, defaults from the instance `defaults` (else the field's); the fields
    in `required` (or with metadata `required`) have no default: the command stops without them."""
    hints = typing.get_type_hints(cls)
    group = parser.add_argument_group(cls.__name__, (cls.__doc__ or "").splitlines()[0])
    for f in flag_fields(cls):
        if f.name in skip:
            continue
        convert, is_bool = (f.metadata["parse"], False) if "parse" in f.metadata else _parser_for(hints[f.name])
        names = (flag_name(f), *f.metadata.get("aliases", ()))
        must = f.name in required or bool(f.metadata.get("required"))
        given = getattr(defaults, f.name) if defaults is not None else f.default
        default = None if must else f.metadata.get("cli_default", given)
        if is_bool:
            group.add_argument(*names, dest=f.name, action=argparse.BooleanOptionalAction, default=default,
                               help=f.metadata["help"])
            continue
        shown = " ".join(map(str, default)) if isinstance(default, tuple) else default
        said = "" if default is None or "(default" in f.metadata["help"] else f" (default: {shown})"
        said = " (required)" if must else said
        group.add_argument(*names, dest=f.name, type=_friendly(convert, f.name), default=default, required=must,
                           nargs=f.metadata.get("nargs"), metavar=f.metadata.get("metavar"),
                           choices=f.metadata.get("choices"), help=f.metadata["help"] + said)


def config_from_flags(cls, args: argparse.Namespace, **fixed):
    """An instance of `cls` from parsed flags (fields without a flag keep their defaults unless in `fixed`)."""
    values = {f.name: getattr(args, f.name) for f in flag_fields(cls) if hasattr(args, f.name)}
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in values.items()}  # nargs: frozen tuples
    return cls(**{**values, **fixed})


class RefusesRenamed:
    """Base of a config dataclass whose old keywords (`RENAMED`: old -> new) fail naming the new spelling,
    instead of a bare 'unexpected keyword'."""

    RENAMED: ClassVar[dict[str, str]] = {}

    def __new__(cls, *args: Any, **kwargs: Any):
        old = [name for name in cls.RENAMED if name in kwargs]
        if old:
            raise TypeError(f"{cls.__name__}: " + "; ".join(f"{name}= is now {cls.RENAMED[name]}=" for name in old)
                            + " (one name per idea across classes, flags and JSON)")
        return super().__new__(cls)
