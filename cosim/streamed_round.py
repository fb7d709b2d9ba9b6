"""One round with the devices in chunks: ``run_streamed_round(state, world, t, chunk)``.

:func:`cosim.round.run_round` trains every device of a phase, holds their ``[K, d]``
updates and sends them at once. At massive access those do not fit (K = 100,000 at the
quickstart's d = 118,282 is 47 GB per phase), so this round goes through the devices
``chunk`` at a time within each phase: the chunk trains (its rows of the population's
data, :meth:`learning.algorithms.base.DeviceData.rows`), its updates go into the phase's
stream (:meth:`phy.uplink.RoundLink.open_stream`), and they are dropped before the next
chunk. After the last chunk the stream gives the BS's estimate and the server steps as
in the one-call round. Memory: O(chunk x d + d) for the updates, plus what the uplink
keeps per device (:mod:`phy.aircomp_stream`).

A later phase needs what each device formed in the phases before it (the proposed
method's phase 2 starts from the device's phase-1 precision, ``BayesCarry.delta_rho_k``).
That carry is not held for every device: each chunk trains its earlier phases again from
the same state and the same per-device streams (a device's training reads only its own
data and its own noise, keyed by its population id, so the values are the ones it sent)
and the algorithm's ``chunk_carry`` joins them with the round's carry from the server
steps, of which the round keeps only what ``chunk_carry`` reads
(``round_carry_for_chunks``: the proposed method's applied ``delta_rho``, not the last
chunk's rows). The proposed method thus trains phase 1 twice per round when it streams.

Per-device tables (SCAFFOLD's ``c_k``, FedSMOO's ``mu_k`` and ``h_k``, FedGMT's
``h_k``, signSGD's ``e_k``) are :class:`learning.device_table.DeviceTable` versions on
disk: a chunk reads its rows of the version the round started from (also when a later
phase trains its earlier phases again), and its new rows (the carry's ``rows[phase]``,
:class:`learning.algorithms.fedavg.LocalOutcome`) go into the next version, numbered by
the rounds completed (``t + 1``), as the chunks go. Once every phase is done that version
is sealed (synced, renamed into place, never written again) and the new state refers to
it; a round that fails or is killed leaves only an unfinished ``.partial`` file, which
the next :meth:`learning.device_table.TableStore.keep` deletes. Memory for the tables:
the chunk's rows, O(chunk x d).

The record is the one-call round's, column for column: sums over devices (``train_loss``,
the floor hits) are summed chunk by chunk, in float32 where the algorithm reports
float32, so they agree with the one-call round to float rounding; the uplink's columns
are its stream's (:mod:`phy.uplink.phase_stream`). With one chunk of every device the
engine runs :func:`cosim.round.run_round` itself, bit for bit.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import numpy as np

from cosim import rng as rngs
from cosim.round import RoundRecord, count_nonfinite, end_round
from learning.algorithms.base import scalar_metrics
from learning.device_table import tables_of


def chunk_bounds(num_devices: int, chunk: int) -> list[tuple[int, int]]:
    """``[(lo, hi), ...]``: the population in order, ``chunk`` devices at a time."""
    return [(lo, min(lo + chunk, num_devices)) for lo in range(0, num_devices, chunk)]


def _add_metrics(total: dict | None, chunk: dict) -> dict:
    """The chunks' local metrics summed (each is a sum over devices)."""
    if total is None:
        return dict(chunk)
    return {name: total[name] + value for name, value in chunk.items()}


def _chunk_carry(algorithm, index: int, states: list, carries: list, rows, seeds: list):
    """The carry a chunk's devices bring to phase ``index``: their earlier phases trained
    again from the states those phases started from, joined with the round's carries."""
    carry = None
    for earlier in range(index):
        _, carry, _ = algorithm.local_update(earlier, states[earlier], carry, rows, seeds[earlier])
        carry = algorithm.chunk_carry(carry, carries[earlier])
    return carry


def run_streamed_round(state: Any, world, t: int, chunk: int) -> tuple[Any, RoundRecord]:
    """Round ``t`` of ``world`` from ``state`` with ``chunk`` devices' updates in memory at
    a time: the new state and the round's record (module docstring)."""
    started, cpu_started = time.perf_counter(), time.process_time()
    algorithm, seed, data = world.algorithm, world.scenario.seed, world.device_data
    record, link, previous = RoundRecord(round=t), world.uplink.round(t), state
    states, carries, seeds, nonfinite, metrics = [], [], [], 0, {}
    writers = {name: table.next_version(t + 1) for name, table in tables_of(state).items()}
    try:
        for index, phase in enumerate(algorithm.phases()):
            states.append(state)
            seeds.append(rngs.stream_seed(seed, t, rngs.local_purpose(phase.name)))
            stream, local, carry = link.open_stream(phase.name, data.weights), None, None
            for lo, hi in chunk_bounds(data.num_devices, chunk):
                rows, carry = data.rows(lo, hi), None  # the last chunk's carry: its buffers free before this one trains
                updates, carry, chunk_local = algorithm.local_update(
                    index, state, _chunk_carry(algorithm, index, states, carries, rows, seeds), rows, seeds[index])
                nonfinite += count_nonfinite(updates)
                stream.add(lo, hi, updates)
                local = _add_metrics(local, chunk_local)
                del updates
                for name, values in (carry.rows[index].items() if writers else ()):
                    writers[name].write(lo, np.asarray(values))
            sent = stream.finish()
            state, carry, server = algorithm.server_update(index, state, carry, sent.estimate, received=None)
            carries.append(algorithm.round_carry_for_chunks(carry))
            carry = None
            metrics[phase.name] = scalar_metrics(local, server)
            record.add(sent.columns())
        state = _sealed(state, writers)
    except BaseException:
        for writer in writers.values():
            writer.discard()
        raise
    return state, end_round(record, world, link, (previous, state), metrics, nonfinite,
                            (started, cpu_started))


def _sealed(state, writers: dict):
    """``state`` with every table the round wrote at its new version (sealed: complete, on
    disk for good); a table the round wrote no row of stays at its version."""
    if not writers:
        return state
    new = {name: writer.seal() for name, writer in writers.items() if writer.started}
    for writer in writers.values():
        if not writer.started:
            writer.discard()
    return dataclasses.replace(state, **new)
