"""The health summary (cosim/health.py): every flag raised by a trace built to raise it, and
not by one built just short of it; written with the project's TraceWriter (no TensorFlow)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from cosim import api
from cosim.health import (
    DOCS,
    LOSS_RISING_EVALUATIONS,
    health,
    health_lines,
    health_section,
)
from cosim.trace import TraceWriter

ROUNDS, DEVICES, NUM_PARAMS, CLASSES = 10, 4, 100, 10
ROOT = Path(__file__).resolve().parents[2]


def clean_columns() -> dict:
    """A healthy run: small NMSE, budget kept, a posterior std that moves, a falling loss,
    mild clipping, no participation columns."""
    t = np.arange(ROUNDS, dtype=np.float64)
    evaluated = t % 2 == 1
    noise = np.full(ROUNDS, 1e-6)
    error = np.full(ROUNDS, 1e-3)
    return {
        "rounds": {
            "train_loss": 2.0 * 0.9 ** t,
            "test_accuracy": np.where(evaluated, 0.5 + 0.03 * t, np.nan),
            "model_finite": np.ones(ROUNDS),
            "nonfinite_update_entries": np.zeros(ROUNDS),
            "aggregate_nmse_rho": np.full(ROUNDS, 0.05),
            "aggregate_nmse_nu": np.full(ROUNDS, 0.2),
            "aggregate_error_rho": error, "noise_power_rho": noise,
            "aggregate_error_nu": error, "noise_power_nu": noise,
            "power_over_budget_rho": np.zeros(ROUNDS),
            "power_over_budget_nu": np.zeros(ROUNDS),
            "posterior_std_p05": 0.010 * (1 + 0.01 * t),
            "posterior_std_p50": 0.020 * (1 + 0.01 * t),
            "posterior_std_p95": 0.030 * (1 + 0.01 * t),
        },
        "per_device": {
            "local_distortion_rho": np.tile([1.0, 2.0, 5.0, 3.0], (ROUNDS, 1)),
            "clipped_fraction_rho": np.tile([0.0, 0.1, 0.3, 0.2], (ROUNDS, 1)),
        },
    }


def write(path: Path, columns: dict, extra: str = "") -> Path:
    scenario = f'name = "h"\nseed = 1\nrounds = {ROUNDS}\n{extra}'
    devices = {"distance_m": np.array([20.0, 50.0, 90.0, 70.0]),
               "label_hist": np.ones((DEVICES, CLASSES), np.int64)}  # chance: 1 / CLASSES
    with TraceWriter.create(path, scenario, seed=1, name="h", devices=devices,
                            num_params=NUM_PARAMS, algorithm="bayes_aircomp") as writer:
        for t in range(ROUNDS):
            writer.append_round({k: float(v[t]) for k, v in columns["rounds"].items()})
            for name, values in columns["per_device"].items():
                writer.append_per_device(name, np.asarray(values[t], np.float64))
            writer.commit()
    return path


def _set(columns: dict, group: str, name: str, values) -> None:
    columns[group][name] = np.asarray(values, np.float64)


def _loss_at_evaluations(columns: dict, rises: list[float]) -> None:
    """train_loss falling, then at the last len(rises) evaluated rounds multiplied by rises."""
    loss = columns["rounds"]["train_loss"].copy()
    rows = np.flatnonzero(np.isfinite(columns["rounds"]["test_accuracy"]))
    start = rows[-len(rises) - 1]
    value = loss[start]
    for row, factor in zip(rows[-len(rises):], rises):
        value *= factor
        loss[row] = value
    columns["rounds"]["train_loss"] = loss


def _participation(codes_row: list[int], discarded_round: int | None = None):
    def change(columns: dict) -> None:
        codes = np.tile(np.asarray(codes_row, np.float64), (ROUNDS, 1))
        columns["per_device"]["participated"] = codes
        discarded = np.zeros(ROUNDS)
        if discarded_round is not None:
            discarded[discarded_round] = 1.0
        columns["rounds"]["round_discarded"] = discarded
    return change


def _privacy_clipped(devices: int, rounds: int = ROUNDS):
    """The clip norm scaled down ``devices`` of the 4 senders in the first ``rounds``
    rounds (none in the others), with the epsilon a [privacy] run writes."""
    def change(columns: dict) -> None:
        columns["rounds"]["privacy_epsilon"] = np.linspace(0.5, 5.0, ROUNDS)
        columns["rounds"]["privacy_clipped_devices_rho"] = np.where(
            np.arange(ROUNDS) < rounds, float(devices), 0.0)
    return change


def _frozen(relative: float):
    def change(columns: dict) -> None:
        t = np.arange(ROUNDS)
        for name, base in (("p05", 0.01), ("p50", 0.02), ("p95", 0.03)):
            _set(columns, "rounds", f"posterior_std_{name}", base * (1 + relative * t / (ROUNDS - 1)))
    return change


def _clipped(fraction: float):
    def change(columns: dict) -> None:
        _set(columns, "per_device", "clipped_fraction_rho",
             np.tile([0.0, 0.1, fraction, 0.2], (ROUNDS, 1)))
    return change


def _over_budget(devices: float):
    def change(columns: dict) -> None:
        values = np.zeros(ROUNDS)
        values[4] = devices
        _set(columns, "rounds", "power_over_budget_nu", values)
    return change


def _nmse(value: float):
    def change(columns: dict) -> None:
        _set(columns, "rounds", "aggregate_nmse_nu", np.full(ROUNDS, value))
    return change


def _model_finite_zero(columns: dict) -> None:
    values = np.ones(ROUNDS)
    values[-1] = 0.0
    _set(columns, "rounds", "model_finite", values)


def _loss_times(factor: float):
    def change(columns: dict) -> None:
        loss = columns["rounds"]["train_loss"].copy()
        loss[6] = loss[0] * factor
        columns["rounds"]["train_loss"] = loss
    return change


def _accuracy_at_evaluations(values: list[float]):
    """test_accuracy set to ``values`` at the evaluated rounds (every other one)."""
    def change(columns: dict) -> None:
        accuracy = columns["rounds"]["test_accuracy"].copy()
        accuracy[np.isfinite(accuracy)] = values
        columns["rounds"]["test_accuracy"] = accuracy
    return change


def _aged(median: float):
    """Devices that move: half the device-rounds at ``median``'s correlation and below, half
    above (NaN for a device that did not send: left out)."""
    def change(columns: dict) -> None:
        row = [median - 0.3, median, median + 0.05, np.nan]
        _set(columns, "per_device", "aging_correlation_nu", np.tile(row, (ROUNDS, 1)))
        _set(columns, "rounds", "aging_outage_devices_nu", np.ones(ROUNDS))
    return change


RISE = [1.05] * (LOSS_RISING_EVALUATIONS + 1)  # more rises than needed, +21.6 % in all
SMALL_RISE = [1.02] * (LOSS_RISING_EVALUATIONS + 1)  # as many rises, +8.2 % in all: noise
SHORT_RISE = [1.5] * (LOSS_RISING_EVALUATIONS - 1)  # steep but one rise too few

CASES = {
    # flag: (a change that must raise it, changes that must not)
    "noise_dominated": (_nmse(7.0), [_nmse(0.99)]),
    "over_power_budget": (_over_budget(2.0), [_over_budget(0.0)]),
    "posterior_frozen": (_frozen(5e-4), [_frozen(2e-3)]),
    "device_clipped": (_clipped(0.8), [_clipped(0.49)]),
    "diverged": (_model_finite_zero, [_loss_times(900.0)]),
    "loss_rising": (lambda c: _loss_at_evaluations(c, RISE),
                    [lambda c: _loss_at_evaluations(c, SMALL_RISE),
                     lambda c: _loss_at_evaluations(c, SHORT_RISE)]),
    # chance = 0.1: at most 0.15 at the end after at least 0.2; not 0.16 at the end, nor a
    # run that never learned (best 0.19)
    "at_chance": (_accuracy_at_evaluations([0.3, 0.6, 0.7, 0.4, 0.15]),
                  [_accuracy_at_evaluations([0.1, 0.15, 0.2, 0.16, 0.16]),
                   _accuracy_at_evaluations([0.1, 0.19, 0.12, 0.11, 0.1])]),
    # 0.15 below the best at the end (not at chance, which names it instead); not 0.09
    "fell_from_best": (_accuracy_at_evaluations([0.3, 0.6, 0.7, 0.65, 0.55]),
                       [_accuracy_at_evaluations([0.3, 0.6, 0.7, 0.65, 0.61])]),
    "dropouts": (_participation([1, 2, 1, 1]), [_participation([1, 3, 4, 0])]),
    "rounds_discarded": (_participation([1, 1, 1, 1], discarded_round=3),
                         [_participation([1, 1, 1, 1])]),
    # over half the senders (3 of 4) in over half the rounds (6 of 10); not 2 of 4, nor 5 rounds
    "privacy_clipped": (_privacy_clipped(3, rounds=6),
                        [_privacy_clipped(2), _privacy_clipped(4, rounds=5)]),
    # the median device-round at 0.89 (below 0.9), not at 0.9
    "csi_aged": (_aged(0.89), [_aged(0.9)]),
}


def _names(report: dict) -> set[str]:
    return {flag["name"] for flag in report["flags"]}


def test_every_flag_has_a_case():
    assert set(CASES) == set(DOCS)


def test_a_healthy_trace_raises_no_flag(tmp_path):
    report = health(write(tmp_path / "clean.h5", clean_columns()))
    assert report["flags"] == []
    assert report["nmse"]["rho"] == {"median": 0.05, "rounds": ROUNDS, "noise_dominated": False,
                                     "receiver_noise": True, "noise_share": pytest.approx(0.1)}
    assert report["posterior_std"]["moved"] is True
    assert report["posterior_std"]["first"] == {"p05": 0.01, "p50": 0.02, "p95": 0.03}
    assert report["worst_device"]["device"] == 2 and report["worst_device"]["distance_m"] == 90.0
    assert report["worst_device"]["mean_distortion"] == 5.0
    assert report["divergence"]["diverged_round"] is None
    assert report["participation"] is None
    assert health_lines(report)[-1] == "flags    none"
    json.dumps(report)  # a plain dict


@pytest.mark.parametrize("flag", sorted(CASES))
def test_flag_raised(tmp_path, flag):
    columns = clean_columns()
    CASES[flag][0](columns)
    report = health(write(tmp_path / "t.h5", columns))
    assert _names(report) == {flag}
    (raised,) = report["flags"]
    assert raised["docs"] == DOCS[flag]
    assert any(line.startswith(f"flag     {flag}: ") and DOCS[flag] in line
               for line in health_lines(report))
    json.dumps(report)


@pytest.mark.parametrize("flag", sorted(CASES))
def test_flag_not_raised_short_of_its_threshold(tmp_path, flag):
    for index, change in enumerate(CASES[flag][1]):
        columns = clean_columns()
        change(columns)
        assert _names(health(write(tmp_path / f"t{index}.h5", columns))) == set(), index


def test_a_model_at_chance_is_named_with_its_last_and_best_evaluations(tmp_path):
    """FedSMOO at l = 2 (docs/reproduction.md) ended two runs at 0.098 and 0.106 with its
    loss under the divergence stop; the flag says where it ended and what it had reached."""
    columns = clean_columns()
    _accuracy_at_evaluations([0.3, 0.6, 0.7, 0.4, 0.098])(columns)
    report = health(write(tmp_path / "t.h5", columns))
    assert report["chance"] == {"chance": 0.1, "last_round": 9, "last_accuracy": 0.098,
                                "best_round": 5, "best_accuracy": 0.7, "at_chance": True,
                                "fell_from_best": False}
    (flag,) = report["flags"]
    assert flag["message"] == ("the model predicts at chance: test accuracy 0.098 at round 9 "
                               "against 1/C = 0.1, after 0.7 at round 5")
    assert report["divergence"]["diverged_round"] is None
    clean = health(write(tmp_path / "clean.h5", clean_columns()))["chance"]
    assert clean["at_chance"] is False and clean["best_accuracy"] == pytest.approx(0.77)


def test_what_the_flags_report(tmp_path):
    columns = clean_columns()
    _nmse(7.0)(columns)
    _frozen(5e-4)(columns)
    _loss_at_evaluations(columns, RISE)
    _participation([1, 2, 3, 4])(columns)
    report = health(write(tmp_path / "t.h5", columns))
    assert report["nmse"]["nu"]["median"] == 7.0 and report["nmse"]["nu"]["noise_dominated"]
    assert report["posterior_std"]["relative_change"]["p50"] == pytest.approx(5e-4)
    rows = [1, 3, 5, 7, 9]  # the evaluated rounds; the rise starts at the first
    assert report["divergence"]["loss_rising_rounds"] == [rows[0], rows[-1]]
    assert report["divergence"]["loss_rising_relative"] == pytest.approx(1.05 ** 4 - 1)
    assert report["divergence"]["loss_rising_at_end"] is True
    assert report["participation"] == {
        "scheduled_device_rounds": 4 * ROUNDS, "sent_device_rounds": ROUNDS,
        "dropped_device_rounds": ROUNDS, "straggler_silent_device_rounds": ROUNDS,
        "straggler_fewer_steps_device_rounds": ROUNDS, "dropout_fraction": 0.25,
        "rounds_discarded": 0}
    lines = health_lines(report)
    assert "did not move" in lines[2] and "0.01/0.02/0.03 (round 0)" in lines[2]
    assert lines[-4].startswith("flag     noise_dominated: ")


def test_a_nan_loss_in_a_discarded_round_is_not_divergence(tmp_path):
    columns = clean_columns()
    _participation([1, 1, 1, 1], discarded_round=2)(columns)
    loss = columns["rounds"]["train_loss"].copy()
    loss[2] = np.nan
    columns["rounds"]["train_loss"] = loss
    assert _names(health(write(tmp_path / "t.h5", columns))) == {"rounds_discarded"}
    loss[4] = np.nan  # a round that was not discarded
    report = health(write(tmp_path / "u.h5", columns))
    assert report["divergence"]["diverged_round"] == 4


def _slug(heading: str) -> str:
    """The anchor a Markdown heading gets on GitHub."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


@pytest.mark.parametrize("flag", sorted(DOCS))
def test_every_flag_names_a_docs_section_that_exists(flag):
    file, anchor = DOCS[flag].split("#")
    headings = [line.lstrip("#").strip() for line in (ROOT / file).read_text().splitlines()
                if line.startswith("#")]
    assert anchor in {_slug(h) for h in headings}, (file, anchor)


def test_api_and_inspect_give_the_same_summary(tmp_path):
    path = write(tmp_path / "t.h5", clean_columns())
    assert api.health(path) == health(path)
    section = health_section(path)
    assert section.startswith("\n\n  health (docs/health.md)\n")  # a blank line above it
    assert section.splitlines()[3:] == [f"    {line}" for line in health_lines(health(path))]


@pytest.mark.parametrize("change, reason", [
    (_loss_times(1001.0), "training loss above 1000 times round 0's"),
    (lambda c: _set(c, "rounds", "nonfinite_update_entries", [0] * 6 + [3] + [0] * 3),
     "non-finite entries in the devices' updates"),
    (lambda c: _set(c, "rounds", "train_loss", [*c["rounds"]["train_loss"][:6], np.inf, 1, 1, 1]),
     "training loss non-finite"),
])
def test_each_divergence_check_names_round_and_reason(tmp_path, change, reason):
    columns = clean_columns()
    change(columns)
    report = health(write(tmp_path / "t.h5", columns))
    assert report["divergence"]["diverged_round"] == 6
    assert report["divergence"]["reasons"] == [reason]
    assert "diverged" in _names(report)


def test_a_vote_phase_reports_its_error_rate_and_no_nmse(tmp_path):
    """A phase of a sign-carrying scheme (it writes ``vote_error_rate_<phase>``) is judged
    by its vote error and tie rates; its NMSE against the mean sign (4 here) raises no
    noise_dominated flag."""
    columns = clean_columns()
    _set(columns, "rounds", "aggregate_nmse_rho", np.full(ROUNDS, 4.0))
    _set(columns, "rounds", "vote_error_rate_rho", np.linspace(0.1, 0.3, ROUNDS))
    _set(columns, "rounds", "vote_tie_rate_rho", np.full(ROUNDS, 0.125))
    report = health(write(tmp_path / "vote.h5", columns))
    assert "rho" not in report["nmse"] and "nu" in report["nmse"]
    assert report["vote"] == {"rho": {"median_error_rate": pytest.approx(0.2), "rounds": ROUNDS,
                                      "median_tie_rate": 0.125}}
    assert report["flags"] == []
    assert "air      median vote error rate: rho 0.2 (12 % of the entries tie)" in health_lines(report)


def test_a_digital_phase_is_never_noise_dominated(tmp_path):
    """A phase without receiver noise (no ``noise_power_<phase>``: the digital scheme, whose
    error is its quantization and outage) reports its NMSE but raises no noise_dominated
    flag, however large, and the summary line names what its error is."""
    columns = clean_columns()
    for phase in ("rho", "nu"):
        del columns["rounds"][f"noise_power_{phase}"]
        _set(columns, "rounds", f"aggregate_nmse_{phase}", np.full(ROUNDS, 3.0))
    report = health(write(tmp_path / "digital.h5", columns))
    assert report["nmse"]["rho"]["median"] == 3.0 and not report["nmse"]["rho"]["noise_dominated"]
    assert report["flags"] == []
    assert ("air      median NMSE of the estimate: nu 3, rho 3: quantization and outage "
            "(no receiver noise in this scheme)") in health_lines(report)


def test_the_privacy_reached_is_a_line_against_the_target(tmp_path):
    """With privacy_epsilon the summary states the epsilon of the last round at the
    scenario's delta against its target (met or above it), or says there is none; the
    senders are the devices that sent (participated codes 1 and 4)."""
    columns = clean_columns()
    _privacy_clipped(3, rounds=6)(columns)
    report = health(write(tmp_path / "p.h5", columns,
                          "[privacy]\ndelta = 1e-5\ntarget_epsilon = 4.0\n"))
    assert report["privacy"] == {"epsilon": 5.0, "delta": 1e-5, "target_epsilon": 4.0,
                                 "target_met": False, "clipped": {"rho": {
                                     "rounds": ROUNDS, "rounds_most_clipped": 6,
                                     "median_share": 0.75}}}
    lines = health_lines(report)
    assert "privacy  epsilon 5 at delta 1e-05 after 10 round(s) (target 4: above it)" in lines
    assert any(line.startswith("flag     privacy_clipped: privacy.clip_norm scaled down over 50 % "
                               "of the senders in most rounds: rho in 6 of 10 rounds (median 75 % "
                               "of the senders)") for line in lines)
    met = health(write(tmp_path / "q.h5", columns, "[privacy]\ndelta = 1e-5\ntarget_epsilon = 8.0\n"))
    assert "privacy  epsilon 5 at delta 1e-05 after 10 round(s) (target 8: met)" \
        in health_lines(met)
    _participation([1, 2, 4, 1])(columns)  # one dropped: 3 senders, all 3 clipped in 6 rounds
    report = health(write(tmp_path / "r.h5", columns))
    assert report["privacy"]["clipped"]["rho"]["median_share"] == 1.0
    assert "privacy  epsilon 5 after 10 round(s) (no target)" in health_lines(report)


def test_a_training_loss_nan_in_every_round_is_divergence(tmp_path):
    columns = clean_columns()
    for name in list(columns["rounds"]):  # every float column NaN, as a hostile copy had it
        columns["rounds"][name] = np.full(ROUNDS, np.nan)
    columns["rounds"]["train_loss_rho"] = np.full(ROUNDS, np.nan)
    report = health(write(tmp_path / "t.h5", columns))
    assert report["divergence"]["diverged_round"] == 0
    assert report["divergence"]["reasons"] == ["training loss non-finite"]
    assert "diverged" in _names(report)
    del columns["rounds"]["train_loss_rho"]  # an algorithm that reports no loss: by design
    assert health(write(tmp_path / "u.h5", columns))["divergence"]["diverged_round"] is None


def test_inspect_of_huge_values_prints_no_numeric_warning(tmp_path, capsys):
    import warnings

    from cosim.cli import main
    from cosim.trace.values import column_problem

    columns = clean_columns()
    columns["rounds"]["wall_s"] = np.ones(ROUNDS)
    for group, shape in (("rounds", (ROUNDS,)), ("per_device", (ROUNDS, DEVICES))):
        for name in list(columns[group]):  # 1e308 wherever a run may store it (no count)
            huge = np.full(shape, 1e308)
            if column_problem(name if group == "rounds" else f"{group}/{name}", huge) is None:
                columns[group][name] = huge
    path = write(tmp_path / "t.h5", columns)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert main(["inspect", str(path)]) == 0
    assert not caught, [str(w.message) for w in caught]
    err = capsys.readouterr().err
    assert "Warning" not in err, err
