"""Synchronisation impairments of the devices: timing and carrier frequency offsets.

Each device's uplink OFDM stream reaches the BS with a timing offset ``theta_k``
(samples at ``B = F Delta_f``, fractional allowed) relative to the BS's timing, and on
a carrier that is off by ``epsilon_k`` subcarrier spacings (oscillator mismatch), both
drawn per round and device. :class:`phy.ofdm_time.TimeDomainUplink` turns them into
the waveform the BS receives: a timing offset within the cyclic prefix is a phase ramp
``exp(-j 2 pi f theta / F)`` over the subcarriers that the device's precoder (which
knows only its propagation channel) does not undo; beyond the prefix it is also
inter-symbol and inter-carrier interference; a CFO rotates every OFDM symbol by a
phase that grows by ``2 pi epsilon (F + C) / F`` per symbol and leaks power to the
neighbouring subcarriers (inter-carrier interference, attenuation
``|sin(pi eps) / (F sin(pi eps / F))|^2`` of the wanted subcarrier; Moose, IEEE Trans.
Commun. 42(10), 1994; Pollet et al., IEEE Trans. Commun. 43(2/3/4), 1995).

Pre-compensation models what a device can estimate from the BS's downlink
synchronisation signals and pre-correct without moving its transmission:

* ``"timing"``: it knows its timing offset and includes its phase ramp in its
  precoder (its channel estimate is that of the delayed channel). The arrival time is
  unchanged, so an offset inside the cyclic prefix becomes harmless and what the prefix
  cannot absorb (inter-symbol and inter-carrier interference) remains. (A timing
  advance that removes the offset altogether is ``timing_offset_max_samples = 0``.)
* ``"cfo"``: it knows its CFO exactly and pre-rotates its stream by it, so none
  remains (a residual CFO is a smaller ``cfo_max_subcarriers`` without it).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import tensorflow as tf

PRECOMPENSATION = ("none", "timing", "cfo", "both")


@dataclass(frozen=True)
class UniformOffsets:
    """Per-device offsets drawn uniformly, independently over devices and rounds.

    ``theta_k ~ U[0, timing_offset_max_samples]`` (late arrival) and
    ``epsilon_k ~ U[-cfo_max_subcarriers, cfo_max_subcarriers]``.

    Parameters
    ----------
    timing_offset_max_samples : float
        >= 0 [samples].
    cfo_max_subcarriers : float
        >= 0 [subcarrier spacings].
    precompensate : str
        "none", "timing" (the devices precode for their delayed channel), "cfo" (they
        remove ``epsilon_k``) or "both".

    Input
    -----
    num_devices : int
        K.
    seed : [2], tf.int32
        Stateless seed of the round.

    Output
    ------
    timing_offset_samples, cfo_subcarriers : [K], np.float64
        The offsets at the BS (the CFO after pre-compensation).
    """

    timing_offset_max_samples: float = 0.0
    cfo_max_subcarriers: float = 0.0
    precompensate: str = "none"

    def __post_init__(self):
        for name in ("timing_offset_max_samples", "cfo_max_subcarriers"):
            value = getattr(self, name)
            if not (np.isfinite(value) and value >= 0.0):
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
        if self.precompensate not in PRECOMPENSATION:
            raise ValueError(f"precompensate must be one of {PRECOMPENSATION}, "
                             f"got {self.precompensate!r}")

    @property
    def precodes_timing(self) -> bool:
        """Whether the devices precode for their delayed channel ("timing" or "both")."""
        return self.precompensate in ("timing", "both")

    @property
    def active(self) -> bool:
        """Whether any offset can be nonzero."""
        return self.timing_offset_max_samples > 0.0 or self.cfo_max_subcarriers > 0.0

    def __call__(self, num_devices: int, seed) -> tuple[np.ndarray, np.ndarray]:
        u = tf.random.stateless_uniform([2, int(num_devices)], tf.convert_to_tensor(seed, tf.int32),
                                        dtype=tf.float64).numpy()
        timing = u[0] * self.timing_offset_max_samples
        cfo = (2.0 * u[1] - 1.0) * self.cfo_max_subcarriers
        if self.precompensate in ("cfo", "both"):
            cfo = np.zeros_like(cfo)
        return timing, cfo
