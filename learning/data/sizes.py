"""The local dataset sizes |D_k| (Section VI, Table I), NumPy only.

Drawn first by :func:`learning.data.partition.partition` from its generator, so that
``cosim validate`` can know the largest data share pi_max = max |D_k| / |D| of a run
(its privacy projection, ``cosim.privacy.project``) without TensorFlow or the dataset.
"""

from __future__ import annotations

import numpy as np

SIZE_DISTRIBUTIONS = ("poisson", "shifted_poisson")


def sample_sizes(
    num_devices: int, mean: float, distribution: str, rng: np.random.Generator
) -> np.ndarray:
    """Local dataset sizes |D_k|, int64 [K].

    ``"poisson"``: Poisson(mean), may be 0. ``"shifted_poisson"``: 1 + Poisson(mean - 1),
    at least 1, same mean (needs mean >= 1).
    """
    if distribution == "poisson":
        if not mean > 0:
            raise ValueError(f"mean_samples_per_device must be > 0, got {mean}")
        return rng.poisson(mean, num_devices).astype(np.int64)
    if distribution == "shifted_poisson":
        if not mean >= 1:
            raise ValueError(
                f"mean_samples_per_device must be >= 1 for shifted_poisson, got {mean}"
            )
        return 1 + rng.poisson(mean - 1.0, num_devices).astype(np.int64)
    raise ValueError(f"size_distribution must be one of {SIZE_DISTRIBUTIONS}, got {distribution!r}")
