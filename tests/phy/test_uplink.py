"""The uplink as one block (phy/uplink/): built once, one link per round, one result per phase."""

import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from native.streams import CHANNEL, stream_seed
from phy.channel import IidRayleigh
from phy.csi import PerfectCSI
from phy.power import FullInversion, OptimalPower, PowerControl
from phy.uplink import Analog, Uplink
from phy.uplink.settings import AirInterface, Cohort, DownlinkLoad, TraceOptions

K, D, F = 6, 300, 32
NOISE_W = 10 ** (-7.4) / 1e3


class ScaledInversion(PowerControl):
    """A toy power control, all of it in one class (the second file would be its entry in
    phy/parameters.py::POWER_CONTROLS): channel inversion scaled down per OFDM symbol to
    the budget."""

    name = "scaled_inversion"
    budgeted = True

    def __call__(self, delta_abs, u, power_budget_w=None, channel_gain=None, reference_gain=None):
        u = tf.broadcast_to(u, tf.shape(delta_abs))
        live = ~tf.math.is_inf(u)
        power = tf.reduce_sum(tf.where(live, u * tf.cast(delta_abs, tf.float64) ** 2, tf.zeros_like(u)),
                              -1, keepdims=True)
        budget = tf.cast(power_budget_w, tf.float64)
        scale = tf.sqrt(tf.minimum(tf.ones_like(power), tf.math.divide_no_nan(budget, power)))
        return tf.where(live, delta_abs * tf.cast(scale, tf.float32), tf.zeros_like(delta_abs))


class Unbudgeted(ScaledInversion):
    budgeted = False


def _uplink(control, *, scheme=None, symbol_duration_s=float("nan"), keep_signals=None):
    path_gain = np.linspace(40.0, 250.0, K) ** -4.0
    trace = TraceOptions() if keep_signals is None else TraceOptions(keep_signals=keep_signals)
    return Uplink(channel=IidRayleigh(F), csi=PerfectCSI(),
                  air=AirInterface(F, tx_power_w=1e-3, noise_power_w=NOISE_W, symbol_duration_s=symbol_duration_s),
                  cohort=Cohort(path_gain, phases=[("delta", D)]), seed=5,
                  scheme=scheme if scheme is not None else Analog(control, gamma_w=NOISE_W),
                  downlink=DownlinkLoad(D), trace=trace)


def _updates(seed=0):
    rng = np.random.default_rng(seed)
    return tf.constant(rng.standard_normal((K, D)) * 1e-2, tf.float32), tf.fill([K], 1.0 / K)


def test_a_toy_power_control_needs_no_other_file():
    """A new control plugs into the block as it is: the link counts
    power_over_budget_<phase> because the control says it is ``budgeted`` (no list of
    names anywhere), the budget holds, and an unbudgeted one gets no such column."""
    updates, weights = _updates()
    columns = _uplink(ScaledInversion()).round(0).send("delta", updates, weights).columns()
    assert columns.scalars["power_over_budget_delta"] == 0.0
    assert np.all(columns.per_device["tx_power_max_w_delta"] <= 1e-3 * (1 + 1e-4))
    assert columns.scalars["distortion_delta"] > 0.0  # the budget binds somewhere
    unbudgeted = _uplink(Unbudgeted()).round(0).send("delta", updates, weights).columns()
    assert "power_over_budget_delta" not in unbudgeted.scalars
    assert "power_over_budget_delta" not in _uplink(FullInversion()).round(0).send(
        "delta", updates, weights).columns().scalars


def test_a_round_replays_from_the_seed_and_names_its_columns():
    """Two links of the same round draw the same channel and estimate; the round's and the
    phase's columns are the documented ones."""
    updates, weights = _updates()
    block = _uplink(OptimalPower())
    first, second = block.round(3), block.round(3)
    np.testing.assert_array_equal(first.h.numpy(), second.h.numpy())
    a = first.send("delta", updates, weights)
    b = second.send("delta", updates, weights)
    np.testing.assert_array_equal(a.estimate.numpy(), b.estimate.numpy())
    assert a.received is None
    assert not np.array_equal(block.round(4).h.numpy(), first.h.numpy())
    assert set(a.columns().scalars) == {f"{name}_delta" for name in (
        "delta_bar", "distortion", "noise_power", "aggregate_error", "aggregate_nmse", "power_over_budget")}
    round_columns = first.columns()
    assert round_columns.scalars["uplink_symbols"] == -(-D // F)
    assert round_columns.scalars["downlink_symbols"] > 0
    assert set(round_columns.per_device) == {"mean_channel_gain", "csi_nmse", "tx_energy_j"}
    assert np.isnan(round_columns.scalars["uplink_seconds"])  # no numerology given


def test_seconds_and_joules_follow_the_symbols_and_the_power():
    """uplink_seconds is the phases' symbols times (F + C) / B, a device's energy its mean
    per-symbol power times the symbols times that duration, the round's energy their sum."""
    updates, weights = _updates(2)
    duration_s = (F + 4) / (F * 30e3)
    link = _uplink(OptimalPower(), symbol_duration_s=duration_s).round(1)
    phase = link.send("delta", updates, weights).columns()
    columns = link.columns()
    num_symbols = -(-D // F)
    assert columns.scalars["uplink_seconds"] == pytest.approx(num_symbols * duration_s)
    expected = phase.per_device["tx_power_w_delta"].astype(np.float64) * num_symbols * duration_s
    np.testing.assert_allclose(columns.per_device["tx_energy_j"], expected, rtol=1e-12)
    assert columns.scalars["uplink_energy_j"] == pytest.approx(expected.sum(), rel=1e-12)
    assert columns.scalars["uplink_energy_j"] > 0.0


@pytest.mark.parametrize("keep", [False, True])
def test_kept_signals_come_from_the_reference_chain(keep):
    """With the signals kept the phase adds y and the estimate, the round H and H_hat, and
    the estimate agrees with the implementation's (the reference chain's x and y)."""
    updates, weights = _updates(1)
    block = _uplink(OptimalPower(), keep_signals=lambda t: keep)
    link = block.round(0)
    result = link.send("delta", updates, weights)
    assert set(result.columns().signals) == ({"y_delta", "estimate_delta"} if keep else set())
    assert set(link.columns().signals) == ({"H", "H_hat"} if keep else set())
    plain = _uplink(OptimalPower()).round(0).send("delta", updates, weights)
    np.testing.assert_allclose(result.estimate.numpy(), plain.estimate.numpy(), rtol=1e-4,
                               atol=1e-5 * float(np.abs(plain.estimate.numpy()).max()))


def test_a_scheme_column_the_uplink_writes_itself_is_refused():
    """A scheme that names one of the columns the round link writes for every scheme
    (here ``aggregate_error_<phase>``) is refused, not silently overwritten."""
    from phy.uplink import SchemeResult

    class Clashing(Analog):
        def send(self, link, air, *, phase, seed, keep_signals, per_device):
            result = super().send(link, air, phase=phase, seed=seed, keep_signals=keep_signals,
                                  per_device=per_device)
            result.columns.scalars[f"aggregate_error_{phase}"] = 0.0
            return SchemeResult(result.estimate, result.num_symbols, result.tx_energy_j, result.columns)

    updates, weights = _updates()
    with pytest.raises(ValueError, match=r"Clashing writes \['aggregate_error_delta'\]"):
        _uplink(OptimalPower(), scheme=Clashing(OptimalPower(), gamma_w=NOISE_W)).round(0).send("delta", updates, weights)


def test_a_schemes_round_hooks_see_every_phase_charge_the_ledger_and_add_columns():
    """A scheme with round hooks (``start_round`` -> a :class:`phy.uplink.SchemeRound`):
    the round link hands it each phase's link before the scheme sends (here it halves the
    updates, so the estimate is half the plain one's, and charges 1 J per phase to device
    0 in the round's ledger) and adds its round columns; a scheme without hooks gets the
    neutral round, and the block holds no state of a round."""
    from native.columns import Columns
    from phy.uplink import SchemeRound
    from phy.uplink.scheme import PLAIN_ROUND

    class Halving(SchemeRound):
        def __init__(self):
            self.phases = []

        def before_phase(self, phase, link, ledger):
            self.phases.append(phase)
            ledger.charge_energy([0], np.array([1.0]))
            return dataclasses.replace(link, updates=link.updates * 0.5), Columns(
                scalars={f"halved_{phase}": 1.0})

        def columns(self):
            return Columns(scalars={"halved_phases": float(len(self.phases))})

    class Hooked(Analog):
        def start_round(self, round_link):
            return Halving()

    updates, weights = _updates()
    plain_link = _uplink(OptimalPower(), symbol_duration_s=1e-4).round(0)
    assert plain_link.scheme_round is PLAIN_ROUND
    plain = plain_link.send("delta", updates * 0.5, weights)
    block = _uplink(OptimalPower(), symbol_duration_s=1e-4, scheme=Hooked(OptimalPower(), gamma_w=NOISE_W))
    link = block.round(0)
    result = link.send("delta", updates, weights)
    np.testing.assert_array_equal(result.estimate.numpy(), plain.estimate.numpy())
    assert result.columns().scalars["halved_delta"] == 1.0
    columns, plain_columns = link.columns(), plain_link.columns()
    assert columns.scalars["halved_phases"] == 1.0 and "halved_phases" not in plain_columns.scalars
    expected = plain_columns.per_device["tx_energy_j"].copy()
    expected[0] += 1.0
    np.testing.assert_array_equal(columns.per_device["tx_energy_j"], expected)
    assert link.ledger.symbols == plain_link.ledger.symbols > 0


def test_a_new_drops_channel_travels_with_the_round_link_not_the_block():
    """With new drops every 2 rounds the round link of round 2 holds drop 1's channel
    model and path gains and draws its channel at them; the block keeps drop 0's (the
    cohort's) across the rounds."""
    from phy.redrop import Drops
    from phy.uplink.settings import ChannelOverTime

    class Placed(IidRayleigh):
        def __init__(self, path_gain):
            super().__init__(F)
            self.path_gain = np.asarray(path_gain, np.float64)

    first_gain = np.linspace(40.0, 250.0, K) ** -4.0
    first = Placed(first_gain)
    drops = Drops(2, (first, np.zeros((K, 2))), lambda d: (Placed(first_gain * 10.0 ** d), np.ones((K, 2))))
    block = Uplink(channel=first, csi=PerfectCSI(), air=AirInterface(F, 1e-3, NOISE_W),
                   cohort=Cohort(first_gain, [("delta", D)]), scheme=Analog(OptimalPower(), gamma_w=NOISE_W),
                   seed=5, over_time=ChannelOverTime(drops=drops))
    before = block.path_gain
    link = block.round(2)
    assert link.channel is drops.at(2)[0] and block.channel is first and block.path_gain is before
    np.testing.assert_array_equal(link.path_gain.numpy(), np.float32(first_gain * 10.0))
    expected = drops.at(2)[0](link.path_gain, stream_seed(5, 2, CHANNEL))
    np.testing.assert_array_equal(link.h.numpy(), expected.numpy())
    assert block.round(0).channel is first
