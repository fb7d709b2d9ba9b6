"""What an over-the-air scheme is: one phase of the senders' updates in, the BS's
estimate, the channel uses, the transmit energy and the scheme's own columns out; and
the round hooks through which a scheme may act on a whole round.

A scheme (``uplink.scheme``: :data:`phy.parameters.UPLINK_SCHEMES`) is a sibling behind
:meth:`phy.uplink.RoundLink.send`. The round link hands it the phase's
:class:`phy.uplink.participation.PhaseLink` (the senders' updates ``[K_T, n]``, the BS's
weights, the channel and CSI of the senders) and the block's frozen
:class:`phy.uplink.settings.AirInterface` (the power budget, the noise, the OFDM
numerology); it returns a :class:`SchemeResult`. A scheme holds its own settings (the
analog scheme its power control and receiver scaling gamma): the block holds none of
them. What every scheme shares (the estimate's error against the
error-free weighted sum, the received weight of a partial round, the round's symbols,
seconds and joules) is written once by the round link.

Round hooks (optional; a plain scheme defines none and gets the neutral ones):

- ``check_air(air)``: refuse an air interface the scheme cannot describe (ValueError),
  called once when the block is built (:func:`check_air`);
- ``start_round(round_link) -> SchemeRound``: the scheme's state of one round, made with
  each :class:`phy.uplink.RoundLink` (:func:`start_round`; default :data:`PLAIN_ROUND`).
  Its :meth:`SchemeRound.before_phase` may transform each phase's link, charge the
  round's :class:`phy.uplink.ledger.RoundLedger` and add columns before the scheme sends;
  its :meth:`SchemeRound.columns` adds the round's columns after the phases.

The privacy wrapper (:class:`phy.uplink.private.Private`) is such a scheme: the block and
the round link call the hooks and name no wrapper.

Streams (optional; a scheme whose parameters say ``streams``,
:class:`phy.scheme_parameters.SchemeParameters`): ``open_stream(link, air, *, phase, seed,
per_device)`` takes the phase's link with ``updates`` None and returns an object with
``add(lo, hi, updates)`` (rows ``lo:hi`` of the senders, [hi - lo, n] float32, in order,
each row once) and ``finish() -> SchemeResult`` (no signals), what ``send`` returns on all
the rows: bit for bit with one chunk, and to the float rounding each scheme's stream
states with several (:mod:`phy.uplink.phase_stream`; a round that streams its devices,
``cosim/streamed_round.py``). A stream holds no row after its chunk.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import tensorflow as tf

from native.columns import Columns


@dataclass(frozen=True)
class SchemeResult:
    """One phase of one scheme.

    Attributes
    ----------
    estimate : [n], tf.float32
        What the BS hands to the server update: the estimate of the senders' weighted sum
        (a value-carrying scheme) or its sign per entry (a sign-carrying scheme: the
        majority vote, in {-1, 0, +1}).
    num_symbols : int
        The OFDM symbols the phase occupied on the grid (its channel uses).
    tx_energy_j : [K_T], float64
        Each sender's transmit energy in the phase (J): the sum over its symbols of
        ``||x_k^(n)||^2`` times the symbol duration with its cyclic prefix.
    columns : native.columns.Columns
        The scheme's own columns: ``/rounds`` scalars named ``<column>_<phase>``,
        per-device arrays over the senders ``[K_T]`` (spread over the population by the
        round link, NaN for a device that did not send) and raw signals.
    """

    estimate: tf.Tensor
    num_symbols: int
    tx_energy_j: np.ndarray
    columns: Columns


class Scheme(Protocol):
    """An over-the-air scheme.

    ``carries`` is ``"values"`` (the estimate approximates the weighted sum: any
    algorithm) or ``"signs"`` (the estimate is a sign per entry: an algorithm whose
    server update takes a majority vote, ``learning.catalog.Entry.sends == "signs"``).
    ``accounts_privacy`` is True where the ``[privacy]`` mechanism (the analog
    receiver noise against each sender's sensitivity, :mod:`phy.privacy`) describes what
    the BS sees: only such a scheme can be wrapped in :class:`phy.uplink.private.Private`.

    A scheme may also define the round hooks ``check_air(air)`` and
    ``start_round(round_link) -> SchemeRound`` (module docstring); the block reaches
    them through :func:`check_air` and :func:`start_round`, neutral when absent.
    """

    carries: str
    accounts_privacy: bool

    def send(self, link: Any, air: Any, *, phase: str, seed: Any, keep_signals: bool,
             per_device: bool) -> SchemeResult:
        """Phase ``phase`` of ``link`` (:class:`phy.uplink.participation.PhaseLink`) over
        ``air`` (:class:`phy.uplink.settings.AirInterface`: F, P, sigma_z^2, the symbol
        duration), the receiver noise drawn from the stateless ``seed`` ([2] int32);
        ``keep_signals``: this round's raw signals go to the columns; ``per_device``: the
        scheme's per-device columns are written."""
        ...

    def nominal_symbols(self, grid: Any) -> int:
        """The symbols a phase occupies when it is sent but not simulated (a round the BS
        discards): for ``grid`` (:class:`phy.grid.GroupingRule` of the phase's values)."""
        ...


def energy_j(power_w, num_symbols: int, symbol_duration_s: float) -> np.ndarray:
    """``[K]`` transmit energy (J) from the mean per-symbol power ``power_w`` [K] (W) over
    ``num_symbols`` OFDM symbols of ``symbol_duration_s`` seconds each (NaN when the
    duration is unknown)."""
    return np.asarray(power_w, np.float64) * float(num_symbols) * float(symbol_duration_s)


class SchemeRound:
    """A scheme's part of one round (made by its ``start_round``); this base is the
    neutral one of a plain scheme: it changes no link and adds no column."""

    def before_phase(self, phase: str, link: Any, ledger: Any) -> tuple[Any, Columns]:
        """``(link, columns)``: the phase's :class:`phy.uplink.participation.PhaseLink`
        the scheme sends (``link`` itself here) and the columns the hook adds (first among
        the phase's); ``ledger`` (:class:`phy.uplink.ledger.RoundLedger`) takes what the
        devices send beyond the scheme."""
        return link, Columns()

    def columns(self) -> Columns:
        """The round's columns of the scheme, after its phases (none here)."""
        return Columns()


PLAIN_ROUND = SchemeRound()
"""The round state of a scheme without ``start_round`` (it holds nothing)."""


def start_round(scheme: Any, round_link: Any) -> SchemeRound:
    """``scheme.start_round(round_link)`` (:class:`phy.uplink.RoundLink`), or
    :data:`PLAIN_ROUND` for a scheme that defines no round hooks."""
    hook = getattr(scheme, "start_round", None)
    return PLAIN_ROUND if hook is None else hook(round_link)


def check_air(scheme: Any, air: Any) -> None:
    """``scheme.check_air(air)`` (:class:`phy.uplink.settings.AirInterface`): raises
    ValueError for an air interface the scheme refuses; nothing for a scheme without it."""
    hook = getattr(scheme, "check_air", None)
    if hook is not None:
        hook(air)
