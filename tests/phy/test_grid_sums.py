"""phy.grid_sums: the fast path's one pass over the updates, against the padded grid."""

import numpy as np
from grid_helpers import padded_grid

from phy.grid_sums import gather_rows, grid_sums


def test_sums_and_linear_part_equal_the_grid_formulas():
    rng = np.random.default_rng(0)
    k, d, f = 7, 1000, 64  # 16 symbols, the last one padded
    updates = rng.standard_normal((k, d)).astype(np.float32)
    scale, mask, coeff = (rng.uniform(0.0, 2.0, (k, f)).astype(np.float32) for _ in range(3))
    mask = (mask > 0.5).astype(np.float32)
    sums, linear = grid_sums(updates, scale, mask, coeff)
    grid = padded_grid(updates, f)
    square = grid**2
    want = np.stack([np.einsum("knf,kf->kn", square, scale), square.sum(-1),
                     np.einsum("knf,kf->kn", square, 1.0 - mask)], -1)
    assert sums.shape == (k, 16, 3) and linear.shape == (16, f)
    np.testing.assert_allclose(sums, want, rtol=1e-5)
    np.testing.assert_allclose(linear, np.einsum("knf,kf->nf", grid, coeff), rtol=1e-4, atol=1e-5)
    assert np.all(linear[-1, d - 15 * f :] == 0.0)


def test_off_energy_is_exactly_zero_with_every_subcarrier_on():
    # the regular rows' distortion: summed directly, not as a difference of two sums
    rng = np.random.default_rng(2)
    updates = (rng.standard_normal((5, 3000)) * 1e3).astype(np.float32)
    ones = np.ones((5, 64), np.float32)
    sums, _ = grid_sums(updates, ones, ones, ones)
    assert np.all(sums[..., 2] == 0.0)


def test_gather_rows_takes_grid_rows_with_zero_padding():
    rng = np.random.default_rng(1)
    updates = rng.standard_normal((3, 100)).astype(np.float32)
    grid = padded_grid(updates, 32)
    devices, symbols = np.array([0, 2, 1, 2]), np.array([3, 0, 1, 3])
    rows = gather_rows(updates, devices, symbols, 32)
    np.testing.assert_array_equal(rows, grid[devices, symbols].astype(np.float32))
    assert gather_rows(updates, np.array([], np.int64), np.array([], np.int64), 32).shape == (0, 32)


_DIGEST = """
import hashlib, numpy as np
from phy.grid_sums import grid_sums
rng = np.random.default_rng(0)
updates = rng.standard_normal((7, 1000)).astype(np.float32)  # 15 symbols of 64, a 40-value tail
scale, mask, coeff = (rng.random((7, 64)).astype(np.float32) for _ in range(3))
print(hashlib.sha256(b"".join(a.tobytes() for a in grid_sums(updates, scale, mask, coeff))).hexdigest())
"""


def test_compiled_and_cached_kernels_give_the_same_bits(tmp_path):
    """The kernel compiled in a process (empty cache) and the same kernel loaded from
    Numba's cache (a second process) give the same sums: with ``reassoc`` the vectoriser
    once split the three row sums differently in the two builds (one float32 ulp)."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba_cache")}
    digests = [subprocess.run([sys.executable, "-c", _DIGEST], env=env, capture_output=True,
                              text=True, check=True, timeout=300).stdout.strip() for _ in range(2)]
    assert any((tmp_path / "numba_cache").rglob("*grid_sums*.nbc")), "the second run loaded a cache"
    assert digests[0] == digests[1]


def test_a_coefficient_per_symbol_weighs_each_symbol_by_its_own():
    rng = np.random.default_rng(3)
    k, d, f = 5, 1000, 64  # 16 symbols
    updates = rng.standard_normal((k, d)).astype(np.float32)
    scale, mask = (rng.uniform(0.0, 2.0, (k, f)).astype(np.float32) for _ in range(2))
    coeff = rng.uniform(-1.0, 1.0, (k, 16, f)).astype(np.float32)
    sums, linear = grid_sums(updates, scale, mask, coeff)
    np.testing.assert_allclose(linear, np.einsum("knf,knf->nf", padded_grid(updates, f), coeff),
                               rtol=1e-4, atol=1e-5)
    # equal coefficients per symbol: the [K, F] form's bits
    same = grid_sums(updates, scale, mask, np.repeat(coeff[:, :1], 16, axis=1))
    for got, want in zip(same, grid_sums(updates, scale, mask, coeff[:, 0]), strict=True):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(sums, same[0])
