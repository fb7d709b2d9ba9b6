"""The notebook API: run a scenario from Python, get its results as pandas DataFrames.

::

    from cosim import api

    scenario = api.load_scenario("quickstart", {"rounds": 3, "algorithm.learning_rate": 0.02})
    result = api.run(scenario)       # the trace goes to a fresh temporary directory
    result.rounds                    # one row per round: channel uses, accuracy, NLL, ECE, ...
    result.per_device                # long form: round, device, quantity, phase, value
    result.devices                   # one row per device: position, distance, path gain, samples
    frames = api.to_pandas(result.trace_path)   # the same three frames from any trace file
    api.health(result.trace_path)    # did the air interface and the posterior behave? (a dict)

* :func:`load_scenario` takes a path or a shipped name (``cosim scenarios``) and
  overrides as a dict of dotted keys, validated exactly like ``cosim run --set``
  (:func:`cosim.scenario.load_scenario`).
* :func:`with_overrides` derives a validated variant of a scenario. pydantic's
  ``scenario.model_copy(update=...)`` does not validate (a table given as a dict stays a
  plain dict); :func:`run` re-validates whatever it is given, so such a copy fails there
  with the usual one-line message, or runs validated.
* :func:`run` runs a scenario with :func:`cosim.run.run_scenario` (the same trace,
  checkpoints and divergence stop as ``cosim run``) and returns a :class:`RunResult`:
  the three frames read back from the trace it wrote, plus the run's outcome.
* :func:`to_pandas` gives the frames of any trace (:class:`TraceFrames`), without
  TensorFlow.
* :func:`health` gives a trace's health summary as a dict (:func:`cosim.health.health`:
  the estimate's NMSE, the power budget, the posterior's movement, the worst device,
  divergence and its early signs, dropouts; ``flags`` name the docs that explain them),
  without TensorFlow.

Where :func:`run` writes its trace: by default in a new temporary directory
(``tempfile.mkdtemp``, kept after the run and named in ``result.trace_path``), so that
running a notebook cell again never collides with an earlier trace and nothing lands in
the working directory; pass ``trace_path=`` to keep it somewhere (``trace_path=
scenario.trace_path`` writes where ``cosim run`` would, ``cosim inspect`` / ``cosim
plot`` read it, and ``resume=True`` continues it).

Importing this module imports neither TensorFlow nor the engine (``to_pandas`` on a
laptop without them); :func:`run` imports them, and nothing of that import is printed
(:mod:`native.tensorflow_import`). When TensorFlow is not imported yet, :func:`run` first
sets the environment ``cosim run`` sets (``TF_CPU_ALLOCATOR_USE_BFC=true``, faster, and
``TF_CPP_MIN_LOG_LEVEL=3``, which hides TensorFlow's C++ log lines such as a GPU-less
machine's "failed call to cuInit"), each unless the environment already has it.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from cosim.health import health
from cosim.scenario import (
    Overrides,
    Scenario,
    ScenarioError,
    check_resources,
    load_scenario,
    with_overrides,
)
from cosim.trace import EVAL_COLUMNS, POSTERIOR_MEAN_COLUMNS, TraceData, read_trace
from native.tensorflow_import import import_for_command

__all__ = [
    "ROUND_COLUMNS_FIRST",
    "RunResult",
    "ScenarioError",
    "TraceFrames",
    "health",
    "load_scenario",
    "run",
    "to_pandas",
    "with_overrides",
]

ROUND_COLUMNS_FIRST = (
    "round",
    "uplink_symbols",
    "downlink_symbols",
    "channel_uses",
    "uplink_seconds",
    "uplink_energy_j",
    "cumulative_uplink_symbols",
    "cumulative_downlink_symbols",
    "cumulative_channel_uses",
    "cumulative_uplink_seconds",
    "cumulative_uplink_energy_j",
    *EVAL_COLUMNS,
    *POSTERIOR_MEAN_COLUMNS,
    "train_loss",
)
"""The leading columns of :attr:`TraceFrames.rounds` (those the trace has, in this
order); the other ``/rounds`` columns follow by name."""


@dataclass(frozen=True, eq=False)
class TraceFrames:
    """A trace's committed rounds as pandas DataFrames (:func:`to_pandas`).

    Attributes
    ----------
    trace_path : Path
        The trace file.
    rounds : pandas.DataFrame
        One row per committed round, in order; a column per ``/rounds`` scalar of the
        trace (``docs/trace.md``: names, units) plus ``channel_uses``. Leading
        columns (:data:`ROUND_COLUMNS_FIRST`): ``round`` (int64, 0, 1, ...),
        ``uplink_symbols``, ``downlink_symbols`` and ``channel_uses`` (their sum: the
        round's OFDM symbols), ``uplink_seconds`` and ``uplink_energy_j`` (the round's
        uplink air time, s, and the devices' transmit energy, J),
        ``cumulative_uplink_symbols``, ``cumulative_downlink_symbols``,
        ``cumulative_channel_uses``, ``cumulative_uplink_seconds``,
        ``cumulative_uplink_energy_j`` (up to and including the round), ``test_accuracy``, ``test_nll``, ``ece`` (NaN in rounds
        without evaluation: ``rounds.dropna(subset=["test_accuracy"])`` keeps the
        evaluated ones), ``posterior_mean_accuracy``, ``posterior_mean_nll``,
        ``posterior_mean_ece`` (the posterior mean's prediction; NaN also for
        algorithms without a posterior), ``train_loss``; the other columns (per-phase air-interface
        diagnostics, ``wall_s``, ...) by name. The index is a RangeIndex equal to
        ``round``.
    per_device : pandas.DataFrame
        The ``[T, K]`` per-device series (``/rounds/per_device``) in long form, one row
        per (quantity, phase, round, device), sorted so: ``round`` (int64), ``device``
        (int64, 0 .. K-1, the order of :attr:`devices`), ``quantity`` (str: the
        series' name without its phase, e.g. ``tx_power_w``, ``local_distortion``,
        ``mean_channel_gain``), ``phase`` (str: the algorithm's phase, e.g. ``rho``,
        ``nu``, ``delta``; ``""`` for per-round quantities without one,
        ``mean_channel_gain`` and ``csi_nmse``), ``value`` (float64, in the series'
        unit). Empty (these columns, no rows) for a trace written with
        ``trace.per_device = false``.
    devices : pandas.DataFrame
        The static ``/devices`` tables, one row per device: ``device`` (int64), ``x_m``
        and ``y_m`` (position, BS at the origin), ``distance_m``, ``path_gain``,
        ``num_samples`` (whichever the trace holds); ``label_hist`` [K, C] stays in
        :func:`cosim.trace.read_trace`'s ``devices``. Join with
        ``per_device.merge(devices, on="device")``.
    """

    trace_path: Path
    rounds: pd.DataFrame
    per_device: pd.DataFrame
    devices: pd.DataFrame

    @property
    def completed_rounds(self) -> int:
        """T, the number of committed rounds (rows of :attr:`rounds`)."""
        return len(self.rounds)


@dataclass(frozen=True, eq=False)
class RunResult(TraceFrames):
    """What :func:`run` returns: the trace's frames (:class:`TraceFrames`) and the run.

    Attributes
    ----------
    scenario : Scenario
        The scenario that ran, validated, with ``trace.path`` naming the trace.
    diverged : bool
        The run stopped at (or, with ``stop_on_divergence=False``, went past) a
        diverged round (:mod:`cosim.divergence`); the trace holds that round.
    wall_s : float
        Wall time of the run [s], set-up included.
    """

    scenario: Scenario
    diverged: bool
    wall_s: float


def to_pandas(trace: str | Path | TraceData) -> TraceFrames:
    """The committed rounds of a trace as DataFrames (:class:`TraceFrames`).

    Parameters
    ----------
    trace : str, Path or TraceData
        A trace file (safe while a run is writing it: committed rounds only), or what
        :func:`cosim.trace.read_trace` returned for one.

    Returns
    -------
    TraceFrames
        ``rounds`` (one row per round), ``per_device`` (long form), ``devices``.

    Raises
    ------
    cosim.trace.TraceError
        A file that is not a readable trace (one line naming it).
    """
    data = trace if isinstance(trace, TraceData) else read_trace(trace)
    return TraceFrames(
        trace_path=Path(data.path),
        rounds=_rounds_frame(data),
        per_device=_per_device_frame(data),
        devices=_devices_frame(data),
    )


def run(
    scenario: Scenario | str | Path | None,
    overrides: Overrides | None = None,
    *,
    trace_path: str | Path | None = None,
    overwrite: bool = False,
    resume: bool = False,
    progress: bool = True,
    stop_on_divergence: bool = True,
) -> RunResult:
    """Run a scenario to its last round and return its results as DataFrames.

    The run is :func:`cosim.run.run_scenario`'s, as ``cosim run`` makes it: one trace
    record and checkpoint per round, a stop at a diverged round (unless
    ``stop_on_divergence`` is False), ``resume`` continuing a trace bit-for-bit.

    Parameters
    ----------
    scenario : Scenario, str, Path or None
        A scenario (re-validated: a ``model_copy(update=...)`` result is checked like a
        file), a TOML file or a shipped name (``"quickstart"``), or None for the
        default quickstart.
    overrides : mapping of str to value, or sequence of str, optional
        Dotted keys to change first, validated like ``--set``
        (:func:`cosim.scenario.load_scenario`): ``{"rounds": 3}``.
    trace_path : str or Path, optional
        Where the trace goes (parents created). Default: ``NAME-seedSEED.h5`` in a new
        temporary directory, kept after the run; the scenario's own ``trace.path`` is
        used only when passed here (``trace_path=scenario.trace_path``). The scenario
        that runs has ``trace.path`` set to it, so the trace records where it is.
    overwrite : bool
        Replace an existing trace at ``trace_path`` (only a trace of this project).
    resume : bool
        Continue the trace at ``trace_path`` (required then) from its last completed
        round; a larger ``rounds`` extends it.
    progress : bool
        A progress line per evaluation on stderr (a bar on a terminal).
    stop_on_divergence : bool
        Stop after writing a diverged round (True, as ``cosim run``) or go on.

    Returns
    -------
    RunResult
        The trace's frames (:func:`to_pandas`), the scenario that ran, ``diverged``,
        ``wall_s``.

    Raises
    ------
    cosim.scenario.ScenarioError
        An invalid scenario or override; :class:`~cosim.scenario.ScenarioTooLarge` when
        its memory estimate exceeds the machine's. Nothing is written.
    cosim.trace.TraceError
        The trace cannot be written (it exists and neither ``overwrite`` nor ``resume``
        is given, a directory at the path, ...); nothing is written.
    cosim.run.SetupError
        The scenario cannot be set up (missing dataset files, too few samples).
    ValueError
        ``resume`` without ``trace_path``.
    """
    scenario, trace_path, made = _scenario_and_trace_path(scenario, overrides, trace_path,
                                                          resume=resume)
    try:
        scenario, summary = _run_at(scenario, trace_path, resume=resume, overwrite=overwrite,
                                    progress=progress, stop_on_divergence=stop_on_divergence)
    except BaseException:
        if made is not None:
            try:
                made.rmdir()  # only when empty: a trace it holds stays
            except OSError:
                pass
        raise
    frames = to_pandas(summary.trace_path)
    return RunResult(trace_path=frames.trace_path, rounds=frames.rounds,
                     per_device=frames.per_device, devices=frames.devices, scenario=scenario,
                     diverged=summary.diverged, wall_s=summary.wall_s)


def _scenario_and_trace_path(
    scenario: Scenario | str | Path | None, overrides: Overrides | None,
    trace_path: str | Path | None, *, resume: bool,
) -> tuple[Scenario, str | Path, Path | None]:
    """:func:`run`'s arguments checked: the validated scenario (overrides applied), the
    trace's path and the temporary directory made for it (None when ``trace_path`` is
    given). Raises ``ScenarioError`` for an invalid scenario, ``ValueError`` for
    ``resume`` without ``trace_path``; nothing is made then."""
    if isinstance(scenario, Scenario):
        scenario = with_overrides(scenario, overrides or {})
    else:
        scenario = load_scenario(scenario, overrides or ())
    made = None  # the temporary directory this call makes, removed if the run leaves it empty
    if trace_path is None:
        if resume:
            raise ValueError("resume=True needs trace_path, the trace to continue")
        made = Path(tempfile.mkdtemp(prefix=f"cosim-{scenario.name}-"))
        trace_path = made / f"{scenario.name}-seed{scenario.seed}.h5"
    return scenario, trace_path, made


def _run_at(scenario: Scenario, trace_path: str | Path, **options):
    """Run ``scenario`` with its ``trace.path`` set to ``trace_path`` (braces escaped, so
    the path is taken as written), after :func:`cosim.scenario.check_resources`, with
    :func:`cosim.run.run_scenario` and ``options`` (``resume``, ``overwrite``,
    ``progress``, ``stop_on_divergence``); ``(scenario that ran, run summary)``.
    TensorFlow and the engine are imported here."""
    template = str(Path(trace_path).expanduser()).replace("{", "{{").replace("}", "}}")
    scenario = with_overrides(scenario, {"trace.path": template})
    check_resources(scenario, source=repr(scenario.name))

    import_for_command()  # the command's environment, unless TensorFlow is loaded
    from cosim.run import run_scenario  # the engine: TensorFlow, learning, phy

    return scenario, run_scenario(scenario, **options)


# --------------------------------------------------------------------------- frames

def _rounds_frame(data: TraceData) -> pd.DataFrame:
    columns = dict(data.rounds)
    if "uplink_symbols" in columns and "downlink_symbols" in columns:
        columns["channel_uses"] = columns["uplink_symbols"] + columns["downlink_symbols"]
    order = [name for name in ROUND_COLUMNS_FIRST if name in columns]
    order += sorted(name for name in columns if name not in ROUND_COLUMNS_FIRST)
    return pd.DataFrame({name: columns[name] for name in order}, index=pd.RangeIndex(data.completed_rounds))


def _phases(data: TraceData) -> list[str]:
    """The algorithm's phases, from the per-phase ``delta_bar_<phase>`` columns (every
    phase has one: ``docs/trace.md``), longest name first."""
    names = [name.removeprefix("delta_bar_") for name in data.rounds if name.startswith("delta_bar_")]
    return sorted(names, key=len, reverse=True)


def _split_phase(name: str, phases: list[str]) -> tuple[str, str]:
    """``"tx_power_w_rho"`` -> ``("tx_power_w", "rho")``; ``("csi_nmse", "")`` without a phase."""
    for phase in phases:
        if name.endswith(f"_{phase}") and len(name) > len(phase) + 1:
            return name[: -len(phase) - 1], phase
    return name, ""


def _per_device_frame(data: TraceData) -> pd.DataFrame:
    """The long form of ``data.per_device``, sorted by (quantity, phase, round, device).
    Each series' rows are in (round, device) order already, so the series are put in
    (quantity, phase) order and written into the frame's columns one after the other,
    never sorted row by row nor joined (240 million rows for 100,000 devices, 200
    rounds and 12 series); the text columns are built from codes."""
    phases = _phases(data)
    keyed = sorted(((_split_phase(name, phases), values) for name, values in data.per_device.items()),
                   key=lambda item: item[0])
    total = sum(int(values.size) for _, values in keyed)
    columns = {"round": np.empty(total, np.int64), "device": np.empty(total, np.int64),
               "value": np.empty(total, np.float64)}
    names = {"quantity": sorted({q for (q, _), _ in keyed}), "phase": sorted({p for (_, p), _ in keyed})}
    codes = {key: np.empty(total, np.int32) for key in names}
    start = 0
    for (quantity, phase), values in keyed:
        rounds, devices = values.shape
        part = slice(start, start + values.size)
        columns["round"][part] = np.repeat(np.arange(rounds, dtype=np.int64), devices)
        columns["device"][part] = np.tile(np.arange(devices, dtype=np.int64), rounds)
        columns["value"][part] = np.asarray(values, np.float64).reshape(-1)
        codes["quantity"][part] = names["quantity"].index(quantity)
        codes["phase"][part] = names["phase"].index(phase)
        start = part.stop
    text = {key: _text_column(codes[key], names[key]) for key in names}
    return pd.DataFrame({"round": columns["round"], "device": columns["device"], **text,
                         "value": columns["value"]}, copy=False)


def _text_column(codes: np.ndarray, names: list[str]) -> pd.Series:
    """``names[codes]`` as the column pandas makes of Python str (its ``str`` dtype, Arrow
    strings, from pandas 3; ``object`` before), built by Arrow from the codes when it
    can: made of 24 million Python str, one such column took 1.0 s, from codes 0.25 s."""
    dtype = pd.Series([""]).dtype
    if isinstance(dtype, np.dtype):  # object
        return pd.Series(np.array(names, dtype=object)[codes], dtype=object)
    import pyarrow as pa

    decoded = pa.DictionaryArray.from_arrays(codes, pa.array(names, pa.large_string())).dictionary_decode()
    return pd.Series(decoded, dtype=dtype)


def _devices_frame(data: TraceData) -> pd.DataFrame:
    tables = data.devices
    sizes = {len(values) for values in tables.values() if np.ndim(values) >= 1}
    count = sizes.pop() if len(sizes) == 1 else 0
    columns: dict[str, np.ndarray] = {"device": np.arange(count, dtype=np.int64)}
    for name, values in tables.items():
        values = np.asarray(values)
        if values.ndim == 1 and len(values) == count:
            columns[name] = values
        elif name == "position_m" and values.shape == (count, 2):
            columns["x_m"], columns["y_m"] = values[:, 0], values[:, 1]
    first = [name for name in ("device", "x_m", "y_m") if name in columns]
    return pd.DataFrame({name: columns[name] for name in [*first, *(n for n in columns if n not in first)]})
