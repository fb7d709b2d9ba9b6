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
fails and the refusal (``cosim/scenario/mobility_rules.py``) can be revisited.

The two causes, and the patch that removes them (:class:`_UtSideDoppler`, tested below;
not yet used by a cell):

* Sionna's LoS zenith of arrival is ``los_zod - pi`` (``system_level_scenario.py``), a
  negative zenith whose sine turns the LoS arrival vector's horizontal part around; the
  clusters' zeniths are wrapped into [0, pi] (TR 38.901 step 7), the LoS one is not. Its
  Doppler takes ``pi - |theta|`` folded into [0, pi] instead.
* eq. 7.5-22 takes the receiver's angles, right when the device receives (downlink);
  in the uplink the device transmits, and the UT-side angles are the departure ones.
  The patch takes the UT-side angles in both directions.

Patched, the same draws give -0.967 (LoS) and -0.577 (NLoS) in both directions: the
physical sign, and the uplink equal to the downlink (reciprocity)."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from sionna.phy.channel.tr38901 import Antenna, UMi
from sionna.phy.channel.tr38901.channel_coefficients import ChannelCoefficientsGenerator

from phy.channel import sionna_rng_seeded
from phy.doppler import SPEED_OF_LIGHT_MPS

CARRIER_HZ = 3.5e9
SPEED_MPS = 30.0


class _UtSideDoppler(ChannelCoefficientsGenerator):
    """Sionna's coefficient generator with eq. 7.5-22 evaluated on the device's side of
    every ray, the LoS zenith folded into [0, pi] (module docstring)."""

    def _step_11_nlos(self, phi, topology, rays, t):
        self._device_angles = (rays.aod, rays.zod) if topology.moving_end == "tx" else (rays.aoa, rays.zoa)
        return super()._step_11_nlos(phi, topology, rays, t)

    def _step_11_los(self, topology, t):
        azimuth, zenith = ((topology.los_aod, topology.los_zod) if topology.moving_end == "tx"
                           else (topology.los_aoa, topology.los_zoa))
        zenith = tf.abs(zenith)
        zenith = tf.where(zenith > np.pi, 2.0 * np.pi - zenith, zenith)
        self._device_angles = tuple(tf.expand_dims(tf.expand_dims(x, 3), 4) for x in (azimuth, zenith))
        return super()._step_11_los(topology, t)

    def _step_11_doppler_matrix(self, topology, aoa, zoa, t):
        return super()._step_11_doppler_matrix(topology, *self._device_angles, t)


def _mean_doppler(direction: str, los: bool, patched: bool = False) -> float:
    """The power-weighted mean Doppler [f_D] of Sionna's UMi channel (module docstring),
    with :class:`_UtSideDoppler` as its coefficient generator when ``patched``."""
    f_d = SPEED_MPS * CARRIER_HZ / SPEED_OF_LIGHT_MPS
    antenna = Antenna(polarization="single", polarization_type="V", antenna_pattern="omni",
                      carrier_frequency=CARRIER_HZ)
    channel = UMi(carrier_frequency=CARRIER_HZ, o2i_model="low", ut_array=antenna, bs_array=antenna,
                  direction=direction, enable_pathloss=False, enable_shadow_fading=False)
    if patched:  # one antenna at either end, so the arrays need no swapping
        channel._cir_sampler = _UtSideDoppler(CARRIER_HZ, antenna, antenna, subclustering=True,
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
