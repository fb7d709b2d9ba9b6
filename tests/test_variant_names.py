"""No module of ``cosim/`` branches on a variant's name: what it needs of a channel, CSI
model, power control, combiner, scheduling, uplink scheme, algorithm or architecture is
a fact of the variant's registry entry (``phy/parameters.py``, ``learning/catalog.py``,
``learning/models/shapes.py``), so a new variant is registered in one place and cosim
iterates the registries (docs/architecture.md, "Where does my change go")."""

from __future__ import annotations

import ast
from pathlib import Path

from learning.catalog import CATALOG
from learning.models.shapes import ARCHITECTURE_NAMES
from phy.parameters import (
    CELL_LAYOUTS,
    CHANNEL_MODELS,
    COMBINERS,
    CSI_MODELS,
    POWER_CONTROLS,
    SCHEDULING,
    UPLINK_SCHEMES,
)

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = {name for registry in (CELL_LAYOUTS, CHANNEL_MODELS, COMBINERS, CSI_MODELS,
                                  POWER_CONTROLS, SCHEDULING, UPLINK_SCHEMES, CATALOG)
            for name in registry} | set(ARCHITECTURE_NAMES)


def _named_constants() -> set[str]:
    """Module-level names of ``cosim/``, ``phy/``, ``learning/`` and ``native/`` bound to a
    variant's name (``RAY_TRACED = "ray_traced"``): comparing with one is comparing with
    the name."""
    names = set()
    for package in ("cosim", "phy", "learning", "native"):
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.parse(path.read_text(encoding="utf-8")).body:
                if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
                        and node.value.value in VARIANTS):
                    names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return names


def _names_compared(source: str, path: str, constants: frozenset[str] = frozenset()) -> list[str]:
    """``path:line: expression`` of every comparison (``==``, ``!=``, ``in``, ``not in``)
    or ``match`` case in ``source`` against a string that is a variant's name, or against
    one of ``constants`` (names bound to one)."""
    found = []
    for node in ast.walk(ast.parse(source, path)):
        if isinstance(node, ast.Compare):
            parts = [node.left, *node.comparators]
        elif isinstance(node, ast.match_case):
            parts = [node.pattern]
        else:
            continue
        named = {c.value for part in parts for c in ast.walk(part)
                 if isinstance(c, ast.Constant) and isinstance(c.value, str)} & VARIANTS
        named |= {c.id if isinstance(c, ast.Name) else c.attr for part in parts for c in ast.walk(part)
                  if isinstance(c, ast.Name | ast.Attribute)} & constants
        if named:
            found.append(f"{path}:{node.lineno if hasattr(node, 'lineno') else node.pattern.lineno}: "
                         f"{sorted(named)}")
    return found


def test_no_cosim_module_branches_on_a_variant_name():
    constants = frozenset(_named_constants())
    found = [hit for path in sorted((ROOT / "cosim").rglob("*.py"))
             for hit in _names_compared(path.read_text(encoding="utf-8"),
                                        path.relative_to(ROOT).as_posix(), constants)]
    assert found == [], ("cosim branches on variant names (make it a fact of the registry "
                         f"entry): {found}")


def test_the_check_sees_a_comparison_a_membership_and_a_match():
    source = ('if scheme == "analog": pass\nif model in ("tdl", "x"): pass\n'
              'match control:\n    case "ideal": pass\nif name == "analogue": pass\n')
    assert _names_compared(source, "m.py") == ["m.py:1: ['analog']", "m.py:2: ['tdl']",
                                               "m.py:4: ['ideal']"]
    assert _names_compared("if model != scene.TRACED: pass\n", "m.py",
                           frozenset({"TRACED"})) == ["m.py:1: ['TRACED']"]
