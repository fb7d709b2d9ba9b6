"""``uplink.scheme = "digital_ofdma"`` through a scenario: the tiny run for FedAvg and
the proposed method, its columns in the trace, and what the scenario refuses."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
from test_trace_docs import DOC, _pattern, documented_tables
from tiny_scenario import write_tiny

from cosim.cli import main
from cosim.run import run_scenario
from cosim.scenario import load_scenario
from cosim.scenario.errors import ScenarioError

DIGITAL = 'uplink.scheme="digital_ofdma"'
D = 6 * 6 * 4 + 4 + 4 * 4 + 4  # the tiny MLP with 4 hidden units: the values of every phase


@pytest.mark.parametrize(("algorithm", "learning_rate", "budget", "rate_model"),
                         [("bayes_aircomp", 0.05, None, "shannon"), ("fedavg", 0.3, 60, "shannon"),
                          ("fedavg", 0.3, None, "nr_mcs")])
def test_the_tiny_run_writes_the_schemes_columns(tmp_path, algorithm, learning_rate, budget, rate_model):
    """Every phase's outage, bits and symbols; the round's symbols are the phases' slots
    (the slowest transmitting device, within the budget), a device's energy is P times its
    symbols times the symbol duration, and the devices over the budget are exactly those
    in outage (perfect CSI: no rate outage), with no energy."""
    overrides = [DIGITAL, "uplink.bits_per_value=8", "trace.per_device=true", f'uplink.rate_model="{rate_model}"']
    if budget is not None:
        overrides.append(f"uplink.slot_symbols={budget}")
    scenario = load_scenario(write_tiny(tmp_path, rounds=2, every=2, hidden=4, algorithm=algorithm,
                                        learning_rate=learning_rate), overrides)
    summary = run_scenario(scenario, progress=False)
    phases = ("rho", "nu") if algorithm == "bayes_aircomp" else ("delta",)
    symbol_s = (64 + scenario.ofdm.cyclic_prefix_samples) / scenario.ofdm.bandwidth_hz
    with h5py.File(summary.trace_path, "r") as f:
        rounds, per_device = f["rounds"], f["rounds/per_device"]
        assert "delta_bar_rho" not in rounds and "delta_bar_delta" not in rounds
        slots, device_symbols = 0.0, 0.0
        for phase in phases:
            symbols = per_device[f"symbols_{phase}"][()]
            outage = per_device[f"outage_{phase}"][()]
            sent = symbols <= (budget or np.inf)
            np.testing.assert_array_equal(outage, (~sent).astype(float))
            np.testing.assert_array_equal(rounds[f"outage_devices_{phase}"][()], (~sent).sum(axis=1))
            np.testing.assert_array_equal(rounds[f"symbols_needed_{phase}"][()], symbols.max(axis=1))
            np.testing.assert_array_equal(rounds[f"bits_sent_{phase}"][()], sent.sum(axis=1) * (8 * D + 32))
            np.testing.assert_array_equal(per_device[f"subcarriers_{phase}"][()], 8.0)  # F = 64, K = 8
            slots = slots + np.where(sent, symbols, 0.0).max(axis=1)
            device_symbols = device_symbols + np.where(sent, symbols, 0.0)
            assert np.all(np.isfinite(rounds[f"aggregate_nmse_{phase}"][()]))
            assert np.all(rounds[f"aggregate_nmse_{phase}"][()] > 0.0)  # the quantization's error
        np.testing.assert_array_equal(rounds["uplink_symbols"][()], slots)
        if budget is not None:
            assert np.all(slots <= budget) and rounds["outage_devices_delta"][()].sum() > 0
        tables = documented_tables(DOC.read_text())
        for group, names in (("rounds", rounds), ("rounds/per_device", per_device)):
            for name in names:
                if isinstance(names[name], h5py.Dataset):
                    assert any(_pattern(row[0], phases).fullmatch(name) for row in tables[group]), (
                        f"/{group}/{name} is not in docs/trace.md")
        energy = per_device["tx_energy_j"][()]
        np.testing.assert_allclose(energy, scenario.power.tx_power_w * device_symbols * symbol_s, rtol=1e-12)
        np.testing.assert_allclose(rounds["uplink_energy_j"][()], energy.sum(axis=1), rtol=1e-12)


@pytest.mark.parametrize(("override", "key"), [
    ('ofdm.domain="time"', "ofdm.domain"),
    ("uplink.bits_per_value=3", "uplink.bits_per_value"),
    ("uplink.slot_symbols=0", "uplink.slot_symbols"),
])
def test_what_it_does_not_support_is_one_line_naming_the_keys(tmp_path, capsys, override, key):
    path = write_tiny(tmp_path)
    with pytest.raises(ScenarioError, match=key.replace(".", r"\.")):
        load_scenario(path, [DIGITAL, override])
    assert main(["validate", str(path), "--set", DIGITAL, "--set", override]) == 2
    err = capsys.readouterr().err
    assert key in err and "Traceback" not in err
    if key == "ofdm.domain":
        assert "uplink.scheme" in err


def test_more_devices_than_subcarriers_validate(tmp_path, capsys):
    """65 devices on 64 subcarriers take turns in slot groups (docs/schemes.md): the
    scenario loads and `cosim validate` accepts it."""
    path = write_tiny(tmp_path)
    overrides = [DIGITAL, "cell.num_devices=65", "data.mean_samples_per_device=8"]
    assert load_scenario(path, overrides).cell.num_devices == 65
    assert main(["validate", str(path), *(arg for o in overrides for arg in ("--set", o))]) == 0


def test_privacy_is_refused_naming_the_scheme(tmp_path, capsys):
    path = write_tiny(tmp_path)
    path.write_text(path.read_text() + "\n[privacy]\ndelta = 1e-5\n")
    assert main(["validate", str(path), "--set", DIGITAL]) == 2
    err = capsys.readouterr().err
    assert "privacy" in err and "uplink.scheme" in err


def test_a_resumed_run_replays_the_quantizer_and_the_cohort(tmp_path, capsys):
    """FedAvg over digital OFDMA with half the devices scheduled each round: 3 rounds in one
    go, and 1 round then --resume to 3, write the same rounds (the quantizer's draws come
    from the round's stateless stream); a device not scheduled has NaN in the scheme's
    per-device columns, and the 4 senders share the 64 subcarriers."""
    overrides = ["--set", DIGITAL, "--set", "participation.fraction=0.5", "--set", "trace.per_device=true",
                 "--no-plots"]
    whole, split = tmp_path / "whole", tmp_path / "split"
    for directory in (whole, split):
        directory.mkdir()
        write_tiny(directory, rounds=3, every=3, hidden=4, algorithm="fedavg", learning_rate=0.3)
    assert main(["run", str(whole / "tiny.toml"), *overrides]) == 0
    assert main(["run", str(split / "tiny.toml"), "--set", "rounds=1", *overrides]) == 0
    assert main(["run", str(split / "tiny.toml"), "--resume", *overrides]) == 0
    capsys.readouterr()
    (a,), (b,) = whole.glob("*.h5"), split.glob("*.h5")
    with h5py.File(a, "r") as f, h5py.File(b, "r") as g:
        for name in ("aggregate_error_delta", "uplink_symbols", "uplink_energy_j", "bits_sent_delta",
                     "test_accuracy", "per_device/subcarriers_delta"):
            np.testing.assert_array_equal(f["rounds"][name][()], g["rounds"][name][()], err_msg=name)
        subcarriers = f["rounds/per_device/subcarriers_delta"][()]
        np.testing.assert_array_equal(np.isnan(subcarriers).sum(axis=1), 4)
        np.testing.assert_array_equal(np.nansum(subcarriers, axis=1), 64)
