"""Where TR 38.901's path-loss formulas apply (Table 7.4.1-1): the 3GPP cells' parameter
ranges, checked without TensorFlow (``cosim validate`` uses them; :mod:`phy.cells` too).

Standard library only.
"""

from __future__ import annotations

CELL_MODELS = ("umi", "uma", "rma")

MIN_DISTANCE_M = 10.0
"""Smallest admissible 2-D device-BS distance [m] (TR 38.901 Table 7.4.1-1)."""

DEFAULT_BS_HEIGHT_M = {"umi": 10.0, "uma": 25.0, "rma": 35.0}
"""TR 38.901 Table 7.4.1-1 / Section 7.2: default BS heights [m]."""

UT_HEIGHT_RANGE_M = {"umi": (1.5, 22.5), "uma": (1.5, 22.5), "rma": (1.0, 10.0)}
BS_HEIGHT_RANGE_M = {"rma": (10.0, 150.0)}
FREQUENCY_RANGE_HZ = {"umi": (0.5e9, 100e9), "uma": (0.5e9, 100e9), "rma": (0.5e9, 30e9)}
"""Applicability ranges of Table 7.4.1-1 (inclusive)."""


def check_range(name: str, value: float, low: float, high: float, model: str) -> None:
    """ValueError naming ``name`` unless ``low <= value <= high``."""
    if not low <= value <= high:
        raise ValueError(
            f"{name} must be in [{low!r}, {high!r}] for model {model!r} "
            f"(TR 38.901 Table 7.4.1-1), got {value!r}"
        )


def check_cell_parameters(model: str, *, carrier_frequency_hz: float, bs_height_m: float | None,
                          ut_height_m: float) -> float:
    """Check a cell's frequency and heights against Table 7.4.1-1; returns the BS height
    (the model's default when ``bs_height_m`` is None). Errors name the argument."""
    if model not in CELL_MODELS:
        raise ValueError(f"model must be one of {CELL_MODELS}, got {model!r}")
    check_range("carrier_frequency_hz", carrier_frequency_hz, *FREQUENCY_RANGE_HZ[model], model)
    if bs_height_m is None:
        bs_height_m = DEFAULT_BS_HEIGHT_M[model]
    check_range("ut_height_m", ut_height_m, *UT_HEIGHT_RANGE_M[model], model)
    if model in BS_HEIGHT_RANGE_M:
        check_range("bs_height_m", bs_height_m, *BS_HEIGHT_RANGE_M[model], model)
    if bs_height_m <= ut_height_m:
        raise ValueError(
            f"bs_height_m must exceed ut_height_m = {ut_height_m!r}, got {bs_height_m!r}"
        )
    return bs_height_m
