"""Where the PHY's models apply, written once for the models and for the scenario's
validation (``cosim validate`` imports no NumPy or TensorFlow): TR 38.901's ranges of the
3GPP cells (Table 7.4.1-1; :mod:`phy.cells`) and the lags of the time-domain uplink's
discrete-time channel (:mod:`phy.ofdm_time`).

Standard library only.
"""

from __future__ import annotations

import math

L_MIN = -6
"""The first tap of the discrete-time channel: Sionna's
:func:`~sionna.phy.channel.time_lag_discrete_time_channel` default (six sinc precursors)."""
L_MAX_MARGIN = 6
"""Taps kept after the latest path delay (Sionna's default margin, the same six)."""


def first_tap_lag(cyclic_prefix_length: int) -> int:
    """``max(L_MIN, -C)``: the FFT window starts this far into the prefix, never before it."""
    return max(L_MIN, -int(cyclic_prefix_length))


def last_tap_lag(latest_delay_samples: float) -> int:
    """``ceil(latest delay) + L_MAX_MARGIN`` (at least 0): the last tap of a channel whose
    latest path (timing offset included) arrives ``latest_delay_samples`` late."""
    return max(math.ceil(latest_delay_samples) + L_MAX_MARGIN, 0)


def latest_kept_delay_samples(num_subcarriers: int, cyclic_prefix_length: int) -> int:
    """``F + C - 1 - L_MAX_MARGIN``: a later path would put taps past one OFDM symbol with its
    prefix, so the time-domain channel leaves it out."""
    return int(num_subcarriers) + int(cyclic_prefix_length) - 1 - L_MAX_MARGIN

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


DB_LIMIT = 300.0
"""Every dB / dBm key lies in [-300, 300]: its linear value (1e-33 to 1e27 W for dBm)
is then a normal float32, as the PHY uses it (1e308 dBm overflowed ``dbm_to_w``)."""
