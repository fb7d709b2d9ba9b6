"""Kernels compiled ahead and said as they compile: :class:`native.compile_watch.CompileWatch`
(one line per kernel Numba compiles, none for one it has, a callee counted in its
caller) and ``cosim compile`` (one round of the scenario shrunk to a few devices)."""

from __future__ import annotations

import numba
from tiny_scenario import write_tiny

from cosim.cli import main
from cosim.compile_command import COMPILE_DEVICES, shrunk_scenario
from native.compile_watch import CompileWatch


def test_each_kernel_compiled_is_said_once_with_its_callees_in_it():
    @numba.njit(cache=False)
    def callee(x):
        return x + 1.0

    @numba.njit(cache=False)
    def caller(x):
        return callee(x) * 2.0

    lines: list[str] = []
    with CompileWatch(say=lines.append) as watch:
        assert caller(1.0) == 4.0
        assert caller(2.0) == 6.0  # compiled already: nothing said
    assert len(lines) == 1 and len(watch.compiled) == 1
    name, seconds = watch.compiled[0]
    assert name.endswith("caller") and name.startswith(__name__) and seconds > 0.0
    assert lines[0].startswith(f"compiled {name} in ") and lines[0].endswith("(1 kernel, "
                                                                              f"{seconds:.0f} s so far)")
    assert watch.summary().startswith("1 kernel compiled in ")
    with CompileWatch(say=lines.append) as idle:
        caller(3.0)
    assert idle.summary() == "no kernel needed compiling (all from Numba's cache)"
    caller(1)  # an int64 is a new type: compiled, but no watch is open any more
    assert len(lines) == 1


def test_compile_shrinks_the_scenario_and_says_what_it_did(tmp_path, capsys):
    path = str(write_tiny(tmp_path, rounds=7, every=3))
    scenario, shrunk = shrunk_scenario(path, ["cell.num_devices=20"])
    assert scenario.cell.num_devices == 20 and scenario.rounds == 7
    assert (shrunk.cell.num_devices, shrunk.rounds, shrunk.eval.every) == (COMPILE_DEVICES, 1, 1)
    assert main(["compile", path]) == 0
    captured = capsys.readouterr()
    assert captured.err.splitlines()[0].startswith(
        f"cosim compile: tiny: one round of {COMPILE_DEVICES} devices compiles its kernels")
    summary = captured.out.splitlines()[-1]
    said = [x for x in captured.err.splitlines() if x.startswith("cosim compile: compiled ")]
    if said:
        assert summary.startswith(f"cosim compile: {len(said)} kernel")
    else:
        assert summary.startswith("cosim compile: no kernel needed compiling")
    assert "Numba's cache: " in summary
    assert not list(tmp_path.glob("*.h5"))  # no trace written


def test_compile_writes_nothing_beside_the_runs_trace(tmp_path):
    """A run whose rounds stream SCAFFOLD's devices keeps its per-device tables beside its
    trace; compiling it writes none there (the round's tables go to a scratch directory)."""
    path = write_tiny(tmp_path, rounds=3, every=3, algorithm="scaffold")
    assert main(["compile", str(path), "--set", "runtime.devices_in_memory=2"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny.toml"]


def test_a_bad_scenario_is_refused_before_anything_compiles(tmp_path, capsys):
    path = str(write_tiny(tmp_path))
    assert main(["compile", path, "--set", "cell.num_devices=0"]) == 2
    err = capsys.readouterr().err
    assert "cell.num_devices: must be >= 1 (got 0)" in err and "one round of" not in err


def test_a_scenario_smaller_than_the_shrink_keeps_its_devices(tmp_path):
    _, shrunk = shrunk_scenario(str(write_tiny(tmp_path)), ["cell.num_devices=3"])
    assert shrunk.cell.num_devices == 3
