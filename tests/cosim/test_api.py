"""The notebook API (`cosim.api`): dict overrides validated like `--set`, validated
variants, `run` and `to_pandas` frames, quiet imports, and docs/notebook.md run end to end."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import h5py
import numpy as np
import pandas as pd
import pytest
from tiny_scenario import write_tiny

from cosim import api
from cosim.scenario import ScenarioError, load_scenario, with_overrides
from cosim.trace import TraceExistsError, TraceWriter, read_trace

ROOT = Path(__file__).resolve().parents[2]


def _problems(call) -> list[str]:
    with pytest.raises(ScenarioError) as info:
        call()
    return info.value.problems


# ------------------------------------------------------------------ overrides


def test_dict_overrides_equal_set_overrides_and_fail_with_the_same_lines(tmp_path):
    path = write_tiny(tmp_path)
    as_dict = load_scenario(path, {"rounds": 7, "algorithm.learning_rate": 0.02,
                                   "model.hidden_units": np.array([8, 4]), "cell.radius_m": np.float32(90)})
    as_set = load_scenario(path, ["rounds=7", "algorithm.learning_rate=0.02",
                                  "model.hidden_units=[8, 4]", "cell.radius_m=90.0"])
    assert as_dict == as_set
    assert as_dict.model.hidden_units == (8, 4) and as_dict.rounds == 7
    for key, value, raw in [
        ("algorithm.learnin_rate", 0.1, "0.1"),  # misspelt: the nearest key named
        ("rounds", -1, "-1"),  # out of range
        ("cell.num_devices", 2.5, "2.5"),  # wrong type
        ("cell.radius_m.x", 1, "1"),  # a value is not a table
        ("power.tx_power_dbm", float("nan"), "nan"),  # nan refused
    ]:
        lines = _problems(lambda k=key, v=value: load_scenario(path, {k: v}))
        assert lines == _problems(lambda k=key, r=raw: load_scenario(path, [f"{k}={r}"])), key
        assert lines[0].startswith(key.rsplit(".x", 1)[0]), lines
    assert _problems(lambda: load_scenario(path, {"algorithm.learnin_rate": 0.1})) == [
        "algorithm.learnin_rate: unknown key; did you mean 'learning_rate'? valid keys: "
        + ", ".join(type(as_dict.algorithm).model_fields)]
    # a dict value is a Python value, not TOML text: "7" is a string
    assert _problems(lambda: load_scenario(path, {"rounds": "7"})) == ["rounds: must be an integer (got '7')"]
    assert _problems(lambda: load_scenario(path, {"cell radius": 1.0})) == [
        "'cell radius': an override key must be a dotted key path such as 'cell.radius_m'"]
    with pytest.raises(ScenarioError, match=r"(?s)invalid scenario .* with overrides:\n  rounds: must be >= 1"):
        load_scenario(path, {"rounds": 0})
    with pytest.raises(TypeError, match="not a single string"):
        load_scenario(path, "rounds=3")


def test_with_overrides_revalidates_what_model_copy_does_not(tmp_path):
    scenario = load_scenario(write_tiny(tmp_path))
    assert with_overrides(scenario, {}) == scenario
    variant = with_overrides(scenario, {"power.control": "ideal", "cell.num_devices": 4})
    assert (variant.power.control, variant.cell.num_devices) == ("ideal", 4)
    assert (scenario.power.control, scenario.cell.num_devices) == ("optimal", 8)  # unchanged
    assert with_overrides(scenario, ["rounds=9"]).rounds == 9
    assert with_overrides(variant, {"power.tci_gain_threshold": 0.5}).power.tci_gain_threshold == 0.5

    copied = scenario.model_copy(update={"cell": {"num_devices": 4}})  # pydantic: no validation
    assert isinstance(copied.cell, dict)
    checked = with_overrides(copied, {})
    assert type(checked.cell) is type(scenario.cell) and checked.cell.num_devices == 4
    assert checked.cell.radius_m == type(scenario.cell)().radius_m  # a whole table replaced
    bad = scenario.model_copy(update={"rounds": 0})
    assert _problems(lambda: with_overrides(bad, {})) == ["rounds: must be >= 1 (got 0)"]
    assert _problems(lambda: api.run(bad)) == ["rounds: must be >= 1 (got 0)"]  # before any work
    assert _problems(lambda: with_overrides(scenario, {"power.control": "best"}))[0].startswith(
        "power.control: must be one of")


# ------------------------------------------------------------------ run and frames


def test_run_returns_the_trace_frames_in_a_fresh_temporary_directory(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    scenario_file = write_tiny(tmp_path, rounds=3, every=2, hidden=4)
    result = api.run(str(scenario_file), {"algorithm.learning_rate": 0.04}, progress=False)

    assert result.trace_path.parent.parent == tmp_path and result.trace_path.name == "tiny-seed3.h5"
    assert result.trace_path.parent.name.startswith("cosim-tiny-")
    assert result.scenario.trace_path == result.trace_path
    assert result.scenario.algorithm.learning_rate == 0.04 and not result.diverged
    assert result.completed_rounds == 3 and result.wall_s > 0

    rounds = result.rounds
    assert list(rounds.columns[:len(api.ROUND_COLUMNS_FIRST)]) == list(api.ROUND_COLUMNS_FIRST)
    assert rounds.loc[2, "posterior_mean_accuracy"] > 0  # the posterior mean's prediction
    assert rounds["round"].tolist() == [0, 1, 2] and list(rounds.index) == [0, 1, 2]
    np.testing.assert_array_equal(rounds["channel_uses"], rounds["uplink_symbols"] + rounds["downlink_symbols"])
    np.testing.assert_array_equal(rounds["cumulative_channel_uses"], np.cumsum(rounds["channel_uses"]))
    np.testing.assert_array_equal(rounds["cumulative_uplink_symbols"], np.cumsum(rounds["uplink_symbols"]))
    for row in ("uplink_seconds", "uplink_energy_j"):  # added in round order (cumsum is sequential)
        assert (rounds[row] > 0).all()
        np.testing.assert_array_equal(rounds[f"cumulative_{row}"], np.cumsum(rounds[row]))
    evaluated = rounds.dropna(subset=["test_accuracy"])["round"].tolist()
    assert evaluated == [1, 2]  # every 2nd round and the last
    assert rounds.loc[0, ["test_nll", "ece"]].isna().all()
    assert rounds.loc[evaluated, ["test_accuracy", "test_nll", "ece"]].notna().all().all()

    trace = read_trace(result.trace_path)
    per_device, k = result.per_device, 8
    assert list(per_device.columns) == ["round", "device", "quantity", "phase", "value"]
    assert len(per_device) == len(trace.per_device) * 3 * k
    pairs = set(zip(per_device["quantity"], per_device["phase"], strict=True))
    assert {("tx_power_w", "rho"), ("tx_power_w", "nu"), ("local_distortion", "nu"),
            ("mean_channel_gain", ""), ("csi_nmse", "")} <= pairs
    assert {f"{q}_{p}" if p else q for q, p in pairs} == set(trace.per_device)
    power = per_device[(per_device["quantity"] == "tx_power_w") & (per_device["phase"] == "nu")]
    np.testing.assert_array_equal(
        power.pivot(index="round", columns="device", values="value").to_numpy(),
        trace.per_device["tx_power_w_nu"])
    devices = result.devices
    assert devices["device"].tolist() == list(range(k))
    np.testing.assert_array_equal(devices["distance_m"], trace.devices["distance_m"])
    np.testing.assert_array_equal(devices[["x_m", "y_m"]].to_numpy(), trace.devices["position_m"])

    again = api.to_pandas(result.trace_path)
    for name in ("rounds", "per_device", "devices"):
        pd.testing.assert_frame_equal(getattr(again, name), getattr(result, name), obj=name)
    assert api.to_pandas(trace).rounds.equals(result.rounds)

    with pytest.raises(TraceExistsError):
        api.run(str(scenario_file), trace_path=result.trace_path, progress=False)
    with pytest.raises(ValueError, match="resume=True needs trace_path"):
        api.run(str(scenario_file), resume=True)


def _write_trace(path: Path) -> Path:
    """Two rounds of a two-phase run with per-device series, without TensorFlow."""
    with TraceWriter.create(path, 'name = "t"\n', seed=1, name="t",
                            devices={"position_m": np.array([[3.0, 4.0], [0.0, -2.0]]),
                                     "distance_m": np.array([5.0, 2.0]),
                                     "label_hist": np.ones((2, 3), np.int64)}) as writer:
        for t in range(2):
            writer.append_round({"uplink_symbols": 4.0, "downlink_symbols": 10.0 + t,
                                 "delta_bar_rho": 1.0, "delta_bar_nu": 2.0,
                                 "test_accuracy": np.nan if t == 0 else 0.5})
            writer.append_per_device("tx_power_w_rho", np.array([1.0, 2.0]) + 10 * t)
            writer.append_per_device("tx_power_max_w_nu", np.array([3.0, 4.0]) + 10 * t)
            writer.append_per_device("mean_channel_gain", np.array([5.0, 6.0]) + 10 * t)
            writer.commit()
    return path


def test_to_pandas_splits_phases_and_handles_a_trace_without_per_device_series(tmp_path):
    frames = api.to_pandas(_write_trace(tmp_path / "t.h5"))
    long = frames.per_device
    assert long.to_dict("list") == {
        "round": [0, 0, 1, 1] * 3,
        "device": [0, 1] * 6,
        "quantity": ["mean_channel_gain"] * 4 + ["tx_power_max_w"] * 4 + ["tx_power_w"] * 4,
        "phase": [""] * 4 + ["nu"] * 4 + ["rho"] * 4,
        "value": [5.0, 6.0, 15.0, 16.0, 3.0, 4.0, 13.0, 14.0, 1.0, 2.0, 11.0, 12.0],
    }
    assert frames.rounds["channel_uses"].tolist() == [14.0, 15.0]
    assert "cumulative_channel_uses" not in frames.rounds  # only what the trace holds
    assert frames.devices.to_dict("list") == {"device": [0, 1], "x_m": [3.0, 0.0], "y_m": [4.0, -2.0],
                                              "distance_m": [5.0, 2.0]}

    from small_trace import write_small_trace

    bare = api.to_pandas(write_small_trace(tmp_path / "s.h5", rounds=2))
    assert bare.per_device.empty and list(bare.per_device.columns) == ["round", "device", "quantity",
                                                                       "phase", "value"]
    assert bare.devices.empty and bare.rounds["round"].tolist() == [0, 1]


# ------------------------------------------------------------------ imports


def _python(code: str, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("TF_")}  # as a user has it
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env={**environment, **env},
                          capture_output=True, text=True, timeout=300)


def test_importing_the_packages_prints_nothing():
    """Every module of phy, learning and cosim, TensorFlow's C++ import lines included
    (run from the repository, so that its source tree is what is imported)."""
    modules = sorted(
        ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for package in ("phy", "learning", "cosim") for path in (ROOT / package).rglob("*.py")
        if "scenarios" not in path.parts)
    assert {"phy.aircomp", "learning.models.model", "cosim.engine", "cosim.api"} <= set(modules)
    result = _python("import importlib, sys\n"
                     f"for name in {modules!r}:\n    importlib.import_module(name)\n"
                     "assert 'tensorflow' in sys.modules", ROOT)
    assert result.returncode == 0, result.stderr
    assert (result.stdout, result.stderr) == ("", "")


def test_the_import_filter_drops_only_the_known_lines(tmp_path):
    """A stand-in `tensorflow` writes known noise and other lines to file descriptor 2:
    only the noise is dropped, the rest is printed, in order; an import error passes."""
    fake = tmp_path / "fake" / "tensorflow"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(
        "import os, sys\n"
        "os.write(2, b'WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\\n')\n"
        "os.write(2, b'E0000 cuda_dnn.cc:8310] Unable to register cuDNN factory: Attempting\\n')\n"
        "os.write(2, b'a real C++ line\\n')\n"
        "print('a Python line', file=sys.stderr)\n"
        "if os.environ.get('FAIL'):\n    raise ImportError('broken install')\n")
    code = "import phy, sys\nimport tensorflow\nprint(type(tensorflow.__loader__).__name__, sys.meta_path[0])"
    result = _python(code, tmp_path, PYTHONPATH=str(fake.parent))
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines() == ["a real C++ line", "a Python line"]
    loader, first_finder = result.stdout.split(" ", 1)
    assert loader == "SourceFileLoader" and "QuietFinder" not in first_finder  # one shot, undone
    failed = _python(code, tmp_path, PYTHONPATH=str(fake.parent), FAIL="1")
    assert failed.returncode == 1
    assert "a real C++ line\na Python line\n" in failed.stderr and "ImportError: broken install" in failed.stderr
    assert "InitializeLog" not in failed.stderr


def test_to_pandas_imports_no_tensorflow(tmp_path):
    trace = _write_trace(tmp_path / "t.h5")
    from test_cli_startup import LIGHT  # the light modules cosim.scenario imports

    probe = ("import json, sys\nfrom cosim.api import to_pandas\n"
             f"frames = to_pandas({str(trace)!r})\n"
             "heavy = sorted(m for m in sys.modules if m.split('.')[0] in "
             "('tensorflow', 'sionna', 'learning', 'numba') or m in ('cosim.engine', 'cosim.run'))\n"
             f"heavy = [m for m in heavy if m not in {LIGHT!r}]\n"
             "print(json.dumps([len(frames.rounds), heavy]))")
    result = _python(probe, tmp_path)
    assert result.returncode == 0 and result.stderr == "", result.stderr
    assert json.loads(result.stdout) == [2, []]


# ------------------------------------------------------------------ docs/notebook.md


def test_the_notebook_doc_runs_end_to_end(tmp_path, monkeypatch):
    """Every ```python block of docs/notebook.md, in order, in one namespace."""
    text = (ROOT / "docs" / "notebook.md").read_text(encoding="utf-8")
    blocks = re.findall(r"^```python\n(.*?)^```$", text, flags=re.M | re.S)
    assert len(blocks) >= 8 and text.count("```python") == len(blocks)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the doc's temporary files
    namespace: dict = {"__name__": "notebook"}
    for number, block in enumerate(blocks, 1):
        exec(compile(block, f"docs/notebook.md block {number}", "exec"), namespace)
    assert namespace["longer"].completed_rounds == 6
    table = namespace["table"]
    assert set(table["power_control"]) == {"optimal", "ideal"} and len(table) == 8
    for trace in (namespace["result"].trace_path, namespace["runs"]["ideal"].trace_path):
        with h5py.File(trace, "r") as f:
            assert Path(trace).is_relative_to(tmp_path) and f.attrs["completed_rounds"] > 0
