"""The run's loop over rounds (Algorithm 1): :class:`Engine` and the running channel uses.

A round is the function :func:`cosim.round.run_round` on the static world
:func:`cosim.world.build_world` builds once; :class:`Engine` holds the world, starts
the algorithm's state and yields one ``(state, record)`` per round with the running
``cumulative_*`` channel uses (:class:`cosim.channel_uses.ChannelUses`, the one place
they are summed) and the round's divergence findings
(:class:`cosim.divergence.DivergenceWatch`). Randomness comes only from :mod:`cosim.rng`
streams keyed by (seed, round, purpose), so a run replays bit-for-bit and a run resumed
at round ``t`` draws exactly what an uninterrupted run draws.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from cosim.channel_uses import ChannelUses
from cosim.divergence import DivergenceWatch, advice
from cosim.round import RUN_COLUMNS, RoundRecord, count_nonfinite, run_round
from cosim.scenario import Scenario
from cosim.streamed_round import run_streamed_round
from cosim.world import World, build_world

__all__ = ["RUN_COLUMNS", "ChannelUses", "Engine", "RoundRecord", "World", "build_world", "count_nonfinite"]


class Engine:
    """Runs a scenario round by round: ``Engine(scenario)`` (or on a pre-built ``world``)."""

    def __init__(self, scenario: Scenario, world: World | None = None):
        self.scenario = scenario
        self.world = world if world is not None else build_world(scenario)
        self.algorithm = self.world.algorithm
        self.uplink = self.world.uplink

    @property
    def num_params(self) -> int:
        return self.world.num_params

    def initial_state(self) -> Any:
        """The algorithm's initial state (deterministic for the scenario's seed)."""
        return self.world.initial_state()

    def privacy_account(self):
        """A fresh :class:`cosim.privacy.PrivacyAccount` of the scenario's ``[privacy]``
        (None without it)."""
        if self.scenario.privacy is None:
            return None
        from cosim.privacy import PrivacyAccount

        return PrivacyAccount.of(self.scenario, list(self.uplink.grids), self.num_params,
                                 self.uplink.scheme.privacy.noise_floor)

    def run_round(self, t: int, state: Any) -> tuple[Any, RoundRecord]:
        """Round ``t`` from ``state`` (:func:`cosim.round.run_round`; with
        ``world.devices_in_memory`` set, :func:`cosim.streamed_round.run_streamed_round`)."""
        if self.world.devices_in_memory is not None:
            return run_streamed_round(state, self.world, t, self.world.devices_in_memory)
        return run_round(state, self.world, t)

    # ------------------------------------------------------------------ the loop
    def rounds(
        self,
        state: Any,
        start_round: int = 0,
        divergence: DivergenceWatch | None = None,
        channel_uses: ChannelUses | None = None,
        privacy=None,
    ) -> Iterator[tuple[Any, RoundRecord]]:
        """Yield ``(state, record)`` for rounds ``start_round .. rounds-1``.

        Every record's scalars hold the running channel-use totals up to and including
        its round, ``cumulative_uplink_symbols``, ``cumulative_downlink_symbols`` and
        ``cumulative_channel_uses`` (OFDM symbols), ``cumulative_uplink_seconds`` (s) and
        ``cumulative_uplink_energy_j`` (J), summed in ``channel_uses`` (updated
        in place; a fresh :class:`ChannelUses` when None). Every record is checked by
        ``divergence`` (a fresh :class:`~cosim.divergence.DivergenceWatch` when None; a
        resumed run passes one holding round 0's loss) and carries its findings in
        ``record.divergence``; whether a diverged run stops is the caller's choice
        (``cosim.run``). With ``[privacy]`` every record also holds ``privacy_epsilon``
        and ``privacy_epsilon_round``, composed in ``privacy`` (a
        :class:`cosim.privacy.PrivacyAccount`, updated in place; a fresh one when None).

        Raises
        ------
        ValueError
            On the first iteration: ``start_round > 0`` without ``channel_uses`` (the totals of rounds
            ``0 .. start_round-1``, e.g. :meth:`ChannelUses.resumed`): the cumulative
            columns would silently count from ``start_round``.
        """
        if start_round > 0 and channel_uses is None:
            raise ValueError(
                f"start_round = {start_round} needs channel_uses, the totals of rounds "
                f"0..{start_round - 1} (ChannelUses.resumed)"
            )
        uses = channel_uses if channel_uses is not None else ChannelUses()
        watch = divergence if divergence is not None else DivergenceWatch()
        if privacy is None and self.scenario.privacy is not None:
            if start_round > 0:
                raise ValueError(f"start_round = {start_round} needs privacy, the account of rounds "
                                 f"0..{start_round - 1} (PrivacyAccount.replay)")
            privacy = self.privacy_account()
        for t in range(start_round, self.scenario.rounds):
            state, record = self.run_round(t, state)
            uses.add(record.scalars)
            if privacy is not None:
                privacy.add(record.scalars)
            record.divergence = watch.check(t, record.scalars)
            yield state, record

    def divergence_advice(self) -> str:
        """The scenario keys most likely behind a divergence (:func:`cosim.divergence.advice`)."""
        return advice(self.scenario.algorithm)
