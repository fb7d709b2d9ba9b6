"""A scenario's problems as one line each: :class:`ScenarioError` and the messages.

Every problem is reported as one line naming the full dotted key and the bad value
(``cell.radius_m: must be > 0 (got -5.0)``), with the nearest valid key for a
misspelling (or the table that has the key); keys that moved between tables are
migrated with a note (:func:`migrate_table`). :func:`parse_scenario` validates a parsed
TOML document into a :class:`cosim.scenario.tables.Scenario`. Every case tried is in
``docs/faults.md``.
"""

from __future__ import annotations

import difflib
import re
import typing
from collections.abc import Sequence
from typing import Any

from pydantic import (
    BaseModel,
    ValidationError,
)

from cosim.limits import cut_line, echo
from cosim.scenario.tables import RuntimeConfig, Scenario

# --------------------------------------------------------------------------- errors


class ScenarioError(Exception):
    """A scenario that cannot be used: one line per problem, ``field.path: what (got value)``.

    Attributes
    ----------
    problems : list[str]
        One message per problem, each starting with the dotted field path.
    source : str or None
        The file (or ``"--set"``) the problems come from.
    """

    def __init__(self, problems: Sequence[str], source: str | None = None):
        self.problems = [cut_line(p) for p in problems]  # a value quoted in full, cut
        self.source = source
        super().__init__(self._headline() + "".join(f"\n  {p}" for p in self.problems))

    def _headline(self) -> str:
        return f"invalid scenario {self.source}:" if self.source else "invalid scenario:"


class ScenarioTooLarge(ScenarioError):
    """A valid scenario whose memory estimate exceeds the memory available (:func:`check_resources`).

    Attributes
    ----------
    estimate_bytes, available_bytes : int
        :func:`memory_estimate_bytes` and :func:`available_memory_bytes` at the check.
    """

    def __init__(self, problems: Sequence[str], source: str | None = None, *,
                 estimate_bytes: int, available_bytes: int):
        self.estimate_bytes = int(estimate_bytes)
        self.available_bytes = int(available_bytes)
        super().__init__(problems, source)

    def _headline(self) -> str:
        return f"scenario {self.source} does not fit in memory:" if self.source else \
            "scenario does not fit in memory:"


def _sub_model(model: type[BaseModel], key: str) -> type[BaseModel] | None:
    field = model.model_fields.get(key)
    if field is None:
        return None
    annotation = field.annotation
    if not isinstance(annotation, type):  # an optional table, ``PrivacyConfig | None``
        annotation = next((a for a in typing.get_args(annotation) if a is not type(None)), None)
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def _model_at(path: Sequence[str]) -> type[BaseModel] | None:
    """The section model at a dotted path (``()`` -> Scenario), or None."""
    model: type[BaseModel] | None = Scenario
    for key in path:
        model = _sub_model(model, key) if model is not None else None
    return model


def _is_key(path: Sequence[str]) -> bool:
    """Whether a dotted path names a key of the scenario (``["cell", "radius_m"]``)."""
    parent = _model_at(path[:-1])
    return bool(path) and parent is not None and path[-1] in parent.model_fields


def _key_paths(model: type[BaseModel], prefix: str = "") -> list[str]:
    """Every dotted key under ``model`` (``"cell.radius_m"``, ...), tables included."""
    paths = []
    for key in model.model_fields:
        paths.append(prefix + key)
        sub = _sub_model(model, key)
        if sub is not None:
            paths.extend(_key_paths(sub, f"{prefix}{key}."))
    return paths


def _did_you_mean(model: type[BaseModel], key: str) -> str:
    """The nearest key of ``model``'s table, else the same key in another table
    (``[power] radius_m`` -> ``'cell.radius_m'``), then the table's valid keys."""
    valid = list(model.model_fields)
    close = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
    elsewhere = [path for path in _key_paths(Scenario) if path.rsplit(".", 1)[-1] == key]
    hint = (f"did you mean {close[0]!r}? " if close
            else f"did you mean {' or '.join(map(repr, elsewhere))}? " if elsewhere else "")
    return f"{hint}valid keys: {', '.join(valid)}"


_TYPE_WORDS = {
    "float_type": "must be a number", "int_type": "must be an integer",
    "string_type": "must be a string", "bool_type": "must be true or false",
    "tuple_type": "must be an array", "model_type": "must be a table",
    "dict_type": "must be a table", "int_from_float": "must be an integer",
    "finite_number": "must be a finite number, not nan or inf",
}
_BOUND_WORDS = {"greater_than": ("gt", ">"), "greater_than_equal": ("ge", ">="),
                "less_than": ("lt", "<"), "less_than_equal": ("le", "<=")}


MOVED_KEYS = {
    "algorithm.weight_sampler": (
        "moved to the [runtime] table: \"fused\" is the default runtime.backend = \"auto\", "
        "\"tensorflow\" is runtime.backend = \"tensorflow\" with runtime.noise = \"tensorflow\""
    ),
}
"""Keys of earlier versions, with where they went (the error names the new keys)."""


def migrate_table(table: dict[str, Any]) -> dict[str, Any]:
    """A scenario table written by an earlier version, in today's keys (for traces: a
    run started before ``[runtime]`` existed resumes). ``algorithm.weight_sampler`` becomes
    ``[runtime]``'s backend and noise; a missing ``[runtime]`` table gets its defaults.
    Returns a new dict; scenario *files* are not migrated (:data:`MOVED_KEYS` errors)."""
    table = {key: dict(value) if isinstance(value, dict) else value for key, value in table.items()}
    if "runtime" not in table:
        table["runtime"] = RuntimeConfig().model_dump()
    sampler = table.get("algorithm", {}).pop("weight_sampler", None)
    if sampler == "tensorflow":
        table["runtime"] |= {"backend": "tensorflow", "noise": "tensorflow"}
    return table


def _describe_error(error: dict[str, Any]) -> str:
    loc = [str(part) for part in error["loc"]]
    kind, ctx, value = error["type"], error.get("ctx") or {}, error.get("input")
    got = f" (got {echo(value)})"
    if kind == "extra_forbidden":
        if ".".join(loc) in MOVED_KEYS:
            return f"{'.'.join(loc)}: {MOVED_KEYS['.'.join(loc)]}"
        section = _model_at(loc[:-1])
        hint = f"; {_did_you_mean(section, loc[-1])}" if section is not None else ""
        return f"{'.'.join(loc)}: unknown key{hint}"
    if kind == "missing":
        return f"{'.'.join(loc)}: required key is missing"
    if kind == "literal_error":
        message = f"must be one of {ctx.get('expected')}"
    elif kind in _BOUND_WORDS:
        name, op = _BOUND_WORDS[kind]
        bound = ctx.get(name)
        message = f"must be {op} {bound:g}" if isinstance(bound, (int, float)) else f"must be {op} {bound}"
    elif kind in _TYPE_WORDS:
        message = _TYPE_WORDS[kind]
    elif kind == "value_error":
        message = str(ctx.get("error", error["msg"]))
        # a cross-field check's "key: ..." or "table.key: ..." (relative to the section at loc)
        match = re.match(r"^(\w+(?:\.\w+)*): (.*)$", message, flags=re.S)
        if match and _is_key([*loc, *match.group(1).split(".")]):
            return ".".join([*loc, match.group(1)]) + ": " + match.group(2)
    elif kind in ("too_long", "too_short"):
        limit = ctx.get("max_length") if kind == "too_long" else ctx.get("min_length")
        message = f"must have {'at most' if kind == 'too_long' else 'at least'} {limit} items"
    elif kind == "string_pattern_mismatch":
        message = "may only contain letters, digits, '.', '_' and '-'"
    else:
        message = error["msg"][0].lower() + error["msg"][1:]
    # items of arrays: positions_m.0.1 -> positions_m[0][1]
    path = loc[0] if loc else "<root>"
    for part in loc[1:]:
        path += f"[{part}]" if part.isdigit() else f".{part}"
    return f"{path}: {message}{'' if '(got' in message else got}"


def _integer_literal(annotation: Any) -> tuple | None:
    """The values of a ``Literal`` of integers in ``annotation`` (``Literal[1, 2] | None``)."""
    if typing.get_origin(annotation) is typing.Literal:
        values = typing.get_args(annotation)
        return values if all(type(v) is int for v in values) else None
    return next(filter(None, map(_integer_literal, typing.get_args(annotation))), None)


def _booleans_for_integers(data: Any, model: type[BaseModel] | None = Scenario,
                           prefix: str = "") -> list[str]:
    """One line per boolean given to a key whose type is a ``Literal`` of integers
    (``uplink.bits_per_value``): strict mode refuses ``true`` for an ``int`` key, but a
    literal compares ``True == 1`` and read ``true`` as 1 bit."""
    problems: list[str] = []
    for key, value in (data.items() if isinstance(data, dict) and model is not None else ()):
        field = model.model_fields.get(key) if isinstance(key, str) else None
        if field is not None and isinstance(value, dict):
            problems += _booleans_for_integers(value, _sub_model(model, key), f"{prefix}{key}.")
        elif field is not None and isinstance(value, bool) and (values := _integer_literal(field.annotation)):
            listed = ", ".join(map(repr, values[:-1])) + f" or {values[-1]!r}"
            problems.append(f"{prefix}{key}: must be one of {listed} (got {value})")
    return problems


def parse_scenario(data: dict[str, Any], source: str | None = None) -> Scenario:
    """Validate a parsed TOML document into a :class:`Scenario` (ScenarioError on failure)."""
    booleans = _booleans_for_integers(data)
    if booleans:
        raise ScenarioError(booleans, source)
    try:
        return Scenario.model_validate(data)
    except ValidationError as exc:
        raise ScenarioError([_describe_error(e) for e in exc.errors(include_url=False)], source) from None
