"""docs/scenarios.md against the schema and the shipped files: every key of every
table is documented once with the model's default, and every value the "Shipped
scenarios" table quotes is the file's."""

from __future__ import annotations

import re
import tomllib
import typing
from pathlib import Path

import pytest

from cosim.scenario import tables as schema

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "scenarios.md"
SECTION = re.compile(r"^## (?:Top level|`\[(\w+)\]`)")


def _cells(line: str) -> list[str]:
    """The cells of a Markdown table row (``\\|`` inside a cell is not a separator)."""
    return [cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip())[1:-1]]


def documented() -> dict[str, dict[str, str]]:
    """table ("" for the top level, "algorithm.fedprox" for a sub-table) -> key ->
    the default cell, from every ``| key | type | default | ...`` table."""
    tables: dict[str, dict[str, str]] = {}
    current = None
    for line in DOC.read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            found = SECTION.match(line)
            current = (found.group(1) or "") if found else None
            continue
        if current is None or not line.startswith("| `"):
            continue
        cells = _cells(line)
        if cells[0].startswith("`[") and len(cells) > 4:  # | `[algorithm.x]` | `key` | type | default |
            table, key, default = cells[0].strip("`[]"), cells[1].strip("`"), cells[3]
        else:
            table, key, default = current, cells[0].strip("`"), cells[2]
        assert key not in tables.setdefault(table, {}), f"{table}.{key} documented twice"
        tables[table][key] = default
    return tables


def _table(annotation):
    """The table model of a field's annotation (``PrivacyConfig | None`` too), or None."""
    for candidate in (annotation, *typing.get_args(annotation)):
        if isinstance(candidate, type) and issubclass(candidate, schema._Section):
            return candidate
    return None


def _model_of(table: str):
    model = schema.Scenario
    for part in filter(None, table.split(".")):
        model = _table(model.model_fields[part].annotation)
    return model


def _own_keys(model) -> set[str]:
    """The fields of a table that are not tables themselves."""
    return {name for name, field in model.model_fields.items() if _table(field.annotation) is None}


def _literal(cell: str):
    """A documented default as a value: none -> None, else its backticked TOML value."""
    if cell == "none":
        return None
    found = re.fullmatch(r"`(.+)`", cell)
    assert found, f"default cell {cell!r} is neither `value` nor none"
    return tomllib.loads(f"v = {found.group(1)}")["v"]


def test_every_key_is_documented_with_its_default():
    tables = documented()
    expected = {""} | {name for name, field in schema.Scenario.model_fields.items()
                       if _table(field.annotation) is not None}
    expected |= {f"algorithm.{name}" for name, field in schema.AlgorithmConfig.model_fields.items()
                 if isinstance(field.annotation, type) and issubclass(field.annotation, schema._Section)}
    assert set(tables) == expected
    for table, keys in tables.items():
        model = _model_of(table)
        assert set(keys) == _own_keys(model), table
        for key, cell in keys.items():
            default = model.model_fields[key].default
            if isinstance(default, tuple):
                default = list(default)
            assert _literal(cell) == default, f"{table}.{key}: documented {cell}, model {default!r}"


SHIPPED_ROW = re.compile(r"^\| `(\w+)\.toml` \|")
QUOTED = re.compile(r"`([a-z_]+(?:\.[a-z_]+)*) = ([^`]+)`")


def _shipped_quotes() -> list[tuple[str, str, str]]:
    quotes = []
    for line in DOC.read_text(encoding="utf-8").splitlines():
        found = SHIPPED_ROW.match(line)
        if found:
            quotes += [(found.group(1), key, value) for key, value in QUOTED.findall(line)]
    return quotes


def test_the_shipped_table_quotes_the_files():
    quotes = _shipped_quotes()
    assert {name for name, _, _ in quotes} >= {"quickstart", "paper_mnist", "paper_cifar100",
                                               "imperfect_csi"}
    for name, key, value in quotes:
        data = tomllib.loads((ROOT / "scenarios" / f"{name}.toml").read_text())
        for part in key.split("."):
            assert part in data, f"{name}.toml has no {key} (docs/scenarios.md quotes {value})"
            data = data[part]
        assert data == tomllib.loads(f"v = {value}")["v"], f"{name}.toml: {key}"


@pytest.mark.parametrize("name", sorted(p.stem for p in (ROOT / "scenarios").glob("*.toml")))
def test_every_shipped_scenario_has_a_row(name):
    assert any(line.startswith(f"| `{name}.toml` |")
               for line in DOC.read_text(encoding="utf-8").splitlines())
