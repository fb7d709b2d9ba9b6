"""Sionna 1.2's TR 38.901 time evolution disagrees with itself on the sign of the Doppler,
and :class:`phy.moving_tr38901.DeviceSideDoppler` (what a moving 3GPP cell uses) does not.
One device 100 m east of a UMi BS recedes east at 30 m/s; the power-weighted mean Doppler
of the channel over 128 samples at 4 f_D (8 draws, Sionna's generator at the stateless
seeds [d, 3], d < 8; printed when this file is run) is, in units of f_D:

* Sionna, downlink, line of sight forced: +0.86 (the LoS ray dominates), though the device
  moves away from the BS it sees along the line of sight (TR 38.901's eq. 7.5-22 with
  ``r`` towards the BS gives -1 for that ray);
* Sionna, downlink, no line of sight: -0.58, the clusters arriving around the LoS direction
  at the device, whose paths lengthen as it recedes: the physical sign;
* Sionna, uplink, no line of sight: +0.86 (with LoS +0.97): the uplink projects the
  device's velocity on the BS's directions (Sionna swaps the angles for the uplink, then
  takes the "arrival" ones, now the BS's).

The two causes: Sionna's LoS zenith of arrival is ``los_zod - pi``
(``system_level_scenario.py``), a negative zenith whose sine turns the LoS arrival
vector's horizontal part around (the clusters' zeniths are folded into [0, pi], TR 38.901
step 7, the LoS one is not); and eq. 7.5-22 takes the receiver's angles, right when the
device receives, the BS's in the uplink. ``DeviceSideDoppler`` takes the device's side of
every ray and folds the LoS zenith: the same draws give -0.967 (LoS) and -0.577 (NLoS) in
both directions, the physical sign and the uplink equal to the downlink (reciprocity).
When a Sionna release changes its own behaviour, the first test fails."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from sionna.phy.channel.tr38901 import Antenna, UMi

from phy.channel import sionna_rng_seeded
from phy.doppler import SPEED_OF_LIGHT_MPS
from phy.moving_tr38901 import DeviceSideDoppler

CARRIER_HZ = 3.5e9
SPEED_MPS = 30.0


def _mean_doppler(direction: str, los: bool, patched: bool = False) -> float:
    """The power-weighted mean Doppler [f_D] of Sionna's UMi channel (module docstring),
    with :class:`phy.moving_tr38901.DeviceSideDoppler` as its coefficient generator when ``patched``."""
    f_d = SPEED_MPS * CARRIER_HZ / SPEED_OF_LIGHT_MPS
    antenna = Antenna(polarization="single", polarization_type="V", antenna_pattern="omni",
                      carrier_frequency=CARRIER_HZ)
    channel = UMi(carrier_frequency=CARRIER_HZ, o2i_model="low", ut_array=antenna, bs_array=antenna,
                  direction=direction, enable_pathloss=False, enable_shadow_fading=False)
    if patched:  # one antenna at either end, so the arrays need no swapping
        channel._cir_sampler = DeviceSideDoppler(CARRIER_HZ, antenna, antenna, subclustering=True,
                                                precision=channel.precision)
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


@pytest.mark.parametrize(("los", "at_most"), [(True, -0.9), (False, -0.3)])
def test_the_device_side_angles_give_a_receding_uplink_device_the_physical_sign(los, at_most):
    """Patched (module docstring): a receding device's uplink Doppler is negative, its LoS
    ray's close to -f_D (the BS is 8.5 m above it, 100 m away)."""
    assert _mean_doppler("uplink", los, patched=True) < at_most


if __name__ == "__main__":  # the figures of the module docstring
    for patched in (False, True):
        for direction, los in (("downlink", True), ("downlink", False), ("uplink", True), ("uplink", False)):
            print("patched" if patched else "Sionna", direction, "LoS" if los else "NLoS",
                  round(_mean_doppler(direction, los, patched), 3))
