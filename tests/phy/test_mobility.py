"""Devices that move: Jakes-correlated fading (phy.doppler), straight-line motion
(phy.mobility), the moving channel's clock (phy.moving_channel) and digital OFDMA's
outage over the coherence blocks of a slot (phy.uplink.digital_ofdma)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from scipy.special import j0

from phy.doppler import (
    SumOfSinusoids,
    coherence_time_s,
    doppler_hz,
    jakes_correlation,
    wavelength_m,
)
from phy.mobility import StraightMotion, advance
from phy.moving_channel import straight
from phy.uplink.digital_ofdma import DigitalOfdma, plan

CARRIER_HZ = 3.5e9


def test_doppler_and_coherence_time_at_walking_speed():
    """3 km/h at 3.5 GHz: f_D = v f_c / c = 9.73 Hz, T_c = 0.423 / f_D = 43.5 ms."""
    f_d = float(doppler_hz(3.0 / 3.6, CARRIER_HZ))
    assert f_d == pytest.approx(3.0 / 3.6 * CARRIER_HZ / 299_792_458.0, rel=1e-12)
    assert f_d == pytest.approx(9.729, abs=1e-3)
    assert float(coherence_time_s(f_d)) == pytest.approx(0.04348, abs=1e-5)
    assert float(coherence_time_s(0.0)) == np.inf


def test_the_generated_fading_has_jakes_autocorrelation_at_three_lags():
    """The sample correlation E[h(0) h(tau)^*] over N = 2e5 independent processes (M = 8
    sinusoids each) matches J0(2 pi f_D tau) at 2 pi f_D tau = 0.8 (0.85), 2.405 (J0's first
    zero) and 3.832 (its minimum, -0.40, which a first-order Gauss-Markov aging cannot give).
    Each term h(0) h(tau)^* has E|.|^2 = E|h|^4 = 2 at most (a CN(0, 1) marginal), so the
    mean's standard error is at most sqrt(2 / N) = 0.0032; the tolerance is 5 of them, 0.016.
    The marginal power E|h|^2 = 1 within the same bound."""
    num = 200_000
    fading = SumOfSinusoids(1, num, 8, CARRIER_HZ, np.random.default_rng(58))
    speed_mps = 30.0 / 3.6
    f_d = float(doppler_hz(speed_mps, CARRIER_HZ))
    tolerance = 5.0 * np.sqrt(2.0 / num)
    h0 = fading.at(np.zeros(1)).astype(np.complex128)[0]
    assert np.mean(np.abs(h0) ** 2) == pytest.approx(1.0, abs=tolerance)
    for x in (0.8, 2.404825557695773, 3.8317059702075125):
        tau = x / (2.0 * np.pi * f_d)
        h_tau = fading.at(np.full(1, speed_mps * tau)).astype(np.complex128)[0]
        measured = np.mean(h0 * np.conj(h_tau))
        assert abs(measured - j0(x)) < tolerance, (x, measured, j0(x))
        assert float(jakes_correlation(f_d, tau)) == pytest.approx(j0(x), abs=1e-12)


def test_selected_pairs_equal_the_full_evaluation():
    """``at_pairs`` evaluates the same processes as ``at``, one (device, subcarrier) pair each."""
    fading = SumOfSinusoids(3, 5, 8, CARRIER_HZ, np.random.default_rng(1))
    distance = np.array([[0.0, 1.0, 2.0], [0.3, 4.0, 7.5]])
    full = fading.at(distance)  # [2, 3, 5]
    devices, subcarriers = np.array([0, 2, 1, 2]), np.array([4, 0, 3, 3])
    np.testing.assert_allclose(fading.at_pairs(distance[:, devices], devices, subcarriers),
                               full[:, devices, subcarriers], rtol=1e-5, atol=1e-6)


def test_a_moving_device_advances_by_v_dt_and_stays_in_the_cell():
    """Away from the walls the position moves by v dt along the heading; over 10 minutes
    at 120 km/h (many reflections) every device stays in [inner, R], keeps its speed, and
    a run moved in two steps is where a run moved in one is."""
    rng = np.random.default_rng(4)
    radius_m, inner_m = 300.0, 10.0
    motion = StraightMotion([[100.0, 0.0], [0.0, -50.0]], [1.5, 10.0], [np.pi / 2, 0.0], radius_m, inner_m)
    after = motion.positions_at([2.0])[0]
    np.testing.assert_allclose(after, [[100.0, 3.0], [20.0, -50.0]], atol=1e-12)

    r0 = np.sqrt(rng.uniform(inner_m ** 2, radius_m ** 2, 50))
    angle = rng.uniform(0, 2 * np.pi, 50)
    start = np.stack([r0 * np.cos(angle), r0 * np.sin(angle)], 1)
    velocity = (120 / 3.6) * np.stack([np.cos(angle + 1.0), np.sin(angle + 1.0)], 1)
    p, u = advance(start, velocity, 600.0, radius_m, inner_m)
    r = np.hypot(p[:, 0], p[:, 1])
    assert np.all(r <= radius_m * (1 + 1e-12)) and np.all(r >= inner_m * (1 - 1e-12))
    np.testing.assert_allclose(np.hypot(u[:, 0], u[:, 1]), 120 / 3.6, rtol=1e-12)
    p1, _ = advance(*advance(start, velocity, 250.0, radius_m, inner_m), 350.0, radius_m, inner_m)
    np.testing.assert_allclose(p1, p, atol=1e-6)
    # positions at many offsets (one advance of T K rows) are each offset's own advance, bit for bit
    moving = StraightMotion(start, np.full(50, 120 / 3.6), angle + 1.0, radius_m, inner_m)
    offsets = np.array([0.0, 0.5, 7.0, 30.0, 250.0])  # walls crossed on the way
    at = moving.positions_at(offsets)
    for t, row in zip(offsets, at, strict=True):
        np.testing.assert_array_equal(row, advance(moving.positions_m, moving.velocities_mps, t, radius_m, inner_m)[0])
    np.testing.assert_array_equal(moving.positions_at(offsets, [7, 2, 7]), at[:, [7, 2, 7]])  # some devices only


def test_the_clock_places_rounds_and_a_resumed_clock_gives_the_same_channel():
    """Round t + 1 starts where round t ended; a second channel told the start of round 2
    (a resumed run) draws the same channel there as the one that ran rounds 0 and 1."""
    def build():
        return straight(12.0, 0.5, CARRIER_HZ, 8, positions_m=[[50.0, 0.0], [0.0, 80.0]], radius_m=100.0,
                        inner_m=10.0, num_subcarriers=4, flat=False, path_loss_exponent=4.0,
                        rng=np.random.default_rng(7))

    ran, resumed = build(), build()
    ran.start_round(0)
    ran.end_round(0, 3.25)
    ran.start_round(1)
    ran.end_round(1, 1.5)
    assert ran.start_round(2) == 4.75
    with pytest.raises(ValueError, match="round 2"):
        resumed.start_round(2)
    resumed.resume([0.0, 3.25, 4.75])
    resumed.start_round(2)
    h_ran, g_ran = ran.at(0.5)
    h_resumed, g_resumed = resumed.at(0.5)
    np.testing.assert_array_equal(h_ran, h_resumed)
    np.testing.assert_array_equal(g_ran, g_resumed)
    moved = np.hypot(*(ran.motion.positions_m - np.array([[50.0, 0.0], [0.0, 80.0]])).T)
    assert np.all(moved <= 12.0 * 4.75 + 1e-9)


class _Slot:
    """A slot whose channels are given: ``gain(device, offset_s)`` per owned subcarrier."""

    def __init__(self, gain, doppler):
        self.gain, self.doppler_hz, self.num_sinusoids = gain, np.asarray(doppler, float), 1

    def owned_at(self, offsets_s, rows, subcarriers):
        offsets = np.asarray(offsets_s, float)
        return np.sqrt(np.array([[self.gain(int(k), t) for k in rows] for t in offsets])).astype(np.complex64)

    def correlation(self, lag_s):
        return jakes_correlation(self.doppler_hz, lag_s)


def test_a_digital_device_whose_channel_fades_below_its_rate_mid_slot_is_in_outage():
    """Two devices, perfect CSI at the slot's start (gain 1 on each of their subcarriers):
    device 0's channel holds, device 1's falls to 1e-3 half-way through its slot. Both
    are decoded at the start; device 1 is lost to aging, device 0 is not."""
    num_values, symbol_s, f_d = 50, 1e-3, 200.0  # T_c = 2.1 ms
    h = np.ones((2, 8), np.complex64)
    schedule = plan(h, h, num_values, bits_per_value=8, allocation="equal", tx_power_w=1.0,
                    noise_power_w=1e-2)
    assert schedule.decoded.all()
    slot_s = schedule.symbols.max() * symbol_s
    assert slot_s > 4 * float(coherence_time_s(f_d))  # several coherence blocks
    slot = _Slot(lambda k, t: 1.0 if k == 0 or t < slot_s / 2 else 1e-3, [f_d, f_d])
    link = SimpleNamespace(slot=slot)
    block = SimpleNamespace(tx_power_w=1.0, noise_power_w=1e-2, symbol_duration_s=symbol_s)
    aged, (lost, correlation) = DigitalOfdma(bits_per_value=8).aged(schedule, link, block)
    np.testing.assert_array_equal(aged.decoded, [True, False])
    np.testing.assert_array_equal(lost, [False, True])
    np.testing.assert_allclose(correlation, j0(np.pi * f_d * schedule.symbols * symbol_s))
    still = _Slot(lambda k, t: 1.0, [0.0, 0.0])  # nobody moves: nothing is evaluated, nothing lost
    aged, (lost, _) = DigitalOfdma(bits_per_value=8).aged(schedule, SimpleNamespace(slot=still), block)
    assert aged.decoded.all() and not lost.any()


def test_wavelength():
    assert wavelength_m(CARRIER_HZ) == pytest.approx(0.08565, abs=1e-5)


def test_random_waypoints_walk_at_their_speed_to_points_of_the_cell_and_replay():
    """A device walks v dt towards its waypoint (the straight line's length while it does
    not reach it), every waypoint is in the annulus, and a motion advanced in two steps is
    where one advanced in one step is, to 1e-9 m (the waypoints are a function of the
    device and the leg, not of the steps; a resumed run steps as the run did, bit for bit)."""
    from phy.mobility import RandomWaypoint

    motion = RandomWaypoint([[50.0, 0.0], [0.0, -80.0], [20.0, 20.0]], [1.0, 5.0, 0.0], key=11, radius_m=100.0,
                            inner_m=10.0)
    target = motion.targets_m[0].copy()
    after = motion.positions_at([0.5])[0]
    step = after[0] - np.array([50.0, 0.0])
    assert np.hypot(*step) == pytest.approx(0.5, rel=1e-12)
    np.testing.assert_allclose(step / 0.5, (target - [50.0, 0.0]) / np.hypot(*(target - [50.0, 0.0])))
    np.testing.assert_array_equal(after[2], [20.0, 20.0])  # at rest
    waypoints = np.array([motion.waypoint(k, j) for k in range(3) for j in range(200)])
    r = np.hypot(waypoints[:, 0], waypoints[:, 1])
    assert np.all((r >= 10.0) & (r <= 100.0))
    once, twice = (RandomWaypoint([[50.0, 0.0], [0.0, -80.0]], [12.0, 30.0], 3, 100.0, 10.0) for _ in range(2))
    once.move_to(400.0)
    twice.move_to(150.0)
    twice.move_to(400.0)
    assert once.legs.min() > 5  # many legs walked
    np.testing.assert_allclose(twice.positions_m, once.positions_m, atol=1e-9)


def test_a_digital_slots_memory_does_not_grow_with_its_length(monkeypatch):
    """The coherence blocks of a slot are evaluated a chunk at a time: with chunks of 8
    blocks, a slot of 4 chunks and one of 16 (K = 4 senders, F = 64, M = 8, 120 km/h, rates
    a hundredth of capacity, so every block is evaluated) peak at the same traced memory
    within 10 %, while the blocks quadruple (measured: 0.24 MiB both; keeping every
    block's channel, 512 bytes each, raised the longer slot's by 20 %)."""
    import tracemalloc
    from dataclasses import replace

    from phy.uplink import slot_blocks
    from phy.uplink.moving_link import SlotChannel

    moving = straight(120 / 3.6, 0.0, CARRIER_HZ, 8, positions_m=[[50.0, 0.0], [0.0, 60.0], [-70.0, 0.0], [0.0, -80.0]],
                      radius_m=100.0, inner_m=10.0, num_subcarriers=64, flat=False, path_loss_exponent=4.0,
                      rng=np.random.default_rng(3))
    moving.start_round(0)
    h, _ = moving.at(0.0)
    slot = SlotChannel(moving, 0.0, np.arange(4), moving.doppler_hz)
    base = plan(h, h, 100, bits_per_value=8, allocation="equal", tx_power_w=0.1, noise_power_w=1e-11)
    chunk = 8  # blocks per chunk
    monkeypatch.setattr(slot_blocks, "SLOT_CHUNK_VALUES", chunk * 64 * 8)
    block_s = float(np.min(coherence_time_s(moving.doppler_hz)))
    rate = slot_blocks.BlockRate(base.owner, 0.1, 1e-11, 1.0)
    peaks = []
    for chunks in (4, 16):
        symbols = np.full(4, np.ceil(chunks * chunk * block_s / 1e-4))
        schedule = replace(base, symbols=symbols, num_symbols=int(symbols.max()), rate=base.rate / 100.0)
        tracemalloc.start()
        holds = slot_blocks.slot_holds(slot, rate, schedule.rate, schedule.transmits, schedule.decoded,
                                       schedule.symbols, 1e-4)
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
        assert holds.all()
    assert peaks[1] <= 1.1 * peaks[0], peaks


@pytest.mark.parametrize(("profile", "num_antennas"), [("A", 1), ("D", 2)])
def test_a_moving_tdl_is_sionnas_own_tdl_at_each_devices_speed(profile, num_antennas):
    """With channel.model = "tdl" device k's taps after d_k metres are those of one call of
    Sionna's TDL at the device's speed v_k and the run's seed at time d_k / v_k (Sionna's
    own Doppler process, double precision): three devices at three speeds, each held to a
    call at its own speed, every BS antenna (Sionna's num_rx_ant) and the LoS tap of TDL-D;
    the response is the taps times the tap responses; 20 us later the taps have moved, by
    little (correlated, not redrawn)."""
    import tensorflow as tf
    from sionna.phy.channel.tr38901 import TDL as SionnaTDL

    from phy.channel import TDL, sionna_rng_seeded
    from phy.moving_tdl import MovingTdl

    channel = TDL(profile, 100e-9, 30e3, 16, carrier_frequency_hz=CARRIER_HZ)
    speeds = np.array([3.0, 30.0, 120.0]) / 3.6
    moving = MovingTdl(channel, 3, np.array([5, 9], np.int32), num_antennas)
    for k, speed in enumerate(speeds):
        sionna = SionnaTDL(model=profile, delay_spread=100e-9, carrier_frequency=CARRIER_HZ, min_speed=speed,
                           max_speed=speed, num_rx_ant=num_antennas, precision="double")
        with sionna_rng_seeded(tf.constant([5, 9], tf.int32)):
            grid, _ = sionna(3, 4, 1.0 / 2e-3)  # t = 0, 2, 4, 6 ms
        grid = np.reshape(grid.numpy(), (3, num_antennas, -1, 4))  # [K, N_r, L, T]
        for step in (0, 1, 3):
            ours = moving.paths_at(np.full(3, speed * 2e-3 * step))
            np.testing.assert_allclose(ours[k], grid[k, ..., step], rtol=1e-9, atol=1e-12)
        h = moving.at(speeds * 4e-3)[k].reshape(num_antennas, -1)
        np.testing.assert_allclose(h, grid[k, ..., 2] @ channel.tap_responses.numpy(), rtol=1e-4, atol=1e-6)
    start, soon = moving.paths_at(np.zeros(3)), moving.paths_at(speeds * 2e-5)  # J0(2 pi f_D 20 us) >= 0.9994
    assert 0 < np.linalg.norm(soon - start) < 0.1 * np.linalg.norm(start)
    pairs = moving.at_pairs(np.array([(speeds * 1e-3)[[2, 0]]]), np.array([2, 0]), np.array([(num_antennas - 1) * 16 + 5, 9]))
    whole = moving.at(speeds * 1e-3)
    np.testing.assert_allclose(pairs[0], [whole[2, (num_antennas - 1) * 16 + 5], whole[0, 9]], rtol=1e-5)


def test_the_processes_at_a_time_are_the_sum_of_their_sinusoids():
    """``SumOfSinusoids.at`` (one Numba pass) against the sum written out in NumPy, at [K]
    and [T, K] distances: sum_m c_m exp(j s w_m), to complex64 rounding."""
    from phy.doppler import SumOfSinusoids

    fading = SumOfSinusoids(5, 7, 4, 3.5e9, np.random.default_rng(4))
    distance = np.random.default_rng(5).uniform(0.0, 900.0, (3, 5))
    expected = np.einsum("tkfm,kfm->tkf", np.exp(1j * distance[:, :, None, None] * fading.wavenumber),
                         fading.gains.astype(np.complex128))
    np.testing.assert_allclose(fading.at(distance), expected, rtol=0, atol=2e-6)
    np.testing.assert_array_equal(fading.at(distance[1]), fading.at(distance)[1])
    assert fading.at(distance).dtype == np.complex64 and fading.at(distance[0]).shape == (5, 7)


def test_the_processes_rotations_are_libms_cos_and_sin_rounded_bit_for_bit():
    """``SumOfSinusoids.at`` takes its rotations from :func:`native.sincos.rounded_cos_sin`:
    the same bits as libm's cos and sin rounded to complex64 and summed in order (written
    out below with libm's calls), also beyond the fast reduction's range (2.2e6 rad)."""
    from numba import njit

    from phy.doppler import SumOfSinusoids

    @njit(cache=False)
    def with_libm(wavenumber, gains, distance, out):
        for t in range(distance.shape[0]):
            for k in range(distance.shape[1]):
                for f in range(wavenumber.shape[1]):
                    total = np.complex64(0.0)
                    for m in range(wavenumber.shape[2]):
                        phase = distance[t, k] * wavenumber[k, f, m]
                        total += np.complex64(complex(np.cos(phase), np.sin(phase))) * gains[k, f, m]
                    out[t, k, f] = total

    fading = SumOfSinusoids(6, 33, 8, 3.5e9, np.random.default_rng(4))
    distance = np.random.default_rng(5).uniform(0.0, 30_000.0, (3, 6))
    want = np.empty((3, 6, 33), np.complex64)
    with_libm(fading.wavenumber, fading.gains, distance, want)
    np.testing.assert_array_equal(fading.at(distance).view(np.int32), want.view(np.int32))


@pytest.mark.parametrize("flat", [False, True])
def test_each_bs_antenna_has_its_own_processes_at_the_devices_speed(flat):
    """With N_r = 2 antennas the channel is [K, N_r, F]: antenna r's processes are the
    coefficients r F_c .. of the same draw, at the device's speed; one antenna is the
    single-antenna channel bit for bit; the symbols' channels are ``at``'s at their times,
    and a digital slot's pairs through a combiner are the combined channel's entries."""
    from phy.uplink.moving_link import combined

    def build(antennas):
        return straight(30.0, 0.0, CARRIER_HZ, 8, positions_m=[[50.0, 0.0], [0.0, 60.0], [-70.0, 0.0]],
                        radius_m=100.0, inner_m=10.0, num_subcarriers=4, flat=flat, path_loss_exponent=4.0,
                        rng=np.random.default_rng(3), num_antennas=antennas)

    one, two = build(1), build(2)
    for moving in (one, two):
        moving.start_round(0)
    h1, gain = one.at(0.01)
    h2, gain2 = two.at(0.01)
    assert h1.shape == (3, 4) and h2.shape == (3, 2, 4)
    np.testing.assert_array_equal(gain, gain2)
    per_antenna = 1 if flat else 4
    z = two.fading.at(two.motion.travelled_m(two.motion.time_s + 0.01))  # [K, 2 F_c]
    for r in range(2):
        expected = np.sqrt(gain)[:, None] * np.broadcast_to(z[:, r * per_antenna:(r + 1) * per_antenna], (3, 4))
        np.testing.assert_allclose(h2[:, r], expected, rtol=1e-6)
    assert not np.allclose(h2[:, 0], h2[:, 1])  # the antennas' processes differ
    symbols = two.per_symbol(0.01, 1e-3, 5)  # [K, N, N_r, F]
    assert symbols.shape == (3, 5, 2, 4)
    for n in (0, 4):
        np.testing.assert_allclose(symbols[:, n], two.at(0.01 + (n + 0.5) * 1e-3)[0], rtol=2e-5, atol=2e-6)
    combiner = np.exp(1j * np.arange(8).reshape(2, 4)) / np.sqrt(2.0)
    devices, subcarriers = np.array([0, 2, 1, 2]), np.array([3, 0, 1, 2])
    pairs = two.owned_at([0.01, 0.02], devices, subcarriers, combiner)
    for i, offset in enumerate((0.01, 0.02)):
        whole = combined(two.at(offset)[0], combiner)
        np.testing.assert_allclose(pairs[i], whole[devices, subcarriers], rtol=2e-5, atol=2e-6)
    with pytest.raises(ValueError, match="combiner"):
        two.owned_at([0.01], devices, subcarriers)


@pytest.mark.parametrize("antennas", [1, 2])
def test_a_slice_of_devices_has_the_channel_of_the_whole_evaluation(antennas):
    """``per_symbol`` and ``at`` over a slice of the devices (a streamed phase's chunk)
    give those devices' rows of the whole evaluation bit for bit, a device at rest
    included; a SymbolChannel reads them a slice at a time, combined per antenna."""
    from phy.uplink.moving_link import SymbolChannel, combined

    moving = straight([0.0, 40.0], 0.0, CARRIER_HZ, 8,
                      positions_m=[[50.0, 0.0], [0.0, 60.0], [-70.0, 0.0], [0.0, -80.0], [30.0, 30.0]],
                      radius_m=100.0, inner_m=10.0, num_subcarriers=4, flat=False, path_loss_exponent=4.0,
                      rng=np.random.default_rng(11), num_antennas=antennas)
    moving.motion.speed_mps[2] = 0.0  # one device at rest
    moving.start_round(0)
    whole = moving.per_symbol(0.01, 1e-3, 6)
    for rows in (slice(0, 2), slice(2, 3), slice(3, 5)):
        np.testing.assert_array_equal(moving.per_symbol(0.01, 1e-3, 6, rows), whole[rows])
        np.testing.assert_array_equal(moving.at(0.02, rows)[0], moving.at(0.02)[0][rows])
    combiner = None if antennas == 1 else np.exp(1j * np.arange(8).reshape(2, 4)) / np.sqrt(2.0)
    lazy = SymbolChannel(moving, 0.01, 1e-3, 6, combiner)
    assert lazy.shape == (5, 6, 4)
    np.testing.assert_array_equal(lazy[1:4], combined(whole, combiner)[1:4])
    with pytest.raises(TypeError, match="slice"):
        lazy[[0, 1]]
