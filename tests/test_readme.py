"""The README is a front page whose every command works: each fenced ``cosim`` command
parses with the CLI's own parser, its scenario with its ``--set`` items validates, the
TOML examples load as a scenario and as a study, the Python example compiles and names
columns a trace holds, and the two set-up commands are the ones CI runs."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from cosim.cli import _parser
from cosim.scenario import load_scenario
from cosim.study import load_study

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
BLOCKS = re.findall(r"```(\w+)\n(.*?)```", README, flags=re.S)


def _blocks(language: str) -> list[str]:
    return [body for lang, body in BLOCKS if lang == language]


def _cosim_commands() -> list[list[str]]:
    commands = []
    for body in _blocks("bash"):
        for line in body.splitlines():
            words = shlex.split(line, comments=True)
            if words and words[0] == "cosim":
                commands.append(words[1:])
    return commands


def _written_files(tmp_path: Path) -> None:
    """The files the README's TOML blocks name in their first comment line."""
    for body in _blocks("toml"):
        name = re.match(r"# (\S+\.toml)\n", body)
        assert name, f"a TOML block names its file in its first line: {body[:40]!r}"
        (tmp_path / name.group(1)).write_text(body)


def test_a_front_page():
    lines = README.splitlines()
    assert len(lines) < 190  # with the paragraph on what the quickstart's health flags mean
    assert "session" not in README.lower()
    setup = [b.strip() for b in _blocks("bash") if "venv" in b]
    assert setup[:2] == [
        "python3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/cosim run",
        "python3 -m venv .venv && .venv/bin/pip install -q -e '.[test]' && .venv/bin/python -m pytest -q",
    ]
    assert setup[1] in (ROOT / ".ci" / "run").read_text()


def test_the_readme_has_an_example_of_every_use():
    used = {words[0] for words in _cosim_commands()}
    assert {"run", "validate", "inspect", "plot", "study"} <= used
    assert len(_cosim_commands()) >= 10


@pytest.mark.parametrize("words", _cosim_commands(), ids=" ".join)
def test_every_cosim_command_parses_and_its_scenario_validates(words, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _written_files(tmp_path)
    args = _parser().parse_args(words)
    if words[0] in ("run", "validate"):
        scenario = getattr(args, "scenario", None)
        overrides = tuple(args.overrides)
        assert all("=" in item for item in overrides)
        load_scenario(scenario, overrides)
    if words[:2] == ["study", "run"]:
        load_study(tmp_path / words[2])


def test_the_python_example_compiles_and_names_trace_columns():
    (body,) = _blocks("python")
    compile(body, "README.md", "exec")
    trace_doc = (ROOT / "docs" / "trace.md").read_text(encoding="utf-8")
    for column in re.findall(r'"(\w+)"', body.split("frames.rounds", 1)[1]):
        documented = column in ("round",) or f"`{column}`" in trace_doc or (
            column.startswith("aggregate_nmse_") and "aggregate_nmse_<phase>" in trace_doc)
        assert documented, column


def test_no_word_of_sessions_in_the_docs():
    """Say when by date or commit; Ray's own session directory is the one exception."""
    found = []
    for path in [ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "benchmarks").glob("*")]:
        if path.is_file():
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if "session" in line.lower() and "session_latest" not in line and "session logs" not in line:
                    found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert found == []
