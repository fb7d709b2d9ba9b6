"""The scenario's [runtime] table: validated once (learning.runtime.resolve), refused
combinations name the key, the key it replaced says where it went, and traces written
before it existed still resume."""

import difflib
import tomllib

import pytest
import tomli_w

from cosim.scenario import ScenarioError, load_scenario, migrate_table, parse_scenario
from cosim.trace.compare import _comparable, _key_lines


def _error(table: dict) -> str:
    with pytest.raises(ScenarioError) as info:
        parse_scenario(table)
    assert len(info.value.problems) == 1, info.value.problems
    return info.value.problems[0]


def test_defaults_resolve_to_the_fast_paths():
    runtime = parse_scenario({}).runtime.runtime()
    assert (runtime.backend, runtime.noise, runtime.jit_compile, runtime.device_loop) == (
        "auto", "auto", None, None)


@pytest.mark.parametrize(
    "table,key,words",
    [
        ({"runtime": {"backend": "numba"}, "model": {"architecture": "cnn"}},
         "runtime.backend", "no Numba steps"),
        ({"runtime": {"backend": "numba"}, "algorithm": {"name": "fedsmoo"}},
         "runtime.backend", "TensorFlow only"),
        ({"runtime": {"backend": "numba"}, "algorithm": {"name": "fedavg"}, "model": {"architecture": "cnn"}},
         "runtime.backend", "no Numba steps"),
        ({"runtime": {"noise": "philox"}, "algorithm": {"name": "fedprox"}}, "runtime.noise", "draws no noise"),
        ({"runtime": {"noise": "philox"}, "algorithm": {"name": "scaffold"}},
         "runtime.noise", "TensorFlow only"),
        ({"runtime": {"backend": "numba", "noise": "tensorflow"}}, "runtime.noise",
         "Numba backend draws Philox"),
        ({"runtime": {"backend": "tensorflow", "noise": "philox"}, "model": {"architecture": "cnn"},
          "algorithm": {"estimator": "local_reparameterization"}}, "runtime.noise", "TensorFlow"),
        ({"runtime": {"jit_compile": True, "noise": "philox"}}, "runtime.jit_compile", "XLA"),
        ({"runtime": {"jit_compile": True, "backend": "numba"}}, "runtime.jit_compile", "XLA"),
        ({"runtime": {"device_loop": True, "backend": "numba"}}, "runtime.device_loop",
         "always runs device by device"),
        ({"runtime": {"jit_compile": "yes"}}, "runtime.jit_compile", "'auto', true or false"),
        ({"runtime": {"device_chunk": 0}}, "runtime.device_chunk", ">= 1"),
        ({"runtime": {"backend": "gpu"}}, "runtime.backend", "must be one of"),
    ],
)
def test_refused_combinations_name_the_key(table, key, words):
    problem = _error(table)
    assert problem.startswith(f"{key}:") and words in problem, problem


@pytest.mark.parametrize("runtime,backend,noise,jit", [
    ({}, "numba", "philox", False),
    ({"noise": "tensorflow"}, "tensorflow", "tensorflow", True),  # the LRT with TF noise: XLA
    ({"jit_compile": True}, "tensorflow", "tensorflow", True),
    ({"backend": "tensorflow"}, "tensorflow", "philox", False),
])
def test_auto_honours_the_keys_that_are_set(runtime, backend, noise, jit):
    """One key is enough: TensorFlow noise or XLA alone takes the TensorFlow backend."""
    resolved = parse_scenario({"runtime": runtime, "algorithm": {
        "estimator": "local_reparameterization"}}).resolved_runtime()
    assert (resolved.backend, resolved.noise, resolved.jit_compile) == (backend, noise, jit)
    assert not resolved.device_loop


def test_allowed_combinations():
    for table in (
        {"runtime": {"backend": "tensorflow", "noise": "tensorflow", "jit_compile": True}},
        {"runtime": {"backend": "tensorflow", "noise": "philox"},
         "algorithm": {"estimator": "local_reparameterization"}},
        {"model": {"architecture": "cnn"}, "algorithm": {"estimator": "local_reparameterization"}},
        {"algorithm": {"name": "fedavg"}, "runtime": {"jit_compile": True, "backend": "tensorflow"}},
        {"algorithm": {"name": "fedavg"}, "runtime": {"backend": "numba"}},
        {"algorithm": {"name": "fedprox"}, "runtime": {"backend": "numba"}},
        {"algorithm": {"name": "signsgd"}, "runtime": {"backend": "numba"}},
    ):
        parse_scenario(table)


def test_the_replaced_key_says_where_it_went():
    problem = _error({"algorithm": {"weight_sampler": "tensorflow"}})
    assert problem.startswith("algorithm.weight_sampler: moved to the [runtime] table")
    assert 'runtime.noise = "tensorflow"' in problem
    with pytest.raises(ScenarioError) as info:  # through --set too
        load_scenario(None, ['algorithm.weight_sampler="fused"'])
    assert info.value.problems[0].startswith("algorithm.weight_sampler: moved to the [runtime]")


def test_resume_compares_the_resolved_runtime_and_names_real_differences():
    """The same run spelled with explicit keys compares equal to its "auto"; a trace from
    before [runtime] whose only real difference is the learning rate is reported with
    that one key (not with the migrated ones)."""
    auto = parse_scenario({}).to_toml()
    explicit = parse_scenario({"runtime": {"backend": "numba", "noise": "philox"}}).to_toml()
    assert _comparable(auto) == _comparable(explicit)
    assert _comparable(auto) != _comparable(parse_scenario({"runtime": {
        "backend": "tensorflow"}}).to_toml())
    table = tomllib.loads(parse_scenario({"algorithm": {"learning_rate": 0.2}}).to_toml())
    del table["runtime"]
    table["algorithm"]["weight_sampler"] = "fused"
    old = _comparable(tomli_w.dumps(table))
    diff = [line for line in difflib.unified_diff(_key_lines(old), _key_lines(_comparable(auto)),
                                                  n=0, lineterm="")
            if line[:1] in "+-" and line[:3] not in ("+++", "---")]
    assert diff == ["-algorithm.learning_rate = 0.2", "+algorithm.learning_rate = 0.1"], diff


@pytest.mark.parametrize("sampler,backend,noise", [("fused", "auto", "auto"),
                                                   ("tensorflow", "tensorflow", "tensorflow")])
def test_a_trace_from_before_runtime_compares_equal_to_its_translation(sampler, backend, noise):
    """A trace's stored scenario with algorithm.weight_sampler and no [runtime] table is
    the run that today's scenario with the translated [runtime] keys describes, so
    ``--resume`` accepts it; any other runtime does not compare equal."""
    new = parse_scenario({"runtime": {"backend": backend, "noise": noise}}).to_toml()
    table = tomllib.loads(new)
    del table["runtime"]
    table["algorithm"]["weight_sampler"] = sampler
    old = tomli_w.dumps(table)
    assert _comparable(old) == _comparable(new)
    other = parse_scenario({"runtime": {"device_chunk": 7}}).to_toml()
    assert _comparable(old) != _comparable(other)
    assert "weight_sampler" not in migrate_table(table)["algorithm"]


def test_a_trace_from_before_a_key_existed_compares_equal_with_its_default():
    """algorithm.fedsmoo.max_grad_norm became a key (its default, 10, is the clip the code
    applied before): a trace whose stored scenario lacks it resumes, one whose value
    differs does not, and the key order of the stored table does not matter."""
    new = parse_scenario({"algorithm": {"name": "fedsmoo"}}).to_toml()
    table = tomllib.loads(new)
    del table["algorithm"]["fedsmoo"]["max_grad_norm"]
    table["power"] = dict(reversed(list(table["power"].items())))
    assert _comparable(tomli_w.dumps(table)) == _comparable(new)
    other = parse_scenario({"algorithm": {"name": "fedsmoo", "fedsmoo": {"max_grad_norm": 5.0}}})
    assert _comparable(tomli_w.dumps(table)) != _comparable(other.to_toml())
