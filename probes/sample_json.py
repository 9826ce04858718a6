"""The node sample's JSON both ways: `plain()` writes a probe dataclass as JSON data, `read()` reads
it back and checks it the way engine_hooks.records.snapshot reads the engine's, raising
NodeSampleError whose message starts with the field (`gpus[0].pcie.tx_util_ratio: ...`).

Each field is read by its annotation. Keys it does not know are ignored (new ones may come under the
same version); a field with a default reads null or absent as that default. Values are checked,
never converted: what is read writes back as it was written, byte for byte.
"""

from __future__ import annotations

import math
import types
from collections.abc import Callable
from dataclasses import MISSING, fields
from functools import cache
from typing import Any, Union, get_args, get_origin, get_type_hints

_SCALARS = (str, int, float, bool, type(None))

Reader = Callable[[Any, str], Any]


class NodeSampleError(ValueError):
    """A node sample that cannot be read; the message starts with the field that is not as
    written."""


def plain(value: Any) -> Any:
    """dataclasses.asdict without its deep copies (our dataclasses hold plain values): ~10x
    cheaper. A value with its own `to_dict` (the topology, made once and shared) writes itself."""
    kind = type(value)
    if kind in _SCALARS:
        return value
    if kind is list:
        return [plain(v) for v in value]
    if kind is dict:
        return {k: plain(v) for k, v in value.items()}
    how = _HOW.get(kind) or _HOW.setdefault(kind, _how(kind))
    if how == "own":
        return value.to_dict()
    if how == "attributes":     # a probe dataclass's attributes are its fields, in order
        return {k: plain(v) for k, v in vars(value).items()}
    return plain_fields(value) if how == "fields" else value


_HOW: dict[type, str] = {}


def _how(kind: type) -> str:
    """How `plain` writes a value of this type (asked once a type: a DGX sample holds ~100 a
    GPU)."""
    if hasattr(kind, "to_dict"):
        return "own"
    if not hasattr(kind, "__dataclass_fields__"):
        return "other"
    return "fields" if hasattr(kind, "__slots__") else "attributes"


def plain_fields(value: Any) -> dict[str, Any]:
    """A dataclass's fields as JSON data, in declaration order (what a `to_dict` of its own
    builds on)."""
    return {k: plain(getattr(value, k)) for k in type(value).__dataclass_fields__}


def read(cls: type, data: Any, where: str = "") -> Any:
    """An instance of the dataclass `cls` from its JSON object, every field checked."""
    return _dataclass_reader(cls)(data, where)


# --- one reader per annotation --------------------------------------------------------------------
def _shown(value: Any) -> str:
    """A value as an error message quotes it: JSON's null, and short."""
    text = "null" if value is None else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _fail(where: str, what: str, value: Any, optional: bool) -> NodeSampleError:
    return NodeSampleError(f"{where}: must be {what}{' or null' if optional else ''}, got {_shown(value)}")


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _scalar(test: Callable[[Any], bool], what: str, optional: bool) -> Reader:
    def read_scalar(value, where):
        if (value is None and optional) or test(value):
            return value
        raise _fail(where, what, value, optional)
    return read_scalar


def _container(kind: type, what: str, optional: bool, build: Callable[[Any, str], Any]) -> Reader:
    """A reader of a JSON list or object: null where optional, the wrong kind refused, else
    `build` on it."""
    def read_container(value, where):
        if value is None and optional:
            return None
        if not isinstance(value, kind):
            raise _fail(where, what, value, optional)
        return build(value, where)
    return read_container


def _list(item: Reader, optional: bool) -> Reader:
    return _container(list, "a list", optional,
                      lambda value, where: [item(v, f"{where}[{i}]") for i, v in enumerate(value)])


def _object(item: Reader, optional: bool) -> Reader:
    return _container(dict, "an object", optional,
                      lambda value, where: {k: item(v, f"{where}.{k}") for k, v in value.items()})


def _section(section: Reader, optional: bool) -> Reader:
    return _container(dict, "an object", optional, section)


def _any(value, _where):
    return value


def _reader(kind: Any, optional: bool = False) -> Reader:
    origin, args = get_origin(kind), get_args(kind)
    if origin in (Union, types.UnionType) and type(None) in args:
        (inner,) = (a for a in args if a is not type(None))
        return _reader(inner, True)
    if kind is Any:
        return _any
    if kind in (int, float):
        return _scalar(_is_number, "a finite number", optional)
    if kind is str:
        return _scalar(lambda v: isinstance(v, str), "a string", optional)
    if kind is bool:
        return _scalar(lambda v: isinstance(v, bool), "true or false", optional)
    if origin is list:
        return _list(_reader(args[0]), optional)
    if origin is dict:
        return _object(_reader(args[1]), optional)
    if hasattr(kind, "__dataclass_fields__"):
        return _section(_dataclass_reader(kind), optional)
    raise TypeError(f"no JSON reader for {kind!r}")


@cache
def _dataclass_reader(cls: type) -> Reader:
    hints = get_type_hints(cls)
    plan = []
    for f in fields(cls):
        has_default = f.default is not MISSING or f.default_factory is not MISSING
        # a field with a default reads null as the default: its message says "or null"
        plan.append((f.name, _reader(hints[f.name], has_default), has_default))

    def read_dataclass(value, where):
        if not isinstance(value, dict):
            raise NodeSampleError(f"{where or 'the sample'}: must be an object, got {_shown(value)}")
        at = f"{where}." if where else ""
        known = {}
        for name, read_field, has_default in plan:
            got = read_field(value.get(name), f"{at}{name}")
            if got is not None or not has_default:
                known[name] = got
        return cls(**known)
    return read_dataclass
