"""The pass registry: name → pass class (every module of this package is searched), with
typed options.

A pass is a frozen dataclass subclassing `CollagePass` with a class attribute `name` (its
pipeline argument) and fields as options. `collage-annotate{backends=a,b max-depth=3}` sets
`backends=("a", "b")` and `max_depth=3`; options may be separated by spaces (MLIR style) or
commas, and a bare word after a list option extends the list. Declare each option with
`option(default, help)`: `collage-opt --list-passes` shows its type, default and help.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import pkgutil
import types
import typing
from typing import Any, ClassVar

from iree.compiler import ir

from collage_mlir.errors import CollageError

_LOADED: dict[str, type[CollagePass]] = {}
_HELPERS = frozenset({"common", "pipeline", "registry"})
"""Modules of the passes package that hold no pass."""


@dataclasses.dataclass(frozen=True)
class CollagePass:
    """Base of the Python passes. Subclasses set `name` and implement `run_on_module`."""

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""

    def run_on_module(self, module: ir.Operation) -> None:
        raise NotImplementedError

    @classmethod
    def from_options(cls, text: str) -> CollagePass:
        """Build from the text between braces in `name{...}`."""
        return cls(**_parse_options(cls, text))

    @classmethod
    def option_names(cls) -> list[str]:
        return [f.name.replace("_", "-") for f in dataclasses.fields(cls)]

    @classmethod
    def options(cls) -> list[OptionInfo]:
        """Each option as `--list-passes` shows it, read from the dataclass fields (type,
        default) and their `option(...)` help, so the listing cannot drift from the pass."""
        hints = typing.get_type_hints(cls)
        return [OptionInfo(f.name.replace("_", "-"), type_name(hints[f.name]),
                           _default_text(f.default), f.metadata.get("help", ""))
                for f in dataclasses.fields(cls)]


@dataclasses.dataclass(frozen=True)
class OptionInfo:
    """One pass option for people: `name=<type>`, its default and what it means."""

    name: str
    type: str
    default: str
    help: str


def option(default: Any, help: str) -> Any:
    """A pass option: a dataclass field with its default and its one-line meaning (shown by
    `collage-opt --list-passes`)."""
    return dataclasses.field(default=default, metadata={"help": help})


def stage_option(stage: type[CollagePass], name: str) -> Any:
    """A field with the same default and help as `stage`'s option `name` (a pass that hands
    the option on, or takes it as that pass does)."""
    (f,) = [f for f in dataclasses.fields(stage) if f.name == name]
    return dataclasses.field(default=f.default, metadata=f.metadata)


def type_name(hint: Any) -> str:
    """How an option's value is spelled: `int`, `int|none`, `true|false`, `str,...`."""
    if _is_list(hint):
        (item,) = set(typing.get_args(hint)) - {Ellipsis}
        return f"{type_name(item)},..."
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        return "|".join("none" if a is type(None) else type_name(a)
                        for a in typing.get_args(hint))
    if hint is bool:
        return "true|false"
    return getattr(hint, "__name__", str(hint))


def _default_text(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple):
        return ",".join(map(str, value)) or "empty"
    return str(value) if value != "" else "empty"


def register(cls: type[CollagePass]) -> type[CollagePass]:
    """Class decorator: make a pass available by its `name`."""
    _LOADED[cls.name] = cls
    return cls


@functools.cache
def _import_passes() -> None:
    """Import every pass module of this package once: their `@register` fills the table, so
    adding a pass is adding a file."""
    package = importlib.import_module("collage_mlir.passes")
    for info in pkgutil.iter_modules(package.__path__):
        if info.name not in _HELPERS:
            importlib.import_module(f"collage_mlir.passes.{info.name}")


def pass_names() -> list[str]:
    _import_passes()
    return sorted(_LOADED)


def get_pass_class(name: str) -> type[CollagePass] | None:
    """The pass class for `name`, or None when it is not a collage pass (maybe upstream)."""
    if name not in _LOADED:
        _import_passes()
    return _LOADED.get(name)


def _split_options(text: str) -> list[str]:
    """Option tokens: split on spaces and commas outside quotes, quotes removed, as MLIR
    reads `key=value` lists (`cost="table:a b,c.json"` keeps its space and comma)."""
    tokens, token, quote, quoted = [], [], "", False
    for ch in text:
        if quote:
            if ch == quote:
                quote = ""
            else:
                token.append(ch)
        elif ch in "\"'":
            quote, quoted = ch, True
        elif ch in " ,\t\n":
            if token or quoted:
                tokens.append("".join(token))
            token, quoted = [], False
        else:
            token.append(ch)
    if quote:
        raise CollageError(f"option text {text!r}: a quote is not closed")
    if token or quoted:
        tokens.append("".join(token))
    return tokens


def _parse_options(cls: type[CollagePass], text: str) -> dict[str, Any]:
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    raw: dict[str, list[str]] = {}
    last: str | None = None
    for token in _split_options(text):
        if "=" in token:
            key, value = token.split("=", 1)
            key = key.replace("-", "_")
            if key not in fields:
                known = ", ".join(cls.option_names()) or "none"
                raise CollageError(f"pass '{cls.name}': unknown option '{key.replace('_', '-')}'"
                                   f" (options: {known})")
            if _is_list(hints[key]):  # a quoted list ("a,b") holds its commas
                raw[key] = [v for v in value.split(",") if v]
            else:  # an empty string option ("cache=") means its default
                raw[key] = [value] if value or hints[key] is str else []
            last = key
        elif token.replace("-", "_") in fields:  # an option name without '=value'
            raise _needs_value(cls.name, token.replace("-", "_"), hints)
        elif last is not None and _is_list(hints[last]):
            raw[last].append(token)
        else:
            raise CollageError(f"pass '{cls.name}': cannot parse option text '{token}'")
    return {k: _convert(cls.name, k, hints[k], v) for k, v in raw.items()}


def _needs_value(pass_name: str, key: str, hints: dict[str, Any]) -> CollageError:
    """The error for an option given without a value (`{max-depth}`, `{max-depth=}`)."""
    option = key.replace("_", "-")
    return CollageError(f"pass '{pass_name}': option '{option}' needs a value "
                        f"({option}=<{type_name(hints[key])}>)")


def _is_list(hint: Any) -> bool:
    return typing.get_origin(hint) in (tuple, list)


def _convert(pass_name: str, key: str, hint: Any, values: list[str]) -> Any:
    option = key.replace("_", "-")
    if _is_list(hint):
        (item,) = set(typing.get_args(hint)) - {Ellipsis}
        return tuple(_scalar(pass_name, option, item, v) for v in values)
    if not values:
        raise _needs_value(pass_name, key, {key: hint})
    if len(values) != 1:
        raise CollageError(f"pass '{pass_name}': option '{option}' takes one value")
    return _scalar(pass_name, option, hint, values[0])


def _scalar(pass_name: str, option: str, hint: Any, value: str) -> Any:
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        if value.lower() == "none":
            return None
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    try:
        if hint is bool:
            if value.lower() not in ("true", "false", "1", "0"):
                raise ValueError(value)
            return value.lower() in ("true", "1")
        return hint(value)
    except ValueError:
        raise CollageError(f"pass '{pass_name}': option '{option}' expects "
                           f"{getattr(hint, '__name__', hint)}, got '{value}'") from None
