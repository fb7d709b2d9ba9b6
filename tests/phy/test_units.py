"""phy.units: the dB conversions, scalars and arrays, and where the code uses them."""

from __future__ import annotations

import math

import numpy as np
import pytest

from cosim.scenario import load_scenario
from phy.csi import GaussianCSI, LSPilotCSI
from phy.units import db_to_linear, dbm_to_w, linear_to_db, w_to_dbm


def test_known_values():
    assert dbm_to_w(30.0) == 1.0 and dbm_to_w(0.0) == pytest.approx(1e-3, rel=1e-15)
    assert dbm_to_w(-74.0) == pytest.approx(3.981071705534972e-11, rel=1e-15)
    assert w_to_dbm(1.0) == 30.0 and w_to_dbm(1e-3) == pytest.approx(0.0, abs=1e-12)
    assert db_to_linear(-10.0) == pytest.approx(0.1, rel=1e-15) and db_to_linear(20.0) == 100.0
    assert linear_to_db(100.0) == 20.0 and linear_to_db(0.01) == -20.0


def test_round_trips_elementwise_on_arrays():
    dbm = np.array([[-300.0, -74.0], [0.0, 300.0]])
    watts = dbm_to_w(dbm)
    assert watts.shape == (2, 2) and watts[1, 0] == dbm_to_w(0.0)
    np.testing.assert_allclose(w_to_dbm(watts), dbm, rtol=0, atol=1e-12)
    db = np.linspace(-40.0, 40.0, 9)
    np.testing.assert_allclose(linear_to_db(db_to_linear(db)), db, rtol=0, atol=1e-12)
    assert isinstance(w_to_dbm(np.float64(2.0)), float)


@pytest.mark.parametrize("value", [0.0, -1.0, math.nan])
def test_log_of_a_non_positive_value_names_the_argument(value):
    with pytest.raises(ValueError, match=r"power_w must be > 0, got"):
        w_to_dbm(value)
    with pytest.raises(ValueError, match=r"value must be > 0 everywhere, got"):
        linear_to_db(np.array([1.0, value]))


def test_the_scenario_and_csi_models_convert_with_it():
    scenario = load_scenario("quickstart", {"power.tx_power_dbm": 13.0, "downlink.bs_tx_power_dbm": 27.5})
    assert scenario.power.tx_power_w == dbm_to_w(13.0)
    assert scenario.power.noise_power_w == dbm_to_w(scenario.power.noise_power_dbm)
    assert scenario.downlink.bs_tx_power_w == dbm_to_w(27.5)
    assert GaussianCSI(-17.0).nmse == db_to_linear(-17.0)
    assert LSPilotCSI(12.5).pilot_snr == db_to_linear(12.5)
