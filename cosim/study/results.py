"""The table of results of ``cosim study report``: per point (axis-value combination),
the final and the best value of each metric, mean and 95 % interval over its seeds, n
stated (``DIR/results.csv`` wide, ``DIR/results.md`` as printed). No TensorFlow."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from cosim.printable import printable
from cosim.study.file import _value_text
from cosim.study.seed_stats import _ci, _groups

__all__ = ["RESULT_METRICS", "results", "results_markdown"]

RESULT_METRICS = (("test_accuracy", "max"), ("ece", "min"), ("posterior_mean_accuracy", "max"))
"""The metrics of :func:`results` and which end of each is its best (a posterior-mean
column only when some run has a posterior)."""


def results(table: pd.DataFrame, axes: Sequence[str]) -> pd.DataFrame:
    """One row per axis-value combination (the study's order): the axes, ``n`` (seeds),
    ``last_round`` (the latest last evaluation over its seeds) and, for each metric of
    :data:`RESULT_METRICS` some run holds, ``<metric>_final_*`` (each run's last
    evaluation) and ``<metric>_best_*`` (its best evaluation: the highest accuracy, the
    lowest ECE) as ``mean``, ``ci95_low`` and ``ci95_high`` over the seeds (the Student-t
    interval of :func:`summarize_over_seeds`, NaN for n = 1). Runs with no evaluation are
    left out."""
    evaluated = table[np.isfinite(table["test_accuracy"].astype(float))] \
        if "test_accuracy" in table else table.iloc[:0]
    rows = []
    for key, group in _groups(evaluated, axes):
        if group.empty:  # a study without axes whose runs have no evaluation yet
            continue
        row: dict = {**dict(zip(axes, key, strict=True)), "n": int(group["seed"].nunique()),
                     "last_round": int(group["round"].max())}
        for metric, best in RESULT_METRICS:
            if metric not in group or not np.isfinite(group[metric].astype(float)).any():
                continue
            finite = group[np.isfinite(group[metric].astype(float))]
            per_run = finite.groupby("run", sort=False)
            last = finite.loc[per_run["round"].idxmax(), metric].to_numpy(dtype=float)
            extreme = per_run[metric].agg(best).to_numpy(dtype=float)
            for what, values in (("final", last), ("best", extreme)):
                _, mean, _, low, high = _ci(values)
                row.update({f"{metric}_{what}_mean": mean, f"{metric}_{what}_ci95_low": low,
                            f"{metric}_{what}_ci95_high": high})
        rows.append(row)
    return pd.DataFrame(rows)


def _interval(mean: float, low: float, high: float) -> str:
    """``0.8541 ± 0.0032`` (the CI's half-width), ``0.8541`` alone without an interval."""
    if not np.isfinite(mean):
        return "-"
    return f"{mean:.4f} ± {(high - low) / 2:.4f}" if np.isfinite(low) else f"{mean:.4f}"


def results_markdown(frame: pd.DataFrame, axes: Sequence[str]) -> str:
    """:func:`results` as a Markdown table padded to line up on a terminal: the axes (raw
    values, as in run names), ``n``, the last round and every ``final`` / ``best`` pair
    as ``mean ± half-width of the 95 % CI``; a line above says what the cells are."""
    metrics = [m for m, _ in RESULT_METRICS if f"{m}_final_mean" in frame]
    head = [*axes, "n", "last round"]
    for metric in metrics:
        head += [f"{metric} final", f"{metric} best"]
    body = []
    for _, row in frame.iterrows():
        cells = [printable(_value_text(row[a])) for a in axes]
        cells += [str(int(row["n"])), str(int(row["last_round"]))]
        for metric in metrics:
            for what in ("final", "best"):
                cells.append(_interval(*(row[f"{metric}_{what}_{part}"]
                                         for part in ("mean", "ci95_low", "ci95_high"))))
        body.append(cells)
    widths = [max(len(c) for c in column) for column in zip(head, *body, strict=True)]

    def line(cells):
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    rule = "|" + "|".join("-" * (w + 2) if i < len(axes) else "-" * (w + 1) + ":"
                          for i, w in enumerate(widths)) + "|"
    note = ("Per point: mean ± half-width of the 95 % confidence interval over its n seeds "
            "(Student t; the mean alone for n = 1); final: each run's last evaluation, best: "
            "its highest accuracy, its lowest ECE.")
    return "\n".join([note, "", line(head), rule, *map(line, body)]) + "\n"
