"""The ICI of a channel that varies sample by sample within an OFDM symbol (phy.doppler_ici)
against the closed form for Jakes' spectrum."""

from __future__ import annotations

import numpy as np
import pytest

from phy.doppler import SPEED_OF_LIGHT_MPS, SumOfSinusoids
from phy.doppler_ici import ici_power, jakes_ici_power, sampled_taps

N, CP, BANDWIDTH_HZ, CARRIER_HZ = 64, 16, 1.0e6, 3.5e9  # T_s = 1 us, subcarrier spacing 15.6 kHz


def _measured(normalised_doppler, num_symbols, tap_power, seed):
    """Mean ICI power over ``num_symbols`` QPSK symbols, each through its own Jakes
    processes (16 sinusoids per tap) from a random time in the first 10 s."""
    rng = np.random.default_rng(seed)
    speed = normalised_doppler * BANDWIDTH_HZ / N * SPEED_OF_LIGHT_MPS / CARRIER_HZ
    fading = SumOfSinusoids(num_symbols, len(tap_power), 16, CARRIER_HZ, rng)
    taps = sampled_taps(fading, np.full(num_symbols, speed), rng.uniform(0.0, 10.0, num_symbols), N + CP,
                        1.0 / BANDWIDTH_HZ, tap_power)
    qpsk = (rng.choice([-1.0, 1.0], (num_symbols, N)) + 1j * rng.choice([-1.0, 1.0], (num_symbols, N))) / np.sqrt(2)
    return ici_power(qpsk, taps, CP)


@pytest.mark.parametrize(("normalised_doppler", "tap_power"), [(0.05, [1.0]), (0.2, [1.0]),
                                                               (0.2, [0.5, 0.3, 0.2])])
def test_the_ici_power_matches_the_closed_form_for_jakes_spectrum(normalised_doppler, tap_power):
    """f_D N T_s = 0.05 and 0.2 (closed form 4.10e-3 and 6.32e-2 at N = 64), a flat channel
    and three taps within the prefix: the mean over 4,000 symbols is within 6 % of
    1 - (1/N^2) sum_{m,n} J0(2 pi f_D T_s (m - n)) (measured 2026-12-02: 2.8 %, 0.6 % and
    0.8 % off, 1.8, 0.4 and 0.8 standard errors of the mean)."""
    measured = _measured(normalised_doppler, 4000, tap_power, seed=1)
    expected = jakes_ici_power(normalised_doppler, N)
    assert measured.mean() == pytest.approx(expected, rel=0.06)


def test_without_motion_there_is_no_ici_and_the_closed_form_is_zero():
    assert jakes_ici_power(0.0, N) == pytest.approx(0.0, abs=1e-15)
    assert np.max(_measured(0.0, 50, [0.6, 0.4], seed=2)) < 1e-25
    assert jakes_ici_power(0.2, N) > jakes_ici_power(0.05, N) > 0.0
