"""`cosim plot`: the accuracy figure's x-axis (--x), older traces, and posterior.png."""

from __future__ import annotations

import math

import numpy as np
import pytest

from cosim.cli import main
from cosim.plots import ACCURACY_AXES, accuracy_x, plot_traces
from cosim.trace import TraceWriter, read_trace

SCENARIO = 'name = "t"\nseed = 3\nrounds = 4\n'
B = 10


def _trace(path, *, split: bool, posterior: bool, rounds: int = 4):
    """A trace as the engine writes it: uplink 10 + t, downlink 1000 symbols in round t,
    evaluated every round; ``split``: with the cumulative uplink / downlink columns (newer
    traces); ``posterior``: with the proposed method's round metrics."""
    with TraceWriter.create(path, SCENARIO, seed=3, name=path.stem) as writer:
        uplink = downlink = 0.0
        for t in range(rounds):
            uplink, downlink = uplink + 10.0 + t, downlink + 1000.0
            row = {"uplink_symbols": 10.0 + t, "downlink_symbols": 1000.0,
                   "cumulative_channel_uses": uplink + downlink, "test_accuracy": 0.2 + 0.1 * t,
                   "ece": 0.05, "test_nll": 1.0}
            if split:
                row |= {"cumulative_uplink_symbols": uplink, "cumulative_downlink_symbols": downlink}
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
        np.testing.assert_array_equal(accuracy_x(trace, "rounds"), [1.0, 2.0, 3.0, 4.0])
    new.rounds["cumulative_uplink_symbols"][0] = math.nan  # resumed from an older version
    np.testing.assert_array_equal(accuracy_x(new, "uplink"), uplink)
    with pytest.raises(ValueError, match=r"x \(--x\) must be one of 'total', 'uplink', 'rounds', got 'time'"):
        accuracy_x(new, "time")


@pytest.mark.parametrize("x", sorted(ACCURACY_AXES))
def test_plot_option_names_the_figure_after_the_axis(tmp_path, capsys, x):
    new = _trace(tmp_path / "new.h5", split=True, posterior=True)
    old = _trace(tmp_path / "old.h5", split=False, posterior=False)
    out = tmp_path / "figs"
    assert main(["plot", str(new), str(old), "--out", str(out), "--x", x]) == 0
    printed = capsys.readouterr().out.split()
    figure = out / ACCURACY_AXES[x][0]
    assert str(figure) in printed and figure.stat().st_size > 1000
    others = {name for key, (name, _) in ACCURACY_AXES.items() if key != x}
    assert not [p for p in out.iterdir() if p.name in others]
    assert (out / "posterior.png").stat().st_size > 1000  # one of the two traces has the metrics


def test_plot_default_axis_and_bad_axis(tmp_path, capsys):
    trace = _trace(tmp_path / "t.h5", split=False, posterior=False)
    out = tmp_path / "figs"
    written = plot_traces([trace], out)
    assert [p.name for p in written] == ["accuracy_vs_channel_uses.png", "ece.png", "reliability.png"]
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
    assert [p.name for p in written] == ["accuracy_vs_uplink_symbols.png", "ece.png",
                                         "reliability.png", "posterior.png"]
    import matplotlib.pyplot as plt

    image = plt.imread(written[-1])
    assert image.shape[0] > 300 and image.shape[1] > 900
