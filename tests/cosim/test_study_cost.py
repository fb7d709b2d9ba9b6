"""cosim/study/cost.py: the measured cost table scaled to a run and a study, printed by
`cosim validate` and `cosim study run` before anything runs."""

from __future__ import annotations

import math

import pytest

from cosim.cli import main
from cosim.scenario import load_scenario, scenario_num_params
from cosim.study import load_study
from cosim.study.cost import run_cost, study_cost_lines
from cosim.study.cost_table import COST_TABLE


def _paper(*items: str):
    return load_scenario("paper_mnist", items)


def test_the_table_holds_every_algorithm_and_both_estimators():
    rounds = COST_TABLE["round_core_s"]
    assert set(rounds["bayes_aircomp"]) == {"reparameterization", "local_reparameterization"}
    for name in ("fedavg", "fedprox", "scaffold", "fedsmoo", "fedgmt", "signsgd"):
        assert rounds[name]["any"] > 0 and COST_TABLE["eval_core_s"][name] >= 0
    assert COST_TABLE["reference"]["num_params"] == scenario_num_params(_paper())


def test_at_the_reference_size_the_estimate_is_the_table():
    scenario = _paper('algorithm.estimator="local_reparameterization"', "rounds=10", "eval.every=5")
    cost = run_cost(scenario)
    table = COST_TABLE["round_core_s"]["bayes_aircomp"]["local_reparameterization"]
    assert cost.known and cost.round_core_s == pytest.approx(table)
    assert (cost.rounds, cost.evaluations) == (10, 2)
    fixed = COST_TABLE.get("run_fixed_core_s", {}).get("bayes_aircomp", {}).get(
        "local_reparameterization", 0.0)
    assert cost.fixed_core_s == fixed
    assert cost.total_core_s == pytest.approx(
        fixed + 10 * table + 2 * COST_TABLE["eval_core_s"]["bayes_aircomp"])


def test_more_data_per_device_costs_more():
    table = COST_TABLE["round_core_s_per_sample"]["bayes_aircomp"]["reparameterization"]
    base = run_cost(_paper()).round_core_s
    assert run_cost(_paper("data.mean_samples_per_device=50")).round_core_s == pytest.approx(
        base + 40 * table)


@pytest.mark.parametrize(("items", "factor"), [
    (("cell.num_devices=50",), 0.5),
    (("algorithm.local_steps=6",), 2.0),
    (("algorithm.mc_samples=10",), 2.0),
])
def test_the_round_scales_with_k_e_and_m(items, factor):
    base = run_cost(_paper()).round_core_s
    assert run_cost(_paper(*items)).round_core_s == pytest.approx(factor * base)


def test_only_the_cohort_trains_and_the_maxmin_solver_adds_its_time():
    base = run_cost(_paper()).round_core_s
    assert run_cost(_paper("participation.fraction=0.3")).round_core_s == pytest.approx(0.3 * base)
    threshold = ('participation.scheduling="gain_threshold"', "participation.gain_threshold_db=-90")
    assert run_cost(_paper(*threshold)).round_core_s == pytest.approx(base)  # unknown: all
    assert run_cost(_paper("bs.num_antennas=8")).round_core_s == pytest.approx(base)  # centroid
    maxmin = run_cost(_paper("bs.num_antennas=8", 'bs.combiner="maxmin"')).round_core_s
    assert maxmin == pytest.approx(base + 22.0)  # K = 100, F = 1024 as measured


def test_a_scheme_other_than_analog_adds_its_phy_per_phase_and_sender():
    """The table was measured on the analog uplink; the digital scheme adds its measured
    seconds per phase (the proposed method sends two), scaled by the senders."""
    from phy.parameters import UPLINK_SCHEMES

    base = run_cost(_paper()).round_core_s
    digital = run_cost(_paper('uplink.scheme="digital_ofdma"')).round_core_s
    assert digital == pytest.approx(base + 2 * UPLINK_SCHEMES["digital_ofdma"].parameters.phase_seconds)
    half = run_cost(_paper('uplink.scheme="digital_ofdma"', "participation.fraction=0.5")).round_core_s
    assert half == pytest.approx(0.5 * base + UPLINK_SCHEMES["digital_ofdma"].parameters.phase_seconds)
    sign = run_cost(_paper('algorithm.name="signsgd"')).round_core_s
    votes = run_cost(_paper('algorithm.name="signsgd"', 'uplink.scheme="noncoherent_mv"')).round_core_s
    assert votes == pytest.approx(sign + UPLINK_SCHEMES["noncoherent_mv"].parameters.phase_seconds)  # one phase


def test_a_baseline_ignores_m_and_the_estimator():
    fedavg = run_cost(_paper('algorithm.name="fedavg"')).round_core_s
    assert fedavg == pytest.approx(COST_TABLE["round_core_s"]["fedavg"]["any"])
    assert run_cost(_paper('algorithm.name="fedavg"', "algorithm.mc_samples=10")).round_core_s == fedavg


def test_an_unmeasured_architecture_is_named_not_guessed():
    scenario = load_scenario("paper_cifar100", ['model.architecture="cnn"'])
    assert not run_cost(scenario).known and math.isnan(run_cost(scenario).round_core_s)
    lines = study_cost_lines([scenario])
    assert any("not estimated" in line and "cnn" in line for line in lines), lines


def test_resnet56_is_priced_from_its_own_table():
    """paper_cifar100 at its table's reference (d, E, M, 100 samples) is the measured
    device-round times K = 100; the table's provenance is named beside the MLP's."""
    from cosim.study.cost_table import ARCHITECTURE_TABLES

    table = ARCHITECTURE_TABLES["resnet56"]
    scenario = load_scenario("paper_cifar100")
    cost = run_cost(scenario)
    per_device = table["round_core_s"]["bayes_aircomp"]["reparameterization"]
    assert cost.known and cost.round_core_s == pytest.approx(per_device * 100)
    assert cost.eval_core_s == pytest.approx(table["eval_core_s"]["bayes_aircomp"] * 10_000 / 200)
    lines = study_cost_lines([scenario])
    assert any(table["measured"] in line and "(resnet56)" in line for line in lines), lines


def test_a_studys_estimate_is_the_sum_of_its_runs():
    study = load_study("init_std_mnist")
    scenarios = [p.scenario for p in study.points()]
    total = sum(run_cost(s).total_core_s for s in scenarios)
    assert f"{total / 3600:.3g} core-hours for {len(scenarios)} run(s)" in study_cost_lines(scenarios)[0]


def test_validate_prints_the_estimate_for_a_scenario_and_a_study(capsys):
    assert main(["validate", "paper_mnist"]) == 0
    assert "estimated cost:" in capsys.readouterr().out
    assert main(["validate", "algs_mnist"]) == 0
    out = capsys.readouterr().out
    assert "30 runs (5 seeds x 6 axis combinations), every point valid" in out
    assert "core-hours for 30 run(s)" in out and "cost table:" in out


def test_an_algorithm_measured_alone_is_merged_with_its_provenance():
    """``benchmarks/study_cost.py --only NAME --write`` replaces that algorithm's figures
    and keeps the others; the study's cost lines name when and where it was measured; a
    table of another reference size is refused."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "study_cost.py"
    spec = importlib.util.spec_from_file_location("study_cost_harness", path)
    harness = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(harness)
    new = {"measured": "today, here", "reference": COST_TABLE["reference"],
           "round_core_s": {"fedavg": {"any": 9.0}}, "round_core_s_per_sample": {"fedavg": {"any": 0.1}},
           "run_fixed_core_s": {"fedavg": {"any": 3.0}}, "eval_core_s": {"fedavg": 0.5}}
    table = harness.merged(COST_TABLE, new)
    assert table["round_core_s"]["fedavg"] == {"any": 9.0} and table["eval_core_s"]["fedavg"] == 0.5
    assert table["round_core_s"]["fedprox"] == COST_TABLE["round_core_s"]["fedprox"]
    assert table["measured"] == COST_TABLE["measured"]
    assert table["measured_by_algorithm"]["fedavg"] == "today, here"
    with pytest.raises(ValueError, match="--only: the table's reference"):
        harness.merged(COST_TABLE, {**new, "reference": {**COST_TABLE["reference"], "num_devices": 7}})
    signs = _paper('algorithm.name="signsgd"')
    assert run_cost(signs).known
    later = COST_TABLE["measured_by_algorithm"]["signsgd"]
    assert any(later in line and "(signsgd)" in line for line in study_cost_lines([signs]))
