"""The PHY components' parameters, each declared once, and their registries.

One :class:`native.parameters.Parameters` model per cell layout, channel model, CSI
model and power control:
its keys with their types, bounds, defaults and meaning. The registries map the
scenario's names (``cell.layout``, ``channel.model``, ``csi.model``, ``power.control``) to a
:class:`native.parameters.Variant`: the model and the class that implements it. The
scenario builds its ``[cell]``, ``[channel]``, ``[csi]`` and ``[power]`` tables from
them (``cosim/scenario/tables.py``), the engine builds the components with
:meth:`~native.parameters.Variant.build`, and the implementations (:mod:`phy.geometry`,
:mod:`phy.channel`, :mod:`phy.cells`, :mod:`phy.csi`, :mod:`phy.power`) validate their
arguments with the same models.

A registry entry also carries what the rest of the simulator asks of a variant without
building it, so ``cosim`` names no variant: its ``label`` (figures), a power control's
``budgeted`` and ``over_the_air`` (:class:`PowerControlParameters`; ``[privacy]``'s
projection reads them), and an uplink scheme's flags, symbols per phase, memory and
cost terms and checks against the scenario (:class:`SchemeParameters`).

No NumPy, no TensorFlow (``cosim validate`` imports it without).
"""

from __future__ import annotations

import math
from typing import Annotated, ClassVar, Literal

from pydantic import BeforeValidator, Field, model_validator

from native.parameters import Choice, Parameters, Variant, deep_tuple
from phy.limits import check_cell_parameters  # stdlib only

DB_LIMIT = 300.0
"""Every dB / dBm key lies in [-300, 300]: its linear value (1e-33 to 1e27 W for dBm)
is then a normal float32, as the PHY uses it (1e308 dBm overflowed ``dbm_to_w``)."""


# --------------------------------------------------------------------------- cell layouts


class _Disk(Parameters):
    num_devices: int = Field(100, ge=1, description="K")
    radius_m: float = Field(300.0, gt=0, description="cell radius R [m]")


class _Exclusion(Parameters):
    min_distance_m: float = Field(10.0, ge=0, description="no device closer to the BS [m]")


def _inside(inner_key: str, inner_m: float, radius_m: float) -> None:
    if not inner_m < radius_m:
        raise ValueError(f"{inner_key}: must be < radius_m = {radius_m} (got {inner_m})")


class UniformDisk(_Exclusion, _Disk):
    """Uniform over the area of the disk, outside the exclusion radius (the paper's drop)."""

    @model_validator(mode="after")
    def _check(self) -> UniformDisk:
        _inside("min_distance_m", self.min_distance_m, self.radius_m)
        return self


class Annulus(_Disk):
    """Uniform over the area of the annulus inner_radius_m <= r <= radius_m."""

    inner_radius_m: float = Field(ge=0, description="inner radius [m]")

    @model_validator(mode="after")
    def _check(self) -> Annulus:
        _inside("inner_radius_m", self.inner_radius_m, self.radius_m)
        return self


class Clusters(_Exclusion, _Disk):
    """Gaussian hot spots whose centres are uniform in the cell."""

    num_clusters: int = Field(ge=1, description="number of clusters, at most K")
    cluster_std_m: float = Field(ge=0, description="std of the offsets per coordinate [m]")

    @model_validator(mode="after")
    def _check(self) -> Clusters:
        _inside("min_distance_m", self.min_distance_m, self.radius_m)
        if self.num_clusters > self.num_devices:
            raise ValueError(f"num_clusters: must be <= num_devices = {self.num_devices} "
                             f"(got {self.num_clusters})")
        return self


class Explicit(_Exclusion):
    """Devices at given [x, y] positions."""

    positions_m: Annotated[tuple[tuple[float, float], ...], BeforeValidator(deep_tuple)] = Field(
        min_length=1, description="[x, y] per device [m]")

    @model_validator(mode="after")
    def _check(self) -> Explicit:
        for i, (x, y) in enumerate(self.positions_m):
            if math.hypot(x, y) < self.min_distance_m:
                raise ValueError(f"positions_m: row {i} [{x}, {y}] is {math.hypot(x, y):.2f} m "
                                 f"from the BS, closer than min_distance_m = {self.min_distance_m:g}")
        return self


CELL_LAYOUTS = {
    "uniform_disk": Variant(UniformDisk, "phy.geometry:uniform_disk", extras=("rng",)),
    "annulus": Variant(Annulus, "phy.geometry:annulus", extras=("rng",)),
    "clusters": Variant(Clusters, "phy.geometry:clusters", extras=("rng",)),
    "explicit": Variant(Explicit, "phy.geometry:explicit"),
}
"""``cell.layout`` -> its parameters and the function that drops the devices."""


# --------------------------------------------------------------------------- channel models

TDL_PROFILES = ("A", "B", "C", "D", "E")
"""3GPP TR 38.901's TDL profiles (Sionna's ``TDL``)."""


class _PathLoss(Parameters):
    path_loss_exponent: float = Field(4.0, gt=0, description="alpha of the path gain r^-alpha")


class _Carrier(Parameters):
    carrier_frequency_hz: float = Field(3.5e9, gt=0, description="carrier frequency [Hz]")


MOVING_FADING = ("per_subcarrier", "flat", "sionna_tdl")
"""What a channel model does when ``[mobility]`` moves the devices (its parameters'
``moving_fading``; None: refused in motion): independent Jakes processes per subcarrier,
one per device on every subcarrier (:mod:`phy.doppler`), or Sionna's TDL process at one
speed and the TDL's carrier (:mod:`phy.moving_tdl`)."""


class IidRayleighChannel(_PathLoss):
    """i.i.d. Rayleigh per subcarrier (the paper's model); an L-tap delay line in the time domain."""

    moving_fading: ClassVar[str | None] = "per_subcarrier"

    num_taps: int = Field(16, ge=1, description="L, taps of the time-domain delay line")


class FlatRayleighChannel(_PathLoss):
    """One Rayleigh coefficient per device, flat over the subcarriers."""

    moving_fading: ClassVar[str | None] = "flat"


class TdlChannel(_Carrier, _PathLoss):
    """3GPP TR 38.901 tapped delay line (Sionna's TDL), path loss r^-alpha."""

    moving_fading: ClassVar[str | None] = "sionna_tdl"

    tdl_profile: Literal[TDL_PROFILES] = "A"
    delay_spread_s: float = Field(100e-9, gt=0, description="RMS delay spread [s]")


class _Cell3gpp(_Carrier):
    """A TR 38.901 cell (Sionna's system-level model): its own path loss and shadowing."""

    model: ClassVar[str] = ""
    bs_height_m: float | None = Field(None, gt=0, description="BS height [m] (the model's default when unset)")
    ut_height_m: float = Field(1.5, gt=0, description="device height [m]")
    indoor_probability: float = Field(0.0, ge=0, le=1, description="share of indoor devices (O2I loss)")

    @model_validator(mode="after")
    def _check(self) -> _Cell3gpp:
        try:  # Table 7.4.1-1's frequency and height ranges (phy.limits)
            check_cell_parameters(self.model, carrier_frequency_hz=self.carrier_frequency_hz,
                                  bs_height_m=self.bs_height_m, ut_height_m=self.ut_height_m)
        except ValueError as error:
            key, _, rule = str(error).partition(" ")
            raise ValueError(f"{key}: {rule}") from None
        return self


class UmiChannel(_Cell3gpp):
    """Urban micro (UMi street canyon)."""

    model: ClassVar[str] = "umi"


class UmaChannel(_Cell3gpp):
    """Urban macro."""

    model: ClassVar[str] = "uma"


class RmaChannel(_Cell3gpp):
    """Rural macro."""

    model: ClassVar[str] = "rma"


_GRID = ("num_subcarriers",)
_CELL = {"extras": ("model", "positions_m", "subcarrier_spacing_hz", "num_subcarriers", "seed",
                    "num_bs_antennas")}
CHANNEL_MODELS = {
    "iid_rayleigh": Variant(IidRayleighChannel, "phy.channel:IidRayleigh", {"path_loss_exponent": None},
                            extras=(*_GRID, "sample_period_s"), label="i.i.d. Rayleigh"),
    "flat_rayleigh": Variant(FlatRayleighChannel, "phy.channel:FlatRayleigh",
                             {"path_loss_exponent": None}, extras=_GRID, label="flat Rayleigh"),
    "tdl": Variant(TdlChannel, "phy.channel:TDL", {"path_loss_exponent": None, "tdl_profile": "profile"},
                   extras=(*_GRID, "subcarrier_spacing_hz"), label="3GPP TDL"),
    "umi": Variant(UmiChannel, "phy.cells:SystemLevelCell", **_CELL, label="3GPP UMi"),
    "uma": Variant(UmaChannel, "phy.cells:SystemLevelCell", **_CELL, label="3GPP UMa"),
    "rma": Variant(RmaChannel, "phy.cells:SystemLevelCell", **_CELL, label="3GPP RMa"),
}
"""``channel.model`` -> its parameters, class and display name (called with the grid, and for the 3GPP
cells the devices' positions and the static seed, as extras). ``path_loss_exponent`` goes
to :func:`phy.geometry.path_gain`, not to the channel."""


# --------------------------------------------------------------------------- mobility


class StaticMobility(Parameters):
    """Devices that do not move: the block fading of ``channel.model`` (today's model)."""

    moves: ClassVar[bool] = False
    """Whether the model moves the devices (builds a :class:`phy.moving_channel.MovingChannel`)."""


class StraightMobility(Parameters):
    """Constant speed, in straight lines reflected at the cell's edge and exclusion circle or
    between random waypoints (phy.mobility), with Jakes-correlated fading in time (phy.doppler)."""

    moves: ClassVar[bool] = True

    speed_mps: Annotated[float | tuple[float, float], BeforeValidator(deep_tuple)] = Field(
        0.0, description="v [m/s], or [low, high]: uniform per device")
    compute_seconds_per_round: float = Field(
        0.0, ge=0, description="the devices' local computation before a round's first phase [s]")
    carrier_frequency_hz: float = Field(3.5e9, gt=0, description="f_c of the Doppler f_D = v f_c / c [Hz]")
    num_sinusoids: int = Field(8, ge=1, le=1024, description="M, sinusoids per Jakes process")

    @model_validator(mode="after")
    def _check(self) -> StraightMobility:
        speeds = self.speed_mps if isinstance(self.speed_mps, tuple) else (self.speed_mps,)
        if not all(math.isfinite(v) and 0.0 <= v <= 1e4 for v in speeds):
            raise ValueError(f"speed_mps: must be in [0, 1e4] m/s (got {self.speed_mps})")
        if len(speeds) == 2 and speeds[0] > speeds[1]:
            raise ValueError(f"speed_mps: [low, high] needs low <= high (got {list(self.speed_mps)})")
        return self


def moves(model: str) -> bool:
    """Whether ``mobility.model = model`` moves the devices (:attr:`StraightMobility.moves`)."""
    return bool(getattr(MOBILITY_MODELS[model].parameters, "moves", False))


def moving_fading(model: str) -> str | None:
    """What ``channel.model = model`` does in motion (:data:`MOVING_FADING`; None: refused)."""
    return getattr(CHANNEL_MODELS[model].parameters, "moving_fading", None)


MOBILITY_MODELS = {
    "static": Variant(StaticMobility, "phy.moving_channel:static", label="static"),
    "straight": Variant(StraightMobility, "phy.moving_channel:straight",
                        extras=("positions_m", "radius_m", "inner_m", "num_subcarriers", "flat",
                                "path_loss_exponent", "rng", "channel"), label="straight-line motion"),
    "random_waypoint": Variant(StraightMobility, "phy.moving_channel:random_waypoint",
                               extras=("positions_m", "radius_m", "inner_m", "num_subcarriers", "flat",
                                       "path_loss_exponent", "rng", "channel"), label="random waypoint"),
}
"""``mobility.model`` -> its parameters, builder and display name (both moving models share
their keys). ``"static"`` builds
nothing (block fading, every draw as without ``[mobility]``); a moving model builds a
:class:`phy.moving_channel.MovingChannel` from the drop and the run's "mobility" stream."""

# --------------------------------------------------------------------------- CSI models


class PerfectCsi(Parameters):
    """Each device knows its own channel exactly (TDD reciprocity; the paper's assumption)."""


class GaussianCsi(Parameters):
    """Additive Gaussian estimation error at a normalised MSE."""

    nmse_db: float = Field(ge=-DB_LIMIT, le=DB_LIMIT,
                           description="E|h_hat - h|^2 / E|h|^2 [dB], e.g. -20")


class LsPilotCsi(Parameters):
    """Least-squares estimate from one OFDM symbol of pilots (Sionna's LSChannelEstimator)."""

    pilot_snr_db: float = Field(ge=-DB_LIMIT, le=DB_LIMIT, description="pilot SNR [dB]")


class OutdatedCsi(Parameters):
    """Channel aging: h_hat = rho h + sqrt(1 - rho^2) w (first-order Gauss-Markov), rho given
    or Jakes' J0(2 pi f_D tau) of a speed, a carrier and the estimate's age."""

    correlation: float | None = Field(None, ge=-1, le=1, description="rho, e.g. J0(2 pi f_D tau)")
    delay_s: float | None = Field(None, ge=0, description="tau, the estimate's age [s] (instead of correlation)")
    speed_mps: float | None = Field(None, ge=0, le=1e4, description="v of f_D = v f_c / c [m/s]")
    carrier_frequency_hz: float | None = Field(None, gt=0, description="f_c of f_D = v f_c / c [Hz]")

    @model_validator(mode="after")
    def _check(self) -> OutdatedCsi:
        aging = (self.delay_s, self.speed_mps, self.carrier_frequency_hz)
        if self.correlation is None and None in aging:
            raise ValueError("correlation: required, or delay_s, speed_mps and carrier_frequency_hz "
                             "(rho = J0(2 pi v f_c tau / c))")
        if self.correlation is not None and any(v is not None for v in aging):
            raise ValueError(f"correlation: = {self.correlation} and delay_s, speed_mps, "
                             "carrier_frequency_hz are two ways to give rho; set one")
        return self

    def rho(self) -> float:
        """The correlation: given, or ``J0(2 pi (v f_c / c) tau)`` (Jakes' spectrum)."""
        if self.correlation is not None:
            return float(self.correlation)
        from scipy.special import j0  # here: the registry imports no NumPy or SciPy

        return float(j0(2.0 * math.pi * self.speed_mps * self.carrier_frequency_hz / 299_792_458.0
                        * self.delay_s))


CSI_MODELS = {
    "perfect": Variant(PerfectCsi, "phy.csi:PerfectCSI", label="perfect CSI"),
    "gaussian": Variant(GaussianCsi, "phy.csi:GaussianCSI", label="Gaussian CSI error"),
    "ls_pilots": Variant(LsPilotCsi, "phy.csi:LSPilotCSI", extras=("pilot_subcarrier_spacing",),
                         label="LS pilot estimate"),
    "outdated": Variant(OutdatedCsi, "phy.csi:OutdatedCSI", extras=("channel",), label="outdated CSI"),
}
"""``csi.model`` -> its parameters, class and display name."""


# --------------------------------------------------------------------------- power controls


class PowerControlParameters(Parameters):
    """Base of the power controls' parameters, and what the rest of the simulator asks
    of a control without building it (no TensorFlow: ``cosim/privacy`` reads these);
    :class:`phy.power.PowerControl`'s classes take theirs from here."""

    budgeted: ClassVar[bool] = True
    """Whether the control keeps ``sum_f u v^2 <= P``: the uplink counts
    ``power_over_budget_<phase>``, ``[privacy]``'s projection bounds a device's signal by
    the budget (False for the references)."""
    over_the_air: ClassVar[bool] = True
    """False for the error-free reference: no signal, no channel, no noise (the BS gets
    the exact weighted sum)."""
    scales_for_privacy: ClassVar[bool] = False
    """True for a control whose common transmit scaling the uplink lowers, per phase, to
    meet ``privacy.target_epsilon`` instead of adding noise (it needs that target)."""
    allows_joint_gamma: ClassVar[bool] = False
    """Whether ``power.gamma = "joint"`` may choose the receiver scaling under it (the
    joint scaling minimises the KKT control's distortion plus the receiver noise)."""


class OptimalControl(PowerControlParameters):
    """The proposed KKT power control (eq. ``Opt_v``)."""

    allows_joint_gamma: ClassVar[bool] = True


class TruncatedInversionControl(PowerControlParameters):
    """Truncated channel inversion (TCI), the paper's baseline."""

    # The paper gives no threshold. 0.1 was measured on the quickstart with TCI (study
    # tci_threshold, 2 seeds, 60 rounds): final accuracy averaged over 0 and 20 dBm 0.757
    # (t = 0.01), 0.776 (t = 0.1), 0.774 (t = 1), ECE 0.05 at t = 0.1 against 0.09 at
    # t = 1 (docs/choices.md).
    tci_gain_threshold: float = Field(
        0.1, ge=0, description="threshold on |h_hat|^2 relative to the path gain; "
        "1 - e^-t of i.i.d. Rayleigh subcarriers stay silent")


class PrivacyScalingControl(PowerControlParameters):
    """Liu and Simeone's adaptive power scaling on the KKT control: the devices' common
    transmit scaling lowered to meet ``privacy.target_epsilon`` (no artificial noise)."""

    scales_for_privacy: ClassVar[bool] = True


class FullInversionControl(PowerControlParameters):
    """Channel inversion on every subcarrier, scaled to the budget."""

    budgeted: ClassVar[bool] = False


class IdealControl(PowerControlParameters):
    """Error-free aggregation: the exact weighted sum (no channel)."""

    budgeted: ClassVar[bool] = False
    over_the_air: ClassVar[bool] = False


POWER_CONTROLS = {
    "optimal": Variant(OptimalControl, "phy.power:OptimalPower", label="KKT power control"),
    "truncated_inversion": Variant(TruncatedInversionControl, "phy.power:TruncatedInversion",
                                   {"tci_gain_threshold": "gain_threshold"}, label="truncated inversion"),
    "privacy_scaling": Variant(PrivacyScalingControl, "phy.power:PrivacyScaling",
                               label="privacy power scaling"),
    "full_inversion": Variant(FullInversionControl, "phy.power:FullInversion", label="full inversion"),
    "ideal": Variant(IdealControl, "phy.power:IdealAggregation", label="error-free aggregation"),
}
"""``power.control`` -> its parameters (with whether it is ``budgeted`` and sends
``over_the_air``), class and display name."""


def budgeted(control: str) -> bool:
    """Whether ``power.control = control`` keeps the power budget
    (:attr:`PowerControlParameters.budgeted` of its registry entry; True for parameters
    that do not say, as :class:`phy.power.PowerControl`)."""
    return bool(getattr(POWER_CONTROLS[control].parameters, "budgeted", True))


def scales_for_privacy(control: str) -> bool:
    """Whether ``power.control = control`` meets a privacy target by lowering the
    devices' transmit scaling (:attr:`PowerControlParameters.scales_for_privacy`; False
    for parameters that do not say)."""
    return bool(getattr(POWER_CONTROLS[control].parameters, "scales_for_privacy", False))


def allows_joint_gamma(control: str) -> bool:
    """Whether ``power.gamma = "joint"`` applies under ``power.control = control``
    (:attr:`PowerControlParameters.allows_joint_gamma`; False for parameters that do not say)."""
    return bool(getattr(POWER_CONTROLS[control].parameters, "allows_joint_gamma", False))


def over_the_air(control: str) -> bool:
    """Whether ``power.control = control`` sends a signal over the air
    (:attr:`PowerControlParameters.over_the_air` of its registry entry; True for
    parameters that do not say)."""
    return bool(getattr(POWER_CONTROLS[control].parameters, "over_the_air", True))


# --------------------------------------------------------------------------- combiners, scheduling


COMBINERS = {
    "mrc_strongest": Choice("MRC (strongest)"),
    "centroid": Choice("centroid"),
    "maxmin": Choice("max-min"),
}
"""``bs.combiner`` -> its display name: the receive combiners of a multi-antenna BS
(:class:`phy.combiner.ReceiveCombiner`, which implements each)."""

SCHEDULING = {
    "uniform": Choice("uniform", "phy.uplink.participation:schedule_uniform"),
    "best_channel": Choice("best channel", "phy.uplink.participation:schedule_best_channel"),
    "gain_threshold": Choice("gain threshold", "phy.uplink.participation:schedule_gain_threshold"),
}
"""``participation.scheduling`` -> its display name and the function that picks the
round's cohort, ``(config, gain [K], order [K]) -> devices`` (:mod:`phy.uplink.participation`)."""


# --------------------------------------------------------------------------- uplink schemes


def _ceil_div(a: int, b: int) -> int:
    return -(-int(a) // int(b))


class SchemeParameters(Parameters):
    """Base of the uplink schemes' parameters, and every fact the rest of the simulator
    needs of a scheme without building it (no TensorFlow): what it ``carries``, whether
    ``[privacy]`` ``accounts_privacy`` for it, whether it has the analog receiver
    scaling ``power.gamma = "joint"`` chooses, its OFDM symbols per phase, its memory
    term, its cost term and its checks against the scenario. ``cosim`` reads these and
    names no scheme; the scheme classes (:mod:`phy.uplink`) take their flags from here."""

    carries: ClassVar[str] = "values"
    """``"values"`` (the estimate approximates the weighted sum) or ``"signs"`` (a vote)."""
    accounts_privacy: ClassVar[bool] = False
    """Whether ``[privacy]``'s mechanism describes what the BS sees under this scheme."""
    receiver_scaling: ClassVar[bool] = False
    """Whether the scheme has the receiver scaling gamma that ``power.gamma = "joint"``
    chooses per phase (:func:`phy.receiver_scaling.joint_gamma`)."""
    phase_seconds: ClassVar[float | None] = None
    """Its cost term (``cosim/study/cost.py``): CPU seconds one phase adds to the round
    the cost table measured (the analog scheme's: 0), at K = 100 senders of 466,698
    values each (``cosim.study.cost.SCHEME_PHASE_VALUES``); None: never measured, so
    the run's cost is not estimated rather than wrong."""

    def symbols(self, num_values: int, num_subcarriers: int) -> int:
        """OFDM symbols of a phase of ``num_values`` values: ceil(n / F), one value per
        resource element (the grouping rule)."""
        return _ceil_div(num_values, num_subcarriers)

    def uplink_bytes_per_sender(self, num_values: int, num_subcarriers: int) -> int:
        """Its memory term (``cosim/scenario/derived.py``): the bytes one sender adds to
        the uplink phase of ``num_values`` values, measured (``benchmarks/memory_peak.py``).
        A scheme must declare its own: there is no default to be silently wrong."""
        raise NotImplementedError(f"{type(self).__name__} declares no uplink_bytes_per_sender "
                                  "(its memory term)")

    def check_scenario(self, scenario) -> None:
        """ValueError ``"key: rule"`` for what the scheme does not support in ``scenario``
        (read by attribute: ``scenario.ofdm``, ``.cell``, ``.privacy``, ...); nothing by
        default."""


class AnalogScheme(SchemeParameters):
    """The paper's broadband analog aggregation (Section IV): every update superposed on
    the same resource elements, one real value per element."""

    carries: ClassVar[str] = "values"
    # [privacy]'s mechanism (phy.privacy: the receiver noise against each sender's
    # amplitude on the shared subcarriers) is this scheme's; no other scheme has it.
    accounts_privacy: ClassVar[bool] = True
    receiver_scaling: ClassVar[bool] = True
    phase_seconds: ClassVar[float | None] = 0.0  # the cost table's own scheme

    def uplink_bytes_per_sender(self, num_values: int, num_subcarriers: int) -> int:
        """``4 n + 8 N F``: the [K_S, n] float32 updates and the complex64 grid [K_S, N, F]."""
        n, f = int(num_values), int(num_subcarriers)
        return 4 * n + 8 * self.symbols(n, f) * f


class DigitalOfdmaScheme(SchemeParameters):
    """The digital baseline (as compared in Zhu, Wang, Huang, IEEE TWC 2020): each
    sender's update stochastically quantized, the subcarriers shared among the senders,
    each device decoded on its own (:mod:`phy.uplink.digital_ofdma`)."""

    carries: ClassVar[str] = "values"
    # measured 2026-11-28 at commit 23947c1 (docs/schemes.md): the proposed method's two
    # phases at 8 bits, paper_mnist, against analog's round
    phase_seconds: ClassVar[float | None] = 0.32

    bits_per_value: Literal[1, 2, 4, 8, 16, 32] = Field(
        8, description="b, bits per quantized value (2^b levels on [-s, s], s = max |value| "
        "sent as a 32-bit float)")
    allocation: Literal["equal", "max_min"] = Field(
        "equal", description="the senders' subcarriers: an equal interleaved split, or Rhee "
        "and Cioffi's greedy max-min rate allocation (VTC 2000)")
    rate_model: Literal["shannon", "nr_mcs"] = Field(
        "shannon", description="the rate a device's SNR allows: Shannon with the gap "
        "snr_gap_db, or the 5G NR MCS (TS 38.214 Table 5.1.3.1-1) whose tabulated BLER at "
        "the device's effective SNR is at most target_bler")
    snr_gap_db: float = Field(
        0.0, ge=0, le=DB_LIMIT, description="Gamma, the code's SNR gap to capacity [dB]: a "
        "subcarrier carries log2(1 + SNR / Gamma) bits per OFDM symbol (0: capacity)")
    target_bler: float = Field(
        0.1, gt=0, lt=1, description="with rate_model = 'nr_mcs': the block error rate an "
        "MCS must reach at the device's effective SNR to be chosen")
    rate_margin_db: float = Field(
        0.0, ge=0, le=DB_LIMIT, description="back-off [dB] a device applies to the SNR of its "
        "CSI estimate when it picks its rate (against outage under CSI error)")
    slot_symbols: int | None = Field(
        None, ge=1, description="the phase's slot budget in OFDM symbols: a device whose "
        "bits need more is in outage (None: no budget)")

    def uplink_bytes_per_sender(self, num_values: int, num_subcarriers: int) -> int:
        """``14 n``: the updates, their NumPy copy, the quantizer's float64 rows."""
        return 14 * int(num_values)

    def check_scenario(self, scenario) -> None:
        """What it does not support: the time-domain uplink, [privacy] (it accounts the
        analog receiver noise), more devices than subcarriers (each sender needs one)."""
        scheme = 'uplink.scheme = "digital_ofdma"'
        if scenario.ofdm.domain != "frequency":
            raise ValueError(f"ofdm.domain: = {scenario.ofdm.domain!r} is not supported with {scheme} (it "
                             "decodes each device per subcarrier in the frequency domain); set "
                             "ofdm.domain = \"frequency\"")
        if scenario.privacy is not None:
            raise ValueError(f"privacy: [privacy] is not supported with {scheme}: the accounting is of the "
                             "analog scheme's receiver noise, and the digital BS decodes each update "
                             "exactly; remove [privacy]")
        if scenario.cell.num_devices > scenario.ofdm.num_subcarriers:
            raise ValueError(f"cell.num_devices: = {scenario.cell.num_devices} is more than "
                             f"ofdm.num_subcarriers = {scenario.ofdm.num_subcarriers}: {scheme} gives "
                             "every sender at least one subcarrier")


ONE_BIT_MODULATIONS = ("bpsk", "qpsk")
"""``uplink.one_bit_modulation``: one sign per resource element (the real part), or two
(the real and the imaginary part)."""


class OneBitScheme(SchemeParameters):
    """One-bit broadband digital aggregation (Zhu, Du, Gunduz, Huang, IEEE TWC 2021):
    the signs of the updates as BPSK or QPSK symbols under truncated channel inversion,
    the BS's sign of the superposed signal a majority vote per entry."""

    carries: ClassVar[str] = "signs"
    phase_seconds: ClassVar[float | None] = 0.18  # signSGD's one phase, measured as digital_ofdma's
    one_bit_modulation: Literal[ONE_BIT_MODULATIONS] = Field(
        "bpsk", description="bpsk: one sign per resource element; qpsk: two (I and Q)")
    # The same convention and default as power.tci_gain_threshold (docs/choices.md).
    one_bit_gain_threshold: float = Field(
        0.1, ge=0, description="truncation threshold on |h_hat|^2 relative to the path gain; "
        "a subcarrier below it stays silent (1 - e^-t of i.i.d. Rayleigh subcarriers)")

    def symbols(self, num_values: int, num_subcarriers: int) -> int:
        """OFDM symbols of a phase of ``num_values`` signs: ceil(n / F) (BPSK) or
        ceil(n / (2 F)) (QPSK)."""
        return _ceil_div(_ceil_div(num_values, self.signs_per_element), num_subcarriers)

    @property
    def signs_per_element(self) -> int:
        """p: 1 (BPSK) or 2 (QPSK, I and Q)."""
        return 2 if self.one_bit_modulation == "qpsk" else 1

    def uplink_bytes_per_sender(self, num_values: int, num_subcarriers: int) -> int:
        """``4 n + 28 N F p``: the signs, the padded grid of p signs per element, its real
        parts and the superposition's temporaries, float32."""
        n, f = int(num_values), int(num_subcarriers)
        return 4 * n + 28 * self.symbols(n, f) * f * self.signs_per_element


NONCOHERENT_POWER = ("path_gain_inversion", "full_power")
"""``uplink.noncoherent_power``: each device's tone power scaled by its weight over its
long-term path gain (the weakest at its full share), or the full share P / (F/2) each."""


class NoncoherentMvScheme(SchemeParameters):
    """Non-coherent majority vote (Sahin and Yang, IEEE TWC 2023): each sign activates
    one of two subcarriers with a random-phase symbol, the BS compares their energies; no
    instantaneous CSI at the devices or the BS."""

    carries: ClassVar[str] = "signs"
    phase_seconds: ClassVar[float | None] = 0.60  # signSGD's one phase, measured as digital_ofdma's
    noncoherent_power: Literal[NONCOHERENT_POWER] = Field(
        "path_gain_inversion", description="path_gain_inversion: mean received power pi_k c "
        "(large-scale fading compensated); full_power: P / (F/2) per active tone")

    def symbols(self, num_values: int, num_subcarriers: int) -> int:
        """OFDM symbols of a phase of ``num_values`` signs: ceil(n / floor(F / 2)), two
        resource elements per sign (ValueError for F < 2)."""
        return _ceil_div(num_values, self.pairs(num_subcarriers))

    @staticmethod
    def pairs(num_subcarriers: int) -> int:
        """M = floor(F / 2), the signs per OFDM symbol; the rule F >= 2, written once
        (ValueError naming ``ofdm.num_subcarriers`` otherwise)."""
        if num_subcarriers < 2:
            raise ValueError(f"ofdm.num_subcarriers: uplink.scheme = 'noncoherent_mv' needs at least 2, "
                             f"a pair per sign (got {num_subcarriers})")
        return int(num_subcarriers) // 2

    def uplink_bytes_per_sender(self, num_values: int, num_subcarriers: int) -> int:
        """``4 n + 54 N M`` (M = floor(F/2) tone pairs): the signs, the phases, their
        cosines and sines, the tone masks and the products, float32."""
        n, f = int(num_values), int(num_subcarriers)
        return 4 * n + 54 * self.symbols(n, f) * self.pairs(f)

    def check_scenario(self, scenario) -> None:
        """F >= 2 (:meth:`pairs`)."""
        self.pairs(scenario.ofdm.num_subcarriers)


UPLINK_SCHEMES = {
    "analog": Variant(AnalogScheme, "phy.uplink.analog:Analog"),
    "digital_ofdma": Variant(DigitalOfdmaScheme, "phy.uplink.digital_ofdma:DigitalOfdma"),
    "one_bit": Variant(OneBitScheme, "phy.uplink.one_bit:OneBit",
                       {"one_bit_modulation": "modulation", "one_bit_gain_threshold": "gain_threshold"}),
    "noncoherent_mv": Variant(NoncoherentMvScheme, "phy.uplink.noncoherent_mv:NoncoherentMajorityVote",
                              {"noncoherent_power": "power"}),
}
"""``uplink.scheme`` -> its parameters and class (:mod:`phy.uplink.scheme`); a scheme's
parameters (a :class:`SchemeParameters`) declare what it ``carries`` (``"values"`` or
``"signs"``), whether ``[privacy]`` ``accounts_privacy`` for it (absent: False), whether
it has the ``receiver_scaling`` of ``power.gamma = "joint"``, its symbols per phase, its
memory and cost terms and its checks against the scenario; the scenario's checks, its
estimates and the scheme classes read them from here."""
