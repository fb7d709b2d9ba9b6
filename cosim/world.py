"""The static world of a run, built once from its scenario: :func:`build_world`.

The device drop, the path gains, the dataset and its partition (from the scenario's
STATIC_ROUND streams), the model, the FL algorithm, the uplink block
(:class:`phy.uplink.Uplink`, its components built from the registries of
:mod:`phy.parameters` with ``Variant.build``) and the evaluator. Everything a round
changes is in the algorithm's state (:func:`cosim.round.run_round`), but the drops after
the first with ``channel.redrop_every_rounds`` (:func:`_drops_of`, made by the uplink
when their first round comes).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from cosim import rng as rngs
from cosim.evaluation import Evaluator
from cosim.local_data import scenario_dataset, scenario_partition
from cosim.scenario import Scenario
from cosim.scenario.derived import device_table_directory, devices_in_memory, scenario_num_params
from cosim.scenario.mobility_rules import moving
from cosim.scenario.scene import traces_scene
from learning import algorithms as fl_algorithms
from learning.algorithms.base import DeviceData, FederatedAlgorithm
from learning.catalog import CATALOG
from learning.data.datasets import Dataset
from learning.data.partition import IndexedDeviceData, Partition, to_device_data
from learning.device_table import TableStore
from learning.models.architectures import build_model
from phy import geometry
from phy.combiner import ReceiveCombiner
from phy.parameters import (
    CELL_LAYOUTS,
    CHANNEL_MODELS,
    CSI_MODELS,
    MOBILITY_MODELS,
    POWER_CONTROLS,
    UPLINK_SCHEMES,
    moving_fading,
)
from phy.sync import UniformOffsets
from phy.uplink import Uplink
from phy.uplink.private import Private
from phy.uplink.settings import AirInterface, ChannelOverTime, Cohort, DownlinkLoad, TraceOptions


@dataclass(frozen=True)
class World:
    """What a scenario fixes for the whole run.

    Attributes: ``scenario``; ``deployment`` (:class:`phy.geometry.Deployment`),
    ``path_gain`` [K] float64, ``dataset``, ``partition``, ``device_data`` (the padded
    local datasets), ``label_histogram`` [K, C]; ``model``, ``algorithm``
    (:class:`learning.algorithms.base.FederatedAlgorithm`), ``uplink``
    (:class:`phy.uplink.Uplink`), ``evaluator`` (:class:`cosim.evaluation.Evaluator`),
    ``local_steps`` (E), ``devices_in_memory`` (the devices whose updates a round holds at
    once: None for all, else the round streams them, :mod:`cosim.streamed_round`, and the
    algorithm's per-device tables are on disk in :func:`device_table_directory`).
    """

    scenario: Scenario
    deployment: geometry.Deployment
    path_gain: np.ndarray
    dataset: Dataset
    partition: Partition
    device_data: DeviceData | IndexedDeviceData
    label_histogram: np.ndarray
    model: Any
    algorithm: FederatedAlgorithm
    uplink: Uplink
    evaluator: Evaluator
    local_steps: int
    devices_in_memory: int | None = None

    @property
    def num_params(self) -> int:
        """d, the model's weights."""
        return int(self.model.num_params)

    def initial_state(self) -> Any:
        """The algorithm's initial state (deterministic for the scenario's seed)."""
        return self.algorithm.init(rngs.stream_seed(self.scenario.seed, rngs.STATIC_ROUND, rngs.INIT))


def build_world(scenario: Scenario) -> World:
    """The static parts of ``scenario``'s run, built once (deterministic for its seed)."""
    chunk = devices_in_memory(scenario, scenario_num_params(scenario))
    static = _static_data(scenario, indexed=chunk is not None)
    traced = static.pop("channel")  # the ray-traced channel, else None
    place = static.pop("place")  # its scene, else None
    dataset = static["dataset"]
    model = build_model(scenario.model.architecture, dataset.input_shape, dataset.num_classes,
                        tuple(scenario.model.hidden_units))
    algorithm = fl_algorithms.build(scenario.algorithm.name, model, scenario.cell.num_devices,
                                    runtime=scenario.runtime.runtime(), **scenario.hyper_parameters())
    if chunk is not None and getattr(algorithm, "device_fields", tuple)():
        algorithm.keep_tables_on_disk(TableStore(device_table_directory(scenario.trace_path)))
    return World(
        scenario=scenario, **static, model=model, algorithm=algorithm,
        uplink=build_uplink(scenario, {**static, "channel": traced, "place": place}, algorithm),
        evaluator=Evaluator.from_scenario(scenario, dataset),
        local_steps=int(scenario.hyper_parameters().get("local_steps", 1)),
        devices_in_memory=chunk,
    )


def _channel_of(scenario: Scenario, deployment: geometry.Deployment, place=None):
    """The scenario's channel model (:data:`phy.parameters.CHANNEL_MODELS`) on its grid; a
    3GPP cell (``channel.model = "umi" | "uma" | "rma"``) draws its large-scale state
    (LoS, path loss, shadow fading) once, from the static "cell" stream; the ray-traced
    channel takes its paths from ``place`` (:func:`_place_of`)."""
    ofdm = scenario.ofdm
    return CHANNEL_MODELS[scenario.channel.model].build(
        scenario.channel.variant_values(), model=scenario.channel.model,
        positions_m=np.asarray(deployment.positions_m, np.float64),
        num_subcarriers=ofdm.num_subcarriers, subcarrier_spacing_hz=ofdm.subcarrier_spacing_hz,
        sample_period_s=1.0 / ofdm.bandwidth_hz,
        seed=rngs.stream_seed(scenario.seed, rngs.STATIC_ROUND, rngs.CELL),
        num_bs_antennas=scenario.bs.num_antennas, place=place,
    )


def _place_of(scenario: Scenario):
    """The ray-traced scene with the BS (:class:`phy.ray_tracing.RayTracedPlace`, imported
    here: only a run with ``channel.model = "ray_traced"`` loads it), else None; with moving
    devices its paths keep their directions of arrival (:mod:`phy.moving_rays`)."""
    if not traces_scene(scenario.channel.model):
        return None
    from phy.ray_tracing import RayTracedPlace

    return RayTracedPlace(scenario.channel.variant_parameters(), scenario.bs.num_antennas,
                          arrivals=moving(scenario))


def _static_data(scenario: Scenario, indexed: bool = False) -> dict:
    """Drop the devices, load and partition the data (deterministic for the scenario's seed);
    ``indexed``: the devices' data as indices into the training set
    (:class:`learning.data.partition.IndexedDeviceData`, for a round that streams them)."""
    cell = scenario.cell
    geo_rng = rngs.numpy_rng(scenario.seed, rngs.STATIC_ROUND, rngs.GEOMETRY)
    place = _place_of(scenario)
    deployment = CELL_LAYOUTS[cell.layout].build(cell.variant_values(), rng=geo_rng, place=place)
    channel = None  # built here once when tracing made it (kept for the uplink)
    facts = CHANNEL_MODELS[scenario.channel.model].parameters  # its registry entry says
    if facts.scene_coordinates:
        channel = _channel_of(scenario, deployment, place)
        path_gain = channel.path_gain
    elif not facts.distance_path_loss:  # a 3GPP cell draws its large-scale fading
        path_gain = _channel_of(scenario, deployment).path_gain
    else:
        path_gain = geometry.path_gain(deployment.distances_m, scenario.channel.path_loss_exponent)

    dataset = scenario_dataset(scenario)
    parts = scenario_partition(scenario, dataset)
    return dict(
        deployment=deployment, channel=channel, place=place,
        path_gain=np.asarray(path_gain, np.float64),
        dataset=dataset,
        partition=parts,
        device_data=IndexedDeviceData.of(dataset, parts) if indexed else to_device_data(dataset, parts),
        label_histogram=parts.label_histogram(dataset.y_train, dataset.num_classes),
    )


def build_uplink(scenario: Scenario, world: dict, algorithm: FederatedAlgorithm) -> Uplink:
    """The scenario's :class:`phy.uplink.Uplink`: its components built from the registries
    of :mod:`phy.parameters` (``Variant.build``; a scheme takes the ``[power]`` control and
    gamma when its registry entry names them; under ``[privacy]`` wrapped in
    :class:`phy.uplink.private.Private`), its groups of :mod:`phy.uplink.settings` and the
    run seed."""
    power = scenario.power
    phases = [(phase.name, phase.num_values) for phase in algorithm.phases()]
    channel = world["channel"] if world.get("channel") is not None else _channel_of(scenario, world["deployment"])
    csi = CSI_MODELS[scenario.csi.model].build(scenario.csi.variant_values())
    scheme = UPLINK_SCHEMES[scenario.uplink.scheme].build(
        scenario.uplink.variant_values(), gamma_w=power.gamma_w, joint_gamma=power.joint_gamma,
        power_control=POWER_CONTROLS[power.control].build(power.variant_values()))
    if scenario.privacy is not None:
        scheme = Private(scheme, _privacy_of(scenario, world, phases))
    return Uplink(
        channel=channel, csi=csi,
        air=_air_of(scenario), cohort=Cohort(
            path_gain=world["path_gain"], phases=phases,
            population_weights=np.asarray(world["device_data"].weights, np.float64),
            participation=scenario.participation,
            local_steps=int(scenario.hyper_parameters().get("local_steps", 1)),
            training_phases=CATALOG[scenario.algorithm.name].training_phases),
        scheme=scheme, seed=scenario.seed,
        downlink=DownlinkLoad(algorithm.downlink_values(), scenario.downlink.bits_per_value,
                              scenario.downlink.bs_tx_power_w),
        trace=TraceOptions(scenario.trace.per_device, scenario.trace.records_signals),
        over_time=ChannelOverTime(moving=_moving_of(scenario, world["deployment"], channel),
                                  drops=_drops_of(scenario, world)),
    )


def _air_of(scenario: Scenario) -> AirInterface:
    """The scenario's :class:`phy.uplink.settings.AirInterface` (``[ofdm]``, ``[power]``,
    ``[sync]``, ``[bs]``)."""
    ofdm, power, sync = scenario.ofdm, scenario.power, scenario.sync
    return AirInterface(
        num_subcarriers=ofdm.num_subcarriers, tx_power_w=power.tx_power_w, noise_power_w=power.noise_power_w,
        symbol_duration_s=(ofdm.num_subcarriers + ofdm.cyclic_prefix_samples) / ofdm.bandwidth_hz,
        domain=ofdm.domain, bandwidth_hz=ofdm.bandwidth_hz, cyclic_prefix_length=ofdm.cyclic_prefix_samples,
        num_antennas=scenario.bs.num_antennas, combiner=ReceiveCombiner(scenario.bs.combiner),
        sync=UniformOffsets(sync.timing_offset_max_samples, sync.cfo_max_subcarriers, sync.precompensate))


def _drops_of(scenario: Scenario, world: dict):
    """The run's :class:`phy.redrop.Drops` with ``channel.redrop_every_rounds`` = N (None
    unset, or without a traced scene): drop 0 the world's; drop d >= 1 placed by the cell's
    layout from the geometry stream of round dN (the first drop's is the static one) in
    the world's scene, traced or read from its cache."""
    every = scenario.channel.redrop_every_rounds
    if every is None or world.get("place") is None:
        return None
    from phy.redrop import Drops

    place, cell = world["place"], scenario.cell

    def drop_of(index: int):
        rng = rngs.numpy_rng(scenario.seed, index * every, rngs.GEOMETRY)
        deployment = CELL_LAYOUTS[cell.layout].build(cell.variant_values(), rng=rng, place=place)
        return _channel_of(scenario, deployment, place), np.asarray(deployment.positions_m, np.float64)

    first = (world["channel"], np.asarray(world["deployment"].positions_m, np.float64))
    return Drops(every, first, drop_of)


def _moving_of(scenario: Scenario, deployment: geometry.Deployment, channel=None):
    """The scenario's :class:`phy.moving_channel.MovingChannel` (None without ``[mobility]``
    or with ``"static"``: nothing is drawn), its speeds, headings and Jakes processes (or,
    for the TDL ``channel``, its Sionna seed) from the static "mobility" stream."""
    mobility = scenario.mobility
    if not moving(scenario):
        return None
    built = MOBILITY_MODELS[mobility.model].build(
        mobility.variant_values(), positions_m=np.asarray(deployment.positions_m, np.float64),
        radius_m=scenario.cell.radius_m, inner_m=scenario.cell.min_distance_m,
        num_subcarriers=scenario.ofdm.num_subcarriers, flat=moving_fading(scenario.channel.model) == "flat",
        path_loss_exponent=getattr(scenario.channel, "path_loss_exponent", 0.0),  # a cell's own gains: unused
        rng=rngs.numpy_rng(scenario.seed, rngs.STATIC_ROUND, rngs.MOBILITY), channel=channel,
        num_antennas=scenario.bs.num_antennas, paths=_time_domain_paths(scenario, channel))
    built.channel_per_symbol = mobility.channel_within_phase == "per_symbol"
    return built


def _time_domain_paths(scenario: Scenario, channel):
    """The paths of a moving time-domain uplink (:class:`phy.moving_time.PathLayout`), None
    in the frequency domain: ``flat_rayleigh`` one path at delay 0, ``iid_rayleigh`` its
    ``num_taps`` taps on the sample grid (delays l / B), each 1/L of the power, ``tdl`` the
    profile's taps at their delays (sinc pulses) and powers."""
    if scenario.ofdm.domain != "time":
        return None
    from phy.moving_time import PathLayout

    shape = dict(num_subcarriers=scenario.ofdm.num_subcarriers, cyclic_prefix_length=scenario.ofdm.cyclic_prefix_samples)
    if moving_fading(scenario.channel.model) == "sionna_tdl":  # the profile's taps, off the sample grid
        return PathLayout.of(channel.delays_s * scenario.ofdm.bandwidth_hz, channel.tap_powers, **shape)
    flat = moving_fading(scenario.channel.model) == "flat"
    taps = 1 if flat else int(channel.num_taps)
    return PathLayout.of(np.arange(taps, dtype=np.float64), np.full(taps, 1.0 / taps), **shape)


def _privacy_of(scenario: Scenario, world: dict, phases: list[tuple[str, int]]):
    """:func:`cosim.privacy.uplink_privacy` of the built world (imported here: the
    accounting library loads only for a run with ``[privacy]``)."""
    from cosim.privacy import uplink_privacy

    return uplink_privacy(scenario, dict(phases), world["deployment"].positions_m)
