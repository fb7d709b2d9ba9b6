"""The uplink schemes' parameters and their registry (:data:`UPLINK_SCHEMES`), re-exported
by :mod:`phy.parameters` with the other registries.

A scheme's parameters (a :class:`SchemeParameters`) hold every fact the rest of the
simulator needs of it without building it. No NumPy, no TensorFlow.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from native.parameters import Parameters, Variant
from phy.limits import DB_LIMIT


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

    streams: ClassVar[bool] = False
    """Whether a phase can take its senders' updates in chunks of devices (the scheme's
    ``open_stream``, :mod:`phy.uplink.phase_stream`), for rounds that stream their devices."""
    channel_per_symbol: ClassVar[bool] = False
    """Whether moving devices under ``mobility.channel_within_phase = "per_symbol"`` are
    received symbol by symbol (h [K, N, F], :mod:`phy.uplink.moving_link`); else at the
    phase's middle, or per coherence block (digital OFDMA's ``ages_per_block``)."""
    keeps_symbol_gains: ClassVar[bool] = False
    """Whether, received symbol by symbol, a phase that holds every device keeps its gains
    per symbol (G, G m: float32 [K, N, F] each, :func:`phy.symbol_gains.symbol_gains`) in
    pooled memory between phases (its memory term, ``cosim/scenario/derived.py``)."""

    def stream_bytes_per_device(self, num_values: int, num_subcarriers: int) -> int:
        """The bytes a phase's stream holds per device of the population, whatever the
        chunk (its memory term when the round streams). A scheme that ``streams`` declares its own."""
        raise NotImplementedError(f"{type(self).__name__} declares no stream_bytes_per_device")

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
    streams: ClassVar[bool] = True
    # moving devices: each OFDM symbol received through the channel at its own time
    # (phy.uplink.moving_link; the chain takes h [K, N, F], phy.aircomp)
    channel_per_symbol: ClassVar[bool] = True
    keeps_symbol_gains: ClassVar[bool] = True  # the chain's G, G m (phy.symbol_gains, pooled)

    def stream_bytes_per_device(self, num_values: int, num_subcarriers: int) -> int:
        """``48 N + 9``: the row sums [K, N, 3] and TCI's off counts [K, N] float32, the
        scale (float64) and the dead flag per device (:mod:`phy.aircomp_stream`), and at
        the phase's end (``AggregateStream.finish``) the row sums' tensor and the rows'
        power, distortion and attenuation [K, N] float32 with their tensors (32 N)."""
        return 48 * self.symbols(num_values, num_subcarriers) + 9

    def uplink_bytes_per_sender(self, num_values: int, num_subcarriers: int) -> int:
        """``4 n + 8 N F``: the [K_S, n] float32 updates and the complex64 grid [K_S, N, F]."""
        n, f = int(num_values), int(num_subcarriers)
        return 4 * n + 8 * self.symbols(n, f) * f


class DigitalOfdmaScheme(SchemeParameters):
    """The digital baseline (as compared in Zhu, Wang, Huang, IEEE TWC 2020): each
    sender's update stochastically quantized, the subcarriers shared among the senders,
    each device decoded on its own (:mod:`phy.uplink.digital_ofdma`)."""

    carries: ClassVar[str] = "values"
    streams: ClassVar[bool] = True

    def stream_bytes_per_device(self, num_values: int, num_subcarriers: int) -> int:
        """``64``: the plan's eight [K_T] arrays (rates, capacities, bits, symbols, flags;
        :class:`phy.uplink.digital_ofdma.Plan`); the [n] float64 sum does not grow with K."""
        return 64

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
        None, ge=1, description="the phase's slot budget in OFDM symbols (per slot group "
        "when the senders outnumber the subcarriers): a device whose bits need more is in "
        "outage (None: no budget)")
    rate_adaptation: Literal["slot", "coherence_block"] = Field(
        "slot", description="with devices that move: 'slot', one rate per device from its "
        "estimate at the slot's start (lost when a coherence block's channel falls below it); "
        "'coherence_block', a pilot OFDM symbol at each coherence block's start and the rate "
        "of that block's channel (docs/schemes.md, devices that move)")

    def uplink_bytes_per_sender(self, num_values: int, num_subcarriers: int) -> int:
        """``14 n``: the updates, their NumPy copy, the quantizer's float64 rows."""
        return 14 * int(num_values)

    def check_scenario(self, scenario) -> None:
        """What it does not support: the time-domain uplink, [privacy] (it accounts the
        analog receiver noise). More senders than subcarriers take turns in slot groups
        (:func:`phy.uplink.digital_ofdma.slot_groups`)."""
        scheme = 'uplink.scheme = "digital_ofdma"'
        if scenario.ofdm.domain != "frequency":
            raise ValueError(f"ofdm.domain: = {scenario.ofdm.domain!r} is not supported with {scheme} (it "
                             "decodes each device per subcarrier in the frequency domain); set "
                             "ofdm.domain = \"frequency\"")
        if scenario.privacy is not None:
            raise ValueError(f"privacy: [privacy] is not supported with {scheme}: the accounting is of the "
                             "analog scheme's receiver noise, and the digital BS decodes each update "
                             "exactly; remove [privacy]")


ONE_BIT_MODULATIONS = ("bpsk", "qpsk")
"""``uplink.one_bit_modulation``: one sign per resource element (the real part), or two
(the real and the imaginary part)."""


class OneBitScheme(SchemeParameters):
    """One-bit broadband digital aggregation (Zhu, Du, Gunduz, Huang, IEEE TWC 2021):
    the signs of the updates as BPSK or QPSK symbols under truncated channel inversion,
    the BS's sign of the superposed signal a majority vote per entry."""

    carries: ClassVar[str] = "signs"
    phase_seconds: ClassVar[float | None] = 0.18  # signSGD's one phase, measured as digital_ofdma's
    streams: ClassVar[bool] = True
    # moving devices: each OFDM symbol received through the channel at its own time
    # (phy.uplink.moving_link; the superposition takes h [K, N, F], phy.uplink.one_bit)
    channel_per_symbol: ClassVar[bool] = True

    def stream_bytes_per_device(self, num_values: int, num_subcarriers: int) -> int:
        """``8``: each sender's power (float64); the precoders are formed per chunk
        (:class:`phy.uplink.one_bit.OneBitStream`)."""
        return 8

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
        """``4 n + b N F``: the updates, and per resource element b = 12 bytes (BPSK) or
        40 (QPSK) for the signs, their grid, its parts and the superposition's products.
        Measured (2026-12-02, a8c7f4d): one ``OneBitStream.add`` of 500 senders at
        n = 118,282, F = 1,024 peaked 9.9 (BPSK) and 36.9 (QPSK) bytes per element of each
        sender above the updates it was given."""
        n, f = int(num_values), int(num_subcarriers)
        return 4 * n + (12 if self.signs_per_element == 1 else 40) * self.symbols(n, f) * f


NONCOHERENT_POWER = ("path_gain_inversion", "full_power")
"""``uplink.noncoherent_power``: each device's tone power scaled by its weight over its
long-term path gain (the weakest at its full share), or the full share P / (F/2) each."""


class NoncoherentMvScheme(SchemeParameters):
    """Non-coherent majority vote (Sahin and Yang, IEEE TWC 2023): each sign activates
    one of two subcarriers with a random-phase symbol, the BS compares their energies; no
    instantaneous CSI at the devices or the BS."""

    carries: ClassVar[str] = "signs"
    phase_seconds: ClassVar[float | None] = 0.60  # signSGD's one phase, measured as digital_ofdma's
    # moving devices: each OFDM symbol's tones received through the channel at its own time
    # (phy.uplink.moving_link; phy.uplink.noncoherent_mv)
    channel_per_symbol: ClassVar[bool] = True
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
    "analog": Variant(AnalogScheme, "phy.uplink.analog:Analog",
                      extras=("power_control", "gamma_w", "joint_gamma")),
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
estimates and the scheme classes read them from here. A scheme's ``extras`` are the
``[power]`` settings it owns (the analog scheme: the built ``power_control``,
``gamma_w``, ``joint_gamma``), which ``cosim.world.build_uplink`` offers every scheme."""
