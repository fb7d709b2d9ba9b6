"""The `cosim` command: bad input exits 2 naming the field and writes nothing; run, inspect, plot (a killed run: tests/cosim/test_run_faults.py)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from tiny_scenario import write_tiny

from cosim.cli import main

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (("[cell]", "[cell]\nradius_mm = 3.0"), "radius_mm"),  # unknown key
        (("num_devices = 8", 'num_devices = "many"'), "cell.num_devices"),  # wrong type
        (("radius_m = 100.0", "radius_m = -5.0"), "cell.radius_m"),  # out of range
        (('architecture = "mlp"', 'architecture = "transformer"'), "model.architecture"),
    ],
)
def test_bad_scenario_exits_2_naming_the_field(tmp_path, capsys, edit, field):
    path = write_tiny(tmp_path)
    path.write_text(path.read_text().replace(*edit))
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err
    assert field in err
    assert "Traceback" not in err
    assert not list(tmp_path.glob("*.h5")), "a rejected scenario must write nothing"


def test_missing_dataset_exits_2_naming_where_to_put_it(tmp_path, capsys):
    path = write_tiny(tmp_path)
    text = path.read_text().replace('dataset = "synthetic"', 'dataset = "cifar100"')
    path.write_text(text.replace("[data]", f'[data]\ndata_dir = "{(tmp_path / "none").as_posix()}"'))
    assert main(["run", str(path), "--set", "model.hidden_units=[4]"]) == 2
    err = capsys.readouterr().err
    assert "cifar-100-python" in err and "Traceback" not in err
    assert not list(tmp_path.glob("*.h5"))


def test_misspelled_key_suggests_the_nearest(tmp_path, capsys):
    path = write_tiny(tmp_path)
    path.write_text(path.read_text().replace("radius_m = 100.0", "radius_mm = 100.0"))
    assert main(["validate", str(path)]) == 2
    assert "radius_m" in capsys.readouterr().err.split("radius_mm", 1)[1]


def test_bad_override_exits_2(tmp_path, capsys):
    path = write_tiny(tmp_path)
    assert main(["run", str(path), "--set", "power.tx_power_dbm=loud"]) == 2
    assert "power.tx_power_dbm" in capsys.readouterr().err
    assert not list(tmp_path.glob("*.h5"))


def test_validate_prints_what_the_scenario_implies(tmp_path, capsys):
    assert main(["validate", str(write_tiny(tmp_path))]) == 0
    out = capsys.readouterr().out
    assert "name = " in out  # the resolved scenario
    # 6x6x1 inputs -> 36-16-4 MLP: d = 36*16 + 16 + 16*4 + 4 = 660; F = 64 -> 11 symbols per phase
    assert "d = 660 weights" in out
    assert "N_rho = 11 symbols" in out


def test_validate_draws_the_partition_and_refuses_one_a_class_cannot_feed(tmp_path, capsys):
    """The partition is drawn as the run draws it: validate says what the devices hold,
    and refuses (exit 2, nothing written) a scenario or a study point whose devices need
    more images of a class than the training set has, naming the keys and their values."""
    path = write_tiny(tmp_path)
    assert main(["validate", str(path)]) == 0
    assert re.search(r"\n  partition 8 devices hold \d+ training samples \(\d+-\d+ per device", capsys.readouterr().out)
    assert main(["validate", str(path), "--set", "data.synthetic_train_size=100"]) == 2
    err = capsys.readouterr().err
    assert re.search(r"data.partition = 'labels_per_device': class \d has \d+ training samples but all "
                     r"devices together need \d+; lower data.mean_samples_per_device \(now 20\) or "
                     r"cell.num_devices \(now 8\)", err), err
    study = tmp_path / "study.toml"
    study.write_text('scenario = "tiny.toml"\nseeds = [1]\n[axes]\n"data.synthetic_train_size" = [1200, 100]\n')
    assert main(["validate", str(study)]) == 2
    err = capsys.readouterr().err
    assert "data.synthetic_train_size=100" in err and "training samples but all devices together need" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["study.toml", "tiny.toml"]


def test_devices_that_may_share_images_draw_each_from_the_whole_pool(tmp_path, capsys):
    """``data.disjoint = false``: a partition the disjoint draw refuses (8 devices of 20
    samples on a training set of 100) is drawn, each device's images distinct but shared
    across devices (a fixed per-device dataset at any K); only a device that alone needs
    more than a class holds is refused, naming ``data.disjoint``."""
    from cosim.local_data import scenario_dataset, scenario_partition
    from cosim.scenario import load_scenario

    path = write_tiny(tmp_path)
    shared = ["data.synthetic_train_size=100", "data.disjoint=false"]
    assert main(["validate", str(path), *(arg for o in shared for arg in ("--set", o))]) == 0
    assert "partition 8 devices hold" in capsys.readouterr().out
    scenario = load_scenario(path, shared)
    indices = scenario_partition(scenario, scenario_dataset(scenario)).indices
    assert all(np.unique(rows).size == rows.size for rows in indices)
    assert np.unique(np.concatenate(indices)).size < sum(rows.size for rows in indices)
    assert main(["validate", str(path), "--set", "data.synthetic_train_size=100"]) == 2
    assert "or set data.disjoint = false" in capsys.readouterr().err
    assert main(["validate", str(path), "--set", "data.synthetic_train_size=20", "--set", "data.disjoint=false"]) == 2
    assert re.search(r"but one device needs \d+ with data.disjoint = false; lower "
                     r"data.mean_samples_per_device \(now 20\)", capsys.readouterr().err)


def test_a_broken_pipe_ends_quietly_only_when_it_is_stdouts(monkeypatch):
    """`cosim scenarios` whose reader has closed the pipe ends with status 0 and says
    nothing; a BrokenPipeError from another pipe (a study worker's) while stdout is fine
    is not taken for it: it is raised, not turned into status 0."""
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-m", "cosim.cli", "scenarios"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
    child.stdout.close()
    err = child.stderr.read()
    assert (child.wait(timeout=300), err) == (0, b"")

    import cosim.cli

    def broken(args):
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(cosim.cli, "_dispatch", broken)
    with pytest.raises(BrokenPipeError):
        main(["scenarios"])


def test_run_inspect_plot(tmp_path, capsys):
    path = write_tiny(tmp_path, rounds=2, every=1)
    assert main(["run", str(path)]) == 0
    captured = capsys.readouterr()
    out = captured.out
    assert "test accuracy" in out
    # the compile is said before round 0, each kernel as it compiles, and a summary after it
    err = captured.err.splitlines()
    first = next(i for i, x in enumerate(err) if x.startswith("round 0 compiles the kernels"))
    assert "`cosim compile` does it ahead" in err[first]
    summary = next(i for i, x in enumerate(err) if re.match(
        r"kernels: (\d+ kernels? compiled in \d+ s|no kernel needed compiling)", x))
    assert first < summary < next(i for i, x in enumerate(err) if x.startswith("[tiny] round 1/2"))
    assert "\nhealth: air      median NMSE of the estimate: " in out  # docs/health.md
    assert "\nhealth: flag" in out or "\nhealth: flags    none" in out
    trace = tmp_path / "tiny-seed3.h5"
    assert trace.is_file()
    figures = tmp_path / "tiny-seed3-figures"
    assert (figures / "accuracy_vs_uplink_symbols.png").is_file()  # the default x: uplink
    # a second run without --resume/--overwrite refuses and keeps the trace
    before = trace.read_bytes()
    assert main(["run", str(path)]) == 2
    assert trace.read_bytes() == before
    assert main(["inspect", str(trace)]) == 0
    out = capsys.readouterr().out
    assert "test_accuracy" in out
    assert "  posterior (round 1) precision_rel_change " in out
    assert "OFDM symbols: uplink " in out and "%), downlink " in out
    assert " rounds\n\n  health (docs/health.md)\n    air      median NMSE" in out
    assert re.search(r"\n  wall     \d+\.\d s, CPU \d+\.\d s in 2 rounds\n", out), out
    out_dir = tmp_path / "figs"
    assert main(["plot", str(trace), str(trace), "--out", str(out_dir), "--labels", "a", "b"]) == 0
    for name in ("accuracy_vs_uplink_symbols", "ece", "reliability", "distortion_by_distance",
                 "posterior"):
        assert (out_dir / f"{name}.png").stat().st_size > 1000
    assert main(["plot", str(trace), "--out", str(out_dir), "--x", "total"]) == 0
    assert (out_dir / "accuracy_vs_channel_uses.png").stat().st_size > 1000
    assert (out_dir / "accuracy_vs_uplink_symbols.png").stat().st_size > 1000




def test_run_on_a_terminal_says_what_it_starts_before_tensorflow(tmp_path, monkeypatch, capsys):
    """On a terminal `cosim run` prints its first line once the scenario is checked, before
    it imports TensorFlow (seconds, over ten cold): the scenario, seed, rounds and trace."""
    import sys

    from native import tensorflow_import

    seen = []
    real = tensorflow_import.import_for_command
    monkeypatch.setattr("cosim.cli.import_for_command",
                        lambda: (seen.append(capsys.readouterr().err), real())[1])
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    path = write_tiny(tmp_path, rounds=1, every=1)
    assert main(["run", str(path), "--no-plots"]) == 0
    assert seen == [f"cosim run: tiny, seed 3, 1 rounds -> {tmp_path / 'tiny-seed3.h5'}; "
                    "starting TensorFlow\n"]
