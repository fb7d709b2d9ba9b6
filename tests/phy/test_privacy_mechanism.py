"""phy/privacy.py: each device's sensitivity on the received signal, from the PHY."""

from __future__ import annotations

import numpy as np
import pytest

from phy.privacy import budget_sensitivity, clip_sensitivity, phase_mechanism, transmit_scaling


def _contribution_norm(h_abs, tx_scaling, v):
    """||h_k o x_k|| over the phase's symbols for amplitudes v [N, F] (eq. ``Gen_x``)."""
    return float(np.sqrt(np.sum((h_abs * tx_scaling * v) ** 2)))


def test_clipping_bounds_an_adversarial_update():
    """A device that puts its whole clipped update on its strongest received subcarrier
    reaches the clip bound exactly, and no other update of that norm exceeds it."""
    rng = np.random.default_rng(4)
    num_symbols, num_subcarriers, clip = 5, 16, 0.7
    h_abs = rng.rayleigh(size=num_subcarriers)
    tx_scaling = 0.3 / h_abs  # pi sqrt(gamma / delta_bar) / |h_hat|, perfect CSI
    bound = clip_sensitivity(clip, (h_abs * tx_scaling)[None])[0]
    # adversary: every unit of norm on the subcarrier with the largest received amplitude
    v = np.zeros((num_symbols, num_subcarriers))
    v[0, np.argmax(h_abs * tx_scaling)] = clip
    assert _contribution_norm(h_abs, tx_scaling, v) == pytest.approx(bound, rel=1e-12)
    for _ in range(200):  # any update of norm <= C, and v <= |Delta| (every control)
        delta = rng.standard_normal((num_symbols, num_subcarriers)) * rng.exponential(
            size=(num_symbols, num_subcarriers)) ** 3
        delta *= clip / np.linalg.norm(delta)
        v = np.abs(delta) * rng.uniform(0.0, 1.0, delta.shape)
        assert _contribution_norm(h_abs, tx_scaling, v) <= bound * (1 + 1e-12)


def test_budget_bounds_any_data():
    """Whatever the amplitudes, a symbol within its budget sum_f u v^2 <= P delivers at
    most N P max_f |h|^2 to the receiver; the bound is met by all power on the best
    subcarrier."""
    rng = np.random.default_rng(5)
    num_symbols, num_subcarriers, power_w = 3, 8, 0.1
    gain = rng.exponential(size=num_subcarriers) * 1e-4
    u = rng.exponential(size=num_subcarriers)
    bound = budget_sensitivity(power_w, num_symbols, gain[None])[0]
    for _ in range(200):
        v = rng.exponential(size=(num_symbols, num_subcarriers)) ** 2
        v *= np.sqrt(power_w / np.sum(u * v**2, axis=1, keepdims=True))  # at the budget
        assert _contribution_norm(np.sqrt(gain), np.sqrt(u), v) <= bound * (1 + 1e-12)
    v = np.zeros((num_symbols, num_subcarriers))
    v[:, np.argmax(gain)] = np.sqrt(power_w / u[np.argmax(gain)])
    assert _contribution_norm(np.sqrt(gain), np.sqrt(u), v) == pytest.approx(bound, rel=1e-12)


def test_the_worst_device_decides_and_silent_devices_do_not_count():
    gain = np.array([[1.0, 4.0], [9.0, 1.0], [100.0, 100.0]])
    scaling = np.ones_like(gain)
    m = phase_mechanism(channel_gain=gain, tx_scaling=scaling, sent=[True, True, False],
                        num_symbols=2, tx_power_w=0.5, noise_power_w=2.0, budgeted=True)
    np.testing.assert_allclose(m.sensitivity, [np.sqrt(2 * 0.5 * 4.0), np.sqrt(2 * 0.5 * 9.0), 0.0])
    assert m.noise_std == pytest.approx(1.0)
    assert m.worst_device == 1
    assert m.worst_noise_multiplier == pytest.approx(1.0 / 3.0)
    assert np.isinf(m.noise_multiplier[2])


def test_the_tighter_bound_holds_and_no_bound_is_non_private():
    gain = np.array([[4.0, 1.0]])
    scaling = np.array([[0.5, np.inf]])  # a dead subcarrier (no estimate) sends nothing
    both = phase_mechanism(channel_gain=gain, tx_scaling=scaling, sent=[True], num_symbols=1,
                           tx_power_w=100.0, noise_power_w=2.0, budgeted=True, clip_norm=1.0)
    assert both.sensitivity[0] == pytest.approx(1.0)  # clip: 1 * 2 * 0.5 < budget sqrt(100 * 4)
    unbounded = phase_mechanism(channel_gain=gain, tx_scaling=scaling, sent=[True], num_symbols=1,
                                tx_power_w=1.0, noise_power_w=2.0, budgeted=False)
    assert np.isinf(unbounded.sensitivity[0]) and unbounded.worst_noise_multiplier == 0.0
    noisy = phase_mechanism(channel_gain=gain, tx_scaling=scaling, sent=[True], num_symbols=1,
                            tx_power_w=100.0, noise_power_w=2.0, budgeted=True, clip_norm=1.0,
                            artificial_noise_power_w=6.0)
    assert noisy.worst_noise_multiplier == pytest.approx(2.0)


def test_joint_multiplier_whitens_each_device_over_its_phases():
    """Device 0 is worst in phase 1, device 1 in phase 2; jointly device 1 decides with
    z = 1 / sqrt((1/2)^2 + (3/1)^2) (noise std 1 in phase 1, 2 in phase 2)."""
    from phy.privacy import PhaseMechanism, joint_noise_multiplier

    p1 = PhaseMechanism(np.array([2.0, 1.0]), 1.0, np.array([0.5, 1.0]), 0)
    p2 = PhaseMechanism(np.array([1.0, 6.0]), 2.0, np.array([2.0, 1 / 3]), 1)
    z, worst = joint_noise_multiplier([p1, p2])
    assert worst == 1
    assert z == pytest.approx(1.0 / np.sqrt(1.0 + 9.0))


@pytest.mark.parametrize("control", ["optimal", "truncated_inversion"])
def test_the_simulated_uplink_stays_within_each_devices_sensitivity(control):
    """phy.aircomp.aggregate's own transmitted symbols (keep_signals): every device's
    received contribution ||h_k o x_k|| is within its sensitivity from the PHY quantities
    of the phase (budget bound; with the clip norm set to the device's own update norm,
    the smaller bound), and with perfect CSI a device that is not attenuated meets its clip
    bound exactly (the received amplitude per unit of update is pi_k sqrt(gamma/delta_bar)
    on every subcarrier)."""
    import tensorflow as tf

    from phy.aircomp import aggregate
    from phy.power import OptimalPower, TruncatedInversion

    rng = np.random.default_rng(7)
    k, d, f = 6, 200, 32
    updates = (rng.standard_normal((k, d)) * rng.exponential(size=(k, 1))).astype(np.float32)
    weights = np.full(k, 1.0 / k, np.float32)
    gain_scale = np.linspace(1e-3, 1e-2, k)[:, None]
    h = (rng.standard_normal((k, f)) + 1j * rng.standard_normal((k, f))) * np.sqrt(gain_scale / 2)
    h = h.astype(np.complex64)
    power = OptimalPower() if control == "optimal" else TruncatedInversion(0.5)
    tx_power_w, noise_w, gamma_w = 1e-3, 1e-9, 1e-9
    result = aggregate(tf.constant(updates), tf.constant(weights), tf.constant(h), tf.constant(h),
                       power_control=power, tx_power_w=tx_power_w, noise_power_w=noise_w,
                       gamma_w=gamma_w, seed=tf.constant([1, 2], tf.int32), keep_signals=True,
                       path_gain=tf.constant(gain_scale[:, 0], tf.float32))
    x = result.x.numpy()  # [K, N, F]
    received = np.sqrt(np.sum(np.abs(h[:, None, :] * x) ** 2, axis=(1, 2)))
    gain = np.abs(h) ** 2
    mask = power.transmit_mask(tf.constant(gain, tf.float32),
                               tf.constant(gain_scale, tf.float32)).numpy()
    scaling = transmit_scaling(weights, gain, gamma_w, float(result.delta_bar), mask)
    common = dict(channel_gain=gain, tx_scaling=scaling, sent=np.ones(k, bool),
                  num_symbols=result.num_symbols, tx_power_w=tx_power_w, noise_power_w=noise_w,
                  budgeted=True)
    budget_only = phase_mechanism(**common)
    assert np.all(received <= budget_only.sensitivity * (1 + 1e-4))
    attenuated = result.attenuated_fraction.numpy()
    for device in range(k):  # the clip bound with C = this device's own norm holds too
        clipped = phase_mechanism(**common, clip_norm=float(np.linalg.norm(updates[device])))
        assert received[device] <= clipped.sensitivity[device] * (1 + 1e-4)
        if control == "optimal" and attenuated[device] == 0.0:
            assert received[device] == pytest.approx(clipped.sensitivity[device], rel=1e-4)
    assert control != "optimal" or np.any(attenuated == 0.0)


def test_the_devices_noise_shares_reach_the_bs_as_the_designated_noise():
    """Each of K_T senders sending CN(0, sigma_a^2 / (K_T |h_kf|^2)) on subcarrier f through
    its channel h_kf gives the BS sigma_a^2 per subcarrier (checked on 20,000 draws: within
    5 % per subcarrier, 7 standard errors of the mean of an exponential power); the per-symbol power is
    the sum over f; a zero gain cannot be inverted (inf); no noise costs nothing."""
    from phy.privacy import device_noise_tx_power_w

    rng = np.random.default_rng(7)
    h = (rng.normal(size=(3, 16)) + 1j * rng.normal(size=(3, 16))) * np.sqrt([[1e-2], [1e-4], [1e-6]] * np.ones(16) / 2)
    sigma_a2, draws = 2e-3, 20000
    per_symbol = device_noise_tx_power_w(np.abs(h) ** 2, sigma_a2)
    np.testing.assert_allclose(per_symbol, np.sum(sigma_a2 / (3 * np.abs(h) ** 2), axis=1), rtol=1e-12)
    std = np.sqrt(sigma_a2 / (3 * np.abs(h) ** 2) / 2)  # per real dimension
    noise = std[None] * (rng.normal(size=(draws, 3, 16)) + 1j * rng.normal(size=(draws, 3, 16)))
    received = np.sum(h[None] * noise, axis=1)
    np.testing.assert_allclose(np.mean(np.abs(received) ** 2, axis=0), sigma_a2, rtol=0.05)
    gain = np.abs(h) ** 2
    gain[1, 3] = 0.0
    assert np.isinf(device_noise_tx_power_w(gain, sigma_a2)[1])
    assert np.all(device_noise_tx_power_w(gain, 0.0) == 0.0)


def test_privacy_scaling_sends_the_same_amplitudes_s_times_smaller():
    """phy.power.PrivacyScaling's reading of Liu and Simeone's common power scaling: the
    KKT control at (s^2 gamma, s^2 P) sends every device's symbols exactly s times the
    KKT control's at (gamma, P) (the amplitudes v of eq. Opt_v unchanged; to float32
    rounding), devices whose budget binds included, so every received contribution, and
    both sensitivity bounds, scale by s; without noise the estimate is the same sum."""
    import tensorflow as tf

    from phy.aircomp import aggregate
    from phy.power import OptimalPower, PrivacyScaling

    rng = np.random.default_rng(3)
    k, d, f = 6, 200, 32
    updates = (rng.standard_normal((k, d)) * rng.exponential(size=(k, 1))).astype(np.float32)
    weights = np.full(k, 1.0 / k, np.float32)
    gain_scale = np.linspace(1e-3, 1e-2, k)[:, None]
    h = ((rng.standard_normal((k, f)) + 1j * rng.standard_normal((k, f))) * np.sqrt(gain_scale / 2)
         ).astype(np.complex64)
    tx_power_w, noise_w, gamma_w, s = 3e-7, 1e-30, 1e-9, 0.05

    def run(control, scale):
        return aggregate(tf.constant(updates), tf.constant(weights), tf.constant(h), tf.constant(h),
                         power_control=control, tx_power_w=tx_power_w * scale ** 2,
                         noise_power_w=noise_w, gamma_w=gamma_w * scale ** 2,
                         seed=tf.constant([1, 2], tf.int32), keep_signals=True)

    plain, scaled = run(OptimalPower(), 1.0), run(PrivacyScaling(), s)
    assert 0.0 < float(tf.reduce_mean(plain.attenuated_fraction)) < 1.0  # some budgets bind
    np.testing.assert_allclose(scaled.x.numpy(), s * plain.x.numpy(), rtol=2e-5, atol=1e-12)
    np.testing.assert_allclose(scaled.estimate.numpy(), plain.estimate.numpy(), rtol=1e-3, atol=1e-6)
