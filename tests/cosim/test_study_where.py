"""A study's ``[where]``: keys set only at the points where an axis takes one value (the
one-bit vote with signSGD beside the analog scheme with the proposed method; a speed
axis whose 0 is the block fading), and its refusals, each naming the key."""

from __future__ import annotations

import pytest
from tiny_scenario import write_tiny

from cosim.cli import main
from cosim.study import StudyError, load_study


def _study(directory, where: str, axes: str = '"uplink.scheme" = ["analog", "one_bit"]'):
    write_tiny(directory, rounds=1, every=1)
    path = directory / "study.toml"
    path.write_text(f'scenario = "tiny.toml"\nseeds = [1, 2]\n[set]\n"model.hidden_units" = [8]\n'
                    f'[axes]\n{axes}\n[where]\n{where}\n')
    return path


def test_where_sets_a_key_at_one_axis_value_only(tmp_path):
    study = load_study(_study(tmp_path, '"uplink.scheme=one_bit" = {"algorithm.name" = "signsgd"}'))
    points = study.points()
    algorithms = {(p.axis_values["uplink.scheme"], p.seed): p.scenario.algorithm.name for p in points}
    base = algorithms[("analog", 1)]
    assert base != "signsgd"  # the tiny scenario's own algorithm where the condition fails
    assert algorithms == {("analog", 1): base, ("analog", 2): base,
                          ("one_bit", 1): "signsgd", ("one_bit", 2): "signsgd"}
    # the run names are the axes' alone: the setting follows from the axis value
    assert [p.name for p in points] == ["uplink.scheme=analog-seed1", "uplink.scheme=analog-seed2",
                                        "uplink.scheme=one_bit-seed1", "uplink.scheme=one_bit-seed2"]
    assert "algorithm.name=\"signsgd\"" in points[2].overrides


def test_without_where_the_one_bit_point_is_refused(tmp_path):
    """The reason [where] exists: the one-bit vote takes signSGD only."""
    path = _study(tmp_path, "")
    path.write_text(path.read_text().replace("[where]\n", ""))
    with pytest.raises(StudyError) as error:
        load_study(path)
    assert any("uplink.scheme" in p and "one_bit" in p for p in error.value.problems), error.value.problems


def test_where_makes_a_speed_axis_zero_the_block_fading(tmp_path):
    path = _study(tmp_path, '"mobility.speed_mps=0" = {"mobility.model" = "static"}',
                  axes='"mobility.speed_mps" = [0.0, 8.33]')
    text = path.read_text().replace('[set]\n', '[set]\n"mobility.model" = "straight"\n')
    path.write_text(text)
    models = {(p.axis_values["mobility.speed_mps"], p.seed): p.scenario.mobility.model
              for p in load_study(path).points()}
    assert models == {(0.0, 1): "static", (0.0, 2): "static", (8.33, 1): "straight", (8.33, 2): "straight"}


@pytest.mark.parametrize(("where", "expected"), [
    ('"uplink.scheme=digital" = {"algorithm.name" = "signsgd"}', "where.uplink.scheme=digital: names no axis value"),
    ('"uplink.scheme=one_bit" = 3', "where.uplink.scheme=one_bit: must be a table"),
    ('"uplink.scheme=one_bit" = {seed = 3}', "where.uplink.scheme=one_bit.seed: set by the study"),
    ('"uplink.scheme=one_bit" = {"uplink.scheme" = "analog"}', "where.uplink.scheme=one_bit.uplink.scheme: an axis"),
    ('"uplink.scheme=one_bit" = {"algorithm.name" = "fedavg"}', "uplink.scheme"),
])
def test_bad_where_exits_2_naming_the_key(tmp_path, capsys, where, expected):
    study = _study(tmp_path, where)
    out = tmp_path / "out"
    assert main(["study", "run", str(study), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert expected in err and "Traceback" not in err, err
    assert not out.exists(), "nothing is written for a bad study"


def test_two_conditions_that_meet_may_not_set_one_key_differently(tmp_path):
    path = _study(tmp_path, '"uplink.scheme=one_bit" = {"algorithm.name" = "signsgd"}\n'
                  '"power.tx_power_dbm=10" = {"algorithm.name" = "fedavg"}',
                  axes='"uplink.scheme" = ["analog", "one_bit"]\n"power.tx_power_dbm" = [10.0, 20.0]')
    with pytest.raises(StudyError) as error:
        load_study(path)
    assert any(p.startswith("where.power.tx_power_dbm=10.algorithm.name: 'fedavg', and "
                            "where.uplink.scheme=one_bit.algorithm.name: 'signsgd'")
               for p in error.value.problems), error.value.problems
