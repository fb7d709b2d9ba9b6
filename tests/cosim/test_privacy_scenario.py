"""[privacy]: cosim validate's projection in closed form, the plan of a target, and the
refusal of a target no noise can meet (exit status 2, one line naming
privacy.target_epsilon, nothing written)."""

from __future__ import annotations

import math

import pytest
from tiny_scenario import write_tiny

from cosim import privacy
from cosim.cli import main
from cosim.scenario import ScenarioError, load_scenario, scenario_num_params
from cosim.scenario.derived import symbols_per_phase, uplink_phase_values

# the tiny scenario at a low power: a noise multiplier near 0.5, so epsilon is finite and small
LOW_POWER = ["power.tx_power_dbm=-60", "rounds=3", "privacy.delta=1e-5"]


def _sets(items):
    """``--set`` arguments for ``items``."""
    return [arg for item in items for arg in ("--set", item)]


def test_projection_is_the_closed_form_of_the_budget_bound(tmp_path):
    scenario = load_scenario(str(write_tiny(tmp_path)), LOW_POWER)
    d = scenario_num_params(scenario)
    projection = privacy.project(scenario, d)
    f = scenario.ofdm.num_subcarriers
    harmonic = sum(1.0 / k for k in range(1, f + 1))
    gain = scenario.cell.min_distance_m ** -scenario.channel.path_loss_exponent
    power = scenario.power
    expected = {}
    for name, values in uplink_phase_values(scenario, d).items():
        n = symbols_per_phase(values, f)
        expected[name] = math.sqrt(power.noise_power_w / 2) / math.sqrt(
            n * power.tx_power_w * gain * harmonic)
    assert projection.noise_multipliers == pytest.approx(expected, rel=1e-6)
    event = privacy.round_event(list(expected.values()))
    assert projection.epsilon == pytest.approx(
        privacy.projected_epsilon(event, scenario.rounds, 1e-5), rel=1e-5)


def test_validate_prints_the_projection(tmp_path, capsys):
    path = write_tiny(tmp_path)
    assert main(["validate", str(path), *_sets(LOW_POWER)]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("  privacy"))
    assert "projected epsilon = " in line and "after 3 rounds" in line


def test_a_target_no_noise_can_meet_is_refused(tmp_path, capsys):
    """Full inversion (no power budget) and ideal aggregation (no noise) cannot meet a
    target: cosim run refuses with one line naming privacy.target_epsilon, exit status 2,
    nothing written; a target below the projection under a budgeted control is planned,
    not refused, and cosim validate prints the plan."""
    path = write_tiny(tmp_path)
    sets = _sets([*LOW_POWER, "privacy.target_epsilon=8", "power.control=full_inversion",
                  f"trace.path='{tmp_path}/t.h5'"])
    assert main(["run", str(path), *sets]) == 2
    err = capsys.readouterr().err
    problem = [x for x in err.splitlines() if "privacy.target_epsilon" in x]
    assert len(problem) == 1 and "= 8 cannot be met: power.control = 'full_inversion'" in problem[0]
    assert not (tmp_path / "t.h5").exists()
    from cosim.run import run_scenario

    with pytest.raises(ScenarioError, match=r"privacy\.target_epsilon: = 8 cannot be met: power\.control = 'ideal'"):
        run_scenario(load_scenario(str(path), [*LOW_POWER, "privacy.target_epsilon=8",
                                               "power.control=ideal"]))
    scenario = load_scenario(str(path), LOW_POWER)
    epsilon = privacy.project(scenario, scenario_num_params(scenario)).epsilon
    assert main(["validate", str(path), *_sets([*LOW_POWER, f"privacy.target_epsilon={epsilon / 4}"])]) == 0
    lines = [x for x in capsys.readouterr().out.splitlines() if x.startswith("  privacy")]
    assert len(lines) == 2 and "projected epsilon" in lines[0]
    assert "the uplink adds artificial noise" in lines[1] and "dBm per subcarrier" in lines[1]
    # a clip norm bounds full inversion: planned, not refused; projected from the clip
    # norm's public delta_bar, not from the reported norms (they depend on the updates)
    items = [*LOW_POWER, "privacy.target_epsilon=8", "power.control=full_inversion",
             "privacy.clip_norm=1"]
    clipped = load_scenario(str(path), items)
    privacy.check_target(clipped, scenario_num_params(clipped))
    assert math.isfinite(privacy.project(clipped, scenario_num_params(clipped)).epsilon)
    reported = load_scenario(str(path), [*items, "privacy.delta_bar=reported"])
    assert privacy.project(reported, scenario_num_params(reported)).epsilon is None


def test_with_a_clip_norm_validate_plans_the_noise_the_run_adds(tmp_path, capsys):
    """With a clip norm (and its public delta_bar) the worst device's sensitivity is
    ``pi_max sqrt(gamma n)``, known before the run from the seed's dataset sizes: the
    artificial noise cosim validate plans is the noise round 0 adds (to float32's
    rounding of the run), and far below the budget bound's plan without the clip norm."""
    from cosim.run import run_scenario
    from cosim.trace import read_trace

    path = str(write_tiny(tmp_path, rounds=1, every=1))
    items = ["privacy.delta=1e-5", "privacy.target_epsilon=5", f"trace.path='{tmp_path}/c.h5'"]
    planned = {}
    for clip in ([], ["privacy.clip_norm=0.5"]):
        scenario = load_scenario(path, [*items, *clip])
        d = scenario_num_params(scenario)
        planned[bool(clip)] = privacy.plan_artificial_noise(scenario, privacy.project(scenario, d))
    assert 10 * math.log10(planned[False] / planned[True]) > 20.0
    assert main(["validate", path, *_sets([*items, "privacy.clip_norm=0.5"])]) == 0
    line = [x for x in capsys.readouterr().out.splitlines() if x.startswith("  privacy")][1]
    assert f"{10 * math.log10(planned[True] * 1e3):.2f} dBm per subcarrier" in line
    run_scenario(scenario, progress=False)
    columns = read_trace(tmp_path / "c.h5").rounds
    added = max(float(columns[f"artificial_noise_power_w_{name}"][0])
                for name in uplink_phase_values(scenario, d))
    assert added == pytest.approx(planned[True], rel=1e-4)


def test_unbounded_controls_project_infinity_and_bad_keys_are_named(tmp_path):
    path = str(write_tiny(tmp_path))
    scenario = load_scenario(path, [*LOW_POWER, "power.control=full_inversion"])
    assert math.isinf(privacy.project(scenario, scenario_num_params(scenario)).epsilon)
    with pytest.raises(ScenarioError, match=r"privacy\.subsampling"):
        load_scenario(path, ["privacy.subsampling=poisson"])
    with pytest.raises(ScenarioError, match=r"privacy\.delta"):
        load_scenario(path, ["privacy.delta=1.5"])
    sampled = load_scenario(path, [*LOW_POWER, "privacy.subsampling=poisson",
                                   "participation.fraction=0.5"])
    assert privacy.project(sampled, scenario_num_params(sampled)).sampling_probability == 0.5


def test_the_planned_noise_ends_within_one_percent_below_the_target(tmp_path):
    """The noise floor the library's calibration plans, in a run like the projection's,
    asks for the least artificial noise that puts it at or below its target and within
    1 % of it; the channel alone meeting it plans 0."""
    path = str(write_tiny(tmp_path))
    base = load_scenario(path, LOW_POWER)
    d = scenario_num_params(base)
    epsilon = privacy.project(base, d).epsilon
    target = 0.25 * epsilon
    scenario = load_scenario(path, [*LOW_POWER, f"privacy.target_epsilon={target}"])
    projection = privacy.project(scenario, d)
    noise_w = privacy.plan_artificial_noise(scenario, projection)
    sigma2 = scenario.power.noise_power_w
    assert noise_w > 0.0
    scale = math.sqrt((sigma2 + noise_w) / sigma2)
    planned = privacy.projected_epsilon(
        privacy.round_event([scale * z for z in projection.noise_multipliers.values()]),
        scenario.rounds, 1e-5, "pld", expected_epsilon=target)
    assert 0.99 * target <= planned <= target
    met = load_scenario(path, [*LOW_POWER, f"privacy.target_epsilon={2 * epsilon}"])
    assert privacy.plan_artificial_noise(met, privacy.project(met, d)) == 0.0
    privacy.check_target(scenario, d, projection)  # planned: not refused


def test_without_privacy_the_resolved_scenario_is_unchanged(tmp_path):
    """No [privacy]: the resolved scenario written into every trace has no such table (the
    trace of a run without it is byte for byte the one before the table existed; measured
    by hand on the tiny scenario's 59 datasets, 2026-11-27)."""
    scenario = load_scenario(str(write_tiny(tmp_path)))
    assert scenario.privacy is None and "[privacy]" not in scenario.to_toml()
    with_table = load_scenario(str(write_tiny(tmp_path)), ["privacy.delta=1e-6"])
    assert "[privacy]" in with_table.to_toml()


def test_a_study_validates_every_combinations_projection_and_none_is_no_target(tmp_path, capsys):
    """cosim validate on a study prints one privacy line per axis combination (no
    training); the axis value "none" of privacy.target_epsilon is no target."""
    tiny = write_tiny(tmp_path)
    study = tmp_path / "study.toml"
    study.write_text(f'scenario = "{tiny.as_posix()}"\nseeds = [1, 2]\n\n[set]\n'
                     '"privacy.delta" = 1e-5\n"power.tx_power_dbm" = -60.0\n\n[axes]\n'
                     '"privacy.target_epsilon" = ["none", 8.0]\n')
    assert main(["validate", str(study)]) == 0
    lines = [x for x in capsys.readouterr().out.splitlines() if x.startswith("  privacy")]
    assert len(lines) == 2
    assert "privacy.target_epsilon = none: projected epsilon = " in lines[0]
    assert "privacy.target_epsilon = 8.0: projected epsilon = " in lines[1]
    assert load_scenario(str(tiny), ['privacy.target_epsilon="none"']).privacy.target_epsilon is None


def test_privacy_scaling_and_device_noise_are_planned_or_refused(tmp_path, capsys):
    """cosim validate prints the privacy_scaling plan as a transmit scaling (no noise);
    privacy_scaling without a target, and the devices' noise with a multi-antenna BS, are
    refused naming their key."""
    path = str(write_tiny(tmp_path))
    sets = [*LOW_POWER, "privacy.target_epsilon=1", "power.control=privacy_scaling"]
    assert main(["validate", path, *_sets(sets)]) == 0
    line = [x for x in capsys.readouterr().out.splitlines() if x.startswith("  privacy")][1]
    assert "the devices scale their transmit amplitude down" in line and " dB (s = " in line and "; to -" in line
    with pytest.raises(ScenarioError, match=r"power\.control: = 'privacy_scaling' lowers"):
        load_scenario(path, [*LOW_POWER, "power.control=privacy_scaling"])
    with pytest.raises(ScenarioError, match=r"privacy\.noise_source: = \"devices\" is derived"):
        load_scenario(path, [*LOW_POWER, "privacy.noise_source=devices", "bs.num_antennas=2"])


def test_a_clip_norm_per_phase_names_each_phase_of_the_algorithm():
    """``privacy.clip_norm`` is one number or a table naming each phase the algorithm
    sends; anything else is refused naming the key and the value."""
    from cosim.scenario import ScenarioError, load_scenario

    base = ["privacy.delta=1e-5"]
    scenario = load_scenario(None, [*base, "privacy.clip_norm={rho = 4.0, nu = 0.5}"])
    assert scenario.privacy.clip_norm == {"rho": 4.0, "nu": 0.5}
    assert load_scenario(None, [*base, "privacy.clip_norm=0.5"]).privacy.clip_norm == 0.5
    refused = {
        "{rho = 4.0}": "privacy.clip_norm: = {'rho': 4.0} must name each phase algorithm.name = "
                       "'bayes_aircomp' sends ('rho', 'nu'), or be one number for all",
        "{rho = 4.0, nu = 0.0}": "privacy.clip_norm: must be a finite number > 0 or a table of "
                                 "them per phase (got {'rho': 4.0, 'nu': 0.0})",
        '"x"': "privacy.clip_norm: must be a finite number > 0 or a table of them per phase (got 'x')",
        "-1": "privacy.clip_norm: must be a finite number > 0 or a table of them per phase (got -1)",
    }
    for value, message in refused.items():
        with pytest.raises(ScenarioError) as caught:
            load_scenario(None, [*base, f"privacy.clip_norm={value}"])
        assert message in str(caught.value), str(caught.value)
    fedavg = ['algorithm.name="fedavg"', *base]
    assert load_scenario(None, [*fedavg, "privacy.clip_norm={delta = 1.0}"]).privacy.clip_norm == {"delta": 1.0}


def test_a_clip_norm_per_phase_is_set_key_by_key_as_a_study_writes_it(tmp_path):
    """A study's ``[set]`` takes dotted keys only, so ``"privacy.clip_norm.rho" = 3.5``
    sets one entry of the table (as ``--set privacy.clip_norm.rho=3.5`` does); onto one
    number it is refused naming the key."""
    from cosim.scenario import ScenarioError, load_scenario
    from cosim.study import load_study

    items = ["privacy.delta=1e-5", "privacy.clip_norm.rho=3.5", "privacy.clip_norm.nu=0.5"]
    assert load_scenario(None, items).privacy.clip_norm == {"rho": 3.5, "nu": 0.5}
    with pytest.raises(ScenarioError, match=r"privacy\.clip_norm: is a value, not a table"):
        load_scenario(None, ["privacy.clip_norm=0.5", "privacy.clip_norm.rho=3.5"])
    with pytest.raises(ScenarioError, match=r"privacy\.delta\.rho: unknown key"):
        load_scenario(None, ["privacy.delta.rho=1e-5"])  # a number-only key takes no entries
    study = tmp_path / "s.toml"
    study.write_text('scenario = "quickstart"\nseeds = [1]\n[set]\n"privacy.delta" = 1e-5\n'
                     '"privacy.clip_norm.rho" = 3.5\n"privacy.clip_norm.nu" = 0.5\n'
                     '[axes]\n"privacy.target_epsilon" = ["none", 10.0]\n')
    points = load_study(study).points()
    assert [p.scenario.privacy.clip_norm for p in points] == [{"rho": 3.5, "nu": 0.5}] * 2
