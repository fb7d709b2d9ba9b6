"""The one tolerance policy of the conformance suites (tests/learning/test_conformance.py,
tests/phy/test_phy_conformance.py): a fast path conforms to the reference definition when,
elementwise,

    |got - want| <= rtol |want| + atol max|want|,

with (rtol, atol) = (1e-4, 5e-5) for arrays and (1e-5, 1e-6) for objectives and other
scalars; counts are equal. Why these bounds, and what each suite measured against them,
is in the suites' docstrings.
"""

from __future__ import annotations

import numpy as np

TOLERANCE = {"array": (1e-4, 5e-5), "objective": (1e-5, 1e-6)}
"""(rtol, atol) of :func:`assert_conforms` per kind of value."""


def assert_conforms(got, want, kind: str, what: str = ""):
    """The tolerance policy: ``|got - want| <= rtol |want| + atol max|want|``
    elementwise, ``(rtol, atol) = TOLERANCE[kind]``; equal shapes, a finite ``want``."""
    rtol, atol = TOLERANCE[kind]
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    assert np.isfinite(want).all(), f"{what}: the reference is not finite"
    scale = np.abs(want).max()
    err = np.abs(got - want)
    bound = rtol * np.abs(want) + atol * scale
    bad = ~(err <= bound)  # NaN in got fails too
    if bad.any():
        worst = np.unravel_index(np.argmax(np.where(bad, err / np.maximum(bound, 1e-300), 0)), err.shape)
        raise AssertionError(
            f"{what}: {bad.sum()} of {bad.size} entries off by more than {rtol} |want| + {atol} "
            f"max|want| (max|want| = {scale:.4g}); worst at {worst}: got {got[worst]:.8g}, "
            f"want {want[worst]:.8g}"
        )


CHAIN_ARRAYS = ("estimate", "local_distortion", "tx_power_mean_w", "tx_power_max_w")
CHAIN_SCALARS = ("delta_bar", "aggregated_distortion", "noise_power")


def assert_chain_conforms(got, want, case: str, *, rows_bind: bool):
    """The AirComp chain's fast result ``got`` against the reference's ``want``
    (:class:`phy.aircomp_parts.AirCompResult`): its arrays and scalars by the policy, the
    attenuated fractions equal; ``rows_bind``: some row met the budget (the kernels ran)."""
    for name in CHAIN_ARRAYS:
        assert_conforms(getattr(got, name), getattr(want, name), "array", f"{name} ({case})")
    for name in CHAIN_SCALARS:
        assert_conforms(getattr(got, name), getattr(want, name), "objective", f"{name} ({case})")
    np.testing.assert_array_equal(got.attenuated_fraction, want.attenuated_fraction)
    if rows_bind:
        assert float(np.max(np.asarray(want.attenuated_fraction))) > 0.0
