"""The study file: its keys, its points (the axes' product x the seeds, less what
``[only]`` leaves out) and their run names (every key in ``docs/studies.md``). A point
starts from the study's ``scenario``, or from its value of a ``scenario`` axis
(:data:`SCENARIO_AXIS`: several base scenarios, e.g. places to compare); ``[where]`` sets
keys at the points where an axis takes one value (a variant that needs another key with
it: the one-bit scheme and signSGD).

:func:`load_study` validates the file and every point (each axis combination x each
seed, loaded with :func:`cosim.scenario.load_scenario` and its overrides, and checked
with :func:`cosim.scenario.check_resources`) before anything runs; any problem is a
:class:`StudyError` (a :class:`cosim.scenario.ScenarioError`: ``cosim study`` exits 2)
naming the key and the value, and for a point its axis values and seed. Running a study
is :mod:`cosim.study`.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cosim.display_names import value_key
from cosim.scenario.load import (
    Scenario,
    ScenarioError,
    check_resources,
    load_scenario,
    read_toml,
    shipped_scenario_path,
    shipped_study_path,
    takes_a_table,
    toml_value,
)

__all__ = ["RUNS_DIR", "SCENARIO_AXIS", "STUDY_COPY", "RunPoint", "Study", "StudyError", "load_study",
           "run_name", "unswept"]


STUDY_COPY = "study.toml"
"""The study file's copy in the output directory (what ``cosim study report`` reads)."""
RUNS_DIR = "runs"
"""Traces go to ``DIR/runs/<run name>.h5``."""
SCENARIO_AXIS = "scenario"
"""The axis over base scenarios: ``[axes] scenario = ["quickstart", "places/umi.toml"]``.
Its values are scenario files or shipped names (each resolved like the top-level
``scenario``), not a scenario key: a point's base is its value, ``[set]`` and the other
axes apply on top."""

MAX_LABEL_CHARS = 200
"""The longest label a study's ``[labels]`` may give (a legend entry or an axis title:
longer ones cannot be laid out, and matplotlib's layout of a 200,000-character label
did not finish)."""
_TOP_KEYS = ("scenario", "seeds", "set", "axes", "only", "where", "labels", "resources")
_RESOURCE_KEYS = ("cpus_per_run",)
_UNSAFE = re.compile(r"[^A-Za-z0-9._=,+-]")


class StudyError(ScenarioError):
    """A study that cannot be used: one line per problem naming the key and the value
    (for a point, its axis values and seed too)."""

    def _headline(self) -> str:
        return f"invalid study {self.source}:" if self.source else "invalid study:"


@dataclass(frozen=True)
class RunPoint:
    """One run of a study.

    Attributes
    ----------
    name : str
        ``key=value,...-seedS`` (axis keys in file order), filesystem-safe and stable.
    seed : int
    axis_values : dict[str, Any]
        The axis key -> value of this run.
    overrides : tuple[str, ...]
        The ``--set`` items that make this run's scenario from its base (the study's
        ``[set]``, then its ``[where]`` settings that hold at this point, then the axis
        values but a ``scenario`` axis's, then ``seed`` and ``trace.path``).
    scenario : Scenario or None
        The validated scenario (None for points built without validation).
    """

    name: str
    seed: int
    axis_values: dict[str, Any]
    overrides: tuple[str, ...]
    scenario: Scenario | None = None


@dataclass
class Study:
    """A validated study file.

    Attributes
    ----------
    source : Path
        The study file.
    scenario : str
        The base scenario as resolved: an absolute path, or a shipped name; ``""`` with a
        ``scenario`` axis (:data:`SCENARIO_AXIS`) or when read unresolved.
    seeds : tuple[int, ...]
    set : dict[str, Any]
        Overrides of every run (dotted key -> TOML value).
    axes : dict[str, list]
        Swept keys (dotted key -> values), in file order.
    cpus_per_run : float
        Ray's ``num_cpus`` of each task.
    labels : dict[str, str]
        The figures' labels the study overrides: an axis key -> its axis label, or
        ``"key=value"`` -> that value's legend label (:mod:`cosim.display_names`).
    only : dict[str, dict[str, list]]
        Axes swept only at some values of other axes: an axis key -> {another axis key
        -> the values at which the first is swept}; elsewhere it keeps its first value.
    keep : dict[str, list]
        A filter of the points (``--only`` of the command line,
        :mod:`cosim.study.options`): an axis key -> the values kept; a point is run when
        every axis named is at one of them.
    scenario_files : dict[str, str]
        With a ``scenario`` axis: each of its values as written -> that base scenario
        resolved (empty when read unresolved: ``load_study(resolve_scenario=False)``).
    where : dict[str, dict[str, Any]]
        Settings of some points: ``"key=value"`` of an axis (as in the run names) -> the
        dotted keys set where that axis takes that value, after ``[set]`` and before the
        axis values.
    """

    source: Path
    scenario: str
    seeds: tuple[int, ...]
    set: dict[str, Any]
    axes: dict[str, list]
    cpus_per_run: float = 1.0
    labels: dict[str, str] = field(default_factory=dict)
    only: dict[str, dict[str, list]] = field(default_factory=dict)
    text: str = field(default="", repr=False)
    keep: dict[str, list] = field(default_factory=dict)
    scenario_files: dict[str, str] = field(default_factory=dict)
    where: dict[str, dict[str, Any]] = field(default_factory=dict)

    def base_scenario(self, values: dict[str, Any]) -> str:
        """The resolved base scenario of the axis combination ``values``: its ``scenario``
        axis value's file, else the study's ``scenario``."""
        if SCENARIO_AXIS in values:
            return self.scenario_files[values[SCENARIO_AXIS]]
        return self.scenario

    def base_scenarios(self) -> dict[str, str]:
        """Every base scenario the study's points start from, as written -> resolved: the
        ``scenario`` axis's values, or the top-level ``scenario`` alone (keyed ``""``)."""
        return dict(self.scenario_files) if SCENARIO_AXIS in self.axes else {"": self.scenario}

    def points(self, out_dir: Path | None = None, *, validate: bool = True) -> list[RunPoint]:
        """Every run: the product of the axes (first axis slowest) x the seeds, less the
        combinations ``only`` leaves out (an axis at any but its first value where another
        axis is not at one of the values ``only`` names) and those ``keep`` filters out.

        With ``out_dir`` each run's ``trace.path`` is ``out_dir/runs/<name>.h5``. With
        ``validate`` every point is loaded as a scenario (and its size checked), and
        all the problems of all points are raised together as one :class:`StudyError`.
        """
        keys = list(self.axes)
        points, problems, names = [], [], {}
        for combo in itertools.product(*(self.axes[k] for k in keys)):
            values = dict(zip(keys, combo, strict=True))
            if not self.swept_here(values) or not self.kept(values):
                continue
            for seed in self.seeds:
                name = run_name(values, seed)
                if name in names:
                    problems.append(f"axes: the points {names[name]} and {values} seed {seed} "
                                    f"get the same run name {name!r}")
                names[name] = f"{values} seed {seed}"
                overrides = self._overrides(values, seed, name, out_dir)
                scenario = self._validated(values, seed, overrides, problems) if validate else None
                points.append(RunPoint(name, int(seed), values, tuple(overrides), scenario))
        if problems:
            raise StudyError(problems, str(self.source))
        return points

    def _overrides(self, values: dict[str, Any], seed: int, name: str,
                   out_dir: Path | None) -> list[str]:
        """The ``--set`` items of one point (:attr:`RunPoint.overrides`)."""
        overrides = [f"{k}={toml_value(v)}" for k, v in self.set.items()]
        overrides += [f"{k}={toml_value(v)}" for k, v in self.settings_where(values).items()]
        overrides += [f"{k}={toml_value(v)}" for k, v in values.items() if k != SCENARIO_AXIS]
        overrides.append(f"seed={seed}")
        if out_dir is not None:
            trace = (Path(out_dir).resolve() / RUNS_DIR / f"{name}.h5").as_posix()
            overrides.append(f"trace.path={toml_value(trace)}")
        return overrides

    def _validated(self, values: dict[str, Any], seed: int, overrides: list[str],
                   problems: list[str]) -> Scenario | None:
        """One point loaded from its base scenario and its size checked; None with its
        problems appended to ``problems``, each naming the point (its axis values, a
        ``scenario`` axis's among them) and its seed."""
        base = self.base_scenario(values)
        try:
            scenario = load_scenario(base, overrides)
            check_resources(scenario, source=base)
            return scenario
        except ScenarioError as error:
            where = ", ".join(f"{k} = {toml_value(v)}" for k, v in values.items())
            where = f"point {where}, seed {seed}" if where else f"seed {seed}"
            # a fault of the scenario file itself names it (not the study's line)
            named = f"scenario {base}: " if error.source == base else ""
            problems += [f"{where}: {named}{p}" for p in error.problems]
            return None

    def settings_where(self, values: dict[str, Any]) -> dict[str, Any]:
        """The ``[where]`` settings that hold at the axis combination ``values``, in file
        order (two that set one key differently at one point are refused at load)."""
        named = {value_key(k, v) for k, v in values.items()}
        return {key: value for condition, settings in self.where.items() if condition in named
                for key, value in settings.items()}

    def kept(self, values: dict[str, Any]) -> bool:
        """Whether the axis combination ``values`` passes ``keep`` (``--only``)."""
        return all(any(_same(values[key], v) for v in allowed) for key, allowed in self.keep.items())

    def swept_here(self, values: dict[str, Any]) -> bool:
        """Whether the axis combination ``values`` is a point: every axis ``only`` does
        not sweep there is at its first value."""
        return all(_same(values[key], self.axes[key][0]) for key in unswept(self.only, values))


def unswept(only: dict[str, dict[str, list]], values: dict[str, Any]) -> set[str]:
    """The axes of ``only`` that are not swept at the axis combination ``values`` (some
    condition on them fails): their value there is only the axis's first, a placeholder
    the report's legends leave out."""
    return {key for key, conditions in only.items()
            if not all(any(_same(values[other], v) for v in allowed)
                       for other, allowed in conditions.items())}


def _same(a: Any, b: Any) -> bool:
    """Equality of two axis values as the study's distinctness check has it (their JSON
    text)."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def _only_problems(only: Any, axes: dict[str, Any]) -> list[str]:
    """The problems of an ``[only]`` table: each key an axis, each value a table of
    other axes -> non-empty lists of their values."""
    if not isinstance(only, dict):
        return [f"only: must be a table of axis keys -> {{other axis key = [values]}} "
                f"(got {only!r})"]
    problems = []
    for key, conditions in only.items():
        if key not in axes:
            problems.append(f"only.{key}: not an axis (the axes: {', '.join(axes) or 'none'})")
            continue
        if not isinstance(conditions, dict) or not conditions:
            problems.append(f'only.{key}: must be a table of other axes -> values, e.g. '
                            f'{{"algorithm.name" = ["bayes_aircomp"]}} (got {conditions!r})')
            continue
        for other, allowed in conditions.items():
            where = f"only.{key}.{other}"
            if other == key or other not in axes:
                problems.append(f"{where}: not another axis (the axes: {', '.join(axes)})")
            elif not isinstance(allowed, list) or not allowed:
                problems.append(f"{where}: must be a non-empty list of values of that axis "
                                f"(got {allowed!r})")
            elif isinstance(axes[other], list):
                strays = [v for v in allowed if not any(_same(v, a) for a in axes[other])]
                if strays:
                    problems.append(f"{where}: {strays!r} not among the axis's values "
                                    f"{axes[other]!r}")
    return problems


def _what(path: Path) -> str:
    """What ``path`` is, for a message: missing, a directory, or not a regular file."""
    if not path.exists():
        return "missing"
    return "a directory" if path.is_dir() else "not a regular file"


def _value_text(value: Any) -> str:
    """An axis value as it appears in a run name: strings bare, ``10.0`` as ``10``."""
    if isinstance(value, str):
        return value
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, (list, tuple)):
        return "+".join(_value_text(v) for v in value)
    if isinstance(value, dict):  # a table-valued key (privacy.clip_norm per phase)
        return "+".join(f"{k}_{_value_text(v)}" for k, v in value.items())
    return toml_value(value)


def run_name(axis_values: dict[str, Any], seed: int) -> str:
    """``key=value,key=value-seedS`` (``seedS`` alone without axes); every character
    other than letters, digits and ``._=,+-`` becomes ``_``."""
    head = ",".join(f"{k}={_value_text(v)}" for k, v in axis_values.items())
    return _UNSAFE.sub("_", f"{head}-seed{seed}" if head else f"seed{seed}")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def load_study(path: str | Path, *, validate: bool = True, resolve_scenario: bool = True) -> Study:
    """Read and check a study file (and, with ``validate``, every point of it; with
    ``resolve_scenario`` False, its ``scenario`` and a ``scenario`` axis's values are not
    looked for: a study's copy in its output directory, read for its axes, seeds and
    labels).

    Raises
    ------
    StudyError
        Missing file, TOML syntax error, an unknown top-level or ``[resources]`` key,
        neither ``scenario`` nor a ``scenario`` axis or both, a ``scenario`` axis value
        that is no scenario file or shipped name (or the same file as another),
        ``seeds`` not a non-empty list of distinct ints, an axis that is not a
        non-empty list, a key both in ``[set]`` and ``[axes]``, ``seed`` or
        ``trace.path`` set by the study (the study owns them), a bad ``[where]``
        (:func:`_checked_where`), ``cpus_per_run`` not a positive number, and every
        invalid point (:meth:`Study.points`).
    """
    path = Path(path)
    # a bare name that is not a file here (a missing one, or a directory such as the
    # study's own --out) is the shipped study of that name
    if not path.is_file() and shipped_study_path(path) is not None:
        path = shipped_study_path(path)
    source = str(path)
    data = read_toml(path, source, error=StudyError)
    text = path.read_text(encoding="utf-8")
    problems = [f"{key}: unknown key (valid: {', '.join(_TOP_KEYS)})"
                for key in data if key not in _TOP_KEYS]
    seeds = _checked_seeds(data.get("seeds"), problems)
    overrides, axes = _checked_set_and_axes(data.get("set", {}), data.get("axes", {}), problems)
    resolved, scenario_files = _base_scenarios(data, axes, path, problems,
                                               resolve=resolve_scenario)
    only = data.get("only", {})
    problems += _only_problems(only, axes)
    where = _checked_where(data.get("where", {}), axes, problems)
    labels = _checked_labels(data.get("labels", {}), axes, problems)
    cpus = _checked_resources(data.get("resources", {}), problems)
    if problems:
        raise StudyError(problems, source)
    study = Study(source=path, scenario=resolved, seeds=tuple(int(s) for s in seeds),
                  set=dict(overrides), axes={k: list(v) for k, v in axes.items()},
                  cpus_per_run=cpus, labels=dict(labels),
                  only={k: dict(v) for k, v in only.items()} if isinstance(only, dict) else {},
                  text=text, scenario_files=scenario_files, where=where)
    if validate:
        study.points()
    return study


def _base_scenarios(data: dict[str, Any], axes: dict[str, Any], path: Path, problems: list[str],
                    *, resolve: bool) -> tuple[str, dict[str, str]]:
    """The study's base scenarios: ``(the top-level scenario resolved, {})``, or with a
    ``scenario`` axis ``("", {value as written: resolved})``; unresolved (``""``, ``{}``)
    when ``resolve`` is False. A line is appended to ``problems`` for both given, and
    for a value that resolves to no scenario or to another value's file."""
    values = axes.get(SCENARIO_AXIS)
    if values is None and "scenario" not in data and resolve:
        problems.append("scenario: missing; name the base scenario (a file or a shipped name), "
                        "or sweep several: [axes] scenario = [...]")
        return "", {}
    if values is None:
        return (_resolve_scenario(data.get("scenario"), path, problems) if resolve else ""), {}
    if "scenario" in data:
        problems.append(f"scenario: given beside the axis axes.scenario {values!r}; a study "
                        "names its base scenario once (drop the top-level scenario)")
        return "", {}
    if not resolve or not isinstance(values, list):  # not a list: said by the axes' check
        return "", {}
    files: dict[str, str] = {}
    for value in values:
        if isinstance(value, str) and value in files:
            continue  # a repeated value: said by the axes' check
        resolved = _resolve_scenario(value, path, problems, key="axes.scenario")
        if not resolved:
            continue
        if same := [v for v, f in files.items() if f == resolved]:
            problems.append(f"axes.scenario: {value!r} is the same scenario as {same[0]!r} "
                            f"({resolved})")
        files[value] = resolved
    return "", files


def _resolve_scenario(scenario: Any, path: Path, problems: list[str],
                      key: str = "scenario") -> str:
    """A study's base scenario (the value of ``key``) as a file path: relative to the
    study file's directory, else a shipped scenario's name; ``""`` with a line naming
    ``key`` and the value appended to ``problems`` when it is neither."""
    if not isinstance(scenario, str) or not scenario:
        problems.append(f"{key}: must be a scenario file or a shipped scenario name "
                        f"(got {scenario!r})")
        return ""
    candidate = (path.parent / scenario).resolve()
    if candidate.is_file():
        return str(candidate)
    if shipped_scenario_path(scenario) is not None:
        return str(shipped_scenario_path(scenario))  # not re-resolved against the cwd
    if candidate.exists() or "/" in scenario or scenario.endswith(".toml"):
        problems.append(f"{key}: {scenario!r} is not a scenario file (it resolves to "
                        f"{candidate}, which is {_what(candidate)})")
    else:
        problems.append(f"{key}: {scenario!r} is neither a file (relative to {path.parent}) "
                        "nor a shipped scenario (`cosim scenarios`)")
    return ""


def _checked_seeds(seeds: Any, problems: list[str]) -> list:
    """``seeds`` (a non-empty list of distinct ints); ``[]`` when it is not a list of
    ints, a line appended to ``problems`` for either fault."""
    if (not isinstance(seeds, list) or not seeds
            or not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds)):
        problems.append(f"seeds: must be a non-empty list of ints (got {seeds!r})")
        return []
    if len(set(seeds)) != len(seeds):
        problems.append(f"seeds: must be distinct (got {seeds!r})")
    return seeds


def _checked_set_and_axes(overrides: Any, axes: Any,
                          problems: list[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``[set]`` and ``[axes]`` as dicts (``{}`` for one that is not a table); a line
    appended to ``problems`` for a nested table, a key the study owns (``seed``,
    ``trace.path``), an axis that is not a non-empty list of distinct values and a key
    both set and swept."""
    if not isinstance(overrides, dict):
        problems.append(f"set: must be a table of dotted keys (got {overrides!r})")
        overrides = {}
    if not isinstance(axes, dict):
        problems.append(f"axes: must be a table of dotted keys -> lists (got {axes!r})")
        axes = {}
    for table, entries in (("set", overrides), ("axes", axes)):
        for key, value in entries.items():
            if isinstance(value, dict) and not (table == "set" and takes_a_table(key)):
                problems.append(f'{table}.{key}: a nested table; write the dotted key quoted, '
                                f'e.g. "{key}.{next(iter(value), "key")}" = ... (got {value!r})')
            if table == "set" and key == SCENARIO_AXIS:
                problems.append(f"set.scenario: the base scenario is the top-level scenario or "
                                f"an axis ([axes] scenario = [...]), not a key to set (got {value!r})")
            if key in ("seed", "trace.path"):
                problems.append(f"{table}.{key}: set by the study (seeds, DIR/runs/<run name>.h5), "
                                f"not a key to {'sweep' if table == 'axes' else 'set'} (got {value!r})")
    for key, values in axes.items():
        if not isinstance(values, list) or not values:
            problems.append(f"axes.{key}: must be a non-empty list of values (got {values!r})")
        elif len({json.dumps(v, sort_keys=True) for v in values}) != len(values):
            problems.append(f"axes.{key}: values must be distinct (got {values!r})")
        if key in overrides:
            problems.append(f"axes.{key}: also in [set]; a key is either set or swept")
    return overrides, axes


def _axis_values_named(axes: dict[str, Any]) -> dict[str, tuple[str, Any]]:
    """Every ``"key=value"`` of the axes (:func:`cosim.display_names.value_key`, as in the
    run names) -> ``(key, value)``."""
    return {value_key(k, v): (k, v) for k, values in axes.items() if isinstance(values, list)
            for v in values}


def _checked_where(where: Any, axes: dict[str, Any], problems: list[str]) -> dict[str, dict[str, Any]]:
    """``[where]`` as a dict (``{}`` when it is not a table); a line appended to
    ``problems`` for a condition that names no axis value, settings that are not a table,
    a key the study owns or sweeps (``seed``, ``trace.path``, ``scenario``, an axis), a
    nested table where the key takes none, and two conditions that can hold at one point
    (on different axes) setting one key to different values."""
    if not isinstance(where, dict):
        problems.append(f'where: must be a table of "key=value" -> {{dotted key = value}} (got {where!r})')
        return {}
    named = _axis_values_named(axes)
    checked: dict[str, dict[str, Any]] = {}
    for condition, settings in where.items():
        if condition not in named:
            problems.append(f"where.{condition}: names no axis value (\"key=value\" as in the run "
                            f"names, e.g. \"uplink.scheme=one_bit\"; got {condition!r})")
            continue
        if not isinstance(settings, dict) or not settings:
            problems.append(f"where.{condition}: must be a table of dotted keys -> values "
                            f"(got {settings!r})")
            continue
        for key, value in settings.items():
            if key in ("seed", "trace.path", SCENARIO_AXIS) or key in axes:
                problems.append(f"where.{condition}.{key}: {'an axis' if key in axes else 'set by the study'}"
                                f", not a key to set at some points (got {value!r})")
            elif isinstance(value, dict) and not takes_a_table(key):
                problems.append(f"where.{condition}.{key}: a nested table; write its dotted keys "
                                f"(got {value!r})")
        checked[condition] = settings
    for (first, a), (second, b) in itertools.combinations(checked.items(), 2):
        if named[first][0] == named[second][0]:
            continue  # one axis: never both at one point
        for key in sorted(set(a) & set(b)):
            if not _same(a[key], b[key]):
                problems.append(f"where.{second}.{key}: {b[key]!r}, and where.{first}.{key}: "
                                f"{a[key]!r} at the points where both hold; set it once")
    return checked


def _checked_labels(labels: Any, axes: dict[str, Any], problems: list[str]) -> dict[str, Any]:
    """``[labels]`` as a dict (``{}`` when it is not a table); a line appended to
    ``problems`` for a label that is empty, longer than :data:`MAX_LABEL_CHARS` or
    names no axis key and no ``"key=value"`` of an axis."""
    if not isinstance(labels, dict):
        problems.append(f"labels: must be a table of axis keys or \"key=value\" -> labels "
                        f"(got {labels!r})")
        return {}
    named = {*axes, *_axis_values_named(axes)}
    for key, label in labels.items():
        if not isinstance(label, str) or not label.strip():
            problems.append(f"labels.{key}: must be a non-empty string (got {label!r})")
        elif len(label) > MAX_LABEL_CHARS:
            problems.append(f"labels.{key}: at most {MAX_LABEL_CHARS} characters, a figure's "
                            f"legend or axis (got {len(label):,}: {label[:40]!r}...)")
        elif key not in named:
            problems.append(f"labels.{key}: names no axis and no axis value "
                            f"(an axis key, or \"key=value\" as in the run names; got {key!r})")
    return labels


def _checked_resources(resources: Any, problems: list[str]) -> float:
    """``[resources]``'s ``cpus_per_run`` (default 1.0); a line appended to ``problems``
    for a table that is not one, an unknown key or a value that is not a positive
    number."""
    cpus = 1.0
    if not isinstance(resources, dict):
        problems.append(f"resources: must be a table (got {resources!r})")
        resources = {}
    for key in resources:
        if key not in _RESOURCE_KEYS:
            problems.append(f"resources.{key}: unknown key (valid: {', '.join(_RESOURCE_KEYS)})")
    if "cpus_per_run" in resources:
        value = resources["cpus_per_run"]
        if not _is_number(value) or not math.isfinite(value) or value <= 0:
            problems.append(f"resources.cpus_per_run: must be a positive number (got {value!r})")
        else:
            cpus = float(value)
    return cpus
