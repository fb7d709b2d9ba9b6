"""Test-wide set-up: quiet TensorFlow, headless matplotlib, and a fixed seed for every test."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")  # as the `cosim` command does
os.environ.setdefault("MPLBACKEND", "Agg")

import random

import numpy as np
import pytest

from native import tensorflow_import

tensorflow_import.install()  # TF's import-time CUDA lines filtered, as the packages filter them
import tensorflow as tf  # noqa: E402

TEST_SEED = 1234


@pytest.fixture(autouse=True)
def _seed_everything():
    """Seed Python, NumPy, TensorFlow and Sionna before every test."""
    random.seed(TEST_SEED)
    np.random.seed(TEST_SEED)  # noqa: NPY002 (legacy global state, for code that uses it)
    tf.random.set_seed(TEST_SEED)
    import sionna.phy

    sionna.phy.config.seed = TEST_SEED
    yield


@pytest.fixture
def rng() -> np.random.Generator:
    """A NumPy generator with the test seed."""
    return np.random.default_rng(TEST_SEED)
