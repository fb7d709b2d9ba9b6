"""The scenario tables' building blocks: the frozen, strict base of every table
(:class:`_Section`), the one-line cross-key check (:func:`_require`), and
:func:`variant_table`, which makes a table whose key picks a variant of a registry
(``[cell]``, ``[channel]``, ``[csi]``, ``[power]``, ``[uplink]``) with that variant's
keys and rules (:mod:`cosim.scenario.tables` declares the tables with them).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, create_model, model_validator
from pydantic.fields import FieldInfo
from pydantic_core import PydanticCustomError

from native.parameters import Variant


def _bool_or_keyword(keyword: str):
    def check(value: Any) -> Any:
        if value == keyword or isinstance(value, bool):
            return value
        raise ValueError(f"must be {keyword!r}, true or false")

    return BeforeValidator(check)


class _Section(BaseModel):
    # allow_inf_nan=False: every float key (arrays of floats included) refuses nan and
    # +-inf, which TOML and --set both accept (``tx_power_dbm = nan``)
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


def _require(condition: bool, field: str, message: str) -> None:
    """Cross-field check; the ``field: `` prefix lets errors name the field path."""
    if not condition:
        raise ValueError(f"{field}: {message}")


class _VariantTable(_Section):
    """A table whose ``_key`` picks one variant of ``_registry`` (:func:`variant_table`)."""

    _registry: ClassVar[Mapping[str, Variant]] = {}
    _table: ClassVar[str] = ""
    _key: ClassVar[str] = ""

    @model_validator(mode="after")
    def _check_variant(self) -> _VariantTable:
        name = getattr(self, self._key)
        for key in self._registry[name].parameters.required_keys():
            _require(getattr(self, key) is not None, key,
                     f"required by {self._table}.{self._key} = {name!r}")
        try:  # the variant's own rules across its keys, named in full ("cell.radius_m")
            self._registry[name].parameters.check(**self.variant_values())
        except ValueError as error:
            key, _, rule = str(error).partition(": ")
            for other in self.variant_values():
                rule = re.sub(rf"(?<![\w.]){other}\b", f"{self._table}.{other}", rule)
            raise ValueError(f"{key}: {rule}") from None
        return self

    def variant_values(self) -> dict[str, Any]:
        """The chosen variant's keys and values (for :meth:`native.parameters.Variant.build`)."""
        keys = self._registry[getattr(self, self._key)].parameters.model_fields
        return {key: getattr(self, key) for key in keys}

    def variant_parameters(self) -> Any:
        """The chosen variant's parameters, checked (its model's instance: what the
        registry entry declares of it, e.g. a scheme's memory term)."""
        return self._registry[getattr(self, self._key)].parameters.check(**self.variant_values())


def _registered(registry: Mapping[str, Variant]):
    """A validator: the value must name a variant of ``registry`` as it is *now* (a
    variant registered after import, e.g. from a notebook, is accepted), else pydantic's
    own ``literal_error`` ("must be one of 'a', 'b' or 'c'")."""

    def check(value: Any) -> Any:
        if isinstance(value, str) and value in registry:
            return value
        names = [repr(name) for name in registry]
        expected = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]
        raise PydanticCustomError("literal_error", "Input should be {expected}", {"expected": expected})

    return check


def variant_table(registry: Mapping[str, Variant], *, table: str, key: str,
                  default: str) -> type[_VariantTable]:
    """The base model of a table whose ``key`` picks one of ``registry``'s variants
    (:mod:`phy.parameters`): ``key`` and every variant's keys, as the variant's model
    declares them (bounds, defaults). A key the chosen variant requires must be set
    (``"csi.nmse_db: required by csi.model = 'gaussian'"``); the other variants' keys
    are accepted and validated but not used, so one file can sweep ``key``. ``key`` is
    checked against the registry when a scenario is validated, so a variant added to it
    later (``phy.parameters.POWER_CONTROLS["mine"] = Variant(...)``) is a valid value;
    its keys must be among those the table had at import (a new variant brings none)."""
    fields: dict[str, Any] = {key: (Annotated[str, BeforeValidator(_registered(registry))], default)}
    for variant in registry.values():
        for name, info in variant.parameters.model_fields.items():
            if name in fields:
                continue
            if info.is_required():  # optional in the table; required by the variant
                fields[name] = (info.annotation | None, FieldInfo.merge_field_infos(info, default=None))
            else:
                fields[name] = (info.annotation, info)
    model = create_model(f"_{table.title()}Table", __base__=_VariantTable, **fields)
    model._registry, model._table, model._key = registry, table, key
    return model
