"""What a scenario's dataset takes in memory: held through the run, and while it loads.

By arithmetic on the arrays' shapes and dtypes (``learning/data/datasets.py``,
``learning/data/partition.py``): nothing is loaded or drawn. Standard library only.

- :func:`held_bytes`: the training and test sets, float32 images and int32 labels, held
  for the whole run (the loaders cache them in the process);
- :func:`local_data_bytes`: the devices' local datasets on top of them: the padded
  ``[K, B, ...]`` inputs of the one-call round (:func:`learning.data.partition.to_device_data`),
  or the ``[K, B]`` indices and mask of a round that streams its devices
  (:class:`learning.data.partition.IndexedDeviceData`), with B from
  :func:`largest_local_dataset`;
- :func:`load_peak_bytes`: the loader's own peak, its float64 or uint8 temporaries beside
  the float32 result (synthetic data: 16 bytes per training value, measured).
"""

from __future__ import annotations

import math

DATASET_SIZES = {"mnist": (60_000, 10_000), "cifar100": (50_000, 10_000)}
"""Training and test samples of the datasets on disk (``data.dataset``); synthetic data
has ``data.synthetic_train_size`` and ``data.synthetic_test_size``."""

MISS_PROBABILITY = 0.01
""":func:`largest_local_dataset` is exceeded by some device with at most this probability."""


def split_sizes(data) -> tuple[int, int]:
    """``(training samples, test samples)`` of ``data`` (the scenario's ``[data]`` table)."""
    if data.dataset in DATASET_SIZES:
        return DATASET_SIZES[data.dataset]
    return int(data.synthetic_train_size), int(data.synthetic_test_size)


def _values_per_sample(data) -> int:
    """p, the pixels (values) of one input: H W C."""
    return math.prod(int(s) for s in data.input_shape)


def held_bytes(data) -> int:
    """``4 (p + 1) (n_train + n_test)``: the float32 images [n, p] and int32 labels [n] of
    both splits."""
    train, test = split_sizes(data)
    return 4 * (_values_per_sample(data) + 1) * (train + test)


def load_peak_bytes(data) -> int:
    """The loader's peak, its temporaries with what it has made so far (bytes), n_train and
    n_test samples of p values:

    - synthetic: ``max(16 n_train p, 12 n_train p + 8 n_test p)``: a split is its class
      prototypes plus float64 noise (NumPy reuses the temporaries of the sum, so two
      [n, p] float64 arrays), clipped into a new one; then the float64 training set
      beside its float32 copy. Measured: 1,471,896 KiB for n_train = 120,000 and
      p = 784, where this gives 1,470,000 KiB (``benchmarks/README.md``, 2026-12-02);
    - MNIST: ``13 n_train p + 9 n_test p``: the uint8 arrays, their float64 quotients by
      255, and the float32 training set;
    - CIFAR-100: ``8 (n_train + n_test) p``: each split's float32 images in the
      transposed order beside their C-ordered copy.
    """
    train, test = split_sizes(data)
    p = _values_per_sample(data)
    if data.dataset == "mnist":
        return (13 * train + 9 * test) * p
    if data.dataset == "cifar100":
        return 8 * (train + test) * p
    return max(16 * train * p, 12 * train * p + 8 * test * p)


def largest_local_dataset(data, num_devices: int) -> int:
    """B, the padded length of the devices' local datasets (``max(1, max_k |D_k|)``): the
    smallest b that K draws of ``data.size_distribution`` (Poisson(m), or 1 +
    Poisson(m - 1)) all stay within with probability at least 1 - :data:`MISS_PROBABILITY`
    (K P(|D_k| > b) <= that; a bound, not the drawn partition)."""
    shift = 1 if data.size_distribution == "shifted_poisson" else 0
    lam = float(data.mean_samples_per_device) - shift
    if lam <= 0.0:
        return max(1, shift)
    allowed = MISS_PROBABILITY / max(int(num_devices), 1)
    tail, j = 1.0, 0
    while True:  # tail = P(Poisson(lam) > j)
        tail -= math.exp(-lam + j * math.log(lam) - math.lgamma(j + 1))
        if tail <= allowed:
            return max(1, shift + j)
        j += 1


def local_data_bytes(data, num_devices: int, streamed: bool) -> int:
    """The devices' local datasets beside the training set, K devices of B slots
    (:func:`largest_local_dataset`): ``9 K B`` when the round streams its devices (the
    int64 index and bool mask [K, B]), else ``4 K B (p + 2)`` (the padded float32 inputs
    [K, B, p], int32 labels and float32 mask [K, B])."""
    k = int(num_devices)
    b = largest_local_dataset(data, k)
    return 9 * k * b if streamed else 4 * k * b * (_values_per_sample(data) + 2)


def memory_terms(data, num_devices: int, streamed: bool) -> dict[str, int]:
    """``{"dataset": held, "dataset load": peak}`` bytes: :func:`held_bytes` plus
    :func:`local_data_bytes`, and :func:`load_peak_bytes`."""
    return {"dataset": held_bytes(data) + local_data_bytes(data, num_devices, streamed),
            "dataset load": load_peak_bytes(data)}
