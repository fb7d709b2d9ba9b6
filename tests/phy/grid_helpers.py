"""Helpers shared by the PHY tests."""

import numpy as np


def padded_grid(updates, num_subcarriers, dtype=np.float64):
    """The ``[K, N, F]`` grid of the grouping rule, formed the slow way (zero padding)."""
    k, d = updates.shape
    n = -(-d // num_subcarriers)
    padded = np.zeros((k, n * num_subcarriers), dtype)
    padded[:, :d] = updates
    return padded.reshape(k, n, num_subcarriers)
