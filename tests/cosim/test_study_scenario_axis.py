"""A study's axis over base scenarios (``[axes] scenario = [...]``): its points, names and
refusals, ``--only`` and ``--set`` on it, the report's labels, and a tiny study run over
two scenario files whose channel keys are incompatible."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tiny_scenario import write_tiny

from cosim.cli import main
from cosim.display_names import axis_label, value_label, value_text
from cosim.study import StudyError, load_study
from cosim.study.options import parse_options
from cosim.study.report import _combination_label

SCHEME = "uplink.scheme"
RAYLEIGH = '\n[channel]\nmodel = "iid_rayleigh"\nnum_taps = 2\n'
UMI = '\n[channel]\nmodel = "umi"\nbs_height_m = 10.0\n'


def _places(directory: Path, *, rounds: int = 2, second: str = UMI) -> None:
    """``disk.toml`` (i.i.d. Rayleigh, 2 taps) and ``places/umi.toml`` (a 3GPP UMi cell, or
    the channel table ``second``): tiny scenarios of two channel models."""
    (directory / "places").mkdir(parents=True, exist_ok=True)
    for file, channel in (("disk.toml", RAYLEIGH), ("places/umi.toml", second)):
        path = write_tiny(directory, rounds=rounds, every=1, file_name=file)
        path.write_text(path.read_text() + channel)


def _study(directory: Path, axes: str, *, top: str = "", extra: str = "",
           seeds: str = "[1, 2]") -> Path:
    path = directory / "study.toml"
    path.write_text(f'{top}seeds = {seeds}\n[set]\n"model.hidden_units" = [8]\n'
                    f"[axes]\n{axes}\n{extra}")
    return path


def test_each_point_starts_from_its_scenario_axis_value(tmp_path):
    """A point's base is its ``scenario`` value (a file relative to the study or a shipped
    name); ``[set]`` and the other axes apply on top; the run name carries the value as
    written (sanitised), and the overrides never name ``scenario``."""
    _places(tmp_path)
    study = load_study(_study(tmp_path, f'scenario = ["disk.toml", "places/umi.toml"]\n'
                                        f'"{SCHEME}" = ["analog", "digital_ofdma"]'))
    assert study.scenario == ""
    assert study.scenario_files == {"disk.toml": str((tmp_path / "disk.toml").resolve()),
                                    "places/umi.toml": str((tmp_path / "places/umi.toml").resolve())}
    points = study.points()
    assert [p.name for p in points] == [
        f"scenario={place},{SCHEME}={scheme}-seed{seed}"
        for place in ("disk.toml", "places_umi.toml") for scheme in ("analog", "digital_ofdma")
        for seed in (1, 2)]
    for point in points:
        channel = point.scenario.channel
        expected = "iid_rayleigh" if point.axis_values["scenario"] == "disk.toml" else "umi"
        assert channel.model == expected
        assert point.scenario.uplink.scheme == point.axis_values[SCHEME]
        assert list(point.scenario.model.hidden_units) == [8]
        assert not any(item.startswith("scenario=") for item in point.overrides)


def test_a_shipped_name_is_a_scenario_axis_value(tmp_path):
    study = load_study(_study(tmp_path, 'scenario = ["quickstart", "munich_quickstart"]',
                              seeds="[1]"), validate=False)
    assert [Path(f).name for f in study.scenario_files.values()] == [
        "quickstart.toml", "munich_quickstart.toml"]
    assert [p.name for p in study.points(validate=False)] == [
        "scenario=quickstart-seed1", "scenario=munich_quickstart-seed1"]


@pytest.mark.parametrize(("axes", "top", "expected"), [
    ('scenario = ["disk.toml", "nope.toml"]', "",
     "axes.scenario: 'nope.toml' is not a scenario file"),
    ('scenario = ["disk.toml", "elsewhere"]', "",
     "axes.scenario: 'elsewhere' is neither a file"),
    ('scenario = ["disk.toml", 3]', "",
     "axes.scenario: must be a scenario file or a shipped scenario name (got 3)"),
    ('scenario = ["disk.toml", "disk.toml"]', "", "axes.scenario: values must be distinct"),
    ('scenario = ["disk.toml", "./disk.toml"]', "",
     "axes.scenario: './disk.toml' is the same scenario as 'disk.toml'"),
    ('scenario = ["disk.toml", "places"]', "",
     "axes.scenario: 'places' is not a scenario file (it resolves to"),
    ('scenario = []', "", "axes.scenario: must be a non-empty list of values (got [])"),
    ('scenario = ["disk.toml"]', 'scenario = "disk.toml"\n',
     "scenario: given beside the axis axes.scenario ['disk.toml']"),
    ('"cell.radius_m" = [50.0]', "", "scenario: missing; name the base scenario (a file or a "
     "shipped name), or sweep several: [axes] scenario = [...]"),
])
def test_a_bad_scenario_axis_is_one_line_naming_the_value(tmp_path, capsys, axes, top, expected):
    _places(tmp_path)
    study = _study(tmp_path, axes, top=top)
    with pytest.raises(StudyError) as error:
        load_study(study)
    assert [p for p in error.value.problems if p.startswith(expected)], error.value.problems
    out = tmp_path / "out"
    assert main(["study", "run", str(study), "--out", str(out)]) == 2
    assert expected in capsys.readouterr().err
    assert not out.exists(), "nothing runs"


def test_a_bad_point_names_its_scenario(tmp_path):
    """A value one place takes and the other refuses (devices 5 m from the BS: too near
    for a UMi cell): the error line names the point (its ``scenario`` value) and the
    seed; a ``scenario`` in ``[set]`` is refused."""
    _places(tmp_path)
    study = _study(tmp_path, 'scenario = ["disk.toml", "places/umi.toml"]\n'
                             '"cell.min_distance_m" = [5.0, 20.0]', seeds="[1]")
    with pytest.raises(StudyError) as error:
        load_study(study)
    (problem,) = error.value.problems
    assert problem.startswith('point scenario = "places/umi.toml", cell.min_distance_m = 5.0, '
                              "seed 1: cell.min_distance_m"), problem
    study.write_text('scenario = "disk.toml"\nseeds = [1]\n[set]\nscenario = "places/umi.toml"\n')
    with pytest.raises(StudyError, match=r"set\.scenario: the base scenario is"):
        load_study(study)


def test_only_set_and_labels_with_a_scenario_axis(tmp_path):
    """``--only scenario=...`` keeps the points of that base; ``--set`` is checked on
    every base (a key one refuses is one line naming that ``scenario`` value);
    ``[only]`` and ``[labels]`` take the axis as any other."""
    _places(tmp_path)
    path = _study(tmp_path, f'scenario = ["disk.toml", "places/umi.toml"]\n'
                            f'"{SCHEME}" = ["analog", "digital_ofdma"]',
                  extra=f'[only]\n"{SCHEME}" = {{scenario = ["disk.toml"]}}\n'
                        '[labels]\nscenario = "place"\n"scenario=places/umi.toml" = "UMi cell"\n')
    study = load_study(path, validate=False)
    assert [p.name for p in study.points()] == [
        f"scenario=disk.toml,{SCHEME}={s}-seed{seed}" for s in ("analog", "digital_ofdma")
        for seed in (1, 2)] + [f"scenario=places_umi.toml,{SCHEME}=analog-seed{seed}"
                               for seed in (1, 2)]
    options = parse_options(study, only=["scenario=places/umi.toml"], rounds=1)
    points = options.apply(study).points()
    assert [p.name for p in points] == [f"scenario=places_umi.toml,{SCHEME}=analog-seed{s}"
                                        for s in (1, 2)]
    assert all(p.scenario.rounds == 1 and p.scenario.channel.model == "umi" for p in points)
    assert options.flags() == "--rounds 1 --only scenario=places/umi.toml"
    with pytest.raises(StudyError) as error:
        parse_options(study, overrides=["cell.min_distance_m=5"])
    assert len(error.value.problems) == 1
    assert error.value.problems[0].startswith('scenario = "places/umi.toml": cell.min_distance_m')
    with pytest.raises(StudyError, match=r"--set scenario=disk\.toml: scenario is an axis"):
        parse_options(study, overrides=["scenario=disk.toml"])
    labels = study.labels
    assert axis_label("scenario", labels) == "place"
    assert value_label("scenario", "places/umi.toml", labels) == "UMi cell"
    assert value_label("scenario", "disk.toml", labels) == "place: disk"
    assert _combination_label(["scenario", SCHEME], ("places/umi.toml", "analog"), labels,
                              study.only) == "UMi cell"


def test_a_scenario_axis_value_reads_as_its_name():
    assert axis_label("scenario") == "scenario"
    assert value_label("scenario", "munich_quickstart") == "scenario: munich_quickstart"
    assert value_label("scenario", "places/umi.toml") == "scenario: places/umi"
    assert value_text("scenario", "places/umi.toml") == "places/umi"


def test_validate_a_study_over_two_scenarios(tmp_path, capsys):
    _places(tmp_path)
    study = _study(tmp_path, 'scenario = ["disk.toml", "places/umi.toml"]')
    assert main(["validate", str(study), "--only", "scenario=disk.toml"]) == 0
    printed = capsys.readouterr().out
    assert "2 runs (2 seeds x 1 axis combinations), every point valid" in printed, printed


def test_a_tiny_study_runs_over_two_scenario_files_and_resumes_each(tmp_path, capsys):
    """Two places (i.i.d. and flat Rayleigh channels), one round each, in one worker:
    every trace holds its own base, ``status.json`` names each run's base, the report's
    table has the axis as written, a rerun skips both; a resume to two rounds compares
    each run with its own base (the checks the worker makes, read-only here: the edited
    place is refused, the other resumes)."""
    import h5py

    from cosim.scenario import scenario_to_toml
    from cosim.study.report import study_table
    from cosim.trace import TraceError, read_trace
    from cosim.trace.compare import _check_resumable

    _places(tmp_path, rounds=1, second='\n[channel]\nmodel = "flat_rayleigh"\n')
    study = _study(tmp_path, 'scenario = ["disk.toml", "places/umi.toml"]', seeds="[1]")
    out = tmp_path / "out"
    assert main(["study", "run", str(study), "--out", str(out), "--num-cpus", "1"]) == 0
    names = {"disk.toml": "scenario=disk.toml-seed1",
             "places/umi.toml": "scenario=places_umi.toml-seed1"}
    status = json.loads((out / "status.json").read_text())
    assert status["scenario"] is None
    assert {run["scenario"] for run in status["runs"].values()} == {
        str((tmp_path / place).resolve()) for place in names}
    for place, model in (("disk.toml", "iid_rayleigh"), ("places/umi.toml", "flat_rayleigh")):
        trace = read_trace(out / "runs" / f"{names[place]}.h5")
        assert trace.completed_rounds == 1 and trace.scenario["channel"]["model"] == model
    table, axes = study_table(out)
    assert axes == ["scenario"] and sorted(set(table["scenario"])) == sorted(names)
    assert main(["study", "run", str(study), "--out", str(out), "--num-cpus", "1"]) == 0
    assert "2 runs, 2 complete already" in capsys.readouterr().out
    umi = tmp_path / "places/umi.toml"  # an edited place, and two rounds asked of both
    umi.write_text(umi.read_text().replace("learning_rate = 0.05", "learning_rate = 0.07"))
    study.write_text(study.read_text().replace("[set]\n", "[set]\nrounds = 2\n"))
    for point in load_study(study).points(out):
        path = out / "runs" / f"{point.name}.h5"
        with h5py.File(path, "r") as file:
            if point.axis_values["scenario"] == "disk.toml":
                _check_resumable(file, path, scenario_to_toml(point.scenario), True)
            else:
                with pytest.raises(TraceError, match="the scenario differs"):
                    _check_resumable(file, path, scenario_to_toml(point.scenario), True)
