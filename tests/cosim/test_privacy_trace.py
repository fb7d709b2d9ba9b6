"""[privacy] in the trace: every round's mechanism from the uplink, the accountant's
epsilon (cumulative and the round's), a resumed run's figures equal to a straight run's,
and the rest of the trace as without [privacy]."""

from __future__ import annotations

from pathlib import Path

import dp_accounting
import h5py
import numpy as np
import pytest
from dp_accounting.pld import pld_privacy_accountant
from tiny_scenario import write_tiny

from cosim import privacy
from cosim.engine import Engine
from cosim.run import run_scenario
from cosim.scenario import load_scenario, scenario_num_params
from cosim.scenario.derived import uplink_phase_values
from cosim.trace import TIMING_COLUMNS

# the tiny scenario at a low power (a worst noise multiplier near 5: epsilon ~ 1 a round)
PRIVATE = ["power.tx_power_dbm=-60", "privacy.delta=1e-5"]


def _arrays(path):
    with h5py.File(path, "r") as f:
        out = {}
        f.visititems(lambda name, obj: out.__setitem__(name, obj[()])
                     if isinstance(obj, h5py.Dataset)
                     and name.rsplit("/", 1)[-1] not in TIMING_COLUMNS else None)
    return out

def _tiny_runs_by(tmp_path, key, values, rounds):
    """One tiny run with the target and per-device columns per value of ``key`` (in
    ``tmp_path / value``): ``({value: its arrays}, the last run's scenario)``."""
    runs = {}
    for value in values:
        (tmp_path / value).mkdir()
        scenario = load_scenario(write_tiny(tmp_path / value, rounds=rounds),
                                 [*TARGET, "trace.per_device=true", f"{key}={value}"])
        run_scenario(scenario, progress=False, stop_on_divergence=False)
        runs[value] = _arrays(scenario.trace_path)
    return runs, scenario



class _Interrupted(Engine):
    def run_round(self, t, state):
        if t == 2:
            raise KeyboardInterrupt
        return super().run_round(t, state)


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    """Three runs of the tiny scenario over 3 rounds: with [privacy] straight, with it
    interrupted after round 1 and resumed, and without [privacy]."""
    root = tmp_path_factory.mktemp("privacy_trace")
    out = {}
    for name in ("straight", "resumed", "plain"):
        (root / name).mkdir()
        scenario = load_scenario(write_tiny(root / name, rounds=3),
                                 PRIVATE[:1] if name == "plain" else PRIVATE)
        if name == "resumed":
            with pytest.raises(KeyboardInterrupt):
                run_scenario(scenario, progress=False, engine=_Interrupted(scenario))
            run_scenario(scenario, resume=True, progress=False)
        else:
            run_scenario(scenario, progress=False)
        out[name] = (scenario, _arrays(scenario.trace_path))
    return out


@pytest.fixture(scope="module")
def targeted(tmp_path_factory):
    """The tiny scenario with target 4 (``TARGET``; every phase needs noise at its 20 dBm)
    run straight over 2 and over 3 rounds, each once for the tests below that read such a
    run: ``{rounds: (scenario, its arrays)}``."""
    root = tmp_path_factory.mktemp("privacy_target")
    out = {}
    for rounds in (2, 3):
        (root / str(rounds)).mkdir()
        scenario = load_scenario(write_tiny(root / str(rounds), rounds=rounds), TARGET)
        run_scenario(scenario, progress=False, stop_on_divergence=False)
        out[rounds] = (scenario, _arrays(scenario.trace_path))
    return out


def test_a_resumed_run_writes_the_straight_runs_privacy_columns(traces):
    """Interrupted after two rounds and resumed (the ledger replayed from the trace's
    committed rows), the trace equals the straight run's, privacy columns included."""
    _, straight = traces["straight"]
    _, resumed = traces["resumed"]
    assert straight.keys() == resumed.keys()
    for name in straight:
        np.testing.assert_array_equal(straight[name], resumed[name], err_msg=name)
    assert straight["rounds/privacy_epsilon"].shape == (3,)


def test_the_epsilon_is_the_librarys_composition_of_the_traced_rounds(traces):
    """privacy_epsilon after round t is dp-accounting's PLD accountant (on the run's
    interval) composing rounds 0..t, each the composition of its phases' Gaussian events
    at the traced worst multipliers; privacy_epsilon_round is one round's alone; the
    worst multiplier is the smallest of the per-device ones and grows epsilon down."""
    scenario, rounds = traces["straight"]
    phases = ("rho", "nu")
    expected = privacy.run_expected_epsilon(
        scenario, privacy.project(scenario, scenario_num_params(scenario)))
    accountant = pld_privacy_accountant.PLDAccountant(
        value_discretization_interval=privacy.pld_interval(expected))
    for t in range(3):
        z = [float(rounds[f"rounds/privacy_noise_multiplier_{phase}"][t]) for phase in phases]
        event = dp_accounting.ComposedDpEvent([dp_accounting.GaussianDpEvent(v) for v in z])
        accountant.compose(event)
        assert rounds["rounds/privacy_epsilon"][t] == accountant.get_epsilon(1e-5)
        alone = pld_privacy_accountant.PLDAccountant(
            value_discretization_interval=privacy.pld_interval(expected))
        alone.compose(event)
        assert rounds["rounds/privacy_epsilon_round"][t] == alone.get_epsilon(1e-5)
        for phase in phases:
            per_device = rounds[f"rounds/per_device/device_noise_multiplier_{phase}"][t]
            worst = int(rounds[f"rounds/privacy_worst_device_{phase}"][t])
            assert per_device[worst] == rounds[f"rounds/privacy_noise_multiplier_{phase}"][t]
            assert per_device[worst] == per_device.min()
    assert 0.0 < rounds["rounds/privacy_epsilon"][0] < rounds["rounds/privacy_epsilon"][2]


def test_without_noise_privacy_only_adds_columns(traces):
    """[privacy] without a target only observes: every dataset of the run without it is
    in the run with it, with the same values (the scenario text apart)."""
    _, plain = traces["plain"]
    _, private = traces["straight"]
    assert not any("privacy" in name for name in plain)
    for name in plain:
        np.testing.assert_array_equal(plain[name], private[name], err_msg=name)
    added = set(private) - set(plain)
    assert added and all("privacy" in name or "noise_multiplier" in name
                         or "artificial_noise" in name for name in added), sorted(added)


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # the diverged model
def test_planned_noise_meets_the_target_in_the_accountants_own_figure(targeted):
    """At the tiny cell's 20 dBm the channel gives no privacy (multipliers ~1e-4), so every
    phase of every round gets the planned artificial noise: its worst device sits at its
    floor, and the run's own privacy_epsilon after its 3 rounds is at most the target and
    within 1 % of it. (The noise that buys epsilon = 4 in 3 rounds swamps the tiny model's
    updates: the run diverges, and goes on.)"""
    target = 4.0
    scenario, rounds = targeted[3]
    assert scenario.privacy.target_epsilon == target and scenario.rounds == 3
    floor = privacy.plan_noise_floor(
        scenario, uplink_phase_values(scenario, scenario_num_params(scenario)))
    for phase in ("rho", "nu"):
        assert np.all(rounds[f"rounds/artificial_noise_power_w_{phase}"] > 0.0)
        np.testing.assert_allclose(rounds[f"rounds/privacy_noise_multiplier_{phase}"],
                                   floor[phase], rtol=1e-9)
    assert 0.99 * target <= rounds["rounds/privacy_epsilon"][-1] <= target


def test_poisson_subsampling_composes_the_traced_joint_multiplier(tmp_path):
    """With privacy.subsampling = "poisson" (a uniform cohort of half the devices) each
    round is the library's PoissonSampledDpEvent(q = 0.5) of the Gaussian at the traced
    privacy_joint_noise_multiplier, which is at most every phase's multiplier."""
    scenario = load_scenario(write_tiny(tmp_path, rounds=2),
                             [*PRIVATE, "privacy.subsampling=poisson", "participation.fraction=0.5"])
    run_scenario(scenario, progress=False)
    rounds = _arrays(scenario.trace_path)
    expected = privacy.run_expected_epsilon(
        scenario, privacy.project(scenario, scenario_num_params(scenario)))
    accountant = pld_privacy_accountant.PLDAccountant(
        value_discretization_interval=privacy.pld_interval(expected))
    for t in range(2):
        joint = float(rounds["rounds/privacy_joint_noise_multiplier"][t])
        assert joint <= min(rounds[f"rounds/privacy_noise_multiplier_{p}"][t] for p in ("rho", "nu"))
        accountant.compose(dp_accounting.PoissonSampledDpEvent(
            0.5, dp_accounting.GaussianDpEvent(joint)))
        assert rounds["rounds/privacy_epsilon"][t] == accountant.get_epsilon(1e-5)


TARGET = ["privacy.delta=1e-5", "privacy.target_epsilon=4"]


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # the diverged model
def test_a_stopped_run_extended_ends_at_or_below_its_target(tmp_path, capsys):
    """A run with target 4 over 4 rounds (at the tiny cell's 20 dBm every phase needs noise)
    stopped after two rounds and resumed with 6: the 4 remaining rounds are planned against
    the 2 traced ones (the library composing them), so the run's own privacy_epsilon ends at
    or below the target and within 1 % of it; every phase sits at the floor its round was
    planned with (privacy_noise_floor_<phase>, to 1e-9), and no warning is said."""
    scenario = load_scenario(write_tiny(tmp_path, rounds=4), TARGET)
    with pytest.raises(KeyboardInterrupt):
        run_scenario(scenario, progress=False, engine=_Interrupted(scenario), stop_on_divergence=False)
    longer = load_scenario(write_tiny(tmp_path, rounds=6), TARGET)
    run_scenario(longer, resume=True, progress=False, stop_on_divergence=False)
    assert "above privacy.target_epsilon" not in capsys.readouterr().err
    rounds = _arrays(longer.trace_path)
    first = privacy.plan_noise_floor(scenario, uplink_phase_values(scenario, scenario_num_params(scenario)))
    np.testing.assert_array_equal(rounds["rounds/privacy_planned_rounds"], [4, 4, 6, 6, 6, 6])
    for phase in ("rho", "nu"):
        floor = rounds[f"rounds/privacy_noise_floor_{phase}"]
        assert np.all(floor[:2] == first[phase]) and np.all(floor[2:] == floor[2])
        assert floor[2] > first[phase]  # the remaining rounds get more noise each
        np.testing.assert_allclose(rounds[f"rounds/privacy_noise_multiplier_{phase}"], floor, rtol=1e-9)
    assert 0.99 * 4.0 <= rounds["rounds/privacy_epsilon"][-1] <= 4.0


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # the diverged model
def test_a_run_with_a_target_resumed_with_the_same_rounds_is_the_straight_run(tmp_path,
                                                                               targeted):
    """Stopped after two rounds and resumed with the same rounds, a run with a target keeps
    the floor of its last committed round: its trace equals the straight run's bit for bit
    (the `targeted` fixture's run of 3 rounds)."""
    scenario = load_scenario(write_tiny(tmp_path, rounds=3), TARGET)
    with pytest.raises(KeyboardInterrupt):
        run_scenario(scenario, progress=False, engine=_Interrupted(scenario),
                     stop_on_divergence=False)
    run_scenario(scenario, resume=True, progress=False, stop_on_divergence=False)
    traces = {"straight": targeted[3][1], "resumed": _arrays(scenario.trace_path)}
    assert traces["straight"].keys() == traces["resumed"].keys()
    for name, values in traces["straight"].items():
        np.testing.assert_array_equal(values, traces["resumed"][name], err_msg=name)


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # the diverged model
def test_extending_a_run_that_spent_its_target_is_refused(tmp_path, capsys, targeted):
    """A trace whose two committed rounds spent more than the target (their multipliers
    rewritten to 0.05, as rounds without the noise floor would have them), extended to 4
    rounds: no finite noise in the remaining rounds meets the target, so cosim run
    --resume refuses with one line naming privacy.target_epsilon, exit status 2, and the
    trace is left as it was, byte for byte."""
    import shutil

    from cosim.cli import main

    straight, _ = targeted[2]  # a copy of the run of 2 rounds (where it lies is not compared)
    trace = Path(shutil.copy(straight.trace_path, tmp_path))
    with h5py.File(trace, "r+") as f:
        for phase in ("rho", "nu"):
            f[f"rounds/privacy_noise_multiplier_{phase}"][:] = 0.05
    before = trace.read_bytes()
    path = write_tiny(tmp_path, rounds=4)
    sets = [x for item in TARGET for x in ("--set", item)]
    assert main(["run", str(path), "--resume", *sets]) == 2
    problem = [x for x in capsys.readouterr().err.splitlines() if "privacy.target_epsilon" in x]
    assert len(problem) == 1, problem
    assert "privacy.target_epsilon: = 4 cannot be met: the 2 rounds already in the trace spent" in problem[0]
    assert trace.read_bytes() == before


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # the diverged model
def test_the_devices_noise_meets_the_floor_and_costs_their_power(tmp_path, targeted):
    """privacy.noise_source = "devices" at the tiny cell's 20 dBm, target 4 over 3 rounds:
    each sender adds its share of the artificial noise, so the BS receives what the
    designated source would send: every phase sits at its floor (to 1e-9) and the run
    ends within 1 % below its target, and every dataset equals the designated source's
    run but the energy, larger for each device by its noise's power (the traced
    artificial_noise_tx_power_w_<phase>, sum_f sigma_a^2 / (K_T |h_kf|^2)) times the
    phase's N OFDM symbols of (F + C) / B seconds."""
    from cosim.scenario.derived import symbols_per_phase

    runs, scenario = _tiny_runs_by(tmp_path, "privacy.noise_source", ("devices",), 3)
    designated, devices = targeted[3][1], runs["devices"]  # "designated" is the default
    for phase in ("rho", "nu"):
        np.testing.assert_allclose(devices[f"rounds/privacy_noise_multiplier_{phase}"],
                                   devices[f"rounds/privacy_noise_floor_{phase}"], rtol=1e-9)
    assert 0.99 * 4.0 <= devices["rounds/privacy_epsilon"][-1] <= 4.0
    energy = {"rounds/per_device/tx_energy_j", "rounds/uplink_energy_j", "rounds/cumulative_uplink_energy_j"}
    added = set(devices) - set(designated)
    assert added == {f"rounds/{name}_{phase}" for phase in ("rho", "nu") for name in (
        "artificial_noise_tx_power_max_w", "artificial_noise_over_budget",
        "per_device/artificial_noise_tx_power_w")}, sorted(added)
    for name in set(designated) - energy:
        np.testing.assert_array_equal(designated[name], devices[name], err_msg=name)
    ofdm = scenario.ofdm
    symbol_s = (ofdm.num_subcarriers + ofdm.cyclic_prefix_samples) / ofdm.bandwidth_hz
    noise_j = sum(devices[f"rounds/per_device/artificial_noise_tx_power_w_{phase}"]
                  * symbols_per_phase(values, ofdm.num_subcarriers) * symbol_s
                  for phase, values in uplink_phase_values(scenario, scenario_num_params(scenario)).items())
    assert np.all(noise_j > 0.0)
    np.testing.assert_allclose(devices["rounds/per_device/tx_energy_j"],
                               designated["rounds/per_device/tx_energy_j"] + noise_j, rtol=1e-9)
    for phase in ("rho", "nu"):
        power = devices[f"rounds/per_device/artificial_noise_tx_power_w_{phase}"]
        np.testing.assert_array_equal(devices[f"rounds/artificial_noise_tx_power_max_w_{phase}"],
                                      power.max(axis=1))
        np.testing.assert_array_equal(devices[f"rounds/artificial_noise_over_budget_{phase}"],
                                      np.sum(power > scenario.power.tx_power_w, axis=1))


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # the diverged model
def test_privacy_scaling_meets_the_target_by_sending_less(tmp_path, targeted):
    """power.control = "privacy_scaling" (Liu and Simeone's adaptive power scaling) at the
    tiny cell's 20 dBm, target 4 over 2 rounds: no artificial noise anywhere; each phase's
    common transmit scaling s < 1 (traced, privacy_signal_scale_<phase>) puts its worst
    device at its floor (to 1e-9) and the run ends within 1 % below the target. Its
    accuracy cost is the designated source's: in round 0 the estimate's noise power
    equals that of the KKT control with the planned artificial noise (to float32 rounding) and every
    device sends s^2 times that run's power (to float32 rounding)."""
    runs, _ = _tiny_runs_by(tmp_path, "power.control", ("privacy_scaling",), 2)
    noise, scaled = targeted[2][1], runs["privacy_scaling"]  # "optimal" is the default
    for phase in ("rho", "nu"):
        assert np.all(scaled[f"rounds/artificial_noise_power_w_{phase}"] == 0.0)
        scale = scaled[f"rounds/privacy_signal_scale_{phase}"]
        assert np.all((scale > 0.0) & (scale < 1.0))
        np.testing.assert_allclose(scaled[f"rounds/privacy_noise_multiplier_{phase}"],
                                   scaled[f"rounds/privacy_noise_floor_{phase}"], rtol=1e-9)
    assert 0.99 * 4.0 <= scaled["rounds/privacy_epsilon"][-1] <= 4.0
    # noise_power_<phase> is formed in float32 (phy.aircomp_parts.finish)
    np.testing.assert_allclose(scaled["rounds/noise_power_rho"][0], noise["rounds/noise_power_rho"][0],
                               rtol=3e-7)
    np.testing.assert_allclose(scaled["rounds/per_device/tx_power_w_rho"][0],
                               scaled["rounds/privacy_signal_scale_rho"][0] ** 2
                               * noise["rounds/per_device/tx_power_w_rho"][0], rtol=1e-5)


def test_an_eavesdroppers_mechanism_and_epsilon_are_traced(tmp_path):
    """privacy.eavesdropper_distance_m = 50 with its own noise (-80 dBm) and an encrypted
    downlink, the tiny cell at -60 dBm over 3 rounds: each phase's eavesdropper_noise_multiplier_<phase> is the budget
    bound at its own channel (i.i.d. Rayleigh of mean max(d_k, 10 m)^-4 from the round's
    "eavesdropper" stream) and noise, and eavesdropper_epsilon is dp-accounting's PLD
    composition of those multipliers, as privacy_epsilon is of the BS's; a resumed run
    replays it (the same figures as a straight run)."""
    from dp_accounting.pld import pld_privacy_accountant as pld

    from native.streams import EAVESDROPPER, numpy_rng
    from phy.privacy import Eavesdropper, eavesdropper_path_gain

    sets = [*PRIVATE, "privacy.eavesdropper_distance_m=50", "privacy.eavesdropper_noise_power_dbm=-80",
            'privacy.eavesdropper_downlink="encrypted"']
    scenario = load_scenario(write_tiny(tmp_path, rounds=3), sets)
    engine = _Interrupted(scenario)
    with pytest.raises(KeyboardInterrupt):
        run_scenario(scenario, progress=False, engine=engine)
    run_scenario(scenario, resume=True, progress=False)
    rounds = _arrays(scenario.trace_path)
    positions = engine.world.deployment.positions_m
    gain = eavesdropper_path_gain(positions, 50.0, 4.0, 10.0)
    eavesdropper = Eavesdropper(gain, 10.0 ** (-11.0))
    symbols = {"rho": None, "nu": None}
    for phase in symbols:
        symbols[phase] = engine.uplink.grids[phase].num_symbols
    expected = privacy.run_expected_epsilon(
        scenario, privacy.project(scenario, scenario_num_params(scenario)))
    accountant = pld.PLDAccountant(value_discretization_interval=privacy.pld_interval(expected))
    for t in range(3):
        g = eavesdropper.channel_gain(scenario.ofdm.num_subcarriers, numpy_rng(scenario.seed, t, EAVESDROPPER))
        z = {}
        for phase, n in symbols.items():
            z[phase] = float(np.min(np.sqrt(1e-11 / 2) / np.sqrt(n * scenario.power.tx_power_w * g.max(axis=1))))
            np.testing.assert_allclose(rounds[f"rounds/eavesdropper_noise_multiplier_{phase}"][t], z[phase],
                                       rtol=1e-12)
        accountant.compose(dp_accounting.ComposedDpEvent([dp_accounting.GaussianDpEvent(v) for v in z.values()]))
        assert rounds["rounds/eavesdropper_epsilon"][t] == pytest.approx(accountant.get_epsilon(1e-5), rel=1e-12)
    assert np.all(np.isfinite(rounds["rounds/eavesdropper_epsilon_round"]))
    assert rounds["rounds/eavesdropper_epsilon"][2] > rounds["rounds/eavesdropper_epsilon"][0] > 0.0


def test_a_clip_norm_per_phase_clips_each_phase_to_its_own(tmp_path, traces):
    """``privacy.clip_norm = {rho = 1e9, nu = 1e-3}`` with the reported ``delta_bar``: no rho update is clipped and every
    sender's nu update is, in every round (``privacy_clipped_devices_<phase>``). Round 0's
    multipliers are the run's without clipping: rho's (the same updates, a clip bound of
    1e9 above the budget's) and nu's too (every nu update clipped, the clip bound
    ``C pi_k sqrt(gamma / delta_bar)`` no longer depends on C, and at -60 dBm the
    budget's bound is the smaller; docs/privacy.md; the run without clipping is the
    `traces` fixture's straight one, of 3 rounds)."""
    extra = ["privacy.clip_norm={rho = 1e9, nu = 1e-3}", 'privacy.delta_bar="reported"']
    scenario = load_scenario(write_tiny(tmp_path, rounds=2), [*PRIVATE, *extra])
    run_scenario(scenario, progress=False, stop_on_divergence=False)
    clipped = {"per_phase": _arrays(scenario.trace_path), "none": traces["straight"][1]}
    rounds = clipped["per_phase"]
    np.testing.assert_array_equal(rounds["rounds/privacy_clipped_devices_rho"], [0, 0])
    np.testing.assert_array_equal(rounds["rounds/privacy_clipped_devices_nu"], [8, 8])
    assert "rounds/privacy_clipped_devices_rho" not in clipped["none"]
    multiplier = "rounds/privacy_noise_multiplier_{}"
    for phase in ("rho", "nu"):
        assert rounds[multiplier.format(phase)][0] == clipped["none"][multiplier.format(phase)][0]
