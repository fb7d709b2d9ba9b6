"""The scenario's schema: one frozen pydantic model per table, and the scenario's TOML text.

Every table of a scenario file (``[cell]``, ``[channel]``, ..., ``[runtime]``) is a model here
with its keys' types, bounds, defaults and cross-key rules; :class:`Scenario` holds them and the
cross-table rules. Values are type-checked strictly (TOML is typed: ``radius_m = "300"`` is an
error, an integer is accepted where a float is expected; no float key takes ``nan`` or ``inf``).
Arrays become tuples, so a scenario is immutable all the way down. :func:`scenario_to_toml`
writes a resolved scenario back as TOML. Loading, overrides and messages: :mod:`cosim.scenario`;
derived quantities: :mod:`cosim.scenario.derived`. Nothing here imports TensorFlow.
"""

from __future__ import annotations

import math
import string
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    Field,
    create_model,
    model_validator,
)
from pydantic_core import PydanticCustomError

from cosim.limits import MAX_ROUNDS
from cosim.printable import os_path
from cosim.scenario.as_toml import _plain, scenario_to_toml, toml_value  # noqa: F401 (re-exported)
from cosim.scenario.mobility_rules import check_mobility
from cosim.scenario.scene import check_cell_and_channel
from cosim.scenario.sections import (
    _bool_or_keyword,
    _registered,
    _require,
    _Section,
    variant_table,
)
from learning.catalog import CATALOG  # no TensorFlow
from learning.hyperparameters import AlgorithmParameters, check_init
from learning.models.shapes import ARCHITECTURE_NAMES, CONVOLUTIONAL, image_shape
from learning.runtime import (  # stdlib
    BACKENDS,
    DEVICE_CHUNK,
    NOISE_SOURCES,
    ResolvedRuntime,
    Runtime,
    resolve,
)
from native.parameters import deep_tuple, positive_int_or_keyword, positive_or_keyword
from phy.limits import L_MAX_MARGIN, last_tap_lag  # stdlib only
from phy.parameters import (  # pydantic only
    CELL_LAYOUTS,
    CHANNEL_MODELS,
    COMBINERS,
    CSI_MODELS,
    DB_LIMIT,
    MOBILITY_MODELS,
    POWER_CONTROLS,
    SCHEDULING,
    UPLINK_SCHEMES,
    allows_joint_gamma,
    scales_for_privacy,
)
from phy.units import dbm_to_w  # stdlib only (no NumPy, no TensorFlow)

# --------------------------------------------------------------------------- sections


class CellConfig(variant_table(CELL_LAYOUTS, table="cell", key="layout", default="uniform_disk")):
    """Device drop around the BS at the origin (paper: uniform in a 300 m disk, K = 100); each
    layout's keys and rules are declared by its parameters in :mod:`phy.parameters`."""

    @model_validator(mode="after")
    def _check(self) -> CellConfig:
        _require(self.min_distance_m < self.radius_m, "min_distance_m",
                 f"must be < cell.radius_m = {self.radius_m} (got {self.min_distance_m})")
        if "positions_m" in CELL_LAYOUTS[self.layout].parameters.model_fields:  # given positions
            # what they must satisfy beyond their layout's own rules
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
    gamma = sigma_z^2); each control's own keys are declared in :mod:`phy.parameters`.
    ``gamma = "joint"``: chosen per phase and round with the BS's combiner
    (:mod:`phy.receiver_scaling`; the KKT control only)."""

    tx_power_dbm: float = Field(20.0, ge=-DB_LIMIT, le=DB_LIMIT)
    noise_power_dbm: float = Field(-74.0, ge=-DB_LIMIT, le=DB_LIMIT)
    gamma: Annotated[str | float, positive_or_keyword("noise_power", "joint")] = "noise_power"

    @model_validator(mode="after")
    def _joint_needs_kkt(self) -> PowerConfig:
        _require(self.gamma != "joint" or allows_joint_gamma(self.control), "gamma",
                 f"= \"joint\" needs power.control = \"optimal\" (got {self.control!r}): the "
                 "joint scaling minimises the KKT control's distortion plus the receiver noise")
        return self

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
        """Power-scaling coefficient gamma in watts (``"noise_power"`` -> sigma_z^2; with
        ``"joint"`` sigma_z^2 too, the value used when no device sends)."""
        return self.noise_power_w if self.gamma in ("noise_power", "joint") else float(self.gamma)

    @property
    def joint_gamma(self) -> bool:
        """gamma chosen per phase with the combiner (:func:`phy.receiver_scaling.joint_gamma`)."""
        return self.gamma == "joint"


class UplinkConfig(variant_table(UPLINK_SCHEMES, table="uplink", key="scheme", default="analog")):
    """How a phase goes over the air (paper: the analog scheme of Section IV); each scheme's
    keys are declared by its parameters in :mod:`phy.parameters`."""

    @property
    def carries(self) -> str:
        """``"values"`` or ``"signs"``: what the chosen scheme's estimate is."""
        return getattr(self._registry[self.scheme].parameters, "carries", "values")

    @property
    def accounts_privacy(self) -> bool:
        """Whether ``[privacy]``'s mechanism describes what the BS sees under this scheme
        (the analog scheme's only)."""
        return bool(getattr(self._registry[self.scheme].parameters, "accounts_privacy", False))

    @property
    def receiver_scaling(self) -> bool:
        """Whether the scheme has the receiver scaling ``power.gamma = "joint"`` chooses
        (the analog scheme's only)."""
        return bool(getattr(self._registry[self.scheme].parameters, "receiver_scaling", False))

    def check_scenario(self, scenario: Scenario) -> None:
        """The chosen scheme's own checks against ``scenario`` (its parameters'
        ``check_scenario``, :class:`phy.parameters.SchemeParameters`; none when they
        declare none)."""
        parameters = self.variant_parameters()
        if hasattr(parameters, "check_scenario"):
            parameters.check_scenario(scenario)


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
    combiner: Literal[tuple(COMBINERS)] = "centroid"


class ParticipationConfig(_Section):
    """Who takes part in a round (``phy/uplink/participation.py``; the paper: every device,
    every round): the scheduled share and rule, dropouts after training, stragglers
    against a deadline, and whether the BS knows who dropped."""

    fraction: float = Field(1.0, gt=0.0, le=1.0)
    scheduling: Literal[tuple(SCHEDULING)] = "uniform"
    gain_threshold_db: float | None = Field(None, ge=-DB_LIMIT, le=DB_LIMIT)
    dropout_probability: float = Field(0.0, ge=0.0, le=1.0)
    bs_knows_dropouts: bool = True
    deadline_s: float | None = Field(None, gt=0.0)
    step_time_min_s: float = Field(1.0, gt=0.0)
    step_time_extra_mean_s: float = Field(1.0, ge=0.0)
    straggler_policy: Literal["drop", "fewer_steps"] = "drop"

    @model_validator(mode="after")
    def _check(self) -> ParticipationConfig:
        policy = SCHEDULING[self.scheduling]  # its registry entry says which keys it needs
        owners = " or ".join(f'"{name}"' for name, choice in SCHEDULING.items()
                             if "gain_threshold_db" in choice.fact("keys", ()))
        threshold = "gain_threshold_db" in policy.fact("keys", ())
        _require((self.gain_threshold_db is not None) == threshold, "gain_threshold_db",
                 f"= {self.gain_threshold_db} goes with scheduling = "
                 f"{owners} and only with it "
                 f"(scheduling = {self.scheduling!r})")
        _require(not policy.fact("every_device") or self.fraction == 1.0, "fraction",
                 f"= {self.fraction:g}: scheduling = {self.scheduling!r} schedules every device "
                 "that qualifies, whatever the fraction; leave fraction at 1")
        return self

    def cohort_size(self, num_devices: int) -> int:
        """``max(1, round(fraction K))`` (halves up): the devices ``"uniform"`` and
        ``"best_channel"`` schedule per round."""
        return max(1, math.floor(self.fraction * num_devices + 0.5))


def _clip_norms(value: Any) -> Any:
    """``privacy.clip_norm``: None, a finite number > 0, or a table of them (one error)."""
    values = value.values() if isinstance(value, dict) else [value]
    if value is None or all(isinstance(v, (int, float)) and not isinstance(v, bool)
                            and math.isfinite(v) and v > 0 for v in values):
        return value
    raise PydanticCustomError("clip_norm", "must be a finite number > 0 or a table of them per phase")


class PrivacyConfig(_Section):
    """Differential privacy of the uplink as the receiver sees it (``phy/privacy.py``, ``cosim/privacy/``,
    ``docs/privacy.md``); the paper has none. Absent: no accounting, the trace as without it."""

    delta: float = Field(1e-5, gt=0.0, lt=1.0)
    # "none" (a study axis' no-target point; TOML has no null) is no target
    target_epsilon: Annotated[float | None, BeforeValidator(lambda v: None if v == "none" else v)
                              ] = Field(None, gt=0.0)
    accountant: Literal["pld", "rdp"] = "pld"
    subsampling: Literal["none", "poisson"] = "none"
    # one C for every phase, or {phase: C} naming each of the algorithm's phases
    clip_norm: Annotated[float | dict[str, float] | None, BeforeValidator(_clip_norms)] = None
    noise_source: Literal["designated", "devices"] = "designated"
    eavesdropper_distance_m: float | None = Field(None, ge=0.0)
    eavesdropper_noise_power_dbm: float | None = Field(None, ge=-DB_LIMIT, le=DB_LIMIT)
    delta_bar: Literal["clip_norm", "reported"] = "clip_norm"  # phy.privacy.public_delta_bar
    eavesdropper_downlink: Literal["clear", "encrypted"] = "clear"  # it reads the BS's multicast


_DATASET_SHAPES = {"mnist": ((28, 28, 1), 10), "cifar100": ((32, 32, 3), 100)}


class DataConfig(_Section):
    """Dataset and its partition (paper MNIST: Poisson sizes of mean 10, one label per device)."""

    dataset: Literal["mnist", "cifar100", "synthetic"] = "mnist"
    data_dir: str | None = None
    partition: Literal["labels_per_device", "dirichlet", "iid"] = "labels_per_device"
    labels_per_device: int = Field(1, ge=1)
    dirichlet_alpha: float = Field(0.1, gt=0)
    mean_samples_per_device: float = Field(10.0, gt=0)
    size_distribution: Literal["poisson", "shifted_poisson"] = "poisson"
    disjoint: bool = True  # no training image held by two devices (false: each device draws on its own)
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

    architecture: Literal[ARCHITECTURE_NAMES] = "mlp"  # learning/models/shapes.py: the one list
    hidden_units: Annotated[tuple[int, ...], BeforeValidator(deep_tuple)] = (256, 256, 256, 256, 256)

    @model_validator(mode="after")
    def _check(self) -> ModelConfig:
        _require(all(h >= 1 for h in self.hidden_units), "hidden_units",
                 f"must be positive ints (got {list(self.hidden_units)})")
        return self


# The hyper-parameters: once, in learning.hyperparameters, a model per catalog algorithm; [algorithm] below.


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
    name=(Annotated[str, BeforeValidator(_registered(CATALOG))], "bayes_aircomp"),  # CATALOG as it is now
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
    devices_in_memory: Annotated[str | int, positive_int_or_keyword("auto")] = "auto"
    """Devices whose updates a round holds at once (``cosim/streamed_round.py``): ``"auto"``
    holds every device when the round fits in three quarters of the machine's physical
    memory, else the most that fit in half of it
    (:func:`cosim.scenario.derived.devices_in_memory`); a number caps it."""

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
            parsed = list(string.Formatter().parse(self.path))
        except ValueError as exc:
            raise ValueError(f"path: {exc} (got {self.path!r})") from None
        fields = {f for _, f, _, _ in parsed if f is not None}
        _require(fields <= {"name", "seed"}, "path",
                 f"only {{name}} and {{seed}} placeholders are allowed (got {self.path!r})")
        _require(all(not spec and not conversion for _, field_name, spec, conversion in parsed
                     if field_name is not None), "path",
                 f"{{name}} and {{seed}} take no format spec or conversion (got {self.path!r})")
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
    rounds: int = Field(30, ge=1, le=MAX_ROUNDS)
    cell: CellConfig = CellConfig()
    channel: ChannelConfig = ChannelConfig()
    ofdm: OfdmConfig = OfdmConfig()
    sync: SyncConfig = SyncConfig()
    csi: CsiConfig = CsiConfig()
    power: PowerConfig = PowerConfig()
    uplink: UplinkConfig = UplinkConfig()
    downlink: DownlinkConfig = DownlinkConfig()
    bs: BsConfig = BsConfig()
    participation: ParticipationConfig = ParticipationConfig()
    data: DataConfig = DataConfig()
    model: ModelConfig = ModelConfig()
    algorithm: AlgorithmConfig = AlgorithmConfig()
    eval: EvalConfig = EvalConfig()
    trace: TraceConfig = TraceConfig()
    runtime: RuntimeConfig = RuntimeConfig()
    privacy: PrivacyConfig | None = None
    mobility: variant_table(MOBILITY_MODELS, table="mobility", key="model", default="static") | None = None

    @model_validator(mode="after")
    def _check(self) -> Scenario:
        signs = ", ".join(repr(name) for name, entry in CATALOG.items() if entry.sends == "signs")
        _require(self.uplink.carries == "values" or CATALOG[self.algorithm.name].sends == "signs", "uplink.scheme",
                 f"{self.uplink.scheme!r} carries only signs (a majority vote), and algorithm.name = "
                 f"{self.algorithm.name!r} needs the weighted sum of values: use an algorithm that sends "
                 f"signs ({signs}) or a scheme that carries values")
        _require(self.power.gamma != "joint" or self.uplink.receiver_scaling, "power.gamma",
                 f"= \"joint\" chooses the analog scheme's receiver scaling; uplink.scheme = "
                 f"{self.uplink.scheme!r} has none: remove it or set uplink.scheme = \"analog\"")
        _require(self.power.gamma != "joint" or self.privacy is None, "power.gamma",
                 "= \"joint\" is not accounted by [privacy] (its mechanism takes the paper's fixed "
                 "gamma): remove one of them")
        _require(not scales_for_privacy(self.power.control) or (
            self.privacy is not None and self.privacy.target_epsilon is not None), "power.control",
            f"= {self.power.control!r} lowers the devices' power to meet privacy.target_epsilon: set "
            "[privacy] target_epsilon, or use power.control = \"optimal\"")
        if self.privacy is not None:
            self._check_privacy()
        if self.ofdm.domain == "frequency":
            for key in ("timing_offset_max_samples", "cfo_max_subcarriers"):
                value = getattr(self.sync, key)
                _require(value == 0.0, f"sync.{key}",
                         f"= {value:g} needs ofdm.domain = \"time\" (the frequency-domain "
                         "uplink is perfectly synchronised)")
        else:
            # the channel's last tap (phy.limits, as ofdm_time.from_paths) must be at most F + C - 1;
            # TDL's and the 3GPP cells' later paths are cut (and counted), the Rayleigh lines must fit
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
        self.uplink.check_scenario(self)  # the scheme's own rules (phy.parameters.UPLINK_SCHEMES)
        check_mobility(self)
        check_cell_and_channel(self)  # the geometry's rules between [cell] and [channel]
        self.resolved_runtime()  # "runtime.key: what (got value)" for what cannot run
        if self.model.architecture in CONVOLUTIONAL:
            h, w, _ = image_shape(self.data.input_shape)
            _require(min(h, w) >= 4, "data.synthetic_shape",
                     f"must be at least 4 x 4 pixels [H, W, C] for model.architecture = "
                     f"{self.model.architecture!r} (got {list(self.data.synthetic_shape)})")
        return self

    def _check_privacy(self) -> None:
        """[privacy] against the other tables (:meth:`_check`)."""
        _require(self.uplink.accounts_privacy, "uplink.scheme",
                 f"= {self.uplink.scheme!r}: [privacy] derives the analog scheme's mechanism "
                 "only (each device's amplitude on the shared subcarriers); remove [privacy] "
                 "or set uplink.scheme = \"analog\"")
        _require(self.ofdm.domain == "frequency", "ofdm.domain",
                 f"= {self.ofdm.domain!r}: [privacy] accounts for the frequency-domain uplink "
                 "only (eq. ReceivedSignal per subcarrier); remove [privacy] or set "
                 "ofdm.domain = \"frequency\"")
        sampled = (SCHEDULING[self.participation.scheduling].fact("uniform_draw")
                   and self.participation.fraction < 1.0)
        uniform = " or ".join(f'"{name}"' for name, choice in SCHEDULING.items()
                              if choice.fact("uniform_draw"))
        _require(self.privacy.subsampling == "none" or sampled, "privacy.subsampling",
                 f"= \"poisson\" needs participation.scheduling = {uniform} with "
                 f"participation.fraction < 1 (got {self.participation.scheduling!r}, "
                 f"{self.participation.fraction:g}): only a uniformly drawn cohort "
                 "amplifies privacy")
        if isinstance(self.privacy.clip_norm, dict):
            phases = list(CATALOG[self.algorithm.name].uplink)
            _require(sorted(self.privacy.clip_norm) == sorted(phases), "privacy.clip_norm",
                     f"= {self.privacy.clip_norm!r} must name each phase algorithm.name = "
                     f"{self.algorithm.name!r} sends ({', '.join(map(repr, phases))}), or be "
                     "one number for all")
        _require(self.privacy.noise_source == "designated" or self.bs.num_antennas == 1,
                 "privacy.noise_source", f"= \"devices\" is derived for a single-antenna BS "
                 f"(bs.num_antennas = {self.bs.num_antennas}): set bs.num_antennas = 1 or "
                 "privacy.noise_source = \"designated\"")

    @property
    def trace_path(self) -> Path:
        """``trace.path`` with ``{name}`` and ``{seed}`` filled in, as the system is given it
        (its UTF-8 bytes whatever the locale: :func:`cosim.printable.os_path`)."""
        return Path(os_path(self.trace.path.format(name=self.name, seed=self.seed)))

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
