"""``uplink.scheme = "one_bit"``: one-bit broadband digital aggregation (OBDA; Zhu, Du,
Gunduz, Huang, "One-bit over-the-air aggregation for communication-efficient federated
edge learning: design and convergence analysis", IEEE Trans. Wireless Commun., 2021).

Every sender sends the signs of its update, ``s_ki = sgn(u_ki)`` in {-1, 0, +1}, as
digital symbols on the shared grid: BPSK, one sign per resource element (``c = s``), or
QPSK, two (``c = s_I + j s_Q``, entries 2e and 2e + 1 on element e), element e on OFDM
symbol ``e // F``, subcarrier ``e % F``. Each device inverts its channel (truncated
channel inversion, as OBDA) on the subcarriers whose estimated gain reaches the
threshold and stays silent on the others::

    x_k[n, f] = sqrt(eta) pi_k c_k[n, f] / h_hat_kf      if |h_hat_kf|^2 >= t g_k
              = 0                                        otherwise

(``g_k`` the device's path gain, ``t = uplink.one_bit_gain_threshold``; ``pi_k`` the
BS's weight, so that the BS receives the *weighted* vote; OBDA's equal weights are the
case pi_k = 1/K). One common ``eta`` keeps the devices aligned and puts the device that
needs the most power at the per-OFDM-symbol budget P::

    eta = P / max_k [ pi_k^2 E_s sum_{f < F_used, on} 1 / |h_hat_kf|^2 ]

(``E_s = |c|^2`` of a full symbol: 1 for BPSK, 2 for QPSK; ``F_used = min(F, elements)``,
the subcarriers of the fullest OFDM symbol). The BS receives ``y = sum_k h_kf x_kf + z``,
``z ~ CN(0, sigma_z^2)``, and its vote is the sign of the real part (and of the imaginary
part with QPSK), OBDA's majority-vote decoder. With perfect CSI the real part
of element (n, f) is ``sqrt(eta) sum_{k on f} pi_k s_k + Re z``, so an entry whose margin
``m = sqrt(eta) sum_{k on f} pi_k s_k`` has the sign of the true majority is missed with
probability ``Q(|m| / sqrt(sigma_z^2 / 2))`` (tested against the simulation).

With moving devices and ``mobility.channel_within_phase = "per_symbol"``
(:mod:`phy.uplink.moving_link`) the phase gets ``h`` [K, N, F], the channel of each of its
OFDM symbols, and element (n, f) is received through that symbol's channel while the
devices still precode with ``h_hat`` (the estimate at the phase's start)::

    y[n, f] = sum_k h_knf x_k[n, f] + z[n, f]

``eta``, the precoders, the powers and the silent subcarriers do not depend on ``h``; only
``y`` does. Every symbol's channel equal to a [K, F] ``h`` gives that ``h``'s result bit
for bit.

Symbols per phase: ``ceil(n / F)`` (BPSK) or ``ceil(n / (2 F))`` (QPSK). Columns:
``vote_error_rate_<phase>``, ``vote_tie_rate_<phase>`` (:mod:`phy.uplink.majority_vote`),
``silent_fraction_<phase>`` (the senders' share of subcarriers below the threshold),
``inversion_amplitude_<phase>`` (``sqrt(eta)``); per sender ``tx_power_w_<phase>`` (with
``trace.per_device``); the signals ``y_<phase>``, ``estimate_<phase>`` (when kept).
A phase may take the senders' updates in chunks (:meth:`OneBit.open_stream`,
:class:`OneBitStream`: the same result bit for bit from one chunk, within float rounding
from several).
"""

from __future__ import annotations

import math

import numpy as np
import tensorflow as tf

from phy.parameters import OneBitScheme
from phy.stream_rows import RowOrder
from phy.uplink.majority_vote import complex_noise, majority_sums, signs_of, superpose, vote_result
from phy.uplink.scheme import SchemeResult

ROWS_PER_PASS = 1024
"""Senders whose float64 inversion terms are formed at once (each row's are its own: the
blocks change no bit; at K = 100,000, F = 1,024 the whole arrays were some 4 GB)."""


def inversion_rows(h_hat, path_gain, weights, *, gain_threshold: float, used_subcarriers: int,
                   symbol_energy: float) -> tuple[np.ndarray, np.ndarray]:
    """Each sender's inversion load and on-subcarriers.

    Input: ``h_hat`` [C, F] complex, ``path_gain`` [C], ``weights`` [C] (pi_k), as
    :func:`inversion_scale`. Output: ``load`` [C] float64 = pi_k^2 E_s sum_{f < F_used, on}
    1 / |h_hat_kf|^2 and ``on`` [C, F] bool (``|h_hat_kf|^2 >= t g_k`` and nonzero).
    """
    gain = np.abs(np.asarray(h_hat, np.complex128)) ** 2
    g = np.asarray(path_gain, np.float64)[:, None]
    on = (gain >= gain_threshold * g) & (gain > 0.0)
    inverse = np.where(on, 1.0 / np.where(on, gain, 1.0), 0.0)
    w = np.asarray(weights, np.float64)
    return w**2 * symbol_energy * inverse[:, :used_subcarriers].sum(axis=1), on


def inversion_scale(h_hat, path_gain, weights, *, gain_threshold: float, used_subcarriers: int,
                    symbol_energy: float, tx_power_w: float) -> tuple[float, int]:
    """OBDA's truncated channel inversion with one common scale.

    Input: ``h_hat`` [K, F] complex (the devices' CSI), ``path_gain`` [K], ``weights`` [K]
    (pi_k), the relative ``gain_threshold`` t, the subcarriers of the fullest OFDM symbol,
    ``symbol_energy`` E_s and the per-symbol budget P (W).
    Output: ``eta`` (float; 0 when no device has a subcarrier on) and the number of
    on-subcarriers over all senders (:func:`inversion_rows`, :data:`ROWS_PER_PASS`
    senders at a time).
    """
    worst, on_count = 0.0, 0
    for lo in range(0, int(np.shape(h_hat)[0]), ROWS_PER_PASS):
        rows = slice(lo, lo + ROWS_PER_PASS)
        load, on = inversion_rows(np.asarray(h_hat[rows]), np.asarray(path_gain[rows]), np.asarray(weights[rows]),
                                  gain_threshold=gain_threshold, used_subcarriers=used_subcarriers,
                                  symbol_energy=symbol_energy)
        worst, on_count = max(worst, float(load.max()) if load.size else 0.0), on_count + int(on.sum())
    return (float(tx_power_w) / worst if worst > 0.0 else 0.0), on_count


class OneBit:
    """``uplink.scheme = "one_bit"`` (module docstring): signs as BPSK/QPSK under truncated
    channel inversion, the BS's sign of the superposed signal.

    Parameters
    ----------
    modulation : "bpsk" or "qpsk"
        One or two signs per resource element.
    gain_threshold : float
        t >= 0: a subcarrier with ``|h_hat_kf|^2 < t g_k`` stays silent.

    ``send`` returns the vote [n] tf.float32 in {-1, 0, +1}; ``open_stream`` the same phase
    with the senders' updates added in chunks (:class:`OneBitStream`).
    """

    carries = OneBitScheme.carries
    channel_per_symbol = OneBitScheme.channel_per_symbol  # moving devices: h [K, N, F]
    accounts_privacy = getattr(OneBitScheme, "accounts_privacy", False)

    def __init__(self, modulation: str = "bpsk", gain_threshold: float = 0.1):
        checked = OneBitScheme.check(one_bit_modulation=modulation, one_bit_gain_threshold=gain_threshold)
        self.parameters = checked
        self.modulation = checked.one_bit_modulation
        self.gain_threshold = float(checked.one_bit_gain_threshold)
        self.signs_per_element = 2 if self.modulation == "qpsk" else 1

    def nominal_symbols(self, grid) -> int:
        """``ceil(n / F)`` (BPSK) or ``ceil(n / (2 F))`` (QPSK)."""
        return self.parameters.symbols(grid.num_values, grid.num_subcarriers)

    def open_stream(self, link, air, *, phase: str, seed, per_device: bool) -> OneBitStream:
        """The phase of ``link`` (its ``updates`` None) with the senders' rows added in
        chunks (:class:`OneBitStream`, which states how close it is to :meth:`send`).
        NotImplementedError with a time-domain ``link.uplink``: the waveform needs every
        sender's grid at once."""
        if link.uplink is not None:
            raise NotImplementedError("uplink.scheme = 'one_bit' cannot stream its senders over the time-domain "
                                      "uplink (the waveform takes every sender's grid at once); send the phase "
                                      "whole")
        return OneBitStream(self, link, air, phase=phase, seed=seed, per_device=per_device)

    def send(self, link, air, *, phase: str, seed, keep_signals: bool, per_device: bool) -> SchemeResult:
        stream = OneBitStream(self, link, air, phase=phase, seed=seed, per_device=per_device,
                              keep_signals=keep_signals, uplink=link.uplink)
        stream.add(0, int(link.updates.shape[0]), link.updates)
        return stream.finish()


class OneBitStream:
    """One phase of :class:`OneBit` with the senders' updates added in chunks.

    ``add(lo, hi, updates)`` takes rows ``lo:hi`` ([hi - lo, n], NumPy or tf) in order
    (:class:`phy.stream_rows.RowOrder`); ``finish()`` returns the
    :class:`phy.uplink.scheme.SchemeResult` of :meth:`OneBit.send`. The common scale
    ``eta`` and the precoders depend on the CSI, the weights and n only (made at the first
    chunk); each chunk's superposition [N, F] is summed over its senders as
    :meth:`OneBit.send` sums all of them (float32) and the chunks' sums are added in
    float64; the noise is drawn once at the end. Hence:

    - one chunk of all senders: :meth:`OneBit.send`'s result bit for bit;
    - several chunks: the energies [K_T], ``silent_fraction``, ``inversion_amplitude``
      and ``tx_power_w`` bit for bit; the received ``y`` within float32 rounding of the
      sum over the senders (TensorFlow's own order of summation depends on the shape), so
      the vote is the same except on an entry whose received part lies within that
      rounding of 0; the true majority's sums within float64 rounding, so the vote error
      and tie rates are the same unless an entry's margin lies within float64 rounding of
      the tie threshold (:data:`phy.uplink.majority_vote.TIE_TOLERANCE`).

    Holds O(n + K_T) beyond the chunk and the link's CSI: each chunk's precoders and
    on-subcarriers are formed when it is added (:func:`inversion_rows`, the same values
    row by row). A link ``h`` [K, N, F] (a channel per OFDM symbol, module docstring) is
    read a chunk's rows at a time: the chunk's terms are [chunk, N, F]. With ``keep_signals`` (``send`` only) the
    signals of :func:`phy.uplink.majority_vote.vote_result` are kept; a time-domain
    ``uplink`` (``send`` only) takes all senders in one chunk.
    """

    def __init__(self, scheme: OneBit, link, air, *, phase: str, seed, per_device: bool,
                 keep_signals: bool = False, uplink=None):
        self.scheme, self.link, self.air, self.phase, self.seed = scheme, link, air, phase, seed
        self.per_device, self.keep_signals, self.uplink = per_device, keep_signals, uplink
        self.weights = np.asarray(link.weights, np.float64)
        self.rows = RowOrder(self.weights.shape[0], f"one_bit phase {phase!r}")
        self.started = False

    def _start(self, n: int) -> None:
        """The grid's shape, ``eta`` (the senders' inversion loads, a block at a time) and
        empty sums for n values."""
        f, per = self.air.num_subcarriers, self.scheme.signs_per_element
        elements = -(-n // per)
        self.num_symbols = -(-elements // f)
        self.inversion = {"gain_threshold": self.scheme.gain_threshold, "used_subcarriers": min(f, elements),
                          "symbol_energy": float(per)}
        self.h_hat = np.asarray(self.link.h_hat)  # complex64 [K, F]; the link's, not copied
        h_shape = tuple(self.link.h.shape)
        if h_shape not in (self.h_hat.shape, (*self.h_hat.shape[:1], self.num_symbols, f)):
            raise ValueError(f"one_bit phase {self.phase!r}: h must be [K, F] = {list(self.h_hat.shape)} like "
                             f"h_hat, or [K, N, F] = {[self.h_hat.shape[0], self.num_symbols, f]} (a channel "
                             f"per OFDM symbol of the phase), got {list(h_shape)}")
        self.path_gain = np.asarray(self.link.path_gain, np.float64)
        self.eta, self.on_count = inversion_scale(self.h_hat, self.path_gain, self.weights,
                                                  tx_power_w=self.air.tx_power_w, **self.inversion)
        self.started = True
        self.power = np.zeros(self.weights.shape[0], np.float64)  # [K], over the N symbols
        self.received = self.sums = None

    def _precoder(self, lo: int, hi: int) -> np.ndarray:
        """The precoders of senders lo:hi, ``sqrt(eta) pi_k / h_hat_kf`` on their
        on-subcarriers (complex128 [hi - lo, F]; formed per chunk, never for every sender)."""
        _, on = inversion_rows(self.h_hat[lo:hi], self.path_gain[lo:hi], self.weights[lo:hi], **self.inversion)
        h_hat = self.h_hat[lo:hi].astype(np.complex128)
        return np.where(on, math.sqrt(self.eta) * self.weights[lo:hi, None] / np.where(on, h_hat, 1.0), 0.0)

    def add(self, lo: int, hi: int, updates) -> None:
        """Superpose rows ``lo:hi``: their part of ``y``, their powers, their votes' sums."""
        signs = signs_of(self.rows.take(lo, hi, updates))
        num_devices, n = (int(d) for d in signs.shape)
        if not self.started:
            self._start(n)
        if self.uplink is not None and (lo, hi) != (0, self.weights.shape[0]):
            raise NotImplementedError("the time-domain uplink takes every sender in one chunk")
        f, per, num_symbols = self.air.num_subcarriers, self.scheme.signs_per_element, self.num_symbols
        grid = tf.reshape(tf.pad(signs, [[0, 0], [0, num_symbols * f * per - n]]),
                          [num_devices, num_symbols, f, per])
        precoder = self._precoder(lo, hi)
        c_re, c_im = grid[..., 0], (grid[..., 1] if per == 2 else None)
        y = superpose(c_re, c_im, precoder, tf.convert_to_tensor(self.link.h[lo:hi]), self.uplink)
        y = y.numpy()
        part = (np.real(y).astype(np.float64), np.imag(y).astype(np.float64))
        used = tf.reduce_sum(tf.abs(grid), axis=[1, 3]).numpy().astype(np.float64)  # [K, F]: sum of |c|^2
        self.power[lo:hi] = (np.abs(precoder) ** 2 * used).sum(axis=1)
        sums = majority_sums(signs, self.weights[lo:hi])
        if self.received is None:
            self.received, self.sums = part, sums
        else:
            self.received = (self.received[0] + part[0], self.received[1] + part[1])
            self.sums = (self.sums[0] + sums[0], self.sums[1] + sums[1])

    def finish(self) -> SchemeResult:
        """The vote [n] tf.float32, the phase's symbols, energies [K_T] and columns."""
        self.rows.check_done()
        if not self.started:
            raise ValueError(f"one_bit phase {self.phase!r}: no sender, so no values to vote on")
        f, n, per = self.air.num_subcarriers, self.rows.num_values, self.scheme.signs_per_element
        y = tf.complex(self.received[0].astype(np.float32), self.received[1].astype(np.float32)) + complex_noise(
            self.seed, [self.num_symbols, f], self.air.noise_power_w)
        parts = [tf.sign(tf.math.real(y))] + ([tf.sign(tf.math.imag(y))] if per == 2 else [])
        vote = tf.reshape(tf.stack(parts, axis=-1), [-1])[:n]
        size = self.h_hat.size
        own = {f"silent_fraction_{self.phase}": float(1.0 - self.on_count / size) if size else math.nan,
               f"inversion_amplitude_{self.phase}": math.sqrt(self.eta)}
        return vote_result(vote, self.sums, phase=self.phase, power_w=self.power / self.num_symbols,
                           num_symbols=self.num_symbols, y=y, air=self.air, per_device=self.per_device,
                           keep_signals=self.keep_signals, scalars=own)
