"""Why the 3GPP cells (``channel.model`` = ``"umi"``, ``"uma"``, ``"rma"``) stay refused in
motion: Sionna 1.2's TR 38.901 time evolution disagrees with itself on the sign of the
Doppler. One device 100 m east of a UMi BS recedes east at 30 m/s; the power-weighted
mean Doppler of Sionna's own channel over 128 samples at 4 f_D (8 draws, Sionna's
generator at the stateless seeds [d, 3], d < 8; printed when this file is run) is, in units of f_D:

* downlink, line of sight forced: +0.86 (the LoS ray dominates), though the device
  moves away from the BS it sees along the line of sight (TR 38.901's eq. 7.5-22 with
  ``r`` towards the BS gives -1 for that ray);
* downlink, no line of sight: -0.58, the clusters arriving around the LoS direction
  at the device, whose paths lengthen as it recedes: the physical sign;
* uplink, no line of sight: +0.86: the uplink projects the device's velocity on the
  BS's directions (Sionna swaps the angles for the uplink, then takes the "arrival"
  ones, now the BS's).

A moving 3GPP cell built on Sionna's time evolution would inherit whichever sign the
state gives. This test pins the behaviour: when a Sionna release changes it, the test
fails and the refusal (``cosim/scenario/mobility_rules.py``) can be revisited."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from sionna.phy.channel.tr38901 import Antenna, UMi

from phy.channel import sionna_rng_seeded
from phy.doppler import SPEED_OF_LIGHT_MPS

CARRIER_HZ = 3.5e9
SPEED_MPS = 30.0


def _mean_doppler(direction: str, los: bool) -> float:
    """The power-weighted mean Doppler [f_D] of Sionna's UMi channel (module docstring)."""
    f_d = SPEED_MPS * CARRIER_HZ / SPEED_OF_LIGHT_MPS
    antenna = Antenna(polarization="single", polarization_type="V", antenna_pattern="omni",
                      carrier_frequency=CARRIER_HZ)
    channel = UMi(carrier_frequency=CARRIER_HZ, o2i_model="low", ut_array=antenna, bs_array=antenna,
                  direction=direction, enable_pathloss=False, enable_shadow_fading=False)
    spectrum = np.zeros(128)
    for draw in range(8):
        with sionna_rng_seeded(tf.constant([draw, 3], tf.int32)):  # Sionna's generator restored after
            channel.set_topology(ut_loc=tf.constant([[[100.0, 0.0, 1.5]]]),
                                 bs_loc=tf.constant([[[0.0, 0.0, 10.0]]]), ut_orientations=tf.zeros([1, 1, 3]),
                                 bs_orientations=tf.zeros([1, 1, 3]),
                                 ut_velocities=tf.constant([[[SPEED_MPS, 0.0, 0.0]]]),
                                 in_state=tf.zeros([1, 1], bool), los=los)
            a, _ = channel(1, 128, 4.0 * f_d)
        spectrum += np.sum(np.abs(np.fft.fft(np.reshape(a.numpy(), (-1, 128)), axis=1)) ** 2, axis=0)
    frequency = np.fft.fftfreq(128, 1.0 / (4.0 * f_d)) / f_d
    return float(np.sum(spectrum * frequency) / spectrum.sum())


@pytest.mark.parametrize(("direction", "los", "sign"), [("downlink", True, +1), ("downlink", False, -1),
                                                        ("uplink", False, +1)])
def test_sionnas_tr38901_doppler_of_a_receding_device_has_the_sign_its_state_gives(direction, los, sign):
    assert sign * _mean_doppler(direction, los) > 0.3


if __name__ == "__main__":  # the figures of the module docstring
    for direction, los in (("downlink", True), ("downlink", False), ("uplink", True), ("uplink", False)):
        print(direction, "LoS" if los else "NLoS", round(_mean_doppler(direction, los), 3))
