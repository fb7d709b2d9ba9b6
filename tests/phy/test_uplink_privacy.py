"""The uplink's privacy (phy/uplink/private.py, the wrapper whose round hooks the block
calls, with phy.privacy.UplinkPrivacy): each phase's Gaussian mechanism as the BS sees
it, from the round's own channel, and the artificial noise of a noise floor; nothing of it
perturbs the phase when no noise is added; the air it refuses."""

import numpy as np
import pytest
import tensorflow as tf

from phy.channel import IidRayleigh
from phy.csi import PerfectCSI
from phy.power import OptimalPower
from phy.privacy import UplinkPrivacy
from phy.uplink import Analog, Uplink
from phy.uplink.private import Private
from phy.uplink.settings import AirInterface, Cohort, DownlinkLoad

K, D, F = 6, 300, 32
N = -(-D // F)
NOISE_W, POWER_W = 10 ** (-7.4) / 1e3, 1e-3


def _private(scheme, privacy):
    return scheme if privacy is None else Private(scheme, privacy)


def _uplink(privacy=None):
    path_gain = np.linspace(40.0, 250.0, K) ** -4.0
    return Uplink(channel=IidRayleigh(F), csi=PerfectCSI(), air=AirInterface(F, POWER_W, NOISE_W),
                  cohort=Cohort(path_gain, [("delta", D)]), scheme=_private(Analog(OptimalPower(), NOISE_W), privacy),
                  seed=5, downlink=DownlinkLoad(D))


def _send(block, t=2):
    rng = np.random.default_rng(1)
    updates = tf.constant(rng.standard_normal((K, D)) * 1e-2, tf.float32)
    link = block.round(t)
    return link, link.send("delta", updates, tf.fill([K], 1.0 / K))


def test_the_traced_mechanism_is_the_budget_bound_of_the_rounds_channel():
    """Every device's noise multiplier is sqrt(sigma^2 / 2) / sqrt(N P max_f |h_kf|^2)
    from the round's own channel (the KKT control is budgeted; perfect CSI: every
    subcarrier live), the worst device is the smallest, the round's joint multiplier of
    one phase is the phase's; and the phase's estimate is bit for bit the one without
    privacy."""
    link, sent = _send(_uplink(UplinkPrivacy()))
    columns = sent.columns()
    gain = np.abs(link.h.numpy().astype(np.complex128)) ** 2
    expected = np.sqrt(NOISE_W / 2.0) / np.sqrt(N * POWER_W * gain.max(axis=1))
    np.testing.assert_allclose(columns.per_device["device_noise_multiplier_delta"], expected,
                               rtol=1e-12)
    assert columns.scalars["privacy_noise_multiplier_delta"] == pytest.approx(expected.min(), rel=1e-12)
    assert columns.scalars["privacy_worst_device_delta"] == float(np.argmin(expected))
    assert columns.scalars["artificial_noise_power_w_delta"] == 0.0
    assert link.columns().scalars["privacy_joint_noise_multiplier"] == pytest.approx(
        expected.min(), rel=1e-12)
    _, plain = _send(_uplink())
    np.testing.assert_array_equal(sent.estimate.numpy(), plain.estimate.numpy())
    assert not any("privacy" in name for name in plain.columns().scalars)


def test_a_noise_floor_adds_the_least_noise_that_reaches_it():
    """With a floor above the channel's multiplier the uplink adds 2 (z s_max)^2 - sigma^2
    per subcarrier, the worst device then sits at the floor, and the receiver's noise
    power in the trace is of both noises; a floor below it adds nothing (the same
    estimate, bit for bit)."""
    _, bare = _send(_uplink(UplinkPrivacy()))
    z = bare.columns().scalars["privacy_noise_multiplier_delta"]
    _, sent = _send(_uplink(UplinkPrivacy(noise_floor={"delta": 3.0 * z})))
    columns = sent.columns().scalars
    largest = np.sqrt(NOISE_W / 2.0) / z  # the worst device's sensitivity
    added = 2.0 * (3.0 * z * largest) ** 2 - NOISE_W
    assert columns["artificial_noise_power_w_delta"] == pytest.approx(added, rel=1e-12)
    assert columns["privacy_noise_multiplier_delta"] == pytest.approx(3.0 * z, rel=1e-12)
    ratio = columns["noise_power_delta"] / bare.columns().scalars["noise_power_delta"]
    assert ratio == pytest.approx((NOISE_W + added) / NOISE_W, rel=1e-5)  # delta_bar alike
    _, low = _send(_uplink(UplinkPrivacy(noise_floor={"delta": 0.5 * z})))
    assert low.columns().scalars["artificial_noise_power_w_delta"] == 0.0
    np.testing.assert_array_equal(low.estimate.numpy(), bare.estimate.numpy())


def test_with_antennas_the_bs_sees_every_antenna_before_its_combiner():
    """With N_r = 2 the observer's gain is |h_kf|^2 summed over the antennas (the round's
    antenna channel, drawn again from its seed): each device's multiplier is the budget
    bound of that sum, at most the one of the combined channel (a unit-norm combiner
    keeps |m^H h|^2 <= ||h||^2)."""
    from phy.combiner import ReceiveCombiner

    path_gain = np.linspace(40.0, 250.0, K) ** -4.0
    block = Uplink(channel=IidRayleigh(F), csi=PerfectCSI(),
                   air=AirInterface(F, POWER_W, NOISE_W, combiner=ReceiveCombiner("centroid"), num_antennas=2),
                   cohort=Cohort(path_gain, [("delta", D)]), scheme=Private(Analog(OptimalPower(), NOISE_W), UplinkPrivacy()),
                   seed=5, downlink=DownlinkLoad(D))
    link, sent = _send(block)
    from native.streams import CHANNEL, stream_seed

    drawn = block.channel.antennas(block.path_gain, stream_seed(5, 2, CHANNEL), 2).numpy()
    antennas = link.scheme_round.observed_gain
    np.testing.assert_array_equal(antennas, np.sum(np.abs(drawn.astype(np.complex128)) ** 2, 1))
    combined = np.abs(link.h.numpy().astype(np.complex128)) ** 2
    assert np.all(antennas >= combined * (1 - 1e-5))
    expected = np.sqrt(NOISE_W / 2.0) / np.sqrt(N * POWER_W * antennas.max(axis=1))
    np.testing.assert_allclose(sent.columns().per_device["device_noise_multiplier_delta"],
                               expected, rtol=1e-12)


def test_a_clip_norm_bounds_an_adversarial_device():
    """With full inversion (no budget: unbounded without clipping, multiplier 0) and a clip
    norm C, a device whose update is 10^4 times the others' is clipped to C before power
    control: the BS's estimate is the weighted sum of the clipped updates (the receiver
    scaling gamma high: noise 1e-7 of delta_bar per value), every sender's sensitivity is
    the clip bound C pi sqrt(gamma / delta_bar) (perfect CSI) of the clipped updates' delta_bar,
    and the phase's error is counted against the unclipped sum."""
    from phy.power import FullInversion

    rng = np.random.default_rng(3)
    updates = rng.standard_normal((K, D)) * 1e-2
    updates[4] *= 1e4  # the adversary
    clip = 2.0 * float(np.linalg.norm(updates[0]))
    path_gain = np.linspace(40.0, 250.0, K) ** -4.0
    gamma_w = 1e7 * NOISE_W

    def block(privacy):
        return Uplink(channel=IidRayleigh(F), csi=PerfectCSI(), air=AirInterface(F, POWER_W, NOISE_W),
                      cohort=Cohort(path_gain, [("delta", D)]), scheme=Private(Analog(FullInversion(), gamma_w), privacy),
                      seed=5, downlink=DownlinkLoad(D))

    weights = tf.fill([K], 1.0 / K)
    sent = block(UplinkPrivacy(clip_norm=clip)).round(2).send(
        "delta", tf.constant(updates, tf.float32), weights)
    columns = sent.columns()
    norms = np.linalg.norm(updates, axis=1)
    clipped = updates * np.minimum(1.0, clip / norms)[:, None]
    assert columns.scalars["privacy_clipped_devices_delta"] == float(np.sum(norms > clip)) == 1.0
    np.testing.assert_allclose(sent.estimate.numpy(), clipped.mean(axis=0), rtol=0, atol=1e-3 * clip / np.sqrt(D))
    delta_bar = columns.scalars["delta_bar_delta"]
    sensitivity = clip * (1.0 / K) * np.sqrt(gamma_w / delta_bar)
    np.testing.assert_allclose(columns.per_device["device_noise_multiplier_delta"],
                               np.sqrt(NOISE_W / 2.0) / sensitivity, rtol=1e-5)
    unclipped_error = float(np.sum((updates.mean(axis=0) - sent.estimate.numpy()) ** 2))
    assert columns.scalars["aggregate_error_delta"] == pytest.approx(unclipped_error, rel=1e-4)
    unbounded = block(UplinkPrivacy()).round(2).send("delta", tf.constant(updates, tf.float32), weights)
    assert unbounded.columns().scalars["privacy_noise_multiplier_delta"] == 0.0
    # per phase: the phase's own clip norm is the one clip norm; a phase not named is not clipped
    own = block(UplinkPrivacy(clip_norm={"delta": clip})).round(2).send(
        "delta", tf.constant(updates, tf.float32), weights)
    np.testing.assert_array_equal(own.estimate.numpy(), sent.estimate.numpy())
    np.testing.assert_array_equal(own.columns().per_device["device_noise_multiplier_delta"],
                                  columns.per_device["device_noise_multiplier_delta"])
    other = block(UplinkPrivacy(clip_norm={"rho": clip})).round(2).send(
        "delta", tf.constant(updates, tf.float32), weights)
    assert "privacy_clipped_devices_delta" not in other.columns().scalars
    assert other.columns().scalars["privacy_noise_multiplier_delta"] == 0.0


# ---------------------------------------------------------------- the promises of issue 59

def _cohort_uplink(privacy, num_devices=12, **participation):
    """Two phases (rho, nu) over ``num_devices`` devices within 40-250 m with a
    ``[participation]`` table (cosim's, for its keys)."""
    from cosim.scenario.tables import ParticipationConfig

    path_gain = np.linspace(40.0, 250.0, num_devices) ** -4.0
    return Uplink(channel=IidRayleigh(F), csi=PerfectCSI(), air=AirInterface(F, POWER_W, NOISE_W),
                  cohort=Cohort(path_gain, [("rho", D), ("nu", D)],
                                population_weights=np.full(num_devices, 1.0 / num_devices),
                                participation=ParticipationConfig(**participation)),
                  scheme=_private(Analog(OptimalPower(), NOISE_W), privacy), seed=5,
                  downlink=DownlinkLoad(D))


def _send_phases(link, phases=("rho", "nu")):
    rng = np.random.default_rng(1)
    rows = link.cohort.scheduled.size
    scalars = {}
    for phase in phases:
        scalars.update(link.send(phase, tf.constant(rng.standard_normal((rows, D)) * 1e-2, tf.float32),
                                 tf.fill([rows], 1.0 / rows)).columns().scalars)
    return {**scalars, **link.columns().scalars}


def test_under_poisson_subsampling_the_joint_multiplier_is_the_populations_worst():
    """privacy.subsampling = "poisson" (12 devices, a uniform cohort of 3): the round's
    joint multiplier, the one the subsampled event takes, is the worst over *every*
    device as if it had been sampled, computed here by hand from the budget bound of the
    round's channel: min_k (sum_phase N P max_f |h_kf|^2 / (sigma^2 / 2))^-1/2. It is
    below the cohort's in some round (the cohort's alone overstated the privacy 1.6-fold
    at the tiny cell, issue 59); without subsampling the joint stays the cohort's."""
    below = 0
    for t in range(6):
        link = _cohort_uplink(UplinkPrivacy(subsampled=True), fraction=0.25).round(t)
        scalars = _send_phases(link)
        gain = np.abs(link.h.numpy().astype(np.complex128)) ** 2
        whitened = 4 * N * POWER_W * gain.max(axis=1) / NOISE_W  # 2 phases of N P max|h|^2 / (sigma^2 / 2)
        population = 1.0 / np.sqrt(whitened.max())
        cohort = 1.0 / np.sqrt(whitened[link.cohort.scheduled].max())
        assert scalars["privacy_joint_noise_multiplier"] == pytest.approx(population, rel=1e-12)
        for phase in ("rho", "nu"):
            assert scalars[f"privacy_population_noise_multiplier_{phase}"] == pytest.approx(
                population * np.sqrt(2.0), rel=1e-12)
            assert scalars[f"privacy_noise_multiplier_{phase}"] == pytest.approx(
                cohort * np.sqrt(2.0), rel=1e-12)  # the senders' worst, as traced before
        below += population < cohort * (1 - 1e-9)
        plain = _cohort_uplink(UplinkPrivacy(), fraction=0.25).round(t)
        assert _send_phases(plain)["privacy_joint_noise_multiplier"] == pytest.approx(cohort, rel=1e-12)
    assert below >= 1


def test_under_poisson_subsampling_the_noise_floor_holds_the_populations_worst():
    """With a floor and Poisson subsampling the artificial noise puts the population's
    worst device (not only the cohort's) at the floor."""
    link = _cohort_uplink(UplinkPrivacy(subsampled=True), fraction=0.25).round(1)
    z = _send_phases(link)["privacy_population_noise_multiplier_rho"]
    floor = 3.0 * z
    link = _cohort_uplink(UplinkPrivacy(subsampled=True, noise_floor={"rho": floor, "nu": floor}),
                          fraction=0.25).round(1)
    scalars = _send_phases(link)
    for phase in ("rho", "nu"):
        assert scalars[f"privacy_population_noise_multiplier_{phase}"] == pytest.approx(floor, rel=1e-9)
        assert scalars[f"privacy_noise_multiplier_{phase}"] >= floor * (1 - 1e-9)


def test_a_discarded_round_charges_every_phase_that_was_sent():
    """A round the BS discards (a dropout of every cohort device in some phase) after a
    phase went over the air: that phase's mechanism is charged from what needs no update,
    the power budget's bound of its senders' channel (with a floor, at the floor), and a
    phase nobody sent is not; before, such a round traced no multiplier and cost nothing."""
    found = 0
    for t in range(40):
        block = _cohort_uplink(UplinkPrivacy(noise_floor={"rho": 50.0, "nu": 50.0}),
                               fraction=0.25, dropout_probability=0.5)
        link = block.round(t)
        if not link.discarded or not link.cohort.sent.any():
            continue
        found += 1
        scalars = link.columns().scalars  # no phase sent: the round loop skips them
        gain = np.abs(link.h.numpy().astype(np.complex128)) ** 2
        for index, phase in enumerate(("rho", "nu")):
            senders = link.cohort.scheduled[link.cohort.sent[index]]
            if not senders.size:
                assert f"privacy_noise_multiplier_{phase}" not in scalars
                continue
            bare = np.sqrt(NOISE_W / 2.0) / np.sqrt(N * POWER_W * gain[senders].max(axis=1)).max()
            assert bare < 50.0
            assert scalars[f"privacy_noise_multiplier_{phase}"] == pytest.approx(50.0, rel=1e-9)
            assert scalars[f"artificial_noise_power_w_{phase}"] > 0.0
        assert np.isfinite(scalars["privacy_joint_noise_multiplier"])
    assert found >= 2


def _received_difference(public: bool):
    """||y_A - y_B|| / sensitivity_j of one device j whose update points opposite the 5
    others' (all at norm C): y_A with j's update, y_B with it removed (zero: it stays
    scheduled, as docs/privacy.md's neighbours), noise-free, perfect CSI, the KKT control
    far from its budget; ``public``: delta_bar from the clip norm, else reported."""
    from phy import aircomp
    from phy.privacy import public_delta_bar

    k, clip, j = 6, 1.0, 0
    rng = np.random.default_rng(7)
    direction = rng.standard_normal(D)
    direction /= np.linalg.norm(direction)
    updates = np.tile(direction * clip, (k, 1))
    updates[j] = -direction * clip
    weights = np.full(k, 1.0 / k)
    h = tf.constant((rng.standard_normal((k, F)) + 1j * rng.standard_normal((k, F))) * 1e-4, tf.complex64)
    delta_bar = public_delta_bar(clip, weights, D) if public else None

    def received(values):
        result = aircomp.aggregate(tf.constant(values, tf.float32), tf.constant(weights, tf.float32), h, h,
                                   power_control=OptimalPower(), tx_power_w=1e6, noise_power_w=0.0,
                                   gamma_w=1e-12, seed=tf.constant([1, 2]), keep_signals=True,
                                   public_delta_bar=delta_bar)
        x = result.x.numpy().astype(np.complex128)
        return np.einsum("kf,knf->nf", h.numpy().astype(np.complex128), x), float(result.delta_bar)

    y_a, delta_bar_a = received(updates)
    removed = updates.copy()
    removed[j] = 0.0
    y_b, _ = received(removed)
    # device j's clip bound at the round's delta_bar: C max_f |h_jf| sqrt(u_jf) = C pi_j sqrt(gamma / delta_bar)
    sensitivity = clip * weights[j] * np.sqrt(1e-12 / delta_bar_a)
    return np.linalg.norm(y_a - y_b) / sensitivity


def test_a_public_delta_bar_keeps_a_neighbours_change_within_its_sensitivity():
    """The reported update norms couple the devices: delta_bar scales every device's
    transmission, so removing one device changes what the others send. For one device
    opposite the 5 others, the received signals of the two neighbouring datasets differ by
    1.48x its clip-bound sensitivity under the reported delta_bar (issue 59 measured 1.47x
    in its cell), and by exactly its own contribution, within it, under the delta_bar the
    BS forms from the clip norm (privacy.delta_bar = "clip_norm")."""
    assert _received_difference(public=False) == pytest.approx(1.477, rel=1e-3)
    assert _received_difference(public=True) == pytest.approx(1.0, rel=1e-5)


def test_the_wrapper_refuses_an_air_its_mechanism_does_not_describe_when_the_block_is_built():
    """The wrapper's ``check_air`` hook, called when the block is built: the time domain,
    and the devices' own noise with more than one BS antenna, each refused in one line."""
    from phy.combiner import ReceiveCombiner

    def build(air, privacy):
        return Uplink(channel=IidRayleigh(F), csi=PerfectCSI(), air=air, cohort=Cohort(np.ones(K), [("delta", D)]),
                      scheme=Private(Analog(OptimalPower(), NOISE_W), privacy), seed=5)

    time_air = AirInterface(F, POWER_W, NOISE_W, domain="time", bandwidth_hz=1e6, cyclic_prefix_length=4)
    with pytest.raises(ValueError, match=r"^privacy is derived for the analog scheme in the frequency domain, "
                                         r"got Analog in the 'time' domain$"):
        build(time_air, UplinkPrivacy())
    antennas = AirInterface(F, POWER_W, NOISE_W, num_antennas=2, combiner=ReceiveCombiner("centroid"))
    with pytest.raises(ValueError, match=r"^the devices' artificial noise is derived for a single-antenna BS, "
                                         r"got 2 antennas$"):
        build(antennas, UplinkPrivacy(noise_source="devices"))
    assert build(antennas, UplinkPrivacy()).num_devices == K  # the designated source with two antennas
