"""The time-domain uplink of moving devices (phy/moving_time.py): at rest it is the static
waveform uplink's map, and in motion its inter-carrier interference is Jakes' closed form."""

from __future__ import annotations

import numpy as np
import pytest

from phy.doppler import SPEED_OF_LIGHT_MPS
from phy.doppler_ici import jakes_ici_power
from phy.moving_channel import straight
from phy.moving_time import MovingTimeDomainUplink, PathLayout
from phy.ofdm_time import TimeDomainUplink

F, CP, BANDWIDTH_HZ, CARRIER_HZ = 64, 16, 1.0e6, 3.5e9  # T_s = 1 us, subcarrier spacing 15.6 kHz
SYMBOL_S = (F + CP) / BANDWIDTH_HZ


def _moving(speed_mps, num_devices, delays, power, seed, sinusoids=8):
    layout = PathLayout.of(delays, power, num_subcarriers=F, cyclic_prefix_length=CP)
    angle = np.linspace(0.0, 2.0 * np.pi, num_devices, endpoint=False)
    positions = 50.0 * np.stack([np.cos(angle), np.sin(angle)], axis=1)
    moving = straight(speed_mps, 0.0, CARRIER_HZ, sinusoids, positions_m=positions, radius_m=100.0, inner_m=10.0,
                      num_subcarriers=F, flat=len(delays) == 1, path_loss_exponent=4.0,
                      rng=np.random.default_rng(seed), paths=layout)
    moving.start_round(0)
    return moving, layout


def _qpsk(rng, shape):
    return ((rng.choice([-1.0, 1.0], shape) + 1j * rng.choice([-1.0, 1.0], shape)) / np.sqrt(2)).astype(np.complex64)


@pytest.mark.parametrize(("delays", "power"), [([0.0], [1.0]), ([0.0, 1.0, 3.0], [0.5, 0.3, 0.2])])
def test_at_rest_the_waveform_is_the_static_uplinks(delays, power):
    """Devices at rest: the phase's grid is :meth:`TimeDomainUplink.reference`'s through the
    taps sqrt(g_k s_p) z_kp at the lags of the paths; the devices' CSI is those taps'
    response; ``transmit`` sends ``precoder mask Delta`` as the static uplink's does."""
    moving, layout = _moving(0.0, 5, delays, power, seed=3)
    uplink = MovingTimeDomainUplink(moving, 0.01, SYMBOL_S, CP)
    x = _qpsk(np.random.default_rng(4), (5, 3, F))
    z = moving.fading.at(moving.motion.travelled_m(0.01))  # [K, P]
    gain = moving.path_gain_at([0.01])[0]
    taps = (np.sqrt(gain)[:, None] * z * np.sqrt(layout.power)) @ layout.pulse
    static = TimeDomainUplink(taps, layout.l_min, np.zeros(5), CP, F)
    y = uplink(x)
    np.testing.assert_allclose(y, static.reference(x), rtol=0, atol=1e-5 * np.abs(y).max())
    np.testing.assert_allclose(uplink.frequency_response(), static.frequency_response(), rtol=1e-5, atol=1e-12)
    rng = np.random.default_rng(5)
    updates = rng.standard_normal((5, 3 * F - 7)).astype(np.float32)
    precoder = _qpsk(rng, (5, F))
    mask = (rng.uniform(size=(5, F)) > 0.2).astype(np.float32)
    rows, symbols, amplitudes = np.array([1]), np.array([2]), rng.uniform(size=(1, F)).astype(np.float32)
    direct = static.transmit(updates, precoder, mask, rows, symbols, amplitudes, 3)
    np.testing.assert_allclose(uplink.transmit(updates, precoder, mask, rows, symbols, amplitudes, 3), direct,
                               rtol=0, atol=1e-5 * np.abs(direct).max())
    assert uplink.subset([0, 3]).num_devices == 2
    np.testing.assert_allclose(uplink.subset([0, 3])(x[[0, 3]]), TimeDomainUplink(
        taps[[0, 3]], layout.l_min, np.zeros(2), CP, F).reference(x[[0, 3]]), rtol=0, atol=1e-5 * np.abs(y).max())
    # each device's carrier frequency offset rotates its stream as the static uplink's does
    cfo = np.array([0.1, -0.05, 0.0, 0.3, -0.2])
    rotated = MovingTimeDomainUplink(moving, 0.01, SYMBOL_S, CP, cfo_subcarriers=cfo)
    want = TimeDomainUplink(taps, layout.l_min, cfo, CP, F).reference(x)
    np.testing.assert_allclose(rotated(x), want, rtol=0, atol=1e-5 * np.abs(want).max())
    assert np.max(np.abs(want - y)) > 0.1 * np.abs(y).max()
    np.testing.assert_allclose(rotated.subset([0, 3])(x[[0, 3]]), TimeDomainUplink(
        taps[[0, 3]], layout.l_min, cfo[[0, 3]], CP, F).reference(x[[0, 3]]), rtol=0, atol=1e-5 * np.abs(y).max())


@pytest.mark.parametrize("normalised_doppler", [0.05, 0.2])
def test_the_ici_through_the_uplink_is_jakes_closed_form(normalised_doppler):
    """One device at a time through a flat channel at f_D / Delta_f = 0.05 and 0.2 (closed
    form 4.10e-3 and 6.32e-2 at F = 64): the received grid less its least-squares fit
    ``hbar_n X`` per OFDM symbol, over the device's power, averaged over 200 devices of 20
    symbols each (16 sinusoids per process), is within 10 % of
    1 - (1/F^2) sum_{m,n} J0(2 pi f_D (m - n) / B) (measured 2026-12-03: 7.4 % and 1.7 %
    below, 1.5 and 0.5 standard errors of the mean)."""
    speed = normalised_doppler * BANDWIDTH_HZ / F * SPEED_OF_LIGHT_MPS / CARRIER_HZ
    devices = 200
    moving, _ = _moving(speed, devices, [0.0], [1.0], seed=7, sinusoids=16)
    uplink = MovingTimeDomainUplink(moving, 0.37, SYMBOL_S, CP)
    rng = np.random.default_rng(8)
    gain = moving.path_gain_at([0.37])[0]
    measured = []
    for k in range(devices):
        x = _qpsk(rng, (1, 20, F))
        y = uplink.subset([k])(x).astype(np.complex128)
        fit = np.sum(y * np.conj(x[0]), axis=1) / np.sum(np.abs(x[0]) ** 2, axis=1)  # hbar_n
        measured.append(np.mean(np.abs(y - fit[:, None] * x[0]) ** 2) / gain[k])
    expected = jakes_ici_power(normalised_doppler, F)
    assert np.mean(measured) == pytest.approx(expected, rel=0.10)


def test_a_delayed_path_is_taken_at_the_received_samples_time():
    """One moving device, one path 3 samples late: the grid is Sionna's demodulation of
    ``y[b] = a(t_b) s[b - 3]``, the path's coefficient at the time of the received sample b
    (``t_b = start + b / B``, b counted from the first sample of the phase), computed here
    directly with NumPy from the process's own values."""
    from sionna.phy.ofdm import OFDMDemodulator, OFDMModulator

    moving, layout = _moving(250.0, 1, [3.0], [1.0], seed=9)
    start = 0.02
    uplink = MovingTimeDomainUplink(moving, start, SYMBOL_S, CP)
    x = _qpsk(np.random.default_rng(10), (1, 4, F))
    stream = OFDMModulator(CP)(x).numpy()[0].astype(np.complex128)  # [S]
    num_samples = stream.size
    times = start + np.arange(layout.l_min, num_samples + layout.l_min) / BANDWIDTH_HZ  # output sample n: time n + l_min
    gain = moving.path_gain_at([start + 0.5 * num_samples / BANDWIDTH_HZ])[0][0]
    a = np.sqrt(gain) * moving.fading.at(moving.motion.travelled_m(times)[:, :1])[:, 0, 0]  # [S]
    received = np.zeros(num_samples, np.complex128)
    lag = 3 - layout.l_min  # tap index of lag 3
    received[lag:] = a[lag:] * stream[:num_samples - lag]
    expected = OFDMDemodulator(F, layout.l_min, CP)(received[None].astype(np.complex64)).numpy()[0]
    y = uplink(x)
    np.testing.assert_allclose(y, expected, rtol=0, atol=2e-5 * np.abs(expected).max())
    shifted = np.sqrt(gain) * moving.fading.at(moving.motion.travelled_m(times + 40 / BANDWIDTH_HZ)[:, :1])[:, 0, 0]
    assert not np.allclose(y, OFDMDemodulator(F, layout.l_min, CP)(
        (np.concatenate([np.zeros(lag), shifted[lag:] * stream[:num_samples - lag]])[None]).astype(np.complex64)
    ).numpy()[0], rtol=0, atol=2e-5 * np.abs(expected).max())


def test_at_rest_timing_offsets_delay_each_devices_taps_as_the_static_uplinks():
    """Devices at rest with timing offsets (on and off the sample grid, one making a path
    later than a symbol) and CFOs: the phase's grid is that of the static uplink whose taps
    are each device's paths at ``tau_p + theta_k`` (``TimeDomainUplink.from_paths``'s
    construction: sinc pulses, late paths cut), and the cut share is the late path's."""
    from phy.limits import first_tap_lag, last_tap_lag
    from phy.ofdm_time import discrete_taps

    delays, power = np.array([0.0, 1.0, 3.0]), np.array([0.5, 0.3, 0.2])
    moving, _ = _moving(0.0, 4, delays, power, seed=6)
    timing = np.array([0.0, 2.0, 1.37, 71.5])  # device 3: its 3-sample path arrives past F + C - 7
    cfo = np.array([0.0, 0.05, -0.1, 0.0])
    uplink = MovingTimeDomainUplink(moving, 0.01, SYMBOL_S, CP, cfo_subcarriers=cfo, timing_offset_samples=timing)
    z = moving.fading.at(moving.motion.travelled_m(0.01))  # [K, P]
    a = np.sqrt(moving.path_gain_at([0.01])[0])[:, None] * z * np.sqrt(power)
    tau = delays[None, :] + timing[:, None]
    late = tau > F + CP - 7
    a, tau = np.where(late, 0.0, a), np.where(late, 0.0, tau)
    l_min = first_tap_lag(CP)
    static = TimeDomainUplink(discrete_taps(a, tau, l_min, last_tap_lag(float(tau.max()))), l_min, cfo, CP, F)
    x = _qpsk(np.random.default_rng(7), (4, 3, F))
    want = static.reference(x)
    np.testing.assert_allclose(uplink(x), want, rtol=0, atol=1e-5 * np.abs(want).max())
    np.testing.assert_allclose(uplink.cut_power_fraction, [0.0, 0.0, 0.0, 0.2])
    np.testing.assert_allclose(uplink.subset([1, 2])(x[[1, 2]]), TimeDomainUplink(
        discrete_taps(a[[1, 2]], tau[[1, 2]], l_min, last_tap_lag(float(tau[[1, 2]].max()))), l_min, cfo[[1, 2]],
        CP, F).reference(x[[1, 2]]), rtol=0, atol=1e-5 * np.abs(want).max())
    without = MovingTimeDomainUplink(moving, 0.01, SYMBOL_S, CP, cfo_subcarriers=cfo)(x)
    assert np.max(np.abs(without - want)) > 0.1 * np.abs(want).max()


@pytest.mark.parametrize("profile", ["A", "D"])
def test_a_tdl_in_motion_is_sionnas_taps_at_their_delays(profile):
    """``channel.model = "tdl"`` in the moving time-domain uplink: the taps' processes
    (:meth:`MovingTdl.path_processes`, TDL-D's LoS term an extra sinusoid) times their
    powers' square roots are :meth:`MovingTdl.paths_at` (Sionna's TDL, held to it in
    test_mobility.py) at any distance, and at rest the waveform is the static uplink's
    through those taps at the profile's delays (sinc pulses off the sample grid)."""
    from phy.channel import TDL
    from phy.limits import first_tap_lag, last_tap_lag
    from phy.moving_tdl import MovingTdl
    from phy.ofdm_time import discrete_taps

    tdl = TDL(profile, 1.0e-6, BANDWIDTH_HZ / F, F, CARRIER_HZ)  # delays of up to some 13 samples
    moving_tdl = MovingTdl(tdl, 3, np.array([5, 6], np.int32))
    processes = moving_tdl.path_processes()
    from phy.parameters import SIONNA_TDL_SINUSOIDS, tdl_profile_taps

    taps, los = tdl_profile_taps(profile)
    assert processes.shape == (3, taps, SIONNA_TDL_SINUSOIDS + los) and tdl.delays_s.shape == (taps,)
    distance = np.array([0.0, 3.7, 120.0])
    np.testing.assert_allclose(processes.at(distance) * np.sqrt(tdl.tap_powers), moving_tdl.paths_at(distance)[:, 0],
                               rtol=0, atol=2e-6)
    layout = PathLayout.of(tdl.delays_s * BANDWIDTH_HZ, tdl.tap_powers, num_subcarriers=F, cyclic_prefix_length=CP)
    positions = 50.0 * np.stack([np.cos([0.0, 2.0, 4.0]), np.sin([0.0, 2.0, 4.0])], axis=1)
    moving = straight(0.0, 0.0, CARRIER_HZ, 8, positions_m=positions, radius_m=100.0, inner_m=10.0,
                      num_subcarriers=F, flat=False, path_loss_exponent=4.0, rng=np.random.default_rng(8),
                      channel=tdl, paths=layout)
    moving.start_round(0)
    uplink = MovingTimeDomainUplink(moving, 0.01, SYMBOL_S, CP)
    z = moving.fading.at(moving.motion.travelled_m(0.01))  # [K, L]
    a = np.sqrt(moving.path_gain_at([0.01])[0])[:, None] * z * np.sqrt(layout.power)
    tau = np.broadcast_to(layout.delays_samples, a.shape)
    l_min = first_tap_lag(CP)
    static = TimeDomainUplink(discrete_taps(a, tau, l_min, last_tap_lag(float(tau.max()))), l_min, np.zeros(3), CP, F)
    x = _qpsk(np.random.default_rng(9), (3, 2, F))
    want = static.reference(x)
    np.testing.assert_allclose(uplink(x), want, rtol=0, atol=1e-5 * np.abs(want).max())
    np.testing.assert_allclose(uplink.frequency_response(), static.frequency_response(), rtol=0,
                               atol=1e-5 * np.abs(static.frequency_response()).max())
