"""Scenario files: TOML validated into frozen pydantic models, overrides, derived quantities.

A scenario is everything a run needs, in one frozen, validated object::

    scenario = load_scenario("scenarios/quickstart.toml", ["cell.num_devices=20"])
    scenario = load_scenario("paper_mnist")   # a shipped scenario by name
    scenario.cell.radius_m            # 300.0
    scenario.power.noise_power_w      # linear units as properties
    scenario.algorithm.hyper_parameters()   # kwargs for learning.algorithms.build

Defaults equal the paper's Tables I-II (``table:SimulSetup``, ``table:HyperParam``)
for its MNIST set-up wherever the paper gives a value; every key, unit and source
is listed in ``docs/scenarios.md``. Every problem is reported as one line naming
the full dotted key and the bad value (``cell.radius_m: must be > 0 (got -5.0)``),
with the nearest valid key for a misspelling (or the table that has the key),
through :class:`ScenarioError`; every case tried is in ``docs/faults.md``.

Values are type-checked strictly (TOML is typed: ``radius_m = "300"`` is an error,
an integer is accepted where a float is expected; no float key takes ``nan`` or
``inf``). Arrays become tuples, so a scenario is immutable all the way down.

A valid scenario may still be too large for the machine: :func:`check_resources`
compares its memory estimate with the memory available and raises
:class:`ScenarioTooLarge` (a :class:`ScenarioError`) naming the keys that drive the
size; d comes from :func:`model_num_params`, arithmetic only, so nothing is allocated.

The shipped scenarios (the repository's ``scenarios/``, installed as the package
``cosim.scenarios``: one copy of each file) are listed by :func:`shipped_scenarios`;
:func:`load_scenario` takes a bare shipped name (``paper_mnist``) for a file that does
not exist. Nothing here imports TensorFlow (``cosim validate`` and ``cosim scenarios``
start without it).
"""

from __future__ import annotations

import difflib
import itertools
import math
import os
import re
import string
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

import tomli_w
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    create_model,
    model_validator,
)
from pydantic.fields import FieldInfo

from learning.catalog import CATALOG, NAMES  # no TensorFlow
from learning.hyperparameters import AlgorithmParameters, check_init
from learning.runtime import (  # stdlib only
    BACKENDS,
    DEVICE_CHUNK,
    NOISE_SOURCES,
    ResolvedRuntime,
    Runtime,
    resolve,
)
from native.parameters import Variant, deep_tuple, positive_or_keyword
from phy.limits import (  # stdlib only
    CELL_MODELS,
    L_MAX_MARGIN,
    MIN_DISTANCE_M,
    last_tap_lag,
)
from phy.parameters import (  # pydantic only
    CELL_LAYOUTS,
    CHANNEL_MODELS,
    CSI_MODELS,
    DB_LIMIT,
    POWER_CONTROLS,
)
from phy.units import dbm_to_w  # stdlib only (no NumPy, no TensorFlow)

__all__ = [
    "DB_LIMIT",
    "Overrides",
    "Scenario",
    "ScenarioError",
    "ScenarioTooLarge",
    "ShippedScenario",
    "available_memory_bytes",
    "check_resources",
    "default_scenario_text",
    "describe",
    "downlink_values",
    "image_shape",
    "load_scenario",
    "memory_estimate_bytes",
    "migrate_table",
    "model_num_params",
    "parse_scenario",
    "read_toml",
    "scenario_num_params",
    "scenario_to_toml",
    "shipped_scenario_path",
    "shipped_scenarios",
    "shipped_scenarios_dir",
    "symbols_per_phase",
    "toml_value",
    "uplink_phase_values",
    "with_overrides",
]

# --------------------------------------------------------------------------- helpers


def _bool_or_keyword(keyword: str):
    def check(value: Any) -> Any:
        if value == keyword or isinstance(value, bool):
            return value
        raise ValueError(f"must be {keyword!r}, true or false")

    return BeforeValidator(check)


class _Section(BaseModel):
    # allow_inf_nan=False: every float key (arrays of floats included) refuses nan and
    # +-inf, which TOML and --set both accept (``tx_power_dbm = nan``)
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


def _require(condition: bool, field: str, message: str) -> None:
    """Cross-field check; the ``field: `` prefix lets errors name the field path."""
    if not condition:
        raise ValueError(f"{field}: {message}")


class _VariantTable(_Section):
    """A table whose ``_key`` picks one variant of ``_registry`` (:func:`variant_table`)."""

    _registry: ClassVar[Mapping[str, Variant]] = {}
    _table: ClassVar[str] = ""
    _key: ClassVar[str] = ""

    @model_validator(mode="after")
    def _check_variant(self) -> _VariantTable:
        name = getattr(self, self._key)
        for key in self._registry[name].parameters.required_keys():
            _require(getattr(self, key) is not None, key,
                     f"required by {self._table}.{self._key} = {name!r}")
        try:  # the variant's own rules across its keys, named in full ("cell.radius_m")
            self._registry[name].parameters.check(**self.variant_values())
        except ValueError as error:
            key, _, rule = str(error).partition(": ")
            for other in self.variant_values():
                rule = re.sub(rf"(?<![\w.]){other}\b", f"{self._table}.{other}", rule)
            raise ValueError(f"{key}: {rule}") from None
        return self

    def variant_values(self) -> dict[str, Any]:
        """The chosen variant's keys and values (for :meth:`native.parameters.Variant.build`)."""
        keys = self._registry[getattr(self, self._key)].parameters.model_fields
        return {key: getattr(self, key) for key in keys}


def variant_table(registry: Mapping[str, Variant], *, table: str, key: str,
                  default: str) -> type[_VariantTable]:
    """The base model of a table whose ``key`` picks one of ``registry``'s variants
    (:mod:`phy.parameters`): ``key`` and every variant's keys, as the variant's model
    declares them (bounds, defaults). A key the chosen variant requires must be set
    (``"csi.nmse_db: required by csi.model = 'gaussian'"``); the other variants' keys
    are accepted and validated but not used, so one file can sweep ``key``."""
    fields: dict[str, Any] = {key: (Literal[tuple(registry)], default)}
    for variant in registry.values():
        for name, info in variant.parameters.model_fields.items():
            if name in fields:
                continue
            if info.is_required():  # optional in the table; required by the variant
                fields[name] = (info.annotation | None, FieldInfo.merge_field_infos(info, default=None))
            else:
                fields[name] = (info.annotation, info)
    model = create_model(f"_{table.title()}Table", __base__=_VariantTable, **fields)
    model._registry, model._table, model._key = registry, table, key
    return model


# --------------------------------------------------------------------------- sections


class CellConfig(variant_table(CELL_LAYOUTS, table="cell", key="layout", default="uniform_disk")):
    """Device drop around the BS at the origin (paper: uniform in a 300 m disk, K = 100); each
    layout's keys and rules are declared by its parameters in :mod:`phy.parameters`."""

    @model_validator(mode="after")
    def _check(self) -> CellConfig:
        _require(self.min_distance_m < self.radius_m, "min_distance_m",
                 f"must be < cell.radius_m = {self.radius_m} (got {self.min_distance_m})")
        if self.layout == "explicit":  # what the positions must satisfy beyond their layout's own rules
            _require(len(self.positions_m) == self.num_devices, "positions_m",
                     f"must have cell.num_devices = {self.num_devices} rows (got {len(self.positions_m)})")
            for i, (x, y) in enumerate(self.positions_m):
                r = math.hypot(x, y)
                _require(r <= self.radius_m, "positions_m",
                         f"row {i} [{x}, {y}] is {r:.2f} m from the BS, outside "
                         f"[cell.min_distance_m, cell.radius_m] = [{self.min_distance_m}, {self.radius_m}]")
        return self


class ChannelConfig(variant_table(CHANNEL_MODELS, table="channel", key="model", default="iid_rayleigh")):
    """Block-fading small-scale channel with path loss r^-alpha (paper: i.i.d. Rayleigh,
    alpha = 4), or a 3GPP TR 38.901 cell (UMi, UMa, RMa) with its own path loss and shadow
    fading; each model's keys and rules are declared by its parameters in :mod:`phy.parameters`."""


NR_NORMAL_CP_FRACTION = 144 / 2048
"""5G NR's normal cyclic prefix as a fraction of the FFT size (TS 38.211 5.3.1: 144 of
2048 samples at numerology 0, the same fraction at every numerology but the symbols at
0.5 ms boundaries)."""


class OfdmConfig(_Section):
    """Resource grid (paper: F = 1024 subcarriers; the spacing matters only for TDL, 3GPP cells
    and the time-domain uplink)."""

    num_subcarriers: int = Field(1024, ge=1)
    subcarrier_spacing_hz: float = Field(30e3, gt=0)
    domain: Literal["frequency", "time"] = "frequency"
    cyclic_prefix_length: int | None = Field(None, ge=0)

    @property
    def cyclic_prefix_samples(self) -> int:
        """C: ``cyclic_prefix_length``, or NR's normal prefix ``round(F 144 / 2048)`` when unset
        (72 at F = 1024)."""
        if self.cyclic_prefix_length is not None:
            return self.cyclic_prefix_length
        return round(self.num_subcarriers * NR_NORMAL_CP_FRACTION)

    @property
    def bandwidth_hz(self) -> float:
        """B = F Delta_f, the sampling rate of the time-domain uplink [Hz]."""
        return self.num_subcarriers * self.subcarrier_spacing_hz

    @model_validator(mode="after")
    def _check(self) -> OfdmConfig:
        if self.cyclic_prefix_length is not None:
            _require(self.cyclic_prefix_length <= self.num_subcarriers, "cyclic_prefix_length",
                     f"must be at most ofdm.num_subcarriers = {self.num_subcarriers}, got "
                     f"{self.cyclic_prefix_length}")
        return self


class SyncConfig(_Section):
    """Per-device timing and carrier frequency offsets of the time-domain uplink
    (``phy/sync.py``; the paper assumes perfect synchronisation)."""

    timing_offset_max_samples: float = Field(0.0, ge=0)
    cfo_max_subcarriers: float = Field(0.0, ge=0, le=0.5)
    precompensate: Literal["none", "timing", "cfo", "both"] = "none"


class CsiConfig(variant_table(CSI_MODELS, table="csi", key="model", default="perfect")):
    """What each device knows of its own channel (paper: perfect local CSI); each model's
    keys are declared by its parameters in :mod:`phy.parameters`."""


class PowerConfig(variant_table(POWER_CONTROLS, table="power", key="control", default="optimal")):
    """Uplink power control and the receiver's scaling (paper: P = 20 dBm, sigma_z^2 = -74 dBm,
    gamma = sigma_z^2); each control's own keys are declared in :mod:`phy.parameters`."""

    tx_power_dbm: float = Field(20.0, ge=-DB_LIMIT, le=DB_LIMIT)
    noise_power_dbm: float = Field(-74.0, ge=-DB_LIMIT, le=DB_LIMIT)
    gamma: Annotated[str | float, positive_or_keyword("noise_power")] = "noise_power"

    @property
    def tx_power_w(self) -> float:
        """Per-OFDM-symbol power budget P in watts."""
        return dbm_to_w(self.tx_power_dbm)

    @property
    def noise_power_w(self) -> float:
        """Noise power sigma_z^2 per subcarrier in watts."""
        return dbm_to_w(self.noise_power_dbm)

    @property
    def gamma_w(self) -> float:
        """Power-scaling coefficient gamma in watts (``"noise_power"`` -> sigma_z^2)."""
        return self.noise_power_w if self.gamma == "noise_power" else float(self.gamma)


class DownlinkConfig(_Section):
    """Digital multicast of the global model (not in the paper's tables)."""

    bs_tx_power_dbm: float = Field(30.0, ge=-DB_LIMIT, le=DB_LIMIT)
    bits_per_value: int = Field(32, ge=1)

    @property
    def bs_tx_power_w(self) -> float:
        return dbm_to_w(self.bs_tx_power_dbm)


class BsConfig(_Section):
    """The base station's receive antennas and combiner (``phy/combiner.py``; the paper: one
    antenna). With ``num_antennas`` N_r > 1 the uplink channel is ``[K, N_r, F]`` (every
    ``channel.model``; the 3GPP cells with a uniform linear array) and the BS combines its
    antennas with a unit-norm ``m_f`` per subcarrier; the devices see ``m_f^H h_kf``."""

    num_antennas: int = Field(1, ge=1)
    combiner: Literal["mrc_strongest", "centroid", "maxmin"] = "centroid"


_DATASET_SHAPES = {"mnist": ((28, 28, 1), 10), "cifar100": ((32, 32, 3), 100)}
_CONVNETS = ("cnn", "resnet56")


def image_shape(input_shape: Sequence[int]) -> tuple[int, int, int]:
    """``(H, W, C)`` of an input shape of 1 to 3 sizes, padded with trailing ones
    (as ``learning.datasets`` pads a synthetic shape)."""
    shape = tuple(int(n) for n in input_shape)
    return (*shape, *(1,) * (3 - len(shape)))[:3]


class DataConfig(_Section):
    """Dataset and its partition (paper MNIST: Poisson sizes of mean 10, one label per device)."""

    dataset: Literal["mnist", "cifar100", "synthetic"] = "mnist"
    data_dir: str | None = None
    partition: Literal["labels_per_device", "dirichlet", "iid"] = "labels_per_device"
    labels_per_device: int = Field(1, ge=1)
    dirichlet_alpha: float = Field(0.1, gt=0)
    mean_samples_per_device: float = Field(10.0, gt=0)
    size_distribution: Literal["poisson", "shifted_poisson"] = "poisson"
    synthetic_classes: int = Field(10, ge=2)
    synthetic_shape: Annotated[tuple[int, ...], BeforeValidator(deep_tuple)] = (28, 28, 1)
    synthetic_train_size: int = Field(10000, ge=1)
    synthetic_test_size: int = Field(2000, ge=1)
    test_subset: int | None = Field(None, ge=1)

    @model_validator(mode="after")
    def _check(self) -> DataConfig:
        _require(1 <= len(self.synthetic_shape) <= 3 and all(s >= 1 for s in self.synthetic_shape),
                 "synthetic_shape",
                 f"must be 1 to 3 positive ints [H, W, C] (got {list(self.synthetic_shape)})")
        if self.size_distribution == "shifted_poisson":
            _require(self.mean_samples_per_device >= 1, "mean_samples_per_device",
                     f"must be >= 1 with data.size_distribution = 'shifted_poisson' "
                     f"(1 + Poisson(mean - 1)) (got {self.mean_samples_per_device})")
        if self.partition == "labels_per_device":
            limit = (f"data.synthetic_classes = {self.num_classes}" if self.dataset == "synthetic"
                     else f"{self.num_classes}, the classes of data.dataset = {self.dataset!r}")
            _require(self.labels_per_device <= self.num_classes, "labels_per_device",
                     f"must be <= {limit} (got {self.labels_per_device})")
        return self

    @property
    def num_classes(self) -> int:
        """C: 10 (MNIST), 100 (CIFAR-100) or ``synthetic_classes``."""
        return _DATASET_SHAPES[self.dataset][1] if self.dataset in _DATASET_SHAPES else self.synthetic_classes

    @property
    def input_shape(self) -> tuple[int, ...]:
        """Shape of one input: (28, 28, 1), (32, 32, 3) or ``synthetic_shape``."""
        return _DATASET_SHAPES[self.dataset][0] if self.dataset in _DATASET_SHAPES else self.synthetic_shape


class ModelConfig(_Section):
    """Network (paper MNIST: 784-256x5-10 MLP, d = 466,698; CIFAR-100: ResNet-56)."""

    architecture: Literal["mlp", "cnn", "resnet56"] = "mlp"
    hidden_units: Annotated[tuple[int, ...], BeforeValidator(deep_tuple)] = (256, 256, 256, 256, 256)

    @model_validator(mode="after")
    def _check(self) -> ModelConfig:
        _require(all(h >= 1 for h in self.hidden_units), "hidden_units",
                 f"must be positive ints (got {list(self.hidden_units)})")
        return self


# The algorithms' hyper-parameters are declared once, in learning.hyperparameters, one
# model per algorithm named by the catalog; [algorithm] is built from them below.


def _fields(model: type[BaseModel], keys: Sequence[str]) -> dict[str, Any]:
    """``create_model`` field definitions copied from ``model`` (bounds, validators, defaults)."""
    return {key: (model.model_fields[key].annotation, model.model_fields[key]) for key in keys}


def _sub_table(name: str, parameters: type[AlgorithmParameters]) -> type[_Section]:
    """``[algorithm.<name>]``: the algorithm's own keys, as its model declares them."""
    return create_model(f"{parameters.__name__}Table", __base__=_Section,
                        __doc__=f"[algorithm.{name}]: {parameters.__doc__}",
                        **_fields(parameters, parameters.own_keys()))


class _AlgorithmTable(_Section):
    """The FL algorithm and its local training (paper MNIST: eta = 0.1, E = 3, M = 5, lambda = K).

    The common keys and the proposed method's sit directly in ``[algorithm]``; a
    baseline's own keys live in its sub-table (``[algorithm.fedprox]`` ...). Every key is
    declared by its algorithm's model in :mod:`learning.hyperparameters`.
    """

    @model_validator(mode="after")
    def _check_init(self) -> _AlgorithmTable:
        if hasattr(self, "init"):
            check_init(self.init, self.init_std)
        return self

    def kl_scale_value(self, num_devices: int) -> float:
        """lambda in lambda_k = lambda pi_k / d (eq. ``localLoss``): K for ``"num_devices"``."""
        return float(num_devices) if self.kl_scale == "num_devices" else float(self.kl_scale)

    def hyper_parameters(self, num_devices: int | None = None) -> dict[str, Any]:
        """Keyword arguments for ``learning.algorithms.build(name, model, K, **hyper)``:
        the keys of the algorithm's model (:mod:`learning.hyperparameters`), read from
        ``[algorithm]`` and its sub-table; ``kl_scale`` resolved to a number when
        ``num_devices`` is given (:meth:`Scenario.hyper_parameters` does that)."""
        entry = CATALOG[self.name]
        hyper: dict[str, Any] = {key: getattr(self, key) for key in AlgorithmParameters.model_fields}
        own = getattr(self, self.name, None) if entry.own_table else self
        hyper |= {key: getattr(own, key) for key in entry.parameters.own_keys()}
        if "kl_scale" in hyper and num_devices is not None:
            hyper["kl_scale"] = self.kl_scale_value(num_devices)
        return hyper


_FLAT = [entry.parameters for entry in CATALOG.values() if not entry.own_table]
AlgorithmConfig = create_model(
    "AlgorithmConfig",
    __base__=_AlgorithmTable,
    __doc__=_AlgorithmTable.__doc__,
    name=(Literal[NAMES], "bayes_aircomp"),
    **_fields(AlgorithmParameters, list(AlgorithmParameters.model_fields)),
    **{key: value for parameters in _FLAT for key, value in
       _fields(parameters, parameters.own_keys()).items()},
    **{name: (table, table()) for name, entry in CATALOG.items()
       if entry.own_table and entry.parameters.own_keys()
       for table in [_sub_table(name, entry.parameters)]},
)


class RuntimeConfig(_Section):
    """How the local training runs (:mod:`learning.runtime`): none of these keys changes the
    method; ``backend``, ``noise`` and ``jit_compile`` change the random numbers or the
    float rounding."""

    backend: Literal[BACKENDS] = "auto"
    noise: Literal[NOISE_SOURCES] = "auto"
    jit_compile: Annotated[str | bool, _bool_or_keyword("auto")] = "auto"
    device_loop: Annotated[str | bool, _bool_or_keyword("auto")] = "auto"
    device_chunk: int = Field(DEVICE_CHUNK, ge=1)

    def runtime(self) -> Runtime:
        """The :class:`learning.runtime.Runtime` of these keys (``"auto"`` -> None)."""
        return Runtime(
            backend=self.backend, noise=self.noise,
            jit_compile=None if self.jit_compile == "auto" else self.jit_compile,
            device_loop=None if self.device_loop == "auto" else self.device_loop,
            device_chunk=self.device_chunk,
        )


class EvalConfig(_Section):
    """Evaluation of the global model (S posterior samples, B reliability bins)."""

    every: int = Field(1, ge=1)
    predictive_samples: int = Field(10, ge=1)
    ece_bins: int = Field(10, ge=1)


class TraceConfig(_Section):
    """The HDF5 trace (schema in docs/trace.md)."""

    path: str = "runs/{name}-seed{seed}.h5"
    per_device: bool = True
    signals: bool = False
    signal_rounds: Annotated[tuple[int, ...], BeforeValidator(deep_tuple)] = ()
    checkpoint_every: int = Field(1, ge=1)

    @model_validator(mode="after")
    def _check(self) -> TraceConfig:
        try:
            fields = {f for _, f, _, _ in string.Formatter().parse(self.path) if f is not None}
        except ValueError as exc:
            raise ValueError(f"path: {exc} (got {self.path!r})") from None
        _require(fields <= {"name", "seed"}, "path",
                 f"only {{name}} and {{seed}} placeholders are allowed (got {self.path!r})")
        _require(all(r >= 0 for r in self.signal_rounds), "signal_rounds",
                 f"must be >= 0 (got {list(self.signal_rounds)})")
        return self

    def records_signals(self, round_index: int) -> bool:
        """True when the raw signals of ``round_index`` go to /signals (empty list = every round)."""
        return self.signals and (not self.signal_rounds or round_index in self.signal_rounds)


class Scenario(_Section):
    """A complete, validated scenario (frozen). Sections as attributes."""

    name: str = Field("quickstart", pattern=r"^[A-Za-z0-9._-]+$")
    seed: int = Field(1, ge=0, le=2**31 - 1)
    rounds: int = Field(30, ge=1)
    cell: CellConfig = CellConfig()
    channel: ChannelConfig = ChannelConfig()
    ofdm: OfdmConfig = OfdmConfig()
    sync: SyncConfig = SyncConfig()
    csi: CsiConfig = CsiConfig()
    power: PowerConfig = PowerConfig()
    downlink: DownlinkConfig = DownlinkConfig()
    bs: BsConfig = BsConfig()
    data: DataConfig = DataConfig()
    model: ModelConfig = ModelConfig()
    algorithm: AlgorithmConfig = AlgorithmConfig()
    eval: EvalConfig = EvalConfig()
    trace: TraceConfig = TraceConfig()
    runtime: RuntimeConfig = RuntimeConfig()

    @model_validator(mode="after")
    def _check(self) -> Scenario:
        if self.ofdm.domain == "frequency":
            for key in ("timing_offset_max_samples", "cfo_max_subcarriers"):
                value = getattr(self.sync, key)
                _require(value == 0.0, f"sync.{key}",
                         f"= {value:g} needs ofdm.domain = \"time\" (the frequency-domain "
                         "uplink is perfectly synchronised)")
        else:
            # the channel's last tap (phy.limits, as ofdm_time.from_paths) must be at most
            # F + C - 1; TDL's and the 3GPP cells' later paths are cut (and counted), the
            # delay lines of the Rayleigh models must fit
            timing = self.sync.timing_offset_max_samples
            taps = {"iid_rayleigh": self.channel.num_taps, "flat_rayleigh": 1}.get(
                self.channel.model, 1)
            longest = last_tap_lag(timing + taps - 1)
            period = self.ofdm.num_subcarriers + self.ofdm.cyclic_prefix_samples
            key = ("sync.timing_offset_max_samples" if timing > 0 or taps == 1
                   else "channel.num_taps")
            value = timing if key.startswith("sync") else taps
            _require(longest < period, key,
                     f"= {value:g}: the delayed channel (last tap at lag {longest} with "
                     f"channel.num_taps = {taps} and Sionna's {L_MAX_MARGIN} sinc taps) must be shorter than "
                     f"an OFDM symbol with its prefix, ofdm.num_subcarriers + "
                     f"cyclic_prefix = {period} samples")
        if self.channel.model in CELL_MODELS:
            channel = self.channel
            _require(self.cell.min_distance_m >= MIN_DISTANCE_M, "cell.min_distance_m",
                     f"= {self.cell.min_distance_m:g} m: channel.model = {channel.model!r} needs "
                     f"devices at least {MIN_DISTANCE_M:g} m from the BS (TR 38.901 Table 7.4.1-1)")
        self.resolved_runtime()  # "runtime.key: what (got value)" for what cannot run
        if self.model.architecture in _CONVNETS:
            h, w, _ = image_shape(self.data.input_shape)
            _require(min(h, w) >= 4, "data.synthetic_shape",
                     f"must be at least 4 x 4 pixels [H, W, C] for model.architecture = "
                     f"{self.model.architecture!r} (got {list(self.data.synthetic_shape)})")
        return self

    @property
    def trace_path(self) -> Path:
        """``trace.path`` with ``{name}`` and ``{seed}`` filled in."""
        return Path(self.trace.path.format(name=self.name, seed=self.seed))

    def resolved_runtime(self) -> ResolvedRuntime:
        """``[runtime]`` with every ``"auto"`` decided for this algorithm, architecture and
        estimator (:func:`learning.runtime.resolve`; ValueError naming the key)."""
        return resolve(self.runtime.runtime(), algorithm=self.algorithm.name,
                       architecture=self.model.architecture, estimator=self.algorithm.estimator)

    def hyper_parameters(self) -> dict[str, Any]:
        """``algorithm.hyper_parameters(K)`` with K = ``cell.num_devices`` (kl_scale a number)."""
        return self.algorithm.hyper_parameters(self.cell.num_devices)

    def to_toml(self) -> str:
        """The resolved scenario (every key, defaults included) as TOML text."""
        return scenario_to_toml(self)


# --------------------------------------------------------------------------- errors


class ScenarioError(Exception):
    """A scenario that cannot be used: one line per problem, ``field.path: what (got value)``.

    Attributes
    ----------
    problems : list[str]
        One message per problem, each starting with the dotted field path.
    source : str or None
        The file (or ``"--set"``) the problems come from.
    """

    def __init__(self, problems: Sequence[str], source: str | None = None):
        self.problems = list(problems)
        self.source = source
        super().__init__(self._headline() + "".join(f"\n  {p}" for p in self.problems))

    def _headline(self) -> str:
        return f"invalid scenario {self.source}:" if self.source else "invalid scenario:"


class ScenarioTooLarge(ScenarioError):
    """A valid scenario whose memory estimate exceeds the memory available (:func:`check_resources`).

    Attributes
    ----------
    estimate_bytes, available_bytes : int
        :func:`memory_estimate_bytes` and :func:`available_memory_bytes` at the check.
    """

    def __init__(self, problems: Sequence[str], source: str | None = None, *,
                 estimate_bytes: int, available_bytes: int):
        self.estimate_bytes = int(estimate_bytes)
        self.available_bytes = int(available_bytes)
        super().__init__(problems, source)

    def _headline(self) -> str:
        return f"scenario {self.source} does not fit in memory:" if self.source else \
            "scenario does not fit in memory:"


def _sub_model(model: type[BaseModel], key: str) -> type[BaseModel] | None:
    field = model.model_fields.get(key)
    if field is None:
        return None
    annotation = field.annotation
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def _model_at(path: Sequence[str]) -> type[BaseModel] | None:
    """The section model at a dotted path (``()`` -> Scenario), or None."""
    model: type[BaseModel] | None = Scenario
    for key in path:
        model = _sub_model(model, key) if model is not None else None
    return model


def _is_key(path: Sequence[str]) -> bool:
    """Whether a dotted path names a key of the scenario (``["cell", "radius_m"]``)."""
    parent = _model_at(path[:-1])
    return bool(path) and parent is not None and path[-1] in parent.model_fields


def _key_paths(model: type[BaseModel], prefix: str = "") -> list[str]:
    """Every dotted key under ``model`` (``"cell.radius_m"``, ...), tables included."""
    paths = []
    for key in model.model_fields:
        paths.append(prefix + key)
        sub = _sub_model(model, key)
        if sub is not None:
            paths.extend(_key_paths(sub, f"{prefix}{key}."))
    return paths


def _did_you_mean(model: type[BaseModel], key: str) -> str:
    """The nearest key of ``model``'s table, else the same key in another table
    (``[power] radius_m`` -> ``'cell.radius_m'``), then the table's valid keys."""
    valid = list(model.model_fields)
    close = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
    elsewhere = [path for path in _key_paths(Scenario) if path.rsplit(".", 1)[-1] == key]
    hint = (f"did you mean {close[0]!r}? " if close
            else f"did you mean {' or '.join(map(repr, elsewhere))}? " if elsewhere else "")
    return f"{hint}valid keys: {', '.join(valid)}"


_TYPE_WORDS = {
    "float_type": "must be a number", "int_type": "must be an integer",
    "string_type": "must be a string", "bool_type": "must be true or false",
    "tuple_type": "must be an array", "model_type": "must be a table",
    "dict_type": "must be a table", "int_from_float": "must be an integer",
    "finite_number": "must be a finite number, not nan or inf",
}
_BOUND_WORDS = {"greater_than": ("gt", ">"), "greater_than_equal": ("ge", ">="),
                "less_than": ("lt", "<"), "less_than_equal": ("le", "<=")}


MOVED_KEYS = {
    "algorithm.weight_sampler": (
        "moved to the [runtime] table: \"fused\" is the default runtime.backend = \"auto\", "
        "\"tensorflow\" is runtime.backend = \"tensorflow\" with runtime.noise = \"tensorflow\""
    ),
}
"""Keys of earlier versions, with where they went (the error names the new keys)."""


def migrate_table(table: dict[str, Any]) -> dict[str, Any]:
    """A scenario table written by an earlier version, in today's keys (for traces: a
    run started before ``[runtime]`` existed resumes). ``algorithm.weight_sampler`` becomes
    ``[runtime]``'s backend and noise; a missing ``[runtime]`` table gets its defaults.
    Returns a new dict; scenario *files* are not migrated (:data:`MOVED_KEYS` errors)."""
    table = {key: dict(value) if isinstance(value, dict) else value for key, value in table.items()}
    if "runtime" not in table:
        table["runtime"] = RuntimeConfig().model_dump()
    sampler = table.get("algorithm", {}).pop("weight_sampler", None)
    if sampler == "tensorflow":
        table["runtime"] |= {"backend": "tensorflow", "noise": "tensorflow"}
    return table


def _describe_error(error: dict[str, Any]) -> str:
    loc = [str(part) for part in error["loc"]]
    kind, ctx, value = error["type"], error.get("ctx") or {}, error.get("input")
    got = f" (got {value!r})"
    if kind == "extra_forbidden":
        if ".".join(loc) in MOVED_KEYS:
            return f"{'.'.join(loc)}: {MOVED_KEYS['.'.join(loc)]}"
        section = _model_at(loc[:-1])
        hint = f"; {_did_you_mean(section, loc[-1])}" if section is not None else ""
        return f"{'.'.join(loc)}: unknown key{hint}"
    if kind == "missing":
        return f"{'.'.join(loc)}: required key is missing"
    if kind == "literal_error":
        message = f"must be one of {ctx.get('expected')}"
    elif kind in _BOUND_WORDS:
        name, op = _BOUND_WORDS[kind]
        bound = ctx.get(name)
        message = f"must be {op} {bound:g}" if isinstance(bound, (int, float)) else f"must be {op} {bound}"
    elif kind in _TYPE_WORDS:
        message = _TYPE_WORDS[kind]
    elif kind == "value_error":
        message = str(ctx.get("error", error["msg"]))
        # a cross-field check's "key: ..." or "table.key: ..." (relative to the section at loc)
        match = re.match(r"^(\w+(?:\.\w+)*): (.*)$", message, flags=re.S)
        if match and _is_key([*loc, *match.group(1).split(".")]):
            return ".".join([*loc, match.group(1)]) + ": " + match.group(2)
    elif kind in ("too_long", "too_short"):
        limit = ctx.get("max_length") if kind == "too_long" else ctx.get("min_length")
        message = f"must have {'at most' if kind == 'too_long' else 'at least'} {limit} items"
    elif kind == "string_pattern_mismatch":
        message = "may only contain letters, digits, '.', '_' and '-'"
    else:
        message = error["msg"][0].lower() + error["msg"][1:]
    # items of arrays: positions_m.0.1 -> positions_m[0][1]
    path = loc[0] if loc else "<root>"
    for part in loc[1:]:
        path += f"[{part}]" if part.isdigit() else f".{part}"
    return f"{path}: {message}{'' if '(got' in message else got}"


def parse_scenario(data: dict[str, Any], source: str | None = None) -> Scenario:
    """Validate a parsed TOML document into a :class:`Scenario` (ScenarioError on failure)."""
    try:
        return Scenario.model_validate(data)
    except ValidationError as exc:
        raise ScenarioError([_describe_error(e) for e in exc.errors(include_url=False)], source) from None


# --------------------------------------------------------------------------- loading


def shipped_scenarios_dir() -> Path:
    """The directory of the shipped scenario files.

    The repository's ``scenarios/`` is installed as the package ``cosim.scenarios``
    (``pyproject.toml``'s package-dir mapping: a wheel copies it to
    ``cosim/scenarios/``, an editable install maps the name onto the repository's
    directory), so there is one copy of every file. A source tree used without
    installing it, or an editable install made before the mapping existed, falls back
    to the ``scenarios/`` next to the ``cosim/`` directory.
    """
    try:
        from cosim import scenarios as package
    except ImportError:
        package = None
    location = getattr(package, "__file__", None)  # None for a namespace package
    if location is None:
        return Path(__file__).resolve().parent.parent / "scenarios"
    return Path(location).resolve().parent


@dataclass(frozen=True)
class ShippedScenario:
    """One shipped file, as ``cosim scenarios`` lists it.

    Attributes
    ----------
    name : str
        A scenario's file name without ``.toml`` (what ``cosim run NAME`` takes); a
        script's file name (``compare_mnist.sh``, run with ``bash PATH``).
    description : str
        The file's first comment line without its ``#`` (a shebang line is skipped);
        empty when it has none.
    path : Path
        The installed file.
    """

    name: str
    description: str
    path: Path


def _first_comment(path: Path) -> str:
    """The first ``#`` comment line of ``path`` that is not a shebang, without the
    ``#``; empty when there is none or the file cannot be read."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return ""
    for line in lines:
        text = line.strip()
        if text.startswith("#") and not text.startswith("#!") and text.lstrip("#").strip():
            return text.lstrip("#").strip()
    return ""


def shipped_scenarios() -> list[ShippedScenario]:
    """Every shipped scenario (``*.toml``, by name) and then every shipped script
    (``*.sh``, by name), from :func:`shipped_scenarios_dir`."""
    directory = shipped_scenarios_dir()
    tomls, scripts = sorted(directory.glob("*.toml")), sorted(directory.glob("*.sh"))
    return [ShippedScenario(p.stem, _first_comment(p), p) for p in tomls] + [
        ShippedScenario(p.name, _first_comment(p), p) for p in scripts
    ]


SHIPPED_STUDIES = "studies"
"""The shipped study files' subdirectory of :func:`shipped_scenarios_dir` (``cosim study
run NAME`` takes one by name; docs/studies.md)."""


def shipped_studies() -> list[ShippedScenario]:
    """Every shipped study file (``studies/*.toml``, by name)."""
    directory = shipped_scenarios_dir() / SHIPPED_STUDIES
    return [ShippedScenario(p.stem, _first_comment(p), p) for p in sorted(directory.glob("*.toml"))]


def _shipped(path: str | Path, directory: Path) -> Path | None:
    p = Path(path)
    if len(p.parts) != 1 or p.name in (".", ".."):
        return None
    candidate = directory / f"{p.name.removesuffix('.toml')}.toml"
    return candidate if candidate.is_file() else None


def shipped_scenario_path(path: str | Path) -> Path | None:
    """The shipped scenario a bare name (``paper_mnist`` or ``paper_mnist.toml``, no
    directory part) stands for, or None."""
    return _shipped(path, shipped_scenarios_dir())


def shipped_study_path(path: str | Path) -> Path | None:
    """The shipped study a bare name (``pow_alloc_mnist``, no directory part) stands
    for, or None."""
    return _shipped(path, shipped_scenarios_dir() / SHIPPED_STUDIES)


def default_scenario_text() -> str:
    """The default scenario: the shipped ``quickstart.toml`` (:func:`shipped_scenarios_dir`)."""
    return (shipped_scenarios_dir() / "quickstart.toml").read_text(encoding="utf-8")


_KEY_PATH = re.compile(r"[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)*")

Overrides = Sequence[str] | Mapping[str, Any]
"""``--set`` items (``["cell.num_devices=20"]``, TOML values) or a mapping of dotted
keys to Python values (``{"cell.num_devices": 20}``); see :func:`load_scenario`."""


def _parse_override(item: str) -> tuple[list[str], Any]:
    key, sep, raw = item.partition("=")
    key = key.strip()
    if not sep or not key or not _KEY_PATH.fullmatch(key):
        raise ScenarioError([f"{item!r}: an override must look like key.path=value"], "--set")
    try:
        value = tomllib.loads(f"v = {raw.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw.strip()  # a bare string: --set name=run7
    return key.split("."), value


def _plain(value: Any) -> Any:
    """A Python value as TOML would give it: NumPy scalars and arrays and tuples become
    Python numbers and lists (recursively, tables too); anything else is left to the
    validation (which refuses what a TOML file could not hold)."""
    if hasattr(value, "tolist") and type(value).__module__ == "numpy":
        return value.tolist()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _override_items(overrides: Overrides, source: str) -> list[tuple[list[str], Any]]:
    """``(key path, value)`` pairs of ``--set`` items or of a mapping of dotted keys."""
    if isinstance(overrides, str):
        raise TypeError(f"overrides must be a sequence of key.path=value items or a mapping, "
                        f"not a single string ({overrides!r}); wrap it in a list")
    if not isinstance(overrides, Mapping):
        return [_parse_override(item) for item in overrides]
    items = []
    for key, value in overrides.items():
        if not isinstance(key, str) or not _KEY_PATH.fullmatch(key):
            raise ScenarioError([f"{key!r}: an override key must be a dotted key path such as "
                                 "'cell.radius_m'"], source)
        items.append((key.split("."), _plain(value)))
    return items


def _apply_override(data: dict[str, Any], path: list[str], value: Any, source: str = "--set") -> None:
    model: type[BaseModel] | None = Scenario
    node = data
    for i, key in enumerate(path):
        if model is None or key not in model.model_fields:
            prefix = ".".join(path[:i])
            where = f"{prefix}." if prefix else ""
            if f"{where}{key}" in MOVED_KEYS:
                raise ScenarioError([f"{where}{key}: {MOVED_KEYS[where + key]}"], source)
            hint = f"; {_did_you_mean(model, key)}" if model is not None else ""
            raise ScenarioError([f"{where}{key}: unknown key{hint}"], source)
        if i == len(path) - 1:
            node[key] = value
            return
        child = node.setdefault(key, {})
        if not isinstance(child, dict):
            raise ScenarioError([f"{'.'.join(path[: i + 1])}: is a value, not a table"], source)
        node, model = child, _sub_model(model, key)


def _apply_overrides(data: dict[str, Any], overrides: Overrides) -> str:
    """Apply ``overrides`` to the parsed document ``data`` in order; what they are
    called in the validation's headline (``--set overrides`` or ``overrides``). A bad
    key's error has the source ``--set`` or ``overrides``."""
    source = "overrides" if isinstance(overrides, Mapping) else "--set"
    for path, value in _override_items(overrides, source):
        _apply_override(data, path, value, source)
    return "overrides" if source == "overrides" else "--set overrides"


def read_toml(
    path: str | Path | None,
    source: str,
    *,
    text: str | None = None,
    error: type[ScenarioError] | None = None,
    missing_hint: str = "",
) -> dict[str, Any]:
    """The table of the TOML file ``path`` (or of ``text``), or ``error`` (default
    :class:`ScenarioError`) with one line: file not found (plus ``missing_hint``),
    cannot read, or the TOML syntax error with its line."""
    error = error or ScenarioError
    if text is None:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except FileNotFoundError:
            raise error([f"file not found: {path}{missing_hint}"], source) from None
        except (OSError, UnicodeDecodeError) as exc:
            raise error([f"cannot read {path}: {exc}"], source) from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise error([f"TOML syntax error: {exc}"], source) from None


def load_scenario(path: str | Path | None = None, overrides: Overrides = ()) -> Scenario:
    """Read, override and validate a scenario.

    Parameters
    ----------
    path : str, Path or None
        A TOML file; None -> the default (the shipped quickstart). A bare name with
        no directory part that is not an existing file (``paper_mnist`` or
        ``paper_mnist.toml``) is the shipped scenario of that name
        (:func:`shipped_scenarios`); an existing file of that name wins.
    overrides : sequence of str, or mapping of str to value
        ``key.path=value`` items (``--set``); the value is parsed as a TOML value
        (``20``, ``1e-3``, ``"x"``, ``[1, 2]``, ``true``), falling back to a bare
        string. Or a mapping of the same dotted keys to Python values
        (``{"algorithm.learning_rate": 0.02, "rounds": 3}``; lists or tuples for
        arrays, NumPy scalars and arrays accepted, no string parsing: ``"20"`` is a
        string; None sets an optional key to None, its default). Applied in order
        and validated exactly like the file: the same one-line errors naming the
        dotted key and the value, with ``--set`` / ``overrides`` as their source.

    Raises
    ------
    ScenarioError
        Missing file, TOML syntax error (with its line), unknown or misspelled key,
        wrong type, out-of-range value, inconsistent fields.
    """
    if path is not None and not Path(path).exists():
        path = shipped_scenario_path(path) or path
    source = "<default quickstart>" if path is None else str(path)
    if path is None:
        data = read_toml(None, source, text=default_scenario_text())
    else:
        hint = ""
        if len(Path(path).parts) == 1 and not Path(path).exists():  # not a shipped name either
            names = ", ".join(s.name for s in shipped_scenarios() if s.path.suffix == ".toml")
            hint = f" (nor a shipped scenario: {names}; `cosim scenarios` lists them)"
        data = read_toml(path, source, missing_hint=hint)
    if overrides:
        source = f"{source} with {_apply_overrides(data, overrides)}"
    return parse_scenario(data, source)


def with_overrides(scenario: Scenario, overrides: Overrides) -> Scenario:
    """A new scenario: ``scenario`` with ``overrides`` applied, validated again.

    This is how to derive a variant of a scenario in Python. pydantic's
    ``scenario.model_copy(update=...)`` does *not* validate: it would keep a bad value,
    and a table given as a dict stays a plain dict (a run then fails far from the
    cause, or writes a trace whose scenario does not load back). Here the scenario's
    values are re-validated with the overrides exactly as :func:`load_scenario`
    validates a file with ``--set`` (so ``with_overrides(s, {})`` also checks a
    scenario that was built by ``model_copy``).

    Parameters
    ----------
    scenario : Scenario
        The base scenario (unchanged; scenarios are frozen).
    overrides : mapping of str to value, or sequence of str
        As in :func:`load_scenario`: ``{"rounds": 3, "power.tx_power_dbm": 10.0}`` or
        ``["rounds=3"]``.

    Returns
    -------
    Scenario

    Raises
    ------
    ScenarioError
        An unknown key (with the nearest valid one), a wrong type, an out-of-range
        value or inconsistent fields, one line each.
    """
    data = scenario.model_dump(mode="python", warnings=False)  # a model_copy'd dict table too
    source = repr(scenario.name)
    if overrides:
        source = f"{source} with {_apply_overrides(data, overrides)}"
    return parse_scenario(_plain(data), source)


# --------------------------------------------------------------------------- TOML output


_TOML_SCALARS = (bool, int, float, str)


def toml_value(value: Any) -> str:
    """The TOML text of one value on one line, as ``--set key=value`` takes it: a bool,
    int, float (nan, inf and -inf as such), str, or a tuple or list of those (nested
    too). ``tomllib.loads(f"v = {text}")["v"]`` gives the value back (a tuple as a
    list). A TypeError for anything else.

    tomli-w writes every scalar; an array is joined here, because tomli-w always breaks
    a non-empty array over several lines and a ``--set`` item must be one line.
    """
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if not isinstance(value, _TOML_SCALARS):
        raise TypeError(f"cannot write {value!r} as TOML")
    return tomli_w.dumps({"v": value}).removeprefix("v = ").removesuffix("\n")


def _toml_table(model: BaseModel) -> dict[str, Any]:
    """``model``'s keys in field order as plain data: sub-models as nested tables,
    tuples as lists, None values left out."""
    table: dict[str, Any] = {}
    for key in type(model).model_fields:
        value = getattr(model, key)
        if isinstance(value, BaseModel):
            table[key] = _toml_table(value)
        elif value is not None:
            table[key] = _plain(value)
    return table


def scenario_to_toml(scenario: Scenario) -> str:
    """Every key of ``scenario`` (defaults resolved, None omitted) as TOML; loads back equal.

    Written by tomli-w: a table's scalars before its sub-tables, each in field order
    (arrays over several lines, one element a line)."""
    return tomli_w.dumps(_toml_table(scenario))


# --------------------------------------------------------------------------- derived quantities

def symbols_per_phase(num_values: int, num_subcarriers: int) -> int:
    """OFDM symbols N = ceil(num_values / F) that carry one phase (the grouping rule).

    Paper MNIST: ceil(466,698 / 1024) = 456 = N1 = N2 (``table:SimulSetup``).
    """
    if num_values < 1:
        raise ValueError(f"num_values must be >= 1 (got {num_values})")
    if num_subcarriers < 1:
        raise ValueError(f"num_subcarriers must be >= 1 (got {num_subcarriers})")
    return -(-int(num_values) // int(num_subcarriers))


def uplink_phase_values(scenario: Scenario, num_params: int) -> dict[str, int]:
    """Real values each device sends per phase, ``{phase name: values}``, for ``num_params`` = d."""
    return CATALOG[scenario.algorithm.name].phase_values(num_params)


def downlink_values(scenario: Scenario, num_params: int) -> int:
    """Real values the BS multicasts per round (2d for the proposed method)."""
    return CATALOG[scenario.algorithm.name].downlink_values(num_params)


def model_num_params(
    architecture: str,
    input_shape: Sequence[int],
    num_classes: int,
    hidden_units: Sequence[int] = (256,) * 5,
) -> int:
    """d, the number of weights of ``learning.models.build_model(...)`` with the same
    arguments, by arithmetic alone: no TensorFlow, no allocation, any size (a hidden
    layer of 10^8 units gives d = 7.9e10 without touching memory).

    The layer shapes are those of ``learning.models.MLP`` (dense ReLU layers
    ``prod(input_shape)``-``hidden_units``-C, each kernel and bias),
    ``learning.convnets.CNN`` and ``learning.convnets.ResNet56`` (9 blocks per stage);
    a test holds the two equal. Convnets take ``input_shape`` padded to ``(H, W, C)``
    (:func:`image_shape`), as the engine does. ``hidden_units`` is used by the MLP only.

    Raises
    ------
    ValueError
        An unknown ``architecture``.
    """
    c_out = int(num_classes)
    if architecture == "mlp":
        widths = [math.prod(int(n) for n in input_shape), *(int(h) for h in hidden_units), c_out]
        return sum(n_in * n_out + n_out for n_in, n_out in itertools.pairwise(widths))
    h, w, channels = image_shape(input_shape)
    if architecture == "cnn":  # conv3x3(32)-pool-conv3x3(64)-pool-dense(128)-dense(C)
        flat = (h // 4) * (w // 4) * 64
        return 9 * channels * 32 + 32 + 9 * 32 * 64 + 64 + flat * 128 + 128 + 128 * c_out + c_out
    if architecture == "resnet56":  # conv3x3 + batch-norm scale and shift per layer
        def conv_bn(n_in: int, n_out: int) -> int:
            return 9 * n_in * n_out + 2 * n_out

        total, n_in = conv_bn(channels, 16), 16
        for width in (16, 32, 64):
            for _ in range(9):
                total += conv_bn(n_in, width) + conv_bn(width, width)
                n_in = width
        return total + 64 * c_out + c_out
    raise ValueError(f"architecture must be one of 'mlp', 'cnn', 'resnet56', got {architecture!r}")


def scenario_num_params(scenario: Scenario) -> int:
    """d of the scenario's model (``model.*`` on ``data.*``'s input shape and classes),
    by :func:`model_num_params`: no TensorFlow, any size."""
    return model_num_params(scenario.model.architecture, scenario.data.input_shape,
                            scenario.data.num_classes, scenario.model.hidden_units)


def _vectors_per_device(scenario: Scenario) -> int:
    """c of :func:`memory_estimate_bytes`: float32 d-vectors held per device."""
    alg = scenario.algorithm
    if alg.name == "bayes_aircomp":
        return 4 + 2 * alg.mc_samples if alg.estimator == "reparameterization" else 4
    return 4 if CATALOG[alg.name].downlink == 2 else 3


def memory_estimate_bytes(scenario: Scenario, num_params: int) -> int:
    """Rough peak memory of one local step for all K devices plus one AirComp phase, in bytes.

    ``4 K d c + 8 K N F`` with ``N = ceil(max phase values / F)`` (the complex64 grid
    [K, N, F]) and ``c`` float32 vectors of length d per device: for ``bayes_aircomp``
    ``c = 4 + 2 M`` with the reparameterization estimator (local parameter, its
    gradient, the other local vector, the update, and M weight samples plus M noise
    draws) and ``c = 4`` with the local reparameterization estimator (no weight
    samples); ``c = 3`` for FedAvg-like algorithms (weights, gradient, update) and
    ``c = 4`` for those with a second d-vector (SCAFFOLD, FedSMOO). Activations and
    TensorFlow workspace are not included.
    """
    k, d, c = scenario.cell.num_devices, int(num_params), _vectors_per_device(scenario)
    n = symbols_per_phase(max(uplink_phase_values(scenario, d).values()), scenario.ofdm.num_subcarriers)
    return 4 * k * d * c + 8 * k * n * scenario.ofdm.num_subcarriers


def available_memory_bytes(meminfo_path: str | Path = "/proc/meminfo") -> int | None:
    """Memory a new allocation can get now, in bytes: ``MemAvailable`` of ``/proc/meminfo``
    (Linux), else free physical pages times the page size (``os.sysconf``); None when
    neither can be read."""
    try:
        with open(meminfo_path, encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024  # the file counts kB
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, AttributeError):
        return None


def _size_keys(scenario: Scenario, num_params: int) -> list[str]:
    """``table.key = value`` of the keys that drive :func:`memory_estimate_bytes`."""
    s = scenario
    keys = [f"cell.num_devices = {s.cell.num_devices}"]
    if s.model.architecture == "mlp":
        keys.append(f"model.hidden_units = {list(s.model.hidden_units)}")
    else:
        keys.append(f"model.architecture = {s.model.architecture!r}")
    if s.data.dataset == "synthetic":
        keys.append(f"data.synthetic_shape = {list(s.data.synthetic_shape)}")
    if s.algorithm.name == "bayes_aircomp" and s.algorithm.estimator == "reparameterization":
        keys.append(f"algorithm.mc_samples = {s.algorithm.mc_samples}")
    values = max(uplink_phase_values(s, num_params).values())
    f = s.ofdm.num_subcarriers
    if symbols_per_phase(values, f) * f > 2 * values:  # zero padding at least doubles the grid
        keys.append(f"ofdm.num_subcarriers = {f}")
    return keys


def check_resources(
    scenario: Scenario,
    num_params: int | None = None,
    *,
    source: str | None = None,
    available_bytes: int | None = None,
) -> int:
    """Refuse a scenario that cannot fit in memory, before anything is allocated.

    Compares :func:`memory_estimate_bytes` (a lower bound of a round's peak: no
    activations, dataset or TensorFlow workspace) with the memory available now.

    Parameters
    ----------
    scenario : Scenario
    num_params : int, optional
        d; by default :func:`scenario_num_params` (arithmetic: no model is built, so an
        absurd size is refused before TensorFlow allocates anything).
    source : str, optional
        The scenario file, named in the error's first line (default: the scenario's name).
    available_bytes : int, optional
        Memory available in bytes; by default :func:`available_memory_bytes` (when that
        cannot be read, nothing is refused).

    Returns
    -------
    int
        The estimate in bytes (it fits).

    Raises
    ------
    ScenarioTooLarge
        A :class:`ScenarioError` (exit status 2 at the command line) whose one problem
        names the keys that drive the size with their values, d, and the estimate
        against the memory available in GiB.
    """
    d = scenario_num_params(scenario) if num_params is None else int(num_params)
    need = memory_estimate_bytes(scenario, d)
    have = available_memory_bytes() if available_bytes is None else int(available_bytes)
    if have is None or need <= have:
        return need
    problem = (
        f"{', '.join(_size_keys(scenario, d))}: need ~{need / 2**30:,.2f} GiB for one local step "
        f"of all devices (d = {d:,} weights; 4 K d c + 8 K N F bytes), more than the "
        f"{have / 2**30:,.2f} GiB of memory available; lower one of these keys"
    )
    raise ScenarioTooLarge([problem], source if source is not None else repr(scenario.name),
                           estimate_bytes=need, available_bytes=have)


def describe(scenario: Scenario, num_params: int, downlink_symbols: int | None = None) -> str:
    """A summary of what a scenario implies (used by ``cosim validate``).

    Parameters
    ----------
    num_params : int
        d, the model's number of weights (built by the model, unknown to the scenario).
    downlink_symbols : int, optional
        Downlink OFDM symbols per round if the caller computed them for a channel draw
        (``phy.downlink.multicast_symbols``); they depend on the worst device's channel.
    """
    s, d = scenario, int(num_params)
    f = s.ofdm.num_subcarriers
    phases = uplink_phase_values(s, d)
    symbols = {name: symbols_per_phase(v, f) for name, v in phases.items()}
    uplink = sum(symbols.values())
    dl_values = downlink_values(s, d)
    mem = memory_estimate_bytes(s, d)
    lines = [
        f"scenario {s.name!r}: {s.algorithm.name}, {s.rounds} rounds, seed {s.seed}",
        f"  cell      {s.cell.layout}, K = {s.cell.num_devices}, radius {s.cell.radius_m:g} m",
        f"  channel   {s.channel.model}, alpha = {s.channel.path_loss_exponent:g}; csi {s.csi.model}; "
        f"power {s.power.control}, P = {s.power.tx_power_dbm:g} dBm, sigma_z^2 = {s.power.noise_power_dbm:g} dBm",
        f"  data      {s.data.dataset} (C = {s.data.num_classes}), {s.data.partition}, "
        f"mean {s.data.mean_samples_per_device:g} samples/device ({s.data.size_distribution})",
        f"  model     {s.model.architecture}, d = {d:,} weights",
        "  uplink    " + ", ".join(f"N_{name} = {n} symbols ({phases[name]:,} values)"
                                   for name, n in symbols.items()) + f" -> {uplink} OFDM symbols/round (F = {f})",
        f"  downlink  {dl_values:,} values x {s.downlink.bits_per_value} bits = "
        f"{dl_values * s.downlink.bits_per_value:,} bits/round"
        + (f" -> {downlink_symbols} OFDM symbols/round" if downlink_symbols is not None
           else " (symbols depend on the worst device's channel each round)"),
        f"  per round {uplink} uplink"
        + (f" + {downlink_symbols} downlink = {uplink + downlink_symbols} channel uses (OFDM symbols)"
           if downlink_symbols is not None else " channel uses (OFDM symbols) + the downlink's"),
        f"  memory    ~{mem / 2**30:.2f} GiB for one local step of all devices "
        "(4 K d c + 8 K N F bytes; see memory_estimate_bytes)",
        f"  trace     {s.trace_path}",
    ]
    return "\n".join(lines)
