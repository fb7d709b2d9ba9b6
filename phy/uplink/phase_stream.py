"""One phase over the air with the senders' updates added in chunks of devices.

:meth:`phy.uplink.RoundLink.send` takes a phase's ``[K, n]`` updates at once; at massive
access they do not fit in memory. :meth:`phy.uplink.RoundLink.open_stream` returns a
:class:`PhaseStream` instead::

    stream = link.open_stream("rho", weights)      # pi_k [K]
    for lo, hi in chunks:
        stream.add(lo, hi, updates_of(lo, hi))     # [hi - lo, n] float32, in order
    result = stream.finish()                       # a PhaseResult, as send's

The stream hands the chunks to the scheme's own stream (``scheme.open_stream``,
:mod:`phy.uplink.scheme`) and accumulates the error-free weighted sum for the phase's
``aggregate_error`` (:class:`phy.aggregate_error.StreamedError`, float64 [n]); it holds
no device's update after its chunk. The ledger, the uplink's columns and the per-device
spread are :meth:`~phy.uplink.RoundLink.send`'s, written once.

What needs every update at once, or rows other than the whole population, does not
stream and is refused at :meth:`PhaseStream.__init__` with the key that asks for it: a
cohort (``[participation]``), the time domain, kept signals (``trace.signals``), a scheme
round that changes the phase's link (``[privacy]``'s clipping) and a scheme without
``open_stream``. Moving devices stream: each phase's estimate and
channel are :meth:`~phy.uplink.RoundLink.send`'s (:func:`phy.uplink.moving_link.phase_channels`),
for every device at once, and the chunks take their rows; a channel per OFDM symbol is a
:class:`phy.uplink.moving_link.SymbolChannel`, evaluated a chunk's devices at a time.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from native.columns import Columns
from phy.aggregate_error import StreamedError
from phy.stream_rows import RowOrder
from phy.uplink import moving_link
from phy.uplink import participation as cohorts
from phy.uplink.scheme import SchemeRound


class StreamRefused(ValueError):
    """A round whose phases cannot be streamed (the message names the key)."""


def stream_refusal(round_link) -> str | None:
    """Why ``round_link``'s phases cannot stream (naming the key), or None."""
    block = round_link.block
    if round_link.cohort is not None:
        return "[participation] schedules a cohort per round: its rows do not stream"
    if round_link.air.domain == "time":
        return "ofdm.domain = 'time' needs every sender's symbols at once: it does not stream"
    if round_link.keep_signals:
        return "trace.signals keeps the round's raw signals, which need every update at once"
    if type(round_link.scheme_round) is not SchemeRound:
        return (f"the scheme {type(block.scheme).__name__} changes each phase's link "
                "(the [privacy] wrapper clips every update): it does not stream")
    if not hasattr(block.scheme, "open_stream"):
        return f"uplink.scheme {type(block.scheme).__name__} has no stream of its updates"
    return None


class PhaseStream:
    """One phase of ``round_link`` (:class:`phy.uplink.RoundLink`) with the population's
    updates added in chunks (module docstring)."""

    def __init__(self, round_link, phase: str, weights):
        if (reason := stream_refusal(round_link)) is not None:
            raise StreamRefused(reason)
        block = round_link.block
        self.round_link, self.phase = round_link, phase
        h, h_hat, gain, slot = round_link.h, round_link.h_hat, round_link.path_gain, None
        if block.moving is not None:  # the phase's estimate and channel, as send's
            h, h_hat, gain, slot = moving_link.phase_channels(round_link, phase, first=round_link.phases_done == 0,
                                                              lazy=True)
        self.link = cohorts.phase_link(
            None, block.phase_index[phase], weights, None, h, h_hat, None,
            path_gain=gain, population_weights=block.population_weights, bs_knows_dropouts=False)
        if slot is not None:  # every device sends: the slot's senders are the population
            self.link = dataclasses.replace(self.link, slot=slot)
        self.weights = np.asarray(weights, np.float64)
        self.scheme = block.scheme.open_stream(self.link, block.air, phase=phase,
                                               seed=round_link._noise_seed(phase),
                                               per_device=block.trace.per_device)
        self.error, self.rows = None, RowOrder(self.weights.shape[0], f"phase {phase!r}")

    def add(self, lo: int, hi: int, updates) -> None:
        """Rows ``lo:hi`` of the population's updates, [hi - lo, n] float32, in order."""
        self.rows.take(lo, hi, updates)
        if self.error is None:
            self.error = StreamedError(int(updates.shape[1]))
        self.error.add(updates, self.weights[lo:hi])
        self.scheme.add(lo, hi, updates)

    def finish(self):
        """The phase's :class:`phy.uplink.PhaseResult` once every row was added."""
        self.rows.check_done()
        result = self.scheme.finish()
        return self.round_link._phase_result(self.phase, self.link, result, Columns(),
                                             self.error.error(result.estimate))
