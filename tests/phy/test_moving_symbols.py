"""Moving devices, symbol by symbol: the analog phase's true channel per OFDM symbol
(phy.uplink.moving_link.phase_channels, phy.moving_channel.MovingChannel.per_symbol,
phy.doppler.SumOfSinusoids.along) at the symbols' own times."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from phy.doppler import SumOfSinusoids
from phy.moving_channel import random_waypoint, straight
from phy.uplink.moving_link import phase_channels

CARRIER_HZ = 3.5e9
K, F, N = 6, 16, 40
SYMBOL_S = 1e-4  # long symbols: half a symbol moves the channel by some 1e-1 at 30 m/s
START_S = 0.3


def _moving(build=straight, speed=(20.0, 35.0), flat=False, channel=None):
    rng = np.random.default_rng(11)
    positions = rng.uniform(-60.0, 60.0, (K, 2))
    moving = build(list(speed) if isinstance(speed, tuple) else speed, 0.1, CARRIER_HZ, 8,
                   positions_m=positions, radius_m=100.0, inner_m=10.0, num_subcarriers=F, flat=flat,
                   path_loss_exponent=4.0, rng=rng, channel=channel)
    moving.start_round(0)
    return moving


def _phase(moving, per_symbol=True):
    """``phase_channels`` of a phase of N symbols starting START_S into the round (the
    round's first phase: its estimate is the round link's)."""
    scheme = SimpleNamespace(channel_per_symbol=True, nominal_symbols=lambda grid: grid.num_symbols)
    moving.channel_per_symbol = per_symbol  # mobility.channel_within_phase
    block = SimpleNamespace(scheme=scheme, grids={"rho": SimpleNamespace(num_symbols=N)}, num_devices=K)
    link = SimpleNamespace(block=block, air=SimpleNamespace(symbol_duration_s=SYMBOL_S), moving=moving,
                           offset_s=START_S, h=None, h_hat="h_hat", path_gain="gain", t=0, aging={},
                           combiner=None)
    h, h_hat, gain, slot = phase_channels(link, "rho", first=True)
    assert (h_hat, gain, slot) == ("h_hat", "gain", None)
    return np.asarray(h)


@pytest.mark.parametrize(("build", "fading"), [(straight, "iid"), (random_waypoint, "iid"), (straight, "flat"),
                                               (straight, "tdl")])
def test_symbol_n_sees_the_moving_channel_at_its_own_time(build, fading):
    """Symbol n's channel is MovingChannel.at(t_n), t_n = start + (n + 1/2) T_sym, to float
    rounding (1e-5 of the device's amplitude); the channel half a symbol earlier or later is
    off by far more (the times are checked, not only the shape). A TDL (Sionna's taps at one
    common speed) is evaluated per symbol."""
    if fading == "tdl":
        from phy.channel import TDL

        tdl = TDL("A", 100e-9, 30e3, F, carrier_frequency_hz=CARRIER_HZ)
        moving = _moving(build, speed=30.0, channel=tdl)
    else:
        moving = _moving(build, flat=fading == "flat")
    h = _phase(moving)
    assert h.shape == (K, N, F) and h.dtype == np.complex64
    for n in (0, 1, N // 2, N - 1):
        want, gain = moving.at(START_S + (n + 0.5) * SYMBOL_S)
        scale = np.sqrt(gain)[:, None]
        assert np.all(np.abs(h[:, n] - want) <= 1e-5 * scale), n
        for shifted in (n, n + 1):  # the symbol's start or end instead of its middle
            other, _ = moving.at(START_S + shifted * SYMBOL_S)
            assert np.max(np.abs(h[:, n] - other) / scale) > 1e-3, (n, shifted)


def test_the_middle_channel_stays_for_a_scheme_without_channel_per_symbol():
    moving = _moving()
    h = _phase(moving, per_symbol=False)
    np.testing.assert_array_equal(h, moving.at(START_S + 0.5 * N * SYMBOL_S)[0])


def test_devices_at_rest_get_the_middle_channels_bits_on_every_symbol():
    """Speed 0: every symbol's channel is the middle-of-phase one bit for bit (so a moving
    run at rest is the run of one channel per phase, bit for bit)."""
    moving = _moving(speed=0.0)
    h = _phase(moving)
    middle = _phase(moving, per_symbol=False)
    np.testing.assert_array_equal(h, np.broadcast_to(middle[:, None, :], h.shape))


@pytest.mark.parametrize("processes", [4, 32, 300])
def test_stepping_the_sinusoids_equals_evaluating_them(processes):
    """Float64 steps for 4 processes per device, float32 ones from float64 values every
    STEPS_PER_BLOCK steps for 32 (one tile) and 300 (two tiles of 150): each within 2e-6
    of the amplitude of evaluating the processes anew, at distances up to 30 km."""
    fading = SumOfSinusoids(5, processes, 8, CARRIER_HZ, np.random.default_rng(3))
    rng = np.random.default_rng(4)
    start, step = rng.uniform(0.0, 30_000.0, 5), rng.uniform(0.0, 0.01, 5)
    amplitude = rng.uniform(0.5, 2.0, (300, 5))
    got = fading.along(start, step, 300, amplitude)
    want = np.stack([fading.at(start + n * step) for n in range(300)], 1) * amplitude.T[:, :, None]
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-6 * amplitude.max())
    assert len(fading._rotation(step, slice(None))) == (2 if processes < 32 else 4)
    with pytest.raises(ValueError, match="amplitude"):
        fading.along(start, step, 3, amplitude)


@pytest.mark.parametrize("processes", [4, 32])
def test_the_kept_rotations_and_a_given_output_change_no_bit(processes):
    """:meth:`SumOfSinusoids.along` keeps every device's rotations over a step for the next
    call of that step, and writes to ``out`` when given: the values are those of a fresh
    evaluation, for rows too, and another step is not served the kept rotations."""
    rng = np.random.default_rng(5)
    start, step, amplitude = rng.uniform(0.0, 3000.0, 5), rng.uniform(0.0, 0.01, 5), rng.uniform(0.5, 2.0, (7, 5))

    def fresh(step_m):
        return SumOfSinusoids(5, processes, 8, CARRIER_HZ, np.random.default_rng(3)).along(start, step_m, 7, amplitude)

    fading = SumOfSinusoids(5, processes, 8, CARRIER_HZ, np.random.default_rng(3))
    first = fading.along(start, step, 7, amplitude)
    out = np.empty_like(first)
    assert fading.along(start, step, 7, amplitude, out=out) is out
    np.testing.assert_array_equal(out, first)
    np.testing.assert_array_equal(first, fresh(step))
    np.testing.assert_array_equal(fading.along(start, 2 * step, 7, amplitude), fresh(2 * step))
    np.testing.assert_array_equal(fading.along(start[1:3], step[1:3], 7, amplitude[:, 1:3], slice(1, 3)),
                                  first[1:3])
    with pytest.raises(ValueError, match="out must be"):
        fading.along(start, step, 7, amplitude, out=out[:, 1:])
