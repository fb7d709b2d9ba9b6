"""A run in a ray-traced scene (``channel.model = "ray_traced"``) through ``cosim``: the
tiny scenario in the tiny scene of ``tests/phy/tiny_scene.py``, traced once and replayed
from the cache bit for bit, and the refusals that name their key in one line."""

from __future__ import annotations

import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
from matplotlib.collections import PathCollection, PolyCollection
from test_trace_docs import DOC, _pattern, documented_tables
from tiny_scenario import write_tiny

from cosim.cli import main
from cosim.plots.phy import cell_map_figure
from cosim.scenario import load_scenario, with_overrides
from cosim.trace import read_trace
from cosim.trace.file_format import TIMING_COLUMNS

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "phy"))
from tiny_scene import BUILDING, write_scene

SETS = ['channel.model="ray_traced"', 'channel.scene="scene.xml"', "channel.bs_position_m=[2.0, 3.0, 10.0]",
        "channel.samples_per_source=20000", 'cell.layout="radio_map"', "cell.path_gain_range_db=[-110.0, -40.0]",
        "cell.radius_m=40.0", "cell.min_distance_m=5.0", "cell.num_devices=4"]


def _args(scenario: Path, *more: str) -> list[str]:
    cache = f'channel.cache_dir="{(scenario.parent / "cache").as_posix()}"'
    return [str(scenario), *(item for s in (*SETS, cache, *more) for item in ("--set", s))]


def _rounds(path: Path) -> dict[str, np.ndarray]:
    with h5py.File(path, "r") as trace:
        return {name: trace["rounds"][name][()] for name in trace["rounds"]
                if isinstance(trace["rounds"][name], h5py.Dataset) and name not in TIMING_COLUMNS}


def test_a_run_in_a_scene_replays_and_resumes_from_the_cache_bit_for_bit(tmp_path, capsys, monkeypatch):
    """Two rounds traced and run; then one round replayed from the cache into another
    trace and that trace resumed to two rounds: neither traces nor loads the scene, and
    both end bit for bit as the first; its cell map (:func:`_check_the_map`)."""
    write_scene(tmp_path)
    scenario = write_tiny(tmp_path, rounds=2, every=1)
    assert main(["run", *_args(scenario), "--no-plots"]) == 0
    first = capsys.readouterr().err
    assert "ray tracing: 4 devices in scene.xml" in first  # progress shown
    again = f'trace.path="{(tmp_path / "again.h5").as_posix()}"'
    assert main(["run", *_args(scenario, again, "rounds=1"), "--no-plots"]) == 0
    assert main(["run", *_args(scenario, again), "--resume", "--no-plots"]) == 0
    assert "ray tracing" not in capsys.readouterr().err  # nothing traced, nothing loaded
    traces = [tmp_path / "tiny-seed3.h5", tmp_path / "again.h5"]
    with h5py.File(traces[0], "r") as a, h5py.File(traces[1], "r") as b:
        assert a.attrs["ray_traced_paths"] == b.attrs["ray_traced_paths"]
        assert str(a.attrs["ray_traced_paths"]).endswith(".npz sha256:" + a.attrs["ray_traced_paths"][-64:])
        np.testing.assert_array_equal(a["devices/path_gain"][()], b["devices/path_gain"][()])
        assert np.all(a["devices/path_gain"][()] > 0)
    first_rounds, again = _rounds(traces[0]), _rounds(traces[1])
    assert first_rounds.keys() == again.keys() and "test_accuracy" in first_rounds
    for name, values in first_rounds.items():
        np.testing.assert_array_equal(values, again[name], err_msg=name)
    _check_the_map(read_trace(traces[0]), capsys, monkeypatch)


def _check_the_map(trace, capsys, monkeypatch) -> None:
    """The cell map of a traced drop: the BS where it stands, the building from above
    (its roof inside the building's outline, the ground left out), the devices coloured
    by path gain; without the ray tracer the devices only, said in one line."""
    panel = cell_map_figure([trace], ["ray traced"]).axes[0]
    assert np.mean(panel.get_xlim()) == pytest.approx(2.0) and np.mean(panel.get_ylim()) == pytest.approx(3.0)
    (roof,) = [c for c in panel.collections if isinstance(c, PolyCollection)]
    corners = np.concatenate([path.vertices for path in roof.get_paths()])
    x0, x1, y0, y1, _, _ = BUILDING
    assert np.all((corners >= [x0, y0]) & (corners <= [x1, y1]))
    bs = [line for line in panel.get_lines() if line.get_marker() == "^"]
    assert len(bs) == 1 and tuple(bs[0].get_xydata()[0]) == (2.0, 3.0)
    (dots,) = [c for c in panel.collections if isinstance(c, PathCollection) and c.get_array() is not None]
    np.testing.assert_allclose(dots.get_array(), 10 * np.log10(trace.devices["path_gain"]))
    assert "buildings (from above)" in [t.get_text() for t in panel.figure.legends[0].get_texts()]
    capsys.readouterr()

    def no_llvm():
        raise ValueError('channel.model = "ray_traced": Sionna RT cannot start (no LLVM)')

    monkeypatch.setattr("phy.ray_tracing._import_rt", no_llvm)
    panel = cell_map_figure([trace], ["ray traced"]).axes[0]
    assert not [c for c in panel.collections if isinstance(c, PolyCollection)]
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("cell_map: devices only") and "no LLVM" in lines[0]


def _refused(capsys, *args: str) -> str:
    assert main(list(args)) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


def test_an_unknown_scene_is_refused_naming_the_key(tmp_path, capsys):
    scenario = write_tiny(tmp_path)
    err = _refused(capsys, "validate", *_args(scenario, 'channel.scene="atlantis"'))
    assert "channel.scene:" in err and "'atlantis'" in err


def test_a_scene_file_outside_the_scenario_folder_is_refused(tmp_path, capsys):
    write_scene(tmp_path / "elsewhere")
    (tmp_path / "here").mkdir()
    scenario = write_tiny(tmp_path / "here")
    err = _refused(capsys, "validate", *_args(scenario, 'channel.scene="../elsewhere/scene.xml"'))
    line = next(line for line in err.splitlines() if "channel.scene" in line)
    assert "'../elsewhere/scene.xml'" in line and "outside the scenario's folder" in line


def test_a_bs_inside_a_building_is_refused_naming_the_key(tmp_path, capsys):
    write_scene(tmp_path)
    scenario = write_tiny(tmp_path)
    err = _refused(capsys, "run", *_args(scenario, "channel.bs_position_m=[25.0, 0.0, 5.0]"), "--no-plots")
    line = next(line for line in err.splitlines() if "channel.bs_position_m" in line)
    assert "[25.0, 0.0, 5.0]" in line and "inside a building" in line
    assert not list(tmp_path.glob("*.h5")), "a refused run writes no trace"


def test_a_scene_layout_needs_the_ray_traced_channel(tmp_path, capsys):
    scenario = write_tiny(tmp_path)
    err = _refused(capsys, "validate", str(scenario), "--set", 'cell.layout="radio_map"',
                   "--set", "cell.path_gain_range_db=[-110.0, -40.0]")
    assert "cell.layout: = 'radio_map'" in err and "channel.model = 'ray_traced'" in err
    err = _refused(capsys, "validate", *_args(scenario, 'cell.layout="uniform_disk"'))
    assert "cell.layout: = 'uniform_disk'" in err


def test_validate_prints_the_estimated_tracing_cost(tmp_path, capsys):
    write_scene(tmp_path)
    scenario = write_tiny(tmp_path)
    assert main(["validate", *_args(scenario)]) == 0
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if line.startswith("  tracing   about "))
    assert "4 devices, 20,000 rays, depth 3" in line and "measured 2026-12-02" in line
    assert not (tmp_path / "cache").exists(), "validate traces nothing"


def test_validate_of_a_study_prints_the_tracing_cost_of_each_drop_size(tmp_path, capsys):
    write_scene(tmp_path)
    write_tiny(tmp_path)
    sets = "\n".join(f'"{key}" = {value}' for key, value in (item.split("=", 1) for item in SETS)
                     if key != "cell.num_devices")
    (tmp_path / "study.toml").write_text(f'scenario = "tiny.toml"\nseeds = [1, 2]\n[set]\n{sets}\n'
                                         '[axes]\n"cell.num_devices" = [3, 4]\n')
    assert main(["validate", str(tmp_path / "study.toml")]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("  tracing   about ")]
    assert len(lines) == 2 and "3 devices" in lines[0] and "4 devices" in lines[1]


def test_the_scene_file_resolves_beside_the_scenario_and_survives_overrides(tmp_path):
    write_scene(tmp_path / "place")
    scenario = write_tiny(tmp_path / "place")
    overrides = [item for s in SETS for item in ("--set", s)][1::2]
    loaded = load_scenario(scenario, overrides)
    assert loaded.channel.scene == str((tmp_path / "place" / "scene.xml").resolve())
    changed = with_overrides(loaded, {"rounds": 3})  # re-validated from its dump (unset keys None)
    assert changed.channel == loaded.channel and changed.cell == loaded.cell and changed.rounds == 3
    plain = with_overrides(load_scenario(None), {"rounds": 3})
    assert plain.channel.scene is None and plain.channel.model == "iid_rayleigh"


MOVING = ['mobility.model="straight"', "mobility.speed_mps=[1.0, 30.0]", "mobility.compute_seconds_per_round=0.5",
          'channel.variation="static"', "trace.per_device=true"]


def _per_device(path: Path) -> dict[str, np.ndarray]:
    with h5py.File(path, "r") as trace:
        return {name: value[()] for name, value in trace["rounds/per_device"].items()}


def _resumed_after_round_0_is(tmp_path: Path, scenario: Path, sets: list[str], rounds: dict, per_device: dict) -> None:
    """The run stopped after round 0 and resumed equals the straight run's ``rounds`` and
    ``per_device`` columns bit for bit."""
    again = f'trace.path="{(tmp_path / "again.h5").as_posix()}"'
    assert main(["run", *_args(scenario, *sets, again, "rounds=1"), "--no-plots"]) == 0
    assert main(["run", *_args(scenario, *sets, again), "--resume", "--no-plots"]) == 0
    resumed = _rounds(tmp_path / "again.h5")
    for name, values in rounds.items():
        np.testing.assert_array_equal(resumed[name], values, err_msg=name)
    resumed = _per_device(tmp_path / "again.h5")
    assert resumed.keys() == per_device.keys()
    for name, values in per_device.items():
        np.testing.assert_array_equal(resumed[name], values, err_msg=name)


@pytest.mark.parametrize("scheme", ["analog", "digital_ofdma"])
def test_devices_move_in_the_scene_and_a_resumed_run_is_the_straight_one(tmp_path, capsys, scheme):
    """Straight-line motion in the scene (:mod:`phy.moving_rays`): positions in scene
    coordinates, within the cell's walls around the BS, moving between rounds; the
    response changing from round to round around the traced path gain; each phase's aging correlation the paths' own and below 1 for
    some device; a run stopped after round 0 and resumed equals the straight run."""
    write_scene(tmp_path)
    scenario = write_tiny(tmp_path, rounds=2, every=1)
    sets = [*MOVING, f'uplink.scheme="{scheme}"']
    assert main(["run", *_args(scenario, *sets), "--no-plots"]) == 0
    straight = tmp_path / "tiny-seed3.h5"
    per_device, rounds = _per_device(straight), _rounds(straight)
    xy = np.stack([per_device["position_x_m"], per_device["position_y_m"]], -1)  # [T, K, 2]
    r = np.linalg.norm(xy - [2.0, 3.0], axis=-1)
    assert np.all((r >= 5.0 - 1e-9) & (r <= 40.0 + 1e-9)) and np.all(np.linalg.norm(xy[1] - xy[0], axis=-1) > 0)
    tables = documented_tables(DOC.read_text())
    for name in per_device:  # every column documented (docs/trace.md)
        assert any(_pattern(row[0], ("rho", "nu", "delta")).fullmatch(name) for row in tables["rounds/per_device"]), name
    displacement = per_device["traced_displacement_m"]
    assert np.all(displacement[0] == 0.0) and np.all(displacement[1] > 0)
    assert np.all(displacement[1] <= per_device["speed_mps"][0] * rounds["round_seconds"][0] * (1 + 1e-9))
    gain = per_device["mean_channel_gain"]  # the paths turned: the response changed, not its scale
    assert np.any(gain[1] != gain[0])
    with h5py.File(straight, "r") as trace:
        assert np.all(np.abs(np.log10(gain / trace["devices/path_gain"][()])) < 2.0)
    aging = per_device["aging_correlation_rho"]
    assert np.nanmin(aging) < 0.999 and np.all(np.isnan(aging) | (np.abs(aging) <= 1.0))
    capsys.readouterr()
    _resumed_after_round_0_is(tmp_path, scenario, sets, rounds, per_device)


def test_devices_whose_paths_are_traced_anew_as_they_walk_resume_to_the_straight_run(tmp_path, capsys):
    """``channel.retrace_every_m = 2`` (:mod:`phy.retraced_rays`), its tracing cost in
    ``cosim validate``: devices of 1-30 m/s walk past anchors in the 0.5 s of computation, are traced there (progress shown), and at the
    next round use those paths (``trace_anchor`` > 0, within 2 m of them where no anchor
    was skipped); a run stopped after round 0 and resumed equals the straight run."""
    write_scene(tmp_path)
    scenario = write_tiny(tmp_path, rounds=2, every=1)
    sets = [*MOVING, "channel.retrace_every_m=2.0"]
    assert main(["validate", *_args(scenario, *sets)]) == 0
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("  tracing   about "))
    assert "re-traced every 2 m walked" in line and "at most 15 anchors per device per second" in line
    assert main(["run", *_args(scenario, *sets), "--no-plots"]) == 0
    assert capsys.readouterr().err.count("ray tracing: ") >= 4  # the drop, and anchors traced again
    straight = tmp_path / "tiny-seed3.h5"
    per_device, rounds = _per_device(straight), _rounds(straight)
    tables = documented_tables(DOC.read_text())
    for name in per_device:  # every column documented (docs/trace.md)
        assert any(_pattern(row[0], ("rho", "nu", "delta")).fullmatch(name) for row in tables["rounds/per_device"]), name
    anchor, displacement = per_device["trace_anchor"], per_device["traced_displacement_m"]
    assert np.all(anchor[0] == 0) and np.any(anchor[1] > 0)
    travelled = per_device["speed_mps"][1] * rounds["round_start_s"][1]
    expected = np.floor(travelled / 2.0)
    assert np.all(anchor[1] <= expected)
    kept = anchor[1] == expected  # no anchor skipped: within R of the paths' anchor
    np.testing.assert_allclose(displacement[1][kept], travelled[kept] - 2.0 * expected[kept], atol=1e-6)
    _resumed_after_round_0_is(tmp_path, scenario, sets, rounds, per_device)


@pytest.mark.parametrize(("more", "key"), [
    (['mobility.model="straight"', "mobility.speed_mps=3.0"], "channel.variation"),  # the default redraws phases
    ([*MOVING, "channel.redrop_every_rounds=2"], "channel.redrop_every_rounds"),
    ([*MOVING, "mobility.carrier_frequency_hz=2.0e9"], "mobility.carrier_frequency_hz"),
    ([*MOVING, 'ofdm.domain="time"'], "ofdm.domain"),
    (['channel.variation="static"', "channel.retrace_every_m=2.0"], "channel.retrace_every_m"),  # nothing moves
])
def test_what_motion_in_a_scene_does_not_support_is_one_line_naming_the_key(tmp_path, capsys, more, key):
    write_scene(tmp_path)
    scenario = write_tiny(tmp_path)
    err = _refused(capsys, "validate", *_args(scenario, *more))
    line = next(line for line in err.splitlines() if key in line)
    assert line.lstrip().startswith(key)
