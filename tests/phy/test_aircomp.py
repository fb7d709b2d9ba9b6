"""Tests for the AirComp transmit/channel/receive chain (phy/aircomp.py)."""

import numpy as np
import pytest
import tensorflow as tf

from phy.aircomp import aggregate
from phy.power import FullInversion, IdealAggregation, OptimalPower, TruncatedInversion

NOISE_W = 10 ** (-7.4) / 1e3  # -74 dBm
SEED = tf.constant([7, 11], tf.int32)


def _channel(distances_m, f, seed=(1, 2)):
    """CN(0, r^-4) per subcarrier, [K, F] complex64."""
    k = len(distances_m)
    std = tf.constant(np.sqrt(np.asarray(distances_m, np.float64) ** -4.0 / 2.0), tf.float32)
    re = tf.random.stateless_normal([k, f], seed)
    im = tf.random.stateless_normal([k, f], tf.random.experimental.stateless_fold_in(seed, 1))
    return tf.complex(re, im) * tf.cast(std[:, None], tf.complex64)


def _setup(rng, k=6, d=300, f=32):
    h = _channel(rng.uniform(30.0, 300.0, k), f)
    updates = tf.constant(rng.standard_normal((k, d)) * 1e-3, tf.float32)
    weights = tf.constant(rng.dirichlet(np.ones(k)), tf.float32)
    exact = updates.numpy().astype(np.float64).T @ weights.numpy().astype(np.float64)
    return h, updates, weights, exact


def _run(updates, weights, h, control, **kw):
    args = {"tx_power_w": 0.1, "noise_power_w": NOISE_W, "gamma_w": NOISE_W, "seed": SEED}
    h_hat = kw.pop("h_hat", h)
    args.update(kw)
    return aggregate(updates, weights, h, h_hat, power_control=control, **args)


def test_ideal_is_exact_weighted_sum(rng):
    h, updates, weights, exact = _setup(rng)
    res = _run(updates, weights, h, IdealAggregation())
    np.testing.assert_allclose(res.estimate.numpy(), exact, rtol=0, atol=1e-6 * np.abs(exact).max())
    assert res.num_symbols == -(-300 // 32)
    assert float(res.aggregated_distortion) == 0.0
    np.testing.assert_array_equal(res.local_distortion.numpy(), 0.0)


@pytest.mark.parametrize("control", [OptimalPower(), FullInversion(), TruncatedInversion(0.0)])
def test_huge_power_no_noise_perfect_csi_gives_weighted_sum(rng, control):
    h, updates, weights, exact = _setup(rng)
    res = _run(updates, weights, h, control, tx_power_w=1e9, noise_power_w=0.0)
    np.testing.assert_allclose(res.estimate.numpy(), exact, rtol=1e-4, atol=1e-5 * np.abs(exact).max())
    assert float(res.local_distortion.numpy().max()) == 0.0
    assert float(res.attenuated_fraction.numpy().max()) == 0.0
    db = np.sum(weights.numpy() * np.sum(updates.numpy().astype(np.float64) ** 2, 1)) / 300
    np.testing.assert_allclose(float(res.delta_bar), db, rtol=1e-5)


def test_noise_variance_matches_theory(rng):
    k, d, f = 4, 20_000, 256
    h, updates, weights, exact = _setup(rng, k=k, d=d, f=f)
    res = _run(updates, weights, h, FullInversion())
    err = res.estimate.numpy().astype(np.float64) - exact
    theory = float(res.delta_bar) * NOISE_W / (2 * NOISE_W)
    np.testing.assert_allclose(float(res.noise_power), theory, rtol=1e-6)
    # variance estimate over d values: relative std sqrt(2/d) = 1 %; allow 5 %
    np.testing.assert_allclose(np.var(err), theory, rtol=0.05)
    assert abs(np.mean(err)) < 4 * np.sqrt(theory / d)


def test_same_seed_same_output_and_signals(rng):
    h, updates, weights, _ = _setup(rng)
    a = _run(updates, weights, h, OptimalPower(), keep_signals=True)
    b = _run(updates, weights, h, OptimalPower(), keep_signals=True)
    np.testing.assert_array_equal(a.estimate.numpy(), b.estimate.numpy())
    assert a.y.shape == (a.num_symbols, 32) and a.x.shape == (6, a.num_symbols, 32)
    c = _run(updates, weights, h, OptimalPower(), seed=tf.constant([1, 1]))
    assert not np.array_equal(a.estimate.numpy(), c.estimate.numpy())
    # the Sionna ApplyOFDMChannel path (keep_signals) and the real-sum path agree
    d = _run(updates, weights, h, OptimalPower())
    np.testing.assert_allclose(d.estimate.numpy(), a.estimate.numpy(), rtol=1e-5,
                               atol=1e-6 * np.abs(a.estimate.numpy()).max())
    # per-symbol transmit power from the kept x equals the reported one
    power = np.sum(np.abs(a.x.numpy()) ** 2, axis=-1)
    np.testing.assert_allclose(power.max(axis=1), a.tx_power_max_w.numpy(), rtol=1e-5)


def test_controls_configured_alike_share_one_graph_and_its_output(rng):
    """The phase's graph is compiled once per configuration (the control's class and
    attributes, :func:`phy.power.configuration_key`), so a process's later runs (a study's
    worker) reuse it: a second instance configured alike gets the graph already built and
    the estimate a freshly built graph gives, bit for bit; another threshold gets its own."""
    from phy import aircomp

    h, updates, weights, _ = _setup(rng)
    first = _run(updates, weights, h, TruncatedInversion(0.2))
    built = len(aircomp._COMPILED)
    again = _run(updates, weights, h, TruncatedInversion(0.2))
    assert len(aircomp._COMPILED) == built
    saved = dict(aircomp._COMPILED)
    aircomp._COMPILED.clear()  # a graph built afresh for the same configuration
    try:
        fresh = _run(updates, weights, h, TruncatedInversion(0.2))
    finally:
        aircomp._COMPILED.update(saved)
    for result in (again, fresh):
        np.testing.assert_array_equal(result.estimate.numpy(), first.estimate.numpy())
    _run(updates, weights, h, TruncatedInversion(0.3))
    assert len(aircomp._COMPILED) == built + 1

    class Listed(OptimalPower):  # an unhashable attribute: a graph per instance, kept alive
        def __init__(self):
            self.table = [1.0]

    for _ in range(2):
        _run(updates, weights, h, Listed())
    assert len(aircomp._COMPILED) == built + 3


@pytest.mark.parametrize("control", [OptimalPower(), TruncatedInversion(0.2)])
def test_transmit_power_within_budget(rng, control):
    h, updates, weights, _ = _setup(rng, k=8, d=2000, f=64)
    res = _run(updates, weights, h, control, tx_power_w=1e-4)
    assert np.all(res.tx_power_max_w.numpy() <= 1e-4 * (1 + 1e-5))
    assert np.all(res.tx_power_mean_w.numpy() <= res.tx_power_max_w.numpy() * (1 + 1e-6))
    assert res.attenuated_fraction.numpy().max() > 0.0


def test_farther_devices_get_larger_distortion(rng):
    k, d, f = 6, 4096, 128
    distances = np.array([40.0, 80.0, 120.0, 170.0, 230.0, 300.0])
    small = _channel(np.ones(k), f)[:1]  # one fading draw shared by all devices
    h = tf.tile(small, [k, 1]) * tf.constant(distances[:, None] ** -2.0, tf.complex64)
    one = rng.standard_normal(d) * 1e-3
    updates = tf.constant(np.tile(one, (k, 1)), tf.float32)
    weights = tf.fill([k], 1.0 / k)
    res = _run(updates, weights, h, OptimalPower(), tx_power_w=1e-3)
    dist = res.local_distortion.numpy()
    assert dist[0] < dist[-1]
    assert np.all(np.diff(dist) > 0.0)
    assert np.all(np.diff(res.attenuated_fraction.numpy()) >= 0.0)
    # the aggregated distortion respects the Jensen bound (eq. distortion_upper_bound)
    assert float(res.aggregated_distortion) <= np.sum(weights.numpy() * dist) * (1 + 1e-5)


def test_degenerate_inputs_no_nan(rng):
    h, updates, weights, _ = _setup(rng)
    zero = _run(tf.zeros_like(updates), weights, h, OptimalPower())
    np.testing.assert_array_equal(zero.estimate.numpy(), 0.0)
    assert float(zero.delta_bar) == 0.0
    # a device with pi_k = 0 sends nothing and costs no power
    w = weights.numpy().copy()
    w[0] = 0.0
    w /= w.sum()
    res = _run(updates, tf.constant(w), h, OptimalPower(), tx_power_w=1e9, noise_power_w=0.0)
    assert np.all(np.isfinite(res.estimate.numpy()))
    assert float(res.tx_power_max_w[0]) == 0.0
    expected = updates.numpy().astype(np.float64).T @ w
    np.testing.assert_allclose(res.estimate.numpy(), expected, rtol=1e-4,
                               atol=1e-5 * np.abs(expected).max())


def test_bad_arguments_raise(rng):
    h, updates, weights, _ = _setup(rng)
    with pytest.raises(ValueError, match="tx_power_w"):
        _run(updates, weights, h, OptimalPower(), tx_power_w=0.0)
    with pytest.raises(ValueError, match="weights"):
        _run(updates, weights[:3], h, OptimalPower())
    with pytest.raises(ValueError, match="h and h_hat"):
        _run(updates, weights, h[:2], OptimalPower())


@pytest.mark.parametrize("control", [OptimalPower(), FullInversion(), TruncatedInversion(0.5),
                                     TruncatedInversion(0.0)])
def test_local_distortion_is_never_negative_and_zero_when_nothing_is_lost(rng, control):
    """Squared norms are summed, never formed as a difference (issue 20 saw -3.6e-7)."""
    h, updates, weights, _ = _setup(rng, k=8, d=5000, f=64)
    updates = updates * 1e3  # large energies: a difference of sums would cancel visibly
    for tx_power_w in (1e-6, 1e-3, 1e9):
        res = _run(updates, weights, h, control, tx_power_w=tx_power_w)
        dist = res.local_distortion.numpy()
        assert np.all(dist >= 0.0), (tx_power_w, dist.min())
        if tx_power_w == 1e9 and not (isinstance(control, TruncatedInversion) and control.gain_threshold > 0):
            np.testing.assert_array_equal(dist, 0.0)  # every value sent, nothing clipped


@pytest.mark.parametrize("control", [OptimalPower(), FullInversion()], ids=["kkt", "full_inversion"])
def test_a_public_delta_bar_is_used_alike_by_both_chains(rng, control):
    """``public_delta_bar`` (phy.privacy.public_delta_bar, issue 59) replaces eq.
    ``rho_avg``'s reported delta_bar in the fast chain and the reference alike: both report
    it, their estimates agree as without it, the noise term is delta_bar sigma^2 / (2 gamma)
    at it, and a transmit power scales as 1 / delta_bar against the reported one's."""
    h, updates, weights, _ = _setup(rng)
    reported = _run(updates, weights, h, control)
    public = 4.0 * float(reported.delta_bar)
    fast = _run(updates, weights, h, control, public_delta_bar=public)
    kept = _run(updates, weights, h, control, public_delta_bar=public, keep_signals=True)
    for result in (fast, kept):
        assert float(result.delta_bar) == pytest.approx(public, rel=1e-6)
        np.testing.assert_allclose(float(result.noise_power), public * NOISE_W / (2 * NOISE_W), rtol=1e-6)
    np.testing.assert_allclose(fast.estimate.numpy(), kept.estimate.numpy(), rtol=1e-5,
                               atol=1e-6 * np.abs(kept.estimate.numpy()).max())
    if isinstance(control, FullInversion):  # v = |Delta|: power is u |Delta|^2, u ~ 1 / delta_bar
        np.testing.assert_allclose(fast.tx_power_mean_w.numpy(), reported.tx_power_mean_w.numpy() / 4.0,
                                   rtol=1e-5)
