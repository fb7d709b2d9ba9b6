"""Hostile inputs that are not files: absurd counts refused by the schema with their
bound, estimates in closed form, and a terminal nobody can write to."""

from __future__ import annotations

import pytest
from tiny_scenario import write_tiny

from cosim.cli import main
from cosim.limits import MAX_ROUNDS
from cosim.printable import printable
from cosim.scenario import load_scenario
from cosim.study.cost import _evaluations


@pytest.mark.parametrize(("value", "expected"), [
    ("99999999999999999999999", "rounds: must be <= 1e+07 (got 99999999999999999999999)"),
    ("inf", "rounds: must be an integer (got inf)"),
    (str(MAX_ROUNDS + 1), f"rounds: must be <= 1e+07 (got {MAX_ROUNDS + 1})")])
def test_absurd_round_counts_are_refused_with_their_bound(tmp_path, capsys, value, expected):
    assert main(["validate", str(write_tiny(tmp_path)), "--set", f"rounds={value}"]) == 2
    err = capsys.readouterr().err
    assert expected in err and "Traceback" not in err, err


def test_the_evaluation_count_is_closed_form_and_exact():
    for rounds in (1, 2, 3, 7, 10, 11, 100):
        for every in (1, 2, 3, 7, 10, 200):
            scenario = load_scenario(None, [f"rounds={rounds}", f"eval.every={every}"])
            walked = sum(1 for t in range(rounds) if (t + 1) % every == 0 or t + 1 == rounds)
            assert _evaluations(scenario) == walked, (rounds, every)
    largest = load_scenario(None, [f"rounds={MAX_ROUNDS}", "eval.every=3"])
    assert _evaluations(largest) == MAX_ROUNDS // 3 + 1  # at once: no walk over the rounds


def test_validate_of_the_largest_round_count_answers(tmp_path, capsys):
    assert main(["validate", str(write_tiny(tmp_path)), "--set", f"rounds={MAX_ROUNDS}"]) == 0
    assert f"{MAX_ROUNDS} rounds" in capsys.readouterr().out


def test_control_characters_are_shown_not_obeyed(tmp_path, capsys):
    scenario = tmp_path / "s.toml"
    scenario.write_text('name = "x"\n[cell]\n"radius\\u001b[2J\\u001b]0;owned\\u0007x" = 5\n')
    assert main(["validate", str(scenario)]) == 2
    err = capsys.readouterr().err
    assert "cell.radius\\x1b[2J\\x1b]0;owned\\x07x: unknown key" in err, err
    assert "\x1b" not in err and "\x07" not in err
    assert main(["inspect", str(tmp_path / "no\x1b[2Jtrace.h5")]) == 2
    assert "no\\x1b[2Jtrace.h5" in capsys.readouterr().err
    assert printable("a\u202eb\tc\n") == "a\\u202eb\tc\n"  # a bidirectional override too


def test_overrides_as_pairs_are_read_and_anything_else_is_one_line():
    from cosim.scenario import ScenarioError

    assert load_scenario(None, [("rounds", 3), "seed=4"]).rounds == 3
    with pytest.raises(ScenarioError, match=r"3: an override is a key.path=value string or a "
                       r"\(key.path, value\) pair"):
        load_scenario(None, [3])


def test_api_run_removes_its_temporary_directory_on_a_refusal(tmp_path, monkeypatch):
    import tempfile

    from cosim import api
    from cosim.scenario import ScenarioTooLarge

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with pytest.raises(ScenarioTooLarge):
        api.run(None, {"cell.num_devices": 100_000, "model.hidden_units": [100_000]},
                progress=False)
    assert not list(tmp_path.iterdir())


def test_a_trace_name_longer_than_the_system_allows_is_one_line(tmp_path, capsys):
    long_name = tmp_path / ("a" * 300 + ".h5")
    assert main(["inspect", str(long_name)]) == 2
    assert capsys.readouterr().err.rstrip().endswith(".h5: File name too long")
    from cosim.trace import TraceError, check_trace_target

    with pytest.raises(TraceError, match="File name too long"):
        check_trace_target(long_name)


def _cosim(args, **kwargs):
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "cosim.cli", *args], env=env,
                          stderr=subprocess.PIPE, text=True, **kwargs)


@pytest.mark.parametrize("command", ["inspect", "verify"])
def test_a_command_started_without_standard_output_is_quiet(tmp_path, command):
    import os

    from small_trace import write_small_trace

    trace = write_small_trace(tmp_path / "t.h5")
    before = trace.read_bytes()
    result = _cosim([command, str(trace)], preexec_fn=lambda: os.close(1))  # `cosim ... >&-`
    assert result.returncode == 0 and result.stderr == "", result.stderr
    assert trace.read_bytes() == before


def test_a_command_whose_reader_went_away_is_quiet(tmp_path):
    import os

    from small_trace import write_small_trace

    trace = write_small_trace(tmp_path / "t.h5")
    read, write = os.pipe()
    os.close(read)  # a pipe whose reader is gone: every write is EPIPE
    try:
        result = _cosim(["inspect", str(trace)], stdout=write)
    finally:
        os.close(write)
    assert result.returncode == 0 and result.stderr == "", result.stderr


@pytest.mark.parametrize("command", [["scenarios"], ["inspect"], ["verify"]])
def test_commands_in_process_with_no_standard_output(tmp_path, monkeypatch, capsys, command):
    import sys

    from small_trace import write_small_trace

    trace = write_small_trace(tmp_path / "t.h5")
    monkeypatch.setattr(sys, "stdout", None)
    args = command + ([str(trace)] if command[0] != "scenarios" else [])
    assert main(args) == 0
    assert sys.stdout is None  # given back as it was


def test_an_integer_key_refuses_a_boolean(tmp_path, capsys):
    assert main(["validate", str(write_tiny(tmp_path)), "--set", "uplink.bits_per_value=true"]) == 2
    err = capsys.readouterr().err
    assert "uplink.bits_per_value: must be one of 1, 2, 4, 8, 16 or 32 (got True)" in err, err
    assert load_scenario(None, ["uplink.bits_per_value=8"]).uplink.bits_per_value == 8


DEEP = "[" * 5000 + "]" * 5000


@pytest.mark.parametrize("where", ["file", "set", "study axis"])
def test_nesting_beyond_the_stated_depth_is_one_line(tmp_path, capsys, where):
    from cosim.limits import MAX_NESTING

    tiny = write_tiny(tmp_path)
    args = ["validate", str(tiny)]
    if where == "file":
        tiny.write_text(f"x = {DEEP}\n" + tiny.read_text())
    elif where == "set":
        args += ["--set", f"model.hidden_units={DEEP}"]
    else:
        study = tmp_path / "s.toml"
        study.write_text(f'scenario = "tiny.toml"\nseeds = [1]\n[axes]\n"model.hidden_units" = {DEEP}\n')
        args = ["validate", str(study)]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert f"nested more than {MAX_NESTING} deep" in err and "Traceback" not in err, err
    assert len(err.splitlines()) == 2, err
    ok = "[" * (MAX_NESTING - 3) + "1" + "]" * (MAX_NESTING - 3)  # within the depth: the schema's
    assert main(["validate", str(write_tiny(tmp_path)), "--set", f"model.hidden_units={ok}"]) == 2
    assert "model.hidden_units[0]: " in capsys.readouterr().err


def test_an_echoed_value_is_cut_to_a_bounded_length(tmp_path, capsys):
    from cosim.limits import MAX_ECHO_CHARS

    huge = "a" * 100_000
    assert main(["validate", str(write_tiny(tmp_path)), "--set", f'uplink.scheme="{huge}"']) == 2
    err = capsys.readouterr().err
    assert len(err) < 600 and "(100,002 characters)" in err, len(err)
    assert "'" + "a" * (MAX_ECHO_CHARS - 1) + "..." in err
    assert main(["validate", str(write_tiny(tmp_path)), "--set", f"cell.{huge}=1"]) == 2
    assert len(capsys.readouterr().err) < 1200  # an unknown key of 100,000 characters, cut


LOCALE_SCRIPT = """
import sys
from cosim.cli import main
from cosim.scenario import load_scenario
from cosim.trace import TraceWriter, read_trace

tiny, where = sys.argv[1], sys.argv[2]  # a UTF-8 path as an ASCII locale decodes it
assert sys.getfilesystemencoding() == "ascii", sys.getfilesystemencoding()
scenario = load_scenario(tiny, [f'trace.path="{where}"', "rounds=1"])
with TraceWriter.create(scenario.trace_path, scenario.to_toml(), seed=3, name="tiny") as writer:
    writer.append_round({"train_loss": 1.0})
    writer.commit()
stored = read_trace(scenario.trace_path).scenario["trace"]["path"]
print("STORED", stored.encode("unicode_escape").decode("ascii"))
sys.exit(main(["inspect", where]))
"""


def test_paths_and_attributes_are_utf8_under_an_ascii_locale(tmp_path):
    """`LC_ALL=C PYTHONUTF8=0 PYTHONCOERCECLOCALE=0` (Python's file-system encoding ASCII):
    a trace at `données/tracé.h5` is created there, its stored scenario holds the path as
    UTF-8 text, and `cosim inspect` prints it (was: `UnicodeEncodeError: surrogates not
    allowed` writing the scenario attribute)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0",
           "PYTHONPATH": str(root)}
    env.pop("LANG", None)
    result = subprocess.run([sys.executable, "-c", LOCALE_SCRIPT, str(write_tiny(tmp_path)),
                             "données/tracé.h5"], cwd=tmp_path, env=env, capture_output=True)
    err = result.stderr.decode("utf-8", "replace")
    assert result.returncode == 0, err
    out = result.stdout.decode("utf-8")
    assert "STORED donn\\xe9es/trac\\xe9.h5" in out and "trace données/tracé.h5" in out, out
    assert (tmp_path / "données" / "tracé.h5").is_file()
    bad = subprocess.run([sys.executable, "-m", "cosim.cli", "validate", str(tmp_path / "tiny.toml"),
                          "--set", b'trace.path="trac\xe9.h5"'], env=env, capture_output=True)
    assert bad.returncode == 2, bad.stderr
    assert bad.stderr.decode().splitlines()[-1] == (
        "  'trace.path=\"trac\\udce9.h5\"': not UTF-8 text (byte 0xe9); a scenario is UTF-8")
