"""native/sincos.py: cos and sin without a call, within two ulp of libm's, and their
float32 rounding equal to libm's bit for bit."""

import numpy as np
import pytest
from numba import njit

from native.sincos import REDUCED_UP_TO_RAD, cos_sin, rounded_cos_sin


@njit(cache=False)
def _cos_sin_of(x, cosine, sine):
    for i in range(x.size):
        cosine[i], sine[i] = cos_sin(x[i])


@njit(cache=False)
def _rounded_of(x, cosine, sine):
    rounded_cos_sin(x, cosine, sine, np.empty(x.size, np.bool_))


def _phases(rng, scale, size=200_000):
    """Uniform phases within +-scale, half of them near multiples of pi / 2 (where the
    reduction cancels)."""
    x = rng.uniform(-scale, scale, size)
    near = np.round(x / (np.pi / 2)) * (np.pi / 2) + rng.normal(0.0, 1e-9, size)
    return np.where(np.arange(size) % 2 == 0, x, near)


@pytest.mark.parametrize("scale", [1e-6, 1.0, 1e3, 3e4, REDUCED_UP_TO_RAD])
def test_cos_and_sin_are_within_two_ulp_of_libms(scale):
    """Within two ulp, or near a zero within ``|x| 1e-31`` (the reduction's error)."""
    x = _phases(np.random.default_rng(1), scale)
    cosine, sine = np.empty_like(x), np.empty_like(x)
    _cos_sin_of(x, cosine, sine)
    for ours, libm in ((cosine, np.cos(x)), (sine, np.sin(x))):
        ulp = np.spacing(np.maximum(np.abs(libm), np.abs(ours)))
        assert np.all(np.abs(ours - libm) <= 2 * ulp + np.abs(x) * 1e-31)


def test_the_float32_rounding_is_libms_bit_for_bit_also_where_it_is_close():
    """Uniform phases at every scale, beyond the reduction's range too, and phases whose
    cosine lies within a few float64 ulp of a float32 rounding boundary: there a bare
    rounding of :func:`cos_sin` differs from libm's (checked, so the margin is needed)."""
    rng = np.random.default_rng(2)
    boundaries = np.float32(rng.uniform(0.05, 0.95, 100_000))
    midpoints = (boundaries.astype(np.float64) + np.nextafter(boundaries, np.float32(2.0))) / 2.0
    close = np.arccos(midpoints) + 2.0 * np.pi * rng.integers(0, 1000, midpoints.size)
    x = np.concatenate([close] + [_phases(rng, scale) for scale in (1e-8, 1.0, 3e4, 1e6, 1e8)])
    cosine, sine = np.empty(x.size, np.float32), np.empty(x.size, np.float32)
    _rounded_of(x, cosine, sine)
    np.testing.assert_array_equal(cosine.view(np.int32), np.cos(x).astype(np.float32).view(np.int32))
    np.testing.assert_array_equal(sine.view(np.int32), np.sin(x).astype(np.float32).view(np.int32))
    bare_cosine, bare_sine = np.empty_like(x), np.empty_like(x)
    _cos_sin_of(close, bare_cosine[:close.size], bare_sine[:close.size])
    assert np.any(bare_cosine[:close.size].astype(np.float32) != np.cos(close).astype(np.float32))
