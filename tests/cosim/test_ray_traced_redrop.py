"""New drops every N rounds (``channel.redrop_every_rounds``) in the tiny scene of
``tests/phy/tiny_scene.py``: the devices placed anew at rounds N, 2N, ..., the first drop
the one without the key, a replay and a resume bit for bit from the cache, what
``cosim validate`` counts, and the refusals in one line naming the key."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import h5py
import numpy as np
from test_ray_traced_run import _args, _refused, _rounds
from tiny_scenario import write_tiny

from cosim.cli import main

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "phy"))
from tiny_scene import write_scene

REDROP = "channel.redrop_every_rounds=2"
TRACED = re.compile(r"ray tracing: \d+ devices in scene\.xml")


def _per_device(path: Path) -> dict[str, np.ndarray]:
    with h5py.File(path, "r") as trace:
        group = trace["rounds/per_device"]
        return {name: group[name][()] for name in ("position_x_m", "position_y_m", "path_gain")} | {
            "first_positions": trace["devices/position_m"][()], "first_gain": trace["devices/path_gain"][()]}


def test_new_drops_every_two_rounds_replay_and_resume_bit_for_bit(tmp_path, capsys):
    """Four rounds, a new drop every two: the positions and gains change at round 2 and
    not at 1 or 3, drop 0 is the run's without the key, two drops traced; a replay of
    three rounds resumed to four neither traces nor loads the scene and ends bit for bit
    as the first run (the resume at round 3, inside the second drop)."""
    write_scene(tmp_path)
    scenario = write_tiny(tmp_path, rounds=4, every=1)
    assert main(["run", *_args(scenario, REDROP), "--no-plots"]) == 0
    err = capsys.readouterr().err
    assert len(TRACED.findall(err)) >= 2, "each drop traced"
    plain = f'trace.path="{(tmp_path / "plain.h5").as_posix()}"'
    assert main(["run", *_args(scenario, plain, "rounds=2"), "--no-plots"]) == 0
    assert "ray tracing" not in capsys.readouterr().err  # the first drop from the cache
    first = tmp_path / "tiny-seed3.h5"
    per_device = _per_device(first)
    xy = np.stack([per_device["position_x_m"], per_device["position_y_m"]], -1)  # [T, K, 2]
    np.testing.assert_array_equal(xy[0], per_device["first_positions"])
    np.testing.assert_array_equal(per_device["path_gain"][0], per_device["first_gain"])
    for a, b in ((0, 1), (2, 3)):
        np.testing.assert_array_equal(xy[a], xy[b])
        np.testing.assert_array_equal(per_device["path_gain"][a], per_device["path_gain"][b])
    assert not np.array_equal(xy[1], xy[2]) and not np.array_equal(per_device["path_gain"][1],
                                                                      per_device["path_gain"][2])
    redropped = _rounds(first)
    np.testing.assert_array_equal(redropped["drop_index"], [0, 0, 1, 1])
    without = _rounds(tmp_path / "plain.h5")  # drop 0 is the run's without the key, bit for bit
    assert "drop_index" not in without
    for name, values in without.items():
        np.testing.assert_array_equal(values, redropped[name][:2], err_msg=name)

    again = f'trace.path="{(tmp_path / "again.h5").as_posix()}"'
    assert main(["run", *_args(scenario, REDROP, again, "rounds=3"), "--no-plots"]) == 0
    assert main(["run", *_args(scenario, REDROP, again), "--resume", "--no-plots"]) == 0
    assert "ray tracing" not in capsys.readouterr().err  # both drops from the cache
    replayed = _rounds(tmp_path / "again.h5")
    assert replayed.keys() == redropped.keys()
    for name, values in redropped.items():
        np.testing.assert_array_equal(values, replayed[name], err_msg=name)
    again_per_device = _per_device(tmp_path / "again.h5")
    for name, values in per_device.items():
        np.testing.assert_array_equal(values, again_per_device[name], err_msg=name)


def test_validate_counts_the_tracing_cost_of_every_drop(tmp_path, capsys):
    write_scene(tmp_path)
    scenario = write_tiny(tmp_path, rounds=5)
    assert main(["validate", *_args(scenario, REDROP)]) == 0
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("  tracing   about "))
    seconds = float(re.search(r"about (\d+) s wall per new drop", line).group(1))
    total = float(re.search(r"3 drops \(a new one every 2 rounds\): about (\d+) s", line).group(1))
    assert abs(total - 3 * seconds) <= 1.5
    assert main(["validate", *_args(scenario)]) == 0
    assert "drops" not in next(line for line in capsys.readouterr().out.splitlines()
                               if line.startswith("  tracing   about "))


def test_a_redrop_of_given_positions_is_refused_naming_the_key_and_the_layout(tmp_path, capsys):
    write_scene(tmp_path)
    scenario = write_tiny(tmp_path)
    err = _refused(capsys, "validate", *_args(scenario, REDROP, 'cell.layout="scene_explicit"',
                                              "cell.positions_m=[[-30.0, 0.0], [0.0, -20.0], [12.0, 15.0], "
                                              "[0.0, 20.0]]"))
    line = next(line for line in err.splitlines() if "channel.redrop_every_rounds" in line)
    assert "cell.layout = 'scene_explicit'" in line


def test_a_redrop_with_an_eavesdropper_is_refused_naming_the_key(tmp_path, capsys):
    write_scene(tmp_path)
    scenario = write_tiny(tmp_path)
    err = _refused(capsys, "validate", *_args(scenario, REDROP, "privacy.eavesdropper_distance_m=50.0"))
    line = next(line for line in err.splitlines() if "channel.redrop_every_rounds" in line)
    assert "privacy.eavesdropper_distance_m" in line
