"""What a scenario implies: d, OFDM symbols and values per round, memory, the summary.

d comes from :func:`model_num_params`, arithmetic only, so nothing is allocated. A
valid scenario may still be too large for the machine: :func:`check_resources`
compares its memory estimate with the memory available and raises
:class:`cosim.scenario.errors.ScenarioTooLarge` naming the keys that drive the size.
:func:`describe` is what ``cosim validate`` prints. Nothing here imports TensorFlow.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from cosim.scenario.errors import ScenarioTooLarge
from cosim.scenario.tables import Scenario
from learning.catalog import CATALOG  # no TensorFlow
from learning.shapes import num_params  # stdlib only

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


def scheme_symbols_per_phase(scenario: Scenario, num_values: int) -> int:
    """OFDM symbols of one phase of ``num_values`` under ``uplink.scheme``: the scheme's
    own count when its parameters declare one (``symbols(n, F)``, e.g. ``one_bit`` QPSK's
    ceil(n / 2F), ``noncoherent_mv``'s ceil(n / floor(F/2))), else :func:`symbols_per_phase`."""
    from phy.parameters import UPLINK_SCHEMES  # no TensorFlow

    f = scenario.ofdm.num_subcarriers
    parameters = UPLINK_SCHEMES[scenario.uplink.scheme].parameters
    if not hasattr(parameters, "symbols"):
        return symbols_per_phase(num_values, f)
    own = {k: v for k, v in scenario.uplink.variant_values().items() if k in parameters.model_fields}
    return parameters.check(**own).symbols(num_values, f)


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
    """d, the number of weights of ``learning.architectures.build_model(...)`` with the same
    arguments, by arithmetic alone: no TensorFlow, no allocation, any size (a hidden
    layer of 10^8 units gives d = 7.9e10 without touching memory).

    The sum of the sizes of ``learning.shapes.param_shapes``, the layout the models are
    built from (a convnet's ``input_shape`` padded to ``(H, W, C)`` by
    ``learning.shapes.image_shape``, as the engine does). ``hidden_units`` is used by the MLP only.

    Raises
    ------
    ValueError
        An unknown ``architecture``.
    """
    return num_params(architecture, input_shape, num_classes, hidden_units)


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

    A BS with N_r > 1 antennas (``bs.num_antennas``) adds ``32 K N_r F``: the uplink
    channel ``[K, N_r, F]`` complex64 as TensorFlow draws it, its NumPy copy, and the
    combiner's complex128 work on it (``cosim/engine.py::Engine._draw_antennas``); in
    the time domain (``ofdm.domain = "time"``) also ``8 N_r N (F + CP)``, one received
    waveform per antenna (``phy/combiner.py::CombinedUplink``).
    """
    k, d, c = scenario.cell.num_devices, int(num_params), _vectors_per_device(scenario)
    f = scenario.ofdm.num_subcarriers
    n = symbols_per_phase(max(uplink_phase_values(scenario, d).values()), f)
    need = 4 * k * d * c + 8 * k * n * f
    antennas = scenario.bs.num_antennas
    if antennas > 1:
        need += 32 * k * antennas * f
        if scenario.ofdm.domain == "time":
            need += 8 * antennas * n * (f + scenario.ofdm.cyclic_prefix_samples)
    return need


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
    if s.bs.num_antennas > 1:
        keys.append(f"bs.num_antennas = {s.bs.num_antennas}")
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
        f"of all devices (d = {d:,} weights; 4 K d c + 8 K N F"
        f"{' + 32 K N_r F' if scenario.bs.num_antennas > 1 else ''} bytes), more than the "
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
    symbols = {name: scheme_symbols_per_phase(s, v) for name, v in phases.items()}
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
