"""Every `cosim` command that does not train starts without TensorFlow; the shipped scenarios.

`inspect`, `plot`, `validate`, `scenarios` and `--version` are run in a fresh interpreter
(this test process has TensorFlow loaded by conftest.py) and must leave TensorFlow,
Sionna, TensorFlow-Probability, Keras, Numba and the learning / PHY packages unimported.
The shipped scenarios (the repository's `scenarios/`, installed as `cosim.scenarios`)
are all listed by `cosim scenarios`, all shipped with the package, and all validate.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from small_trace import write_small_trace
from tiny_scenario import write_tiny

import cosim.scenario.derived
from cosim.cli import main
from cosim.scenario.load import (
    load_scenario,
    shipped_scenarios,
    shipped_scenarios_dir,
    shipped_studies,
)
from cosim.study import load_study

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("tensorflow", "sionna", "tensorflow_probability", "keras", "numba", "learning", "phy")
"""Top-level packages that no command but `run` may import."""
TRAINING = ("cosim.engine", "cosim.run", "cosim.rng")
"""cosim modules that import TensorFlow."""
LIGHT = ("phy", "phy.units", "phy.limits", "phy.parameters", "phy.scheme_parameters", "learning",
         "learning.runtime", "learning.catalog", "learning.hyperparameters", "learning.data",
         "learning.data.files", "learning.data.sizes", "learning.data.datasets", "learning.data.partition",
         "learning.models", "learning.models.shapes")
"""The modules of `phy` and `learning` without NumPy or TensorFlow that every command may
import: the packages, the dB conversions, the PHY models' limits and parameters, the
local training's runtime rules, the algorithm catalog, the algorithms' parameters and
the architectures' names and parameter shapes (all for `cosim.scenario`; the parameter models are pydantic), and
the local dataset sizes (NumPy only: `cosim validate`'s clip-norm projection), the datasets and
their partition (NumPy only: `cosim validate` draws the devices' local datasets). (`native`, whose
TensorFlow import filter every package's `__init__` installs, is not in HEAVY: only its `sampling` imports TensorFlow
and Numba, and that is caught by the two names.)"""

_PROBE = """
import json, os, sys
from cosim.cli import main
try:
    status = main(sys.argv[1:])
except SystemExit as exit:  # --version
    status = exit.code or 0
sys.stdout.flush()
heavy, training, light = json.loads(os.environ["PROBE_MODULES"])
found = sorted(m for m in sys.modules
               if (m.split(".")[0] in heavy or m in training) and m not in light)
print("\\nPROBE " + json.dumps({"status": status, "heavy": found}))
"""


def _probe(*args: str, cwd: Path) -> tuple[int, str, list[str]]:
    """Run ``cosim ARGS`` in a fresh interpreter started in ``cwd``: its exit status,
    its output and the heavy modules it imported."""
    env = {**os.environ, "MPLBACKEND": "Agg", "PROBE_MODULES": json.dumps([HEAVY, TRAINING, LIGHT])}
    result = subprocess.run([sys.executable, "-c", _PROBE, *args], cwd=cwd, env=env,
                            capture_output=True, text=True, timeout=300)
    out, _, probe = result.stdout.rpartition("\nPROBE ")
    assert probe, result.stdout + result.stderr
    found = json.loads(probe)
    return found["status"], out + result.stderr, found["heavy"]


def test_commands_that_do_not_train_import_no_tensorflow(tmp_path):
    trace = write_small_trace(tmp_path / "t.h5")
    quickstart = ROOT / "scenarios" / "quickstart.toml"
    cases = {
        "inspect": (["inspect", str(trace)], "test_accuracy"),
        "verify": (["verify", str(trace)], ": ok"),
        "plot": (["plot", str(trace), "--out", str(tmp_path / "figs")], "accuracy_vs_uplink_symbols.png"),
        "validate": (["validate", str(quickstart)], "scenario 'quickstart': "),
        "validate-by-name": (["validate", "quickstart"], "scenario 'quickstart': "),
        "scenarios": (["scenarios"], "quickstart"),
        "version": (["--version"], f"aircomp-cosim {metadata.version('aircomp-cosim')}"),
        "no-command": ([], "usage: cosim"),
    }
    for name, (args, expected) in cases.items():
        status, out, heavy = _probe(*args, cwd=tmp_path)
        assert status == (2 if name == "no-command" else 0), f"{name}: {out}"
        assert expected in out, f"{name}: {out}"
        assert heavy == [], f"cosim {' '.join(args)} imported {heavy}"
    assert (tmp_path / "figs" / "accuracy_vs_uplink_symbols.png").stat().st_size > 1000


def test_version_prints_the_installed_version(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code in (0, None)
    assert capsys.readouterr().out == f"aircomp-cosim {metadata.version('aircomp-cosim')}\n"


def _repository_files() -> dict[str, Path]:
    """The shipped files of the repository's scenarios/, by the name `cosim scenarios` gives."""
    here = ROOT / "scenarios"
    return {p.stem: p for p in here.glob("*.toml")} | {p.name: p for p in here.glob("*.sh")}


def test_every_shipped_scenario_is_listed_with_its_description_and_path(capsys):
    expected = _repository_files()
    assert {"quickstart", "paper_mnist", "paper_cifar100", "imperfect_csi",
            "compare_mnist.sh"} <= expected.keys()
    listed = shipped_scenarios()
    assert [s.name for s in listed] == sorted(n for n in expected if not n.endswith(".sh")) + sorted(
        n for n in expected if n.endswith(".sh"))
    for s in listed:  # one copy of every file: the installed one has the repository's bytes
        assert s.path.read_bytes() == expected[s.name].read_bytes(), s.name
        assert s.description, f"{s.path} has no first comment line to describe it"
        first = next(line for line in s.path.read_text().splitlines()
                     if line.startswith("#") and not line.startswith("#!"))
        assert s.description == first.lstrip("#").strip()

    studies = shipped_studies()
    assert [s.name for s in studies] == sorted(p.stem for p in (ROOT / "scenarios" / "studies").glob("*.toml"))
    assert {"pow_alloc_mnist", "distortion_test_mnist", "algs_mnist", "varying_labels_mnist",
            "varying_sizes_mnist", "power_budget_mnist", "rd_mnist"} <= {s.name for s in studies}
    assert main(["scenarios"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 + 2 * (len(listed) + len(studies))
    assert lines[0] == "scenarios (cosim run NAME):"
    assert lines[1 + 2 * len(listed)] == "studies (cosim study run NAME --out DIR):"
    body = lines[1 : 1 + 2 * len(listed)] + lines[2 + 2 * len(listed) :]
    for s, entry, path in zip(listed + studies, body[::2], body[1::2], strict=True):
        assert entry.split()[0] == s.name and s.description in entry
        assert path.strip() == str(s.path)
        assert s.description, f"{s.path} has no first comment line to describe it"


def test_every_shipped_file_is_package_data():
    """Nothing in scenarios/ is left out of the install (pyproject's package-data globs)."""
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert setuptools["package-dir"]["cosim.scenarios"] == "scenarios"
    assert "cosim.scenarios" in setuptools["packages"]
    globs = setuptools["package-data"]["cosim.scenarios"]
    shipped = {p.relative_to(ROOT / "scenarios") for g in globs for p in (ROOT / "scenarios").glob(g)}
    present = {p.relative_to(ROOT / "scenarios") for p in (ROOT / "scenarios").rglob("*")
               if p.is_file() and p.name != "__init__.py" and "__pycache__" not in p.parts}
    assert present == shipped
    assert (shipped_scenarios_dir() / "__init__.py").is_file()


@pytest.mark.parametrize("name", sorted(p.stem for p in (ROOT / "scenarios").glob("*.toml")))
def test_every_shipped_scenario_validates_by_name(tmp_path, monkeypatch, capsys, name):
    # validity, not this machine's free memory (the background load varies)
    monkeypatch.setattr(cosim.scenario.derived, "available_memory_bytes", lambda: 2**50)
    monkeypatch.chdir(tmp_path)  # no local file of that name: the shipped one
    assert main(["validate", name]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert f"scenario {load_scenario(ROOT / 'scenarios' / f'{name}.toml').name!r}" in out
    assert main(["validate", f"{name}.toml"]) == 0
    assert not list(tmp_path.iterdir()), "validate writes nothing"


@pytest.mark.parametrize("name", sorted(p.stem for p in (ROOT / "scenarios" / "studies").glob("*.toml")))
def test_every_shipped_study_validates_by_name(tmp_path, monkeypatch, name):
    """Every point of every shipped study is a valid scenario (loaded by its shipped name):
    the product of its axes, less what ``[only]`` leaves out, x its seeds."""
    monkeypatch.setattr(cosim.scenario.derived, "available_memory_bytes", lambda: 2**50)
    monkeypatch.chdir(tmp_path)
    study = load_study(name)
    assert study.source == ROOT / "scenarios" / "studies" / f"{name}.toml"
    combos = [dict(zip(study.axes, c, strict=True)) for c in itertools.product(*study.axes.values())]
    assert len(combos) == math.prod(len(v) for v in study.axes.values())
    kept = [c for c in combos if study.swept_here(c)]
    assert len(kept) == len(combos) or study.only
    assert [p.axis_values for p in study.points()] == [c for c in kept for _ in study.seeds]


def test_a_local_file_wins_over_a_shipped_name(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    write_tiny(tmp_path).rename(tmp_path / "paper_mnist.toml")
    assert load_scenario("paper_mnist.toml").name == "tiny"
    assert load_scenario("paper_mnist").name == "paper_mnist"  # no file "paper_mnist" here
    assert main(["validate", "no_such_scenario"]) == 2
    err = capsys.readouterr().err
    assert "file not found: no_such_scenario" in err and "quickstart" in err
    assert "Traceback" not in err


def test_run_refuses_what_needs_no_tensorflow_before_importing_it(tmp_path):
    """`cosim run` of a trace that exists (no --resume / --overwrite), of a bad key, of a
    trace path that is a directory: one line, exit 2, and TensorFlow never imported."""
    scenario = write_tiny(tmp_path)
    write_small_trace(tmp_path / "tiny-seed3.h5")
    (tmp_path / "dir").mkdir()
    cases = {
        "existing trace": ([str(scenario)], "already exists; continue it with --resume"),
        "bad key": ([str(scenario), "--set", "cell.radius=3"], "cell.radius: unknown key"),
        "bad value": ([str(scenario), "--set", "rounds=0"], "rounds: must be >= 1"),
        "a directory": ([str(scenario), "--set", f'trace.path="{tmp_path / "dir"}"'],
                        "it is a directory"),
    }
    for name, (args, expected) in cases.items():
        status, out, heavy = _probe("run", *args, cwd=tmp_path)
        assert status == 2, f"{name}: {out}"
        assert expected in out, f"{name}: {out}"
        assert heavy == [], f"{name}: imported {heavy}"
