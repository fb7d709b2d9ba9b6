"""Decibel conversions: dBm <-> W and dB <-> linear ratios.

The project keeps linear SI values inside (``tx_power_w``, ``noise_power_w``) and dB /
dBm only at the scenario edge (``tx_power_dbm``, ``nmse_db``); these four functions
are the one place the conversion is written.

Every function takes a Python or NumPy scalar, or a NumPy array (elementwise), and
returns the same kind (a float for a scalar). Imports neither NumPy nor TensorFlow at
import time (``cosim.scenario`` uses it, and ``cosim validate`` starts without them).
"""

from __future__ import annotations

import math
from numbers import Real
from typing import Any

__all__ = ["db_to_linear", "dbm_to_w", "linear_to_db", "w_to_dbm"]


def db_to_linear(value_db: Any) -> Any:
    """A power ratio in dB (SNR, NMSE, gain) -> linear: ``10 ** (value_db / 10)``, same
    shape as ``value_db``."""
    return 10.0 ** (value_db / 10.0)


def linear_to_db(value: Any) -> Any:
    """A linear power ratio -> dB: ``10 log10(value)``, same shape as ``value``.
    ValueError naming ``value`` for a value that is not > 0."""
    return 10.0 * _log10(value, "value")


def dbm_to_w(power_dbm: Any) -> Any:
    """Power in dBm -> watts (30 dBm = 1 W): ``10 ** ((power_dbm - 30) / 10)``, same
    shape as ``power_dbm``."""
    return db_to_linear(power_dbm - 30.0)


def w_to_dbm(power_w: Any) -> Any:
    """Power in watts -> dBm: ``10 log10(power_w) + 30``, same shape as ``power_w``.
    ValueError naming ``power_w`` for a value that is not > 0."""
    return 10.0 * _log10(power_w, "power_w") + 30.0


def _log10(value: Any, name: str) -> Any:
    if isinstance(value, Real):
        if not value > 0:  # also refuses nan
            raise ValueError(f"{name} must be > 0, got {value!r}")
        return math.log10(value)
    import numpy as np  # arrays only: the module itself stays NumPy-free at import

    array = np.asarray(value, dtype=np.float64)
    if not np.all(array > 0):
        raise ValueError(f"{name} must be > 0 everywhere, got {array[~(array > 0)].ravel()[:3]!r}")
    return np.log10(array)
