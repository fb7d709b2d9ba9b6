"""Resume tells the truth, and the traceback cases of the fault corpus end in one line:
a finished trace's resume prints its real final metrics, a trace from other code is
resumed with a warning and the versions recorded, a whole table given to --set merges
key by key, and bad checkpoints, trace paths, TensorBoard targets and math-text labels
are one-line errors (exit 2) or clean runs."""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np
import pytest
from small_trace import write_small_trace
from tiny_scenario import write_tiny

from cosim.cli import main
from cosim.scenario import ScenarioError, load_scenario
from cosim.trace import read_trace


@pytest.fixture
def finished(tmp_path, capsys):
    write_tiny(tmp_path, rounds=2, every=1)
    scenario = tmp_path / "tiny.toml"
    assert main(["run", str(scenario), "--no-plots"]) == 0
    capsys.readouterr()
    (trace,) = tmp_path.glob("*.h5")
    return scenario, trace


def test_resuming_a_finished_trace_prints_its_real_metrics(finished, capsys):
    scenario, trace = finished
    accuracy = read_trace(trace).rounds["test_accuracy"][-1]
    assert main(["run", str(scenario), "--resume", "--no-plots"]) == 0
    out = capsys.readouterr().out
    assert f"test accuracy {accuracy:.4f}" in out and "nan" not in out


def test_a_trace_from_other_code_resumes_with_a_warning_and_a_record(finished, capsys):
    scenario, trace = finished
    with h5py.File(trace, "r+") as f:
        f.attrs["version_aircomp-cosim"] = "0.0.1"
    assert main(["run", str(scenario), "--resume", "--set", "rounds=3", "--no-plots"]) == 0
    err = capsys.readouterr().err
    assert "was written by other code (aircomp-cosim 0.0.1 ->" in err
    with h5py.File(trace, "r") as f:
        history = json.loads(f.attrs["resumed_with_versions"])
    assert history[0]["from_round"] == 2


@pytest.mark.parametrize(("damage", "expected"), [
    ("attrs", "attrs_json is not JSON"),
    ("shape", "its checkpoint does not fit this scenario"),
])
def test_a_bad_checkpoint_is_one_line(finished, capsys, damage, expected):
    scenario, trace = finished
    with h5py.File(trace, "r+") as f:
        slots = [s for s in f["checkpoint"].values() if s.attrs["completed_rounds"] == 2]
        for slot in slots:
            if damage == "attrs":
                slot.attrs["attrs_json"] = "{not json"
            else:
                name = next(iter(slot))
                del slot[name]
                slot.create_dataset(name, data=np.zeros(3, np.float32))
    before = trace.read_bytes()
    assert main(["run", str(scenario), "--resume", "--set", "rounds=3", "--no-plots"]) == 2
    err = capsys.readouterr().err
    assert expected in err and "Traceback" not in err, err
    if damage == "attrs":
        assert trace.read_bytes() == before


def test_a_whole_table_given_to_set_merges_key_by_key():
    scenario = load_scenario(None, ["cell.num_devices=7", "cell={radius_m=50.0}"])
    assert scenario.cell.num_devices == 7 and scenario.cell.radius_m == 50.0


@pytest.mark.parametrize("path", ["runs/{name:300}.h5", "runs/{seed:10000000000}.h5", "runs/{name!r}.h5"])
def test_a_trace_path_with_a_format_spec_is_refused(path):
    with pytest.raises(ScenarioError, match=r"trace\.path: .*take no format spec"):
        load_scenario(None, [f'trace.path="{path}"'])


def test_a_tensorboard_target_that_is_a_file_is_refused_before_the_trace(tmp_path, capsys):
    write_tiny(tmp_path, rounds=1, every=1)
    board = tmp_path / "board"
    board.write_text("a file")
    assert main(["run", str(tmp_path / "tiny.toml"), "--tensorboard", str(board)]) == 2
    assert "--tensorboard" in capsys.readouterr().err
    assert not list(tmp_path.glob("*.h5"))


def test_math_text_in_labels_is_drawn_as_text(tmp_path):
    trace = write_small_trace(tmp_path / "t.h5")
    assert main(["plot", str(trace), "--out", str(tmp_path / "figs"), "--labels", r"$\frac{$"]) == 0
    assert (tmp_path / "figs" / "accuracy_vs_uplink_symbols.png").is_file()


def test_an_impossible_noise_power_leaves_no_empty_trace(tmp_path, capsys):
    write_tiny(tmp_path, rounds=1, every=1)
    status = main(["run", str(tmp_path / "tiny.toml"), "--set", "power.noise_power_dbm=300",
                   "--no-plots"])
    err = capsys.readouterr().err
    assert status == 2 and "Traceback" not in err, err
    assert not list(Path(tmp_path).glob("*.h5"))
