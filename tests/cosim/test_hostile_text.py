"""A study's labels and axis values holding terminal escapes are drawn escaped in the
report's figures (``\\x1b``, as the command line shows them), so are ``cosim plot``'s
labels, and so are TensorBoard's tags and descriptions: nobody who opens a figure's
text or an event file gets the raw control characters."""

from __future__ import annotations

import matplotlib
import pytest
from small_trace import write_small_trace

from cosim.study.file import RUNS_DIR, STUDY_COPY, run_name

HOSTILE = "P\x1b[2J\x1b]0;owned\x07 (dBm)"
SHOWN = "P\\x1b[2J\\x1b]0;owned\\x07 (dBm)"


def _toml(text: str) -> str:
    """``text`` inside a TOML basic string: control characters as ``\\uXXXX``."""
    return "".join(c if c.isprintable() else f"\\u{ord(c):04x}" for c in text)


@pytest.fixture
def figure_texts(monkeypatch):
    """Every text object of every figure saved while the test runs."""
    texts: list[str] = []
    save = matplotlib.figure.Figure.savefig

    def savefig(fig, *args, **kwargs):
        texts.extend(t.get_text() for t in fig.findobj(matplotlib.text.Text))
        return save(fig, *args, **kwargs)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", savefig)
    return texts


def test_escape_sequences_in_study_labels_are_escaped_in_the_figures(tmp_path, figure_texts):
    from cosim.study.report import report

    out = tmp_path / "out"
    (out / RUNS_DIR).mkdir(parents=True)
    (out / STUDY_COPY).write_text(
        'scenario = "x"\nseeds = [1]\n[axes]\n"power.tx_power_dbm" = [10.0, 20.0]\n'
        '"algorithm.name" = ["bayes_aircomp"]\n'
        f'[labels]\n"power.tx_power_dbm" = "{_toml(HOSTILE)}"\n'
        '"algorithm.name=bayes_aircomp" = "ours\\u001b[31m red"\n')
    for power in (10.0, 20.0):
        values = {"power.tx_power_dbm": power, "algorithm.name": "bayes_aircomp"}
        write_small_trace(out / RUNS_DIR / f"{run_name(values, 1)}.h5")
    written = report(out)
    assert any(p.suffix == ".png" and p.name.startswith("final_") for p in written), written
    drawn = "\n".join(figure_texts)
    assert not any(c in drawn for c in "\x1b\x07"), [t for t in figure_texts if "\x1b" in t]
    assert SHOWN in drawn  # the axis label of the final-value figure, and its title
    assert "ours\\x1b[31m red" in drawn  # the legend, from the value's label


def test_escape_sequences_in_plot_labels_are_escaped_in_the_figures(tmp_path, figure_texts):
    from cosim.plots import plot_traces

    traces = [write_small_trace(tmp_path / f"t{i}.h5") for i in range(2)]
    plot_traces(traces, tmp_path / "figs", labels=[HOSTILE, "b"], formats=("png",))
    drawn = "\n".join(figure_texts)
    assert SHOWN in drawn and not any(c in drawn for c in "\x1b\x07")


def test_escape_sequences_in_tensorboard_tags_and_descriptions_are_escaped(tmp_path):
    import tensorflow as tf

    from cosim.engine import RoundRecord
    from cosim.run import TensorBoardScalars

    board = TensorBoardScalars(tmp_path / "board")
    board.write(RoundRecord(round=0, scalars={f"x_{HOSTILE}": 1.0, "test_accuracy": 0.5}))
    board.close()
    tags, descriptions = [], []
    for event_file in (tmp_path / "board").iterdir():
        for event in tf.compat.v1.train.summary_iterator(str(event_file)):
            for value in event.summary.value:
                tags.append(value.tag)
                descriptions.append(value.metadata.summary_description)
    assert sorted(tags) == sorted([f"x_{SHOWN}", "test_accuracy"])
    assert f"x {SHOWN}" in descriptions and "test accuracy" in descriptions
    assert not any("\x1b" in t or "\x07" in t for t in tags + descriptions)
