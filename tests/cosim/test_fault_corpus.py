"""The fault corpus of docs/faults.md: bad input exits 2, names the key or the file, writes nothing.

Every case runs the real command line in-process (``cosim.cli.main``): malformed
scenario files, bad ``--set`` overrides, scenarios too large for the machine, and
trace files that ``cosim inspect`` / ``cosim plot`` cannot read. Each asserts exit
status 2, a message on stderr naming the key (``table.key``, with the bad value) or
the file, no traceback, and that nothing was written: no trace for a scenario, no
output directory for a plot, the bad file byte for byte as it was.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np
import pytest
from small_trace import write_small_trace
from tiny_scenario import write_tiny

import cosim.run
import cosim.trace.file_format
from cosim.cli import main
from cosim.trace import TraceWriter

TRACE_NAME = "tiny-seed3.h5"  # the tiny scenario's trace.path, under tmp_path


@pytest.fixture(autouse=True)
def _no_run_and_no_retry_pause(monkeypatch):
    """A rejected scenario must never reach the simulation (were one accepted by mistake,
    fail at once instead of running it); a damaged HDF5 file is not retried with pauses."""

    def refuse(*args, **kwargs):
        raise AssertionError("a scenario of the fault corpus reached run_scenario")

    monkeypatch.setattr(cosim.run, "run_scenario", refuse)
    monkeypatch.setattr(cosim.trace.file_format, "OPEN_RETRY_S", 0.0)


def _assert_refused(capsys, status: int, *names: str) -> str:
    err = capsys.readouterr().err
    assert status == 2, err
    assert "Traceback" not in err
    for name in names:
        assert name in err, f"{name!r} not named in: {err}"
    return err


# --------------------------------------------------------------------------- scenario files


@dataclass(frozen=True)
class ScenarioFault:
    """A tiny scenario edited: ``replace`` (old, new) pairs, then ``append`` text; the
    command; the strings stderr must contain (the key and the bad value)."""

    replace: tuple[tuple[str, str], ...] = ()
    append: str = ""
    named: tuple[str, ...] = ()
    command: str = "run"


SCENARIO_FAULTS = {
    "unknown-key": ScenarioFault(append="\n[channel]\npath_loss_exponentt = 3.0\n",
                                 named=("channel.path_loss_exponentt", "did you mean 'path_loss_exponent'")),
    "key-in-the-wrong-table": ScenarioFault(append="\n[power]\nradius_m = 3.0\n",
                                            named=("power.radius_m", "'cell.radius_m'")),
    "unknown-table": ScenarioFault(append="\n[cel]\nradius_m = 3.0\n", named=("cel:", "did you mean 'cell'")),
    "string-for-int": ScenarioFault(replace=(("num_devices = 8", 'num_devices = "many"'),),
                                    named=("cell.num_devices", "'many'")),
    "float-for-int": ScenarioFault(replace=(("num_devices = 8", "num_devices = 8.5"),),
                                   named=("cell.num_devices", "8.5")),
    "bool-for-float": ScenarioFault(replace=(("radius_m = 100.0", "radius_m = true"),),
                                    named=("cell.radius_m", "True")),
    "negative-radius": ScenarioFault(replace=(("radius_m = 100.0", "radius_m = -5.0"),),
                                     named=("cell.radius_m", "-5.0")),
    "nan-power": ScenarioFault(append="\n[power]\ntx_power_dbm = nan\n",
                               named=("power.tx_power_dbm", "nan")),
    "inf-mean-samples": ScenarioFault(replace=(("mean_samples_per_device = 20", "mean_samples_per_device = inf"),),
                                      named=("data.mean_samples_per_device", "inf")),
    "minus-inf-noise": ScenarioFault(append="\n[power]\nnoise_power_dbm = -inf\n",
                                     named=("power.noise_power_dbm", "-inf")),
    "inf-gamma": ScenarioFault(append="\n[power]\ngamma = inf\n", named=("power.gamma", "inf")),
    "nan-in-positions": ScenarioFault(
        replace=(("min_distance_m = 10.0", 'min_distance_m = 10.0\nlayout = "explicit"\n'
                  "positions_m = [[20.0, nan], [0.0, 50.0], [30.0, 30.0], [40.0, 0.0], "
                  "[0.0, 40.0], [-20.0, 20.0], [20.0, -20.0], [-50.0, 0.0]]"),),
        named=("cell.positions_m[0][1]", "nan")),
    "huge-dbm": ScenarioFault(append="\n[downlink]\nbs_tx_power_dbm = 1e308\n",
                              named=("downlink.bs_tx_power_dbm", "1e+308")),
    "unknown-architecture": ScenarioFault(replace=(('architecture = "mlp"', 'architecture = "transformer"'),),
                                          named=("model.architecture", "'transformer'")),
    "zero-hidden-units": ScenarioFault(replace=(("hidden_units = [16]", "hidden_units = [16, 0]"),),
                                       named=("model.hidden_units", "[16, 0]")),
    "min-distance-beyond-radius": ScenarioFault(replace=(("min_distance_m = 10.0", "min_distance_m = 150.0"),),
                                                named=("cell.min_distance_m", "cell.radius_m", "150.0")),
    "annulus-without-inner-radius": ScenarioFault(
        replace=(("min_distance_m = 10.0", 'min_distance_m = 10.0\nlayout = "annulus"'),),
        named=("cell.inner_radius_m", "cell.layout = 'annulus'")),
    "more-labels-than-classes": ScenarioFault(replace=(("labels_per_device = 2", "labels_per_device = 5"),),
                                              named=("data.labels_per_device", "data.synthetic_classes = 4",
                                                     "(got 5)")),
    "shifted-poisson-mean-below-1": ScenarioFault(
        replace=(("mean_samples_per_device = 20", "mean_samples_per_device = 0.5"),),
        named=("data.mean_samples_per_device", "data.size_distribution = 'shifted_poisson'", "0.5")),
    "four-d-synthetic-shape": ScenarioFault(replace=(("synthetic_shape = [6, 6, 1]", "synthetic_shape = [6, 6, 1, 1]"),),
                                            named=("data.synthetic_shape", "[6, 6, 1, 1]")),
    "cnn-on-tiny-images": ScenarioFault(replace=(('architecture = "mlp"', 'architecture = "cnn"'),
                                                 ("synthetic_shape = [6, 6, 1]", "synthetic_shape = [2, 2, 1]")),
                                        named=("data.synthetic_shape", "model.architecture = 'cnn'", "[2, 2, 1]")),
    "gaussian-csi-without-nmse": ScenarioFault(append='\n[csi]\nmodel = "gaussian"\n',
                                               named=("csi.nmse_db", "csi.model = 'gaussian'")),
    "numba-backend-for-a-convnet": ScenarioFault(
        append='\n[runtime]\nbackend = "numba"\n',
        replace=(('architecture = "mlp"', 'architecture = "cnn"'),),
        named=("runtime.backend", "model.architecture = 'cnn' has no Numba steps")),
    "moved-weight-sampler": ScenarioFault(
        replace=(("learning_rate = 0.05", 'learning_rate = 0.05\nweight_sampler = "tensorflow"'),),
        named=("algorithm.weight_sampler", "moved to the [runtime] table")),
    "value-for-a-table": ScenarioFault(replace=(("learning_rate = 0.05", "learning_rate = 0.05\nfedprox = 3"),),
                                       named=("algorithm.fedprox", "must be a table")),
    "bad-trace-placeholder": ScenarioFault(replace=(("{name}-seed{seed}.h5", "{name}-{run}.h5"),),
                                           named=("trace.path", "{run}")),
    "seed-out-of-range": ScenarioFault(replace=(("seed = 3", "seed = -3"),), named=("seed", "-3")),
    "toml-syntax-error": ScenarioFault(replace=(("[ofdm]", "[ofdm"),), named=("TOML syntax error", "line")),
    "validate-too": ScenarioFault(replace=(("radius_m = 100.0", "radius_m = nan"),),
                                  named=("cell.radius_m", "nan"), command="validate"),
    "too-large-hidden-layer": ScenarioFault(replace=(("hidden_units = [16]", "hidden_units = [100000000]"),),
                                            named=("does not fit in memory", "model.hidden_units = [100000000]",
                                                   "cell.num_devices = 8", "GiB")),
    "too-many-devices": ScenarioFault(replace=(("num_devices = 8", "num_devices = 1000000000"),),
                                      named=("does not fit in memory", "cell.num_devices = 1000000000")),
    "privacy-target-no-noise-can-meet": ScenarioFault(
        append='\n[power]\ncontrol = "full_inversion"\n\n[privacy]\ntarget_epsilon = 8.0\n',
        named=("privacy.target_epsilon: = 8 cannot be met", "power.control = 'full_inversion'")),
    "privacy-with-a-digital-scheme": ScenarioFault(
        append='\n[uplink]\nscheme = "digital_ofdma"\n\n[privacy]\ndelta = 1e-5\n',
        named=("uplink.scheme", "'digital_ofdma'", "[privacy]")),
    "privacy-delta-out-of-range": ScenarioFault(append="\n[privacy]\ndelta = 1.5\n",
                                                named=("privacy.delta", "1.5")),
    "privacy-poisson-without-sampling": ScenarioFault(
        append='\n[privacy]\nsubsampling = "poisson"\n',
        named=("privacy.subsampling", "participation.fraction < 1")),
}


@pytest.mark.parametrize("fault", SCENARIO_FAULTS.values(), ids=SCENARIO_FAULTS.keys())
def test_malformed_scenario_file(tmp_path, capsys, fault):
    path = write_tiny(tmp_path)
    text = path.read_text()
    for old, new in fault.replace:
        assert old in text, old
        text = text.replace(old, new)
    path.write_text(text + fault.append)
    status = main([fault.command, str(path)])
    err = _assert_refused(capsys, status, *fault.named)
    assert all(line.startswith("  ") for line in err.splitlines()[1:]), err  # one line per problem
    assert not (tmp_path / TRACE_NAME).exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny.toml"]


@pytest.mark.parametrize(
    ("file", "named"),
    [
        pytest.param(None, ("file not found", "missing.toml"), id="missing-file"),
        pytest.param("dir", ("cannot read", "adir"), id="directory"),
        pytest.param(b"name = \"\xff\xfe\"\n", ("cannot read", "bad.toml"), id="not-utf8"),
    ],
)
def test_unreadable_scenario_file(tmp_path, capsys, file, named):
    if file is None:
        path = tmp_path / "missing.toml"
    elif file == "dir":
        path = tmp_path / "adir"
        path.mkdir()
    else:
        path = tmp_path / "bad.toml"
        path.write_bytes(file)
    before = sorted(tmp_path.iterdir())
    _assert_refused(capsys, main(["run", str(path)]), *named)
    assert sorted(tmp_path.iterdir()) == before


# --------------------------------------------------------------------------- --set overrides

OVERRIDE_FAULTS = {
    "nan": (["power.tx_power_dbm=nan"], ("power.tx_power_dbm", "nan")),
    "inf": (["power.tx_power_dbm=inf"], ("power.tx_power_dbm", "inf")),
    "inf-mean-samples": (["data.mean_samples_per_device=inf"], ("data.mean_samples_per_device", "inf")),
    "minus-inf-learning-rate": (["algorithm.learning_rate=-inf"], ("algorithm.learning_rate", "-inf")),
    "nan-kl-scale": (["algorithm.kl_scale=nan"], ("algorithm.kl_scale", "nan")),
    "nan-baseline-key": (["algorithm.fedgmt.ema_decay=nan"], ("algorithm.fedgmt.ema_decay", "nan")),
    "misspelled-key": (["cell.radius_mm=5"], ("cell.radius_mm", "did you mean 'radius_m'")),
    "misspelled-table": (["celll.radius_m=5"], ("celll", "did you mean 'cell'")),
    "bare-word-for-number": (["cell.radius_m=abc"], ("cell.radius_m", "'abc'")),
    "value-as-table": (["cell.radius_m.x=1"], ("cell.radius_m", "is a value, not a table")),
    "no-equals-sign": (["cell.radius_m"], ("'cell.radius_m'", "key.path=value")),
    "scalar-for-array": (["model.hidden_units=8"], ("model.hidden_units", "must be an array")),
    "zero-eval-every": (["eval.every=0"], ("eval.every", "(got 0)")),
    "zero-bs-antennas": (["bs.num_antennas=0"], ("bs.num_antennas", "(got 0)")),
    "fractional-bs-antennas": (["bs.num_antennas=2.5"], ("bs.num_antennas", "must be an integer (got 2.5)")),
    "numba-backend-for-a-baseline": (['runtime.backend="numba"', 'algorithm.name="scaffold"'],
                                     ("runtime.backend", "runs on TensorFlow only")),
    "moved-key-via-set": (['algorithm.weight_sampler="fused"'],
                          ("algorithm.weight_sampler", "moved to the [runtime] table")),
    "cross-field-via-set": (["cell.min_distance_m=100"], ("cell.min_distance_m", "cell.radius_m = 100.0")),
    "second-of-two-bad": (["rounds=2", "ofdm.num_subcarriers=-1"], ("ofdm.num_subcarriers", "-1")),
    "too-large-via-set": (["model.hidden_units=[100000000]"],
                          ("does not fit in memory", "model.hidden_units = [100000000]")),
}


# every case through both commands (run_scenario is patched to refuse: a run that
# missed a check fails the test instead of allocating)
OVERRIDE_CASES = [
    pytest.param(command, overrides, named, id=f"{command}-{name}")
    for name, (overrides, named) in OVERRIDE_FAULTS.items()
    for command in ("run", "validate")
]


@pytest.mark.parametrize(("command", "overrides", "named"), OVERRIDE_CASES)
def test_bad_override(tmp_path, capsys, command, overrides, named):
    path = write_tiny(tmp_path)
    args = [command, str(path)]
    for item in overrides:
        args += ["--set", item]
    _assert_refused(capsys, main(args), *named)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny.toml"]


# --------------------------------------------------------------------------- trace files


def _make_bad(kind: str, directory: Path) -> Path:
    """A file ``cosim inspect`` / ``cosim plot`` cannot use, of the given ``kind``."""
    path = directory / f"{kind}.h5"
    if kind == "missing":
        return path
    if kind == "directory":
        path.mkdir()
        return path
    if kind == "empty":
        path.write_bytes(b"")
        return path
    if kind == "text-file":
        path.write_text("round,test_accuracy\n0,0.5\n")
        return path
    if kind == "non-trace-hdf5":
        with h5py.File(path, "w") as f:
            f["x"] = np.arange(3)
        return path
    if kind == "trace-header-only":  # schema_version but no rounds / devices
        with h5py.File(path, "w") as f:
            f.attrs["schema_version"] = 1
        return path
    if kind == "newer-schema":
        write_small_trace(path, rounds=2)
        with h5py.File(path, "r+") as f:
            f.attrs["schema_version"] = 99
        return path
    if kind == "short-column":  # completed_rounds beyond the rows written
        write_small_trace(path, rounds=2)
        with h5py.File(path, "r+") as f:
            f.attrs["completed_rounds"] = 5
        return path
    data = write_small_trace(directory / "source.h5", rounds=2).read_bytes()
    (directory / "source.h5").unlink()
    damaged = {
        "truncated-half": data[: len(data) // 2],
        "truncated-last-byte": data[:-1],
        "truncated-to-superblock": data[:100],
        "corrupted-signature": b"\x00" * 8 + data[8:],
        "corrupted-superblock": data[:8] + b"\xff" * 8 + data[16:],
        "corrupted-metadata": data[:96] + b"\xaa" * (len(data) - 96),
    }[kind]
    path.write_bytes(damaged)
    return path


READ_FAULTS = {
    "missing": "no such trace file",
    "directory": "it is a directory",
    "empty": "the file is empty",
    "text-file": "not an HDF5 file",
    "non-trace-hdf5": "not an aircomp-cosim trace",
    "trace-header-only": "an incomplete trace",
    "newer-schema": "schema_version 99",
    "short-column": "completed_rounds = 5 cannot be real (the file holds 2 rows of /rounds/round)",
    "truncated-half": "truncated",
    "truncated-last-byte": "truncated",
    "truncated-to-superblock": "truncated",
    "corrupted-signature": "not an HDF5 file",
    "corrupted-superblock": "damaged HDF5 file",
    "corrupted-metadata": "damaged HDF5 file",
}


def _snapshot(path: Path) -> bytes | str | None:
    return path.read_bytes() if path.is_file() else ("dir" if path.is_dir() else None)


@pytest.mark.parametrize("kind", READ_FAULTS, ids=READ_FAULTS)
def test_inspect_bad_file(tmp_path, capsys, kind):
    path = _make_bad(kind, tmp_path)
    before = _snapshot(path)
    err = _assert_refused(capsys, main(["inspect", str(path)]), str(path), READ_FAULTS[kind])
    assert err.count("\n") == 1 and err.startswith("cosim inspect: "), err  # one line
    assert _snapshot(path) == before


@pytest.mark.parametrize("kind", READ_FAULTS, ids=READ_FAULTS)
def test_plot_bad_file_leaves_no_output_directory(tmp_path, capsys, kind):
    good = write_small_trace(tmp_path / "good.h5", rounds=2)
    path = _make_bad(kind, tmp_path)
    before = _snapshot(path)
    out = tmp_path / "figures" / "run1"
    # the good trace first: the bad one must stop the command before anything is drawn
    err = _assert_refused(capsys, main(["plot", str(good), str(path), "--out", str(out)]),
                          str(path), READ_FAULTS[kind])
    assert err.count("\n") == 1 and err.startswith("cosim plot: "), err
    assert not (tmp_path / "figures").exists()
    assert _snapshot(path) == before


def test_plot_trace_without_rounds(tmp_path, capsys):
    TraceWriter.create(tmp_path / "zero.h5", 'name = "t"\nrounds = 3\n', seed=1).close()
    out = tmp_path / "figs"
    _assert_refused(capsys, main(["plot", str(tmp_path / "zero.h5"), "--out", str(out)]),
                    "zero.h5", "no completed round")
    assert not out.exists()
    assert main(["inspect", str(tmp_path / "zero.h5")]) == 0  # inspect shows it: 0 rounds
    assert "0 of 3 completed" in capsys.readouterr().out


def test_plot_out_is_a_file(tmp_path, capsys):
    good = write_small_trace(tmp_path / "good.h5", rounds=2)
    out = tmp_path / "figs"
    out.write_text("precious")
    _assert_refused(capsys, main(["plot", str(good), "--out", str(out)]), str(out), "not a directory")
    assert out.read_text() == "precious"


def test_plot_good_trace_still_works(tmp_path, capsys):
    """The all-or-nothing plot writes every figure into a new nested directory."""
    out = tmp_path / "a" / "b"
    assert main(["plot", str(write_small_trace(tmp_path / "good.h5", rounds=2)), "--out", str(out)]) == 0
    assert {p.name for p in out.iterdir()} == {"accuracy_vs_uplink_symbols.png", "nll_vs_uplink_symbols.png",
                                               "ece.png", "reliability.png"}
    assert capsys.readouterr().out.count(".png") == 4


def test_every_case_is_a_row_of_docs_faults_md():
    """docs/faults.md names every case of this corpus by its test id, in brackets."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "faults.md").read_text()
    ids = [*SCENARIO_FAULTS, *OVERRIDE_FAULTS, *READ_FAULTS, "missing-file", "not-utf8",
           "test_plot_trace_without_rounds", "test_plot_out_is_a_file"]
    missing = [i for i in ids if not any(f"{a}{i}{b}" in doc for a in "[ " for b in "],")]
    assert not missing, f"cases without a row in docs/faults.md: {missing}"
