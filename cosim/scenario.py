"""Scenario files: TOML validated into frozen pydantic models, overrides, derived quantities.

A scenario is everything a run needs, in one frozen, validated object::

    scenario = load_scenario("scenarios/quickstart.toml", ["cell.num_devices=20"])
    scenario.cell.radius_m            # 300.0
    scenario.power.noise_power_w      # linear units as properties
    scenario.algorithm.hyper_parameters()   # kwargs for learning.algorithms.build

Defaults equal the paper's Tables I-II (``table:SimulSetup``, ``table:HyperParam``)
for its MNIST set-up wherever the paper gives a value; every key, unit and source
is listed in ``docs/scenarios.md``. Every problem is reported as one line naming
the field path and the bad value (``cell.radius_m: must be > 0 (got -5.0)``), with
the nearest valid key for a misspelling, through :class:`ScenarioError`.

Values are type-checked strictly (TOML is typed: ``radius_m = "300"`` is an error,
an integer is accepted where a float is expected). Arrays become tuples, so a
scenario is immutable all the way down.
"""

from __future__ import annotations

import difflib
import math
import re
import string
import tomllib
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator

__all__ = [
    "Scenario",
    "ScenarioError",
    "default_scenario_text",
    "describe",
    "downlink_values",
    "load_scenario",
    "memory_estimate_bytes",
    "parse_scenario",
    "scenario_to_toml",
    "symbols_per_phase",
    "uplink_phase_values",
]

# --------------------------------------------------------------------------- helpers


def _deep_tuple(value: Any) -> Any:
    """TOML arrays (lists) -> tuples, recursively, so frozen models stay immutable."""
    if isinstance(value, list):
        return tuple(_deep_tuple(v) for v in value)
    return value


def dbm_to_w(power_dbm: float) -> float:
    """Power in dBm -> watts: ``10 ** ((p_dbm - 30) / 10)``."""
    return 10.0 ** ((power_dbm - 30.0) / 10.0)


def _positive_or_keyword(keyword: str):
    def check(value: Any) -> Any:
        if value == keyword:
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
            return float(value)
        raise ValueError(f"must be {keyword!r} or a positive number")

    return BeforeValidator(check)


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


def _require(condition: bool, field: str, message: str) -> None:
    """Cross-field check; the ``field: `` prefix lets errors name the field path."""
    if not condition:
        raise ValueError(f"{field}: {message}")


# --------------------------------------------------------------------------- sections


class CellConfig(_Section):
    """Device drop around the BS at the origin (paper: uniform in a 300 m disk, K = 100)."""

    layout: Literal["uniform_disk", "annulus", "clusters", "explicit"] = "uniform_disk"
    num_devices: int = Field(100, ge=1)
    radius_m: float = Field(300.0, gt=0)
    min_distance_m: float = Field(10.0, ge=0)
    inner_radius_m: float | None = Field(None, ge=0)
    num_clusters: int | None = Field(None, ge=1)
    cluster_std_m: float | None = Field(None, gt=0)
    positions_m: Annotated[tuple[tuple[float, float], ...] | None, BeforeValidator(_deep_tuple)] = None

    @model_validator(mode="after")
    def _check(self) -> CellConfig:
        _require(self.min_distance_m < self.radius_m, "min_distance_m",
                 f"must be < radius_m = {self.radius_m} (got {self.min_distance_m})")
        if self.layout == "annulus":
            _require(self.inner_radius_m is not None, "inner_radius_m", "required by layout 'annulus'")
            _require(self.inner_radius_m < self.radius_m, "inner_radius_m",
                     f"must be < radius_m = {self.radius_m} (got {self.inner_radius_m})")
        if self.layout == "clusters":
            _require(self.num_clusters is not None, "num_clusters", "required by layout 'clusters'")
            _require(self.cluster_std_m is not None, "cluster_std_m", "required by layout 'clusters'")
        if self.layout == "explicit":
            _require(self.positions_m is not None, "positions_m",
                     "required by layout 'explicit' (a list of [x, y] in metres)")
            _require(len(self.positions_m) == self.num_devices, "positions_m",
                     f"must have num_devices = {self.num_devices} rows (got {len(self.positions_m)})")
            for i, (x, y) in enumerate(self.positions_m):
                r = math.hypot(x, y)
                _require(self.min_distance_m <= r <= self.radius_m, "positions_m",
                         f"row {i} [{x}, {y}] is {r:.2f} m from the BS, outside "
                         f"[min_distance_m, radius_m] = [{self.min_distance_m}, {self.radius_m}]")
        return self


class ChannelConfig(_Section):
    """Block-fading small-scale channel with path loss r^-alpha (paper: i.i.d. Rayleigh, alpha = 4)."""

    model: Literal["iid_rayleigh", "flat_rayleigh", "tdl"] = "iid_rayleigh"
    path_loss_exponent: float = Field(4.0, gt=0)
    tdl_profile: Literal["A", "B", "C", "D", "E"] = "A"
    delay_spread_s: float = Field(100e-9, gt=0)
    carrier_frequency_hz: float = Field(3.5e9, gt=0)


class OfdmConfig(_Section):
    """Resource grid (paper: F = 1024 subcarriers; the spacing matters only for TDL)."""

    num_subcarriers: int = Field(1024, ge=1)
    subcarrier_spacing_hz: float = Field(30e3, gt=0)


class CsiConfig(_Section):
    """What each device knows of its own channel (paper: perfect local CSI)."""

    model: Literal["perfect", "gaussian", "ls_pilots", "outdated"] = "perfect"
    nmse_db: float | None = None
    pilot_snr_db: float | None = None
    correlation: float | None = Field(None, ge=0, le=1)

    @model_validator(mode="after")
    def _check(self) -> CsiConfig:
        needs = {"gaussian": "nmse_db", "ls_pilots": "pilot_snr_db", "outdated": "correlation"}
        if self.model in needs:
            key = needs[self.model]
            _require(getattr(self, key) is not None, key, f"required by csi model {self.model!r}")
        return self


class PowerConfig(_Section):
    """Uplink power control and the receiver's scaling (paper: P = 20 dBm, sigma_z^2 = -74 dBm, gamma = sigma_z^2)."""

    control: Literal["optimal", "truncated_inversion", "full_inversion", "ideal"] = "optimal"
    tx_power_dbm: float = 20.0
    noise_power_dbm: float = -74.0
    gamma: Annotated[str | float, _positive_or_keyword("noise_power")] = "noise_power"
    tci_gain_threshold: float | None = Field(None, gt=0)

    @model_validator(mode="after")
    def _check(self) -> PowerConfig:
        if self.control == "truncated_inversion":
            _require(self.tci_gain_threshold is not None, "tci_gain_threshold",
                     "required by control 'truncated_inversion' (a linear channel gain |h|^2)")
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
        """Power-scaling coefficient gamma in watts (``"noise_power"`` -> sigma_z^2)."""
        return self.noise_power_w if self.gamma == "noise_power" else float(self.gamma)


class DownlinkConfig(_Section):
    """Digital multicast of the global model (not in the paper's tables)."""

    bs_tx_power_dbm: float = 30.0
    bits_per_value: int = Field(32, ge=1)

    @property
    def bs_tx_power_w(self) -> float:
        return dbm_to_w(self.bs_tx_power_dbm)


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
    synthetic_classes: int = Field(10, ge=2)
    synthetic_shape: Annotated[tuple[int, ...], BeforeValidator(_deep_tuple)] = (28, 28, 1)
    synthetic_train_size: int = Field(10000, ge=1)
    synthetic_test_size: int = Field(2000, ge=1)
    test_subset: int | None = Field(None, ge=1)

    @model_validator(mode="after")
    def _check(self) -> DataConfig:
        _require(len(self.synthetic_shape) >= 1 and all(s >= 1 for s in self.synthetic_shape),
                 "synthetic_shape", f"must be a non-empty list of positive ints (got {list(self.synthetic_shape)})")
        if self.partition == "labels_per_device":
            _require(self.labels_per_device <= self.num_classes, "labels_per_device",
                     f"must be <= the {self.num_classes} classes of {self.dataset!r} (got {self.labels_per_device})")
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
    hidden_units: Annotated[tuple[int, ...], BeforeValidator(_deep_tuple)] = (256, 256, 256, 256, 256)

    @model_validator(mode="after")
    def _check(self) -> ModelConfig:
        _require(all(h >= 1 for h in self.hidden_units), "hidden_units",
                 f"must be positive ints (got {list(self.hidden_units)})")
        return self


# Baseline hyper-parameters: one sub-table per algorithm, [algorithm.<name>]. Adding an
# algorithm's knobs = one small model here + one field in AlgorithmConfig.


class FedProxConfig(_Section):
    """[algorithm.fedprox]: proximal term mu/2 ||w - w_t||^2 (Li et al., MLSys 2020)."""

    proximal_mu: float = Field(0.01, ge=0)


class ScaffoldConfig(_Section):
    """[algorithm.scaffold]: server step size eta_g (Karimireddy et al., ICML 2020; 1.0 there)."""

    global_learning_rate: float = Field(1.0, gt=0)


class FedSmooConfig(_Section):
    """[algorithm.fedsmoo]: SAM radius and dynamic-regulariser weight (Sun et al., ICML 2023).

    Defaults follow the FedSMOO authors' FL-Simulator (``--rho 0.1``, ``--lamb 0.1``).
    """

    sam_rho: float = Field(0.1, ge=0)
    dynamic_alpha: float = Field(0.1, ge=0)


class FedGmtConfig(_Section):
    """FedGMT-v2 (Li et al. 2025): EMA of the global trajectory as a KL teacher, dual regulariser."""

    ema_decay: float = Field(0.95, ge=0, lt=1)
    sharpness_gamma: float = Field(1.0, ge=0)
    temperature: float = Field(3.0, gt=0)
    dynamic_alpha: float = Field(0.1, ge=0)


class AlgorithmConfig(_Section):
    """The FL algorithm and its local training (paper MNIST: eta = 0.1, E = 3, M = 5, lambda = K).

    The proposed method's keys sit directly in ``[algorithm]``; a baseline's own
    keys live in its sub-table (``[algorithm.fedprox]`` ...).
    """

    name: Literal["bayes_aircomp", "fedavg", "fedprox", "scaffold", "fedsmoo", "fedgmt"] = "bayes_aircomp"
    learning_rate: float = Field(0.1, gt=0)
    local_steps: int = Field(3, ge=1)
    mc_samples: int = Field(5, ge=1)
    kl_scale: Annotated[str | float, _positive_or_keyword("num_devices")] = "num_devices"
    estimator: Literal["reparameterization", "local_reparameterization"] = "reparameterization"
    init_std: float = Field(0.048587, gt=0)
    min_precision: float = Field(1.0, gt=0)
    phase2_prior: Literal["fresh", "previous"] = "fresh"
    nll_reduction: Literal["sum", "mean"] = "sum"
    covariance_parameter: Literal["precision", "softplus_std", "log_std", "log_precision"] = "precision"
    weight_sampler: Literal["fused", "tensorflow"] = "fused"
    fedprox: FedProxConfig = FedProxConfig()
    scaffold: ScaffoldConfig = ScaffoldConfig()
    fedsmoo: FedSmooConfig = FedSmooConfig()
    fedgmt: FedGmtConfig = FedGmtConfig()

    def kl_scale_value(self, num_devices: int) -> float:
        """lambda in lambda_k = lambda pi_k / d (eq. ``localLoss``): K for ``"num_devices"``."""
        return float(num_devices) if self.kl_scale == "num_devices" else float(self.kl_scale)

    def hyper_parameters(self, num_devices: int | None = None) -> dict[str, Any]:
        """Keyword arguments for ``learning.algorithms.build(name, model, K, **hyper)``.

        Common keys (``learning_rate``, ``local_steps``) for every algorithm; the
        proposed method's keys for ``bayes_aircomp`` (``kl_scale`` resolved to a
        number when ``num_devices`` is given; :meth:`Scenario.hyper_parameters`
        does that); the algorithm's own sub-table for a baseline.
        """
        hyper: dict[str, Any] = {"learning_rate": self.learning_rate, "local_steps": self.local_steps}
        if self.name == "bayes_aircomp":
            hyper |= {
                "mc_samples": self.mc_samples,
                "kl_scale": self.kl_scale if num_devices is None else self.kl_scale_value(num_devices),
                "estimator": self.estimator,
                "init_std": self.init_std,
                "min_precision": self.min_precision,
                "phase2_prior": self.phase2_prior,
                "nll_reduction": self.nll_reduction,
                "covariance_parameter": self.covariance_parameter,
                "weight_sampler": self.weight_sampler,
            }
        elif self.name in type(self).model_fields:
            hyper |= getattr(self, self.name).model_dump()
        return hyper


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
    signal_rounds: Annotated[tuple[int, ...], BeforeValidator(_deep_tuple)] = ()
    checkpoint_every: int = Field(1, ge=1)

    @model_validator(mode="after")
    def _check(self) -> TraceConfig:
        try:
            fields = {f for _, f, _, _ in string.Formatter().parse(self.path) if f is not None}
        except ValueError as exc:
            raise ValueError(f"path: {exc} (got {self.path!r})") from None
        _require(fields <= {"name", "seed"}, "path",
                 f"only {{name}} and {{seed}} placeholders are allowed (got {self.path!r})")
        _require(all(r >= 0 for r in self.signal_rounds), "signal_rounds", "must be >= 0")
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
    csi: CsiConfig = CsiConfig()
    power: PowerConfig = PowerConfig()
    downlink: DownlinkConfig = DownlinkConfig()
    data: DataConfig = DataConfig()
    model: ModelConfig = ModelConfig()
    algorithm: AlgorithmConfig = AlgorithmConfig()
    eval: EvalConfig = EvalConfig()
    trace: TraceConfig = TraceConfig()

    @property
    def trace_path(self) -> Path:
        """``trace.path`` with ``{name}`` and ``{seed}`` filled in."""
        return Path(self.trace.path.format(name=self.name, seed=self.seed))

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
        head = f"invalid scenario {source}:" if source else "invalid scenario:"
        super().__init__(head + "".join(f"\n  {p}" for p in self.problems))


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


def _did_you_mean(model: type[BaseModel], key: str) -> str:
    valid = list(model.model_fields)
    close = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return f"{hint}valid keys: {', '.join(valid)}"


_TYPE_WORDS = {
    "float_type": "must be a number", "int_type": "must be an integer",
    "string_type": "must be a string", "bool_type": "must be true or false",
    "tuple_type": "must be an array", "model_type": "must be a table",
    "dict_type": "must be a table", "int_from_float": "must be an integer",
}
_BOUND_WORDS = {"greater_than": ("gt", ">"), "greater_than_equal": ("ge", ">="),
                "less_than": ("lt", "<"), "less_than_equal": ("le", "<=")}


def _describe_error(error: dict[str, Any]) -> str:
    loc = [str(part) for part in error["loc"]]
    kind, ctx, value = error["type"], error.get("ctx") or {}, error.get("input")
    got = f" (got {value!r})"
    if kind == "extra_forbidden":
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
        match = re.match(r"^(\w+): (.*)$", message, flags=re.S)
        if match and _model_at(loc) is not None and match.group(1) in _model_at(loc).model_fields:
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


def default_scenario_text() -> str:
    """The embedded default scenario (``cosim/scenarios/quickstart.toml``, package data)."""
    return resources.files("cosim").joinpath("scenarios/quickstart.toml").read_text(encoding="utf-8")


def _parse_override(item: str) -> tuple[list[str], Any]:
    key, sep, raw = item.partition("=")
    key = key.strip()
    if not sep or not key or not re.fullmatch(r"[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)*", key):
        raise ScenarioError([f"{item!r}: an override must look like key.path=value"], "--set")
    try:
        value = tomllib.loads(f"v = {raw.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw.strip()  # a bare string: --set name=run7
    return key.split("."), value


def _apply_override(data: dict[str, Any], path: list[str], value: Any) -> None:
    model: type[BaseModel] | None = Scenario
    node = data
    for i, key in enumerate(path):
        if model is None or key not in model.model_fields:
            prefix = ".".join(path[:i])
            where = f"{prefix}." if prefix else ""
            hint = f"; {_did_you_mean(model, key)}" if model is not None else ""
            raise ScenarioError([f"{where}{key}: unknown key{hint}"], "--set")
        if i == len(path) - 1:
            node[key] = value
            return
        child = node.setdefault(key, {})
        if not isinstance(child, dict):
            raise ScenarioError([f"{'.'.join(path[: i + 1])}: is a value, not a table"], "--set")
        node, model = child, _sub_model(model, key)


def load_scenario(path: str | Path | None = None, overrides: Sequence[str] = ()) -> Scenario:
    """Read, override and validate a scenario.

    Parameters
    ----------
    path : str, Path or None
        A TOML file; None -> the embedded default (the quickstart).
    overrides : sequence of str
        ``key.path=value`` items (``--set``); the value is parsed as a TOML value
        (``20``, ``1e-3``, ``"x"``, ``[1, 2]``, ``true``), falling back to a bare
        string. Validated exactly like the file.

    Raises
    ------
    ScenarioError
        Missing file, TOML syntax error (with its line), unknown or misspelled key,
        wrong type, out-of-range value, inconsistent fields.
    """
    source = "<default quickstart>" if path is None else str(path)
    if path is None:
        text = default_scenario_text()
    else:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ScenarioError([f"file not found: {path}"], source) from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ScenarioError([f"cannot read {path}: {exc}"], source) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError([f"TOML syntax error: {exc}"], source) from None
    for item in overrides:
        _apply_override(data, *_parse_override(item))
    return parse_scenario(data, source if not overrides else f"{source} with --set overrides")


# --------------------------------------------------------------------------- TOML output


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        return f'"{escaped}"'
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {value!r} as TOML")


def _toml_table(model: BaseModel, prefix: str, lines: list[str]) -> None:
    tables = []
    for key in type(model).model_fields:
        value = getattr(model, key)
        if isinstance(value, BaseModel):
            tables.append((key, value))
        elif value is not None:
            lines.append(f"{key} = {_toml_value(value)}")
    for key, value in tables:
        lines.extend(["", f"[{prefix}{key}]"])
        _toml_table(value, f"{prefix}{key}.", lines)


def scenario_to_toml(scenario: Scenario) -> str:
    """Every key of ``scenario`` (defaults resolved, None omitted) as TOML; loads back equal."""
    lines: list[str] = []
    _toml_table(scenario, "", lines)
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- derived quantities

# Uplink payload per phase and downlink payload per round, as multiples of d (paper
# Section VI: FedAvg, FedProx, FedGMT-v2 send d values each way; SCAFFOLD, FedSMOO and
# the proposed method 2d). Indicative: an algorithm's ``phases()`` is authoritative.
_UPLINK_PHASES = {
    "bayes_aircomp": (("rho", 1), ("nu", 1)),
    "fedavg": (("delta", 1),), "fedprox": (("delta", 1),), "fedgmt": (("delta", 1),),
    "scaffold": (("delta", 2),), "fedsmoo": (("delta", 2),),
}
_DOWNLINK_FACTOR = {"bayes_aircomp": 2, "fedavg": 1, "fedprox": 1, "fedgmt": 1, "scaffold": 2, "fedsmoo": 2}


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
    return {name: factor * num_params for name, factor in _UPLINK_PHASES[scenario.algorithm.name]}


def downlink_values(scenario: Scenario, num_params: int) -> int:
    """Real values the BS multicasts per round (2d for the proposed method)."""
    return _DOWNLINK_FACTOR[scenario.algorithm.name] * num_params


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
    k, d, alg = scenario.cell.num_devices, int(num_params), scenario.algorithm
    if alg.name == "bayes_aircomp":
        c = 4 + 2 * alg.mc_samples if alg.estimator == "reparameterization" else 4
    else:
        c = 4 if _DOWNLINK_FACTOR[alg.name] == 2 else 3
    n = symbols_per_phase(max(uplink_phase_values(scenario, d).values()), scenario.ofdm.num_subcarriers)
    return 4 * k * d * c + 8 * k * n * scenario.ofdm.num_subcarriers


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
