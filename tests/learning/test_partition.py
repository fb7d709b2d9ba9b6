"""Partitioners of Section VI: size laws, label schemes, weights and padded device tensors.

Statistical checks use fixed seeds and state their tolerance (in standard errors)."""

import numpy as np
import pytest
import tensorflow as tf

from learning.algorithms.base import DeviceData
from learning.data.datasets import synthetic
from learning.data.partition import Partition, partition, sample_sizes, to_device_data


def _balanced_labels(num_classes, per_class, rng):
    return rng.permutation(np.repeat(np.arange(num_classes), per_class)).astype(np.int32)


def test_poisson_sizes_mean_and_variance(rng):
    sizes = sample_sizes(20000, 10.0, "poisson", rng)
    # SE of the mean: sqrt(10 / 20000) = 0.022 -> tolerance 0.1 (~4.5 SE).
    assert abs(sizes.mean() - 10.0) < 0.1
    assert abs(sizes.var() - 10.0) < 0.5  # SE of the variance ~0.11
    assert sizes.min() >= 0


def test_shifted_poisson_at_least_one_and_mean_preserved(rng):
    sizes = sample_sizes(20000, 100.0, "shifted_poisson", rng)
    assert sizes.min() >= 1
    assert abs(sizes.mean() - 100.0) < 0.35  # SE 0.07
    assert sizes.dtype == np.int64
    assert sample_sizes(1000, 1.0, "shifted_poisson", rng).tolist() == [1] * 1000


@pytest.mark.parametrize("num_labels", [1, 3])
def test_labels_per_device(rng, num_labels):
    y = _balanced_labels(10, 2000, rng)
    part = partition(y, 10, num_devices=200, scheme="labels_per_device",
                     mean_samples_per_device=60, size_distribution="shifted_poisson",
                     labels_per_device=num_labels, rng=rng)
    hist = part.label_histogram(y, 10)
    # Every device shows exactly l labels (P(a label of 3 unseen in >= 30 draws) < 1e-5).
    np.testing.assert_array_equal((hist > 0).sum(axis=1), num_labels)
    np.testing.assert_array_equal(hist.sum(axis=1), part.num_samples)
    # Each sample picks one of its device's labels with probability 1/l: the median share
    # of a label on its device is near 1/l (each share ~ Binomial(~60, 1/l) / ~60).
    fractions = hist[hist > 0] / np.repeat(part.num_samples, num_labels)
    assert abs(np.median(fractions) - 1 / num_labels) < 0.05


def test_single_class_mnist_setup_paper_sizes(rng):
    y = _balanced_labels(10, 6000, rng)
    part = partition(y, 10, num_devices=100, scheme="labels_per_device",
                     mean_samples_per_device=10, labels_per_device=1, rng=rng)
    hist = part.label_histogram(y, 10)
    assert ((hist > 0).sum(axis=1) <= 1).all()
    assert part.num_devices == 100
    assert abs(part.weights.sum() - 1.0) < 1e-12


def test_dirichlet_class_spread_matches_paper(rng):
    # Paper (Sec. VI): alpha = 0.1, C = 100, shifted Poisson mean 100 -> 21.6 classes per
    # device on average. Per-device std ~3.4, so the mean over 500 devices has SE ~0.15;
    # tolerance 1.0 (~6.5 SE).
    y = _balanced_labels(100, 1000, rng)
    part = partition(y, 100, num_devices=500, scheme="dirichlet",
                     mean_samples_per_device=100, size_distribution="shifted_poisson",
                     dirichlet_alpha=0.1, rng=rng)
    distinct = (part.label_histogram(y, 100) > 0).sum(axis=1)
    assert abs(distinct.mean() - 21.6) < 1.0
    # Larger alpha spreads devices over more classes.
    wide = partition(y, 100, num_devices=100, scheme="dirichlet", mean_samples_per_device=100,
                     size_distribution="shifted_poisson", dirichlet_alpha=10.0, rng=rng)
    assert (wide.label_histogram(y, 100) > 0).sum(axis=1).mean() > 50


def test_iid_labels_roughly_uniform(rng):
    y = _balanced_labels(10, 3000, rng)
    part = partition(y, 10, num_devices=100, scheme="iid", mean_samples_per_device=100, rng=rng)
    fractions = part.label_histogram(y, 10).sum(axis=0) / part.num_samples.sum()
    # ~10,000 draws: SE of a class fraction 0.003; tolerance 0.015.
    np.testing.assert_allclose(fractions, 0.1, atol=0.015)


@pytest.mark.parametrize("scheme", ["labels_per_device", "dirichlet", "iid"])
def test_disjoint_weights_and_determinism(scheme):
    y = _balanced_labels(10, 500, np.random.default_rng(0))
    kwargs = dict(num_devices=50, scheme=scheme, mean_samples_per_device=20,
                  labels_per_device=2, dirichlet_alpha=0.5)
    a = partition(y, 10, rng=np.random.default_rng(7), **kwargs)
    b = partition(y, 10, rng=np.random.default_rng(7), **kwargs)
    for ia, ib in zip(a.indices, b.indices, strict=True):
        np.testing.assert_array_equal(ia, ib)
    flat = np.concatenate(a.indices)
    assert np.unique(flat).size == flat.size  # no image on two devices
    np.testing.assert_allclose(a.weights, a.num_samples / a.num_samples.sum())
    assert abs(a.weights.sum() - 1.0) < 1e-12
    c = partition(y, 10, rng=np.random.default_rng(8), **kwargs)
    assert not all(
        ia.size == ic.size and np.array_equal(ia, ic)
        for ia, ic in zip(a.indices, c.indices, strict=True)
    )


def test_zero_sized_devices_have_zero_weight_and_empty_rows(rng):
    ds = synthetic(num_classes=4, shape=(3, 3, 1), num_train=400, num_test=4, rng=1)
    part = partition(ds.y_train, 4, num_devices=40, scheme="iid",
                     mean_samples_per_device=0.7, rng=rng)
    empty = part.num_samples == 0
    assert empty.any() and (~empty).any()
    assert (part.weights[empty] == 0).all() and np.all(np.isfinite(part.weights))
    data = to_device_data(ds, part)
    assert (data.mask.numpy()[empty] == 0).all()
    assert np.isfinite(data.weights.numpy()).all()


def test_all_devices_empty_is_an_error(rng):
    y = np.zeros(10, dtype=np.int32)
    with pytest.raises(ValueError, match="drew 0 samples"):
        partition(y, 1, num_devices=3, scheme="iid", mean_samples_per_device=1e-9, rng=rng)
    with pytest.raises(ValueError, match="0 samples"):
        _ = Partition((np.zeros(0), np.zeros(0))).weights


def test_pool_exhaustion_and_overlapping_draws(rng):
    y = _balanced_labels(2, 30, rng)
    kwargs = dict(num_devices=10, scheme="labels_per_device", mean_samples_per_device=20,
                  size_distribution="shifted_poisson", labels_per_device=1)
    with pytest.raises(ValueError, match="disjoint=False"):
        partition(y, 2, rng=rng, **kwargs)
    part = partition(y, 2, rng=rng, disjoint=False, **kwargs)
    for idx in part.indices:
        assert np.unique(idx).size == idx.size  # still without replacement within a device
    assert np.unique(np.concatenate(part.indices)).size < part.num_samples.sum()


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        (dict(scheme="random"), "scheme"),
        (dict(num_devices=0), "num_devices"),
        (dict(size_distribution="uniform"), "size_distribution"),
        (dict(mean_samples_per_device=0.0), "mean_samples_per_device"),
        (dict(size_distribution="shifted_poisson", mean_samples_per_device=0.5),
         "mean_samples_per_device"),
        (dict(labels_per_device=0), "labels_per_device"),
        (dict(labels_per_device=11), "labels_per_device"),
        (dict(scheme="dirichlet", dirichlet_alpha=0.0), "dirichlet_alpha"),
    ],
)
def test_bad_arguments_name_themselves(rng, kwargs, name):
    args = dict(num_devices=5, scheme="labels_per_device", mean_samples_per_device=3) | kwargs
    with pytest.raises(ValueError, match=name):
        partition(np.arange(100) % 10, 10, rng=rng, **args)


def test_bad_labels_rejected(rng):
    with pytest.raises(ValueError, match="num_classes"):
        partition(np.array([0, 1, 10]), 10, num_devices=2, scheme="iid",
                  mean_samples_per_device=1, rng=rng)
    with pytest.raises(ValueError, match="y_train"):
        partition(np.array([0.0, 1.0]), 2, num_devices=2, scheme="iid",
                  mean_samples_per_device=1, rng=rng)


def test_to_device_data_padding_and_contents(rng):
    ds = synthetic(num_classes=3, shape=(4, 5, 2), num_train=90, num_test=3, rng=2)
    part = Partition((np.array([5, 1, 7]), np.array([], dtype=np.int64), np.array([9])))
    data = to_device_data(ds, part)
    assert isinstance(data, DeviceData) and data.num_devices == 3
    assert data.x.shape == (3, 3, 4, 5, 2) and data.x.dtype == tf.float32
    assert data.y.shape == (3, 3) and data.y.dtype == tf.int32
    assert data.mask.dtype == tf.float32 and data.weights.dtype == tf.float32
    np.testing.assert_array_equal(data.mask.numpy(), [[1, 1, 1], [0, 0, 0], [1, 0, 0]])
    np.testing.assert_allclose(data.weights.numpy(), [0.75, 0.0, 0.25])
    x, y = data.x.numpy(), data.y.numpy()
    np.testing.assert_array_equal(x[0], ds.x_train[[5, 1, 7]])
    np.testing.assert_array_equal(x[2, 0], ds.x_train[9])
    np.testing.assert_array_equal(y[0], ds.y_train[[5, 1, 7]])
    assert (x[1] == 0).all() and (x[2, 1:] == 0).all() and (y[1] == 0).all()


def test_to_device_data_from_partition_and_bad_indices(rng):
    ds = synthetic(num_classes=5, shape=(2, 2, 1), num_train=1000, num_test=5, rng=4)
    part = partition(ds.y_train, 5, num_devices=30, scheme="labels_per_device",
                     mean_samples_per_device=10, labels_per_device=2, rng=rng)
    data = to_device_data(ds, part)
    assert data.x.shape[:2] == (30, max(1, part.num_samples.max()))
    np.testing.assert_array_equal(data.mask.numpy().sum(axis=1), part.num_samples)
    np.testing.assert_allclose(data.weights.numpy().sum(), 1.0, rtol=1e-6)
    with pytest.raises(ValueError, match="training samples"):
        to_device_data(ds, Partition((np.array([1000]),)))
