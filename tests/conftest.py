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


HEAVIEST_FIRST = (
    "tests/test_trace_bits.py", "tests/phy/test_cells.py",
    "tests/cosim/test_engine.py", "tests/cosim/test_cli_startup.py",
    "tests/phy/test_phy_conformance.py", "tests/cosim/test_display_names.py",
    "tests/cosim/test_hostile_text.py", "tests/cosim/test_scenario.py",
    "tests/cosim/test_study_cost.py", "tests/phy/test_aircomp.py", "tests/phy/test_ofdm_time.py",
    "tests/phy/test_combiner.py", "tests/phy/test_ray_traced.py", "tests/phy/test_doppler_ici.py",
    "tests/phy/test_grid_sums.py", "tests/phy/test_channel.py", "tests/phy/test_uplink.py",
    "tests/phy/test_csi.py",
    "tests/learning/test_local.py",
    "tests/cosim/test_study.py", "tests/cosim/test_study_executor.py", "tests/test_notebooks.py",
    "tests/cosim/test_privacy_trace.py", "tests/cosim/test_memory_estimate.py",
    "tests/test_benchmark_harness.py", "tests/cosim/test_run_faults.py",
    "tests/cosim/test_outputs_in_place.py", "tests/cosim/test_plots.py",
    "tests/cosim/test_participation.py", "tests/cosim/test_api.py", "tests/cosim/test_full_disk.py",
)
"""The order of the files that cost most. From a cold clone the kernels' first compile
costs about 65 CPU seconds per process that finds no disk cache (measured 2026-11-28 with
the kernels of commit f054b86: Numba's compile events summed per test). The bits guard
(``test_trace_bits.py``) must compile the learning kernels first, as the baseline's fresh
compile did: a kernel compiled by another process, the suite's in-process rounds, can
differ from it in the last bit (docs/faults.md), and the guard then has to compile again
into an empty cache, about two minutes more.

pytest-xdist's ``--dist loadfile`` hands the first file to one worker and the second to
the other, then the third and fourth the same way, and each worker takes the next file
whenever fewer than two of its own are left. So the first worker runs the guard and then
``test_engine.py`` (third), whose rounds in the worker load the kernels the guard's
subprocess has just compiled; the other worker runs, from the second file on, files that
compile none of the learning kernels, only the PHY's small ones: cells, start-up, PHY
conformance, names, text, scenarios, costs and the PHY's heavier files, about 85 CPU
seconds from a cold cache (2026-12-02), longer than the guard's first pass (78 s). Then
``test_local.py``, and the study tests, whose worker processes would each compile every
kernel without the cache (a study test's setup took 100 s so). Then the heaviest first
(CPU seconds with their subprocesses, measured 2026-11-28 at commit 9d0691b: 109, 78, 73,
56, 56, 50, 47, 35, 35, 32, 24, 22 of the suite's 912). Each worker takes a file at a time
in collection order (``--no-loadscope-reorder``), so the cheap files fill in at the end,
instead of the default order by number of tests, which left the heaviest files, with few
tests each, to the end of one worker's queue."""


def pytest_collection_modifyitems(config, items):
    """The files of :data:`HEAVIEST_FIRST` first, in its order; every file's tests keep
    their order (the notebooks run in order and share one directory)."""
    rank = {path: i for i, path in enumerate(HEAVIEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))
