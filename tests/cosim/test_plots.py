"""`cosim plot`: the accuracy figure's x-axis (--x), older traces, posterior.png, the
output formats, dpi and size, the reliability diagram, the distortion, power, CSI and
map figures of several traces, integer round ticks, and figures skipped for want of data."""

from __future__ import annotations

import math

import numpy as np
import pytest

from cosim.cli import main
from cosim.plots import ACCURACY_AXES, accuracy_x, plot_traces, trace_labels
from cosim.trace import TraceWriter, read_trace

SCENARIO = 'name = "t"\nseed = 3\nrounds = 4\n'
B = 10


def _trace(path, *, split: bool, posterior: bool, rounds: int = 4, cost: bool = True):
    """A trace as the engine writes it: uplink 10 + t, downlink 1000 symbols in round t,
    uplink 0.25 (t + 1) s and 0.5 + t J, evaluated every round; ``split``: with the
    cumulative uplink / downlink columns (newer traces); ``posterior``: with the
    proposed method's round metrics; ``cost``: with the uplink's seconds and joules."""
    with TraceWriter.create(path, SCENARIO, seed=3, name=path.stem) as writer:
        uplink = downlink = seconds = joules = 0.0
        for t in range(rounds):
            uplink, downlink = uplink + 10.0 + t, downlink + 1000.0
            seconds, joules = seconds + 0.25 * (t + 1), joules + 0.5 + t
            row = {"uplink_symbols": 10.0 + t, "downlink_symbols": 1000.0,
                   "cumulative_channel_uses": uplink + downlink, "test_accuracy": 0.2 + 0.1 * t,
                   "ece": 0.05, "test_nll": 1.0}
            if cost:
                row |= {"uplink_seconds": 0.25 * (t + 1), "uplink_energy_j": 0.5 + t}
            if split:
                row |= {"cumulative_uplink_symbols": uplink, "cumulative_downlink_symbols": downlink}
            if split and cost:
                row |= {"cumulative_uplink_seconds": seconds, "cumulative_uplink_energy_j": joules}
            if posterior:
                row |= {"precision_rel_change": 0.0 if t == 2 else 10.0 ** -t,
                        "precision_changed_fraction": 0.0 if t == 2 else 1.0,
                        "posterior_std_p05": 0.01, "posterior_std_p50": 0.05 - 0.001 * t,
                        "posterior_std_p95": 0.1}
            writer.append_round(row)
            writer.append_series("reliability", "bin_accuracy", np.linspace(0, 1, B))
            writer.append_series("reliability", "bin_count", np.full(B, 3.0))
            writer.commit()
    return path


def test_accuracy_axes_new_and_old_traces(tmp_path):
    new = read_trace(_trace(tmp_path / "new.h5", split=True, posterior=False))
    old = read_trace(_trace(tmp_path / "old.h5", split=False, posterior=False))
    uplink = [10.0, 21.0, 33.0, 46.0]
    for trace in (new, old):  # older traces: the running sum of uplink_symbols
        np.testing.assert_array_equal(accuracy_x(trace, "uplink"), uplink)
        np.testing.assert_array_equal(accuracy_x(trace, "total"), np.add(uplink, [1e3, 2e3, 3e3, 4e3]))
        np.testing.assert_array_equal(accuracy_x(trace, "rounds"), [0.0, 1.0, 2.0, 3.0])
        np.testing.assert_array_equal(accuracy_x(trace, "uplink_seconds"), [0.25, 0.75, 1.5, 2.5])
        np.testing.assert_array_equal(accuracy_x(trace, "uplink_energy"), [0.5, 2.0, 4.5, 8.0])
    new.rounds["cumulative_uplink_symbols"][0] = math.nan  # resumed from an older version
    np.testing.assert_array_equal(accuracy_x(new, "uplink"), uplink)
    new.rounds["cumulative_uplink_seconds"][:] = [1.0, 2.0, 3.0, 4.0]  # the column wins when finite
    np.testing.assert_array_equal(accuracy_x(new, "uplink_seconds"), [1.0, 2.0, 3.0, 4.0])
    with pytest.raises(ValueError, match=r"x \(--x\) must be one of 'total', 'uplink', "
                                         r"'uplink_seconds', 'uplink_energy', 'rounds', got 'time'"):
        accuracy_x(new, "time")


@pytest.mark.parametrize(("x", "column"), [("uplink_seconds", "uplink_seconds"),
                                           ("uplink_energy", "uplink_energy_j")])
def test_a_trace_without_the_uplink_time_or_energy_is_refused_naming_the_column(tmp_path, capsys, x,
                                                                               column):
    """A trace written before the uplink's seconds and joules: one line naming the
    column, exit status 2, nothing written."""
    path = _trace(tmp_path / "old.h5", split=True, posterior=False, cost=False)
    out = tmp_path / "figs"
    assert main(["plot", str(path), "--out", str(out), "--x", x]) == 2
    assert f"it has no /rounds/{column} column" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize("x", sorted(ACCURACY_AXES))
def test_plot_option_names_the_figure_after_the_axis(tmp_path, capsys, x):
    new = _trace(tmp_path / "new.h5", split=True, posterior=True)
    old = _trace(tmp_path / "old.h5", split=False, posterior=False)
    out = tmp_path / "figs"
    assert main(["plot", str(new), str(old), "--out", str(out), "--x", x]) == 0
    printed = capsys.readouterr().out.split()
    stem = ACCURACY_AXES[x][0]
    for name in (stem, stem.replace("accuracy", "nll")):
        figure = out / f"{name}.png"
        assert str(figure) in printed and figure.stat().st_size > 1000
    others = {f"{name}.png" for key, (name, _) in ACCURACY_AXES.items() if key != x}
    assert not [p for p in out.iterdir() if p.name in others]
    assert (out / "posterior.png").stat().st_size > 1000  # one of the two traces has the metrics


def test_plot_default_axis_and_bad_axis(tmp_path, capsys):
    trace = _trace(tmp_path / "t.h5", split=False, posterior=False)
    out = tmp_path / "figs"
    written = plot_traces([trace], out)  # the default x: the uplink's channel uses
    assert [p.name for p in written] == ["accuracy_vs_uplink_symbols.png", "nll_vs_uplink_symbols.png",
                                         "ece.png", "reliability.png"]
    assert not (out / "posterior.png").exists()  # no round metrics: no posterior figure
    with pytest.raises(SystemExit) as exit_info:
        main(["plot", str(trace), "--out", str(out), "--x", "time"])
    assert exit_info.value.code == 2
    assert "--x: invalid choice: 'time'" in capsys.readouterr().err
    with pytest.raises(ValueError, match="got 'time'"):
        plot_traces([trace], out, x="time")


def test_posterior_figure(tmp_path):
    trace = _trace(tmp_path / "t.h5", split=True, posterior=True)
    written = plot_traces([trace], tmp_path / "figs", x="uplink")
    assert [p.name for p in written] == ["accuracy_vs_uplink_symbols.png", "nll_vs_uplink_symbols.png",
                                         "ece.png", "reliability.png", "posterior.png"]
    import matplotlib.pyplot as plt

    image = plt.imread(written[-1])
    assert image.shape[0] > 300 and image.shape[1] > 900


RICH_SCENARIO = ('name = "rich"\nseed = {seed}\nrounds = {rounds}\n\n[cell]\nradius_m = 100.0\n\n'
                 '[power]\ntx_power_dbm = 20.0\n')
DISTANCES_M = np.array([10.0, 25.0, 40.0, 55.0, 80.0, 95.0])
"""Two devices in each ring of a 100 m cell (near < 33.3 m <= mid < 66.7 m <= far)."""
RELIABILITY_COUNT = np.array([0, 0, 4, 10, 20, 30, 25, 8, 3, 0], float)
"""Samples per bin of every evaluation of the rich trace: bins 0, 1 and 9 are empty."""


def _rich_trace(path, *, seed: int = 3, rounds: int = 3, csi: bool = True, name: str = "rich"):
    """A trace with every optional dataset the figures read: per-device distortion, power,
    attenuated fraction and CSI NMSE (all zero with ``csi=False``: perfect CSI) of phases
    rho and nu, device positions and path gains, and reliability bins with confidence."""
    angle = np.linspace(0.0, 2 * np.pi, DISTANCES_M.size, endpoint=False)
    devices = {"position_m": np.stack([DISTANCES_M * np.cos(angle), DISTANCES_M * np.sin(angle)], 1),
               "distance_m": DISTANCES_M, "path_gain": DISTANCES_M ** -4.0,
               "num_samples": np.full(DISTANCES_M.size, 10)}
    text = RICH_SCENARIO.format(seed=seed, rounds=rounds)
    with TraceWriter.create(path, text, seed=seed, name=name, devices=devices) as writer:
        for t in range(rounds):
            writer.append_round({"uplink_symbols": 22.0, "downlink_symbols": 300.0,
                                 "cumulative_uplink_symbols": 22.0 * (t + 1),
                                 "cumulative_downlink_symbols": 300.0 * (t + 1),
                                 "cumulative_channel_uses": 322.0 * (t + 1),
                                 "test_accuracy": 0.4 + 0.1 * t, "test_nll": 1.5 - 0.2 * t,
                                 "ece": 0.05, "precision_rel_change": 1e-3,
                                 "posterior_std_p50": 0.05})
            far = DISTANCES_M / 100.0
            for phase, scale in (("rho", 1e-6), ("nu", 1.0)):
                distortion = np.where(DISTANCES_M > 30.0, scale * far ** 2 / (t + 1), 0.0)
                writer.append_per_device(f"local_distortion_{phase}", distortion)
                writer.append_per_device(f"tx_power_w_{phase}", 0.1 * far ** 2)
                writer.append_per_device(f"clipped_fraction_{phase}", np.where(far > 0.7, 0.2, 0.0))
            writer.append_per_device("csi_nmse", (0.1 + 0.01 * np.arange(6)) if csi else np.zeros(6))
            edges = np.linspace(0.0, 1.0, B + 1)
            empty = RELIABILITY_COUNT == 0
            writer.append_series("reliability", "bin_accuracy",
                                 np.where(empty, np.nan, np.clip(edges[:-1] + 0.02, 0, 1)))
            writer.append_series("reliability", "bin_confidence",
                                 np.where(empty, np.nan, edges[:-1] + 0.06))
            writer.append_series("reliability", "bin_count", RELIABILITY_COUNT)
            writer.commit()
    return path


ALL_FIGURES = ("accuracy_vs_channel_uses", "nll_vs_channel_uses", "accuracy_vs_rounds", "nll_vs_rounds",
               "ece", "reliability", "posterior", "distortion_by_distance", "power_per_device",
               "csi_nmse", "cell_map")


def test_every_figure_in_every_requested_format(tmp_path):
    import xml.etree.ElementTree as ElementTree

    import matplotlib.pyplot as plt

    traces = [_rich_trace(tmp_path / "a.h5", seed=3), _rich_trace(tmp_path / "b.h5", seed=4)]
    out = tmp_path / "figs"
    notes: list[str] = []
    written = plot_traces(traces, out, x=["total", "rounds"], formats=["png", "pdf", "svg"],
                          dpi=100, size_in=(3.0, 2.0), note=notes.append)
    assert notes == []
    assert [p.name for p in written] == [f"{stem}.{fmt}" for stem in ALL_FIGURES
                                         for fmt in ("png", "pdf", "svg")]
    for path in written:
        data = path.read_bytes()
        assert len(data) > 1000, path
        if path.suffix == ".pdf":
            assert data.startswith(b"%PDF-"), path
        elif path.suffix == ".svg":
            assert ElementTree.fromstring(data).tag.endswith("svg"), path
        else:
            assert data.startswith(b"\x89PNG"), path
    # one panel of 3.0 x 2.0 inches at 100 dpi: exactly 300 x 200 pixels (no tight bbox)
    assert plt.imread(out / "ece.png").shape[:2] == (200, 300)
    assert plt.imread(out / "posterior.png").shape[:2] == (200, 600)  # two panels side by side
    # equal figures give equal vector files (no creation date)
    again = plot_traces(traces, tmp_path / "again", x=["total", "rounds"], formats=["pdf", "svg"],
                        dpi=100, size_in=(3.0, 2.0))
    for path in again:
        assert path.read_bytes() == (out / path.name).read_bytes(), path.name


def test_style_is_not_applied_globally(tmp_path):
    import matplotlib

    before = dict(matplotlib.rcParams)
    plot_traces([_rich_trace(tmp_path / "a.h5")], tmp_path / "figs")
    assert dict(matplotlib.rcParams) == before


def test_distortion_has_one_line_per_trace_and_ring(tmp_path):
    from cosim.plots import RINGS, distortion_figure

    traces = [read_trace(_rich_trace(tmp_path / f"{s}.h5", seed=s)) for s in (3, 4, 5)]
    labels = trace_labels(traces)
    assert labels == ["seed 3", "seed 4", "seed 5"]  # the scenarios differ in their seed only
    fig = distortion_figure(traces, labels)
    axes = [ax for ax in fig.axes if ax.get_title()]
    assert [ax.get_title() for ax in axes] == [r"phase $\rho$", r"phase $\nu$"]
    for ax in axes:
        gids = sorted(line.get_gid() for line in ax.get_lines())
        assert gids == sorted(f"{label}|{ring}" for label in labels for ring, _, _ in RINGS)
        assert ax.get_xlabel() == "cumulative uplink OFDM symbols"
        line = next(line for line in ax.get_lines() if line.get_gid() == f"{labels[0]}|far")
        np.testing.assert_array_equal(line.get_xdata(), [22.0, 44.0, 66.0])  # symbols, not rounds
        near = next(line for line in ax.get_lines() if line.get_gid() == f"{labels[0]}|near")
        assert np.isnan(near.get_ydata()).all()  # never attenuated: a gap on the log axis
    # colour = ring, line style = trace
    far = [line for line in axes[0].get_lines() if line.get_gid().endswith("|far")]
    assert len({line.get_color() for line in far}) == 1
    assert len({line.get_linestyle() for line in far}) == 3
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert set(labels) <= set(legend) and "far (r ≥ 2R/3)" in legend


def test_reliability_has_gap_bars_counts_and_ece(tmp_path):
    from cosim.plots import reliability_figure

    traces = [read_trace(_rich_trace(tmp_path / f"{s}.h5", seed=s)) for s in (3, 4)]
    fig = reliability_figure(traces, trace_labels(traces))
    panels = [ax for ax in fig.axes if ax.get_visible()]
    assert len(panels) == 2
    for ax in panels:
        gaps = [p for p in ax.patches if p.get_gid() == "gap"]
        assert len(gaps) == int(np.sum(RELIABILITY_COUNT > 0))  # one per non-empty bin
        for gap in gaps:  # from the accuracy (bin edge + 0.02) to the confidence (edge + 0.06)
            assert gap.get_height() == pytest.approx(0.04)
        counts = [t.get_text() for t in ax.texts if t.get_gid() == "bin_count"]
        assert counts == [str(int(n)) for n in RELIABILITY_COUNT]
        assert "round 2, ECE = 0.050" in ax.get_title()  # rounds from 0, as `cosim inspect`


def test_short_runs_get_integer_round_ticks(tmp_path):
    from cosim.plots import metric_figure, posterior_figure

    traces = [read_trace(_rich_trace(tmp_path / "a.h5", rounds=2))]
    labels = trace_labels(traces)
    figs = [metric_figure(traces, labels, "ece", "ECE", "rounds"),
            metric_figure(traces, labels, "test_accuracy", "accuracy", "uplink"),
            posterior_figure(traces, labels)]
    for fig in figs:
        fig.canvas.draw()
        for ax in fig.axes:
            low, high = ax.get_xlim()
            ticks = [t for t in ax.get_xticks() if low <= t <= high]
            assert ticks and all(float(t).is_integer() for t in ticks), ticks


def test_trace_without_optional_data_skips_those_figures(tmp_path, capsys):
    bare = _trace(tmp_path / "bare.h5", split=True, posterior=False)
    perfect = _rich_trace(tmp_path / "perfect.h5", csi=False)
    notes: list[str] = []
    written = plot_traces([bare], tmp_path / "figs", note=notes.append)
    assert [p.name for p in written] == ["accuracy_vs_uplink_symbols.png", "nll_vs_uplink_symbols.png",
                                         "ece.png", "reliability.png"]
    skipped = [n.split(" figure:")[0] for n in notes]
    assert skipped == ["no posterior", "no distortion_by_distance", "no power_per_device",
                       "no csi_nmse", "no cell_map"]
    assert all("\n" not in n for n in notes)
    # a trace with perfect CSI skips only the CSI figure; a mix draws the others from the rich one
    assert main(["plot", str(bare), str(perfect), "--out", str(tmp_path / "mix")]) == 0
    captured = capsys.readouterr()
    assert captured.err == ("cosim plot: no csi_nmse figure: every trace has perfect CSI "
                            "(/rounds/per_device/csi_nmse is 0)\n")
    assert {p.stem for p in (tmp_path / "mix").iterdir()} == {
        "accuracy_vs_uplink_symbols", "nll_vs_uplink_symbols", *ALL_FIGURES[4:]} - {"csi_nmse"}


def test_plot_command_formats_dpi_and_size(tmp_path, capsys):
    import matplotlib.pyplot as plt

    trace = _rich_trace(tmp_path / "a.h5")
    out = tmp_path / "figs"
    assert main(["plot", str(trace), "--out", str(out), "--format", "png,svg", "--format", "pdf",
                 "--x", "rounds,uplink", "--dpi", "50", "--size", "4,3"]) == 0
    printed = capsys.readouterr().out.split()
    assert printed[:3] == [str(out / f"accuracy_vs_rounds.{f}") for f in ("png", "svg", "pdf")]
    assert str(out / "accuracy_vs_uplink_symbols.pdf") in printed
    assert len(printed) == 3 * (len(ALL_FIGURES) - 2 + 2)  # rounds and uplink pairs, not total
    assert plt.imread(out / "ece.png").shape[:2] == (150, 200)  # 4 x 3 in at 50 dpi
    for args, message in ((["--format", "gif"], "--format: invalid choice: 'gif'"),
                          (["--size", "3"], "--size: must be W,H in inches"),
                          (["--size", "3,-1"], "--size: must be W,H in inches"),
                          (["--dpi", "0"], "--dpi: must be a number > 0"),
                          (["--x", "rounds,time"], "--x: invalid choice: 'time'")):
        with pytest.raises(SystemExit) as exit_info:
            main(["plot", str(trace), "--out", str(tmp_path / "bad"), *args])
        assert exit_info.value.code == 2
        assert message in capsys.readouterr().err
    assert main(["plot", str(trace), "--out", str(tmp_path / "bad"), "--dpi", "1e6"]) == 2
    assert "dpi (--dpi) must be > 0 and <= 2400" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()


def test_command_line_choices_match_the_module():
    from cosim import cli, plots

    assert set(cli.PLOT_AXES) == set(plots.ACCURACY_AXES)
    assert cli.PLOT_FORMATS == plots.FORMATS
    help_text = cli._parser()._subparsers._group_actions[0].choices["plot"].format_help()
    assert f"default {plots.DEFAULT_DPI:g})" in help_text
    assert "default {:g},{:g}".format(*plots.DEFAULT_PANEL_SIZE_IN) in help_text.replace("\n", " ")


def test_figure_options_are_checked():
    from cosim.plots import FigureOptions

    assert FigureOptions(formats=("PNG", "pdf", "png")).formats == ("png", "pdf")
    for bad, match in (({"formats": ()}, "formats"), ({"formats": ("jpg",)}, "formats"),
                       ({"dpi": math.nan}, "dpi"), ({"dpi": -1}, "dpi"),
                       ({"panel_size_in": (3.0,)}, "panel_size_in"),
                       ({"panel_size_in": (3.0, math.inf)}, "panel_size_in")):
        with pytest.raises(ValueError, match=match):
            FigureOptions(**bad)


def test_an_axis_offset_goes_into_the_label_not_over_it(tmp_path, monkeypatch):
    """Channel uses reach 1e8: Matplotlib's offset text ("1e8"), drawn at the axis end
    where the long x label ran into it, is folded into the label, in `cosim plot`'s
    figures and in the study report's."""
    import matplotlib.pyplot as plt
    import pandas as pd

    from cosim.plots import save_figure
    from cosim.study.report import _plot

    fig, ax = plt.subplots()
    ax.plot([2e7, 1e8], [0.4, 0.8])
    ax.set_xlabel("cumulative channel uses")
    ax.set_ylabel("accuracy")
    (path,) = save_figure(fig, tmp_path / "uses")
    assert path.exists()
    assert ax.get_xlabel() == "cumulative channel uses [1e8]"
    assert not ax.xaxis.get_offset_text().get_visible()
    assert ax.get_ylabel() == "accuracy"  # no offset there: unchanged

    summary = pd.DataFrame({"metric": "test_accuracy", "x_kind": "total", "x": [2e7, 1e8],
                            "mean": [0.4, 0.8], "ci95_low": [0.3, 0.7], "ci95_high": [0.5, 0.9]})
    figures = []
    real_close = plt.close
    monkeypatch.setattr(plt, "close", figures.append)  # keep the report's figure to look at
    assert _plot(summary, [], "test_accuracy", "total", tmp_path / "report.png")
    (report,) = figures
    assert report.axes[0].get_xlabel().endswith("[1e8]")
    real_close(report)


def _run_trace(path, *, algorithm: str, power_dbm: float, seed: int, energy_j: float):
    """A study's trace: its scenario names the algorithm, the budget, the seed and its own
    path; 3 rounds, evaluated, ``energy_j`` joules per round."""
    scenario = (f'name = "study"\nseed = {seed}\nrounds = 3\n[algorithm]\nname = "{algorithm}"\n'
                f'[power]\ntx_power_dbm = {power_dbm}\n[trace]\npath = "{path.as_posix()}"\n')
    with TraceWriter.create(path, scenario, seed=seed, name="study") as writer:
        for t in range(3):
            writer.append_round({"uplink_symbols": 10.0, "downlink_symbols": 100.0,
                                 "cumulative_channel_uses": 110.0 * (t + 1),
                                 "cumulative_uplink_symbols": 10.0 * (t + 1),
                                 "uplink_energy_j": energy_j,
                                 "cumulative_uplink_energy_j": energy_j * (t + 1),
                                 "test_accuracy": 0.3 + 0.1 * t + 0.01 * seed, "ece": 0.1,
                                 "test_nll": 1.0 / (t + 1),
                                 "posterior_mean_accuracy": 0.35 + 0.1 * t})
            writer.append_series("reliability", "bin_accuracy", np.linspace(0, 1, B))
            writer.append_series("reliability", "bin_count", np.full(B, 3.0))
            writer.commit()
    return path


def _ten_runs(directory):
    """10 traces as a study writes them: 2 algorithms x 5 budgets, one seed each but the
    last, whose energy per round spans 1e-4 to 1 J."""
    return [_run_trace(directory / f"{a}-{p}.h5", algorithm=a, power_dbm=p, seed=1 + (i == 9),
                       energy_j=10.0 ** (p / 5 - 4))
            for i, (a, p) in enumerate((a, p) for a in ("bayes_aircomp", "fedavg")
                                       for p in (0.0, 5.0, 10.0, 15.0, 20.0))]


def test_labels_of_many_runs_name_the_keys_in_which_they_differ(tmp_path):
    """The legend labels of several traces are the values of the scenario keys in which
    they differ, in the reader's words (not their paths; the seed last); of traces with
    the same scenario, the algorithm's name with the trace name or seed told apart. Ten
    traces differ in colour, marker or line style."""
    from cosim.plots.style import _trace_linestyle, _trace_style

    paths = _ten_runs(tmp_path)
    labels = trace_labels([read_trace(p) for p in paths])
    assert labels[:2] == ["Proposed, P = 0 dBm, seed 1", "Proposed, P = 5 dBm, seed 1"]
    assert labels[9] == "FedAvg, P = 20 dBm, seed 2"
    assert len(set(labels)) == 10
    one_seed = trace_labels([read_trace(p) for p in paths[5:7]])
    assert one_seed == ["P = 0 dBm", "P = 5 dBm"]  # both FedAvg, seed 1: the budget alone
    alone = trace_labels([read_trace(paths[0])])
    assert alone == ["Proposed"]
    styles = {(s["color"], s["marker"], _trace_linestyle(i)) for i, s in
              enumerate(map(_trace_style, range(10)))}
    assert len(styles) == 10 and _trace_linestyle(9) == "--"  # the 9th on: dashed, other markers


def test_many_runs_get_a_legend_outside_log_axes_and_no_layout_warning(tmp_path, monkeypatch):
    """Ten runs: one legend below the panel, not over the data (one entry for all the
    posterior-mean curves), the figure taller rather than the panel smaller, no layout
    warning; an x that spans over two decades (joules from 1e-4 to 1) on a log scale, the
    round axis not; --log-x / --log-y force a log scale, --no-log-x / --no-log-y a linear one."""
    import warnings

    from cosim.plots import FigureOptions, metric_figure

    traces = [read_trace(p) for p in _ten_runs(tmp_path)]
    labels = trace_labels(traces)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # constrained layout's warnings
        written = plot_traces([t.path for t in traces], tmp_path / "figs",
                              x=["uplink_energy", "rounds"])
        energy = metric_figure(traces, labels, "test_accuracy", "accuracy", "uplink_energy")
        energy.draw_without_rendering()
    assert (tmp_path / "figs" / "accuracy_vs_uplink_energy.png") in written
    ax = energy.axes[0]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "linear"
    assert ax.get_legend() is None and len(energy.legends) == 1
    legend = energy.legends[0]
    texts = [t.get_text() for t in legend.get_texts()]
    assert texts == [*labels, "posterior mean (dashed, the run's colour)"]
    assert legend.get_window_extent().y1 <= ax.get_window_extent().y0  # below the panel
    assert energy.get_figheight() > 2.6  # grown for the legend's rows
    rounds = metric_figure(traces, labels, "test_accuracy", "accuracy", "rounds")
    assert rounds.axes[0].get_xscale() == "linear"
    forced = metric_figure(traces, labels, "test_nll", "NLL", "rounds",
                           FigureOptions(log_x=True, log_y=True))
    assert (forced.axes[0].get_xscale(), forced.axes[0].get_yscale()) == ("log", "log")
    import cosim.plots

    seen = {}
    monkeypatch.setattr(cosim.plots, "plot_traces", lambda *a, **k: seen.update(k) or [])
    assert main(["plot", str(traces[0].path), "--out", str(tmp_path / "x"), "--log-y"]) == 0
    assert (seen["log_x"], seen["log_y"]) == (None, True)
    assert main(["plot", str(traces[0].path), "--out", str(tmp_path / "x"), "--no-log-x"]) == 0
    assert (seen["log_x"], seen["log_y"]) == (False, None)  # forced linear, the other automatic
    linear = metric_figure(traces, labels, "test_accuracy", "accuracy", "uplink_energy",
                           FigureOptions(log_x=False))
    assert linear.axes[0].get_xscale() == "linear"


def test_figures_and_written_files_take_the_users_umask(tmp_path):
    """Figures and the files written whole (a study's status, its report) get the mode a
    plain open gives under the user's umask (0o640 under 027), not mkstemp's 0o600."""
    import os
    import stat

    from cosim.atomic_write import write_text_atomic

    previous = os.umask(0o027)
    try:
        written = plot_traces([_trace(tmp_path / "t.h5", split=True, posterior=False)],
                              tmp_path / "figs")
        write_text_atomic(tmp_path / "status.json", "{}\n")
    finally:
        os.umask(previous)
    for path in (*written, tmp_path / "status.json"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o640, path
