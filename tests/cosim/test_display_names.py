"""The reader's words (cosim/display_names.py): one table, used by `cosim plot`, the study
report and TensorBoard; raw keys stay in the CSV."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import matplotlib.figure
import numpy as np
import pandas as pd
import pytest
from small_trace import write_small_trace

from cosim import display_names
from cosim.cli import main
from cosim.display_names import axis_label, metric_label, value_label
from cosim.scenario import parse_scenario
from cosim.scenario.tables import PrivacyConfig
from cosim.study import RUNS_DIR, STUDY_COPY, run_name
from cosim.trace import TraceWriter
from learning.catalog import CATALOG, NAMES
from phy.parameters import CHANNEL_MODELS, CSI_MODELS, POWER_CONTROLS, UPLINK_SCHEMES


def test_every_registered_name_has_a_display_name():
    """The algorithms' and the PHY's names carry their labels in their catalogue and
    registries (one list per name), and display_names reads them: a new algorithm's label
    is its catalogue line's, no line here."""
    assert set(display_names.VALUES["algorithm.name"]) == set(NAMES)
    assert all(entry.label for entry in CATALOG.values())
    assert display_names.VALUES["algorithm.name"] == {name: e.label for name, e in CATALOG.items()}
    for key, registry in (("power.control", POWER_CONTROLS), ("channel.model", CHANNEL_MODELS),
                          ("csi.model", CSI_MODELS)):
        assert all(variant.label for variant in registry.values()), key
        assert display_names.VALUES[key] == {name: v.label for name, v in registry.items()}
    assert display_names.VALUES["power.control"]["optimal"] == "KKT power control"
    assert set(display_names.VALUES["uplink.scheme"]) == set(UPLINK_SCHEMES)
    analog = UPLINK_SCHEMES["analog"].label or "analog"  # an entry without a label: its name
    assert value_label("uplink.scheme", "analog") == f"uplink scheme: {analog}"


def test_every_named_key_is_a_scenario_key():
    known = {f"{table}.{key}" for table, keys in parse_scenario({}).model_dump().items()
             if isinstance(keys, dict) for key in keys}
    for table, registry in (("channel", CHANNEL_MODELS), ("csi", CSI_MODELS),
                            ("power", POWER_CONTROLS)):
        known |= {f"{table}.{key}" for variant in registry.values()
                  for key in variant.parameters.model_fields}
    known |= {f"privacy.{key}" for key in PrivacyConfig.model_fields}  # a table off by default
    assert sorted(set(display_names.KEYS) - known - {"seed", "scenario"}) == []  # a study's axes


@pytest.mark.parametrize(("key", "value", "expected"), [
    ("algorithm.name", "bayes_aircomp", "Proposed"),
    ("algorithm.name", "fedgmt", "FedGMT-v2"),
    ("power.tx_power_dbm", 10.0, "P = 10 dBm"),
    ("power.control", "optimal", "power control: KKT power control"),
    ("algorithm.init_std", 0.002476, "initial posterior std = 0.002476"),
    ("data.shuffle", True, "data.shuffle=True"),  # a key the table does not know: raw
])
def test_value_labels(key, value, expected):
    assert value_label(key, value) == expected


def test_a_value_alone_reads_as_a_tick():
    assert display_names.value_text("algorithm.name", "bayes_aircomp") == "Proposed"
    assert display_names.value_text("power.tx_power_dbm", 10.0) == "10"  # the unit: the label's
    assert display_names.value_text("privacy.target_epsilon", "none") == "none"
    assert display_names.value_text("power.control", "optimal") == "KKT power control"
    assert display_names.value_text("power.tx_power_dbm", 20.0, {"power.tx_power_dbm=20": "loud"}) == "loud"


def test_a_studys_labels_win():
    labels = {"algorithm.name=fedavg": "FedAvg (baseline)", "power.tx_power_dbm": "budget",
              "power.tx_power_dbm=20": "loud"}
    assert value_label("algorithm.name", "fedavg", labels) == "FedAvg (baseline)"
    assert value_label("power.tx_power_dbm", 10.0, labels) == "budget = 10 dBm"
    assert value_label("power.tx_power_dbm", 20.0, labels) == "loud"
    assert axis_label("power.tx_power_dbm", labels) == "budget"
    assert axis_label("power.tx_power_dbm") == "P (dBm)"
    assert metric_label("test_nll") == "test NLL (nats)"
    assert metric_label("aggregate_nmse_rho") == "aggregate NMSE, rho phase"


class _Drawn:
    """Every saved figure's legend texts and axis labels (Figure.savefig wrapped)."""

    def __init__(self, monkeypatch):
        self.legends: list[str] = []
        self.axis_labels: list[str] = []
        self.ticks: dict[str, list[str]] = {}  # a figure's x label -> its tick texts
        original = matplotlib.figure.Figure.savefig

        def savefig(fig, *args, **kwargs):
            for legend in [*fig.legends, *(ax.get_legend() for ax in fig.axes)]:
                if legend is not None:
                    self.legends += [t.get_text() for t in legend.get_texts()]
            for ax in fig.axes:
                self.axis_labels += [ax.get_xlabel(), ax.get_ylabel()]
                self.ticks[ax.get_xlabel()] = [t.get_text() for t in ax.get_xticklabels()]
            return original(fig, *args, **kwargs)

        monkeypatch.setattr(matplotlib.figure.Figure, "savefig", savefig)


def _trace(path: Path, algorithm: str) -> Path:
    scenario = f'name = "runs"\nseed = 3\nrounds = 2\n[algorithm]\nname = "{algorithm}"\n'
    with TraceWriter.create(path, scenario, seed=3, name="runs") as writer:
        for t in range(2):
            writer.append_round({"uplink_symbols": 10.0, "downlink_symbols": 100.0,
                                 "cumulative_channel_uses": 110.0 * (t + 1),
                                 "cumulative_uplink_symbols": 10.0 * (t + 1),
                                 "cumulative_downlink_symbols": 100.0 * (t + 1),
                                 "test_accuracy": 0.3 + 0.1 * t, "ece": 0.1, "test_nll": 1.0})
            writer.append_series("reliability", "bin_accuracy", np.linspace(0, 1, 10))
            writer.append_series("reliability", "bin_count", np.full(10, 3.0))
            writer.commit()
    return path


def test_cosim_plot_legends_read_the_algorithms_names(tmp_path, monkeypatch):
    drawn = _Drawn(monkeypatch)
    paths = [_trace(tmp_path / "a.h5", "bayes_aircomp"), _trace(tmp_path / "b.h5", "fedavg")]
    assert main(["plot", *map(str, paths), "--out", str(tmp_path / "fig")]) == 0
    assert {"Proposed", "FedAvg"} <= set(drawn.legends)
    assert not any("bayes_aircomp" in text for text in drawn.legends)
    assert "test NLL (nats/sample)" in drawn.axis_labels


def _small_study(out: Path, axes: dict[str, list], extra: str = "") -> Path:
    """A study directory of small traces (2 seeds) over ``axes``, its copy holding them
    and ``extra`` TOML after them."""
    (out / RUNS_DIR).mkdir(parents=True)
    lines = "".join(f'"{key}" = {json.dumps(values)}\n' for key, values in axes.items())
    (out / STUDY_COPY).write_text(f'scenario = "x"\nseeds = [1, 2]\n[axes]\n{lines}{extra}')
    for values in itertools.product(*axes.values()):
        for seed in (1, 2):
            point = dict(zip(axes, values, strict=True))
            write_small_trace(out / RUNS_DIR / f"{run_name(point, seed)}.h5")
    return out


def test_the_study_reports_legends_and_axes_read_names_and_units(tmp_path, monkeypatch):
    out = _small_study(tmp_path / "out", {"algorithm.name": ["bayes_aircomp", "fedavg"],
                                          "power.tx_power_dbm": [10.0, 20.0]},
                       '[labels]\n"algorithm.name=fedavg" = "FedAvg (baseline)"\n')
    drawn = _Drawn(monkeypatch)
    assert main(["study", "report", str(out)]) == 0
    assert {"Proposed, P = 10 dBm (n = 2: seeds)", "FedAvg (baseline), P = 20 dBm (n = 2: seeds)",
            "Proposed", "FedAvg (baseline)"} <= set(drawn.legends), drawn.legends
    assert "P (dBm)" in drawn.axis_labels and "test accuracy" in drawn.axis_labels
    table = pd.read_csv(out / "table.csv")
    assert set(table["algorithm.name"]) == {"bayes_aircomp", "fedavg"}  # raw keys stay


def test_a_bounded_metrics_band_stops_at_its_range(tmp_path, monkeypatch):
    """Three seeds far apart give a t-interval past 0 and 1 for the test accuracy:
    summary.csv keeps it whole, the figure's band stops at 0 and 1 (fewer seeds draw no
    band: the seeds themselves)."""
    out = tmp_path / "out"
    (out / RUNS_DIR).mkdir(parents=True)
    (out / STUDY_COPY).write_text('scenario = "x"\nseeds = [1, 2, 3]\n[axes]\n"algorithm.name" = ["fedavg"]\n')
    for seed, accuracy in ((1, 0.3), (2, 0.5), (3, 0.9)):
        write_small_trace(out / RUNS_DIR / f"{run_name({'algorithm.name': 'fedavg'}, seed)}.h5",
                          accuracy=accuracy)
    bands: dict[str, tuple[float, float]] = {}
    original = matplotlib.figure.Figure.savefig

    def savefig(fig, *args, **kwargs):
        for ax in fig.axes:
            ys = [path.vertices[:, 1] for c in ax.collections for path in c.get_paths()]
            if ys:
                bands[ax.get_ylabel()] = (min(y.min() for y in ys), max(y.max() for y in ys))
        return original(fig, *args, **kwargs)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", savefig)
    assert main(["study", "report", str(out)]) == 0
    summary = pd.read_csv(out / "summary.csv")
    accuracy = summary[(summary["metric"] == "test_accuracy") & (summary["x_kind"] == "round")]
    assert accuracy["ci95_high"].max() > 1 and accuracy["ci95_low"].min() < 0
    assert bands["test accuracy"] == (0.0, 1.0)


def test_an_axis_of_names_or_of_numbers_and_none_gets_one_tick_per_value(tmp_path, monkeypatch):
    """``privacy.target_epsilon`` mixes ``"none"`` with numbers: its final-value figure has
    one tick per value in the study's order, read as a value alone (the label names the
    key); an axis of names the same, in the reader's words."""
    out = _small_study(tmp_path / "out", {"algorithm.name": ["fedavg", "bayes_aircomp"],
                                          "privacy.target_epsilon": ["none", 10.0, 1.0]})
    drawn = _Drawn(monkeypatch)
    assert main(["study", "report", str(out)]) == 0
    figures = out / "figures"
    for axis in ("algorithm.name", "privacy.target_epsilon"):
        assert (figures / f"final_test_accuracy_vs_{axis}.png").stat().st_size > 1000
    assert drawn.ticks["target epsilon"] == ["none", "10", "1"]
    assert drawn.ticks["algorithm"] == ["FedAvg", "Proposed"]


def test_a_label_naming_no_axis_is_refused(tmp_path, capsys):
    from tiny_scenario import write_tiny

    write_tiny(tmp_path, rounds=1)
    study = tmp_path / "study.toml"
    study.write_text('scenario = "tiny.toml"\nseeds = [1]\n[axes]\n"power.tx_power_dbm" = [10.0]\n'
                     '[labels]\n"power.tx_power_dbm=30" = "loud"\n')
    assert main(["study", "run", str(study), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert 'labels.power.tx_power_dbm=30: names no axis and no axis value' in err
