"""A variant registered after import (as notebooks/03_custom_power_control.ipynb does) is a
valid scenario value, and Variant takes the implementation itself as well as a path."""

from __future__ import annotations

import pytest

from cosim.scenario import ScenarioError, parse_scenario
from native.parameters import Parameters, Variant
from phy.parameters import POWER_CONTROLS


class _NoKeys(Parameters):
    """No scenario keys."""


class _Control:
    def __init__(self, **kwargs):
        self.kwargs = kwargs


@pytest.fixture
def registered():
    POWER_CONTROLS["test_registered"] = Variant(_NoKeys, _Control)
    try:
        yield
    finally:
        del POWER_CONTROLS["test_registered"]


def test_a_variant_registered_later_is_a_valid_value(registered):
    scenario = parse_scenario({"power": {"control": "test_registered"}})
    assert scenario.power.control == "test_registered"
    built = POWER_CONTROLS[scenario.power.control].build(scenario.power.variant_values())
    assert isinstance(built, _Control) and built.kwargs == {}
    with pytest.raises(ScenarioError) as caught:
        parse_scenario({"power": {"control": "test_registerd"}})
    assert ("power.control: must be one of 'optimal', 'truncated_inversion', 'full_inversion', "
            "'ideal' or 'test_registered' (got 'test_registerd')") in str(caught.value)


def test_an_unregistered_value_is_refused_as_before():
    with pytest.raises(ScenarioError) as caught:
        parse_scenario({"power": {"control": "test_registered"}})
    assert ("power.control: must be one of 'optimal', 'truncated_inversion', 'full_inversion' "
            "or 'ideal' (got 'test_registered')") in str(caught.value)
    with pytest.raises(ScenarioError, match=r"power\.control: must be one of"):
        parse_scenario({"power": {"control": 3}})


def test_variant_loads_a_path_or_takes_the_callable():
    assert Variant(_NoKeys, "phy.power:FullInversion").target().__name__ == "FullInversion"
    assert Variant(_NoKeys, _Control).target() is _Control
