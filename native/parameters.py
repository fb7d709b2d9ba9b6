"""The base of every component's parameter model, and the registries' entries.

A component (an algorithm, a CSI model, a power control, ...) declares its parameters
once, as a :class:`Parameters` model: their types, bounds, defaults and meaning. The
scenario builds its tables from these models (``cosim/scenario/tables.py``) and the
component's constructor validates its arguments with the same model
(:meth:`Parameters.check`), so every bound is written in one place. A registry maps a
name (``csi.model = "gaussian"``) to a :class:`Variant`: the model and the
implementation, imported only when it is built (the models import no TensorFlow, so
``cosim validate`` starts without it).

pydantic only: no NumPy, no TensorFlow.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationError


class Parameters(BaseModel):
    """Base of the parameter models: frozen, no unknown keys, no NaN or infinity."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)

    @classmethod
    def check(cls, **values: Any) -> Parameters:
        """The validated parameters (numbers of any numeric type accepted); ValueError
        naming the first bad key, its rule and the value otherwise."""
        try:
            return cls.model_validate(values, strict=False)
        except ValidationError as error:
            raise ValueError(first_problem(error)) from None

    @classmethod
    def required_keys(cls) -> tuple[str, ...]:
        """The keys without a default."""
        return tuple(k for k, f in cls.model_fields.items() if f.is_required())


def first_problem(error: ValidationError) -> str:
    """``"key: rule (got value)"`` of a validation error's first problem."""
    first = error.errors()[0]
    key = ".".join(str(part) for part in first["loc"])
    message = first["msg"].replace("Value error, ", "")
    if first["type"] == "value_error" and not key:  # a model validator's "key: rule"
        return message
    return f"{key}: {message} (got {first.get('input')!r})"


def defaults(parameters: type[BaseModel]) -> dict[str, Any]:
    """``{key: default}`` of a model's keys that have one (for constructors' signatures)."""
    return {key: f.default for key, f in parameters.model_fields.items() if not f.is_required()}


def load(path: str) -> Any:
    """The object named ``"module:name"`` (imported now)."""
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


def deep_tuple(value: Any) -> Any:
    """TOML arrays (lists) -> tuples, recursively, so frozen models stay immutable."""
    return tuple(deep_tuple(v) for v in value) if isinstance(value, list) else value


def positive_int_or_keyword(keyword: str):
    """A field that is ``keyword`` or a positive integer (a bool is not one)."""

    def check(value: Any) -> Any:
        if (isinstance(value, str) and value == keyword) or (
                isinstance(value, int) and not isinstance(value, bool) and value >= 1):
            return value
        raise ValueError(f"must be {keyword!r} or a positive integer")

    return BeforeValidator(check)


def positive_or_keyword(keyword: str, *more: str):
    """A field that is ``keyword`` (or one of ``more``) or a positive finite number (ints
    become floats)."""
    keywords = (keyword, *more)
    named = ", ".join(repr(k) for k in keywords)

    def check(value: Any) -> Any:
        if isinstance(value, str) and value in keywords:
            return value
        if (isinstance(value, (int, float)) and not isinstance(value, bool)
                and math.isfinite(value) and value > 0):
            return float(value)
        raise ValueError(f"must be {named} or a positive finite number")

    return BeforeValidator(check)


@dataclass(frozen=True)
class Variant:
    """One registered component: its ``parameters`` model and its ``implementation``
    (``"module:callable"``, or the callable itself for one defined where a module path
    cannot name it, e.g. in a notebook), called with the parameters as keyword arguments (each
    renamed by ``arguments`` where the constructor calls it otherwise, left out where
    ``arguments`` maps it to None: a key used by another part) and with those
    of the caller's other arguments it names in ``extras`` (objects, not parameters:
    a channel model, a pilot spacing). ``label`` is its display name in figures and
    reports (``cosim/display_names.py`` reads it; empty: the registered name itself)."""

    parameters: type[Parameters]
    implementation: str | Callable[..., Any]
    arguments: Mapping[str, str | None] = field(default_factory=dict)
    extras: tuple[str, ...] = ()
    label: str = ""

    def target(self) -> Any:
        """The implementation (imported now when named by a string)."""
        return load(self.implementation) if isinstance(self.implementation, str) else self.implementation

    def build(self, values: Mapping[str, Any], **extra: Any) -> Any:
        """The component for ``values`` (the model's keys; other keys are ignored, so a
        table that also holds other variants' keys can be passed whole)."""
        own = {key: value for key, value in values.items() if key in self.parameters.model_fields}
        checked = self.parameters.check(**own)
        kwargs = {self.arguments.get(key, key): value for key, value in checked
                  if self.arguments.get(key, key) is not None}
        return self.target()(**kwargs, **{key: extra[key] for key in self.extras if key in extra})


@dataclass(frozen=True)
class Choice:
    """One registered choice that has no parameters of its own (a receive combiner, a
    scheduling policy): its display name ``label`` (what figures and reports show) and,
    where the choice is a function, its ``implementation`` (``"module:callable"``,
    imported when :meth:`target` is called)."""

    label: str
    implementation: str | Callable[..., Any] | None = None
    facts: Mapping[str, Any] = field(default_factory=dict)
    """What the rest of the simulator asks of the choice without naming it (a combiner's
    ``gram_per_subcarrier``, a scheduling's ``every_device``), read by :meth:`fact`."""

    def fact(self, name: str, default: Any = False) -> Any:
        """The fact ``name`` of this choice (``default`` when it does not say)."""
        return self.facts.get(name, default)

    def target(self) -> Any:
        """The implementation (imported now when named by a string)."""
        if self.implementation is None:
            raise ValueError(f"the choice {self.label!r} names no implementation")
        return load(self.implementation) if isinstance(self.implementation, str) else self.implementation
