"""``cosim compile``: compile a scenario's Numba kernels ahead, so its first run starts at once.

Numba compiles a kernel on its first call and keeps it in its on-disk cache
(``native/numba_cache.py``); a run from a cold cache spends its first round, about two
minutes at the quickstart on two cores, compiling. The kernels a run reaches depend on
its scenario's paths (the estimator, the backend, the uplink's domain, the power
control, the scheme), not on its sizes: a kernel is compiled once per tuple of argument
types, and neither K nor d is part of a type. So this command runs one round, with an
evaluation, of the scenario shrunk to a few devices (:data:`COMPILE_DEVICES`; the
scenario as given when it cannot be shrunk), writes no trace, and says each kernel as it
is compiled (:class:`native.compile_watch.CompileWatch`). TensorFlow's graphs are traced
per process and cannot be cached this way; they take seconds, not minutes.
"""

from __future__ import annotations

import sys
from pathlib import Path

from cosim.exit_codes import EXIT_OK

COMPILE_DEVICES = 8
"""Devices of the shrunk scenario: enough for every partition of the shipped scenarios
(a device's data, the cohort's sums), few enough that the round costs seconds."""

SHRINK = ("rounds=1", "eval.every=1")
"""Overrides of the one round that compiles: it is evaluated, so the evaluation's
kernels are compiled too."""


def shrunk_scenario(scenario_file: str | None, overrides: list[str]):
    """``(scenario, shrunk)``: the scenario as given (validated, a ScenarioError raised
    as ``cosim run`` would) and the one round that compiles its kernels: ``rounds=1``,
    ``eval.every=1`` and at most :data:`COMPILE_DEVICES` devices (the given number of
    devices when the scenario refuses fewer, e.g. explicit positions)."""
    from cosim.scenario import ScenarioError, load_scenario

    scenario = load_scenario(scenario_file, overrides)
    devices = min(scenario.cell.num_devices, COMPILE_DEVICES)
    try:
        shrunk = load_scenario(scenario_file, [*overrides, *SHRINK, f"cell.num_devices={devices}"])
    except ScenarioError:
        shrunk = load_scenario(scenario_file, [*overrides, *SHRINK])
    return scenario, shrunk


def cache_place() -> str:
    """Where Numba keeps its cache: ``NUMBA_CACHE_DIR``, or beside the installed modules."""
    from numba.core import config

    return config.CACHE_DIR or "__pycache__ beside the installed modules (NUMBA_CACHE_DIR unset)"


def compile_command(scenario_file: str | None, overrides: list[str]) -> int:
    """Compile the kernels ``cosim run SCENARIO --set ...`` would compile, one line per
    kernel on stderr and a summary on stdout; 0 when the round ran (a bad scenario
    raises ScenarioError, exit 2, before TensorFlow is imported)."""
    from native.compile_watch import CompileWatch
    from native.tensorflow_import import import_for_command

    scenario, shrunk = shrunk_scenario(scenario_file, overrides)
    print(f"cosim compile: {scenario.name}: one round of {shrunk.cell.num_devices} devices "
          "compiles its kernels once for this machine; from a cold cache about 2 minutes "
          "on 2 cores, seconds from the cache", file=sys.stderr, flush=True)
    import_for_command()
    from cosim.engine import Engine

    def say(line: str) -> None:
        print(f"cosim compile: {line}", file=sys.stderr, flush=True)

    import tempfile

    # the round writes nothing beside the real run's trace: a streamed round's per-device
    # tables go to a scratch directory, removed after
    with tempfile.TemporaryDirectory(prefix="cosim-compile-") as scratch, CompileWatch(say=say) as watch:
        trace = shrunk.trace.model_copy(update={"path": str(Path(scratch) / "compile.h5")})
        engine = Engine(shrunk.model_copy(update={"trace": trace}))
        engine.run_round(0, engine.initial_state())
    print(f"cosim compile: {watch.summary()}; Numba's cache: {cache_place()}")
    return EXIT_OK
