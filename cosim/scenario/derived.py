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

from cosim.disk_space import size_text
from cosim.scenario import dataset_memory
from cosim.scenario.errors import ScenarioError, ScenarioTooLarge
from cosim.scenario.mobility_rules import moving
from cosim.scenario.tables import Scenario
from learning.catalog import CATALOG  # no TensorFlow
from learning.models.shapes import SIZE_KEYS, num_params  # stdlib only
from learning.runtime import resolve  # stdlib only
from native.table_files import table_directory as device_table_directory
from phy.parameters import (  # pydantic only
    CELL_PATHS,
    CHANNEL_MODELS,
    COMBINERS,
    SCHEDULING,
    SIONNA_TDL_SINUSOIDS,
    moving_fading,
    sinusoid_rotation_bytes,
    tdl_profile_taps,
)

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
    own count when its parameters declare one (``symbols(n, F)``,
    :class:`phy.parameters.SchemeParameters`: ceil(n / F), ``one_bit`` QPSK's
    ceil(n / 2F), ``noncoherent_mv``'s ceil(n / floor(F/2))), else :func:`symbols_per_phase`."""
    f = scenario.ofdm.num_subcarriers
    parameters = scenario.uplink.variant_parameters()
    if not hasattr(parameters, "symbols"):
        return symbols_per_phase(num_values, f)
    return parameters.symbols(num_values, f)


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
    """d, the number of weights of ``learning.models.architectures.build_model(...)`` with the same
    arguments, by arithmetic alone: no TensorFlow, no allocation, any size (a hidden
    layer of 10^8 units gives d = 7.9e10 without touching memory).

    The sum of the sizes of ``learning.models.shapes.param_shapes``, the layout the models are
    built from (a convnet's ``input_shape`` padded to ``(H, W, C)`` by
    ``learning.models.shapes.image_shape``, as the engine does). ``hidden_units`` is used by the MLP only.

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


RUNTIME_BYTES = 750_600 * 1024
"""The process before its run: the interpreter with NumPy, TensorFlow, Numba and
:mod:`cosim.engine` imported (``VmHWM`` after the imports, ``baseline_kib`` of
``benchmarks/memory_peak.py``): 750,296 to 750,572 KiB in four processes, 2026-12-02
(TensorFlow 2.18.1, Numba 0.68.1, NumPy 1.26.4; ``benchmarks/README.md``)."""


def _vectors_per_device(scenario: Scenario) -> int:
    """c of :func:`memory_estimate_bytes`: float32 d-vectors a device's local step holds
    on the backend the scenario's ``[runtime]`` resolves to
    (:meth:`learning.catalog.Entry.local_step_vectors_on`; the local reparameterization's
    Numba steps hold 3, measured: :data:`learning.catalog.NUMBA_LRT_STEP_VECTORS`)."""
    s, hyper = scenario, scenario.hyper_parameters()
    entry = CATALOG[s.algorithm.name]
    try:
        backend = resolve(s.runtime.runtime(), algorithm=s.algorithm.name, architecture=s.model.architecture,
                          estimator=hyper.get("estimator", "reparameterization")).backend
    except ValueError:  # a combination the run refuses: not this estimate's to say
        backend = "tensorflow"
    return entry.local_step_vectors_on(backend, hyper)


def cohort_devices(scenario: Scenario) -> int:
    """K_S, the devices that train and send in a round: ``participation.cohort_size(K)``
    under ``participation.scheduling = "uniform"`` or ``"best_channel"``; K under
    ``"gain_threshold"`` (every device may be above the threshold) and without
    ``[participation]``. Dropouts and stragglers train first, so they count."""
    k, participation = scenario.cell.num_devices, scenario.participation
    if SCHEDULING[participation.scheduling].fact("every_device"):  # its registry entry says
        return k
    return min(k, participation.cohort_size(k))


def _uplink_bytes_per_sender(scenario: Scenario, num_values: int) -> int:
    """Bytes one sender adds to the uplink phase of ``num_values`` values (its update and
    the scheme's arrays; measured, ``benchmarks/memory_peak.py``): the scheme's memory
    term, ``uplink_bytes_per_sender(n, F)`` of its parameters
    (:class:`phy.parameters.SchemeParameters`: analog ``4 n + 8 N F``, digital OFDMA
    ``14 n``, one-bit ``4 n + 12 N F`` (BPSK) or ``4 n + 40 N F`` (QPSK), non-coherent MV
    ``4 n + 54 N M``). A scheme whose parameters declare none is refused naming ``uplink.scheme``
    (:class:`ScenarioError`), not counted as another."""
    parameters = scenario.uplink.variant_parameters()
    term = getattr(parameters, "uplink_bytes_per_sender", None)
    try:
        if term is None:
            raise NotImplementedError
        return int(term(num_values, scenario.ofdm.num_subcarriers))
    except NotImplementedError:
        raise ScenarioError([
            f"uplink.scheme: = {scenario.uplink.scheme!r}: its parameters "
            f"({type(parameters).__name__}) declare no memory term, "
            "uplink_bytes_per_sender(num_values, num_subcarriers) (phy.parameters.SchemeParameters), "
            "so the round's memory cannot be estimated"], repr(scenario.name)) from None


def memory_parts(scenario: Scenario, num_params: int, chunk: int | None = None) -> dict[str, int]:
    """The parts of a round's peak memory (bytes), each from the arrays' shapes; the
    scheme, antenna, time-domain and cohort terms measured against real runs one
    dimension at a time (``benchmarks/memory_peak.py``, ``benchmarks/README.md``).

    With K devices, K_S of them in the round's cohort (:func:`cohort_devices`), d
    weights, n = the largest phase's values and N its OFDM symbols under
    ``uplink.scheme`` (:func:`scheme_symbols_per_phase`), F subcarriers, N_r BS antennas:

    - ``"runtime"``: :data:`RUNTIME_BYTES`, the process with its libraries imported;
    - ``"dataset"``, ``"dataset load"``: the training and test sets and the devices'
      local datasets, held through the run, and the loader's own peak before any round
      (:func:`cosim.scenario.dataset_memory.memory_terms`);
    - ``"device state"``: ``4 K d s``, the s per-device [K, d] float32 tables an
      algorithm keeps across rounds for all K devices (SCAFFOLD's c_k: s = 1; FedSMOO's
      mu_k and h_k: 2; FedGMT's h_k: 1; signSGD's e_k with error feedback: 1; the
      others 0; from the shapes); in a round that streams its devices the tables are on
      disk (:func:`device_table_disk_bytes`) and it holds ``8 m d s``, a chunk's rows
      read and its new rows (m below);
    - ``"local step"``: ``4 K_S d c``, c float32 d-vectors per training device
      (:func:`_vectors_per_device`);
    - ``"uplink phase"``: ``K_S`` times the scheme's bytes per sender
      (:func:`_uplink_bytes_per_sender`), plus ``8 N_r N F`` in the time domain (the
      received [N, F] complex64 grid of every antenna, held until they are combined);
    - ``"channel draw"`` (N_r > 1 only): ``64 K N_r F`` (the [K, N_r, F] channel: its
      two float32 normal draws and complex64 value, the combiner's complex128
      [F, K, N_r] copy and product, the effective channel's complex128 copy) plus, for
      the ``centroid`` and ``maxmin`` combiners, ``32 F N_r^2`` (the complex128
      projectors [F, N_r, N_r] and their eigenvectors);
    - with a moving ``[mobility]`` model: :func:`_moving_terms`;
    - with ``chunk`` devices in memory at a time (a round that streams its devices,
      :func:`devices_in_memory`): :func:`_streamed_terms`.

    The local step, the uplink phase and the channel draw of a round that holds every
    device happen one after another (the arrays of one are freed before the next:
    measured, a scheme's arrays raise the peak only where they outweigh the local
    step); the runtime, the dataset and the state are held throughout
    (:func:`memory_estimate_bytes`).
    """
    k, d, k_s = scenario.cell.num_devices, int(num_params), cohort_devices(scenario)
    f, antennas = scenario.ofdm.num_subcarriers, scenario.bs.num_antennas
    n = max(uplink_phase_values(scenario, d).values())
    local = 4 * k_s * d * _vectors_per_device(scenario)
    uplink = k_s * _uplink_bytes_per_sender(scenario, n)
    streamed = 0
    if chunk is not None:
        streamed, local, uplink = _streamed_terms(scenario, d, n, int(chunk))
    if scenario.ofdm.domain == "time":
        uplink += 8 * antennas * scheme_symbols_per_phase(scenario, n) * f
    channel = _antenna_channel_bytes(scenario)
    tables = CATALOG[scenario.algorithm.name].device_tables(scenario.hyper_parameters())
    table_rows = k if chunk is None else 2 * min(k_s, int(chunk))  # a streamed chunk: read and new rows
    held, moving_uplink, moving_channel = _moving_terms(scenario, n, chunk)
    uplink, channel = uplink + moving_uplink, max(channel, moving_channel)
    return {"runtime": RUNTIME_BYTES, **dataset_memory.memory_terms(scenario.data, k, chunk is not None),
            "device state": 4 * table_rows * d * tables + held + streamed,
            "local step": local, "uplink phase": uplink, "channel draw": channel}


def _antenna_channel_bytes(scenario: Scenario) -> int:
    """The channel draw with N_r > 1 antennas (:func:`memory_parts`): ``64 K N_r F``, plus
    ``32 F N_r^2`` for a combiner with a Gram matrix per subcarrier; 0 with one antenna."""
    k, f, antennas = scenario.cell.num_devices, scenario.ofdm.num_subcarriers, scenario.bs.num_antennas
    if antennas == 1:
        return 0
    gram = 32 * f * antennas ** 2 if COMBINERS[scenario.bs.combiner].fact("gram_per_subcarrier") else 0
    return 64 * k * antennas * f + gram


def _streamed_terms(scenario: Scenario, num_params: int, num_values: int, chunk: int) -> tuple[int, int, int]:
    """``(state, local step, uplink phase)`` bytes of a round that streams its devices
    ``chunk`` at a time (:mod:`cosim.streamed_round`), m = ``min(K_S, chunk)`` senders of
    ``num_values`` = n values:

    - state, what the round holds for every device whatever the chunk: ``16 F`` for the
      channel's draw (its [2, K, F] float32 normals beside the complex64 h [K, F]; the
      estimate h_hat is h itself where the CSI model's parameters say
      ``estimate_is_channel``, ``csi.model = "perfect"``), ``24 F`` under the other CSI
      models (h held while h_hat is drawn the same way), plus the scheme's
      ``stream_bytes_per_device(n, F)``;
    - local step: ``4 m d c``, the [m, d] buffers of the local step
      (:func:`_vectors_per_device`), which stay pooled between the chunks
      (:class:`native.host_arrays.BufferPool`);
    - uplink phase: those buffers (the updates a phase's stream takes are the local
      step's own arrays, held while it sends them) plus the scheme's other arrays of the
      chunk, ``m (u - 4 n)`` with u its bytes per sender (:func:`_uplink_bytes_per_sender`:
      analog ``8 N F``, one-bit ``12 N F`` or ``40 N F``, digital OFDMA ``10 n``).
    """
    d, n, f = int(num_params), int(num_values), scenario.ofdm.num_subcarriers
    senders = min(cohort_devices(scenario), int(chunk))
    channel = 16 * f if getattr(scenario.csi.variant_parameters(), "estimate_is_channel", False) else 24 * f
    per_device = channel + scenario.uplink.variant_parameters().stream_bytes_per_device(n, f)
    local = 4 * senders * d * _vectors_per_device(scenario)
    return (scenario.cell.num_devices * per_device, local,
            local + senders * (_uplink_bytes_per_sender(scenario, n) - 4 * n))


def _moving_terms(scenario: Scenario, num_values: int, chunk: int | None = None) -> tuple[int, int, int]:
    """``(held, uplink, channel draw)`` bytes of a moving ``[mobility]`` model
    (:func:`memory_parts`; :mod:`phy.moving_channel`, from the arrays' shapes, not
    measured): ``16 K F_c M`` held with the state (the Jakes processes' float64
    wavenumbers and complex64 gains, F_c = F, or 1 for ``flat_rayleigh``), ``32 K F`` for
    one evaluation as the channel draw (the processes' complex64 [K, F_c], their
    complex128 product with the amplitudes, its complex64 copy and the tensor made of it;
    the sinusoids are summed in one pass, :func:`phy.doppler._at`, without [K, F_c, M]
    arrays); with ``mobility.channel_within_phase = "per_symbol"`` a scheme with
    ``channel_per_symbol`` (analog, one-bit, non-coherent) adds ``16 K N F`` to the uplink
    phase (the channel per OFDM symbol, complex64 [K, N, F], and the chain's gains G and
    G m, or the vote's real and imaginary terms, float32 each); a round that holds every
    device keeps some of them between phases, counted as held instead
    (:func:`_reused_per_symbol_bytes`). With N_r > 1 BS antennas
    the processes and one evaluation are N_r times as many, the combining adds
    ``16 K N_r F + 24 K F`` (:func:`phy.combiner.effective_channel`'s complex128 copy of
    h, its complex128 product and that product's complex64 copy), and per symbol ``24 K N N_r F + 24 K N F`` (the antennas' channels per
    symbol, their complex128 copy, the complex128 product and its complex64 copy); from the shapes, not measured. A round that streams its devices ``chunk``
    at a time evaluates the channel per symbol a chunk's devices at a time
    (:class:`phy.uplink.moving_link.SymbolChannel`): those terms count ``min(K, chunk)``
    devices. In the time domain (:mod:`phy.moving_time`) the processes are the P paths'
    (``16 K P M``) and a pass of 16 devices holds their paths per sample (complex64
    [16, S, P]), their waveform (complex64) and amplitudes (float64 [S, 16]), beside the
    received samples (complex128 [S]) and the pass's symbols (float32 and complex64 [16, N, F],
    under 12 bytes a sample): ``16 S (8 P + 28) + 16 S`` with S = N (F + C). A ray-traced
    cell's moving paths add no state: they are the drop's (their count is known only once
    traced, and is not counted at rest either). A 3GPP cell's rays (:mod:`phy.moving_tr38901`,
    R = 20 (P - 4) + 1 rays in G = P + 1 delay groups, P its paths at rest) hold
    ``8 K G F + K R (8 N_r + 24)`` (the groups' delay phases, the rays' coefficients,
    directions and powers), and per symbol their turns and coefficients add ``8 N K R (1 + N_r)``."""
    if not moving(scenario):
        return 0, 0, 0
    k, f, antennas = scenario.cell.num_devices, scenario.ofdm.num_subcarriers, scenario.bs.num_antennas
    uplink = reused = symbols = 0  # symbols: of a phase received symbol by symbol
    m = k if chunk is None else min(k, int(chunk))
    if (getattr(scenario.uplink.variant_parameters(), "channel_per_symbol", False)
            and scenario.mobility.channel_within_phase == "per_symbol"):
        symbols = scheme_symbols_per_phase(scenario, num_values)
        uplink = 16 * m * symbols * f + (24 * m * symbols * antennas * f + 24 * m * symbols * f if antennas > 1 else 0)
        if chunk is None:  # kept between phases in BufferPools: held through the round
            reused, in_uplink = _reused_per_symbol_bytes(scenario, symbols)
            uplink -= in_uplink
    flat = moving_fading(scenario.channel.model) == "flat"
    draw = 32 * k * f * antennas + (16 * k * f * antennas + 24 * k * f if antennas > 1 else 0)
    if scenario.ofdm.domain == "time":  # phy.moving_time: the paths are the processes, the waveform a pass
        paths, sinusoids = _time_domain_processes(scenario)
        samples = scheme_symbols_per_phase(scenario, num_values) * (f + scenario.ofdm.cyclic_prefix_samples)
        passes = min(k, 16)  # phy.moving_time._DEVICES_PER_PASS
        uplink += passes * samples * (8 * paths + 8 + 8 + 12) + 16 * samples
        return 16 * k * paths * sinusoids, uplink, 32 * k * f
    if moving_fading(scenario.channel.model) == "traced_paths":  # phy.moving_rays: the drop's paths, as at rest
        return reused, uplink, draw
    if moving_fading(scenario.channel.model) == "cell_rays":  # phy.moving_tr38901
        paths = CELL_PATHS[scenario.channel.model]
        rays, groups = 20 * (paths - 4) + 1, paths + 1
        uplink += 8 * symbols * m * rays * (1 + antennas)
        return 8 * k * groups * f + k * rays * (8 * antennas + 24) + reused, uplink, draw
    return 16 * k * antennas * (1 if flat else f) * scenario.mobility.num_sinusoids + reused, uplink, draw


def _time_domain_processes(scenario: Scenario) -> tuple[int, int]:
    """``(P, M)``: the moving time-domain uplink's paths and sinusoids per path: one path
    (``flat_rayleigh``), ``channel.num_taps`` (``iid_rayleigh``) or the TDL profile's taps,
    of ``mobility.num_sinusoids``, or for TDL Sionna's 20 (and one more, TDL-D/E's LoS)."""
    fading = moving_fading(scenario.channel.model)
    if fading == "sionna_tdl":
        taps, los = tdl_profile_taps(scenario.channel.tdl_profile)
        return taps, SIONNA_TDL_SINUSOIDS + int(los)
    return (1 if fading == "flat" else int(scenario.channel.num_taps)), int(scenario.mobility.num_sinusoids)


def _reused_per_symbol_bytes(scenario: Scenario, symbols: int) -> tuple[int, int]:
    """``(held, of the uplink's)`` bytes that a round holding every device keeps between
    phases with the channel per OFDM symbol (:func:`_moving_terms`), and how many of them
    the uplink phase's term counted: the analog chain's gains G and G m (float32 [K, N, F]
    each, :func:`phy.symbol_gains.symbol_gains`); the Jakes processes' channel per symbol
    (complex64 [K, N, N_r F_c], :meth:`phy.moving_channel.MovingChannel.per_symbol`; a
    flat channel's is then copied onto every subcarrier, in the uplink phase) and their
    rotations (:func:`phy.parameters.sinusoid_rotation_bytes` per sinusoid:
    :meth:`phy.doppler.SumOfSinusoids.along`)."""
    k, f, antennas = scenario.cell.num_devices, scenario.ofdm.num_subcarriers, scenario.bs.num_antennas
    gains = 8 * k * symbols * f if getattr(scenario.uplink.variant_parameters(), "keeps_symbol_gains", False) else 0
    held, in_uplink = gains, gains
    fading = moving_fading(scenario.channel.model)
    if fading in ("per_subcarrier", "flat") and scenario.ofdm.domain == "frequency":
        processes = antennas * (1 if fading == "flat" else f)
        held += (8 * k * symbols * processes
                 + sinusoid_rotation_bytes(processes) * k * processes * scenario.mobility.num_sinusoids)
        in_uplink += 8 * k * symbols * processes if fading == "per_subcarrier" else 0
    return held, in_uplink


def memory_estimate_bytes(scenario: Scenario, num_params: int, chunk: int | None = None) -> int:
    """A run's peak memory in a process of its own, in bytes: the runtime, then the
    larger of the dataset's loading and a round, which holds the dataset and the
    devices' state and adds the largest of the local step, the uplink phase and the
    channel draw (:func:`memory_parts`)::

        R + max(L, D + 4 K d s + max(4 K_S d c, K_S u + [8 N_r N F], 64 K N_r F + 32 F N_r^2))

    (R the runtime, L the dataset's loading, D the dataset held) with ``c`` float32
    vectors of length d per training device: for ``bayes_aircomp``
    ``c = 4 + 2 M`` with the reparameterization estimator (local parameter, its
    gradient, the other local vector, the update, and M weight samples plus M noise
    draws) and ``c = 4`` with the local reparameterization estimator (3 on its Numba
    steps, measured: :data:`learning.catalog.NUMBA_LRT_STEP_VECTORS`); ``c = 3`` for
    FedAvg-like algorithms (weights, gradient, update) and ``c = 4`` for those with a
    second d-vector (SCAFFOLD, FedSMOO); ``u`` the uplink scheme's bytes per sender
    (analog ``4 n + 8 N F``). The antenna, time-domain, cohort and scheme terms were
    measured against real runs' peaks, one dimension at a time
    (``benchmarks/memory_peak.py``); c and s follow the arrays' shapes (c overstates
    the exact estimator: paper MNIST is estimated at 3.36 GiB, its local step 2.43 GiB
    of it, where its whole process was measured at 1.90 GiB). A round that streams its
    devices counts its chunk's local step and uplink together and its per-device arrays
    (:func:`_streamed_terms`). Not counted: the activations, and what TensorFlow and
    Numba allocate once the run starts (their compiled kernels and graphs, the
    allocators' free memory). Against measured peaks (``benchmarks/README.md``,
    "The memory estimate against measured peaks"): at K = 1,000 at most 0.17 GiB above
    (streamed or not), the one-call round at K = 10,000 25 % above, streamed rounds at
    K = 10,000 and 100,000 from 21 % (0.67 GiB; signSGD on the Numba steps) or 0.86 GiB
    (17 %, the proposed method at K = 100,000, measured before the two changes below)
    below to 7 % above (the proposed method at K = 10,000: 2.22 GiB measured, 2.38
    estimated; 2.84 measured before the streamed round let go of a chunk's carry before
    the next chunk trains and the analog stream opened 512 devices at a time, whose
    TensorFlow temporaries oneDNN's allocator keeps).
    """
    parts = memory_parts(scenario, num_params, chunk)
    return parts["runtime"] + max(parts["dataset load"], _round_bytes(parts))


def _round_bytes(parts: dict[str, int]) -> int:
    """A round's peak above the runtime: the dataset and the state held, plus the largest
    of the local step, the uplink phase and the channel draw (:func:`memory_parts`)."""
    return parts["dataset"] + parts["device state"] + max(parts["local step"], parts["uplink phase"],
                                                          parts["channel draw"])


AUTO_FIT_SHARE = 0.75
"""``runtime.devices_in_memory = "auto"``: a round whose estimate is within this share of
the machine's physical memory holds every device."""
AUTO_MEMORY_SHARE = 0.5
"""``"auto"``: a round that does not fit streams its devices in chunks sized to take at
most this share of the machine's physical memory."""


def total_memory_bytes(meminfo_path: str | Path = "/proc/meminfo") -> int | None:
    """The machine's physical memory in bytes (``MemTotal``, Linux; else the physical pages
    times the page size), None when neither can be read. ``"auto"`` decides from it, not
    from what is free now, so a run and its resumption on one machine stream alike."""
    return _memory_bytes(meminfo_path, "MemTotal", "SC_PHYS_PAGES")


def _memory_bytes(meminfo_path: str | Path, field: str, pages: str) -> int | None:
    """``field`` of ``/proc/meminfo`` in bytes, else ``os.sysconf(pages)`` times the page
    size; None when neither can be read."""
    try:
        with open(meminfo_path, encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024  # the file counts kB
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf(pages) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, AttributeError):
        return None


def device_table_disk_bytes(scenario: Scenario, num_params: int, chunk: int | None) -> int:
    """Disk the algorithm's per-device tables take in a run whose rounds stream their
    devices ``chunk`` at a time (:mod:`learning.device_table`; 0 for a round that holds
    every device, ``chunk`` None): ``v 4 K d s`` for s tables (:func:`memory_parts`),
    v = 2 versions (the checkpoint's and the one the round writes) with
    ``trace.checkpoint_every = 1``, 3 otherwise (the rounds between checkpoints keep the
    current one besides)."""
    if chunk is None:
        return 0
    tables = CATALOG[scenario.algorithm.name].device_tables(scenario.hyper_parameters())
    versions = 2 if scenario.trace.checkpoint_every == 1 else 3
    return versions * 4 * scenario.cell.num_devices * int(num_params) * tables


def check_table_disk(scenario: Scenario, num_params: int, chunk: int | None,
                     free: int | None = None) -> int:
    """Refuse a run whose per-device tables (:func:`device_table_disk_bytes`) cannot fit on
    the disk of their directory (:func:`device_table_directory`; its nearest existing
    parent is asked), counting the version files already there (a resumed run's):
    :class:`ScenarioError` naming ``runtime.devices_in_memory`` and the bytes. ``free``:
    the free bytes, by default ``statvfs``'s (when that cannot be read, nothing is
    refused). The bytes needed."""
    need = device_table_disk_bytes(scenario, num_params, chunk)
    if need == 0:
        return 0
    directory = device_table_directory(scenario.trace_path)
    have_bytes = sum(p.stat().st_size for p in directory.glob("*.f32")) if directory.is_dir() else 0
    if free is None:
        where = Path(directory)
        while not where.exists() and where != where.parent:
            where = where.parent
        try:
            stat = os.statvfs(where)
            free = stat.f_bavail * stat.f_frsize
        except OSError:
            return need
    if need - int(have_bytes) > free:
        k, d = scenario.cell.num_devices, int(num_params)
        tables = CATALOG[scenario.algorithm.name].device_tables(scenario.hyper_parameters())
        raise ScenarioError([
            f"runtime.devices_in_memory = {chunk}: the round streams its devices, so "
            f"{scenario.algorithm.name}'s per-device tables go to disk in {directory}: "
            f"{need:,} bytes ({size_text(need)}; {need // (4 * k * d * tables)} versions x {tables} "
            f"table(s) x 4 K d, K = {k:,}, d = {d:,}), more than the {free:,} bytes free there; "
            "free some disk, move trace.path, or lower cell.num_devices"], repr(scenario.name))
    return need


def stream_refusal(scenario: Scenario) -> str | None:
    """Why ``scenario``'s rounds cannot stream their devices (``table.key = value: reason``),
    or None: what needs every device's update at once, or rows other than the population's."""
    s = scenario
    if not CATALOG[s.algorithm.name].streams_devices:
        return (f"algorithm.name = {s.algorithm.name!r}: its phases' carry cannot be formed again "
                "per chunk")
    if not s.uplink.variant_parameters().streams:
        return f"uplink.scheme = {s.uplink.scheme!r}: the scheme has no stream of its senders' updates"
    every_device = type(s.participation)()  # the defaults: every device trains and sends
    if any(getattr(s.participation, key) != getattr(every_device, key)
           for key in ("fraction", "scheduling", "dropout_probability", "deadline_s")):
        return "[participation]: a cohort per round does not stream (every device must send)"
    for refused, words in ((s.privacy is not None, "[privacy]: the clipping wrapper does not stream"),
                           (s.trace.signals, "trace.signals = true: raw signals need every update"),
                           (s.power.gamma == "joint", "power.gamma = 'joint' needs every update first"),
                           (s.ofdm.domain == "time", "ofdm.domain = 'time' needs every sender's symbols")):
        if refused:
            return words
    return None


def devices_in_memory(scenario: Scenario, num_params: int, memory_bytes: int | None = None) -> int | None:
    """Devices whose updates a round holds at once (``runtime.devices_in_memory``), None for
    every device (the one-call round, :func:`cosim.round.run_round`).

    ``"auto"``: None when the whole round's estimate is within :data:`AUTO_FIT_SHARE` of
    ``memory_bytes`` (default: the machine's physical memory, :func:`total_memory_bytes`;
    None also when that cannot be read or the round cannot stream, :func:`stream_refusal`),
    else the most devices whose streamed round (:func:`memory_parts`' round beside the
    runtime) takes at most :data:`AUTO_MEMORY_SHARE` of it (at least 1). A number below K streams with that many, and a round that cannot
    stream is refused (:class:`ScenarioError` naming the key and the reason)."""
    asked, k = scenario.runtime.devices_in_memory, scenario.cell.num_devices
    reason = stream_refusal(scenario)
    if asked != "auto":
        if int(asked) >= k:
            return None
        if reason is not None:
            raise ScenarioError([f"runtime.devices_in_memory: = {asked} streams the round's devices, "
                                 f"but {reason}"], repr(scenario.name))
        return int(asked)
    have = total_memory_bytes() if memory_bytes is None else int(memory_bytes)
    if reason is not None or have is None or memory_estimate_bytes(scenario, num_params) <= AUTO_FIT_SHARE * have:
        return None
    budget = AUTO_MEMORY_SHARE * have - RUNTIME_BYTES  # the round's, beside the runtime
    one = _round_bytes(memory_parts(scenario, num_params, chunk=1))
    per_device = _round_bytes(memory_parts(scenario, num_params, chunk=2)) - one
    return max(1, min(k - 1, int((budget - one) // max(per_device, 1)) + 1))


def available_memory_bytes(meminfo_path: str | Path = "/proc/meminfo") -> int | None:
    """Memory a new allocation can get now, in bytes: ``MemAvailable`` of ``/proc/meminfo``
    (Linux), else free physical pages times the page size (``os.sysconf``); None when
    neither can be read."""
    return _memory_bytes(meminfo_path, "MemAvailable", "SC_AVPHYS_PAGES")


def _size_keys(scenario: Scenario, num_params: int) -> list[str]:
    """``table.key = value`` of the keys that drive :func:`memory_estimate_bytes`."""
    s = scenario
    keys = [f"cell.num_devices = {s.cell.num_devices}"]
    own = SIZE_KEYS[s.model.architecture]  # the architecture's own size keys, or its name
    keys += ([f"model.{key} = {list(getattr(s.model, key))}" for key in own] if own
             else [f"model.architecture = {s.model.architecture!r}"])
    if s.data.dataset == "synthetic":
        keys.append(f"data.synthetic_shape = {list(s.data.synthetic_shape)}")
    entry, hyper = CATALOG[s.algorithm.name], s.hyper_parameters()
    for key in entry.step_vector_keys:  # those that change the local step's vectors here
        if entry.local_step_vectors({**hyper, key: hyper[key] + 1}) != entry.local_step_vectors(hyper):
            keys.append(f"algorithm.{key} = {hyper[key]}")
    if s.bs.num_antennas > 1:
        keys.append(f"bs.num_antennas = {s.bs.num_antennas}")
    if s.uplink.scheme != type(s.uplink).model_fields["scheme"].default:  # another scheme than the default
        keys.append(f"uplink.scheme = {s.uplink.scheme!r}")
    values = max(uplink_phase_values(s, num_params).values())
    f = s.ofdm.num_subcarriers
    if symbols_per_phase(values, f) * f > 2 * values:  # zero padding at least doubles the grid
        keys.append(f"ofdm.num_subcarriers = {f}")
    return keys


def _memory_summary(scenario: Scenario, num_params: int, chunk: int | None = None) -> str:
    """``"the largest of local step 2.43, uplink phase 0.52 GiB, plus dataset 0.21,
    runtime 0.72 GiB"``: the parts of :func:`memory_parts` that are not 0, in GiB (with
    ``chunk`` devices in memory, and then what the streamed round holds for every device
    with the state); the dataset's loading where it sets the peak instead of the round."""
    parts = memory_parts(scenario, num_params, chunk)
    stages = ", ".join(f"{name} {parts[name] / 2**30:,.2f}"
                       for name in ("local step", "uplink phase", "channel draw") if parts[name])
    held = ", ".join(f"{name} {parts[name] / 2**30:,.2f}" for name in ("device state", "dataset") if parts[name])
    text = f"the largest of {stages} GiB, plus {held}, runtime {parts['runtime'] / 2**30:,.2f} GiB"
    if parts["dataset load"] > _round_bytes(parts):
        text += f"; loading the dataset sets the peak ({parts['dataset load'] / 2**30:,.2f} GiB)"
    return text


def check_resources(
    scenario: Scenario,
    num_params: int | None = None,
    *,
    source: str | None = None,
    available_bytes: int | None = None,
) -> int:
    """Refuse a scenario that cannot fit in memory, before anything is allocated.

    Compares :func:`memory_estimate_bytes` (the run's peak in a process of its own: the
    runtime, the dataset and a round; no activations, nor what TensorFlow and Numba
    allocate once the run starts) with the memory available now.

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
    have = available_memory_bytes() if available_bytes is None else int(available_bytes)
    chunk = devices_in_memory(scenario, d, available_bytes)  # given: this machine's memory
    need = memory_estimate_bytes(scenario, d, chunk)
    if have is None or need <= have:
        return need
    problem = (
        f"{', '.join(_size_keys(scenario, d))}: need ~{need / 2**30:,.2f} GiB for a round "
        f"(d = {d:,} weights; {_memory_summary(scenario, d, chunk)}), more than the "
        f"{have / 2**30:,.2f} GiB of memory available; lower one of these keys"
    )
    raise ScenarioTooLarge([problem], source if source is not None else repr(scenario.name),
                           estimate_bytes=need, available_bytes=have)


def _channel_words(scenario: Scenario) -> str:
    """The channel model, with ``alpha`` where its mean gain is ``r^-alpha`` (its registry
    entry says) and the scene where it is traced."""
    channel = scenario.channel
    facts = CHANNEL_MODELS[channel.model].parameters
    if facts.distance_path_loss:
        return f"{channel.model}, alpha = {channel.path_loss_exponent:g}"
    if facts.scene_coordinates:
        return f"{channel.model}, scene {channel.scene}"
    return f"{channel.model}, its own path loss"


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
    chunk = devices_in_memory(s, d)
    mem = memory_estimate_bytes(s, d, chunk)
    streamed = "" if chunk is None else f"; the round streams its devices, {chunk:,} at a time"
    disk = device_table_disk_bytes(s, d, chunk)
    lines = [
        f"scenario {s.name!r}: {s.algorithm.name}, {s.rounds} rounds, seed {s.seed}",
        f"  cell      {s.cell.layout}, K = {s.cell.num_devices}, radius {s.cell.radius_m:g} m",
        f"  channel   {_channel_words(s)}; csi {s.csi.model}; "
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
        f"  memory    ~{mem / 2**30:.2f} GiB for a round ({_memory_summary(s, d, chunk)}; "
        f"see memory_estimate_bytes){streamed}",
        f"  trace     {s.trace_path}",
    ]
    if disk:
        tables = CATALOG[s.algorithm.name].device_tables(s.hyper_parameters())
        lines.append(f"  tables    ~{disk / 2**30:,.2f} GiB on disk in {device_table_directory(s.trace_path)} "
                     f"({tables} per-device table(s) x {disk // (4 * s.cell.num_devices * d * tables)} "
                     "versions x 4 K d bytes)")
    return "\n".join(lines)
