"""What a run or a study will cost, in core-hours, before it runs.

The estimate scales a measured cost table (:mod:`cosim.study.cost_table`, written by
``benchmarks/study_cost.py``: CPU seconds of one round and of one evaluation per
algorithm and estimator, on one core, at a reference size) to the scenario:

    round  = (c_round[algorithm, estimator] + c_sample[algorithm, estimator] * (n - n_ref))
             * (d / d_ref) * (K / K_ref) * (E / E_ref)
             [* (M / M_ref) for the proposed method: its M weight samples per step]
             * share        (the expected cohort, participation.fraction; the devices that
                             do not train cost nothing; 1 for gain_threshold, unknown before)
             + maxmin[N_r] * (K / 100) * (F / 1024)   (bs.combiner = "maxmin": its solver)
             + scheme[uplink.scheme] * (values sent per device / 466,698) * (K / 100) * share
                                                      (the scheme's phase_seconds: its PHY
                                                       over analog's; none declared: unknown)
    eval   = c_eval[algorithm] * (d / d_ref) * (N_test / N_test_ref)
             [* (S / S_ref) for the proposed method: its S predictive samples]
    run    = fixed[algorithm, estimator] + rounds * round + evaluations * eval
             (fixed: building the engine and round 0's tracing, as measured)
    study  = the sum over its runs (every axis value x seed)

``cosim validate`` prints it for a scenario or a study, ``cosim study run`` before it
starts. It is a linear model: it ignores the analog PHY's own scaling (about 2-7 % of a
paper-size round; another scheme's extra PHY is a term of its own), the spread of the
device sizes and fixed costs (start-up, Numba compilation once per machine), and it
knows only the architectures the table was measured on; ``n`` is
``data.mean_samples_per_device`` (the table holds the round at n_ref = 10 and its slope
to 50). Imports no TensorFlow.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cosim.scenario import Scenario, scenario_num_params, uplink_phase_values
from cosim.scenario.derived import devices_in_memory
from cosim.study.cost_table import ARCHITECTURE_TABLES, COST_TABLE
from learning.catalog import CATALOG  # no TensorFlow
from phy.parameters import COMBINERS, SCHEDULING  # pydantic only

__all__ = ["RunCost", "format_core_hours", "run_cost", "study_cost_lines"]

MAXMIN_ROUND_S = {2: 7.0, 4: 10.0, 8: 22.0, 16: 70.0}
"""Seconds per round of the max-min combiner's solver (``phy.combiner.maxmin``) at K = 100,
F = 1024, measured 2026-11-25 on this project's two-core machine (``docs/network.md``);
another N_r takes the nearest measured one's cost scaled by N_r."""


SCHEME_PHASE_VALUES = 466_698
"""The values per phase and device a scheme's cost term was measured at (paper_mnist's d).

A scheme's cost term is ``phase_seconds`` on its parameters
(:class:`phy.parameters.SchemeParameters`): the seconds one of its phases adds to the
round the table measured (analog's, 0), at K = 100 senders of this many values each: the
median round of ``benchmarks/round_time.py --set uplink.scheme=...`` on ``paper_mnist``
against analog's, measured 2026-11-28 at commit 23947c1 on this project's two-core
machine (``docs/schemes.md``: the proposed method's two phases for ``digital_ofdma`` (8
bits), signSGD's one for the votes); scaled by the values a device sends over all its
phases and by the senders. A scheme that declares none (None) is not estimated."""


def _scheme_phase_s(scenario: Scenario) -> float | None:
    """The scheme's cost term (``phase_seconds``), None where it declares none."""
    from phy.parameters import UPLINK_SCHEMES  # pydantic only

    return getattr(UPLINK_SCHEMES[scenario.uplink.scheme].parameters, "phase_seconds", None)


def _scheme_round_s(scenario: Scenario, num_params: int) -> float:
    per_phase = _scheme_phase_s(scenario)
    if not per_phase:
        return 0.0
    values = sum(uplink_phase_values(scenario, num_params).values())
    senders = scenario.cell.num_devices * _cohort_share(scenario)
    return per_phase * (values / SCHEME_PHASE_VALUES) * (senders / 100)


def _maxmin_round_s(scenario: Scenario) -> float:
    num_antennas = scenario.bs.num_antennas
    if not COMBINERS[scenario.bs.combiner].fact("iterative") or num_antennas == 1:
        return 0.0
    nearest = min(MAXMIN_ROUND_S, key=lambda n: abs(math.log(n / num_antennas)))
    per_round = MAXMIN_ROUND_S[nearest] * num_antennas / nearest
    return per_round * (scenario.cell.num_devices / 100) * (scenario.ofdm.num_subcarriers / 1024)


def _cohort_share(scenario: Scenario) -> float:
    config = scenario.participation
    if SCHEDULING[config.scheduling].fact("every_device"):
        return 1.0
    return config.cohort_size(scenario.cell.num_devices) / scenario.cell.num_devices


@dataclass(frozen=True)
class RunCost:
    """One run's estimate: core-seconds per round (without evaluation), per evaluation
    and once per run (``fixed_core_s``), the counts, and the total; ``known`` False when the table has no entry
    for the run's architecture or algorithm (then the seconds are NaN)."""

    round_core_s: float
    eval_core_s: float
    rounds: int
    evaluations: int
    known: bool
    fixed_core_s: float = 0.0

    @property
    def total_core_s(self) -> float:
        return (self.fixed_core_s + self.rounds * self.round_core_s
                + self.evaluations * self.eval_core_s)


def _evaluations(scenario: Scenario) -> int:
    every, rounds = scenario.eval.every, scenario.rounds
    # rounds t with (t + 1) % every == 0, and the last round when it is not one of them
    return rounds // every + (1 if rounds % every else 0)


def _test_size(scenario: Scenario, table: dict) -> int:
    sizes = table["test_set_sizes"]
    size = sizes.get(scenario.data.dataset, scenario.data.synthetic_test_size)
    return min(size, scenario.data.test_subset) if scenario.data.test_subset else size


def _streamed_training(scenario: Scenario, num_params: int) -> float:
    """The local training's factor when the round streams its devices
    (``runtime.devices_in_memory``): uplink phase i trains the training phases before it
    again per chunk, so P training phases that lead U uplink phases cost
    ``sum_i (min(i, P) + [i < P]) / P`` times theirs (the proposed method, P = U = 2: 1.5;
    SCAFFOLD and FedSMOO, P = 1, U = 2: 2); 1 for a round that holds every device."""
    if devices_in_memory(scenario, num_params) is None:
        return 1.0
    entry = CATALOG[scenario.algorithm.name]
    trains = entry.training_phases
    return sum(min(i, trains) + (i < trains) for i in range(len(entry.uplink))) / trains


def run_cost(scenario: Scenario, num_params: int | None = None) -> RunCost:
    """The estimate for one run of ``scenario`` (``num_params``: d, computed when None)."""
    architecture = scenario.model.architecture
    table = COST_TABLE if architecture in COST_TABLE["architectures"] else ARCHITECTURE_TABLES.get(
        architecture, COST_TABLE)
    ref = table["reference"]
    d = scenario_num_params(scenario) if num_params is None else int(num_params)
    algorithm = scenario.algorithm
    entry = table["round_core_s"].get(algorithm.name, {})
    monte_carlo = CATALOG[algorithm.name].monte_carlo  # its catalog entry says
    key = algorithm.estimator if monte_carlo else "any"
    per_round = entry.get(key)
    slope = table["round_core_s_per_sample"].get(algorithm.name, {}).get(key, 0.0)
    per_eval = table["eval_core_s"].get(algorithm.name)
    rounds, evaluations = scenario.rounds, _evaluations(scenario)
    if (architecture not in table["architectures"] or per_round is None
            or per_eval is None or _scheme_phase_s(scenario) is None):
        return RunCost(math.nan, math.nan, rounds, evaluations, known=False)
    scale = (d / ref["num_params"]) * (scenario.cell.num_devices / ref["num_devices"])
    samples = scenario.data.mean_samples_per_device - ref["mean_samples_per_device"]
    round_s = (max(per_round + slope * samples, 0.0) * scale
               * (algorithm.local_steps / ref["local_steps"]))
    eval_s = per_eval * (d / ref["num_params"]) * (_test_size(scenario, table) / ref["test_size"])
    if monte_carlo:
        round_s *= algorithm.mc_samples / ref["mc_samples"]
        eval_s *= scenario.eval.predictive_samples / ref["predictive_samples"]
    round_s = (round_s * _cohort_share(scenario) * _streamed_training(scenario, d)
               + _maxmin_round_s(scenario) + _scheme_round_s(scenario, d))
    fixed = table.get("run_fixed_core_s", {}).get(algorithm.name, {}).get(key, 0.0)
    return RunCost(round_s, eval_s, rounds, evaluations, known=True, fixed_core_s=fixed)


def format_core_hours(core_s: float) -> str:
    hours = core_s / 3600
    return f"{hours:.3g} core-hours" if hours >= 0.1 else f"{core_s / 60:.3g} core-minutes"


def study_cost_lines(scenarios: list[Scenario], cpus: float | None = None) -> list[str]:
    """The lines ``cosim validate`` and ``cosim study run`` print: the total estimate of
    the runs ``scenarios`` (those to run) and, with ``cpus``, the wall time on that many
    CPUs; the table's provenance; a line naming what the table cannot estimate."""
    costs = [run_cost(s) for s in scenarios]
    known = [c for c in costs if c.known]
    total = sum(c.total_core_s for c in known)
    lines = [f"estimated cost: {format_core_hours(total)} for {len(known)} run(s)"
             + (f", about {total / 3600 / cpus:.3g} h on {cpus:g} CPUs" if cpus else "")]
    if known:
        first = known[0]
        lines[0] += (f" (e.g. {first.round_core_s:.3g} core-s per round, "
                     f"{first.eval_core_s:.3g} per evaluation)")
    unknown = sorted({f"{s.algorithm.name} on {s.model.architecture}"
                      + ("" if _scheme_phase_s(s) is not None else f" with uplink.scheme = {s.uplink.scheme!r}")
                      for s, c in zip(scenarios, costs) if not c.known})
    if unknown:
        lines.append(f"  not estimated (no measured cost): {', '.join(unknown)}")
    measured = {COST_TABLE["measured"]: None}
    later = COST_TABLE.get("measured_by_algorithm", {})
    measured.update({f"{later[a]} ({a})": None
                     for a in sorted({s.algorithm.name for s in scenarios}) if a in later})
    measured.update({ARCHITECTURE_TABLES[a]["measured"] + f" ({a})": None
                     for a in sorted({s.model.architecture for s in scenarios})
                     if a in ARCHITECTURE_TABLES})
    lines += [f"  cost table: {m} (benchmarks/study_cost.py)" for m in measured]
    return lines
