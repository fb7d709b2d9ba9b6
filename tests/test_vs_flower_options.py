"""benchmarks/vs_flower.py refuses bad options, naming them, before it creates Flower's
virtual environment or builds anything (no network, no TensorFlow import: stdlib only).

No timing assertions; the benchmark itself is run by hand (benchmarks/README.md).
"""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "vs_flower.py"


def _script():
    spec = importlib.util.spec_from_file_location("vs_flower", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(("option", "value"), [
    ("--devices", "100,abc"),
    ("--devices", "0"),
    ("--devices", "100,100"),
    ("--rounds", "1"),
    ("--rounds-large", "two"),
    ("--sides", "ours,ray"),
    ("--backend", "gpu"),
    ("--client-cpus", "0"),
    ("--sample-s", "nan"),
    ("--python", "no-such-python-here"),
])
def test_bad_options_are_refused_naming_the_option_without_a_venv(tmp_path, capsys, option, value):
    venv = tmp_path / "flower-venv"
    with pytest.raises(SystemExit) as refused:
        _script().main(["--venv", str(venv), option, value])
    assert refused.value.code == 2
    captured = capsys.readouterr()
    assert option in captured.err and repr(value) in captured.err
    assert captured.out == ""
    assert not venv.exists()


def test_the_command_line_exits_2():
    result = subprocess.run([sys.executable, str(SCRIPT), "--rounds", "1"], capture_output=True, text=True,
                            cwd=ROOT, timeout=120)
    assert result.returncode == 2 and "--rounds '1'" in result.stderr, result.stderr
