"""``cosim study report DIR``: a study's traces as one tidy table, a seed summary, figures.

No TensorFlow and no Ray here (pandas, SciPy, h5py, matplotlib with Agg).

- :func:`study_table`: one row per (run, round) of every run that has a trace, with
  columns ``run, seed, <each axis key>, round, <every scalar /rounds column>``
  (``cumulative_uplink_symbols``, ``cumulative_channel_uses``, ``test_accuracy``, ``ece``,
  ``posterior_mean_accuracy``, ...; NaN where a round was not evaluated, and the
  posterior-mean columns NaN for runs without a posterior). Only committed rounds.
- :func:`stability`: per run, how its evaluated accuracy behaves after its best
  (:data:`NEAR_PEAK`): ``peak``, ``peak_round``, ``final``, ``final_round``,
  ``post_peak_drop = peak - final`` and ``near_peak_share``, the share of the evaluations
  from the first one within :data:`NEAR_PEAK` of the peak to the last that stay within it
  (1: the run keeps what it attained; the paper's "maintains its attained accuracy"
  against the SAM methods' "post-peak degradation"); :func:`stability_over_seeds` gives
  each measure's mean and 95 % CI per axis-value combination.
- :func:`summarize_over_seeds`: per axis-value combination, per x and per metric: the
  number of seeds ``n``, ``mean``, ``std`` (ddof 1) and the 95 % Student-t confidence
  interval of the mean, ``mean -/+ t_{0.975, n-1} * std / sqrt(n)`` (NaN for n < 2).
  ``x_kind = "round"`` groups by round (seeds whose metric is NaN there are left out).
  ``x_kind = "uplink"`` / ``"uplink_seconds"`` / ``"uplink_energy"`` / ``"total"``: each
  seed's finite (x, metric) points, with x its column of :data:`X_COLUMNS`
  (``cumulative_uplink_symbols``, ``cumulative_uplink_seconds``,
  ``cumulative_uplink_energy_j``, ``cumulative_channel_uses``), are linearly
  interpolated onto one grid per combination: ``GRID_POINTS`` evenly spaced values from
  the largest first x to the smallest last x over the seeds (the range every seed
  covers: no extrapolation).
- :func:`run_costs`: per run, what it used against what ``cosim validate`` estimates for
  the same rounds (:func:`cost_summary` says it in one line).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from cosim.atomic_write import atomic_output, check_output_path
from cosim.display_names import axis_label, metric_label, value_label, value_text
from cosim.plots.style import RINGS, legend_below, legend_outside, spans_decades
from cosim.printable import printable
from cosim.scenario import ScenarioError, migrate_table, parse_scenario
from cosim.study.cost import format_core_hours, run_cost
from cosim.study.curves import BAND_MIN_SEEDS, comparable, curve_style, draw_curve, draw_seeds
from cosim.study.file import RUNS_DIR, STUDY_COPY, Study, StudyError, load_study, unswept
from cosim.study.options import read_options
from cosim.study.results import results, results_markdown
from cosim.study.seed_stats import CONFIDENCE, _ci, _ci_rows, _groups  # noqa: F401 (tests, CONFIDENCE)
from cosim.trace import TraceError, read_trace
from cosim.trace.read import quiet_numerics

__all__ = ["GRID_POINTS", "NEAR_PEAK", "X_COLUMNS", "cost_summary", "pooled_reliability", "report",
           "run_costs", "stability", "stability_over_seeds", "study_table", "summarize_over_seeds"]

GRID_POINTS = 50
"""Points of the common grid of ``x_kind = uplink | uplink_seconds | uplink_energy | total``."""
X_COLUMNS = {"uplink": "cumulative_uplink_symbols", "uplink_seconds": "cumulative_uplink_seconds",
             "uplink_energy": "cumulative_uplink_energy_j", "total": "cumulative_channel_uses"}
"""The trace column behind each running-total x (``--x``)."""
X_LABELS = {"round": "round", "uplink": "cumulative uplink OFDM symbols",
            "uplink_seconds": "cumulative uplink air time (s)",
            "uplink_energy": "cumulative device transmit energy (J)",
            "total": "cumulative channel uses (OFDM symbols, uplink + downlink)"}
"""The x-axis label of each ``x_kind``."""
NEAR_PEAK = 0.01
"""Relative tolerance of :func:`stability`: an evaluation is near the peak when its
accuracy is at least ``(1 - NEAR_PEAK) * peak``."""
STABILITY_MEASURES = ("peak", "final", "post_peak_drop", "near_peak_share", "peak_round")
FIGURE_METRICS = ("test_accuracy", "ece", "posterior_mean_accuracy", "posterior_mean_ece")
"""The metrics :func:`report` draws (a posterior-mean figure only when some run has a
posterior; :func:`summarize_over_seeds` summarises every numeric column)."""


def _runs(out_dir: str | Path) -> tuple[list[str], list[tuple]]:
    """The study's axis keys and ``(point, trace)`` of every run that has a trace (runs
    not started, or failed before writing, are left out); each trace read once.

    Raises
    ------
    StudyError
        ``out_dir`` is not a study directory, or no run has a readable trace (a damaged
        trace is named on stderr and left out).
    """
    out = Path(out_dir)
    copy = out / STUDY_COPY
    if not copy.is_file():
        raise StudyError([f"{copy}: not found (is {out} the --out of `cosim study run`?)"],
                         str(out))
    study = _axes_only(copy)
    recorded = read_options(out)  # --seeds, --only, ... of `cosim study run`
    if recorded is not None:
        study = recorded.apply(study)
    runs = []
    for point in study.points(out, validate=False):
        path = out / RUNS_DIR / f"{point.name}.h5"
        if not path.is_file():
            continue
        try:
            runs.append((point, read_trace(path)))
        except TraceError as error:  # damaged: reported, the others go on
            print(f"cosim study report: run {point.name} left out: {error}", file=sys.stderr)
    if not runs:
        raise StudyError([f"{out / RUNS_DIR}: no traces yet"], str(out))
    return list(study.axes), runs


def study_table(out_dir: str | Path) -> tuple[pd.DataFrame, list[str]]:
    """The tidy per-round table of the study in ``out_dir`` and its axis keys (runs as
    :func:`_runs` finds them)."""
    axes, runs = _runs(out_dir)
    return _table(axes, runs), axes


def _table(axes: Sequence[str], runs: Sequence[tuple]) -> pd.DataFrame:
    frames = []
    for point, trace in runs:
        done = trace.completed_rounds
        columns = {k: np.asarray(v) for k, v in trace.rounds.items() if np.ndim(v) == 1}
        columns.update(_ring_columns(trace))
        frame = pd.DataFrame(columns)
        if "round" not in frame:
            frame["round"] = np.arange(done)
        frame["round"] = frame["round"].astype(np.int64)
        lead = pd.DataFrame({"run": [point.name] * done, "seed": [point.seed] * done,
                             **{k: [_hashable(point.axis_values[k])] * done for k in axes}})
        rest = frame[["round", *sorted(c for c in frame if c != "round")]]
        frames.append(pd.concat([lead, rest.reset_index(drop=True)], axis=1))
    return pd.concat(frames, ignore_index=True)


def run_costs(out_dir: str | Path) -> pd.DataFrame:
    """Per run with a trace (:func:`_runs`): ``run``, ``seed``, the axes,
    ``completed_rounds``, ``evaluations`` (committed rounds with a test accuracy),
    ``estimated_core_s`` (:func:`cosim.study.cost.run_cost` of the trace's own scenario,
    for those rounds and evaluations and its fixed cost; NaN where the cost table has no
    entry), ``cpu_core_s`` (the sum of the trace's ``cpu_s``: the CPU time of its
    processes' rounds, every thread; NaN when some round was written before the column
    existed) and ``wall_s`` (the sum of ``wall_s``)."""
    axes, runs = _runs(out_dir)
    return _costs(axes, runs)


def _estimate(trace, evaluations: int) -> float:
    try:
        scenario = parse_scenario(migrate_table(trace.scenario), "the trace's scenario")
    except ScenarioError:
        return math.nan
    cost = run_cost(scenario, num_params=trace.attrs.get("num_params"))
    if not cost.known:
        return math.nan
    return dataclasses.replace(cost, rounds=trace.completed_rounds,
                               evaluations=evaluations).total_core_s


def _costs(axes: Sequence[str], runs: Sequence[tuple]) -> pd.DataFrame:
    rows = []
    for point, trace in runs:
        accuracy = trace.rounds.get("test_accuracy", np.full(trace.completed_rounds, np.nan))
        evaluations = int(np.isfinite(accuracy).sum())
        timing = {name: float(np.sum(trace.rounds[name])) if name in trace.rounds else math.nan
                  for name in ("cpu_s", "wall_s")}  # NaN: a round written before the column
        rows.append({"run": point.name, "seed": point.seed,
                     **{k: _hashable(point.axis_values[k]) for k in axes},
                     "completed_rounds": trace.completed_rounds, "evaluations": evaluations,
                     "estimated_core_s": _estimate(trace, evaluations),
                     "cpu_core_s": timing["cpu_s"], "wall_s": timing["wall_s"]})
    return pd.DataFrame(rows)


def cost_summary(costs: pd.DataFrame) -> str:
    """One line of :func:`run_costs`: the runs and their committed rounds, the estimate
    for those rounds, the CPU they used against it (over the runs that have both) and
    their wall time in rounds."""
    timed = np.isfinite(costs["cpu_core_s"])
    known = np.isfinite(costs["estimated_core_s"])
    both = costs[timed & known]
    parts = [f"cost: {len(costs)} run(s), {int(costs['completed_rounds'].sum())} rounds committed",
             f"estimated {format_core_hours(float(costs['estimated_core_s'][known].sum()))}"
             + (f" ({int((~known).sum())} run(s) the cost table cannot estimate left out)"
                if not known.all() else "")]
    if len(both):
        used, estimate = float(both["cpu_core_s"].sum()), float(both["estimated_core_s"].sum())
        parts.append(f"used {format_core_hours(used)} of CPU, {used / estimate:.2f} x the estimate"
                     + (f" (over the {len(both)} runs with both)" if len(both) < len(costs) else ""))
    elif timed.any():
        parts.append(f"used {format_core_hours(float(costs['cpu_core_s'][timed].sum()))} of CPU")
    else:
        parts.append("CPU not timed (traces written before the cpu_s column)")
    parts.append(f"{costs['wall_s'].sum() / 3600:.3g} h of wall time in rounds")
    return "; ".join(parts)


def parquet_ready(table: pd.DataFrame, axes: Sequence[str]) -> pd.DataFrame:
    """``table`` with every axis column whose values mix Python types (a keyword beside
    numbers, as ``algorithm.covariance_learning_rate = ["learning_rate", 50.0]``) as text,
    which Parquet's one type per column needs; the CSV keeps the values as they are."""
    mixed = [a for a in axes if table[a].dtype == object
             and len({type(v) for v in table[a]}) > 1]
    return table.astype({a: str for a in mixed}) if mixed else table


def _ring_columns(trace) -> dict[str, np.ndarray]:
    """``distortion_<phase>_<ring>``: the mean local update distortion of the near / mid /
    far devices per round (:func:`cosim.plots.phy.ring_distortion`), for every phase whose
    per-device distortion the trace holds (and its device distances)."""
    from cosim.plots.phy import ring_distortion

    if "distance_m" not in trace.devices:
        return {}
    out = {}
    for name in sorted(trace.per_device):
        if name.startswith("local_distortion_"):
            phase = name.removeprefix("local_distortion_")
            for ring, values in ring_distortion(trace, phase).items():
                out[f"distortion_{phase}_{ring}"] = np.asarray(values)
    return out


def pooled_reliability(out_dir: str | Path) -> pd.DataFrame:
    """Per axis-value combination, the reliability bins of every run's last evaluated
    round pooled over its seeds: columns ``<axes>, bin, count`` (samples, summed),
    ``accuracy`` and ``confidence`` (sample-weighted means; NaN in an empty bin),
    ``ece_mean``, ``ece_ci95_low``, ``ece_ci95_high``, ``n`` (seeds; the ECE is each
    run's own, summarised like :func:`summarize_over_seeds`)."""
    return _pooled(*_runs(out_dir))


def _pooled(axes: Sequence[str], runs: Sequence[tuple]) -> pd.DataFrame:
    groups: dict[tuple, list] = {}
    for point, trace in runs:
        last = trace.last_evaluated_round("ece")
        if last is None or "bin_count" not in trace.reliability:
            continue
        key = tuple(_hashable(point.axis_values[k]) for k in axes)
        groups.setdefault(key, []).append((
            np.nan_to_num(trace.reliability["bin_count"][last]),
            np.nan_to_num(trace.reliability["bin_accuracy"][last]),
            np.nan_to_num(trace.reliability.get("bin_confidence",
                                                 trace.reliability["bin_accuracy"])[last]),
            float(trace.rounds["ece"][last])))
    rows = []
    for key, runs in groups.items():
        count = np.sum([r[0] for r in runs], axis=0)
        with np.errstate(invalid="ignore", divide="ignore"):
            accuracy = np.sum([r[0] * r[1] for r in runs], axis=0) / count
            confidence = np.sum([r[0] * r[2] for r in runs], axis=0) / count
        n, mean, _, low, high = _ci(np.array([r[3] for r in runs]))
        for b in range(count.size):
            rows.append({**dict(zip(axes, key, strict=True)), "bin": b, "count": count[b],
                         "accuracy": accuracy[b], "confidence": confidence[b], "n": n,
                         "ece_mean": mean, "ece_ci95_low": low, "ece_ci95_high": high})
    return pd.DataFrame(rows)


def _hashable(value):
    """An axis value as a table cell that pandas can group by (lists become tuples, a
    table its inline TOML, ``{rho = 1.0, nu = 0.5}``)."""
    if isinstance(value, dict):
        from cosim.scenario.as_toml import toml_value

        return toml_value(value)
    return tuple(_hashable(v) for v in value) if isinstance(value, list) else value


def _axes_only(copy: Path) -> Study:
    """The study copy read for its axes and seeds only (validated when the study ran;
    its relative ``scenario`` need not resolve from ``DIR``)."""
    return load_study(copy, validate=False, resolve_scenario=False)  # its keys checked as ran


def summarize_over_seeds(
    table: pd.DataFrame,
    axes: Sequence[str],
    metrics: Sequence[str] | None = None,
    grid_points: int = GRID_POINTS,
) -> pd.DataFrame:
    """Mean, std and the 95 % Student-t CI over seeds (module docstring); columns
    ``<axes>, x_kind, x, metric, n, mean, std, ci95_low, ci95_high``."""
    skip = {"run", "seed", "round", *axes, *X_COLUMNS.values()}
    if metrics is None:
        metrics = [c for c in table.columns
                   if c not in skip and pd.api.types.is_numeric_dtype(table[c])]
    fields = ("n", "mean", "std", "ci95_low", "ci95_high")
    rows = []
    for key, group in _groups(table, axes):
        lead = dict(zip(axes, key, strict=True))
        by_round = group.groupby("round", sort=True).indices  # positions, in table order
        by_seed = group.groupby("seed", sort=True).indices
        xs = {kind: group[column].to_numpy(dtype=float) for kind, column in X_COLUMNS.items()
              if column in group}
        for metric in metrics:
            column = group[metric].to_numpy(dtype=float)
            for r in sorted(by_round):
                values = column[by_round[r]]
                values = values[np.isfinite(values)]
                if values.size:
                    rows.append({**lead, "x_kind": "round", "x": float(r), "metric": metric,
                                 **dict(zip(fields, _ci(values), strict=True))})
            for kind, x_all in xs.items():
                curves = []
                for seed in sorted(by_seed):
                    x, y = x_all[by_seed[seed]], column[by_seed[seed]]
                    ok = np.isfinite(x) & np.isfinite(y)
                    if ok.any():
                        curves.append((x[ok], y[ok]))
                if not curves:
                    continue
                low = max(c[0].min() for c in curves)
                high = min(c[0].max() for c in curves)
                if low > high:
                    continue
                grid = np.linspace(low, high, grid_points) if high > low else np.array([low])
                per_point = np.stack([np.interp(grid, x, y) for x, y in curves], axis=1)
                for xv, ci in zip(grid, _ci_rows(per_point), strict=True):
                    rows.append({**lead, "x_kind": kind, "x": float(xv), "metric": metric,
                                 **dict(zip(fields, ci, strict=True))})
    return pd.DataFrame(rows)


def stability(table: pd.DataFrame, axes: Sequence[str],
              metric: str = "test_accuracy") -> pd.DataFrame:
    """Per run (the module docstring's measures of ``metric``, higher is better): columns
    ``run``, ``seed``, the axes, ``peak``, ``peak_round`` (the first round at the peak),
    ``final``, ``final_round``, ``post_peak_drop``, ``near_peak_share``, ``evaluations``;
    runs with no finite ``metric`` are left out."""
    rows = []
    columns = ["run", "seed", *axes, *STABILITY_MEASURES, "final_round", "evaluations"]
    if metric not in table:
        return pd.DataFrame(columns=columns)
    for _, run in table.groupby("run", sort=False):
        values = run[metric].to_numpy(dtype=float)
        ok = np.isfinite(values)
        if not ok.any():
            continue
        values, rounds = values[ok], run["round"].to_numpy()[ok]
        best = int(np.argmax(values))
        near = values >= (1.0 - NEAR_PEAK) * values[best]
        first_near = int(np.argmax(near))
        rows.append({"run": run["run"].iloc[0], "seed": run["seed"].iloc[0],
                     **{a: run[a].iloc[0] for a in axes},
                     "peak": values[best], "peak_round": int(rounds[best]),
                     "final": values[-1], "final_round": int(rounds[-1]),
                     "post_peak_drop": values[best] - values[-1],
                     "near_peak_share": float(near[first_near:].mean()),
                     "evaluations": int(values.size)})
    # no run evaluated yet (a study being written): the columns all the same
    return pd.DataFrame(rows) if rows else pd.DataFrame(columns=columns)


def stability_over_seeds(per_run: pd.DataFrame, axes: Sequence[str]) -> pd.DataFrame:
    """:func:`stability`'s measures per axis-value combination over seeds: columns
    ``<axes>, measure, n, mean, std, ci95_low, ci95_high``."""
    rows = []
    for key, group in _groups(per_run, axes):
        lead = dict(zip(axes, key, strict=True))
        for measure in STABILITY_MEASURES:
            rows.append({**lead, "measure": measure,
                         **dict(zip(("n", "mean", "std", "ci95_low", "ci95_high"),
                                    _ci(group[measure].to_numpy(dtype=float)), strict=True))})
    return pd.DataFrame(rows)


@contextlib.contextmanager
def _saved_figure(path: Path, rows: int = 1, cols: int = 1, *, square: bool = False):
    """A figure of ``rows`` x ``cols`` panels in :mod:`cosim.plots`' style and layout,
    yielded as ``(fig, panels [rows, cols])``, then saved to ``path`` and closed."""
    import matplotlib.pyplot as plt

    from cosim.plots import fold_offsets_into_labels
    from cosim.plots.style import FigureOptions, panel_figure, style

    with style():  # constrained layout: room for a legend below the panels
        fig, panels = panel_figure(FigureOptions(), rows, cols, square=square)
        try:
            yield fig, panels
            fig.draw_without_rendering()
            fold_offsets_into_labels(fig)
            with atomic_output(path, inside=path.parent) as tmp:
                fig.savefig(tmp, dpi=200, bbox_inches="tight", format="png")
        finally:
            plt.close(fig)


def _shown(text: str) -> str:
    """A study's own text (its ``[labels]``, its axis values) as a figure draws it:
    control characters shown as escapes (:func:`cosim.printable.printable`, ``\\x1b``,
    as the command line shows them) and a ``$`` as a dollar sign, never matplotlib math."""
    return printable(text, keep="\n").replace("$", r"\$")


def _combination_label(axes: Sequence[str], key: tuple,
                       labels: Mapping[str, str] | None = None,
                       only: Mapping[str, dict] | None = None) -> str:
    """The legend label of one combination of axis values, in the reader's words
    (:func:`cosim.display_names.value_label`; a study's ``[labels]`` win), without the
    axes the study's ``[only]`` does not sweep there (FedAvg's placeholder init_std)."""
    values = dict(zip(axes, key, strict=True))
    hidden = unswept({k: c for k, c in (only or {}).items()
                      if k in values and all(o in values for o in c)}, values)
    text = ", ".join(value_label(k, v, labels) for k, v in values.items() if k not in hidden)
    return _shown(text) or "all runs"


def _plot(summary: pd.DataFrame, axes: Sequence[str], metric: str, x_kind: str,
          path: Path, labels: Mapping[str, str] | None = None,
          only: Mapping[str, dict] | None = None, *,
          table: pd.DataFrame | None = None) -> Path | None:
    """``metric`` against ``x_kind``: the mean over seeds with its 95 % CI band, one curve
    per combination (:func:`curve_style`), its seeds counted in the legend (``n = 3``);
    the band stops at the values the metric can take
    (:func:`cosim.display_names.metric_range`; ``summary.csv`` keeps the interval whole).
    A combination of fewer than :data:`BAND_MIN_SEEDS` seeds has no band: its seeds' own
    curves from ``table`` (the tidy table) are drawn thin in its colour instead. So is a
    combination whose seeds share no stretch of x (no mean exists there: the transmit
    energy of drops whose path gains differ by decades), said in its legend entry."""
    data = summary[(summary["metric"] == metric) & (summary["x_kind"] == x_kind)]
    x_column = "round" if x_kind == "round" else X_COLUMNS[x_kind]
    original, runs_of, curves = {}, {}, {}
    if table is not None and x_column in table and metric in table:
        for key, rows in _groups(table, axes):  # the combinations with a finite point
            if (np.isfinite(rows[x_column].astype(float)) & np.isfinite(rows[metric].astype(float))).any():
                original[comparable(key)], runs_of[comparable(key)] = key, rows
    for key, rows in _groups(data, axes):
        original[comparable(key)], curves[comparable(key)] = key, rows
    order = list(dict.fromkeys([*runs_of, *curves]))
    if not order:
        return None
    seeds_drawn = False
    with _saved_figure(path) as (fig, panels):
        ax = panels[0, 0]
        for index, key in enumerate(order):
            label = _combination_label(axes, original[key], labels, only)
            if key in curves:
                seeds_drawn |= draw_curve(ax, curves[key], runs_of.get(key), x_column, metric, index, label)
            else:  # its seeds share no stretch of x: no mean exists
                n = runs_of[key]["seed"].nunique()
                line = draw_seeds(ax, runs_of[key], x_column, metric, curve_style(index))
                line.set_label(f"{label} (n = {n}: seeds, no common x)")
                seeds_drawn = True
        if spans_decades(pd.concat([data["x"], *(r[x_column] for r in runs_of.values())])):
            ax.set_xscale("log")
        ax.set_xlabel(X_LABELS[x_kind])
        ax.set_ylabel(metric_label(metric))
        ax.set_title(f"{metric_label(metric)}: mean over seeds, 95 % CI"
                     + (f"\n(thin: each seed, where n < {BAND_MIN_SEEDS} or no common x)"
                        if seeds_drawn else ""))
        legend_outside(fig, ax.get_legend_handles_labels()[0])
    return path


def final_values(table: pd.DataFrame, axes: Sequence[str], metric: str) -> pd.DataFrame:
    """Per run, ``metric`` at its last round where it is finite (the last evaluation):
    columns ``run``, ``seed``, the axes, ``round`` and ``metric``, the runs in the table's
    order (the study's: figures give each axis value the same colour as the curves)."""
    columns = ["run", "seed", *axes, "round", metric]
    if metric not in table:
        return pd.DataFrame(columns=columns)
    rows = table[np.isfinite(table[metric].astype(float))]
    last = rows.loc[rows.groupby("run", sort=False)["round"].idxmax()]
    return last.sort_index()[columns].reset_index(drop=True)  # the table's run order


def _plot_final(table: pd.DataFrame, axes: Sequence[str], axis: str, metric: str,
                path: Path, labels: Mapping[str, str] | None = None,
                only: Mapping[str, dict] | None = None) -> Path | None:
    """``metric`` at each run's last evaluation against ``axis``: the mean over seeds, one
    line per combination of the other axes, every seed as a dot. A numeric axis is drawn to
    scale; any other (names, or numbers mixed with ``"none"`` as ``privacy.target_epsilon``
    takes) one tick per value in the study's order, the means as markers joined by a
    dotted line."""
    final = final_values(table, axes, metric)
    if final.empty:
        return None
    others = [a for a in axes if a != axis]
    numeric = pd.api.types.is_numeric_dtype(final[axis])
    ticks = list(dict.fromkeys(table[axis]))  # the study's order
    position = {v: i for i, v in enumerate(ticks)}
    where = final[axis] if numeric else pd.Series([position[v] for v in final[axis]], final.index)
    with _saved_figure(path) as (fig, panels):
        ax = panels[0, 0]
        for key, runs in _groups(final, others):
            at = where[runs.index]
            mean = runs[metric].groupby(at).mean().sort_index()
            (line,) = ax.plot(mean.index, mean.values, marker="o",
                              linestyle="-" if numeric else ":",
                              label=_combination_label(others, key, labels, only))
            ax.scatter(at, runs[metric], s=12, alpha=0.5, color=line.get_color())
        if not numeric:
            ax.set_xticks(range(len(ticks)), [_shown(value_text(axis, v, labels)) for v in ticks])
        ax.set_xlabel(_shown(axis_label(axis, labels)))
        when = "evaluation" if metric in FIGURE_METRICS else "round"
        ax.set_ylabel(f"{metric_label(metric)} at the last {when}")
        rounds = sorted(set(final["round"]))
        span = rounds[0] if len(rounds) == 1 else f"{rounds[0]}-{rounds[-1]}"
        ax.set_title(f"{metric_label(metric)} vs {_shown(axis_label(axis, labels))}\n"
                     f"mean over seeds (line), seeds (dots); round {span}")
        if others:
            legend_below(fig, ax.get_legend_handles_labels()[0], ncols=1)
    return path


def _plot_reliability(pooled: pd.DataFrame, axes: Sequence[str], path: Path,
                      labels: Mapping[str, str] | None = None,
                      only: Mapping[str, dict] | None = None) -> Path | None:
    """One reliability diagram per axis-value combination (:func:`pooled_reliability`)."""
    from cosim.plots.learning import reliability_panel
    from cosim.plots.style import panel_grid

    if pooled.empty:
        return None
    groups = _groups(pooled, axes)
    rows, cols = panel_grid(len(groups))
    with _saved_figure(path, rows, cols, square=True) as (_, panels):
        for ax in panels.flat[len(groups):]:
            ax.set_visible(False)
        for ax, (key, bins) in zip(panels.flat, groups):
            bins = bins.sort_values("bin")
            first = bins.iloc[0]
            half = (first["ece_ci95_high"] - first["ece_ci95_low"]) / 2
            ece = (f"ECE {first['ece_mean']:.3f} ± {half:.3f}" if np.isfinite(half)
                   else f"ECE {first['ece_mean']:.3f}")
            reliability_panel(ax, bins["accuracy"].to_numpy(), bins["confidence"].to_numpy(),
                              bins["count"].to_numpy(),
                              f"{_combination_label(axes, key, labels, only)}\n{ece} "
                              f"({int(first['n'])} seeds)")
        for row in panels:
            row[0].set_ylabel("accuracy")
    return path


def _plot_rings(summary: pd.DataFrame, axes: Sequence[str], phase: str, path: Path,
                labels: Mapping[str, str] | None = None,
                only: Mapping[str, dict] | None = None) -> Path | None:
    """Mean local distortion of the near / mid / far devices (mean over seeds, 95 % CI
    band) against the cumulative uplink OFDM symbols, one panel per combination."""
    from cosim.plots.style import RING_COLORS, panel_grid

    data = summary[(summary["x_kind"] == "uplink")
                   & summary["metric"].str.startswith(f"distortion_{phase}_")]
    if data.empty:
        return None
    groups = _groups(data, axes)
    rows, cols = panel_grid(len(groups))
    with _saved_figure(path, rows, cols) as (_, panels):
        for ax in panels.flat[len(groups):]:
            ax.set_visible(False)
        for ax, (key, curves) in zip(panels.flat, groups):
            for ring, color in RING_COLORS.items():
                curve = curves[curves["metric"] == f"distortion_{phase}_{ring}"].sort_values("x")
                if curve.empty:
                    continue
                ax.semilogy(curve["x"], curve["mean"].where(curve["mean"] > 0), color=color,
                            label=ring)
                # log y: the band is drawn where its lower end is positive (a gap where
                # the interval reaches 0, as with few seeds)
                ax.fill_between(curve["x"], curve["ci95_low"].where(curve["ci95_low"] > 0),
                                curve["ci95_high"], color=color, alpha=0.2, lw=0)
            ax.set_title(_combination_label(axes, key, labels, only))
            ax.set_xlabel("cumulative uplink OFDM symbols")
            ax.legend(loc="best")
        for row in panels:
            row[0].set_ylabel(f"mean local distortion ({phase})")
    return path


def _file_part(text: str) -> str:
    """``text`` as part of a file name: every character other than letters, digits and
    ``._=,+-`` becomes ``_`` (no separator, so no ``..`` path), as in run names."""
    return re.sub(r"[^A-Za-z0-9._=,+-]", "_", text).lstrip(".") or "_"


def _write_tables(files: dict) -> None:
    """Each of ``files`` (path -> a text, or a DataFrame as Parquet or CSV by the path's
    suffix) written whole (:func:`atomic_output`)."""
    for path, content in files.items():
        with atomic_output(path) as tmp:
            if isinstance(content, str):
                tmp.write_text(content, encoding="utf-8")
            elif path.suffix == ".parquet":
                content.to_parquet(tmp, index=False)
            else:
                content.to_csv(tmp, index=False)


@quiet_numerics()  # values near the float limits: summarised and drawn as stored, no warning
def _figures(out: Path, figures: Path, x: str, table, summary, axes, runs, labels, only
             ) -> list[Path]:
    """The figures of :func:`report` (and ``reliability.csv``) written into ``figures``:
    each metric against ``x``, the last evaluation against every axis, the pooled
    reliability diagram, the distortion by distance ring; the files (a figure without
    data is not drawn)."""
    written: list[Path] = []

    def keep(path: Path | None) -> None:
        if path is not None:
            written.append(path)

    kind = "round" if x == "rounds" else x
    metrics = [*FIGURE_METRICS, *sorted(c for c in table.columns if c.startswith("aggregate_nmse_"))]
    for metric in metrics:
        keep(_plot(summary, axes, metric, kind, figures / f"{metric}_vs_{x}.png", labels, only,
                   table=table))
    for axis in axes:  # the last evaluation against every axis
        if table[axis].nunique() > 1:
            for metric in metrics:
                keep(_plot_final(table, axes, axis, metric,
                                 figures / f"final_{metric}_vs_{_file_part(axis)}.png", labels, only))
    pooled = _pooled(axes, runs)
    if not pooled.empty:
        written.append(out / "reliability.csv")
        with atomic_output(written[-1]) as tmp:
            pooled.to_csv(tmp, index=False)
        keep(_plot_reliability(pooled, axes, figures / "reliability.png", labels, only))
    rings = tuple(f"_{ring}" for ring, _, _ in RINGS)
    phases = sorted({m.removeprefix("distortion_").rsplit("_", 1)[0] for m in table.columns
                     if m.startswith("distortion_") and m.endswith(rings)})
    for phase in phases:
        keep(_plot_rings(summary, axes, phase, figures / f"distortion_by_distance_{phase}.png",
                         labels, only))
    return written


def report(out_dir: str | Path, x: str = "rounds") -> list[Path]:
    """Write ``table.csv``, ``table.parquet``, ``summary.csv``, ``stability.csv`` and
    ``stability_summary.csv`` (:func:`stability` of the test accuracy, per run and over seeds),
    ``cost.csv`` (:func:`run_costs`), ``results.csv`` and ``results.md`` (final and best
    per point, :mod:`cosim.study.results`), ``figures/<metric>_vs_<x>.png`` and, for every axis,
    ``figures/final_<metric>_vs_<axis>.png`` (the last evaluation against the axis
    value: to scale for a numeric axis, one tick per value for any other) for each of
    :data:`FIGURE_METRICS` that some run holds (``test_accuracy``,
    ``ece`` and the posterior mean's ``posterior_mean_accuracy``,
    ``posterior_mean_ece``) and for every phase's over-the-air error
    ``aggregate_nmse_<phase>`` (its last round against an axis) into the study's
    ``out_dir``; the files.

    ``x``: ``rounds`` or a key of :data:`X_COLUMNS` (``uplink``, ``uplink_seconds``,
    ``uplink_energy``, ``total``): the figures' x; the summary holds all.
    """
    if x != "rounds" and x not in X_COLUMNS:
        raise StudyError([f"--x: must be one of rounds, {', '.join(X_COLUMNS)} (got {x!r})"],
                         str(out_dir))
    out = Path(out_dir)
    axes, runs = _runs(out)
    copy = _axes_only(out / STUDY_COPY)
    labels, only = copy.labels, copy.only  # labels escaped where a figure draws them (_shown)
    table = _table(axes, runs)
    summary = summarize_over_seeds(table, axes)
    per_run = stability(table, axes)
    wide = results(table, axes)
    files = {"table.csv": table, "table.parquet": parquet_ready(table, axes),
             "summary.csv": summary, "stability.csv": per_run,
             "stability_summary.csv": stability_over_seeds(per_run, axes),
             "cost.csv": _costs(axes, runs), "results.csv": wide,
             "results.md": results_markdown(wide, axes)}
    written = [out / name for name in files]
    figures = out / "figures"
    try:
        for output in (*written, out / "reliability.csv", figures):
            check_output_path(output)
        _write_tables(dict(zip(written, files.values(), strict=True)))
        figures.mkdir(exist_ok=True)
        written += _figures(out, figures, x, table, summary, axes, runs, labels, only)
    except OSError as error:  # a full disk, a link planted meanwhile: what was written stays
        where = f"{error.filename}: " if error.strerror and error.filename else ""
        raise StudyError([f"cannot write the report: {where}{error.strerror or error}"], str(out)) from None
    return written
