"""Where a change goes (docs/architecture.md): a new trace column is one file's change."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
from test_toy_of_every_kind import (  # the toys, defined once
    ExactScheme,
    UnfadedChannel,
    scaled_inversion,
)
from tiny_scenario import write_tiny

from cosim.engine import Engine
from cosim.run import run_scenario
from cosim.scenario import load_scenario
from cosim.scenario.derived import memory_parts, scenario_num_params
from cosim.scenario.errors import ScenarioError
from cosim.study.cost import SCHEME_PHASE_VALUES, run_cost, study_cost_lines


def test_a_toy_algorithm_metric_is_one_line_in_the_algorithm(tmp_path):
    """An algorithm names its own columns (``metrics``): one more entry there is one more
    trace column; a name another block writes is refused."""
    scenario = load_scenario(write_tiny(tmp_path, rounds=1, every=1, algorithm="fedavg", hidden=4))
    engine = Engine(scenario)
    algorithm = engine.algorithm
    original = algorithm.metrics
    algorithm.metrics = lambda previous, state, phases: {
        **original(previous, state, phases), "toy_update_norm": float(np.linalg.norm(state.w - previous.w))}
    _, record = engine.run_round(0, engine.initial_state())
    assert record.scalars["toy_update_norm"] > 0.0
    assert record.scalars["train_loss"] == record.scalars["train_loss_delta"]
    algorithm.metrics = lambda previous, state, phases: {"ece": 0.0}
    with pytest.raises(ValueError, match="'ece' is written twice"):
        engine.run_round(0, engine.initial_state())


def test_a_toy_scheme_is_one_class_and_one_registry_entry(tmp_path, monkeypatch):
    """A new over-the-air scheme is a class behind :class:`phy.uplink.scheme.Scheme` and
    one entry of :data:`phy.parameters.UPLINK_SCHEMES` (its parameters a
    :class:`phy.parameters.SchemeParameters` with its memory term): the scenario selects it
    by ``uplink.scheme``, its columns and symbols reach the trace with no other change, and
    an unregistered name is refused naming ``uplink.scheme``."""
    from native.parameters import Variant
    from phy.parameters import UPLINK_SCHEMES, SchemeParameters

    path = write_tiny(tmp_path, rounds=2, every=2, hidden=4)
    with pytest.raises(ScenarioError, match=r"uplink\.scheme: must be one of 'analog'"):
        load_scenario(path, overrides=['uplink.scheme="toy"'])

    class ToyParameters(SchemeParameters):
        """The toy's facts: its memory term (its [K_S, n] float32 updates)."""

        def uplink_bytes_per_sender(self, num_values, num_subcarriers):
            return 4 * num_values

    monkeypatch.setitem(UPLINK_SCHEMES, "toy", Variant(ToyParameters, ExactScheme))
    summary = run_scenario(load_scenario(path, overrides=['uplink.scheme="toy"']), progress=False)
    with h5py.File(summary.trace_path, "r") as f:
        rounds = f["rounds"]
        assert "delta_bar_rho" not in rounds  # the analog chain's own column
        assert np.all(rounds["aggregate_nmse_rho"][()] < 1e-10)
        np.testing.assert_array_equal(rounds["uplink_energy_j"][()], 0.0)
        np.testing.assert_array_equal(rounds["uplink_symbols"][()],
                                      rounds["toy_symbols_rho"][()] + rounds["toy_symbols_nu"][()])


def test_a_toy_channel_model_is_one_class_and_one_registry_entry(tmp_path, monkeypatch):
    """A new channel model is a class (called with the path gains and a seed) and one entry
    of :data:`phy.parameters.CHANNEL_MODELS` with its keys: the scenario selects it by
    ``channel.model`` and every round's channel is the toy's (``mean_channel_gain`` equals
    the devices' path gains), with no other change; an unregistered name is refused naming
    ``channel.model``."""
    from native.parameters import Variant
    from phy.parameters import CHANNEL_MODELS, FlatRayleighChannel

    path = write_tiny(tmp_path, rounds=2, every=2, hidden=4)
    with pytest.raises(ScenarioError, match=r"channel\.model: must be one of"):
        load_scenario(path, overrides=['channel.model="unfaded"', "trace.per_device=true"])

    class UnfadedParameters(FlatRayleighChannel):
        """The toy's keys: the path loss exponent only."""

    monkeypatch.setitem(CHANNEL_MODELS, "unfaded", Variant(
        UnfadedParameters, UnfadedChannel, {"path_loss_exponent": None},
        extras=("num_subcarriers",), label="unfaded"))
    scenario = load_scenario(path, overrides=['channel.model="unfaded"', "trace.per_device=true"])
    summary = run_scenario(scenario, progress=False)
    with h5py.File(summary.trace_path, "r") as f:
        gain = f["rounds/per_device/mean_channel_gain"][()]
        path_gain = f["devices/path_gain"][()]
    np.testing.assert_allclose(gain, np.broadcast_to(path_gain, gain.shape), rtol=1e-6)


@pytest.mark.parametrize("budgeted", [True, False])
def test_a_toy_power_control_runs_with_privacy_from_its_registry_entry(tmp_path, monkeypatch, budgeted):
    """A new power control is a class and one entry of :data:`phy.parameters.POWER_CONTROLS`
    whose parameters say whether it is ``budgeted``: ``[privacy]``'s projection and target
    check read that there (no list of control names in ``cosim/privacy``), so the toy
    validates and runs with ``[privacy]``; unbudgeted, a target is refused naming it."""
    from native.parameters import Variant
    from phy.parameters import POWER_CONTROLS, PowerControlParameters

    class ToyControl(PowerControlParameters):
        """The toy's parameters: none; ``budgeted`` as the case says."""

    ToyControl.budgeted = budgeted
    monkeypatch.setitem(POWER_CONTROLS, "toy", Variant(ToyControl, scaled_inversion, label="toy"))
    path = write_tiny(tmp_path, rounds=2, every=2, algorithm="fedavg", hidden=4)
    sets = ['power.control="toy"', "power.tx_power_dbm=-60", "privacy.delta=1e-5"]
    scenario = load_scenario(path, overrides=sets)
    from cosim import privacy
    from cosim.scenario import scenario_num_params

    projection = privacy.project(scenario, scenario_num_params(scenario))
    if not budgeted:
        assert projection.epsilon == float("inf")
        assert "power.control = 'toy' has no power budget" in projection.assumes
        with pytest.raises(ScenarioError, match=r"privacy\.target_epsilon: = 8 cannot be met: "
                                                r"power\.control = 'toy' has no power budget"):
            run_scenario(load_scenario(path, overrides=[*sets, "privacy.target_epsilon=8"]), progress=False)
        return
    assert 0.0 < projection.epsilon < float("inf")
    summary = run_scenario(scenario, progress=False)
    with h5py.File(summary.trace_path, "r") as f:
        rounds = f["rounds"]
        assert "power_over_budget_delta" in rounds
        assert np.all(np.isfinite(rounds["privacy_epsilon"][()]))


def test_a_scheme_s_checks_memory_and_cost_are_its_registry_entry_s(tmp_path, monkeypatch):
    """What the scenario checks of a scheme, its memory term and its cost term are read
    from its parameters (:class:`phy.parameters.SchemeParameters`), so a scheme registered
    later is checked, estimated and priced as it declares; one that declares no memory
    term is refused naming ``uplink.scheme`` and one without a cost term is not priced,
    instead of counting as the analog scheme (more memory) or adding 0 s."""
    from native.parameters import Parameters, Variant
    from phy.parameters import UPLINK_SCHEMES, SchemeParameters

    class Declared(SchemeParameters):
        receiver_scaling = True  # it has a gamma for power.gamma = "joint" to choose
        phase_seconds = 1.0

        def uplink_bytes_per_sender(self, num_values, num_subcarriers):
            return 1000 * num_values

        def check_scenario(self, scenario):
            if scenario.cell.num_devices > 4:
                raise ValueError("cell.num_devices: the toy scheme takes at most 4")

    class Silent(Parameters):
        """A scheme's parameters that declare nothing."""

    monkeypatch.setitem(UPLINK_SCHEMES, "declared", Variant(Declared, ExactScheme))
    monkeypatch.setitem(UPLINK_SCHEMES, "silent", Variant(Silent, ExactScheme))
    path = write_tiny(tmp_path, rounds=2, every=2, hidden=4)
    with pytest.raises(ScenarioError, match=r"cell\.num_devices: the toy scheme takes at most 4"):
        load_scenario(path, overrides=['uplink.scheme="declared"'])
    declared = load_scenario(path, overrides=['uplink.scheme="declared"', "cell.num_devices=4",
                                              'power.gamma="joint"'])
    analog = load_scenario(path, overrides=["cell.num_devices=4", 'power.gamma="joint"'])
    d = scenario_num_params(declared)
    assert memory_parts(declared, d)["uplink phase"] == 4 * 1000 * d
    assert run_cost(declared, d).round_core_s == pytest.approx(
        run_cost(analog, d).round_core_s + 1.0 * 2 * d / SCHEME_PHASE_VALUES * 4 / 100)

    silent = load_scenario(path, overrides=['uplink.scheme="silent"'])
    with pytest.raises(ScenarioError, match=r"uplink\.scheme: = 'silent': its parameters \(Silent\) "
                                            "declare no memory term"):
        memory_parts(silent, d)
    assert not run_cost(silent, d).known
    assert "with uplink.scheme = 'silent'" in study_cost_lines([silent])[1]


def test_cosim_names_no_scheme_or_power_control_to_branch_on():
    """The scenario's checks and estimates (``cosim/scenario``, ``cosim/study/cost.py``,
    ``cosim/privacy``) iterate the registries: no scheme's or budget flag's name is
    compared there (the default ``"analog"`` of ``[uplink]`` and the size keys aside)."""
    from pathlib import Path

    from phy.parameters import UPLINK_SCHEMES

    root = Path(__file__).parents[2] / "cosim"
    sources = {path: path.read_text() for path in [*(root / "scenario").glob("*.py"),
                                                   root / "study/cost.py", *(root / "privacy").glob("*.py")]}
    for path, text in sources.items():
        for name in UPLINK_SCHEMES:
            for branch in (f'scheme == "{name}"', f'scheme != "{name}"', f'"{name}":'):
                assert branch not in text, (path.name, branch)
