"""signSGD with majority vote over the sign-carrying schemes and the analog one, end to
end on the tiny scenario; the refusal of a sign scheme under an algorithm that needs values."""

from __future__ import annotations

import math

import h5py
import numpy as np
import pytest
from test_engine import _arrays
from tiny_scenario import write_tiny

from cosim.engine import Engine
from cosim.run import run_scenario
from cosim.scenario import load_scenario
from cosim.scenario.derived import describe
from cosim.scenario.errors import ScenarioError

D, F = 660, 64  # the tiny MLP's weights at hidden = 16; the tiny grid
SYMBOLS = {"one_bit": math.ceil(D / F), "noncoherent_mv": math.ceil(D / (F // 2)), "analog": math.ceil(D / F)}
SIGNSGD = ['algorithm.name="signsgd"', "algorithm.signsgd.server_learning_rate=0.01"]


@pytest.mark.parametrize(("scheme", "algorithm"), [("one_bit", "fedavg"), ("noncoherent_mv", "bayes_aircomp")])
def test_a_sign_scheme_under_an_algorithm_that_needs_values_is_refused_in_one_line(tmp_path, scheme, algorithm):
    path = write_tiny(tmp_path, algorithm=algorithm)
    with pytest.raises(ScenarioError) as error:
        load_scenario(path, [f'uplink.scheme="{scheme}"'])
    lines = [line for line in str(error.value).splitlines() if "uplink.scheme" in line]
    assert len(lines) == 1
    assert lines[0].strip().startswith(f"uplink.scheme: '{scheme}' carries only signs")
    assert f"algorithm.name = '{algorithm}' needs the weighted sum of values" in lines[0]


def test_validate_counts_each_schemes_symbols_and_refuses_what_a_vote_cannot_do(tmp_path):
    """``cosim validate``'s summary counts the scheme's own symbols (QPSK: ceil(d / 2F),
    non-coherent: ceil(d / (F / 2))); a one-subcarrier grid cannot hold a tone pair, and
    [privacy] accounts for the analog receiver noise only."""
    path = write_tiny(tmp_path, algorithm="signsgd")
    for overrides, symbols in [(['uplink.scheme="one_bit"', 'uplink.one_bit_modulation="qpsk"'], 6),
                               (['uplink.scheme="noncoherent_mv"'], 21), (['uplink.scheme="analog"'], 11)]:
        assert f"N_delta = {symbols} symbols (660 values)" in describe(load_scenario(path, overrides), D)
    with pytest.raises(ScenarioError, match=r"ofdm\.num_subcarriers: uplink\.scheme = 'noncoherent_mv' needs at least 2, a pair per sign \(got 1\)"):
        load_scenario(path, ['uplink.scheme="noncoherent_mv"', "ofdm.num_subcarriers=1"])
    with pytest.raises(ScenarioError, match=r"uplink\.scheme: = 'one_bit': \[privacy\] derives the analog scheme's mechanism"):
        load_scenario(path, ['uplink.scheme="one_bit"', "privacy.delta=1e-5"])


@pytest.mark.parametrize("scheme", ["one_bit", "noncoherent_mv", "analog"])
def test_signsgd_trains_over_each_scheme_with_its_columns(tmp_path, scheme):
    """Six rounds on the tiny scenario lower the training loss; the uplink takes
    ceil(d / F) (one_bit BPSK, analog) or ceil(d / (F / 2)) (noncoherent_mv) symbols; the
    sign schemes write their vote error and tie rates, the analog one its own columns."""
    scenario = load_scenario(write_tiny(tmp_path, rounds=6, every=6, algorithm="signsgd", learning_rate=0.3),
                             [f'uplink.scheme="{scheme}"', *SIGNSGD[1:], "trace.per_device=true"])
    summary = run_scenario(scenario, progress=False)
    with h5py.File(summary.trace_path, "r") as f:
        rounds = f["rounds"]
        loss = rounds["train_loss"][()]
        np.testing.assert_array_equal(rounds["uplink_symbols"][()], SYMBOLS[scheme])
        assert np.all(rounds["uplink_energy_j"][()] > 0)
        if scheme == "analog":
            assert "vote_error_rate_delta" not in rounds and "delta_bar_delta" in rounds
        else:
            errors = rounds["vote_error_rate_delta"][()]
            assert np.all((errors >= 0) & (errors < 0.5)), errors
            assert np.all(np.isfinite(rounds["vote_tie_rate_delta"][()]))
            assert rounds["per_device/tx_power_w_delta"].shape == (6, 8)
    assert loss[-1] < loss[0] - 0.01, loss
    assert np.isfinite(summary.final_accuracy)


def test_a_resumed_signsgd_run_with_error_feedback_and_momentum_equals_the_straight_one(tmp_path):
    """signSGD with error feedback (memories [K, d] in the checkpoint) and momentum 0.5
    over one_bit QPSK: a run interrupted after two rounds and resumed writes the same
    trace, checkpoints included, as one that ran straight through."""

    class InterruptedEngine(Engine):
        def run_round(self, t, state):
            if t == 2:
                raise KeyboardInterrupt
            return super().run_round(t, state)

    overrides = ['uplink.scheme="one_bit"', 'uplink.one_bit_modulation="qpsk"', *SIGNSGD[1:],
                 "algorithm.signsgd.error_feedback=true", "algorithm.signsgd.server_momentum=0.5"]
    full_dir, cut_dir = tmp_path / "full", tmp_path / "cut"
    full_dir.mkdir()
    cut_dir.mkdir()
    run_scenario(load_scenario(write_tiny(full_dir, rounds=4, algorithm="signsgd"), overrides), progress=False)
    cut = load_scenario(write_tiny(cut_dir, rounds=4, algorithm="signsgd"), overrides)
    with pytest.raises(KeyboardInterrupt):
        run_scenario(cut, progress=False, engine=InterruptedEngine(cut))
    run_scenario(cut, resume=True, progress=False)
    first, second = _arrays(full_dir / "tiny-seed3.h5"), _arrays(cut_dir / "tiny-seed3.h5")
    assert first.keys() == second.keys()
    assert first["checkpoint/slot_0/e_k"].shape == (8, D)
    assert np.any(first["checkpoint/slot_0/e_k"] != 0) and np.any(first["checkpoint/slot_0/v"] != 0)
    for name in first:
        np.testing.assert_array_equal(first[name], second[name], err_msg=name)
    np.testing.assert_array_equal(first["rounds/uplink_symbols"], math.ceil(D / (2 * F)))
