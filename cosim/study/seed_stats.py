"""The statistics over seeds of ``cosim study report`` (:mod:`cosim.study.report`,
:mod:`cosim.study.results`): the Student-t 95 % interval of a mean and the grouping of
a table by its axis values. NumPy, pandas and SciPy only."""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np
import pandas as pd

CONFIDENCE = 0.95


@functools.cache
def _t_quantile(degrees_of_freedom: int) -> float:
    """The two-sided :data:`CONFIDENCE` quantile of Student's t."""
    from scipy import stats

    return float(stats.t.ppf(0.5 + CONFIDENCE / 2, degrees_of_freedom))


def _ci(values: np.ndarray) -> tuple[int, float, float, float, float]:
    """``(n, mean, std, ci95_low, ci95_high)`` of the finite ``values`` [n] (:func:`_ci_rows`)."""
    if values.size == 0:
        return 0, np.nan, np.nan, np.nan, np.nan
    return _ci_rows(values[None, :])[0]


def _ci_rows(values: np.ndarray) -> list[tuple[int, float, float, float, float]]:
    """``(n, mean, std, ci95_low, ci95_high)`` of every row of ``values`` [G, n] (finite,
    n >= 1): the Student-t interval at :data:`CONFIDENCE`, NaN std and bounds for n = 1."""
    values = np.ascontiguousarray(values, dtype=float)
    n = values.shape[1]
    mean = values.mean(axis=1)
    if n < 2:
        return [(n, float(m), np.nan, np.nan, np.nan) for m in mean]
    with np.errstate(over="ignore", invalid="ignore"):  # values near float64's limit: an inf std
        std = values.std(axis=1, ddof=1)
        half = _t_quantile(n - 1) * std / np.sqrt(n)
    return list(zip([n] * len(mean), mean.tolist(), std.tolist(), (mean - half).tolist(),
                    (mean + half).tolist(), strict=True))



def _groups(frame: pd.DataFrame, axes: Sequence[str]) -> list[tuple[tuple, pd.DataFrame]]:
    """``(key, rows)`` per combination of the ``axes``' values, key a tuple (one group of
    everything without axes)."""
    if not axes:
        return [((), frame)]
    return [(key if isinstance(key, tuple) else (key,), rows)
            for key, rows in frame.groupby(list(axes), sort=False, dropna=False)]
