"""A toy of every kind through the scenario path, and the files each kind takes.

One parametrized test registers a toy of each kind a newcomer adds (a channel model, a
CSI model, a cell layout, a power control, an over-the-air scheme, an FL algorithm, a
trace column) at run time, in the registry a real one would go in, and takes the tiny
scenario with that toy selected (``--set``) through what ``cosim validate`` and
``cosim run`` do: the validation (an unregistered name is refused first, naming its
key), the memory and cost estimates, the privacy projection, one round, the trace (a
column that shows the toy was used) and the health summary.

:data:`FILES_PER_KIND` is what each kind takes: the toy's own module (here a class of
this file) and the file of its registry line (or, for a trace column, the block that
computes it and its line in docs/trace.md). docs/architecture.md's table "Where does my
change go" says the same, row by row (``(N files: `a`, `b`)``): the last test reads it
there and fails if the doc and this dict part. Bounds (issue 60): a power control, a
channel and a trace column at most 2 files; a scheme 1 module plus its registry line; an
algorithm at most 3 (its module, its hyper-parameter model, its catalog line with its
label).

What the counts leave out, said here rather than hidden:

* an algorithm's run is not priced until its cost is measured (``benchmarks/
  study_cost.py`` writes the cost table, data and not code): the toy's estimate is
  ``known = False`` and ``study_cost_lines`` names it "not estimated";
* an algorithm with keys of its own gets its ``[algorithm.<name>]`` sub-table when
  ``cosim/scenario/tables.py`` is imported, so a toy registered at run time has none
  (the toy here has no keys of its own; a real one, written in the 3 files, has them);
* a receive combiner and a scheduling policy are not among the kinds: ``bs.combiner``
  is a ``Literal`` of :data:`phy.parameters.COMBINERS` fixed at import and
  :class:`phy.combiner.ReceiveCombiner` implements every combiner itself by name.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import h5py
import numpy as np
import pytest
from tiny_scenario import write_tiny

from cosim.health import health, health_lines
from cosim.run import run_scenario
from cosim.scenario import load_scenario
from cosim.scenario.derived import memory_estimate_bytes, memory_parts, scenario_num_params
from cosim.scenario.errors import ScenarioError
from cosim.study.cost import run_cost, study_cost_lines

ROOT = Path(__file__).parents[2]

FILES_PER_KIND = {
    "channel model": ("phy/channel.py", "phy/parameters.py"),
    "CSI model": ("phy/csi.py", "phy/parameters.py"),
    "cell layout": ("phy/geometry.py", "phy/parameters.py"),
    "power control": ("phy/power.py", "phy/parameters.py"),
    "over-the-air scheme": ("phy/uplink/NAME.py", "phy/scheme_parameters.py"),
    "FL algorithm": ("learning/algorithms/NAME.py", "learning/hyperparameters.py", "learning/catalog.py"),
    "trace column": ("phy/uplink/block.py", "docs/trace.md"),
}
"""Per kind, the files a new one takes (``NAME``: the new module's own name)."""

BOUNDS = {"channel model": 2, "CSI model": 2, "cell layout": 2, "power control": 2,
          "over-the-air scheme": 2, "FL algorithm": 3, "trace column": 2}
"""Issue 60's bounds (a scheme: 1 module plus its registry line)."""


# --------------------------------------------------------------------------- the toys


class UnfadedChannel:
    """A toy channel model (``phy/channel.py``): every device's channel is
    ``sqrt(path_gain_k)`` on every subcarrier. [K] float32 path gains, a [2] seed ->
    [K, F] complex64."""

    def __init__(self, num_subcarriers: int):
        self.num_subcarriers = int(num_subcarriers)

    def __call__(self, path_gain, seed):
        import tensorflow as tf

        amplitude = tf.cast(tf.sqrt(tf.convert_to_tensor(path_gain, tf.float32)), tf.complex64)
        return tf.broadcast_to(amplitude[:, None], [amplitude.shape[0], self.num_subcarriers])


class HalfCsi:
    """A toy CSI model (``phy/csi.py``): every device believes its channel is half what
    it is, ``h_hat = h / 2``."""

    calls = 0

    def __call__(self, h, path_gain, seed):
        HalfCsi.calls += 1
        return h / 2


def ring(num_devices: int, radius_m: float, min_distance_m: float, rng):
    """A toy cell layout (``phy/geometry.py``): the devices evenly on the circle at half
    the radius (``rng`` unused)."""
    from phy.geometry import Deployment

    del rng
    r = max(radius_m / 2, min_distance_m)
    angle = 2 * np.pi * np.arange(num_devices) / num_devices
    return Deployment(np.stack([r * np.cos(angle), r * np.sin(angle)], axis=1), np.full(num_devices, r))


def scaled_inversion():
    """A toy power control (``phy/power.py``; built lazily: it imports TensorFlow):
    channel inversion scaled down per OFDM symbol to the budget."""
    import tensorflow as tf

    from phy.power import PowerControl

    class ScaledInversion(PowerControl):
        name = "scaled_inversion"

        def __call__(self, delta_abs, u, power_budget_w=None, channel_gain=None, reference_gain=None):
            u = tf.broadcast_to(u, tf.shape(delta_abs))
            live = ~tf.math.is_inf(u)
            power = tf.reduce_sum(tf.where(live, u * tf.cast(delta_abs, tf.float64) ** 2, tf.zeros_like(u)),
                                  -1, keepdims=True)
            scale = tf.sqrt(tf.minimum(tf.ones_like(power),
                                       tf.math.divide_no_nan(tf.cast(power_budget_w, tf.float64), power)))
            return tf.where(live, delta_abs * tf.cast(scale, tf.float32), tf.zeros_like(delta_abs))

    return ScaledInversion()


class ExactScheme:
    """A toy scheme (``phy/uplink/NAME.py``): the exact weighted sum, one symbol per 2F
    values, no energy."""

    carries = "values"
    accounts_privacy = False

    def nominal_symbols(self, grid):
        return -(-grid.num_values // (2 * grid.num_subcarriers))

    def send(self, link, air, *, phase, seed, keep_signals, per_device):
        import tensorflow as tf

        from native.columns import Columns
        from phy.grid import GroupingRule
        from phy.uplink import SchemeResult

        estimate = tf.linalg.matvec(link.updates, link.weights, transpose_a=True)
        symbols = self.nominal_symbols(GroupingRule(int(link.updates.shape[1]), air.num_subcarriers))
        columns = Columns(scalars={f"toy_symbols_{phase}": float(symbols)})
        return SchemeResult(estimate, symbols, np.zeros(int(link.updates.shape[0])), columns)


def toy_algorithm():
    """A toy FL algorithm (``learning/algorithms/NAME.py``): FedAvg that also writes the
    norm of its round's step (its own trace column, named in its ``metrics``)."""
    from learning.algorithms.fedavg import FedAvg

    class ToyAlgorithm(FedAvg):
        def metrics(self, previous, state, phases):
            return {**super().metrics(previous, state, phases),
                    "toy_step_norm": float(np.linalg.norm(np.asarray(state.w) - np.asarray(previous.w)))}

    return ToyAlgorithm


# --------------------------------------------------------------------------- registering them


def _channel(monkeypatch):
    from native.parameters import Variant
    from phy.parameters import CHANNEL_MODELS, FlatRayleighChannel

    class UnfadedParameters(FlatRayleighChannel):
        """Its keys: the path loss exponent (its fading is flat, as the projection reads)."""

    monkeypatch.setitem(CHANNEL_MODELS, "toy", Variant(UnfadedParameters, UnfadedChannel, {"path_loss_exponent": None},
                                                       extras=("num_subcarriers",), label="toy channel"))


def _csi(monkeypatch):
    from native.parameters import Parameters, Variant
    from phy.parameters import CSI_MODELS

    class HalfParameters(Parameters):
        """No keys."""

    HalfCsi.calls = 0
    monkeypatch.setitem(CSI_MODELS, "toy", Variant(HalfParameters, HalfCsi, label="toy CSI"))


def _layout(monkeypatch):
    from native.parameters import Variant
    from phy.parameters import CELL_LAYOUTS, UniformDisk

    class RingParameters(UniformDisk):
        """The disk's keys; its closest distance is the exclusion radius (or more)."""

    monkeypatch.setitem(CELL_LAYOUTS, "toy", Variant(RingParameters, ring, extras=("rng",), label="toy ring"))


def _power(monkeypatch):
    from native.parameters import Variant
    from phy.parameters import POWER_CONTROLS, PowerControlParameters

    class ToyControl(PowerControlParameters):
        """No keys; budgeted (the default)."""

    monkeypatch.setitem(POWER_CONTROLS, "toy", Variant(ToyControl, scaled_inversion, label="toy control"))


def _scheme(monkeypatch):
    from native.parameters import Variant
    from phy.parameters import UPLINK_SCHEMES, SchemeParameters

    class ExactParameters(SchemeParameters):
        """Its memory term ([K_S, n] float32 updates) and its cost term."""

        phase_seconds = 1.0

        def uplink_bytes_per_sender(self, num_values, num_subcarriers):
            return 4 * num_values

    monkeypatch.setitem(UPLINK_SCHEMES, "toy", Variant(ExactParameters, ExactScheme))


def _algorithm(monkeypatch):
    from learning.catalog import CATALOG, Entry
    from learning.hyperparameters import FedAvgParameters

    class ToyParameters(FedAvgParameters):
        """No keys of its own."""

    monkeypatch.setattr(sys.modules[__name__], "ToyAlgorithm", toy_algorithm(), raising=False)
    monkeypatch.setitem(CATALOG, "toy", Entry(("delta",), 1, f"{__name__}:ToyAlgorithm", ToyParameters,
                                              label="toy algorithm"))


def _column(monkeypatch):
    from phy.uplink import RoundLink

    original = RoundLink.columns

    def columns(self):
        out = original(self)
        out.scalars["toy_max_channel_gain"] = float(np.max(out.per_device["mean_channel_gain"]))
        return out

    monkeypatch.setattr(RoundLink, "columns", columns)


def _check_channel(f):
    gain, path_gain = f["rounds/per_device/mean_channel_gain"][()], f["devices/path_gain"][()]
    np.testing.assert_allclose(gain, np.broadcast_to(path_gain, gain.shape), rtol=1e-6)


def _check_csi(f):
    assert HalfCsi.calls > 0
    assert np.all(np.isfinite(f["rounds/aggregate_nmse_delta"][()]))


def _check_layout(f):
    distance = f["devices/distance_m"][()]
    np.testing.assert_allclose(distance, 50.0)


def _check_power(f):
    assert "power_over_budget_delta" in f["rounds"]
    assert np.all(np.isfinite(f["rounds/privacy_epsilon"][()]))


def _check_scheme(f):
    rounds = f["rounds"]
    assert "delta_bar_delta" not in rounds  # the analog chain's own column
    np.testing.assert_array_equal(rounds["uplink_symbols"][()], rounds["toy_symbols_delta"][()])


def _check_algorithm(f):
    assert np.all(f["rounds/toy_step_norm"][()] > 0.0)


def _check_column(f):
    np.testing.assert_array_equal(f["rounds/toy_max_channel_gain"][()],
                                  f["rounds/per_device/mean_channel_gain"][()].max(axis=1))


_PRIVACY = "privacy.delta=1e-5"


@dataclass(frozen=True)
class Toy:
    """One kind's toy: how it is registered, the ``--set`` that selects it (``key`` the
    key refused before it is registered; None for a column, which nothing selects), what
    its trace shows, and what its privacy projection and cost estimate are."""

    register: Callable
    sets: tuple[str, ...]
    key: str | None
    check: Callable
    projection: str = "finite"  # "finite", or "refused": [privacy] is refused naming the key
    priced: bool = True
    extra_sets: tuple[str, ...] = field(default=("trace.per_device=true",))


TOYS = {
    "channel model": Toy(_channel, ('channel.model="toy"',), "channel.model", _check_channel),
    "CSI model": Toy(_csi, ('csi.model="toy"',), "csi.model", _check_csi),
    "cell layout": Toy(_layout, ('cell.layout="toy"',), "cell.layout", _check_layout),
    "power control": Toy(_power, ('power.control="toy"', "power.tx_power_dbm=-60"), "power.control", _check_power),
    "over-the-air scheme": Toy(_scheme, ('uplink.scheme="toy"',), "uplink.scheme", _check_scheme,
                               projection="refused"),
    "FL algorithm": Toy(_algorithm, ('algorithm.name="toy"',), "algorithm.name", _check_algorithm, priced=False),
    "trace column": Toy(_column, (), None, _check_column),
}


@pytest.mark.parametrize("kind", list(TOYS))
def test_a_toy_of_every_kind_takes_the_scenario_path(kind, tmp_path, monkeypatch):
    """The toy, registered at run time, validates, is estimated (memory, cost), projected
    (``[privacy]``), runs a round, shows in the trace and gets a health summary; before
    it is registered its name is refused naming its key."""
    toy = TOYS[kind]
    path = write_tiny(tmp_path, rounds=1, every=1, algorithm="fedavg", hidden=4)
    sets = [*toy.sets, *toy.extra_sets]
    if toy.key is not None:
        with pytest.raises(ScenarioError, match=rf"{re.escape(toy.key)}: must be one of"):
            load_scenario(path, overrides=sets)
    toy.register(monkeypatch)

    # cosim validate: the scenario, the memory and cost estimates, the privacy projection
    scenario = load_scenario(path, overrides=sets)
    d = scenario_num_params(scenario)
    parts = memory_parts(scenario, d)
    assert 0 < memory_estimate_bytes(scenario, d) <= sum(parts.values())
    cost = run_cost(scenario, d)
    assert cost.known == toy.priced
    if toy.priced:
        assert cost.total_core_s > 0
    else:
        assert "not estimated (no measured cost): toy on mlp" in "\n".join(study_cost_lines([scenario]))
    if toy.projection == "refused":
        with pytest.raises(ScenarioError, match=rf"{re.escape(toy.key)}"):
            load_scenario(path, overrides=[*sets, _PRIVACY])
    else:
        from cosim import privacy

        scenario = load_scenario(path, overrides=[*sets, _PRIVACY])
        projection = privacy.project(scenario, d)
        assert 0.0 < projection.epsilon < float("inf"), projection.assumes

    # cosim run: one round, the trace, the health summary
    summary = run_scenario(scenario, progress=False)
    with h5py.File(summary.trace_path, "r") as f:
        assert f["rounds/round"].shape == (1,)
        toy.check(f)
    lines = health_lines(health(summary.trace_path))
    assert lines and all(isinstance(line, str) for line in lines)


def _doc_rows() -> dict[str, tuple[int, tuple[str, ...]]]:
    """docs/architecture.md's "Where does my change go": per row that says
    ``a new <kind> (N files: `a`, `b`)``, its N and its files."""
    text = (ROOT / "docs/architecture.md").read_text()
    section = text.split("## Where does my change go", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for match in re.finditer(r"^\| a new (.+?) \((\d+) files?: ((?:`[^`]+`(?:, )?)+)\) \|", section, re.MULTILINE):
        rows[match[1]] = (int(match[2]), tuple(re.findall(r"`([^`]+)`", match[3])))
    return rows


def test_the_doc_s_files_per_change_are_the_toys():
    """Each kind's files are within issue 60's bound, exist (the toy's own module aside),
    and docs/architecture.md's row for the kind names the same files and their count."""
    rows = _doc_rows()
    for kind, files in FILES_PER_KIND.items():
        assert len(files) <= BOUNDS[kind], kind
        for name in files:
            assert "NAME" in name or (ROOT / name).is_file(), name
        assert rows.get(kind) == (len(files), files), (kind, rows.get(kind))
    assert set(TOYS) == set(FILES_PER_KIND)
