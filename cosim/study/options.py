"""A study shrunk or changed from the command line: ``--set``, ``--seeds``, ``--rounds``
and ``--only`` of ``cosim study run`` and ``cosim validate STUDY`` (``docs/studies.md``,
"Shrinking a study from the command line").

:func:`parse_options` checks the flags against a loaded :class:`~cosim.study.file.Study`
and returns :class:`StudyOptions`; :meth:`StudyOptions.apply` gives the study they make
(its seeds, its ``[set]`` and a filter of its points). The options are recorded in the
study directory as :data:`OPTIONS_FILE` (:func:`record_options`), so that a resume and
``cosim study report`` use the same points, and a resume with other options is refused
with one line (:func:`resolve_recorded`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cosim.atomic_write import write_text_atomic
from cosim.scenario.load import ScenarioError, load_scenario, parse_override, toml_value
from cosim.study.file import Study, StudyError, _value_text

__all__ = ["OPTIONS_FILE", "StudyOptions", "parse_options", "read_options", "record_options",
           "resolve_recorded"]

OPTIONS_FILE = "options.json"
"""The command-line options a study directory was run with (``DIR/options.json``)."""


@dataclasses.dataclass(frozen=True)
class StudyOptions:
    """The command line's changes to a study, normalised.

    Attributes
    ----------
    set : tuple of str
        ``KEY=VALUE`` items (``--set``, TOML values) applied to every point after the
        study's ``[set]`` (a key of both: the command line's value).
    seeds : tuple of int or None
        The seeds to run (``--seeds N``: the study's first N; ``--seeds A,B``: those), or
        None for the study's.
    rounds : int or None
        ``rounds`` of every point (``--rounds``), or None for the study's.
    only : dict of str to tuple of str
        ``--only KEY=V1,V2``: an axis -> the texts of the values kept (as in run names:
        ``10`` for 10.0); a point is kept when every named axis is at one of them.
    """

    set: tuple[str, ...] = ()
    seeds: tuple[int, ...] | None = None
    rounds: int | None = None
    only: dict[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not (self.set or self.seeds is not None or self.rounds is not None or self.only)

    def as_json(self) -> dict[str, Any]:
        return {"set": list(self.set), "seeds": None if self.seeds is None else list(self.seeds),
                "rounds": self.rounds, "only": {k: list(v) for k, v in self.only.items()}}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StudyOptions:
        seeds = data.get("seeds")
        return cls(set=tuple(data.get("set") or ()),
                   seeds=None if seeds is None else tuple(int(s) for s in seeds),
                   rounds=data.get("rounds"),
                   only={k: tuple(v) for k, v in (data.get("only") or {}).items()})

    def flags(self) -> str:
        """The options as command-line flags (``--seeds 1,2 --rounds 5 ...``), or ``none``."""
        parts = [f"--set {item}" for item in self.set]
        if self.seeds is not None:
            parts.append("--seeds " + ",".join(map(str, self.seeds))
                         + ("," if len(self.seeds) == 1 else ""))
        if self.rounds is not None:
            parts.append(f"--rounds {self.rounds}")
        parts += [f"--only {key}={','.join(values)}" for key, values in self.only.items()]
        return " ".join(parts) or "none"

    def apply(self, study: Study) -> Study:
        """The study these options make: its seeds, its ``[set]`` with ``--set`` and
        ``--rounds`` after the file's, and its points filtered by ``--only``."""
        if self.empty:
            return study
        overrides = dict(study.set)
        for item in self.set:
            path, value = parse_override(item)
            overrides[".".join(path)] = value
        if self.rounds is not None:
            overrides["rounds"] = self.rounds
        if missing := sorted(set(self.only) - set(study.axes)):
            raise StudyError([f"--only {missing[0]}: the study has no such axis (recorded in "
                              f"{OPTIONS_FILE}?); run with --only naming its axes"], "--only")
        keep = {key: [v for v in study.axes[key] if _value_text(v) in texts]
                for key, texts in self.only.items()}
        return dataclasses.replace(study, seeds=self.seeds or study.seeds, set=overrides,
                                   keep={**study.keep, **keep})


def _seeds(text: str, study: Study) -> tuple[int, ...]:
    """``--seeds``: ``N`` (the study's first N seeds) or a comma list of distinct ints
    (``4,`` for seed 4 alone)."""
    items = [t.strip() for t in text.strip().strip("[]").split(",")]
    try:
        if "," not in text:
            count = int(items[0])
            if not 1 <= count <= len(study.seeds):
                raise StudyError([f"--seeds: {text!r}: a count must be 1 to the study's "
                                  f"{len(study.seeds)} seeds {list(study.seeds)} (other seeds: "
                                  "a list, --seeds 7,8; one seed: --seeds 7,)"], str(study.source))
            return tuple(study.seeds[:count])
        seeds = tuple(int(t) for t in items if t)
    except ValueError:
        raise StudyError([f"--seeds: must be a count N or a comma list of ints such as 1,2 "
                          f"(got {text!r})"], str(study.source)) from None
    if not seeds or len(set(seeds)) != len(seeds):
        raise StudyError([f"--seeds: must be distinct ints (got {text!r})"], str(study.source))
    return seeds


def _only(items: Sequence[str], study: Study) -> dict[str, tuple[str, ...]]:
    """``--only KEY=V1,V2`` items: each key an axis, each value text one of its values."""
    only: dict[str, tuple[str, ...]] = {}
    for item in items:
        key, sep, values = item.partition("=")
        key = key.strip()
        if not sep or not values.strip():
            raise StudyError([f"--only: {item!r}: must be AXIS=VALUE[,VALUE...], e.g. "
                              f"--only {next(iter(study.axes), 'power.tx_power_dbm')}=10"],
                             str(study.source))
        if key not in study.axes:
            raise StudyError([f"--only: {key!r} is not an axis of the study (the axes: "
                              f"{', '.join(study.axes) or 'none'})"], str(study.source))
        texts = {_value_text(v): v for v in study.axes[key]}
        given = tuple(dict.fromkeys(t.strip().strip('"') for t in values.split(",") if t.strip()))
        strays = [t for t in given if t not in texts]
        if strays:
            raise StudyError([f"--only {key}={strays[0]}: not among the axis's values "
                              f"({', '.join(texts)})"], str(study.source))
        only[key] = tuple(sorted({*only.get(key, ()), *given}, key=list(texts).index))
    return only


def parse_options(study: Study, *, overrides: Sequence[str] = (), seeds: str | None = None,
                  rounds: int | None = None, only: Sequence[str] = ()) -> StudyOptions:
    """The flags checked against ``study``; :class:`StudyError` (one line naming the flag
    and the value) for a malformed ``--set`` item, a key the study sweeps or owns
    (``seed``, ``trace.path``), ``--rounds`` beside ``--set rounds=``, a bad count or
    list of seeds, and an ``--only`` key that is no axis or a value it does not hold.
    A bad key or value of ``--set`` is named as ``cosim run --set`` names it (the base
    scenario loaded with the study's ``[set]`` and the flags)."""
    items = []
    for item in overrides:
        try:
            path, _ = parse_override(item)
        except ScenarioError as error:
            raise StudyError(error.problems, str(study.source)) from None
        key = ".".join(path)
        if key in study.axes:
            raise StudyError([f"--set {item}: {key} is an axis of the study; pick its values "
                              f"with --only {key}=..."], str(study.source))
        if key in ("seed", "trace.path"):
            raise StudyError([f"--set {item}: {key} is set by the study (--seeds, "
                              "DIR/runs/<run name>.h5)"], str(study.source))
        if key == "rounds" and rounds is not None:
            raise StudyError([f"--set {item}: give the rounds once (--rounds {rounds})"],
                             str(study.source))
        items.append(item.strip())
    if rounds is not None and "rounds" in study.axes:
        raise StudyError([f"--rounds {rounds}: rounds is an axis of the study; pick its values "
                          "with --only rounds=..."], str(study.source))
    options = StudyOptions(set=tuple(items),
                           seeds=None if seeds is None else _seeds(seeds, study),
                           rounds=rounds, only=_only(only, study))
    if items or rounds is not None:  # a bad key or value: one line, as `cosim run --set`
        _check_set(study, [*items, *([f"rounds={rounds}"] if rounds is not None else [])])
    if not options.apply(study).points(validate=False):
        raise StudyError([f"--only: no point of the study has {options.flags()}"],
                         str(study.source))
    return options


def _check_set(study: Study, extra: list[str]) -> None:
    """Each base scenario of ``study`` (:meth:`Study.base_scenarios`) loaded with the
    study's ``[set]`` and the ``--set`` items ``extra``: the first bad key or value is a
    :class:`StudyError` as ``cosim run --set`` words it (prefixed with the ``scenario``
    axis value it fails on, when the study sweeps one)."""
    items = [*(f"{k}={toml_value(v)}" for k, v in study.set.items()), *extra]
    for written, base in study.base_scenarios().items():
        try:
            load_scenario(base, items)
        except ScenarioError as error:
            where = f"scenario = {toml_value(written)}: " if written else ""
            raise StudyError([f"{where}{p}" for p in error.problems], str(study.source)) from None


def read_options(out_dir: str | Path) -> StudyOptions | None:
    """The options recorded in ``out_dir`` (:data:`OPTIONS_FILE`), or None (none
    recorded: the study as its file says)."""
    path = Path(out_dir) / OPTIONS_FILE
    if not path.is_file():
        return None
    try:
        return StudyOptions.from_json(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError, AttributeError) as error:
        raise StudyError([f"{path}: cannot read the recorded options ({error})"],
                         str(out_dir)) from None


def resolve_recorded(out_dir: str | Path, given: StudyOptions) -> tuple[StudyOptions, bool]:
    """The options a run in ``out_dir`` uses, and whether they came from its record:
    those given, when none are recorded or the same are; the recorded ones when none
    are given; a :class:`StudyError` (one line) when both differ."""
    recorded = read_options(out_dir)
    if recorded is None and (Path(out_dir) / "status.json").is_file():
        recorded = StudyOptions()  # run before options were recorded: with none
    if recorded is None or recorded == given:
        return given, False
    if given.empty:
        return recorded, True
    raise StudyError([f"{Path(out_dir) / OPTIONS_FILE}: this directory was run with "
                      f"{recorded.flags()}, not {given.flags()}; give the same options "
                      "(or none) to resume it, or a new --out"], str(out_dir))


def record_options(out_dir: str | Path, options: StudyOptions) -> None:
    """Write ``options`` to ``out_dir``'s :data:`OPTIONS_FILE` (replaced atomically)."""
    write_text_atomic(Path(out_dir) / OPTIONS_FILE,
                      json.dumps(options.as_json(), indent=2) + "\n")
