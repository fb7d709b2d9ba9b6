"""The curves of a study's figures: one combination's mean over seeds with its band, or
its seeds drawn apart (fewer than :data:`BAND_MIN_SEEDS`, or no common x), and the
style that tells up to 32 curves apart. :mod:`cosim.study.report` draws the figures."""

from __future__ import annotations

import numpy as np
import pandas as pd

from cosim.display_names import metric_range

__all__ = ["BAND_MIN_SEEDS", "comparable", "curve_style", "draw_curve", "draw_seeds"]


def comparable(key: tuple) -> tuple:
    """``key`` with a NaN axis value (an unset key) made equal to another NaN."""
    return tuple("nan" if isinstance(v, float) and v != v else v for v in key)


def draw_curve(ax, curve: pd.DataFrame, runs: pd.DataFrame | None, x_column: str, metric: str,
                index: int, label: str) -> bool:
    """One combination's mean and band (or its seeds, with fewer than
    :data:`BAND_MIN_SEEDS`); whether its seeds were drawn."""
    curve = curve.sort_values("x")
    n = int(curve["n"].max()) if "n" in curve else 0
    few = 0 < n < BAND_MIN_SEEDS and runs is not None
    label += f" (n = {n}{': seeds' if few else ''})" if n else ""
    (line,) = ax.plot(curve["x"], curve["mean"], **curve_style(index), label=label)
    if few:
        draw_seeds(ax, runs, x_column, metric, {"color": line.get_color(),
                                                 "linestyle": line.get_linestyle()})
    else:
        low, high = metric_range(metric)
        ax.fill_between(curve["x"], curve["ci95_low"].clip(low, high),
                        curve["ci95_high"].clip(low, high), alpha=0.2,
                        color=line.get_color(), linewidth=0)
    return few


def draw_seeds(ax, runs: pd.DataFrame, x_column: str, metric: str, style: dict):
    """Each seed's curve of ``metric`` against ``x_column``, thin in ``style``; the last line."""
    line = None
    for _, run in runs.groupby("seed", sort=True):
        ok = np.isfinite(run[x_column].astype(float)) & np.isfinite(run[metric].astype(float))
        (line,) = ax.plot(run[x_column][ok], run[metric][ok], **style, linewidth=0.5, alpha=0.6,
                          gid="seed")
    return line


BAND_MIN_SEEDS = 3
"""The fewest seeds whose 95 % interval a curve figure draws as a band; with fewer (the
interval of 2 seeds reaches 12.7 standard errors either side) the seeds themselves are drawn."""


def curve_style(index: int) -> dict[str, str]:
    """Colour and line style of the ``index``-th curve: the palette's 8 colours, each time
    round with the line styles shifted by one (solid, dashed, dotted, dash-dotted), so
    that no two of up to 32 curves look alike and neighbours in the palette of similar
    hue (blue and sky blue, vermillion and orange) differ in line style too."""
    from cosim.plots.style import LINESTYLES, PALETTE

    return {"color": PALETTE[index % len(PALETTE)],
            "linestyle": LINESTYLES[(index + index // len(PALETTE)) % len(LINESTYLES)]}
