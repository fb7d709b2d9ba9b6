"""``cos x`` and ``sin x`` in float64 without a call, so that a loop over many phases vectorises.

glibc's ``cos`` and ``sin`` are calls that LLVM does not vectorise (about 20 ns per pair
here at phases of 1e4 rad); :func:`cos_sin` is the same computation written out, within
two units in the last place of them (measured) for ``|x| <=`` :data:`REDUCED_UP_TO_RAD` (near a zero of
either, within ``|x| 1e-31`` absolute: the reduction carries pi / 2 to 119 bits), about 2 ns
per pair in a loop of them (2026-12-03, one core):

* **Reduction** (Cody and Waite): ``q = round(x 2 / pi)``, ``r = x - q pi / 2`` with pi / 2
  split into three parts, the first two of 33 significant bits so that ``q`` times
  either is exact while ``|q| < 2^20`` (FDLIBM's ``__ieee754_rem_pio2``, its medium
  case). ``q`` is rounded by adding and subtracting 1.5 2^52, not by a call.
* **Kernels** on ``|r| <= pi / 4``: FDLIBM's minimax polynomials of ``__kernel_sin`` and
  ``__kernel_cos`` (degrees 13 and 14, error below 2^-58), without their tail terms.
* **Quadrant**: ``q mod 4`` swaps and negates them, by selects.

Beyond :data:`REDUCED_UP_TO_RAD` the reduction loses bits; a caller takes ``math.cos`` and
``math.sin`` there (:func:`needs_libm`).
"""

from __future__ import annotations

import numpy as np
from numba import njit

REDUCED_UP_TO_RAD = 1.6e6
"""``|x|`` up to which :func:`cos_sin` is within two ulp of libm's: ``2^20 pi / 2`` is
1.647e6 (the largest ``q`` whose products with the 33-bit parts of pi / 2 are exact)."""

_TWO_OVER_PI = 6.36619772367581382433e-01
_PIO2_1 = 1.57079632673412561417e+00  # the first 33 bits of pi / 2
_PIO2_2 = 6.07710050630396597660e-11  # the next 33 bits
_PIO2_3 = 2.02226624871116645580e-21  # the rest, to 53 bits
_ROUNDING_SHIFT = 6755399441055744.0  # 1.5 2^52: x + it - it is x rounded to an integer
_S1, _S2, _S3, _S4, _S5, _S6 = (
    -1.66666666666666324348e-01, 8.33333333332248946124e-03, -1.98412698298579493134e-04,
    2.75573137070700676789e-06, -2.50507602534068634195e-08, 1.58969099521155010221e-10)
_C1, _C2, _C3, _C4, _C5, _C6 = (
    4.16666666666666019037e-02, -1.38888888888741095749e-03, 2.48015872894767294178e-05,
    -2.75573143513906633035e-07, 2.08757232129817482790e-09, -1.13596475577881948265e-11)


@njit(inline="always")
def cos_sin(x):
    """``(cos x, sin x)`` of a float64 ``x`` with ``|x| <=`` :data:`REDUCED_UP_TO_RAD`
    (module docstring); no call, so a loop of them vectorises."""
    q = (x * _TWO_OVER_PI + _ROUNDING_SHIFT) - _ROUNDING_SHIFT
    quadrant = np.int64(q)
    r = ((x - q * _PIO2_1) - q * _PIO2_2) - q * _PIO2_3
    z = r * r
    s = r + r * z * (_S1 + z * (_S2 + z * (_S3 + z * (_S4 + z * (_S5 + z * _S6)))))
    c = 1.0 - 0.5 * z + z * z * (_C1 + z * (_C2 + z * (_C3 + z * (_C4 + z * (_C5 + z * _C6)))))
    odd = (quadrant & 1) == 1
    cosine = s if odd else c
    sine = c if odd else s
    cosine = -cosine if ((quadrant + 1) & 2) == 2 else cosine
    sine = -sine if (quadrant & 2) == 2 else sine
    return cosine, sine


@njit(inline="always")
def needs_libm(x) -> bool:
    """Whether ``x`` lies beyond :func:`cos_sin`'s range (or is not finite)."""
    return not abs(x) <= REDUCED_UP_TO_RAD


_MARGIN_RELATIVE = 2.0 ** -48
"""16 ulp of a value: more than :func:`cos_sin`'s and libm's errors together."""
_MARGIN_ABSOLUTE = 1e-22
"""Near a zero of cos or sin: the reduction's absolute error is about ``|x| 1e-31`` (pi / 2
is carried to 119 bits), 1.6e-25 at :data:`REDUCED_UP_TO_RAD`."""


@njit(inline="always")
def rounded_cos_sin(phase, cosine, sine, unsure):
    """``cosine[i], sine[i] = float32(cos phase[i]), float32(sin phase[i])`` with libm's
    float64 values rounded, bit for bit: :func:`cos_sin`'s value is rounded where a margin
    wider than both errors around it rounds alike (all but about one in 10^7 values),
    libm's is taken elsewhere (``unsure`` [same size] bool, work space)."""
    for i in range(phase.size):  # vectorised
        x = phase[i]
        c, s = cos_sin(x)
        c_margin = abs(c) * _MARGIN_RELATIVE + _MARGIN_ABSOLUTE
        s_margin = abs(s) * _MARGIN_RELATIVE + _MARGIN_ABSOLUTE
        cosine[i], sine[i] = np.float32(c), np.float32(s)
        unsure[i] = (needs_libm(x) | (np.float32(c - c_margin) != np.float32(c + c_margin))
                     | (np.float32(s - s_margin) != np.float32(s + s_margin)))
    for i in range(phase.size):
        if unsure[i]:
            cosine[i], sine[i] = np.float32(np.cos(phase[i])), np.float32(np.sin(phase[i]))
