"""Scenario files: loading, ``--set`` overrides and the shipped scenarios; the scenario API.

A scenario is everything a run needs, in one frozen, validated object::

    scenario = load_scenario("scenarios/quickstart.toml", ["cell.num_devices=20"])
    scenario = load_scenario("paper_mnist")   # a shipped scenario by name
    scenario.cell.radius_m            # 300.0
    scenario.power.noise_power_w      # linear units as properties
    scenario.algorithm.hyper_parameters()   # kwargs for learning.algorithms.build

Defaults equal the paper's Tables I-II (``table:SimulSetup``, ``table:HyperParam``)
for its MNIST set-up wherever the paper gives a value; every key, unit and source
is listed in ``docs/scenarios.md``. Every problem is reported as one line naming
the full dotted key and the bad value (``cell.radius_m: must be > 0 (got -5.0)``),
with the nearest valid key for a misspelling (or the table that has the key),
through :class:`ScenarioError`; every case tried is in ``docs/faults.md``.

The scenario is split by concern: the tables' schema and the TOML output in
:mod:`cosim.scenario.tables`, the messages and :func:`parse_scenario` in
:mod:`cosim.scenario.errors`, the derived quantities and :func:`check_resources` in
:mod:`cosim.scenario.derived`; this module loads files and applies overrides, and
re-exports the names of all four (``from cosim.scenario import ...`` is the API).

A valid scenario may still be too large for the machine: :func:`check_resources`
compares its memory estimate with the memory available and raises
:class:`ScenarioTooLarge` (a :class:`ScenarioError`) naming the keys that drive the
size; d comes from :func:`model_num_params`, arithmetic only, so nothing is allocated.

The shipped scenarios (the repository's ``scenarios/``, installed as the package
``cosim.scenarios``: one copy of each file) are listed by :func:`shipped_scenarios`;
:func:`load_scenario` takes a bare shipped name (``paper_mnist``) for a file that does
not exist. Nothing here imports TensorFlow (``cosim validate`` and ``cosim scenarios``
start without it).
"""

from __future__ import annotations

import re
import tomllib
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from cosim.limits import MAX_NESTING, NestingError, echo, nesting_depth, toml_loads
from cosim.printable import utf8_text
from cosim.scenario.derived import (
    available_memory_bytes,
    check_resources,
    describe,
    downlink_values,
    memory_estimate_bytes,
    model_num_params,
    scenario_num_params,
    symbols_per_phase,
    uplink_phase_values,
)
from cosim.scenario.errors import (
    MOVED_KEYS,
    ScenarioError,
    ScenarioTooLarge,
    _did_you_mean,
    _model_at,
    _sub_model,
    migrate_table,
    parse_scenario,
)
from cosim.scenario.scene import confine_scene, is_scene_file, traces_scene
from cosim.scenario.tables import (
    DB_LIMIT,
    AlgorithmConfig,
    Scenario,
    _plain,
    image_shape,
    scenario_to_toml,
    toml_value,
)

__all__ = [
    "DB_LIMIT",
    "AlgorithmConfig",
    "Overrides",
    "Scenario",
    "ScenarioError",
    "ScenarioTooLarge",
    "ShippedScenario",
    "available_memory_bytes",
    "check_resources",
    "default_scenario_text",
    "describe",
    "downlink_values",
    "image_shape",
    "load_scenario",
    "memory_estimate_bytes",
    "migrate_table",
    "model_num_params",
    "parse_scenario",
    "read_toml",
    "scenario_num_params",
    "scenario_to_toml",
    "shipped_scenario_path",
    "shipped_scenarios",
    "shipped_scenarios_dir",
    "symbols_per_phase",
    "takes_a_table",
    "toml_value",
    "uplink_phase_values",
    "with_overrides",
]


# --------------------------------------------------------------------------- loading


def shipped_scenarios_dir() -> Path:
    """The directory of the shipped scenario files.

    The repository's ``scenarios/`` is installed as the package ``cosim.scenarios``
    (``pyproject.toml``'s package-dir mapping: a wheel copies it to
    ``cosim/scenarios/``, an editable install maps the name onto the repository's
    directory), so there is one copy of every file. A source tree used without
    installing it, or an editable install made before the mapping existed, falls back
    to the ``scenarios/`` next to the ``cosim/`` directory.
    """
    try:
        from cosim import scenarios as package
    except ImportError:
        package = None
    location = getattr(package, "__file__", None)  # None for a namespace package
    if location is None:
        return Path(__file__).resolve().parent.parent / "scenarios"
    return Path(location).resolve().parent


@dataclass(frozen=True)
class ShippedScenario:
    """One shipped file, as ``cosim scenarios`` lists it.

    Attributes
    ----------
    name : str
        A scenario's file name without ``.toml`` (what ``cosim run NAME`` takes); a
        script's file name (``compare_mnist.sh``, run with ``bash PATH``).
    description : str
        The file's first comment line without its ``#`` (a shebang line is skipped);
        empty when it has none.
    path : Path
        The installed file.
    """

    name: str
    description: str
    path: Path


def _first_comment(path: Path) -> str:
    """The first ``#`` comment line of ``path`` that is not a shebang, without the
    ``#``; empty when there is none or the file cannot be read."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return ""
    for line in lines:
        text = line.strip()
        if text.startswith("#") and not text.startswith("#!") and text.lstrip("#").strip():
            return text.lstrip("#").strip()
    return ""


def shipped_scenarios() -> list[ShippedScenario]:
    """Every shipped scenario (``*.toml``, by name) and then every shipped script
    (``*.sh``, by name), from :func:`shipped_scenarios_dir`."""
    directory = shipped_scenarios_dir()
    tomls, scripts = sorted(directory.glob("*.toml")), sorted(directory.glob("*.sh"))
    return [ShippedScenario(p.stem, _first_comment(p), p) for p in tomls] + [
        ShippedScenario(p.name, _first_comment(p), p) for p in scripts
    ]


SHIPPED_STUDIES = "studies"
"""The shipped study files' subdirectory of :func:`shipped_scenarios_dir` (``cosim study
run NAME`` takes one by name; docs/studies.md)."""


def shipped_studies() -> list[ShippedScenario]:
    """Every shipped study file (``studies/*.toml``, by name)."""
    directory = shipped_scenarios_dir() / SHIPPED_STUDIES
    return [ShippedScenario(p.stem, _first_comment(p), p) for p in sorted(directory.glob("*.toml"))]


def _shipped(path: str | Path, directory: Path) -> Path | None:
    p = Path(path)
    if len(p.parts) != 1 or p.name in (".", ".."):
        return None
    candidate = directory / f"{p.name.removesuffix('.toml')}.toml"
    return candidate if candidate.is_file() else None


def shipped_scenario_path(path: str | Path) -> Path | None:
    """The shipped scenario a bare name (``paper_mnist`` or ``paper_mnist.toml``, no
    directory part) stands for, or None."""
    return _shipped(path, shipped_scenarios_dir())


def shipped_study_path(path: str | Path) -> Path | None:
    """The shipped study a bare name (``pow_alloc_mnist``, no directory part) stands
    for, or None."""
    return _shipped(path, shipped_scenarios_dir() / SHIPPED_STUDIES)


def default_scenario_text() -> str:
    """The default scenario: the shipped ``quickstart.toml`` (:func:`shipped_scenarios_dir`)."""
    return (shipped_scenarios_dir() / "quickstart.toml").read_text(encoding="utf-8")


_KEY_PATH = re.compile(r"[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)*")

Overrides = Sequence[str] | Mapping[str, Any]
"""``--set`` items (``["cell.num_devices=20"]``, TOML values) or a mapping of dotted
keys to Python values (``{"cell.num_devices": 20}``); see :func:`load_scenario`."""


def parse_override(item: str) -> tuple[list[str], Any]:
    """``KEY=VALUE`` of a ``--set`` item: the key's path and its TOML value (a bare word is
    a string); :class:`ScenarioError` for text that is not UTF-8, an item without ``=``, a
    key that is no dotted path or a value nested too deep."""
    try:  # argv's bytes as UTF-8 whatever the locale (LC_ALL=C leaves them escaped)
        item = utf8_text(item)
    except UnicodeDecodeError as error:
        raise ScenarioError([f"{echo(item)}: not UTF-8 text (byte 0x{error.object[error.start]:02x}); "
                             "a scenario is UTF-8"], "--set") from None
    key, sep, raw = item.partition("=")
    key = key.strip()
    if not sep or not key or not _KEY_PATH.fullmatch(key):
        raise ScenarioError([f"{echo(item)}: an override must look like key.path=value"], "--set")
    try:
        value = toml_loads(f"v = {raw.strip()}")["v"]
    except NestingError as error:
        raise ScenarioError([f"{key}: {error}"], "--set") from None
    except tomllib.TOMLDecodeError:
        value = raw.strip()  # a bare string: --set name=run7
    return key.split("."), value


def _override_items(overrides: Overrides, source: str) -> list[tuple[list[str], Any]]:
    """``(key path, value)`` pairs of ``--set`` items or of a mapping of dotted keys."""
    if isinstance(overrides, str):
        raise TypeError(f"overrides must be a sequence of key.path=value items or a mapping, "
                        f"not a single string ({overrides!r}); wrap it in a list")
    if isinstance(overrides, Mapping):
        pairs = list(overrides.items())
    else:
        try:
            given = list(overrides)
        except TypeError:
            raise ScenarioError([f"{type(overrides).__name__} {overrides!r}: overrides are a "
                                 "mapping of dotted keys or a list of key.path=value items"],
                                source) from None
        items = []
        for item in given:  # "key=value" items, or (key, value) pairs as a mapping's
            if isinstance(item, str):
                items.append(parse_override(item))
            elif isinstance(item, (tuple, list)) and len(item) == 2:
                items += _override_items(dict([item]), "overrides")
            else:
                raise ScenarioError([f"{echo(item)}: an override is a key.path=value string or a "
                                     "(key.path, value) pair"], source)
        return items
    items = []
    for key, value in pairs:
        if not isinstance(key, str) or not _KEY_PATH.fullmatch(key):
            raise ScenarioError([f"{echo(key)}: an override key must be a dotted key path such as "
                                 "'cell.radius_m'"], source)
        if nesting_depth(value) > MAX_NESTING:
            raise ScenarioError([f"{key}: arrays or tables nested more than {MAX_NESTING} deep "
                                 "(the most a scenario or study may nest)"], source)
        items.append((key.split("."), _plain(value)))
    return items


def _takes_table(model: type[BaseModel], key: str) -> bool:
    """Whether the key ``key`` of ``model`` may be a table of values (a ``dict`` in its
    type, as ``privacy.clip_norm`` per phase): ``key.entry = value`` then sets one entry."""
    annotation = model.model_fields[key].annotation
    return any(typing.get_origin(a) is dict for a in (annotation, *typing.get_args(annotation)))


def takes_a_table(key: str) -> bool:
    """Whether the dotted ``key`` names a scenario key whose value may be a table
    (``privacy.clip_norm = {rho = 1.0, nu = 0.5}``), not a table of keys (``cell``)."""
    path = key.split(".")
    parent = _model_at(path[:-1])
    return (parent is not None and path[-1] in parent.model_fields
            and _sub_model(parent, path[-1]) is None and _takes_table(parent, path[-1]))


def _apply_override(data: dict[str, Any], path: list[str], value: Any, source: str = "--set") -> None:
    model: type[BaseModel] | None = Scenario
    node = data
    for i, key in enumerate(path):
        if model is None or key not in model.model_fields:
            prefix = ".".join(path[:i])
            where = f"{prefix}." if prefix else ""
            if f"{where}{key}" in MOVED_KEYS:
                raise ScenarioError([f"{where}{key}: {MOVED_KEYS[where + key]}"], source)
            hint = f"; {_did_you_mean(model, key)}" if model is not None else ""
            raise ScenarioError([f"{where}{key}: unknown key{hint}"], source)
        if i == len(path) - 1:
            if isinstance(value, Mapping) and _sub_model(model, key) is not None:
                for sub_key, sub_value in value.items():  # a whole table merges key by key
                    _apply_override(data, [*path, str(sub_key)], sub_value, source)
                return
            node[key] = value
            return
        child = node.setdefault(key, {})
        if not isinstance(child, dict):
            raise ScenarioError([f"{'.'.join(path[: i + 1])}: is a value, not a table"], source)
        sub = _sub_model(model, key)
        if sub is None and i == len(path) - 2 and _takes_table(model, key):
            child[path[-1]] = value  # one entry of a key that is a table of values
            return
        node, model = child, sub


def _apply_overrides(data: dict[str, Any], overrides: Overrides) -> str:
    """Apply ``overrides`` to the parsed document ``data`` in order; what they are
    called in the validation's headline (``--set overrides`` or ``overrides``). A bad
    key's error has the source ``--set`` or ``overrides``."""
    source = "overrides" if isinstance(overrides, Mapping) else "--set"
    for path, value in _override_items(overrides, source):
        _apply_override(data, path, value, source)
    return "overrides" if source == "overrides" else "--set overrides"


def read_toml(
    path: str | Path | None,
    source: str,
    *,
    text: str | None = None,
    error: type[ScenarioError] | None = None,
    missing_hint: str = "",
) -> dict[str, Any]:
    """The table of the TOML file ``path`` (or of ``text``), or ``error`` (default
    :class:`ScenarioError`) with one line: file not found (plus ``missing_hint``),
    cannot read, or the TOML syntax error with its line."""
    error = error or ScenarioError
    if text is None:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except FileNotFoundError:
            raise error([f"file not found: {path}{missing_hint}"], source) from None
        except (OSError, UnicodeDecodeError) as exc:
            raise error([f"cannot read {path}: {exc}"], source) from None
    try:
        return toml_loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise error([f"TOML syntax error: {exc}"], source) from None


def load_scenario(path: str | Path | None = None, overrides: Overrides = ()) -> Scenario:
    """Read, override and validate a scenario.

    Parameters
    ----------
    path : str, Path or None
        A TOML file; None -> the default (the shipped quickstart). A bare name with
        no directory part that is not an existing file (``paper_mnist`` or
        ``paper_mnist.toml``) is the shipped scenario of that name
        (:func:`shipped_scenarios`); an existing file of that name wins.
    overrides : sequence of str, or mapping of str to value
        ``key.path=value`` items (``--set``); the value is parsed as a TOML value
        (``20``, ``1e-3``, ``"x"``, ``[1, 2]``, ``true``), falling back to a bare
        string. Or a mapping of the same dotted keys to Python values
        (``{"algorithm.learning_rate": 0.02, "rounds": 3}``; lists or tuples for
        arrays, NumPy scalars and arrays accepted, no string parsing: ``"20"`` is a
        string; None sets an optional key to None, its default). Applied in order
        and validated exactly like the file: the same one-line errors naming the
        dotted key and the value, with ``--set`` / ``overrides`` as their source.

    Raises
    ------
    ScenarioError
        Missing file, TOML syntax error (with its line), unknown or misspelled key,
        wrong type, out-of-range value, inconsistent fields.
    """
    if path is not None and not Path(path).is_file():  # a missing name or a directory
        path = shipped_scenario_path(path) or path
    source = "<default quickstart>" if path is None else str(path)
    if path is None:
        data = read_toml(None, source, text=default_scenario_text())
    else:
        hint = ""
        if len(Path(path).parts) == 1 and not Path(path).exists():  # not a shipped name either
            names = ", ".join(s.name for s in shipped_scenarios() if s.path.suffix == ".toml")
            hint = f" (nor a shipped scenario: {names}; `cosim scenarios` lists them)"
        data = read_toml(path, source, missing_hint=hint)
    if overrides:
        source = f"{source} with {_apply_overrides(data, overrides)}"
    return _with_scene_file(parse_scenario(data, source), Path(path).parent if path else Path.cwd(), source)


def _with_scene_file(scenario: Scenario, folder: Path, source: str) -> Scenario:
    """``scenario`` with ``channel.scene``'s file resolved against ``folder`` (the scenario
    file's; :func:`cosim.scenario.scene.confine_scene`): an absolute path, so a run finds
    it from any working directory; ScenarioError when it lies outside ``folder``."""
    channel = scenario.channel
    if not traces_scene(channel.model) or not is_scene_file(channel.scene):
        return scenario
    try:
        scene = confine_scene(channel.scene, folder)
    except ValueError as error:
        raise ScenarioError([str(error)], source) from None
    return scenario.model_copy(update={"channel": channel.model_copy(update={"scene": scene})})


def with_overrides(scenario: Scenario, overrides: Overrides) -> Scenario:
    """A new scenario: ``scenario`` with ``overrides`` applied, validated again.

    This is how to derive a variant of a scenario in Python. pydantic's
    ``scenario.model_copy(update=...)`` does *not* validate: it would keep a bad value,
    and a table given as a dict stays a plain dict (a run then fails far from the
    cause, or writes a trace whose scenario does not load back). Here the scenario's
    values are re-validated with the overrides exactly as :func:`load_scenario`
    validates a file with ``--set`` (so ``with_overrides(s, {})`` also checks a
    scenario that was built by ``model_copy``).

    Parameters
    ----------
    scenario : Scenario
        The base scenario (unchanged; scenarios are frozen).
    overrides : mapping of str to value, or sequence of str
        As in :func:`load_scenario`: ``{"rounds": 3, "power.tx_power_dbm": 10.0}`` or
        ``["rounds=3"]``.

    Returns
    -------
    Scenario

    Raises
    ------
    ScenarioError
        An unknown key (with the nearest valid one), a wrong type, an out-of-range
        value or inconsistent fields, one line each.
    """
    data = scenario.model_dump(mode="python", warnings=False)  # a model_copy'd dict table too
    source = repr(scenario.name)
    if overrides:
        source = f"{source} with {_apply_overrides(data, overrides)}"
    return parse_scenario(_plain(data), source)
