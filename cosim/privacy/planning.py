"""A run's privacy from its scenario: the account a run keeps (:class:`PrivacyAccount`,
fed every round's traced multipliers, replayed on resume), the projected epsilon
(:func:`project`), the artificial noise's floor per phase (:func:`plan_noise_floor`, and
:func:`plan_remaining_noise_floor` for an extended run against its committed rounds), the
uplink's privacy settings (:func:`uplink_privacy`, :func:`eavesdropper_of`) and the
one-line refusals of a target no noise can meet. The composition is the library's, through
:mod:`cosim.privacy.accounting`. ``docs/privacy.md``.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass

import dp_accounting
import numpy as np
from scipy.optimize import brentq

from cosim.privacy.accounting import (
    FLOOR_MARGIN,
    PLD_MAX_EPSILON,
    PrivacyLedger,
    _accountant,
    epsilon_of,
    held_strictly,
    planning_target,
    projected_epsilon,
    round_event,
)
from cosim.privacy.clip_bound import clip_sensitivity_bounds
from phy.parameters import (  # pydantic only
    CHANNEL_MODELS,
    budgeted,
    over_the_air,
    scales_for_privacy,
)
from phy.privacy import Eavesdropper, UplinkPrivacy, eavesdropper_path_gain


class PrivacyAccount:
    """The run's privacy so far: the one place its rounds are composed (as
    :class:`cosim.engine.ChannelUses` sums its channel uses), fed every round's record by
    :meth:`cosim.engine.Engine.rounds`.

    Each round's event is formed from what the uplink traced
    (:meth:`phy.uplink.RoundLink.send`): the worst device's noise multiplier of every
    phase, ``privacy_noise_multiplier_<phase>`` (a phase not sent, as in a discarded
    round: no event), and with Poisson subsampling the round's
    ``privacy_joint_noise_multiplier`` (:func:`round_event`); :meth:`add` composes it in
    the :class:`PrivacyLedger` and writes ``privacy_epsilon`` (cumulative) and
    ``privacy_epsilon_round`` at ``privacy.delta``. A resumed run replays the trace's
    committed rows of the same columns (:meth:`replay`): the same events in the same
    order, so the same figures as a run that was not interrupted, bit for bit.

    Parameters
    ----------
    phases : sequence of str
        The uplink phases' names.
    delta : float
    accountant : "pld" or "rdp"
    sampling_probability : float
        q of the Poisson subsampling (1: none).
    expected_epsilon : float
        Sets the PLD's interval (:func:`pld_interval`, :func:`run_expected_epsilon`).
    noise_floor : mapping str -> float, optional
        With ``privacy.target_epsilon``: the floor every phase of the rounds to come is held
        to (:func:`plan_noise_floor`, or on an extended run :func:`plan_remaining_noise_floor`);
        :meth:`add` writes it as ``privacy_noise_floor_<phase>``.
    planned_rounds : int, optional
        The run's rounds the floor was planned for; :meth:`add` writes it as
        ``privacy_planned_rounds`` (a resumed run with the same rounds keeps the floor of
        its last committed round, :func:`resumed_noise_plan`).
    """

    def __init__(self, phases: Sequence[str], delta: float, accountant: str = "pld",
                 sampling_probability: float = 1.0, expected_epsilon: float = 0.0,
                 noise_floor=None, planned_rounds: int | None = None) -> None:
        self.phases = tuple(phases)
        self.sampling_probability = float(sampling_probability)
        self.ledger = PrivacyLedger(delta, accountant, expected_epsilon)
        self.noise_floor = dict(noise_floor) if noise_floor else None
        self.planned_rounds = planned_rounds
        self.eavesdropper: PrivacyLedger | None = None
        self.eavesdropper_reads_downlink = True

    @classmethod
    def of(cls, scenario, phases: Sequence[str], num_params: int, noise_floor=None
           ) -> PrivacyAccount:
        """The account of ``scenario`` (which has a ``[privacy]`` table), before round 0;
        ``noise_floor``: the uplink's planned floor (with ``privacy.target_epsilon``)."""
        config = scenario.privacy
        projection = project(scenario, num_params)
        expected = run_expected_epsilon(scenario, projection)
        account = cls(phases, config.delta, config.accountant, projection.sampling_probability,
                      expected, noise_floor,
                      scenario.rounds if config.target_epsilon is not None else None)
        if config.eavesdropper_distance_m is not None:
            account.eavesdropper = PrivacyLedger(config.delta, config.accountant, expected)
            account.eavesdropper_reads_downlink = config.eavesdropper_downlink == "clear"
        return account

    def event(self, scalars, observer: str = "privacy") -> dp_accounting.DpEvent:
        """The round's event from its ``/rounds`` scalars (a missing or NaN multiplier:
        the phase was not sent); ``observer = "eavesdropper"``: the eavesdropper's, from
        ``eavesdropper_noise_multiplier_<phase>`` and ``eavesdropper_joint_noise_multiplier``,
        composed with the BS's phases when the downlink is in the clear (the model it
        multicasts is post-processing of what the BS received: the eavesdropper learns at
        least that; its joint multiplier already counts them, :class:`phy.uplink.RoundLink`)."""
        def multiplier(name: str) -> float:
            value = float(scalars.get(name, math.nan))
            return math.inf if math.isnan(value) else value

        z = [multiplier(f"{observer}_noise_multiplier_{phase}") for phase in self.phases]
        if observer == "eavesdropper" and self.eavesdropper_reads_downlink:
            z += [multiplier(f"privacy_noise_multiplier_{phase}") for phase in self.phases]
        joint = None
        if self.sampling_probability < 1.0:
            joint = multiplier(f"{observer}_joint_noise_multiplier")
        return round_event(z, self.sampling_probability, joint)

    def add(self, scalars: dict) -> None:
        """Compose one round (its ``scalars``) and write ``privacy_epsilon`` and
        ``privacy_epsilon_round`` into them; with a noise floor also
        ``privacy_noise_floor_<phase>`` and ``privacy_planned_rounds``."""
        total, this_round = self.ledger.add_round(self.event(scalars))
        scalars["privacy_epsilon"] = total
        scalars["privacy_epsilon_round"] = this_round
        if self.noise_floor:
            for phase, floor in self.noise_floor.items():
                scalars[f"privacy_noise_floor_{phase}"] = float(floor)
            scalars["privacy_planned_rounds"] = float(self.planned_rounds)
        if self.eavesdropper is not None:
            total, this_round = self.eavesdropper.add_round(self.event(scalars, "eavesdropper"))
            scalars["eavesdropper_epsilon"] = total
            scalars["eavesdropper_epsilon_round"] = this_round

    def replay(self, column, rounds: int, source: str = "the trace") -> None:
        """Compose rounds ``0 .. rounds-1`` of a resumed trace: ``column(name)`` gives the
        committed rows of a ``/rounds`` column (None if absent;
        :meth:`cosim.trace.TraceWriter.column`). A stored multiplier that is negative or no
        number raises :class:`cosim.trace.TraceError` naming ``source`` (the trace's path)
        and the dataset."""
        observers = ("privacy", "eavesdropper") if self.eavesdropper is not None else ("privacy",)
        names = [f"{observer}_{what}" for observer in observers for what in (
            *(f"noise_multiplier_{phase}" for phase in self.phases), "joint_noise_multiplier")]
        rows = {name: column(name) for name in names}
        for t in range(rounds):
            scalars = {name: values[t] for name, values in rows.items() if values is not None}
            for name, value in scalars.items():
                if not (isinstance(value, (int, float, np.number)) and (math.isnan(value) or value >= 0.0)):
                    from cosim.trace.file_format import TraceError

                    raise TraceError(f"{source}: rounds/{name}[{t}] = {value!r} is not a noise "
                                     "multiplier (a number >= 0, inf where nobody sent, NaN where "
                                     "the phase was not sent); the trace is damaged: `cosim verify` "
                                     "it, or run again with --overwrite")
            self.ledger.compose(self.event(scalars))
            if self.eavesdropper is not None:
                self.eavesdropper.compose(self.event(scalars, "eavesdropper"))


def uplink_privacy(scenario, phase_values: dict[str, int], positions_m=None) -> UplinkPrivacy:
    """What the uplink of ``scenario`` (with ``[privacy]``) traces and enforces:
    :class:`phy.privacy.UplinkPrivacy` (``phase_values``: ``{phase: values}``), with the
    noise floor of ``privacy.target_epsilon`` (:func:`plan_noise_floor`) when set, and
    with ``privacy.eavesdropper_distance_m`` the eavesdropper of the devices at
    ``positions_m`` [K, 2] (:func:`eavesdropper_of`)."""
    config = scenario.privacy
    eavesdropper = None if config.eavesdropper_distance_m is None else eavesdropper_of(
        scenario, positions_m)
    floor = {} if config.target_epsilon is None else plan_noise_floor(scenario, phase_values)
    return UplinkPrivacy(noise_floor=floor, clip_norm=config.clip_norm,
                         noise_source=config.noise_source, eavesdropper=eavesdropper,
                         delta_bar=config.delta_bar, subsampled=config.subsampling == "poisson",
                         downlink_in_clear=config.eavesdropper_downlink == "clear")


def eavesdropper_of(scenario, positions_m) -> Eavesdropper:
    """The eavesdropper of ``privacy.eavesdropper_distance_m``: at that distance from the
    BS on the x axis, ``max(d_k, cell.min_distance_m)^-alpha`` from each device at
    ``positions_m`` (:func:`phy.privacy.eavesdropper_path_gain`, alpha =
    ``channel.path_loss_exponent``), its noise ``privacy.eavesdropper_noise_power_dbm``
    (default: the BS's ``power.noise_power_dbm``)."""
    config = scenario.privacy
    noise_dbm = (scenario.power.noise_power_dbm if config.eavesdropper_noise_power_dbm is None
                 else config.eavesdropper_noise_power_dbm)
    min_distance_m = getattr(scenario.cell, "min_distance_m", 1.0)
    gain = eavesdropper_path_gain(positions_m, config.eavesdropper_distance_m,
                                  scenario.channel.path_loss_exponent, min_distance_m)
    return Eavesdropper(gain, 10.0 ** ((noise_dbm - 30.0) / 10.0))


def run_expected_epsilon(scenario, projection: Projection) -> float:
    """The epsilon a run is expected to reach, which sets its PLD's interval
    (:func:`pld_interval`): ``privacy.target_epsilon`` when set (the run ends at or below
    it), else the projection's (a finite one), else :data:`PLD_MAX_EPSILON`."""
    target = scenario.privacy.target_epsilon
    if target is not None:
        return float(target)
    if projection.epsilon is not None and math.isfinite(projection.epsilon):
        return float(projection.epsilon)
    return PLD_MAX_EPSILON


# ------------------------------------------------------------------ the up-front projection

def expected_max_fading(num_subcarriers: int, num_antennas: int = 1, flat: bool = False) -> float:
    """E[max_f G_f] of F i.i.d. small-scale power gains, each the sum over N_r antennas of
    unit-mean exponentials (Rayleigh fading: G_f ~ Gamma(N_r, 1)), by quadrature of
    ``int_0^inf 1 - P(G <= x)^F dx``; a flat channel has one draw (F = 1). For N_r = 1
    this is the harmonic number H_F (7.5 at F = 1024)."""
    from scipy.integrate import quad
    from scipy.special import gammainc

    count = 1 if flat else int(num_subcarriers)
    value, _ = quad(lambda x: -np.expm1(count * np.log(np.clip(gammainc(num_antennas, x),
                                                                1e-300, 1.0))),
                    0.0, np.inf, limit=200)
    return float(value)


@dataclass(frozen=True)
class Projection:
    """The up-front privacy projection of a scenario (:func:`project`).

    Attributes
    ----------
    epsilon : float or None
        Epsilon at ``privacy.delta`` after ``rounds`` rounds (``inf``: no bound holds);
        None where no projection can be made (``why`` says so).
    noise_multipliers : dict[str, float]
        The worst device's noise multiplier per phase, the same every round.
    sampling_probability : float
        q of the Poisson subsampling (1: none).
    assumes : str
        What the projection assumes (one sentence).
    """

    epsilon: float | None
    noise_multipliers: dict[str, float]
    sampling_probability: float
    assumes: str

    def line(self, delta: float, rounds: int, accountant: str) -> str:
        """The ``cosim validate`` line."""
        if self.epsilon is None:
            return f"  privacy   no projection: {self.assumes}"
        z = ", ".join(f"z_{name} = {value:.4g}" for name, value in self.noise_multipliers.items())
        sampled = f", Poisson q = {self.sampling_probability:.4g}" \
            if self.sampling_probability < 1.0 else ""
        if accountant == "pld" and self.epsilon > PLD_MAX_EPSILON:
            accountant = f"the RDP bound: the PLD is not run above {PLD_MAX_EPSILON:g}"
        return (f"  privacy   projected epsilon = {self.epsilon:.6g} at delta = {delta:g} after "
                f"{rounds} rounds ({accountant}; {z}{sampled}); assumes {self.assumes}")


def _closest_distance_m(cell) -> float:
    """The least distance a device of ``[cell]`` can have to the BS (its layout's entry says)."""
    return cell.variant_parameters().closest_distance_m()


def project(scenario, num_params: int) -> Projection:
    """Epsilon of ``scenario`` (which has a ``[privacy]`` table) before it runs, in closed
    form: one round's event composed ``scenario.rounds`` times by the library
    (:func:`projected_epsilon`, O(log rounds)).

    The PHY draw varies from round to round, so the projection fixes it: the worst
    device stands at the cell's closest distance (``cell.min_distance_m``; an annulus'
    inner radius; the nearest explicit position), its strongest subcarrier at the mean of
    the largest of F i.i.d. Rayleigh gains (:func:`expected_max_fading`, summed over the
    BS's antennas; one gain for ``flat_rayleigh``), and its signal bounded by the power
    budget (eq. ``PowerConst``, the bound that holds whatever the data) or, with a clip
    norm and its public ``delta_bar``, by the clip norm's bound ``pi_max sqrt(gamma n)``
    (:mod:`cosim.privacy.clip_bound`; perfect CSI), whichever is smaller. A round whose
    strongest gain is above that mean gives more than the projection; the run's trace
    has the realised figure. No projection for the 3GPP cells (their path loss is drawn
    by Sionna in the run).
    """
    from cosim.scenario.derived import symbols_per_phase, uplink_phase_values

    config = scenario.privacy
    q = 1.0
    if config.subsampling == "poisson":
        num_devices = scenario.cell.num_devices
        q = scenario.participation.cohort_size(num_devices) / num_devices
    channel, channel_facts = scenario.channel.model, CHANNEL_MODELS[scenario.channel.model].parameters
    if not channel_facts.distance_path_loss:  # its registry entry says
        return Projection(None, {}, q, f"channel.model = {channel!r} draws its path loss in "
                          "the run (the trace has the realised epsilon)")
    phases = uplink_phase_values(scenario, num_params)
    power = scenario.power
    clip, clip_assumes = clip_sensitivity_bounds(scenario, phases)
    noise_std = math.sqrt(power.noise_power_w / 2.0)
    if not budgeted(power.control):  # its registry entry says (phy.parameters.POWER_CONTROLS)
        if over_the_air(power.control) and clip_assumes and all(map(math.isfinite, clip.values())):
            return _projected(scenario, {name: noise_std / bound for name, bound in clip.items()},
                              q, f"{clip_assumes}, every round alike")
        if over_the_air(power.control) and config.clip_norm is not None:
            return Projection(None, {}, q, f"power.control = {power.control!r} with "
                              "privacy.clip_norm: the clip bound depends on each round's "
                              "delta_bar, i.e. on the updates (the trace has the realised epsilon)")
        what = ("has no power budget to bound a device's signal" if over_the_air(power.control)
                else "sends no signal over the air: the BS gets the exact sum, without noise")
        return Projection(math.inf, dict.fromkeys(phases, 0.0), q,
                          f"power.control = {power.control!r} {what}")
    distance_m = _closest_distance_m(scenario.cell)
    gain = math.inf if distance_m == 0.0 else distance_m ** -scenario.channel.path_loss_exponent
    fading = expected_max_fading(scenario.ofdm.num_subcarriers, scenario.bs.num_antennas,
                                 flat=channel_facts.flat_fading)
    z = {}
    for name, values in phases.items():
        n = symbols_per_phase(values, scenario.ofdm.num_subcarriers)
        sensitivity = min(math.sqrt(n * power.tx_power_w * gain * fading), clip[name])
        z[name] = noise_std / sensitivity if sensitivity > 0.0 else math.inf
    assumes = (f"the worst device at {distance_m:g} m (path gain {gain:.4g}), its strongest "
               f"subcarrier at {fading:.4g} x the path gain (the mean largest of "
               f"{1 if channel_facts.flat_fading else scenario.ofdm.num_subcarriers} Rayleigh "
               f"gains over {scenario.bs.num_antennas} antenna(s)), the power-budget bound"
               + (f" or {clip_assumes}, whichever is smaller" if clip_assumes else "")
               + ", every round alike")
    return _projected(scenario, z, q, assumes)


def _projected(scenario, z: dict[str, float], q: float, assumes: str) -> Projection:
    """The projection of ``scenario.rounds`` rounds at the worst device's multipliers ``z``."""
    config = scenario.privacy
    epsilon = projected_epsilon(round_event(list(z.values()), q), scenario.rounds, config.delta,
                                config.accountant)
    return Projection(epsilon, z, q, assumes)




def _floor_shape(scenario, phase_values: dict[str, int]) -> tuple[dict[str, float], float]:
    """The phases' floors relative to the largest (``sqrt(N_most / N_phase)``: one noise
    power for all phases) and q of the scenario's subsampling (1: none)."""
    from cosim.scenario.derived import symbols_per_phase

    symbols = {name: symbols_per_phase(values, scenario.ofdm.num_subcarriers)
               for name, values in phase_values.items()}
    most = max(symbols.values())
    shape = {name: math.sqrt(most / n) for name, n in symbols.items()}
    q = 1.0
    if scenario.privacy.subsampling == "poisson":
        q = scenario.participation.cohort_size(scenario.cell.num_devices) / scenario.cell.num_devices
    return shape, q


def plan_noise_floor(scenario, phase_values: dict[str, int]) -> dict[str, float]:
    """Per phase, the least noise multiplier z*_phase of the worst device such that
    ``scenario.rounds`` rounds at these multipliers meet ``privacy.target_epsilon`` at
    ``privacy.delta`` (with the scenario's subsampling), found by the library's
    ``calibrate_dp_mechanism`` (Brent's method; each search point the library's epsilon of
    the rounds' self-composition: first with the RDP accountant, whose answer is enough,
    then with the PLD accountant on the run's interval between half of it and it), raised
    by :data:`FLOOR_MARGIN`.

    The phases share one artificial noise power: under the power-budget bound the worst
    device's multiplier is ``s / sqrt(N_phase P max_f |h|^2)`` for a total noise std s,
    so the floors scale as ``1 / sqrt(N_phase)`` (``phase_values``: ``{phase: values}``,
    N = ceil(values / F)). The uplink keeps every phase at or above its floor
    (:class:`phy.privacy.UplinkPrivacy`), which bounds the run's epsilon by the target
    whatever the channel draws: the plan needs no projection of the cell.
    """
    from dp_accounting.mechanism_calibration import ExplicitBracketInterval, calibrate_dp_mechanism

    config = scenario.privacy
    target = config.target_epsilon
    if target is None:
        raise ValueError("plan_noise_floor needs privacy.target_epsilon")
    shape, q = _floor_shape(scenario, phase_values)

    def event(c: float) -> dp_accounting.DpEvent:
        return dp_accounting.SelfComposedDpEvent(
            round_event([c * value for value in shape.values()], q), scenario.rounds)

    aim = planning_target(target, config.accountant)
    refusal = (f"privacy.target_epsilon: = {target:g} cannot be met: no noise multiplier up to "
               f"2^60 holds {scenario.rounds} rounds at or below it at delta = {config.delta:g}")

    def rdp_gap(value: float) -> float:
        return epsilon_of(event(value), config.delta, "rdp") - aim

    # a bracket [c / 2, c] by halving or doubling from 1, for any finite target
    upper = 1.0
    while rdp_gap(upper) > 0.0:
        upper *= 2.0
        if upper > 2.0 ** 60:
            raise ValueError(refusal)
    lower = 0.5 * upper
    while not rdp_gap(lower) > 0.0 and lower > 1e-300:  # a target so large small ones meet it
        upper, lower = lower, 0.5 * lower
    c = calibrate_dp_mechanism(lambda: _accountant("rdp"), event, aim, config.delta,
                               ExplicitBracketInterval(lower, upper), tol=1e-7 * lower)
    if config.accountant == "pld" and aim <= PLD_MAX_EPSILON:
        def pld_gap(value: float) -> float:
            return epsilon_of(event(value), config.delta, "pld", target) - aim

        lower = 0.5 * c
        while pld_gap(lower) <= 0.0:  # the PLD's figure is below the RDP bound
            lower *= 0.5
        c = calibrate_dp_mechanism(lambda: _accountant("pld", target), event, aim,
                                   config.delta, ExplicitBracketInterval(lower, c), tol=1e-7 * c)
    floors = {name: c * value * (1.0 + FLOOR_MARGIN) for name, value in shape.items()}
    return held_strictly(floors, q, PrivacyLedger(config.delta, config.accountant, target),
                          scenario.rounds, target, refusal)


_LARGEST_FLOOR_STEPS = 60
"""A remaining plan searches the floor's scale up to 2^60 before it says no finite noise
meets the target."""


def spent_target_message(target: float, delta: float, start: int, spent: float, remaining: int
                         ) -> str:
    """The one line of a target the committed rounds already spent (:func:`plan_remaining_noise_floor`)."""
    return (f"privacy.target_epsilon: = {target:g} cannot be met: the {start} rounds already "
            f"in the trace spent epsilon = {spent:.6g} at delta = {delta:g}, so no noise in the "
            f"remaining {remaining} rounds meets it; keep the trace's rounds or raise the target")


def _bracket(gap, accountant: str | None, upper: float) -> tuple[float, float] | None:
    """``(lower, upper)`` with ``gap(lower, accountant) > 0 >= gap(upper, accountant)``,
    doubling ``upper`` and halving from it, or None when no scale up to
    ``2^_LARGEST_FLOOR_STEPS`` meets the target (:func:`plan_remaining_noise_floor`)."""
    steps = 0
    while gap(upper, accountant) > 0.0:
        upper *= 2.0
        steps += 1
        if steps > _LARGEST_FLOOR_STEPS:
            return None
    lower = 0.5 * upper
    while gap(lower, accountant) <= 0.0:
        lower *= 0.5
    return lower, upper


def plan_remaining_noise_floor(scenario, phase_values: dict[str, int], ledger: PrivacyLedger,
                               start: int) -> dict[str, float]:
    """Per phase, the least noise multiplier z*_phase of the worst device for rounds
    ``start .. scenario.rounds - 1`` such that the rounds already composed in ``ledger``
    (rounds ``0 .. start-1`` as the trace has them) followed by ``scenario.rounds - start``
    rounds at these multipliers meet ``privacy.target_epsilon`` at ``privacy.delta``: the
    plan of a run extended by ``--resume`` (:func:`resumed_noise_plan`).

    Every search point is the library's epsilon of a copy of the ledger composed with the
    remaining rounds' self-composition (:meth:`PrivacyLedger.epsilon_with`): first its RDP
    accountant (an upper bound: its answer is enough), then with ``"pld"`` its PLD
    accountant between half of that answer and it; Brent's method (SciPy) finds the scale;
    raised by :data:`FLOOR_MARGIN`, the phases shaped as in :func:`plan_noise_floor`.

    Raises
    ------
    ValueError
        ``privacy.target_epsilon: = ... cannot be met: ...`` when the committed rounds
        already spent the target (no finite noise in the remaining rounds meets it).
    """
    config = scenario.privacy
    target = config.target_epsilon
    if target is None:
        raise ValueError("plan_remaining_noise_floor needs privacy.target_epsilon")
    remaining = scenario.rounds - start
    if remaining < 1:
        raise ValueError(f"no rounds remain: start = {start}, rounds = {scenario.rounds}")
    shape, q = _floor_shape(scenario, phase_values)

    def event(c: float) -> dp_accounting.DpEvent:
        return dp_accounting.SelfComposedDpEvent(
            round_event([c * value for value in shape.values()], q), remaining)

    aim = planning_target(target, ledger.accountant)

    def gap(c: float, accountant: str | None) -> float:
        return ledger.epsilon_with(event(c), accountant) - aim

    spent = ledger.epsilon
    refusal = spent_target_message(target, config.delta, start, spent, remaining)
    if spent >= aim:
        raise ValueError(refusal)

    found = _bracket(gap, "rdp", 1.0) if ledger.epsilon_with(
        dp_accounting.NoOpDpEvent(), "rdp") < target else None
    if ledger.accountant == "pld" and ledger._pld is not None:
        found = _bracket(gap, None, 1.0 if found is None else found[1])
        accountant = None
    else:
        accountant = "rdp"
    if found is None:
        raise ValueError(refusal)
    lower, upper = found
    c = brentq(lambda value: gap(value, accountant), lower, upper, xtol=1e-7 * upper)
    floors = {name: c * value * (1.0 + FLOOR_MARGIN) for name, value in shape.items()}
    return held_strictly(floors, q, ledger, remaining, target, refusal)


def stored_rounds(scenario_text: str) -> int | None:
    """The top-level ``rounds`` of a trace's stored scenario TOML (None if unreadable)."""
    try:
        value = tomllib.loads(scenario_text).get("rounds")
    except tomllib.TOMLDecodeError:
        return None
    return int(value) if isinstance(value, int) else None


def resumed_noise_plan(scenario, column, start: int, stored_rounds: int | None,
                       phases: Sequence[str], num_params: int, source: str = "the trace"
                       ) -> PrivacyAccount:
    """The account of a run with ``privacy.target_epsilon`` resumed at ``start``: rounds
    ``0 .. start-1`` replayed (:meth:`PrivacyAccount.replay`; ``column(name)``: the
    committed rows of a ``/rounds`` column or None), with the floor of the rounds to come
    (``account.noise_floor``):

    - ``start = 0`` (or no round left to run): the plan of the whole run
      (:func:`plan_noise_floor`);
    - the last committed round ran with the same ``rounds`` (``privacy_planned_rounds``;
      for a trace without that column, its stored scenario's ``rounds`` equal to this
      one's): that round's ``privacy_noise_floor_<phase>``, so the run goes on as it would
      have without the interruption, bit for bit (a trace without the floor columns: the
      plan of the whole run, as it was made);
    - else (the run is extended): the remaining rounds planned against the replayed rounds
      (:func:`plan_remaining_noise_floor`), which raises ValueError when the committed
      rounds already spent the target.
    """
    from cosim.scenario.derived import uplink_phase_values

    phase_values = uplink_phase_values(scenario, num_params)
    account = PrivacyAccount.of(scenario, phases, num_params)
    if start > 0:
        account.replay(column, start, source)
    planned = column("privacy_planned_rounds") if start > 0 else None
    floors = {phase: column(f"privacy_noise_floor_{phase}") for phase in phases} if start > 0 else {}
    if planned is not None and len(planned) >= start:
        same = float(planned[start - 1]) == float(scenario.rounds)
    else:
        same = stored_rounds == scenario.rounds
    if start == 0 or start >= scenario.rounds or (same and any(values is None for values in floors.values())):
        account.noise_floor = plan_noise_floor(scenario, phase_values)
    elif same:
        account.noise_floor = {phase: float(values[start - 1]) for phase, values in floors.items()}
    else:
        account.noise_floor = plan_remaining_noise_floor(scenario, phase_values, account.ledger,
                                                         start)
    return account


def refuse_spent_target(scenario, path, source: str | None = None):
    """Before ``cosim run --resume`` writes anything to the trace at ``path``, for a
    scenario with ``privacy.target_epsilon``: ``(start, account)``, the round the resumed
    run starts at (the trace's newest valid checkpoint) and its account with the floor of
    the rounds to come (:func:`resumed_noise_plan`, from the trace read only); a
    :class:`cosim.scenario.ScenarioError` (exit status 2 at the command line) with the one
    ``privacy.target_epsilon: ...`` line when the committed rounds already spent the target
    of an extended run."""
    from cosim.scenario import ScenarioError, scenario_num_params
    from cosim.scenario.derived import uplink_phase_values
    from cosim.trace.read import read_trace

    trace = read_trace(path)
    start = trace.checkpoint_round or 0
    num_params = scenario_num_params(scenario)

    def column(name: str):
        values = trace.rounds.get(name)
        return None if values is None else values[:start]

    try:
        account = resumed_noise_plan(
            scenario, column, start, stored_rounds(str(trace.attrs.get("scenario", ""))),
            list(uplink_phase_values(scenario, num_params)), num_params, str(path))
    except ValueError as error:
        if not str(error).startswith("privacy.target_epsilon"):
            raise
        raise ScenarioError([str(error)], source if source is not None else repr(scenario.name)
                            ) from None
    return start, account


def plan_artificial_noise(scenario, projection: Projection, floor: dict[str, float] | None = None
                          ) -> float:
    """The artificial noise power per subcarrier (W, on top of ``sigma_z^2``) the uplink adds
    in a round like the projection's (its worst device, its strongest subcarrier) to keep
    every phase at its planned floor (:func:`plan_noise_floor`): the least that meets
    ``privacy.target_epsilon``, so such a run ends at or below its target and within 1 %
    of it. 0 where the channel alone meets the floor; ``inf`` where no noise can (no
    bound on a device's signal).

    The projection's noise multipliers are ``sqrt(sigma_z^2 / 2) / sensitivity_p``; the
    floor z*_p needs a total noise std ``z*_p sensitivity_p``.
    """
    from cosim.scenario import scenario_num_params
    from cosim.scenario.derived import uplink_phase_values

    if projection.epsilon is None or scenario.privacy.target_epsilon is None:
        raise ValueError("plan_artificial_noise needs a projection and privacy.target_epsilon")
    z = projection.noise_multipliers
    if not all(value > 0.0 for value in z.values()):
        return math.inf
    if floor is None:
        floor = plan_noise_floor(scenario, uplink_phase_values(scenario, scenario_num_params(scenario)))
    sigma2 = scenario.power.noise_power_w
    return max(0.0, max(sigma2 * ((floor[name] / z[name]) ** 2 - 1.0) for name in z))


def unbounded_reason(scenario) -> str | None:
    """Why no noise can bound a device's contribution (None if some bound holds): a control
    that sends nothing over the air (``ideal``), or one without a budget (``full_inversion``)
    unless ``privacy.clip_norm`` bounds it, as its registry entry says."""
    control = scenario.power.control
    if not over_the_air(control):
        return (f"power.control = {control!r} sends no signal over the air: the BS gets the exact "
                "sum, without noise")
    if not budgeted(control) and scenario.privacy.clip_norm is None:
        return (f"power.control = {control!r} has no power budget to bound a device's signal "
                "(and privacy.clip_norm is not set)")
    return None


def check_target(scenario, num_params: int, projection: Projection | None = None) -> None:
    """Raise ValueError (``privacy.target_epsilon: ...``) when no artificial noise can meet
    ``privacy.target_epsilon`` (:func:`unbounded_reason`); nothing without ``[privacy]``,
    without a target, or when noise can (the uplink then adds the planned noise,
    :func:`plan_noise_floor`, so the run ends at or below its target)."""
    config = scenario.privacy
    if config is None or config.target_epsilon is None:
        return
    why = unbounded_reason(scenario)
    if why is not None:
        raise ValueError(
            f"privacy.target_epsilon: = {config.target_epsilon:g} cannot be met: {why}, so no "
            "artificial noise bounds epsilon; use power.control = \"optimal\" or "
            "\"truncated_inversion\", set privacy.clip_norm, or remove the target")


def plan_line(scenario, projection: Projection | None, floor: dict[str, float]) -> str:
    """The ``cosim validate`` line of a target's plan: the noise floor of every phase and
    the artificial noise a round like the projection's gets."""
    config = scenario.privacy
    z = ", ".join(f"z_{name} >= {value:.4g}" for name, value in floor.items())
    if scales_for_privacy(scenario.power.control):
        line = (f"  privacy   target epsilon = {config.target_epsilon:g} at delta = {config.delta:g} "
                f"after {scenario.rounds} rounds: the devices scale their transmit amplitude down "
                f"in any phase whose worst device falls below its floor ({z})")
        if projection is not None and projection.epsilon is not None:
            scale = min(min(1.0, projection.noise_multipliers[name] / floor[name]) for name in floor)
            line += ("; none in a round like the projection's" if scale == 1.0 else
                     f"; to {20 * math.log10(scale):.2f} dB (s = {scale:.4g}) in a round like the "
                     "projection's")
        return line
    line = (f"  privacy   target epsilon = {config.target_epsilon:g} at delta = {config.delta:g} "
            f"after {scenario.rounds} rounds: the uplink adds artificial noise in any phase whose "
            f"worst device falls below its floor ({z})")
    if projection is not None and projection.epsilon is not None:
        noise_w = plan_artificial_noise(scenario, projection, floor)
        line += ("; none in a round like the projection's" if noise_w == 0.0 else
                 f"; {10 * math.log10(noise_w * 1e3):.2f} dBm per subcarrier at the receiver in "
                 "a round like the projection's")
    return line


def refuse_over_target(scenario, source: str | None = None) -> Projection | None:
    """:func:`check_target` at the start of a run or ``cosim validate``: a
    :class:`cosim.scenario.ScenarioError` (exit status 2 at the command line) with the one
    ``privacy.target_epsilon: ...`` line when no noise can meet the target; the
    projection otherwise (None without ``[privacy]``)."""
    if scenario.privacy is None:
        return None
    from cosim.scenario import ScenarioError, scenario_num_params

    num_params = scenario_num_params(scenario)
    projection = project(scenario, num_params)
    try:
        check_target(scenario, num_params, projection)
    except ValueError as error:
        raise ScenarioError([str(error)], source if source is not None else repr(scenario.name)
                            ) from None
    return projection
