"""A variant registered after import (as notebooks/03_custom_power_control.ipynb does) is a
valid scenario value, and Variant takes the implementation itself as well as a path."""

from __future__ import annotations

from typing import ClassVar, get_args

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
    assert ("power.control: must be one of 'optimal', 'truncated_inversion', 'privacy_scaling', 'full_inversion', "
            "'ideal' or 'test_registered' (got 'test_registerd')") in str(caught.value)


def test_an_unregistered_value_is_refused_as_before():
    with pytest.raises(ScenarioError) as caught:
        parse_scenario({"power": {"control": "test_registered"}})
    assert ("power.control: must be one of 'optimal', 'truncated_inversion', 'privacy_scaling', 'full_inversion' "
            "or 'ideal' (got 'test_registered')") in str(caught.value)
    with pytest.raises(ScenarioError, match=r"power\.control: must be one of"):
        parse_scenario({"power": {"control": 3}})


def test_variant_loads_a_path_or_takes_the_callable():
    assert Variant(_NoKeys, "phy.power:FullInversion").target().__name__ == "FullInversion"
    assert Variant(_NoKeys, _Control).target() is _Control


def test_combiners_and_scheduling_are_listed_once():
    """The names of ``bs.combiner`` and ``participation.scheduling`` come from their
    registries alone (phy.parameters): the scenario's allowed values, the display names and
    the implementations (every scheduling policy's function) follow them."""
    import numpy as np

    from cosim import display_names
    from cosim.scenario.tables import BsConfig, ParticipationConfig
    from native.parameters import Choice
    from phy.combiner import ReceiveCombiner
    from phy.parameters import COMBINERS, SCHEDULING

    assert get_args(BsConfig.model_fields["combiner"].annotation) == tuple(COMBINERS)
    assert get_args(ParticipationConfig.model_fields["scheduling"].annotation) == tuple(SCHEDULING)
    for key, registry in (("bs.combiner", COMBINERS), ("participation.scheduling", SCHEDULING)):
        assert display_names.VALUES[key] == {name: c.label for name, c in registry.items()}
    h = np.ones((2, 2, 3), np.complex64)
    for name in COMBINERS:
        assert ReceiveCombiner(name)(h).shape == (2, 3)
    with pytest.raises(ValueError, match=r"one of \('mrc_strongest', 'centroid', 'maxmin'\)"):
        ReceiveCombiner("zero_forcing")
    gain = np.array([1.0, 4.0, 0.5, 2.0])  # 0, 6, -3 and 3 dB
    order = np.array([2, 0, 3, 1])
    config = ParticipationConfig(fraction=0.5)
    picked = {name: sorted(choice.target()(config, gain, order).tolist())
              for name, choice in SCHEDULING.items() if name != "gain_threshold"}
    assert picked == {"uniform": [0, 2], "best_channel": [1, 3]}
    threshold = ParticipationConfig(scheduling="gain_threshold", gain_threshold_db=1.0)
    assert SCHEDULING["gain_threshold"].target()(threshold, gain, order).tolist() == [1, 3]
    with pytest.raises(ValueError, match="names no implementation"):
        Choice("label only").target()


def test_architectures_are_listed_once():
    """``model.architecture``'s names come from ``learning.models.shapes.ARCHITECTURE_NAMES``
    alone: the scenario's allowed values and the model registry follow it, and every
    built model's parameter tensors have the shapes and order of ``param_shapes`` (the
    layout d is counted from, without TensorFlow)."""
    from cosim.scenario.tables import ModelConfig
    from learning.models.architectures import ARCHITECTURES, build_model
    from learning.models.shapes import ARCHITECTURE_NAMES, CONVOLUTIONAL, image_shape, param_shapes

    assert get_args(ModelConfig.model_fields["architecture"].annotation) == ARCHITECTURE_NAMES
    assert tuple(ARCHITECTURES) == ARCHITECTURE_NAMES
    for name in ARCHITECTURE_NAMES:
        shape = image_shape((9, 7, 2)) if name in CONVOLUTIONAL else (5, 3)
        model = build_model(name, shape, 4, (6, 5))
        assert model.param_shapes == param_shapes(name, shape, 4, (6, 5))
    with pytest.raises(ValueError, match="architecture must be one of 'mlp', 'cnn', 'resnet56'"):
        param_shapes("vgg", (8, 8, 3), 10)


def test_what_a_scheme_carries_and_accounts_is_declared_once():
    """``carries`` and ``accounts_privacy`` are declared by a scheme's parameters in
    ``UPLINK_SCHEMES`` (no TensorFlow): the scheme classes take them from there, and the
    scenario's refusal of ``[privacy]`` follows the flag, not the scheme's name."""
    from native.parameters import Variant
    from phy.parameters import UPLINK_SCHEMES

    for name, variant in UPLINK_SCHEMES.items():
        scheme = variant.target()
        assert scheme.carries == variant.parameters.carries, name
        assert scheme.accounts_privacy == getattr(variant.parameters, "accounts_privacy", False), name
    assert [n for n, v in UPLINK_SCHEMES.items() if getattr(v.parameters, "accounts_privacy", False)] == ["analog"]

    class _Accounted(_NoKeys):
        carries: ClassVar[str] = "values"
        accounts_privacy: ClassVar[bool] = True

    UPLINK_SCHEMES["test_accounted"] = Variant(_Accounted, _Control)
    try:
        privacy = {"privacy": {"delta": 1e-5}}
        assert parse_scenario({"uplink": {"scheme": "test_accounted"}, **privacy}).privacy is not None
        with pytest.raises(ScenarioError, match=r"uplink\.scheme: = 'digital_ofdma'"):
            parse_scenario({"uplink": {"scheme": "digital_ofdma"}, **privacy})
    finally:
        del UPLINK_SCHEMES["test_accounted"]


def test_whether_a_power_control_is_budgeted_is_declared_once():
    """``budgeted``, ``over_the_air``, ``scales_for_privacy`` and ``allows_joint_gamma``
    are declared by a control's parameters in ``POWER_CONTROLS`` (read without
    TensorFlow: ``phy.parameters.budgeted``, ..., as ``cosim/privacy`` and the scenario's
    checks do); every control class agrees with its entry, and neither ``cosim/privacy``
    nor ``cosim/scenario`` branches on a control's name."""
    from pathlib import Path

    from phy.parameters import allows_joint_gamma, budgeted, over_the_air, scales_for_privacy

    for name, variant in POWER_CONTROLS.items():
        control = variant.build({"tci_gain_threshold": 0.1})
        assert control.budgeted == variant.parameters.budgeted == budgeted(name), name
        assert control.over_the_air == variant.parameters.over_the_air == over_the_air(name), name
        assert control.scales_for_privacy == variant.parameters.scales_for_privacy == scales_for_privacy(name)
    assert [n for n in POWER_CONTROLS if not budgeted(n)] == ["full_inversion", "ideal"]
    assert [n for n in POWER_CONTROLS if not over_the_air(n)] == ["ideal"]
    assert [n for n in POWER_CONTROLS if scales_for_privacy(n)] == ["privacy_scaling"]
    assert [n for n in POWER_CONTROLS if allows_joint_gamma(n)] == ["optimal"]
    root = Path(__file__).parents[2] / "cosim"
    for path in [*(root / "privacy").glob("*.py"), *(root / "scenario").glob("*.py")]:
        text = path.read_text()
        for name in POWER_CONTROLS:
            for branch in (f'control == "{name}"', f'control != "{name}"', f'"{name}": True'):
                assert branch not in text, (path.name, branch)
