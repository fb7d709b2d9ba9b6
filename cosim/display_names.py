"""The reader's words: one table of display names and units for what the figures show.

Traces, CSV and Parquet keep the raw keys (``algorithm.name = "bayes_aircomp"``,
``test_nll``); legends, axis labels, titles and TensorBoard descriptions use the names
here ("Proposed", "test NLL (nats)", "P = 10 dBm"). ``cosim plot``
(:mod:`cosim.plots`), the study report (:mod:`cosim.study.report`) and ``cosim run
--tensorboard`` (:mod:`cosim.run`) read this one table; a study file overrides a label
in its ``[labels]`` table (``docs/studies.md``). Imports nothing heavy.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from learning.catalog import CATALOG  # pydantic only: the algorithms with their labels
from phy.parameters import (  # pydantic only: the registries, names with their labels
    CHANNEL_MODELS,
    COMBINERS,
    CSI_MODELS,
    POWER_CONTROLS,
    SCHEDULING,
    UPLINK_SCHEMES,
)

__all__ = [
    "KEYS",
    "METRICS",
    "VALUES",
    "axis_label",
    "metric_label",
    "value_key",
    "value_label",
    "value_text",
]


def _labels(registry: Mapping[str, object]) -> dict[str, str]:
    """``{name: display name}`` of a registry's entries (their ``label``; the name itself
    where an entry has none, e.g. one a notebook registers)."""
    return {name: getattr(entry, "label", "") or name for name, entry in registry.items()}


VALUES: dict[str, dict[str, str]] = {
    "algorithm.name": _labels(CATALOG),
    "power.control": _labels(POWER_CONTROLS),
    "channel.model": _labels(CHANNEL_MODELS),
    "csi.model": _labels(CSI_MODELS),
    "uplink.scheme": _labels(UPLINK_SCHEMES),
    "algorithm.estimator": {
        "reparameterization": "exact reparameterization",
        "local_reparameterization": "local reparameterization",
    },
    "ofdm.domain": {"frequency": "frequency domain", "time": "time domain"},
    "bs.combiner": _labels(COMBINERS),
    "participation.scheduling": _labels(SCHEDULING),
    "participation.straggler_policy": {"drop": "dropped", "fewer_steps": "fewer steps"},
}
"""Categorical key -> raw value -> display name. A value of ``algorithm.name`` is a
label by itself ("Proposed"); other keys' values are labelled as they stand here. The
algorithms' names come with their labels from their catalogue
(:data:`learning.catalog.CATALOG`), the PHY's from their registries
(:mod:`phy.parameters`: ``POWER_CONTROLS``, ``CHANNEL_MODELS``, ``CSI_MODELS``,
``UPLINK_SCHEMES``, ``COMBINERS``, ``SCHEDULING``), read when this module is imported."""

KEYS: dict[str, tuple[str, str | None]] = {
    "algorithm.name": ("algorithm", None),
    "algorithm.learning_rate": ("η", None),
    "algorithm.covariance_learning_rate": ("covariance step size", None),
    "algorithm.init_std": ("initial posterior std", None),
    "algorithm.init": ("initial posterior", None),
    "algorithm.local_steps": ("local steps E", None),
    "algorithm.mc_samples": ("samples M", None),
    "algorithm.estimator": ("estimator", None),
    "algorithm.covariance_parameter": ("covariance parameter", None),
    "power.control": ("power control", None),
    "power.tx_power_dbm": ("P", "dBm"),
    "power.noise_power_dbm": ("noise power", "dBm"),
    "power.tci_gain_threshold": ("TCI gain threshold", None),
    "channel.model": ("channel", None),
    "channel.num_taps": ("channel taps", None),
    "channel.path_loss_exponent": ("path-loss exponent", None),
    "csi.model": ("CSI", None),
    "uplink.scheme": ("uplink scheme", None),
    "csi.nmse_db": ("CSI NMSE", "dB"),
    "cell.num_devices": ("K", "devices"),
    "cell.radius_m": ("R", "m"),
    "data.mean_samples_per_device": ("mean samples per device", None),
    "data.labels_per_device": ("labels per device", None),
    "data.dataset": ("dataset", None),
    "ofdm.domain": ("OFDM", None),
    "ofdm.num_subcarriers": ("subcarriers F", None),
    "sync.timing_offset_max_samples": ("max timing offset", "samples"),
    "sync.cfo_max_subcarriers": ("max CFO", "subcarrier spacings"),
    "sync.precompensate": ("pre-compensation", None),
    "bs.num_antennas": ("BS antennas N_r", None),
    "bs.combiner": ("combiner", None),
    "participation.fraction": ("scheduled share of devices", None),
    "participation.scheduling": ("scheduling", None),
    "participation.dropout_probability": ("dropout probability", None),
    "participation.bs_knows_dropouts": ("BS knows dropouts", None),
    "participation.deadline_s": ("deadline", "s"),
    "participation.straggler_policy": ("stragglers", None),
    "privacy.target_epsilon": ("target epsilon", None),
    "privacy.clip_norm": ("clip norm", None),
    "seed": ("seed", None),
    "scenario": ("scenario", None),
}
"""Scenario key -> (display name, unit or None); ``seed`` and ``scenario`` are a study's
own axes (``scenario``: its base scenarios, :data:`cosim.study.file.SCENARIO_AXIS`)."""

METRICS: dict[str, tuple[str, str | None]] = {
    "test_accuracy": ("test accuracy", None),
    "test_nll": ("test NLL", "nats"),
    "ece": ("ECE", None),
    "posterior_mean_accuracy": ("test accuracy, posterior mean", None),
    "posterior_mean_nll": ("test NLL, posterior mean", "nats"),
    "posterior_mean_ece": ("ECE, posterior mean", None),
    "train_loss": ("training loss", None),
    "posterior_std_p50": ("posterior std, median", None),
    "precision_rel_change": ("relative precision change per round", None),
    "cumulative_channel_uses": ("cumulative channel uses", "OFDM symbols"),
    "cumulative_uplink_symbols": ("cumulative uplink", "OFDM symbols"),
    "uplink_seconds": ("uplink air time per round", "s"),
    "uplink_energy_j": ("device transmit energy per round", "J"),
    "cumulative_uplink_seconds": ("cumulative uplink air time", "s"),
    "cumulative_uplink_energy_j": ("cumulative device transmit energy", "J"),
    "privacy_epsilon": ("privacy epsilon so far", None),
    "privacy_epsilon_round": ("privacy epsilon of the round", None),
    "round": ("round", None),
}
"""Trace column -> (display name, unit or None); ``aggregate_nmse_<phase>`` and
``aggregate_error_<phase>`` are named by :func:`metric_label` for any phase."""


METRIC_RANGES: dict[str, tuple[float, float]] = {
    "test_accuracy": (0.0, 1.0),
    "ece": (0.0, 1.0),
    "posterior_mean_accuracy": (0.0, 1.0),
    "posterior_mean_ece": (0.0, 1.0),
    "test_nll": (0.0, math.inf),
    "posterior_mean_nll": (0.0, math.inf),
}
"""Trace column -> the values it can take, ``(low, high)``: where a figure stops a
metric's confidence band (a t-interval over few seeds can pass 1 for an accuracy)."""


def metric_range(metric: str) -> tuple[float, float]:
    """The values ``metric`` can take (:data:`METRIC_RANGES`; unbounded when not listed)."""
    return METRIC_RANGES.get(metric, (-math.inf, math.inf))


def _with_unit(name: str, unit: str | None) -> str:
    return f"{name} ({unit})" if unit else name


def _number(value: float) -> str:
    return f"{value:g}" if math.isfinite(value) else str(value)


def _named(key: str, value: str) -> str:
    """A string value's display name: a base scenario (a study's ``scenario`` axis) as
    written less ``.toml`` (``"places/umi"``, ``"munich_quickstart"``), other keys' from
    :data:`VALUES` (the value itself where it has none)."""
    if key == "scenario":
        return value.removesuffix(".toml")
    return VALUES.get(key, {}).get(value, value)


def value_key(key: str, value) -> str:
    """``"key=value"``, the name a study's ``[labels]`` gives one axis value: strings
    bare, integral floats as integers (``"power.tx_power_dbm=10"``), as in run names."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return f"{key}={_inline(value)}"


def _inline(value):
    """A table-valued axis value (``privacy.clip_norm = {rho = 1.0, nu = 0.5}``) as TOML
    writes it inline; any other value as it is."""
    if isinstance(value, dict):
        from cosim.scenario.as_toml import toml_value

        return toml_value(value)
    return value


def axis_label(key: str, overrides: Mapping[str, str] | None = None) -> str:
    """``"P (dBm)"`` for ``"power.tx_power_dbm"``: the key's display name with its unit;
    the raw key when the table does not know it. ``overrides`` (a study's ``[labels]``)
    maps a key to its label and wins."""
    if overrides and key in overrides:
        return overrides[key]
    if key in KEYS:
        return _with_unit(*KEYS[key])
    return key


def metric_label(metric: str) -> str:
    """``"test NLL (nats)"`` for ``"test_nll"``; ``aggregate_nmse_rho`` reads
    ``"aggregate NMSE, rho phase"``; an unknown column reads with spaces for underscores."""
    if metric in METRICS:
        return _with_unit(*METRICS[metric])
    for prefix, name in (("aggregate_nmse_", "aggregate NMSE"),
                         ("aggregate_error_", "aggregate squared error")):
        if metric.startswith(prefix):
            return f"{name}, {metric[len(prefix):]} phase"
    return metric.replace("_", " ")


def value_text(key: str, value, overrides: Mapping[str, str] | None = None) -> str:
    """One axis value alone, as a tick under the axis's label shows it (the label carries
    the name and unit): ``"Proposed"``, ``"10"`` for ``power.tx_power_dbm = 10.0``,
    ``"truncated inversion"``, ``"none"``. A study's ``[labels]`` entry for
    ``"key=value"`` wins."""
    value = _inline(value)
    raw = value_key(key, value)
    if overrides and raw in overrides:
        return overrides[raw]
    if isinstance(value, str):
        return _named(key, value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    return _number(float(value))


def value_label(key: str, value, overrides: Mapping[str, str] | None = None) -> str:
    """One axis value in the reader's words: ``"Proposed"`` for ``algorithm.name =
    "bayes_aircomp"``, ``"P = 10 dBm"`` for ``power.tx_power_dbm = 10.0``, ``"power
    control: truncated inversion"``; ``key=value`` for a key the table does not know.
    ``overrides`` (a study's ``[labels]``) maps ``"key=value"`` (or the key alone, for
    its name) to a label and wins."""
    value = _inline(value)
    raw = value_key(key, value)
    if overrides and raw in overrides:
        return overrides[raw]
    if key == "algorithm.name" and isinstance(value, str):
        return VALUES[key].get(value, value)
    if key not in KEYS and not (overrides and key in overrides):
        return f"{key}={value}"
    name, unit = KEYS.get(key, (key, None))
    if overrides and key in overrides:
        name = overrides[key]
    if isinstance(value, str):
        return f"{name}: {_named(key, value)}"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"{name} = {value}"
    shown = _number(float(value))
    return f"{name} = {shown} {unit}" if unit else f"{name} = {shown}"
