"""The BS's receive combiners (phy/combiner.py): definitions, and max-min against brute force."""

import numpy as np
import pytest

from phy.combiner import (
    ReceiveCombiner,
    centroid,
    effective_channel,
    gains,
    maxmin,
    mrc_strongest,
)


def _channels(num_devices, num_antennas, num_subcarriers, seed):
    rng = np.random.default_rng(seed)
    h = rng.normal(size=(num_devices, num_antennas, num_subcarriers, 2)) @ np.array([1.0, 1j])
    return h / np.sqrt(2) * rng.uniform(0.1, 1.0, size=(num_devices, 1, 1))


def _brute_force(h, n=600):
    """max over a grid of unit vectors of C^2 (up to phase) of min_k |m^H h_k|^2, per subcarrier."""
    theta = np.linspace(0, np.pi / 2, n)
    phi = np.linspace(0, 2 * np.pi, 2 * n, endpoint=False)
    t, p = np.meshgrid(theta, phi, indexing="ij")
    m = np.stack([np.cos(t).ravel(), (np.sin(t) * np.exp(1j * p)).ravel()])  # [2, G]
    return np.array([
        (np.abs(np.conj(m).T @ h[:, :, f].T) ** 2).min(axis=1).max() for f in range(h.shape[2])
    ])


@pytest.mark.parametrize("num_devices", [2, 3, 4, 6, 10])
def test_maxmin_within_tolerance_of_brute_force(num_devices):
    h = _channels(num_devices, 2, 6, seed=num_devices)
    m, achieved, bound = maxmin(h)
    grid = _brute_force(h)
    np.testing.assert_allclose(np.linalg.norm(m, axis=0), 1.0, rtol=1e-12)
    np.testing.assert_allclose(achieved, gains(h, m).min(axis=0), rtol=1e-12)
    assert np.all(achieved >= grid * (1 - 3e-3)), (achieved - grid) / grid
    assert np.all(achieved <= bound * (1 + 1e-9))
    # no worse than the closed forms it starts from
    assert np.all(achieved >= gains(h, centroid(h)).min(axis=0) * (1 - 1e-12))
    assert np.all(achieved >= gains(h, mrc_strongest(h)).min(axis=0) * (1 - 1e-12))


def test_maxmin_beats_the_closed_forms_with_many_antennas():
    h = _channels(20, 8, 16, seed=7)
    _, achieved, _ = maxmin(h)
    assert np.mean(achieved) > 2 * np.mean(gains(h, centroid(h)).min(axis=0))


def test_mrc_strongest_gives_the_strongest_device_its_full_gain():
    h = _channels(5, 4, 12, seed=3)
    m = mrc_strongest(h)
    norms = np.sum(np.abs(h) ** 2, axis=1)  # [K, F]
    strongest = np.argmax(norms, axis=0)
    np.testing.assert_allclose(gains(h, m)[strongest, np.arange(12)], norms.max(axis=0), rtol=1e-12)


def test_centroid_is_the_principal_eigenvector_of_the_projector_sum():
    h = _channels(6, 3, 5, seed=4)
    m = centroid(h)
    for f in range(5):
        vectors = h[:, :, f] / np.linalg.norm(h[:, :, f], axis=1, keepdims=True)
        projector_sum = vectors.T @ np.conj(vectors)
        top = np.linalg.eigvalsh(projector_sum)[-1]
        np.testing.assert_allclose(projector_sum @ m[:, f], top * m[:, f], atol=1e-12)


@pytest.mark.parametrize("name", ["mrc_strongest", "centroid", "maxmin"])
def test_single_antenna_is_identity_and_effective_channel_shapes(name):
    h = _channels(4, 1, 8, seed=5).astype(np.complex64)
    m = ReceiveCombiner(name)(h)
    assert m.dtype == np.complex64 and m.shape == (1, 8)
    np.testing.assert_array_equal(effective_channel(h, m), h[:, 0, :])
    h4 = _channels(4, 3, 8, seed=6).astype(np.complex64)
    m4 = ReceiveCombiner(name)(h4)
    np.testing.assert_allclose(np.linalg.norm(m4, axis=0), 1.0, rtol=1e-6)
    g = effective_channel(h4, m4)
    assert g.shape == (4, 8) and g.dtype == np.complex64
    np.testing.assert_allclose(np.abs(g) ** 2, gains(h4, m4), rtol=1e-5)


def test_bad_arguments_name_themselves():
    with pytest.raises(ValueError, match="combiner"):
        ReceiveCombiner("zero_forcing")
    with pytest.raises(ValueError, match="h must be"):
        ReceiveCombiner("centroid")(np.ones((3, 4)))
    with pytest.raises(ValueError, match="tolerance"):
        maxmin(_channels(2, 2, 1, 0), tolerance=0.0)
