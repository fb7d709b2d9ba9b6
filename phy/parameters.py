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
from phy.limits import DB_LIMIT, MIN_DISTANCE_M, check_cell_parameters
from phy.scheme_parameters import (  # noqa: F401 (re-exported: the uplink schemes' registry)
    UPLINK_SCHEMES,
    AnalogScheme,
    DigitalOfdmaScheme,
    NoncoherentMvScheme,
    OneBitScheme,
    SchemeParameters,
)

# --------------------------------------------------------------------------- cell layouts


class _Disk(Parameters):
    num_devices: int = Field(100, ge=1, description="K")
    radius_m: float = Field(300.0, gt=0, description="cell radius R [m]")


class _Exclusion(Parameters):
    min_distance_m: float = Field(10.0, ge=0, description="no device closer to the BS [m]")

    def closest_distance_m(self) -> float:
        """The least distance a device of this layout can have to the BS [m]."""
        return float(self.min_distance_m)


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

    def closest_distance_m(self) -> float:
        """The least distance a device can have to the BS: the inner radius [m]."""
        return float(self.inner_radius_m)

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

    def closest_distance_m(self) -> float:
        """The nearest given position's distance to the BS [m]."""
        return float(min(math.hypot(x, y) for x, y in self.positions_m))

    @model_validator(mode="after")
    def _check(self) -> Explicit:
        for i, (x, y) in enumerate(self.positions_m):
            if math.hypot(x, y) < self.min_distance_m:
                raise ValueError(f"positions_m: row {i} [{x}, {y}] is {math.hypot(x, y):.2f} m "
                                 f"from the BS, closer than min_distance_m = {self.min_distance_m:g}")
        return self


class RadioMap(_Exclusion, _Disk):
    """Devices at cells of the scene's radio map (``channel.model = "ray_traced"``) whose
    path gain lies in ``path_gain_range_db``, between ``min_distance_m`` and ``radius_m``
    of the BS in the plane, at least ``min_spacing_m`` apart; a device with no traced path,
    or a traced path gain outside the range, is never placed."""

    path_gain_range_db: Annotated[tuple[float, float], BeforeValidator(deep_tuple)] = Field(
        description="[lowest, highest] radio-map path gain of a device's cell [dB]")
    min_spacing_m: float | None = Field(None, ge=0, description="least distance between two "
                                        "devices [m] (unset: 1)")
    radio_map_cell_m: float | None = Field(None, gt=0, description="side of a radio-map cell "
                                           "[m] (unset: 2)")

    DEFAULTS: ClassVar[dict] = {"min_spacing_m": 1.0, "radio_map_cell_m": 2.0}

    @model_validator(mode="after")
    def _check(self) -> RadioMap:
        _inside("min_distance_m", self.min_distance_m, self.radius_m)
        low, high = self.path_gain_range_db
        if not (-DB_LIMIT <= low < high <= 0):
            raise ValueError(f"path_gain_range_db: must be [low, high] with -{DB_LIMIT:g} <= low < "
                             f"high <= 0 (got {list(self.path_gain_range_db)})")
        return self


class SceneExplicit(_Disk):
    """Devices at given [x, y] positions in the scene's coordinates (``channel.model =
    "ray_traced"``), at ``channel.ut_height_m`` above z = 0."""

    positions_m: Annotated[tuple[tuple[float, float], ...], BeforeValidator(deep_tuple)] = Field(
        min_length=1, description="[x, y] per device in scene coordinates [m]")

    @model_validator(mode="after")
    def _check(self) -> SceneExplicit:
        if len(self.positions_m) != self.num_devices:
            raise ValueError(f"positions_m: must have num_devices = {self.num_devices} rows "
                             f"(got {len(self.positions_m)})")
        return self


CELL_LAYOUTS = {
    "uniform_disk": Variant(UniformDisk, "phy.geometry:uniform_disk", extras=("rng",)),
    "annulus": Variant(Annulus, "phy.geometry:annulus", extras=("rng",)),
    "clusters": Variant(Clusters, "phy.geometry:clusters", extras=("rng",)),
    "explicit": Variant(Explicit, "phy.geometry:explicit"),
    "radio_map": Variant(RadioMap, "phy.scene_layouts:radio_map", extras=("rng", "place")),
    "scene_explicit": Variant(SceneExplicit, "phy.scene_layouts:scene_explicit", extras=("place",)),
}
"""``cell.layout`` -> its parameters and the function that drops the devices (``radio_map``
and ``scene_explicit`` in a ray-traced scene, given as the extra ``place``)."""

SCENE_LAYOUTS = ("radio_map", "scene_explicit")
"""The layouts in a ray-traced scene's coordinates: they go with ``channel.model =
"ray_traced"`` and only with it."""


# --------------------------------------------------------------------------- channel models

TDL_PROFILES = ("A", "B", "C", "D", "E")
"""3GPP TR 38.901's TDL profiles (Sionna's ``TDL``)."""

SIONNA_TDL_SINUSOIDS = 20
"""Sinusoids per tap of Sionna's TDL process (its default; :mod:`phy.moving_tdl`)."""

FLOAT32_STEPS_FROM_PROCESSES = 32
"""Processes per device (N_r F_c) from which :meth:`phy.doppler.SumOfSinusoids.along` steps
in float32 (rotations kept: float32 over a step and float64 over a block, 24 bytes per
sinusoid); fewer (a flat channel, the time-domain uplink's paths) are stepped in float64
(16 bytes per sinusoid)."""


def sinusoid_rotation_bytes(num_processes: int) -> int:
    """Bytes per sinusoid of the rotations :meth:`phy.doppler.SumOfSinusoids.along` keeps for
    a device of ``num_processes`` processes."""
    return 24 if num_processes >= FLOAT32_STEPS_FROM_PROCESSES else 16


def tdl_profile_taps(profile: str) -> tuple[int, bool]:
    """``(taps, los)`` of Sionna's TDL ``profile``: its clusters and whether tap 0 has a LoS
    component (TDL-D/E), read from Sionna's profile file without importing Sionna."""
    import importlib.util
    import json
    from pathlib import Path

    root = Path(importlib.util.find_spec("sionna").submodule_search_locations[0])
    spec = json.loads((root / "phy" / "channel" / "tr38901" / "models" / f"TDL-{profile}.json").read_text())
    return int(spec["num_clusters"]), bool(spec["los"])


class ChannelParameters(Parameters):
    """Base of the channel models' parameters, with what the rest of the simulator asks
    of a model without building it (``[privacy]``'s projection reads these)."""

    distance_path_loss: ClassVar[bool] = False
    """Whether its mean gain is ``r^-alpha`` of the distance (the projection can place the
    worst device); False for a model that draws its path loss in the run."""
    flat_fading: ClassVar[bool] = False
    """Whether one fading coefficient covers all subcarriers of a device."""
    scene_coordinates: ClassVar[bool] = False
    """Whether positions are a scene's coordinates with the BS at ``bs_position_m`` (not
    at the origin): the devices stand in a traced scene (``cell.layout`` one of
    :data:`SCENE_LAYOUTS`), the world traces it once per drop, the cell map draws the BS there."""
    least_distance_m: ClassVar[float | None] = None
    """The least device-BS distance the model admits (a TR 38.901 cell's), or None."""


class _PathLoss(ChannelParameters):
    distance_path_loss: ClassVar[bool] = True
    path_loss_exponent: float = Field(4.0, gt=0, description="alpha of the path gain r^-alpha")


class _Carrier(ChannelParameters):
    carrier_frequency_hz: float = Field(3.5e9, gt=0, description="carrier frequency [Hz]")


MOVING_FADING = ("per_subcarrier", "flat", "sionna_tdl", "traced_paths", "cell_rays")
"""What a channel model does when ``[mobility]`` moves the devices (its parameters'
``moving_fading``; None: refused in motion): independent Jakes processes per subcarrier,
one per device on every subcarrier (:mod:`phy.doppler`), Sionna's TDL process at one
speed and the TDL's carrier (:mod:`phy.moving_tdl`), the traced paths each turning
with its own Doppler as the device moves (:mod:`phy.moving_rays`), or a 3GPP cell's
rays of one draw turning the same way (:mod:`phy.moving_tr38901`)."""


class IidRayleighChannel(_PathLoss):
    """i.i.d. Rayleigh per subcarrier (the paper's model); an L-tap delay line in the time domain."""

    moving_fading: ClassVar[str | None] = "per_subcarrier"

    num_taps: int = Field(16, ge=1, description="L, taps of the time-domain delay line")


class FlatRayleighChannel(_PathLoss):
    """One Rayleigh coefficient per device, flat over the subcarriers."""

    flat_fading: ClassVar[bool] = True
    moving_fading: ClassVar[str | None] = "flat"


class TdlChannel(_Carrier, _PathLoss):
    """3GPP TR 38.901 tapped delay line (Sionna's TDL), path loss r^-alpha."""

    moving_fading: ClassVar[str | None] = "sionna_tdl"

    tdl_profile: Literal[TDL_PROFILES] = "A"
    delay_spread_s: float = Field(100e-9, gt=0, description="RMS delay spread [s]")


CELL_PATHS = {"umi": 23, "uma": 24, "rma": 15}
"""Paths of a 3GPP cell's device at rest (Sionna's most clusters over the LoS, NLoS and O2I
states, and 4 more: the two strongest clusters split into three sub-clusters each;
:meth:`phy.cells.SystemLevelCell.cir`)."""


class _Cell3gpp(_Carrier):
    """A TR 38.901 cell (Sionna's system-level model): its own path loss and shadowing."""

    least_distance_m: ClassVar[float | None] = MIN_DISTANCE_M
    moving_fading: ClassVar[str | None] = "cell_rays"

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


BUILTIN_SCENES = (
    "box", "box_knife", "box_one_screen", "box_two_screens", "double_reflector", "etoile",
    "floor_wall", "florence", "munich", "san_francisco", "simple_reflector",
    "simple_street_canyon", "simple_street_canyon_with_cars", "simple_wedge", "triple_reflector")
"""The scenes Sionna RT 1.2 ships (``sionna.rt.scene.<name>``), for ``channel.scene``."""

INTERACTIONS = ("los", "specular", "diffraction", "diffuse")
"""What the ray tracer may trace (``channel.interactions``): the line of sight, specular
reflections, diffraction on edges, diffuse reflections."""

VARIATIONS = ("phase", "static")
"""``channel.variation``: each traced path's phase redrawn every round, or the traced
channel every round."""


def _scene_name(value):
    if value is None or (isinstance(value, str) and (value in BUILTIN_SCENES or value.endswith(".xml"))):
        return value  # None: unset in the [channel] table (the model's own type refuses it)
    raise ValueError(f"must be a built-in Sionna RT scene ({', '.join(BUILTIN_SCENES)}) or a "
                     "Mitsuba .xml file beside the scenario")


class RayTracedChannel(_Carrier):
    """Paths traced by Sionna RT in a scene, once per drop: absolute path gains, no r^-alpha."""

    scene_coordinates: ClassVar[bool] = True
    moving_fading: ClassVar[str | None] = "traced_paths"

    scene: Annotated[str, BeforeValidator(_scene_name)] = Field(
        description="a built-in Sionna RT scene or a Mitsuba .xml file beside the scenario")
    bs_position_m: Annotated[tuple[float, float, float], BeforeValidator(deep_tuple)] = Field(
        description="[x, y, z] of the BS in scene coordinates [m]")
    ut_height_m: float = Field(1.5, gt=0, description="device height above z = 0 [m]")
    bs_antenna_spacing_wavelengths: float | None = Field(
        None, gt=0, description="spacing of the BS's linear array [wavelengths] (unset: 0.5)")
    max_depth: int | None = Field(None, ge=0, le=10, description="most interactions of a path "
                                  "(unset: 3)")
    samples_per_source: int | None = Field(None, ge=1000, le=10**8, description="rays the BS "
                                           "launches (unset: 1e6)")
    interactions: Annotated[tuple[Literal[INTERACTIONS], ...] | None, BeforeValidator(deep_tuple)] = Field(
        None, min_length=1, description="what is traced (unset: ['los', 'specular'])")
    variation: Literal[VARIATIONS] | None = Field(None, description="round to round: 'phase' "
                                                  "(each path's phase redrawn) or 'static' (unset: 'phase')")
    cache_dir: str | None = Field(None, min_length=1, description="folder of the traced drops "
                                  "(unset: 'runs/ray_traced_cache')")
    redrop_every_rounds: int | None = Field(None, ge=1, description="devices placed anew by the cell's "
                                            "layout every N rounds (unset: one drop for the run)")
    retrace_every_m: float | None = Field(None, gt=0, allow_inf_nan=False, description="with a moving "
                                          "[mobility]: a device's paths traced anew each time it has walked "
                                          "this far [m] (unset: the drop's paths, turned as it moves)")

    DEFAULTS: ClassVar[dict] = {
        "bs_antenna_spacing_wavelengths": 0.5, "max_depth": 3, "samples_per_source": 10**6,
        "interactions": ("los", "specular"), "variation": "phase",
        "cache_dir": "runs/ray_traced_cache"}

    @model_validator(mode="after")
    def _check(self) -> RayTracedChannel:
        if self.interactions is not None and len(set(self.interactions)) != len(self.interactions):
            raise ValueError(f"interactions: must not repeat an interaction (got {list(self.interactions)})")
        return self

    def resolved(self, key: str):
        """``key``'s value, or its default when unset (the defaults are written here once)."""
        value = getattr(self, key)
        return self.DEFAULTS.get(key) if value is None else value


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
    "ray_traced": Variant(RayTracedChannel, "phy.ray_traced:RayTracedCell",
                          extras=("positions_m", "subcarrier_spacing_hz", "num_subcarriers", "num_bs_antennas",
                                  "place"), label="ray-traced"),
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
    channel_within_phase: Literal["phase_middle", "per_symbol"] = Field(
        "phase_middle", description="the true channel of an analog, one-bit or non-coherent vote "
        "phase: one, at the phase's middle, or each OFDM symbol's own (phy.uplink.moving_link)")

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
                        arguments={"channel_within_phase": None},
                        extras=("positions_m", "radius_m", "inner_m", "num_subcarriers", "flat",
                                "path_loss_exponent", "rng", "channel", "num_antennas", "paths"),
                        label="straight-line motion"),
    "random_waypoint": Variant(StraightMobility, "phy.moving_channel:random_waypoint",
                               arguments={"channel_within_phase": None},
                               extras=("positions_m", "radius_m", "inner_m", "num_subcarriers", "flat",
                                       "path_loss_exponent", "rng", "channel", "num_antennas", "paths"),
                               label="random waypoint"),
}
"""``mobility.model`` -> its parameters, builder and display name (both moving models share
their keys). ``"static"`` builds
nothing (block fading, every draw as without ``[mobility]``); a moving model builds a
:class:`phy.moving_channel.MovingChannel` from the drop and the run's "mobility" stream."""

# --------------------------------------------------------------------------- CSI models


class PerfectCsi(Parameters):
    """Each device knows its own channel exactly (TDD reciprocity; the paper's assumption)."""

    estimate_is_channel: ClassVar[bool] = True
    """h_hat is h itself, no array of its own (the memory estimate counts none; the other
    models draw h_hat beside h)."""


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
    "centroid": Choice("centroid", facts={"gram_per_subcarrier": True}),
    "maxmin": Choice("max-min", facts={"gram_per_subcarrier": True, "iterative": True}),
}
"""``bs.combiner`` -> its display name and facts: the receive combiners of a
multi-antenna BS (:class:`phy.combiner.ReceiveCombiner`, which implements each).
``gram_per_subcarrier``: it holds an N_r x N_r matrix per subcarrier (the memory
estimate counts it); ``iterative``: it solves per round (the cost estimate times it)."""

SCHEDULING = {
    "uniform": Choice("uniform", "phy.uplink.participation:schedule_uniform",
                      facts={"uniform_draw": True}),
    "best_channel": Choice("best channel", "phy.uplink.participation:schedule_best_channel"),
    "gain_threshold": Choice("gain threshold", "phy.uplink.participation:schedule_gain_threshold",
                             facts={"every_device": True, "keys": ("gain_threshold_db",)}),
}
"""``participation.scheduling`` -> its display name, the function that picks the round's
cohort, ``(config, gain [K], order [K]) -> devices`` (:mod:`phy.uplink.participation`),
and facts: ``uniform_draw`` (the cohort is a uniform draw of ``fraction`` K: Poisson
subsampling's amplification applies), ``every_device`` (every device may be in the
cohort whatever ``fraction``: the memory and cost estimates count K), ``keys`` (the
``[participation]`` keys it needs, and only it)."""
