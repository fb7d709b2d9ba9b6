"""How ``--resume`` compares the scenario it is given with the one a trace stores (one
line per changed key), and checks that ``rounds`` only grows."""

from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path

from cosim.scenario import ScenarioError, migrate_table, parse_scenario, toml_value
from cosim.trace.file_format import TraceError

__all__ = ["_check_rounds_grow", "_comparable", "_key_lines"]


def _comparable(scenario_text: str, *, without_rounds: bool = False) -> dict:
    """The scenario as compared on ``--resume``: as this version reads it, in today's keys
    (a trace from before ``[runtime]`` resumes, :func:`cosim.scenario.migrate_table`),
    with every key, so a key added since the trace was written takes its default on
    both sides (``algorithm.fedsmoo.max_grad_norm``, the clip the code applied before);
    ``[runtime]`` as it resolves (an explicit ``backend = "numba"`` is the run
    ``"auto"`` made); without ``trace.path`` (where the trace lies does not change its
    result, so a moved trace or study directory resumes), and without ``rounds`` when it
    may grow."""
    table = migrate_table(tomllib.loads(scenario_text))
    try:
        scenario = parse_scenario(table)
        table = tomllib.loads(scenario.to_toml())
        table["runtime"] = dataclasses.asdict(scenario.resolved_runtime())
    except ScenarioError:
        pass  # compared as written (such a trace cannot be resumed by a valid scenario)
    table.get("trace", {}).pop("path", None)
    if without_rounds:
        table.pop("rounds", None)
    return table


def _key_lines(table: dict) -> list[str]:
    """``dotted.key = value`` per key of a scenario table (one line each, arrays
    included): what a resume's mismatch message diffs, so every changed line names its
    key."""
    lines: list[str] = []

    def walk(table: dict, prefix: str) -> None:
        for key, value in table.items():
            if isinstance(value, dict):
                walk(value, f"{prefix}{key}.")
            elif value is not None:
                lines.append(f"{prefix}{key} = {toml_value(value)}")

    walk(table, "")
    return lines


def _check_rounds_grow(path: Path, stored: str, scenario_text: str) -> None:
    old, new = tomllib.loads(stored).get("rounds"), tomllib.loads(scenario_text).get("rounds")
    if old is not None and new is not None and new < old:
        raise TraceError(
            f"cannot resume {path}: rounds = {new} is fewer than the trace's rounds = {old}; "
            "--resume may raise rounds, not lower it"
        )
