"""``[mobility]`` through a scenario: a tiny run of moving devices (analog, digital
OFDMA, one-bit), its columns in the trace against the timeline, a resumed run, and what the
scenario refuses."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
from scipy.special import j0
from test_trace_docs import DOC, _pattern, documented_tables
from tiny_scenario import write_tiny

from cosim.cli import main
from cosim.run import run_scenario
from cosim.scenario import load_scenario
from cosim.scenario.errors import ScenarioError
from cosim.world import _moving_of

STRAIGHT = ['mobility.model="straight"', "mobility.speed_mps=[1.0, 30.0]", "trace.per_device=true"]
C_MPS = 299_792_458.0


def _columns(path):
    with h5py.File(path, "r") as f:
        return ({k: v[()] for k, v in f["rounds"].items() if isinstance(v, h5py.Dataset)},
                {k: v[()] for k, v in f["rounds/per_device"].items()})


def test_moving_devices_follow_the_round_timeline(tmp_path):
    """The proposed method (two analog phases) with moving devices: round t + 1 starts
    where round t ends (computation + uplink + downlink seconds), every device moves by at
    most v times that and stays in the cell, the traced Doppler is v f_c / c, the aging
    correlation of a phase is J0(2 pi f_D N T_sym / 2); every column is documented. The
    same run stopped after round 0 and resumed gives the same trace."""
    overrides = [*STRAIGHT, "mobility.compute_seconds_per_round=0.25"]
    scenario = load_scenario(write_tiny(tmp_path, rounds=2, every=3, hidden=4), overrides)
    rounds, per_device = _columns(run_scenario(scenario, progress=False).trace_path)
    symbol_s = (64 + scenario.ofdm.cyclic_prefix_samples) / scenario.ofdm.bandwidth_hz
    np.testing.assert_allclose(rounds["round_seconds"], 0.25 + rounds["uplink_seconds"]
                               + rounds["downlink_symbols"] * symbol_s, rtol=1e-12)
    np.testing.assert_array_equal(rounds["round_start_s"][1:],
                                  rounds["round_start_s"][:-1] + rounds["round_seconds"][:-1])
    speed = per_device["speed_mps"][0]
    assert np.all((speed >= 1.0) & (speed <= 30.0))
    np.testing.assert_allclose(per_device["doppler_hz"][0], speed * 3.5e9 / C_MPS, rtol=1e-12)
    xy = np.stack([per_device["position_x_m"], per_device["position_y_m"]], -1)  # [T, K, 2]
    moved = np.linalg.norm(np.diff(xy, axis=0), axis=-1)
    assert np.all(moved <= speed * rounds["round_seconds"][:-1, None] * (1 + 1e-9)) and np.all(moved > 0)
    r = np.linalg.norm(xy, axis=-1)
    assert np.all((r >= 10.0 - 1e-9) & (r <= 100.0 + 1e-9))
    half_phase_s = 0.5 * rounds["uplink_symbols"][0] / 2 * symbol_s  # two phases of equal size
    np.testing.assert_allclose(per_device["aging_correlation_rho"][0],
                               j0(np.pi * 2 * per_device["doppler_hz"][0] * half_phase_s), rtol=1e-6)
    tables = documented_tables(DOC.read_text())
    for group, names in (("rounds", rounds), ("rounds/per_device", per_device)):
        for name in names:
            assert any(_pattern(row[0], ("rho", "nu")).fullmatch(name) for row in tables[group]), name

    (tmp_path / "r").mkdir()
    stopped = load_scenario(write_tiny(tmp_path / "r", rounds=1, every=3, hidden=4), overrides)
    run_scenario(stopped, progress=False)
    resumed = load_scenario(write_tiny(tmp_path / "r", rounds=2, every=3, hidden=4), overrides)
    again, again_per_device = _columns(run_scenario(resumed, progress=False, resume=True).trace_path)
    for name in ("round_start_s", "round_seconds", "aggregate_nmse_rho"):
        np.testing.assert_array_equal(again[name], rounds[name])
    np.testing.assert_array_equal(again_per_device["position_x_m"], per_device["position_x_m"])


@pytest.mark.parametrize("more", [['mobility.channel_within_phase="per_symbol"', "bs.num_antennas=2"],
                                  ['uplink.scheme="digital_ofdma"', 'algorithm.name="fedavg"']])
def test_a_3gpp_cells_devices_move_with_their_rays(tmp_path, more):
    """UMi in motion (phy/moving_tr38901.py): the analog phases symbol by symbol at two BS
    antennas, and digital OFDMA's coherence blocks; each device's rays turn as it moves
    from where they were drawn (traced_displacement_m), the rays' aging correlation is
    traced, and (digital) the estimates differ from a run at rest."""
    overrides = [*STRAIGHT, 'channel.model="umi"', "mobility.compute_seconds_per_round=0.5", *more]
    scenario = load_scenario(write_tiny(tmp_path, rounds=2, every=2, hidden=4), overrides)
    rounds, per_device = _columns(run_scenario(scenario, progress=False).trace_path)
    xy = np.stack([per_device["position_x_m"], per_device["position_y_m"]], -1)
    np.testing.assert_allclose(per_device["traced_displacement_m"][1], np.linalg.norm(xy[1] - xy[0], axis=-1),
                               rtol=1e-9, atol=1e-9)
    assert np.all(per_device["traced_displacement_m"][1] > 0)
    correlation = [per_device[name] for name in per_device if name.startswith("aging_correlation_")]
    assert correlation and all(np.all(np.abs(c[np.isfinite(c)]) <= 1.0) for c in correlation)
    if "bs.num_antennas=2" in more:
        return  # one run at rest suffices
    (tmp_path / "rest").mkdir()
    rest = load_scenario(write_tiny(tmp_path / "rest", rounds=2, every=2, hidden=4),
                         [*overrides, "mobility.speed_mps=0.0"])
    still, _ = _columns(run_scenario(rest, progress=False).trace_path)
    nmse = next(name for name in rounds if name.startswith("aggregate_nmse_"))
    assert not np.array_equal(still[nmse], rounds[nmse])


@pytest.mark.parametrize(("model", "channel", "speed"), [("straight", "iid_rayleigh", "[30.0, 40.0]"),
                                                         ("random_waypoint", "iid_rayleigh", "[30.0, 40.0]"),
                                                         ("straight", "tdl", "[30.0, 40.0]")])
def test_digital_devices_in_fast_motion_lose_updates_to_aging(tmp_path, model, channel, speed):
    """FedAvg over digital OFDMA at 30-40 m/s (straight lines, random waypoints; Sionna's
    TDL at each device's speed, two BS antennas): outage by aging is counted within the outage, the aging correlation
    traced per device is one of J0's values, and the devices move by at most v times the
    round."""
    overrides = [*STRAIGHT, 'uplink.scheme="digital_ofdma"', f"mobility.speed_mps={speed}",
                 f'mobility.model="{model}"', "mobility.compute_seconds_per_round=2.0",
                 f'channel.model="{channel}"', *(["bs.num_antennas=2"] if channel == "tdl" else [])]
    scenario = load_scenario(write_tiny(tmp_path, rounds=2, every=2, hidden=4, algorithm="fedavg",
                                        learning_rate=0.3), overrides)
    rounds, per_device = _columns(run_scenario(scenario, progress=False).trace_path)
    assert np.all(rounds["aging_outage_devices_delta"] <= rounds["outage_devices_delta"])
    correlation = per_device["aging_correlation_delta"]
    sent = np.isfinite(per_device["symbols_delta"])
    assert np.all((correlation[sent] > -0.41) & (correlation[sent] <= 1.0))
    xy = np.stack([per_device["position_x_m"], per_device["position_y_m"]], -1)
    moved = np.linalg.norm(xy[1] - xy[0], axis=-1)
    assert np.all(moved <= per_device["speed_mps"][0] * rounds["round_seconds"][0] * (1 + 1e-9))
    assert np.all(moved > 0) and np.all(np.linalg.norm(xy, axis=-1) <= 100.0 + 1e-9)


def test_static_mobility_builds_nothing_and_the_scenario_text_is_unchanged(tmp_path):
    """``[mobility] model = "static"`` draws nothing (no moving channel: the block fading of
    a run without the table); a run without ``[mobility]`` writes no such table."""
    path = write_tiny(tmp_path)
    plain = load_scenario(path)
    static = load_scenario(path, ['mobility.model="static"'])
    assert plain.mobility is None and "[mobility]" not in plain.to_toml()
    assert _moving_of(static, None) is None and _moving_of(plain, None) is None
    assert static.model_copy(update={"mobility": None}) == plain


@pytest.mark.parametrize(("overrides", "key"), [
    (['channel.model="umi"', 'ofdm.domain="time"'], "ofdm.domain"),
    (['channel.model="uma"', "channel.carrier_frequency_hz=2.0e9"], "mobility.carrier_frequency_hz"),
    (['channel.model="tdl"', "mobility.speed_mps=3.0", "channel.carrier_frequency_hz=2.0e9"],
     "mobility.carrier_frequency_hz"),
    (['ofdm.domain="time"', 'mobility.channel_within_phase="per_symbol"'], "mobility.channel_within_phase"),
    (['ofdm.domain="time"', "bs.num_antennas=2"], "bs.num_antennas"),
    (['ofdm.domain="time"', "sync.timing_offset_max_samples=2.0", 'sync.precompensate="timing"'],
     "sync.precompensate"),
    (["cell.min_distance_m=0.0"], "cell.min_distance_m"),
    (["mobility.speed_mps=[5.0, 1.0]"], "mobility.speed_mps"),
    (["mobility.speed_mps=-1.0"], "mobility.speed_mps"),
])
def test_what_mobility_does_not_support_is_one_line_naming_the_key(tmp_path, capsys, overrides, key):
    path = write_tiny(tmp_path)
    with pytest.raises(ScenarioError, match=key.replace(".", r"\.")):
        load_scenario(path, [*STRAIGHT, *overrides])
    sets = [arg for item in (*STRAIGHT, *overrides) for arg in ("--set", item)]
    assert main(["validate", str(path), *sets]) == 2
    err = capsys.readouterr().err
    assert key in err and "Traceback" not in err


def test_rate_adaptation_at_zero_speed_is_the_fixed_rate_plus_one_pilot(tmp_path):
    """Digital OFDMA with ``mobility.speed_mps = 0``: adapting the rate per coherence block
    (one block: nobody moves) gives every sender the fixed rate's slot plus its one pilot
    symbol, the same outage, and no device lost to aging."""
    common = [*STRAIGHT, 'uplink.scheme="digital_ofdma"', "mobility.speed_mps=0.0"]
    runs = {}
    for adaptation in ("slot", "coherence_block"):
        (tmp_path / adaptation).mkdir()
        path = write_tiny(tmp_path / adaptation, rounds=1, every=1, hidden=4, algorithm="fedavg")
        scenario = load_scenario(path, [*common, f'uplink.rate_adaptation="{adaptation}"'])
        runs[adaptation] = _columns(run_scenario(scenario, progress=False).trace_path)
    (fixed, fixed_per_device), (adapted, adapted_per_device) = runs["slot"], runs["coherence_block"]
    sent = np.isfinite(fixed_per_device["symbols_delta"])
    assert sent.any()
    np.testing.assert_array_equal(adapted_per_device["symbols_delta"][sent], fixed_per_device["symbols_delta"][sent] + 1)
    np.testing.assert_array_equal(adapted_per_device["outage_delta"], fixed_per_device["outage_delta"])
    assert adapted["uplink_symbols"][0] == fixed["uplink_symbols"][0] + 1
    assert adapted["aging_outage_devices_delta"][0] == 0


def test_a_bad_rate_adaptation_is_refused_naming_the_key_and_the_value(tmp_path):
    with pytest.raises(ScenarioError, match=r"uplink\.rate_adaptation.*per_symbol"):
        load_scenario(write_tiny(tmp_path), ['uplink.scheme="digital_ofdma"', 'uplink.rate_adaptation="per_symbol"'])


@pytest.mark.parametrize("speed", [0.0, 30.0])
def test_the_analog_phases_see_the_channel_symbol_by_symbol(tmp_path, monkeypatch, speed):
    """The proposed method's analog phases with moving devices and
    ``mobility.channel_within_phase = "per_symbol"``, against the same run with the channel
    of each phase's middle (the default): at rest the two are the same run bit for bit; at
    30 m/s every phase's estimate differs."""
    del monkeypatch
    traces = {}
    for per_symbol in (True, False):
        overrides = ['mobility.model="straight"', f"mobility.speed_mps={speed}",
                     f'mobility.channel_within_phase="{"per_symbol" if per_symbol else "phase_middle"}"']
        (tmp_path / str(per_symbol)).mkdir()
        scenario = load_scenario(write_tiny(tmp_path / str(per_symbol), rounds=2, every=3, hidden=4), overrides)
        traces[per_symbol] = _columns(run_scenario(scenario, progress=False).trace_path)[0]
    errors = {key: np.concatenate([rounds[f"aggregate_nmse_{phase}"] for phase in ("rho", "nu")])
              for key, rounds in traces.items()}
    if speed == 0.0:
        from cosim.trace import TIMING_COLUMNS

        for name, values in traces[True].items():
            if name not in TIMING_COLUMNS:
                np.testing.assert_array_equal(values, traces[False][name], err_msg=name)
    else:
        assert np.all(errors[True] != errors[False])


@pytest.mark.parametrize("scheme", ["one_bit", "noncoherent_mv"])
@pytest.mark.parametrize("speed", [0.0, 30.0])
def test_the_vote_phases_see_the_channel_symbol_by_symbol(tmp_path, speed, scheme):
    """signSGD over ``uplink.scheme = "one_bit"`` and ``"noncoherent_mv"`` with moving devices and
    ``mobility.channel_within_phase = "per_symbol"``, against the same run with the channel
    of the phase's middle: at rest the two are the same run bit for bit; at 30 m/s the
    received signal of some round differs."""
    traces = {}
    for per_symbol in (True, False):
        overrides = ['mobility.model="straight"', f"mobility.speed_mps={speed}", f'uplink.scheme="{scheme}"',
                     'algorithm.name="signsgd"', "algorithm.signsgd.server_learning_rate=0.01",
                     "trace.signals=true",
                     f'mobility.channel_within_phase="{"per_symbol" if per_symbol else "phase_middle"}"']
        (tmp_path / str(per_symbol)).mkdir()
        scenario = load_scenario(write_tiny(tmp_path / str(per_symbol), algorithm="signsgd", rounds=2, every=3,
                                            hidden=4), overrides)
        path = run_scenario(scenario, progress=False).trace_path
        with h5py.File(path, "r") as f:
            signals = {f"{t}/{name}": f[f"signals/{t}/{name}"][()] for t in f["signals"]
                       for name in f[f"signals/{t}"] if name.startswith("y_")}
        traces[per_symbol] = (_columns(path)[0], signals)
    assert traces[True][1]  # the received signal is kept
    if speed == 0.0:
        from cosim.trace import TIMING_COLUMNS

        for name, values in traces[True][0].items():
            if name not in TIMING_COLUMNS:
                np.testing.assert_array_equal(values, traces[False][0][name], err_msg=name)
        for name, values in traces[True][1].items():
            np.testing.assert_array_equal(values, traces[False][1][name], err_msg=name)
    else:
        assert any(not np.array_equal(values, traces[False][1][name]) for name, values in traces[True][1].items())


def test_a_multi_antenna_bs_combines_each_phase_from_its_start(tmp_path):
    """``bs.num_antennas = 2`` with moving devices: the round's first phase is received
    through ``m^H h(t_mid)`` with ``m`` the combiner of the channels at the phase's start,
    and the devices estimate ``m^H h(t_start)``; the next phase forms its own combiner."""
    import tensorflow as tf

    from cosim.world import build_world
    from phy.uplink.moving_link import combined, phase_channels

    overrides = ['mobility.model="straight"', "mobility.speed_mps=30.0", "bs.num_antennas=2",
                 "mobility.compute_seconds_per_round=0.25"]
    world = build_world(load_scenario(write_tiny(tmp_path, rounds=1, every=1, hidden=4), overrides))
    block = world.uplink
    link = block.round(0)
    moving, air = block.moving, block.air
    start = moving.compute_seconds_per_round
    h_start = moving.at(start)[0]
    assert h_start.ndim == 3
    combiner = air.combiner(h_start)
    np.testing.assert_array_equal(link.combiner, combiner)
    np.testing.assert_allclose(link.h.numpy(), combined(h_start, combiner), rtol=1e-6, atol=1e-12)
    h, _, _, _ = phase_channels(link, "rho", first=True)
    half = 0.5 * block.scheme.nominal_symbols(block.grids["rho"]) * air.symbol_duration_s
    np.testing.assert_allclose(h.numpy(), combined(moving.at(start + half)[0], combiner), rtol=1e-6, atol=1e-12)
    later = start + 0.01
    link.offset_s = later
    h_later, h_hat, _, _ = phase_channels(link, "nu", first=False)
    m_later = air.combiner(moving.at(later)[0])
    assert not np.allclose(m_later, combiner)
    np.testing.assert_allclose(h_later.numpy(), combined(moving.at(later + half)[0], m_later), rtol=1e-6, atol=1e-12)
    assert h_hat.dtype == tf.complex64 and h_hat.shape == h_later.shape


@pytest.mark.parametrize(("scheme", "algorithm", "more"), [
    ("analog", "bayes_aircomp", ['mobility.channel_within_phase="per_symbol"']),
    ("digital_ofdma", "fedavg", ['uplink.rate_adaptation="coherence_block"']),
    ("one_bit", "signsgd", ['mobility.channel_within_phase="per_symbol"'])])
def test_moving_devices_reach_a_multi_antenna_bs_in_every_scheme(tmp_path, scheme, algorithm, more):
    """Two rounds at 30 m/s with N_r = 2 (per symbol, or per coherence block): the run ends
    with finite estimates' errors and each phase's aging correlation per device."""
    overrides = [*STRAIGHT, "mobility.speed_mps=30.0", "bs.num_antennas=2", f'uplink.scheme="{scheme}"', *more]
    scenario = load_scenario(write_tiny(tmp_path, rounds=2, every=2, hidden=4, algorithm=algorithm), overrides)
    rounds, per_device = _columns(run_scenario(scenario, progress=False).trace_path)
    errors = [name for name in rounds if name.startswith(("aggregate_nmse_", "vote_error_rate_"))]
    assert errors and all(np.all(np.isfinite(rounds[name])) for name in errors)
    assert any(name.startswith("aging_correlation_") for name in per_device)


@pytest.mark.parametrize("channel", ["flat_rayleigh", "iid_rayleigh", "tdl"])
def test_the_time_domain_uplink_of_moving_devices(tmp_path, channel):
    """``ofdm.domain = "time"`` with moving devices (phy/moving_time.py): a flat channel at
    rest gives the frequency-domain moving run's estimates (the same process; the waveform
    of a constant channel without offsets is eq. ``ReceivedSignal``) to float32 rounding,
    and at 120 m/s other ones (the channel changes sample by sample, Doppler's ICI
    included); the i.i.d. model's taps (not its frequency-domain subcarrier processes) and
    Sionna's TDL taps at their delays run at both speeds."""
    nmse = {}
    for speed in (0.0, 120.0 / 3.6):
        for domain in ("frequency", "time"):
            (tmp_path / f"{domain}{speed}").mkdir()
            path = write_tiny(tmp_path / f"{domain}{speed}", rounds=2, every=2, hidden=4)
            scenario = load_scenario(path, ['mobility.model="straight"', f"mobility.speed_mps={speed}",
                                            f'channel.model="{channel}"', f'ofdm.domain="{domain}"'])
            rounds, _ = _columns(run_scenario(scenario, progress=False).trace_path)
            nmse[speed, domain] = np.concatenate([rounds[f"aggregate_nmse_{p}"] for p in ("rho", "nu")])
    assert np.all(np.isfinite(nmse[120.0 / 3.6, "time"])) and np.all(np.isfinite(nmse[0.0, "time"]))
    if channel == "flat_rayleigh":
        np.testing.assert_allclose(nmse[0.0, "time"], nmse[0.0, "frequency"], rtol=1e-3)
        assert not np.allclose(nmse[120.0 / 3.6, "time"], nmse[120.0 / 3.6, "frequency"], rtol=1e-3)


@pytest.mark.parametrize(("key", "bound"), [("cfo_max_subcarriers", 0.2), ("timing_offset_max_samples", 30.0)])
def test_offsets_in_the_moving_time_domain_uplink(tmp_path, key, bound):
    """``[sync]`` offsets with moving devices in the time domain: each round's offsets come
    from its "sync" stream as at rest (traced per device within their bounds, with the
    share of path power a timing offset cuts), each phase's waveform carries them
    (phy/moving_time.py: a CFO rotates the stream, a timing offset delays the taps), and
    the estimates differ from the run without."""
    nmse = {}
    for value in (0.0, bound):
        (tmp_path / str(value)).mkdir()
        path = write_tiny(tmp_path / str(value), rounds=2, every=2, hidden=4)
        scenario = load_scenario(path, [*STRAIGHT, 'channel.model="iid_rayleigh"', 'ofdm.domain="time"',
                                        f"sync.{key}={value}"])
        rounds, per_device = _columns(run_scenario(scenario, progress=False).trace_path)
        nmse[value] = rounds["aggregate_nmse_rho"]
        other = "timing_offset_samples" if key == "cfo_max_subcarriers" else "cfo_subcarriers"
        drawn = per_device["cfo_subcarriers" if other == "timing_offset_samples" else "timing_offset_samples"]
        assert np.all(per_device[other] == 0.0) and drawn.shape[0] == 2 and np.all(np.abs(drawn) <= value)
        assert np.all((per_device["cut_path_power_fraction"] >= 0.0) & (per_device["cut_path_power_fraction"] <= 1.0))
        if value:
            assert np.all(drawn != 0.0) and not np.array_equal(drawn[0], drawn[1])
    assert not np.allclose(nmse[bound], nmse[0.0], rtol=1e-3)
