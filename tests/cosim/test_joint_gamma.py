"""``power.gamma = "joint"`` through a run (issue 42 item 7): the fixed gamma's traces are
unchanged whichever way it is spelled, the joint one traces its gamma per phase and keeps
the budget, and the scenario refuses it where it has no meaning."""

from __future__ import annotations

import numpy as np
import pytest
from test_engine import _arrays
from tiny_scenario import write_tiny

from cosim.run import run_scenario
from cosim.scenario import ScenarioError, load_scenario


def test_fixed_gamma_traces_are_unchanged_and_joint_traces_its_gamma(tmp_path):
    path = write_tiny(tmp_path, rounds=1)
    noise_w = load_scenario(path).power.noise_power_w
    runs = {}
    for label, overrides in {"default": {}, "number": {"power.gamma": noise_w},
                             "joint": {"power.gamma": "joint"}}.items():
        overrides = {**overrides, "trace.path": str(tmp_path / f"{label}.h5")}
        runs[label] = _arrays(run_scenario(load_scenario(path, overrides), progress=False).trace_path)
    reference = runs["default"]
    assert runs["number"].keys() == reference.keys()
    for name in reference:
        np.testing.assert_array_equal(runs["number"][name], reference[name], err_msg=name)
    assert not any("gamma_w" in name for name in reference)
    joint = runs["joint"]
    for phase in ("rho", "nu"):
        gamma = joint[f"rounds/gamma_w_{phase}"]
        assert gamma.shape == (1,) and np.all(np.isfinite(gamma)) and np.all(gamma > 0)
        assert np.all(joint[f"rounds/power_over_budget_{phase}"] == 0)
        # the same updates in round 0: only gamma differs, and the noise term scales as 1/gamma
        np.testing.assert_allclose(
            joint[f"rounds/noise_power_{phase}"][0] * gamma[0],
            reference[f"rounds/noise_power_{phase}"][0] * noise_w, rtol=1e-5)
    assert set(joint) - set(reference) == {"rounds/gamma_w_rho", "rounds/gamma_w_nu"}


@pytest.mark.parametrize("control", ["truncated_inversion", "full_inversion", "ideal"])
def test_joint_gamma_needs_the_kkt_control(tmp_path, control):
    with pytest.raises(ScenarioError, match=r"power\.gamma.*joint.*power\.control"):
        load_scenario(write_tiny(tmp_path, rounds=1),
                      {"power.gamma": "joint", "power.control": control})


@pytest.mark.parametrize(("overrides", "message"), [
    (['uplink.scheme="digital_ofdma"'], "power.gamma: = \"joint\" chooses the analog scheme's receiver scaling; "
                                        "uplink.scheme = 'digital_ofdma' has none"),
    (["privacy.delta=1e-5"], "power.gamma: = \"joint\" is not accounted by [privacy]"),
])
def test_joint_gamma_is_refused_where_it_means_nothing(tmp_path, overrides, message):
    """A scheme without a receiver scaling, or [privacy] (its mechanism takes the fixed gamma),
    with power.gamma = "joint": one line naming power.gamma, at validation."""
    with pytest.raises(ScenarioError) as error:
        load_scenario(write_tiny(tmp_path), overrides=['power.gamma="joint"', *overrides])
    assert message in str(error.value)
