"""Bounds the scenario's schema, the study files and the trace's readers share (standard
library only)."""

from __future__ import annotations

import tomllib
from typing import Any

__all__ = ["MAX_ECHO_CHARS", "MAX_NESTING", "MAX_PROBLEM_CHARS", "MAX_ROUNDS", "NestingError",
           "cut_line", "echo", "nesting_depth", "toml_loads"]

MAX_ROUNDS = 10_000_000
"""The most rounds a scenario may ask for and a trace may claim (``completed_rounds``):
at the fastest round measured (about 0.05 s, the tiny test scenario) they would take
six days; more is a typing slip or a crafted file, refused before anything is
estimated or allocated."""

MAX_NESTING = 32
"""The deepest a scenario, a study file, a ``--set`` value or a trace's stored scenario
may nest arrays and tables (the top-level table counts 1: ``cell.positions_m =
[[1.0, 2.0]]`` is 4 deep, as deep as any shipped file). Deeper input is refused in one
line; an array nested 5,000 deep (issue 63, 2026-12-01) had Python's own recursion limit
end the parse with a ``RecursionError`` traceback."""

MAX_ECHO_CHARS = 200
"""The longest a value echoed in an error line is shown (:func:`echo`), as a study's
labels are bounded (``cosim.study.file.MAX_LABEL_CHARS``)."""

MAX_PROBLEM_CHARS = 1000
"""The longest one problem line of a scenario or study error may be; longer ones (a
message that quotes a value of its own) are cut, saying how long they were."""


class NestingError(tomllib.TOMLDecodeError):
    """TOML nested deeper than :data:`MAX_NESTING` (a :class:`tomllib.TOMLDecodeError`,
    so every reader that reports a syntax error reports it)."""


def echo(value: Any, limit: int = MAX_ECHO_CHARS) -> str:
    """``repr(value)``, cut after ``limit`` characters with its length said:
    ``'aaaa...'... (100,002 characters)``."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


def cut_line(text: str, limit: int = MAX_PROBLEM_CHARS) -> str:
    """``text`` cut after ``limit`` characters, with its length said."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters in all)"


def nesting_depth(value: Any) -> int:
    """How deep ``value`` nests lists, tuples and dicts (a scalar 0, ``[1]`` 1, ``{"a":
    [1]}`` 2), counted without recursion, so any depth is measured."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            item = list(item.values())
        elif not isinstance(item, (list, tuple)):
            deepest = max(deepest, depth)
            continue
        deepest = max(deepest, depth + 1)
        if depth + 1 > MAX_NESTING + 1:
            return depth + 1  # deeper than allowed: no need to walk the rest
        stack.extend((v, depth + 1) for v in item)
    return deepest


def toml_loads(text: str) -> dict[str, Any]:
    """``tomllib.loads(text)``, or :class:`NestingError` when its arrays and tables nest
    deeper than :data:`MAX_NESTING` (also when the parse itself recursed too deep)."""
    try:
        table = tomllib.loads(text)
    except RecursionError:
        table = None
    if table is None or nesting_depth(table) > MAX_NESTING:
        raise NestingError(f"arrays or tables nested more than {MAX_NESTING} deep (the most "
                           "a scenario or study may nest)")
    return table
