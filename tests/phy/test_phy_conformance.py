"""Conformance of the PHY's fast paths to their definitions.

The definitions are :func:`phy.aircomp.aggregate` with ``keep_signals=True``: the chain
of eqs. ``Gen_x`` ... ``delta_n`` with every signal materialised (``x`` [K, N, F], the
power controls' dense solutions, :func:`phy.power.optimal_amplitudes` for eq. ``Opt_v``,
Sionna's ``ApplyOFDMChannel``; in the time domain every device's waveform through
Sionna's ``OFDMModulator``, its channel and ``OFDMDemodulator``). The fast paths are the
default call: the linear part and the budget-bound rows only (:mod:`phy.grid_sums`,
:mod:`phy.optimal_rows` for the KKT control, :func:`phy.power.solve_rows` for the
others) and, in the time domain, :meth:`phy.ofdm_time.TimeDomainUplink.transmit`.
One suite over (power control, CSI, power budget, domain), with
:func:`conformance.assert_conforms`, the tolerance policy the learning suite uses.

Sizes cross every block of the kernels: F = 72 subcarriers (four 16-lane groups of
:data:`phy.grid_sums.LANES` and a remainder of 8), d = 6,275 values (87 full OFDM symbols
and a partial one of 11 values), K = 10 devices (the time-domain receiver's chunks of 8
devices and a partial chunk); one device with pi_k = 0 and, with imperfect CSI, one dead
subcarrier (h_hat = 0). At 1e-4 W many rows bind their budget; at 0.1 W none does.

Measured worst ``max|got - want| / max|want|`` over the 24 cases (this machine): the
estimate 2.5e-7 in the frequency domain and 1.1e-6 in the time domain (timing offsets
beyond the prefix and CFOs); the per-device distortion, mean and peak power at most
2.3e-7; ``aggregated_distortion`` 1.7e-7; ``delta_bar`` and ``noise_power`` exact. The
bounds (1e-4 |want| + 5e-5 max|want| for arrays, 1e-5 / 1e-6 for scalars) are 45 times
the worst error, room for another machine's summation order; the counts of attenuated
values are equal. Scaling the fast path's last (partial) OFDM symbol by 1 + 3e-4 fails
the 10 frequency-domain cases whose estimate it reaches. The pairwise tests this
replaces compared the chain at d = 2,000 and F = 64 (rtol 1e-4, atol 1e-5 max) and the
time domain at 1e-5 max.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from conformance import assert_chain_conforms

from phy.aircomp import aggregate
from phy.ofdm_time import TimeDomainUplink
from phy.parameters import POWER_CONTROLS

K, F, D = 10, 72, 6_275
SPACING_HZ = 30e3
CP = 5
NOISE_W = 10 ** (-10.4)
CONTROLS = {"optimal": {}, "truncated_inversion": {"tci_gain_threshold": 0.1}, "full_inversion": {}}


def _inputs(csi: str):
    rng = np.random.default_rng(21)
    path_gain = rng.uniform(0.5, 2.0, K) * 1e-8
    taps = 4
    a = (rng.standard_normal((K, taps)) + 1j * rng.standard_normal((K, taps))) * np.sqrt(
        path_gain[:, None] / (2 * taps))
    tau = np.tile(np.arange(taps) / (F * SPACING_HZ), (K, 1)).astype(np.float32)
    updates = tf.constant(rng.standard_normal((K, D)).astype(np.float32) * 1e-3)
    w = rng.dirichlet(np.ones(K))
    w[4] = 0.0
    weights = tf.constant((w / w.sum()).astype(np.float32))
    aligned = TimeDomainUplink.from_paths(a, tau, bandwidth_hz=F * SPACING_HZ, num_subcarriers=F,
                                          cyclic_prefix_length=CP)
    h = aligned.frequency_response()
    h_hat = h.copy()
    if csi == "imperfect":
        h_hat += (rng.standard_normal(h.shape) + 1j * rng.standard_normal(h.shape)) * np.sqrt(
            0.05 * path_gain[:, None] / 2)
        h_hat[1, 3] = 0.0
    impaired = TimeDomainUplink.from_paths(
        a, tau, bandwidth_hz=F * SPACING_HZ, num_subcarriers=F, cyclic_prefix_length=CP,
        timing_offset_samples=rng.uniform(0, 2 * CP, K), cfo_subcarriers=rng.uniform(-0.05, 0.05, K))
    return updates, weights, tf.constant(h, tf.complex64), tf.constant(h_hat.astype(np.complex64)), \
        tf.constant(path_gain, tf.float32), impaired


@pytest.mark.parametrize("domain", ["frequency", "time"])
@pytest.mark.parametrize("budget_w", [0.1, 1e-4])
@pytest.mark.parametrize("csi", ["perfect", "imperfect"])
@pytest.mark.parametrize("control", list(CONTROLS))
def test_fast_path_conforms_to_the_definition(control, csi, budget_w, domain):
    updates, weights, h, h_hat, path_gain, impaired = _inputs(csi)
    common = dict(power_control=POWER_CONTROLS[control].build(CONTROLS[control]),
                  tx_power_w=budget_w, noise_power_w=NOISE_W, gamma_w=NOISE_W,
                  seed=tf.constant([3, 4]), path_gain=path_gain,
                  uplink=impaired if domain == "time" else None)
    want = aggregate(updates, weights, h, h_hat, keep_signals=True, **common)
    got = aggregate(updates, weights, h, h_hat, **common)
    assert_chain_conforms(got, want, f"{control}, {csi} CSI, {budget_w} W, {domain} domain",
                          rows_bind=budget_w == 1e-4 and control != "full_inversion")
