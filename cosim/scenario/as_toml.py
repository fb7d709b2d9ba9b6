"""A resolved scenario written back as TOML: :func:`scenario_to_toml` (every key, defaults
included, loads back equal) and :func:`toml_value` (one value on one line, as ``--set``
takes it). tomli-w and pydantic only."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import tomli_w
from pydantic import BaseModel


def _plain(value: Any) -> Any:
    """A Python value as TOML would give it: NumPy scalars and arrays and tuples become
    Python numbers and lists (recursively, tables too); anything else is left to the
    validation (which refuses what a TOML file could not hold)."""
    if hasattr(value, "tolist") and type(value).__module__ == "numpy":
        return value.tolist()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    return value


_TOML_SCALARS = (bool, int, float, str)


def _toml_key(key: Any) -> str:
    """A table's key as TOML writes it: bare when it may be, else a quoted string."""
    if not isinstance(key, str):
        raise TypeError(f"cannot write the key {key!r} as TOML")
    return key if _BARE_KEY.fullmatch(key) else toml_value(key)


_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def toml_value(value: Any) -> str:
    """The TOML text of one value on one line, as ``--set key=value`` takes it: a bool,
    int, float (nan, inf and -inf as such), str, or a tuple, list or table (an inline
    ``{rho = 1.0, nu = 0.5}``) of those, nested too. ``tomllib.loads(f"v = {text}")["v"]``
    gives the value back (a tuple as a list). A TypeError for anything else.

    tomli-w writes every scalar; an array is joined here, because tomli-w always breaks
    a non-empty array over several lines and a ``--set`` item must be one line.
    """
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{_toml_key(k)} = {toml_value(v)}" for k, v in value.items()) + "}"
    if not isinstance(value, _TOML_SCALARS):
        raise TypeError(f"cannot write {value!r} as TOML")
    return tomli_w.dumps({"v": value}).removeprefix("v = ").removesuffix("\n")


def _toml_table(model: BaseModel) -> dict[str, Any]:
    """``model``'s keys in field order as plain data: sub-models as nested tables,
    tuples as lists, None values left out."""
    table: dict[str, Any] = {}
    for key in type(model).model_fields:
        value = getattr(model, key)
        if isinstance(value, BaseModel):
            table[key] = _toml_table(value)
        elif value is not None:
            table[key] = _plain(value)
    return table


def scenario_to_toml(scenario: BaseModel) -> str:
    """Every key of ``scenario`` (defaults resolved, None omitted) as TOML; loads back equal.

    Written by tomli-w: a table's scalars before its sub-tables, each in field order
    (arrays over several lines, one element a line)."""
    return tomli_w.dumps(_toml_table(scenario))
