"""How the training set is split across K devices (Section VI, Table I).

Local sizes |D_k| follow a Poisson law (MNIST: mean 10) or a shifted Poisson law
(CIFAR-100: mean 100, at least one sample). Labels follow one of three schemes:

* ``labels_per_device`` (MNIST): device k gets l distinct labels, drawn uniformly
  at random without replacement from the C classes (independently per device, so
  classes are not balanced across devices); each local sample's label is drawn from
  them with probability 1/l. l = 1 is the paper's single-class-per-device set-up.
* ``dirichlet`` (CIFAR-100): p_k ~ Dirichlet(alpha 1_C); the labels of the |D_k|
  samples are drawn i.i.d. from p_k (a multinomial draw).
* ``iid``: samples drawn uniformly from the whole training set.

Images are then drawn from the class-specific pools (the whole set for ``iid``)
*without replacement*. By default (``disjoint=True``) also across devices: local
datasets never share an image, and a draw that asks more of a class than its pool
holds raises ValueError. With ``disjoint=False`` every device draws from the full
pools independently (without replacement within a device only).

A Poisson size of 0 is kept: that device has pi_k = 0, an all-padding row in
:func:`to_device_data` and contributes nothing to the aggregate. Only when every
device draws 0 is it an error (the weights pi_k = |D_k| / |D| would be 0/0).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from learning.data.datasets import Dataset
from learning.data.sizes import SIZE_DISTRIBUTIONS, sample_sizes  # noqa: F401 (re-exported)

if TYPE_CHECKING:
    from learning.algorithms.base import DeviceData

SCHEMES = ("labels_per_device", "dirichlet", "iid")


@dataclass(frozen=True, eq=False)
class Partition:
    """Per-device index arrays into the training set (compares by identity).

    Attributes
    ----------
    indices : tuple of np.ndarray
        ``indices[k]``: int64 [|D_k|] rows of ``x_train`` / ``y_train`` held by device k.
    """

    indices: tuple[np.ndarray, ...]

    def __post_init__(self) -> None:
        arrays = tuple(np.asarray(i, dtype=np.int64).reshape(-1) for i in self.indices)
        if not arrays:
            raise ValueError("indices must hold at least one device, got 0")
        object.__setattr__(self, "indices", arrays)

    @property
    def num_devices(self) -> int:
        return len(self.indices)

    @property
    def num_samples(self) -> np.ndarray:
        """|D_k|, int64 [K]."""
        return np.array([i.size for i in self.indices], dtype=np.int64)

    @property
    def weights(self) -> np.ndarray:
        """pi_k = |D_k| / |D|, float64 [K], summing to one."""
        n = self.num_samples
        if n.sum() == 0:
            raise ValueError("every device holds 0 samples; weights pi_k are undefined")
        return n / n.sum()

    def label_histogram(self, y_train: np.ndarray, num_classes: int) -> np.ndarray:
        """Samples of each class on each device, int64 [K, C]."""
        owner = np.repeat(np.arange(self.num_devices), self.num_samples)
        labels = np.asarray(y_train)[np.concatenate(self.indices)]
        flat = np.bincount(owner * num_classes + labels, minlength=self.num_devices * num_classes)
        return flat.reshape(self.num_devices, num_classes)


def _class_counts(sizes, num_classes, scheme, labels_per_device, dirichlet_alpha, rng):
    """Samples of each class per device, int64 [K, C] (one column for ``iid``)."""
    k = sizes.size
    if scheme == "iid":
        return sizes[:, None]
    if scheme == "labels_per_device":
        labels = np.argsort(rng.random((k, num_classes)), axis=1)[:, :labels_per_device]
        per_label = rng.multinomial(sizes, np.full(labels_per_device, 1.0 / labels_per_device))
        counts = np.zeros((k, num_classes), dtype=np.int64)
        np.put_along_axis(counts, labels, per_label, axis=1)
        return counts
    p = rng.dirichlet(np.full(num_classes, float(dirichlet_alpha)), size=k)
    return rng.multinomial(sizes, p).astype(np.int64)


class PoolExhausted(ValueError):
    """A class has fewer training samples than the devices drawing from it need.

    Attributes: ``label``, ``available``, ``needed`` (ints) and ``disjoint`` (bool).
    """

    def __init__(self, label: int, available: int, needed: int, disjoint: bool):
        self.label, self.available, self.needed, self.disjoint = int(label), int(available), int(needed), disjoint
        what = "all devices together" if disjoint else "one device"
        super().__init__(
            f"class {label} has {available} training samples but {what} need {needed}; "
            "lower mean_samples_per_device or num_devices"
            + (", or pass disjoint=False" if disjoint else "")
        )


def _draw_images(groups, counts, disjoint, rng):
    """Indices for counts [K, G] from the pools of ``groups`` [N] in 0..G-1."""
    num_devices, num_groups = counts.shape
    chosen, owners = [], []
    for g in range(num_groups):  # loop over classes, not devices
        demand = counts[:, g]
        if demand.sum() == 0:
            continue
        pool = np.flatnonzero(groups == g)
        need = demand.sum() if disjoint else demand.max()
        if need > pool.size:
            raise PoolExhausted(g, pool.size, need, disjoint)
        owner = np.repeat(np.arange(num_devices), demand)
        if disjoint:
            chosen.append(rng.permutation(pool)[: demand.sum()])
        else:
            chosen.extend(rng.choice(pool, size=n, replace=False) for n in demand if n > 0)
        owners.append(owner)
    if not chosen:
        return [np.zeros(0, dtype=np.int64)] * num_devices
    idx, owner = np.concatenate(chosen), np.concatenate(owners)
    shuffle = rng.permutation(idx.size)  # mix classes inside each device
    idx, owner = idx[shuffle], owner[shuffle]
    order = np.argsort(owner, kind="stable")
    return np.split(idx[order], np.cumsum(counts.sum(axis=1))[:-1])


def partition(
    y_train: np.ndarray,
    num_classes: int,
    *,
    num_devices: int,
    scheme: str,
    mean_samples_per_device: float,
    size_distribution: str = "poisson",
    labels_per_device: int = 1,
    dirichlet_alpha: float = 0.1,
    disjoint: bool = True,
    rng: np.random.Generator,
) -> Partition:
    """Split a training set across devices (Section VI).

    Parameters
    ----------
    y_train : np.ndarray, [N], int
        Training labels in [0, num_classes).
    num_classes : int
        C.
    num_devices : int
        K.
    scheme : str
        ``"labels_per_device"``, ``"dirichlet"`` or ``"iid"``.
    mean_samples_per_device : float
        Mean of |D_k| (Table I: MNIST 10, CIFAR-100 100).
    size_distribution : str
        ``"poisson"`` or ``"shifted_poisson"``.
    labels_per_device : int
        l, in [1, C] (``labels_per_device`` scheme only).
    dirichlet_alpha : float
        alpha > 0 (``dirichlet`` scheme only).
    disjoint : bool
        No image shared between devices (default), see the module docstring.
    rng : np.random.Generator
        Draw order: sizes, then labels, then images; same generator state, same output.

    Returns
    -------
    Partition
    """
    y = np.asarray(y_train)
    if y.ndim != 1 or y.size == 0 or not np.issubdtype(y.dtype, np.integer):
        raise ValueError(f"y_train must be a non-empty 1-D integer array, got {y.dtype} {y.shape}")
    if int(num_classes) < 1 or y.min() < 0 or y.max() >= num_classes:
        raise ValueError(
            f"num_classes={num_classes} must be >= 1 and exceed every label "
            f"(labels span [{y.min()}, {y.max()}])"
        )
    if int(num_devices) < 1:
        raise ValueError(f"num_devices must be >= 1, got {num_devices}")
    if scheme not in SCHEMES:
        raise ValueError(f"scheme must be one of {SCHEMES}, got {scheme!r}")
    if scheme == "labels_per_device" and not 1 <= int(labels_per_device) <= num_classes:
        raise ValueError(
            f"labels_per_device must be in [1, {num_classes}], got {labels_per_device}"
        )
    if scheme == "dirichlet" and not dirichlet_alpha > 0:
        raise ValueError(f"dirichlet_alpha must be > 0, got {dirichlet_alpha}")

    sizes = sample_sizes(int(num_devices), float(mean_samples_per_device), size_distribution, rng)
    if sizes.sum() == 0:
        raise ValueError(
            f"every one of the {num_devices} devices drew 0 samples "
            f"(mean_samples_per_device={mean_samples_per_device}); use a larger mean or "
            "size_distribution='shifted_poisson'"
        )
    counts = _class_counts(
        sizes, int(num_classes), scheme, int(labels_per_device), dirichlet_alpha, rng
    )
    groups = np.zeros_like(y) if scheme == "iid" else y
    return Partition(tuple(_draw_images(groups, counts, bool(disjoint), rng)))


def _padded_index(dataset: Dataset, partition: Partition) -> tuple[np.ndarray, np.ndarray]:
    """``(index [K, B] int64, mask [K, B] bool)``: device k's training rows in its first
    |D_k| slots, B = max(1, max_k |D_k|) (padding slots index row 0 and are masked)."""
    n = partition.num_samples
    flat = np.concatenate(partition.indices)
    if flat.size and (flat.min() < 0 or flat.max() >= dataset.num_train):
        raise ValueError(
            f"partition indexes rows up to {flat.max()} but dataset {dataset.name!r} has "
            f"{dataset.num_train} training samples"
        )
    b = max(1, int(n.max()))
    mask = np.arange(b)[None, :] < n[:, None]
    idx = np.zeros(mask.shape, dtype=np.int64)
    idx[mask] = flat  # row-major fill: device k's samples in its first |D_k| slots
    return idx, mask


def _padded_rows(dataset: Dataset, idx: np.ndarray, mask: np.ndarray) -> DeviceData:
    """The padded :class:`DeviceData` of the devices whose slots are ``idx``, ``mask``
    (weights left to the caller: zeros here)."""
    import tensorflow as tf

    from learning.algorithms.base import DeviceData

    x = dataset.x_train[idx] * mask.reshape(*mask.shape, *([1] * len(dataset.input_shape)))
    y = np.where(mask, dataset.y_train[idx], 0)
    return DeviceData(x=tf.constant(x, dtype=tf.float32), y=tf.constant(y, dtype=tf.int32),
                      mask=tf.constant(mask, dtype=tf.float32), weights=tf.zeros([idx.shape[0]]))


def to_device_data(dataset: Dataset, partition: Partition) -> DeviceData:
    """All local datasets as padded tensors for batched local training.

    Output: :class:`DeviceData` with x [K, B, H, W, C] tf.float32, y [K, B] tf.int32,
    mask [K, B] tf.float32 and weights [K] tf.float32 (pi_k), where
    B = max(1, max_k |D_k|). Device k's samples fill the first |D_k| rows; padding
    rows are zeros with mask 0.
    """
    import dataclasses

    import tensorflow as tf  # here: drawing the partition needs NumPy only (cosim validate)

    idx, mask = _padded_index(dataset, partition)
    data = _padded_rows(dataset, idx, mask)
    return dataclasses.replace(data, weights=tf.constant(partition.weights, dtype=tf.float32))


@dataclass(frozen=True)
class IndexedDeviceData:
    """The local datasets of a round that streams its devices, without the padded
    [K, B, ...] inputs: the training set once and each device's rows in it (``index``,
    ``mask`` [K, B]). :meth:`rows` pads a chunk's devices as :func:`to_device_data` pads
    all of them (the same B, the same values), so a chunk trains on the same tensors.

    At K = 100,000 devices of Poisson(10) MNIST-shaped samples the padded inputs would be
    8.8 GB (B = 28); this holds the training set and 22 MB of indices.
    """

    dataset: Dataset
    index: np.ndarray
    mask: np.ndarray
    weights: object  # [K] tf.float32, pi_k

    @classmethod
    def of(cls, dataset: Dataset, partition: Partition) -> IndexedDeviceData:
        import tensorflow as tf

        idx, mask = _padded_index(dataset, partition)
        return cls(dataset, idx, mask, tf.constant(partition.weights, dtype=tf.float32))

    @property
    def num_devices(self) -> int:
        return int(self.index.shape[0])

    def rows(self, lo: int, hi: int) -> DeviceData:
        """Devices ``lo:hi`` as :meth:`learning.algorithms.base.DeviceData.rows` of the
        padded data: their own weights pi_k and their population ids."""
        import dataclasses

        import tensorflow as tf

        data = _padded_rows(self.dataset, self.index[lo:hi], self.mask[lo:hi])
        return dataclasses.replace(data, weights=self.weights[lo:hi],
                                   devices=tf.range(lo, hi, dtype=tf.int32))
