"""Scenario schema: paper defaults, shipped files, clear errors, --set overrides."""

import tomllib
from pathlib import Path

import pytest
from pydantic import BaseModel

from cosim.scenario import (
    DB_LIMIT,
    AlgorithmConfig,
    Scenario,
    ScenarioError,
    ScenarioTooLarge,
    available_memory_bytes,
    check_resources,
    default_scenario_text,
    describe,
    image_shape,
    load_scenario,
    memory_estimate_bytes,
    model_num_params,
    parse_scenario,
    scenario_num_params,
    symbols_per_phase,
    toml_value,
)
from cosim.scenario.derived import memory_parts

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = sorted((ROOT / "scenarios").glob("*.toml"))


def _error(text: str) -> str:
    with pytest.raises(ScenarioError) as info:
        parse_scenario(tomllib.loads(text), "test.toml")
    return str(info.value)


def test_defaults_are_the_paper_tables():
    s = Scenario()
    # Table I (table:SimulSetup)
    assert s.cell.radius_m == 300.0 and s.cell.num_devices == 100
    assert s.data.mean_samples_per_device == 10 and s.data.size_distribution == "poisson"
    assert s.data.partition == "labels_per_device" and s.data.labels_per_device == 1
    assert s.power.tx_power_dbm == 20.0 and s.power.noise_power_dbm == -74.0
    assert s.ofdm.num_subcarriers == 1024
    assert s.channel.path_loss_exponent == 4.0 and s.channel.model == "iid_rayleigh"
    # Table II (table:HyperParam)
    a = s.algorithm
    assert a.learning_rate == 0.1 and a.local_steps == 3 and a.mc_samples == 5
    assert a.kl_scale == "num_devices" and a.kl_scale_value(s.cell.num_devices) == 100.0
    assert s.power.gamma == "noise_power" and s.power.gamma_w == s.power.noise_power_w
    assert s.model.architecture == "mlp" and s.model.hidden_units == (256,) * 5
    # linear units: 20 dBm = 0.1 W, -74 dBm = 10^-10.4 W
    assert s.power.tx_power_w == pytest.approx(0.1, rel=1e-12)
    assert s.power.noise_power_w == pytest.approx(10**-10.4, rel=1e-12)
    # N1 = N2 = 456 for d = 466,698 (Table I)
    assert symbols_per_phase(466_698, 1024) == 456
    assert symbols_per_phase(857_736, 1024) == 838
    assert symbols_per_phase(1024, 1024) == 1 and symbols_per_phase(1025, 1024) == 2


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_shipped_scenarios_validate_and_round_trip(path):
    s = load_scenario(path)
    assert parse_scenario(tomllib.loads(s.to_toml())) == s
    assert s.name == path.stem


def test_toml_value_is_one_line_that_loads_back():
    """``toml_value`` writes `--set key=value` items (cosim.study): awkward values come
    back whole from one line, also through ``load_scenario``."""
    awkward = 'runs/say "hi" \\ then\nnext.h5'
    for value in (awkward, (0.1, -2.5, 1e-300, 2.0**70), float("-inf"), [[1, 2], ["a\\"]], True, -0.0):
        text = toml_value(value)
        assert "\n" not in text, text
        assert tomllib.loads(f"v = {text}")["v"] == (list(value) if isinstance(value, tuple) else value)
    assert [toml_value(float(v)) for v in ("nan", "inf", "-inf")] == ["nan", "inf", "-inf"]
    s = load_scenario(None, [f"trace.path={toml_value(awkward)}", f"trace.signal_rounds={toml_value((2, 5))}"])
    assert s.trace.path == awkward and s.trace.signal_rounds == (2, 5)
    assert toml_value({"a": 1, "b c": [1.5]}) == '{a = 1, "b c" = [1.5]}'  # a table, inline
    for bad in (None, {"a": None}, [1, None], {1: 2}):
        with pytest.raises(TypeError):
            toml_value(bad)


def test_shipped_set():
    assert {p.stem for p in SHIPPED} >= {"quickstart", "paper_mnist", "paper_cifar100", "imperfect_csi"}


def test_paper_scenarios_match_tables():
    m = load_scenario(ROOT / "scenarios/paper_mnist.toml")
    # every other key: the defaults (Tables I-II); two readings chosen by measurement
    measured = AlgorithmConfig(covariance_parameter="softplus_std", nll_reduction="mean")
    assert m == Scenario(name="paper_mnist", rounds=m.rounds, algorithm=measured)
    c = load_scenario(ROOT / "scenarios/paper_cifar100.toml")
    assert (c.data.dataset, c.data.partition, c.data.dirichlet_alpha) == ("cifar100", "dirichlet", 0.1)
    assert (c.data.mean_samples_per_device, c.data.size_distribution) == (100, "shifted_poisson")
    assert (c.algorithm.learning_rate, c.algorithm.local_steps, c.algorithm.mc_samples) == (0.05, 30, 1)
    assert c.model.architecture == "resnet56" and c.data.num_classes == 100
    assert (c.algorithm.covariance_parameter, c.algorithm.nll_reduction) == ("softplus_std", "mean")
    q = load_scenario(ROOT / "scenarios/imperfect_csi.toml")
    assert (q.csi.model, q.csi.nmse_db) == ("gaussian", -10.0)


def test_embedded_default_is_the_quickstart_file():
    assert default_scenario_text() == (ROOT / "scenarios/quickstart.toml").read_text()
    assert load_scenario(None) == load_scenario(ROOT / "scenarios/quickstart.toml")


def test_unknown_key_suggests_nearest():
    msg = _error("[cell]\nradius_mm = 5.0")
    assert "cell.radius_mm: unknown key; did you mean 'radius_m'?" in msg
    assert "cel: unknown key; did you mean 'cell'?" in _error("[cel]\nradius_m = 5.0")


def test_wrong_type_and_range():
    assert "cell.radius_m: must be a number (got '300')" in _error('[cell]\nradius_m = "300"')
    assert "cell.radius_m: must be > 0 (got -5.0)" in _error("[cell]\nradius_m = -5.0")
    assert "cell.num_devices: must be an integer (got 2.5)" in _error("[cell]\nnum_devices = 2.5")
    assert "trace.per_device: must be true or false" in _error('[trace]\nper_device = "yes"')
    assert "cell: must be a table" in _error("cell = 5")


def test_unknown_model_name_lists_valid_names():
    msg = _error('[model]\narchitecture = "vgg"')
    assert "model.architecture: must be one of 'mlp', 'cnn' or 'resnet56' (got 'vgg')" in msg
    assert "algorithm.name" in _error('[algorithm]\nname = "fedbayes"')


def test_several_problems_one_line_each():
    msg = _error('seed = -1\n[cell]\nradius_m = -1.0\n[ofdm]\nnum_subcarriers = 0')
    lines = msg.splitlines()[1:]
    assert len(lines) == 3
    assert all(line.strip().split(":")[0] in {"seed", "cell.radius_m", "ofdm.num_subcarriers"} for line in lines)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[cell]\nmin_distance_m = 400.0", "cell.min_distance_m: must be < cell.radius_m = 300.0"),
        ('[cell]\nlayout = "annulus"', "cell.inner_radius_m: required by cell.layout = 'annulus'"),
        ('[cell]\nlayout = "annulus"\ninner_radius_m = 300.0', "cell.inner_radius_m: must be < cell.radius_m"),
        ('[cell]\nlayout = "clusters"\nnum_clusters = 3', "cell.cluster_std_m: required"),
        ('[cell]\nlayout = "explicit"\nnum_devices = 2\npositions_m = [[20.0, 0.0]]',
         "cell.positions_m: must have cell.num_devices = 2 rows (got 1)"),
        ('[cell]\nlayout = "explicit"\nnum_devices = 1\npositions_m = [[400.0, 0.0]]',
         "cell.positions_m: row 0"),
        ('[csi]\nmodel = "gaussian"', "csi.nmse_db: required by csi.model = 'gaussian'"),
        ('[csi]\nmodel = "outdated"', "csi.correlation: required"),
        ('[channel]\nmodel = "tdl"\ntdl_profile = "F"', "channel.tdl_profile: must be one of 'A'"),
        ('[power]\ncontrol = "truncated_inversion"\ntci_gain_threshold = -0.1',
         "power.tci_gain_threshold: must be >= 0"),
        ("[power]\ngamma = -1.0",
         "power.gamma: must be 'noise_power', 'joint' or a positive finite number (got -1.0)"),
        ('[algorithm]\nkl_scale = "many"',
         "algorithm.kl_scale: must be 'num_devices' or a positive finite number"),
        ("[data]\nlabels_per_device = 11",
         "data.labels_per_device: must be <= 10, the classes of data.dataset = 'mnist' (got 11)"),
        ('[data]\ndataset = "synthetic"\nsynthetic_classes = 4\nlabels_per_device = 5',
         "data.labels_per_device: must be <= data.synthetic_classes = 4 (got 5)"),
        ("[data]\nsynthetic_shape = [4, 4, 1, 1]", "data.synthetic_shape: must be 1 to 3 positive ints"),
        ('[data]\ndataset = "synthetic"\nsynthetic_shape = [28]\n[model]\narchitecture = "cnn"',
         "data.synthetic_shape: must be at least 4 x 4 pixels [H, W, C] for model.architecture = 'cnn'"),
        ("[trace]\nsignal_rounds = [3, -1]", "trace.signal_rounds: must be >= 0 (got [3, -1])"),
        ('[data]\nsize_distribution = "shifted_poisson"\nmean_samples_per_device = 0.5',
         "data.mean_samples_per_device: must be >= 1 with data.size_distribution = 'shifted_poisson'"),
        ('[trace]\npath = "runs/{nam}.h5"', "trace.path: only {name} and {seed}"),
    ],
)
def test_cross_field_errors_name_the_field(text, expected):
    assert expected in _error(text)


def test_valid_layouts():
    s = parse_scenario(tomllib.loads(
        '[cell]\nlayout = "explicit"\nnum_devices = 2\npositions_m = [[20, 0], [0.0, -250.0]]'))
    assert s.cell.positions_m == ((20.0, 0.0), (0.0, -250.0))
    s = parse_scenario(tomllib.loads('[cell]\nlayout = "clusters"\nnum_clusters = 3\ncluster_std_m = 20.0'))
    assert s.cell.num_clusters == 3
    s = parse_scenario(tomllib.loads('[csi]\nmodel = "gaussian"\nnmse_db = -20'))
    assert s.csi.nmse_db == -20.0
    s = parse_scenario(tomllib.loads("[power]\ngamma = 1e-9"))
    assert s.power.gamma_w == 1e-9


def test_scenario_is_frozen():
    s = Scenario()
    with pytest.raises(Exception, match="frozen"):
        s.cell.radius_m = 5.0  # type: ignore[misc]
    assert isinstance(s.model.hidden_units, tuple)


def test_overrides():
    s = load_scenario(None, [
        "cell.num_devices=20",                  # int
        "power.tx_power_dbm=10",                # int into a float field
        "algorithm.kl_scale=2.5",               # number for a keyword-or-number field
        "name=run7",                            # bare string
        'csi.model="gaussian"', "csi.nmse_db=-15",
        "model.hidden_units=[8, 16]",           # list
        "algorithm.fedprox.proximal_mu=0.5",    # nested table
        "trace.per_device=false",
    ])
    assert s.cell.num_devices == 20 and s.power.tx_power_dbm == 10.0
    assert s.algorithm.kl_scale == 2.5 and s.name == "run7"
    assert (s.csi.model, s.csi.nmse_db) == ("gaussian", -15.0)
    assert s.model.hidden_units == (8, 16) and s.algorithm.fedprox.proximal_mu == 0.5
    assert s.trace.per_device is False
    assert s.trace_path == Path("runs/run7-seed1.h5")


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("cell.radius_mm=5", "cell.radius_mm: unknown key; did you mean 'radius_m'?"),
        ("celll.radius_m=5", "celll: unknown key; did you mean 'cell'?"),
        ("cell.radius_m=-5", "cell.radius_m: must be > 0 (got -5)"),
        ("cell.radius_m=abc", "cell.radius_m: must be a number (got 'abc')"),
        ("model.architecture=vgg", "model.architecture: must be one of"),
        ("cell.radius_m.x=1", "cell.radius_m: is a value, not a table"),
        ("cell", "must look like key.path=value"),
    ],
)
def test_bad_overrides(override, expected):
    with pytest.raises(ScenarioError, match=None) as info:
        load_scenario(None, [override])
    assert expected in str(info.value)


def test_file_errors(tmp_path):
    with pytest.raises(ScenarioError, match="file not found"):
        load_scenario(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "x"\n[cell\nradius_m = 3\n')
    with pytest.raises(ScenarioError, match=r"TOML syntax error: .*line 2"):
        load_scenario(bad)


def test_hyper_parameters_for_build():
    s = Scenario()
    hyper = s.hyper_parameters()
    assert s.algorithm.hyper_parameters()["kl_scale"] == "num_devices"
    assert hyper["kl_scale"] == 100.0 and hyper["mc_samples"] == 5 and hyper["learning_rate"] == 0.1
    paper = ROOT / "scenarios" / "paper_mnist.toml"
    fp = load_scenario(paper, ["algorithm.name=fedprox", "algorithm.fedprox.proximal_mu=0.1"])
    assert fp.algorithm.hyper_parameters(100) == {"learning_rate": 0.1, "local_steps": 3, "proximal_mu": 0.1}
    assert load_scenario(paper, ["algorithm.name=fedavg"]).algorithm.hyper_parameters(100) == {
        "learning_rate": 0.1, "local_steps": 3}


def test_describe_and_memory():
    s = Scenario()
    text = describe(s, 466_698)
    assert "d = 466,698" in text and "N_rho = 456" in text and "N_nu = 456" in text
    assert "912 uplink" in text
    # the local step 4 K d (4 + 2M) with K = 100, M = 5 outweighs the uplink phase
    # K (4 d + 8 N F) with N = 456, F = 1024; beside it the runtime and MNIST with the
    # devices' padded local datasets (memory_parts)
    parts = memory_parts(s, 466_698)
    assert memory_estimate_bytes(s, 466_698) == parts["runtime"] + parts["dataset"] + 4 * 100 * 466_698 * 14
    assert parts["local step"] == 4 * 100 * 466_698 * 14 > 100 * (4 * 466_698 + 8 * 456 * 1024)
    assert "plus dataset 0.21, runtime 0.72 GiB" in text
    assert "+ 1000 downlink = 1912 channel uses" in describe(s, 466_698, downlink_symbols=1000)
    with pytest.raises(ValueError, match="num_values"):
        symbols_per_phase(0, 1024)


def _float_keys(model: type = Scenario, prefix: str = "") -> list[str]:
    """Every dotted key whose type admits a float (arrays of floats excluded)."""
    keys = []
    for key, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            keys += _float_keys(annotation, f"{prefix}{key}.")
        elif "float" in str(annotation) and "tuple" not in str(annotation):
            keys.append(prefix + key)
    return keys


FLOAT_KEYS = _float_keys()


def test_float_keys_found():
    assert {"power.tx_power_dbm", "data.mean_samples_per_device", "power.gamma",
            "algorithm.kl_scale", "csi.nmse_db", "algorithm.fedgmt.ema_decay"} <= set(FLOAT_KEYS)


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
@pytest.mark.parametrize("key", FLOAT_KEYS)
def test_every_float_key_refuses_nan_and_inf(key, value):
    with pytest.raises(ScenarioError) as info:
        load_scenario(None, [f"{key}={value}"])
    assert f"{key}: " in str(info.value) and f"(got {value})" in str(info.value)


def test_non_finite_in_arrays_and_files(tmp_path):
    assert "cell.positions_m[0][1]: must be a finite number, not nan or inf (got nan)" in _error(
        '[cell]\nlayout = "explicit"\nnum_devices = 1\npositions_m = [[20.0, nan]]')
    path = tmp_path / "s.toml"
    path.write_text("[data]\nmean_samples_per_device = inf\n")
    with pytest.raises(ScenarioError, match=r"data\.mean_samples_per_device: must be a finite number"):
        load_scenario(path)


def test_db_keys_are_bounded():
    """A dB value whose linear value is not a normal float32 (1e308 dBm overflowed dbm_to_w)."""
    assert f"power.tx_power_dbm: must be <= {DB_LIMIT:g} (got 1e+308)" in _error(
        "[power]\ntx_power_dbm = 1e308")
    assert "downlink.bs_tx_power_dbm: must be >= -300" in _error("[downlink]\nbs_tx_power_dbm = -1e4")


def test_key_in_the_wrong_table_names_its_table():
    assert "power.radius_m: unknown key; did you mean 'cell.radius_m'?" in _error("[power]\nradius_m = 3.0")


ARCHITECTURES = [
    ("mlp", (28, 28, 1), 10, (256,) * 5),   # paper_mnist, imperfect_csi
    ("mlp", (28, 28, 1), 10, (128, 128)),   # quickstart
    ("resnet56", (32, 32, 3), 100, ()),     # paper_cifar100
    ("cnn", (28, 28, 1), 10, ()),
    ("cnn", (32, 32, 3), 100, ()),
    ("cnn", (9, 7), 4, ()),                 # a synthetic 2-D shape, padded to (9, 7, 1)
    ("resnet56", (6, 6, 2), 4, ()),
    ("mlp", (6, 6, 1), 4, (16,)),           # the tests' tiny scenario
]


@pytest.mark.parametrize(("architecture", "shape", "classes", "hidden"), ARCHITECTURES,
                         ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else str(v))
def test_model_num_params_equals_the_built_model(architecture, shape, classes, hidden):
    from learning.models.architectures import build_model

    padded = image_shape(shape) if architecture != "mlp" else shape
    built = build_model(architecture, padded, classes, hidden).num_params
    assert model_num_params(architecture, shape, classes, hidden) == built


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_scenario_num_params_of_shipped_scenarios(path):
    from learning.models.architectures import build_model

    s = load_scenario(path)
    built = build_model(s.model.architecture, s.data.input_shape, s.data.num_classes, s.model.hidden_units)
    assert scenario_num_params(s) == built.num_params
    assert scenario_num_params(Scenario()) == 466_698  # Table I's d


def test_check_resources():
    """Every device in memory (``runtime.devices_in_memory`` = K): a round that does not
    fit is refused; with ``"auto"`` the same round streams its devices instead."""
    auto = load_scenario(ROOT / "scenarios/paper_mnist.toml")
    s = load_scenario(ROOT / "scenarios/paper_mnist.toml", ["runtime.devices_in_memory=100"])
    need = memory_estimate_bytes(s, 466_698)
    streamed = check_resources(auto, available_bytes=need - 1)
    assert streamed <= (need - 1) / 2 < need
    assert check_resources(s, available_bytes=need) == need
    assert check_resources(s, 466_698, available_bytes=need) == need
    with pytest.raises(ScenarioTooLarge) as info:
        check_resources(s, available_bytes=need - 1, source="paper_mnist.toml")
    error = info.value
    assert isinstance(error, ScenarioError) and error.estimate_bytes == need
    text = str(error)
    assert text.startswith("scenario paper_mnist.toml does not fit in memory:")
    assert ("cell.num_devices = 100, model.hidden_units = [256, 256, 256, 256, 256], "
            "algorithm.mc_samples = 5: need ~3.36 GiB") in text
    assert "d = 466,698 weights" in text


def test_absurd_sizes_are_refused_without_building_a_model():
    """d is arithmetic: a 10^8-unit layer (d = 7.95e10) is refused on any machine, at once."""
    s = load_scenario(None, ["model.hidden_units=[100000000]"])
    assert scenario_num_params(s) == 784 * 10**8 + 10**8 + 10**8 * 10 + 10
    with pytest.raises(ScenarioTooLarge, match=r"model\.hidden_units = \[100000000\]"):
        check_resources(s)
    wide = load_scenario(None, ["ofdm.num_subcarriers=1000000000"])  # padding drives the grid
    with pytest.raises(ScenarioTooLarge, match=r"ofdm\.num_subcarriers = 1000000000"):
        check_resources(wide)


def test_available_memory(tmp_path, monkeypatch):
    pages = {"SC_AVPHYS_PAGES": 3, "SC_PAGE_SIZE": 4096}  # fixed: free pages change by the instant
    monkeypatch.setattr("os.sysconf", pages.__getitem__)
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:  2048 kB\nMemAvailable:   1024 kB\n")
    assert available_memory_bytes(meminfo) == 1024 * 1024
    meminfo.write_text("MemTotal:  2048 kB\n")  # no MemAvailable: free pages x page size
    fallback = available_memory_bytes(meminfo)
    assert fallback == 3 * 4096
    assert available_memory_bytes(tmp_path / "missing") == fallback
