"""What ``--resume`` checks before it writes to a trace: that the file can be continued
(closed cleanly, its checksums whole, complete, this schema, not compacted), that the
scenario it is given is the one the trace stores (one line per changed key), and that
``rounds`` only grows."""

from __future__ import annotations

import dataclasses
import difflib
import tomllib
from pathlib import Path

import h5py

from cosim.limits import MAX_ROUNDS, echo, toml_loads
from cosim.scenario import ScenarioError, migrate_table, parse_scenario, toml_value
from cosim.trace.file_format import (
    CHECKPOINT_DROPPED,
    SCHEMA_VERSION,
    TraceError,
    closed_file_problems,
    damaged_datasets,
    stored_number_problems,
)

__all__ = ["_check_resumable", "_check_rounds_grow", "_check_same_scenario", "_comparable",
           "_key_lines"]


def _comparable(scenario_text: str, *, without_rounds: bool = False) -> dict:
    """The scenario as compared on ``--resume``: as this version reads it, in today's keys
    (a trace from before ``[runtime]`` resumes, :func:`cosim.scenario.migrate_table`),
    with every key, so a key added since the trace was written takes its default on
    both sides (``algorithm.fedsmoo.max_grad_norm``, the clip the code applied before);
    ``[runtime]`` as it resolves (an explicit ``backend = "numba"`` is the run
    ``"auto"`` made); without ``trace.path`` (where the trace lies does not change its
    result, so a moved trace or study directory resumes), and without ``rounds`` when it
    may grow."""
    table = migrate_table(toml_loads(scenario_text))
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
    old, new = toml_loads(stored).get("rounds"), toml_loads(scenario_text).get("rounds")
    if isinstance(old, int) and isinstance(new, int) and new < old:
        raise TraceError(
            f"cannot resume {path}: rounds = {new} is fewer than the trace's rounds = {old}; "
            "--resume may raise rounds, not lower it"
        )


def _check_same_scenario(path: Path, stored: str, scenario_text: str, *,
                         rounds_may_grow: bool) -> None:
    """Raise :class:`TraceError` when ``scenario_text`` is not the ``stored`` scenario of
    the trace at ``path`` (with ``rounds_may_grow``, up to a ``rounds`` no smaller):
    the changed keys, one ``-`` / ``+`` line each, at most ten."""
    if rounds_may_grow:
        _check_rounds_grow(path, stored, scenario_text)
    old = _comparable(stored, without_rounds=rounds_may_grow)
    new = _comparable(scenario_text, without_rounds=rounds_may_grow)
    if old != new:
        diff = list(difflib.unified_diff(_key_lines(old), _key_lines(new),
                                         "trace", "now", n=0, lineterm=""))
        diff = [line for line in diff[2:] if not line.startswith("@@")][:10]
        raise TraceError(f"cannot resume {path}: the scenario differs from the one in the trace "
                         "(use --overwrite to start again):\n  " + "\n  ".join(diff))


def _check_resumable(file: h5py.File, path: Path, scenario_text: str | None,
                     rounds_may_grow: bool) -> str:
    """Refuse, reading only, a trace that cannot be continued: closed with a fault,
    a dataset failing its checksum, incomplete, of another schema version, compacted
    (its model state dropped), or of another scenario than ``scenario_text``
    (:meth:`cosim.trace.writer.TraceWriter.resume`); raises :class:`TraceError` naming
    the fault, else returns the stored scenario text."""
    problems = closed_file_problems(file)  # before anything is written to it
    if problems:
        raise TraceError(f"cannot resume {path}: refusing it: " + "; ".join(problems[:3]))
    damaged = damaged_datasets(file)
    if damaged:
        raise TraceError(f"cannot resume {path}: dataset {', '.join(damaged[:3])} "
                         "damaged (its stored data fail their checksum); nothing was "
                         "written to the file (use --overwrite to start again)")
    missing = [name for name in ("scenario", "completed_rounds") if name not in file.attrs]
    missing += [f"/{name}" for name in ("rounds", "devices") if name not in file]
    if "schema_version" in file.attrs and missing:
        raise TraceError(f"cannot resume {path}: an incomplete trace (no {', '.join(missing)})")
    problems = stored_number_problems(file)
    if problems:
        raise TraceError(f"cannot resume {path}: refusing it: " + "; ".join(problems[:3])
                         + "; nothing was written to the file (use --overwrite to start again)")
    version = file.attrs.get("schema_version")
    if version != SCHEMA_VERSION:
        raise TraceError(f"{path}: trace schema version {version}, this program writes {SCHEMA_VERSION}")
    if file.attrs.get(CHECKPOINT_DROPPED):
        raise TraceError(
            f"cannot resume {path}: its model state was dropped after round "
            f"{int(file.attrs['completed_rounds'])} (`cosim study compact`); it can be read "
            "and reported, not continued: delete it to run it again in a study, or use "
            "`cosim run --overwrite`")
    stored = str(file.attrs["scenario"])
    try:
        rounds = toml_loads(stored).get("rounds")
    except tomllib.TOMLDecodeError as exc:
        raise TraceError(f"cannot resume {path}: its stored scenario (root attribute "
                         f"scenario) is not a scenario's TOML ({exc}); nothing was written to "
                         "the file (use --overwrite to start again)") from None
    if not isinstance(rounds, int) or isinstance(rounds, bool) or not 0 < rounds <= MAX_ROUNDS:
        raise TraceError(f"cannot resume {path}: its stored scenario's rounds = {echo(rounds)} "
                         f"is not a round count (1 to {MAX_ROUNDS:,}); nothing was written to the "
                         "file (use --overwrite to start again)")
    if scenario_text is not None:
        _check_same_scenario(path, stored, scenario_text, rounds_may_grow=rounds_may_grow)
    return stored
