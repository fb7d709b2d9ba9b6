"""``cosim run``: the engine, the trace and the progress display together.

This module imports the engine, hence TensorFlow; ``cosim validate`` and the other
commands that do not train live in the command line (``cli.py``) and never import it.

The engine's records carry the running channel-use totals of every round
(``cumulative_uplink_symbols``, ``cumulative_downlink_symbols`` and their sum
``cumulative_channel_uses``, all OFDM symbols, and the uplink's
``cumulative_uplink_seconds`` and ``cumulative_uplink_energy_j``;
:meth:`cosim.engine.Engine.rounds`, :class:`cosim.channel_uses.ChannelUses`);
the run keeps them across ``--resume`` in the checkpoint's attributes. It also watches the proposed method's
``precision_rel_change`` and says once when phase 1 is inert
(:class:`cosim.inert_precision.InertPrecisionWatch`).
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cosim.display_names import metric_label
from cosim.divergence import DivergenceWatch, SimulationDiverged, replay_divergence
from cosim.engine import ChannelUses, Engine, RoundRecord
from cosim.exit_codes import EXIT_DIVERGED, EXIT_OK, EXIT_USAGE
from cosim.inert_precision import InertPrecisionWatch
from cosim.printable import printable
from cosim.scenario import Scenario, check_resources, load_scenario, scenario_to_toml
from cosim.trace import (
    EVAL_COLUMNS,
    POSTERIOR_MEAN_COLUMNS,
    RELIABILITY_SERIES,
    TraceError,
    TraceTarget,
    TraceWriter,
    check_trace_target,
)
from native.compile_watch import CompileWatch
from native.table_files import drop_table_files


class SetupError(Exception):
    """The scenario is valid but cannot be set up (missing dataset files, a partition
    that asks for more samples than exist, ...); raised before anything is written."""


@dataclass
class RunSummary:
    """What a finished (or stopped) run reports."""

    trace_path: Path
    completed_rounds: int
    final_accuracy: float
    final_ece: float
    channel_uses: float
    wall_s: float
    diverged: bool = False


def _last_evaluation(path: Path) -> tuple[float, float]:
    """The test accuracy and ECE of the trace's last evaluated round (NaN, NaN if none)."""
    from cosim.trace import read_trace

    rounds = read_trace(path).rounds
    accuracy = rounds.get("test_accuracy")
    if accuracy is None or not np.isfinite(accuracy).any():
        return math.nan, math.nan
    last = int(np.flatnonzero(np.isfinite(accuracy))[-1])
    return float(accuracy[last]), float(rounds.get("ece", np.full(last + 1, math.nan))[last])


COMPILE_NOTE = ("about 2 minutes from a cold cache on 2 cores (the quickstart's round 0 took "
                "134 s on 2026-12-01, other work running), seconds from the cache")
"""What the first round of a process costs beyond the others, said before it starts:
Numba compiles the local training's and the PHY's kernels on their first call and
caches them (``native/numba_cache.py``); TensorFlow traces its graphs."""


class Progress:
    """A tqdm bar on a terminal; plain periodic lines otherwise (logs, CI, pipes)."""

    def __init__(self, total: int, initial: int, name: str, stream=None):
        self.stream = stream or sys.stderr
        self.total, self.name = total, name
        self.first = initial  # this process's first round: it compiles the kernels
        self.bar = None
        if self.stream.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=total, initial=initial, desc=name, unit="round", file=self.stream)
        self.last_accuracy = math.nan

    def update(self, record: RoundRecord, channel_uses: float) -> None:
        if record.evaluated:
            self.last_accuracy = record.scalars["test_accuracy"]
        text = f"acc={self.last_accuracy:.3f} uses={channel_uses:.3g}"
        if record.round == self.first:  # its time apart: the compile is in it, not in the rest
            self.message(f"[{self.name}] round {record.round + 1}/{self.total} {text} (round "
                         f"{record.round}: {record.scalars['wall_s']:.1f} s, the kernels' compile "
                         "included; the rounds after it are timed apart)")
        if self.bar is not None:
            self.bar.set_postfix_str(text, refresh=False)
            self.bar.update(1)
        elif record.round != self.first and (record.evaluated or record.round + 1 == self.total):
            print(
                f"[{self.name}] round {record.round + 1}/{self.total} {text} "
                f"({record.scalars['wall_s']:.2f} s/round)",
                file=self.stream,
                flush=True,
            )

    def message(self, text: str) -> None:
        """Print a line to the stream without breaking the bar."""
        if self.bar is not None:
            self.bar.write(text, file=self.stream)
        else:
            print(text, file=self.stream, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


class TensorBoardScalars:
    """Every finite scalar of a committed round as a TensorBoard summary
    (``tf.summary.scalar``): the tag is the trace's ``/rounds`` column name (its
    description the display name, :func:`cosim.display_names.metric_label`; both with
    their control characters shown as escapes, ``\\x1b``, as the command line shows
    them: :func:`cosim.printable.printable`), the step is the round (from 0). Rounds
    redone after a resume are written again with the same step (the same values: a
    resumed run equals an uninterrupted one)."""

    def __init__(self, directory: str | Path):
        import tensorflow as tf

        self._tf = tf
        self.directory = Path(directory)
        try:  # creates the directory and the event file now: a fault is met here
            self._writer = tf.summary.create_file_writer(str(directory))
            self._writer.flush()
        except (tf.errors.OpError, OSError) as exc:
            raise SetupError(f"--tensorboard {directory}: cannot write TensorBoard summaries "
                             f"there: {_tensorflow_reason(exc)}") from None

    def write(self, record) -> None:
        """Write ``record``'s finite scalars; :class:`TensorBoardError` (one line) when
        the event file cannot be written."""
        try:
            with self._writer.as_default(step=int(record.round)):
                for name, value in record.scalars.items():
                    value = float(value)
                    if math.isfinite(value):
                        self._tf.summary.scalar(printable(name), value,
                                                description=printable(metric_label(name)))
            self._writer.flush()
        except (self._tf.errors.OpError, OSError) as exc:
            raise TensorBoardError(_tensorflow_reason(exc)) from None

    def close(self) -> None:
        """Close the event file; a fault now (a full disk) is ignored: the summaries
        written so far stay, the trace holds every round."""
        try:
            self._writer.close()
        except (self._tf.errors.OpError, OSError):
            pass


class TensorBoardError(Exception):
    """An event file that cannot be written (one line: the system's reason)."""


def _tensorflow_reason(exc: BaseException) -> str:
    """The system's reason in a TensorFlow I/O error, in one line: TensorFlow says
    ``{{function_node ...}} PATH; REASON [Op:...]`` (or ``REASON`` after the last ``; ``
    of its first line)."""
    text = getattr(exc, "message", None) or str(exc)
    first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    reason = first.rpartition("; ")[2].split(" [Op:")[0].strip()
    return reason or first


def run_scenario(
    scenario: Scenario,
    *,
    resume: bool = False,
    overwrite: bool = False,
    progress: bool = True,
    engine: Engine | None = None,
    stop_on_divergence: bool = True,
    tensorboard_dir: str | Path | None = None,
    source: str | None = None,
) -> RunSummary:
    """Run ``scenario`` to its last round, appending one trace record per round.

    With ``resume`` the run continues from the trace's last completed round, from
    the model state checkpointed with it; the result equals an uninterrupted run,
    also when ``scenario.rounds`` is larger than the trace's (the run is extended).
    The trace path is checked before the set-up (:func:`cosim.trace.check_trace_target`),
    and the trace appears under its name complete with its header and static tables
    (:meth:`TraceWriter.create`). Every record holds ``cumulative_channel_uses``,
    ``cumulative_uplink_symbols``, ``cumulative_downlink_symbols``,
    ``cumulative_uplink_seconds`` and ``cumulative_uplink_energy_j``
    (:meth:`Engine.rounds` with this run's :class:`~cosim.channel_uses.ChannelUses`, resumed
    from the checkpoint) and the run warns once on stderr when phase 1 is inert
    (:class:`InertPrecisionWatch`). A diverged round (:mod:`cosim.divergence`) is
    written, then the run stops (``summary.diverged``); with ``stop_on_divergence``
    False it says so once and goes on. A ``resume`` of a trace whose committed rounds
    hold a diverged one runs nothing and leaves the file as it is (``summary.diverged``,
    the reason on stderr), unless ``stop_on_divergence`` is False. With
    ``tensorboard_dir`` every committed round's finite scalars are also written as
    TensorBoard summaries (:class:`TensorBoardScalars`).
    With ``privacy.target_epsilon`` a resumed run holds its remaining rounds to the floor
    its trace's rounds leave (:func:`cosim.privacy.refuse_spent_target`: an extended run's
    floor planned against the committed rounds; refused, before anything is written, when
    they already spent the target). ``source`` names the scenario in such a refusal.
    """
    resumed_privacy = None
    if scenario.privacy is not None:  # a target no noise can meet: refused before anything
        from cosim.privacy import refuse_over_target, refuse_spent_target

        refuse_over_target(scenario, source)
        if resume and scenario.privacy.target_epsilon is not None and scenario.trace_path.exists():
            resumed_privacy = refuse_spent_target(scenario, scenario.trace_path, source)
    target = check_trace_target(scenario.trace_path, resume=resume, overwrite=overwrite)
    _check_table_disk(scenario)
    scenario_text = scenario_to_toml(scenario)
    # before the trace: a TensorBoard directory that cannot be written is a SetupError
    board = TensorBoardScalars(tensorboard_dir) if tensorboard_dir is not None else None
    try:
        return _run(scenario, target, scenario_text, progress=progress, engine=engine,
                    stop_on_divergence=stop_on_divergence, board=board,
                    resumed_privacy=resumed_privacy)
    finally:
        if board is not None:
            board.close()


def _check_table_disk(scenario: Scenario) -> None:
    """A run whose rounds stream their devices keeps its algorithm's per-device tables on
    disk beside the trace: refused (:class:`cosim.scenario.ScenarioError` naming
    ``runtime.devices_in_memory`` and the bytes) when that disk cannot hold them
    (:func:`cosim.scenario.derived.check_table_disk`)."""
    from cosim.scenario.derived import check_table_disk, devices_in_memory, scenario_num_params

    d = scenario_num_params(scenario)
    check_table_disk(scenario, d, devices_in_memory(scenario, d))


def _run(scenario: Scenario, target: TraceTarget, scenario_text: str, *, progress: bool,
         engine: Engine | None, stop_on_divergence: bool, board: TensorBoardScalars | None,
         resumed_privacy=None) -> RunSummary:
    """:func:`run_scenario` once its trace target is decided and its TensorBoard writer
    (or None) is made: the trace opened (resumed) or created, the state restored, then
    the loop over the rounds, each appended, committed and shown to the
    :class:`RoundObservers`."""
    path = target.path
    writer, checkpoint, start, held = None, None, 0, None
    if target.resumes:
        if stop_on_divergence:  # read only: a trace that holds a diverged round is left as it is
            refused = _held_divergence(path)
            if refused is not None:
                return refused
        writer, checkpoint, start = _resumed_trace(path, scenario, scenario_text)
        if not stop_on_divergence:  # going on past a diverged round: said once, below
            held = replay_divergence(writer.round_columns(), start)
    elif target.action == "create_asked_resume":
        print(f"cosim run: {path} does not exist yet; starting a new run", file=sys.stderr)
    started = time.perf_counter()
    try:
        engine = engine or Engine(scenario)
    except (ValueError, FileNotFoundError) as error:
        raise SetupError(str(error)) from error
    finally:
        if writer is not None and engine is None:
            writer.close()
    if writer is None:
        writer = _new_trace(target, scenario, scenario_text, engine)
        drop_table_files(path)  # an overwritten trace's per-device tables, if any
    try:  # a refusal here (a damaged checkpoint, a stored multiplier) closes the trace as it was
        initial, uses = _restored_state(engine, checkpoint, writer, path)
        tables = _table_store(engine)
        if tables is not None:  # versions no checkpoint refers to: an interrupted round's, an old run's
            tables.keep(initial)
        _resume_clock(engine, writer, start)
        privacy = _privacy_account(scenario, engine, writer, start, resumed_privacy)
    except BaseException:
        writer.close()
        raise
    observers = RoundObservers(scenario, writer, start, progress=progress, board=board)
    divergence = DivergenceWatch(reference_loss=_first_loss(writer, start))
    if held is not None:
        observers.say(f"cosim run: warning: {path}: {held}; going on from round {start} "
                      "(--continue-on-divergence)")
    try:
        last_acc, last_ece, diverged, completed = _round_loop(
            scenario, engine, writer, observers, engine.rounds(
                initial, start_round=start, divergence=divergence, channel_uses=uses, **privacy),
            uses, start, held is not None, stop_on_divergence, checkpointed=initial)
    finally:
        observers.close()
        writer.close()
    if math.isnan(last_acc) and completed > 0:  # nothing evaluated now: the trace's last
        last_acc, last_ece = _last_evaluation(path)
    return RunSummary(trace_path=path, completed_rounds=completed, final_accuracy=last_acc,
                      final_ece=last_ece, channel_uses=uses.total,
                      wall_s=time.perf_counter() - started, diverged=diverged)


def _round_loop(scenario: Scenario, engine: Engine, writer: TraceWriter,
                observers: RoundObservers, rounds, uses: ChannelUses, start: int,
                diverged: bool, stop_on_divergence: bool, checkpointed=None) -> tuple[float, float, bool, int]:
    """Append, commit (with a checkpoint every ``trace.checkpoint_every`` rounds and at
    the last) and show every round ``rounds`` (:meth:`Engine.rounds`) yields; stop after
    the first diverged one when ``stop_on_divergence``. ``(last accuracy, last ECE,
    diverged, completed rounds)``, NaN where nothing was evaluated.

    With per-device tables on disk (:mod:`learning.device_table`), once a round is
    committed only the versions of the newest committed checkpoint's state
    (``checkpointed``: the state the run started from until a round writes one) and of
    the current state are kept."""
    last_acc, last_ece, completed = math.nan, math.nan, start
    tables = _table_store(engine)
    for state, record in rounds:
        writer.append(record)  # record.scalars hold uses' cumulative_* totals of its round
        due = (record.round + 1) % scenario.trace.checkpoint_every == 0 or record.round + 1 == scenario.rounds
        writer.commit_round(record.round, checkpoint=engine.algorithm.state_to_arrays(state) if due else None,
                            checkpoint_attrs=uses.attrs())
        if tables is not None:  # the versions the trace's checkpoint no longer refers to
            checkpointed = state if due else checkpointed
            tables.keep(checkpointed, state)
        completed = record.round + 1
        if record.evaluated:
            last_acc, last_ece = record.scalars["test_accuracy"], record.scalars["ece"]
        observers.committed(record, uses.total)
        if record.divergence and not diverged:
            diverged = True
            error = SimulationDiverged(record.round, record.divergence, engine.divergence_advice())
            if stop_on_divergence:
                observers.say(f"cosim run: stopped: {error}. The trace holds every round up to and "
                              f"including round {error.round}; `cosim run --overwrite "
                              "--continue-on-divergence` runs it again and goes on past it.")
                break
            observers.say(f"cosim run: warning: {error}; going on (--continue-on-divergence)")
    return last_acc, last_ece, diverged, completed


def _held_divergence(path: Path) -> RunSummary | None:
    """The summary of a resume refused because the trace's committed rounds hold a
    diverged one (:func:`cosim.divergence.replay_divergence`; resuming would go on past
    it): nothing run, the file not opened for writing, the reason on stderr. None when no
    committed round diverged, or when the trace does not read (the resume then says why)."""
    from cosim.trace import TraceError, read_trace

    try:
        trace = read_trace(path)
    except TraceError:
        return None
    held = replay_divergence(trace.rounds, trace.completed_rounds)
    if held is None:
        return None
    print(f"cosim run: stopped: {path}: {held}. Resuming would go on past that round, so "
          "nothing was run; `cosim run --resume --continue-on-divergence` goes on from the "
          "trace's last checkpoint, `--overwrite --continue-on-divergence` runs it again "
          "from round 0.", file=sys.stderr)
    uses = trace.rounds.get("cumulative_channel_uses")
    acc, ece = _last_evaluation(path)
    return RunSummary(trace_path=path, completed_rounds=trace.completed_rounds,
                      final_accuracy=acc, final_ece=ece,
                      channel_uses=float(uses[-1]) if uses is not None and len(uses) else math.nan,
                      wall_s=0.0, diverged=True)


class RoundObservers:
    """What watches a run's committed rounds without changing them: the progress display
    (:class:`Progress`, or plain lines on stderr), the TensorBoard summaries
    (:class:`TensorBoardScalars`, dropped with one warning when its event file fails)
    and the inert-precision watch (:class:`InertPrecisionWatch`, its streak resumed
    from the trace's committed ``precision_rel_change``); with ``privacy.target_epsilon``
    one warning at the first round whose ``privacy_epsilon`` is above it."""

    def __init__(self, scenario: Scenario, writer: TraceWriter, start: int, *, progress: bool,
                 board: TensorBoardScalars | None):
        history = writer.column("precision_rel_change") if start > 0 else None
        self.watch = InertPrecisionWatch(history=None if history is None else history.tolist(),
                                         current=scenario.algorithm.covariance_parameter)
        self.board = board
        self.target = None if scenario.privacy is None else scenario.privacy.target_epsilon
        self.bar = Progress(scenario.rounds, start, scenario.name) if progress else None
        if progress:  # what [runtime]'s "auto" became
            resolved = scenario.resolved_runtime()
            self.say(f"local training: {resolved.backend} backend, {resolved.noise} noise"
                     + (", XLA" if resolved.jit_compile else ""))
            self.say(f"round {start} compiles the kernels (Numba's, cached on disk for later "
                     f"runs, and TensorFlow's graphs): {COMPILE_NOTE}; `cosim compile` "
                     "does it ahead")
        self.start = start
        self.compiling = CompileWatch(say=lambda line: self.say(f"kernels: {line}")) \
            if progress else None
        if self.compiling is not None:
            self.compiling.__enter__()

    def _compiled(self) -> None:
        """Stop saying the kernels compiled (after the process's first round)."""
        if self.compiling is not None:
            self.compiling.__exit__(None, None, None)
            self.say(f"kernels: {self.compiling.summary()}")
            self.compiling = None

    def say(self, text: str) -> None:
        """One line on stderr (through the bar when there is one)."""
        if self.bar is not None:
            self.bar.message(text)
        else:
            print(text, file=sys.stderr, flush=True)

    def committed(self, record: RoundRecord, channel_uses: float) -> None:
        """Show a committed round to every observer."""
        if record.round == self.start:
            self._compiled()
        if self.board is not None:
            try:
                self.board.write(record)
            except TensorBoardError as error:
                self.say(f"cosim run: warning: TensorBoard summaries stopped at round {record.round}"
                         f" ({self.board.directory}: {error}); the run goes on without them (the "
                         "trace holds every round)")
                self.board.close()
                self.board = None
        if self.bar is not None:
            self.bar.update(record, channel_uses)
        warning = self.watch.observe(record.round, record.scalars.get("precision_rel_change"))
        if warning is not None:
            self.say(warning)
        if self.target is not None and record.scalars.get("privacy_epsilon", 0.0) > self.target:
            self.say(f"cosim run: warning: round {record.round}'s privacy_epsilon "
                     f"{record.scalars['privacy_epsilon']:.6g} is above privacy.target_epsilon = "
                     f"{self.target:g} (docs/privacy.md)")
            self.target = None  # said once

    def close(self) -> None:
        if self.compiling is not None:  # the first round did not commit
            self.compiling.__exit__(None, None, None)
            self.compiling = None
        if self.bar is not None:
            self.bar.close()


def _privacy_account(scenario: Scenario, engine: Engine, writer: TraceWriter, start: int,
                     resumed=None) -> dict:
    """``{"privacy": account}`` for :meth:`Engine.rounds` with ``[privacy]`` (the ledger,
    rounds ``0 .. start-1`` replayed from the trace's committed rows,
    :meth:`cosim.privacy.PrivacyAccount.replay`), else ``{}`` (an engine without it keeps
    its interface). With ``privacy.target_epsilon`` and ``start > 0`` the uplink is held to
    the account's floor (``resumed``: ``(start, account)`` of
    :func:`cosim.privacy.refuse_spent_target`, made before the trace was opened; made again
    from the trace when its start differs)."""
    if scenario.privacy is None:
        return {}
    if scenario.privacy.target_epsilon is not None and start > 0:
        from cosim.privacy import resumed_noise_plan, stored_rounds

        if resumed is not None and resumed[0] == start:
            account = resumed[1]
        else:
            account = resumed_noise_plan(scenario, writer.column, start,
                                         stored_rounds(writer.stored_scenario),
                                         list(engine.uplink.grids), engine.num_params,
                                         str(scenario.trace_path))
        privacy = dataclasses.replace(engine.uplink.scheme.privacy, noise_floor=account.noise_floor)
        engine.uplink.scheme = dataclasses.replace(engine.uplink.scheme, privacy=privacy)
        return {"privacy": account}
    account = engine.privacy_account()
    if start > 0:
        account.replay(writer.column, start, str(scenario.trace_path))
    return {"privacy": account}


def _resumed_trace(path: Path, scenario: Scenario, scenario_text: str):
    """The trace at ``path`` opened to resume (:meth:`TraceWriter.resume`), extended to
    ``scenario.rounds`` (:func:`_extend_rounds`): ``(writer, checkpoint, start)``; a
    warning on stderr when other code wrote it."""
    writer, checkpoint, start = TraceWriter.resume(path, scenario_text=scenario_text, rounds_may_grow=True)
    if writer.version_changes:
        print(f"cosim run: warning: {path} was written by other code ("
              + ", ".join(f"{name} {old} -> {new}" for name, (old, new)
                          in sorted(writer.version_changes.items()))
              + f"); rounds from {start} on are recorded in its resumed_with_versions "
              "attribute", file=sys.stderr)
    try:
        _extend_rounds(writer, scenario, scenario_text)
    except BaseException:
        writer.close()
        raise
    return writer, checkpoint, start


def _new_trace(target: TraceTarget, scenario: Scenario, scenario_text: str, engine: Engine
               ) -> TraceWriter:
    """The new trace (:meth:`TraceWriter.create`) with the world's static tables;
    :class:`SetupError` first when round 0's multicast would fail (a zero rate)."""
    world = engine.world
    snr = np.float32(scenario.downlink.bs_tx_power_w * float(np.min(world.path_gain))
                     / scenario.power.noise_power_w)
    if not np.log2(np.float32(1.0) + snr) > 0:
        raise SetupError(
            f"power.noise_power_dbm = {scenario.power.noise_power_dbm:g}: the farthest "
            f"device's downlink SNR is {float(snr):.3g} (downlink.bs_tx_power_dbm = "
            f"{scenario.downlink.bs_tx_power_dbm:g}), a zero rate in float32: nothing "
            "can be multicast; lower the noise or raise the BS power")
    return TraceWriter.create(
        target.path, scenario_text=scenario_text, seed=scenario.seed, overwrite=target.replaces,
        devices={"position_m": world.deployment.positions_m, "distance_m": world.deployment.distances_m,
                 "path_gain": world.path_gain, "num_samples": world.partition.num_samples,
                 "label_hist": world.label_histogram},
        name=scenario.name, num_params=engine.num_params, algorithm=scenario.algorithm.name,
        **_channel_trace_attrs(world))


def _channel_trace_attrs(world) -> dict:
    """The channel's ``trace_attrs`` (a ray-traced drop's cache entry); none without (or
    without an uplink: the tests' stand-ins)."""
    return dict(getattr(getattr(getattr(world, "uplink", None), "channel", None), "trace_attrs", {}))


def _table_store(engine: Engine):
    """The store of the algorithm's per-device tables on disk
    (:class:`learning.device_table.TableStore`), None when it holds them in memory."""
    return getattr(engine.algorithm, "table_store", None)


def _restored_state(engine: Engine, checkpoint, writer: TraceWriter, path: Path):
    """``(state, ChannelUses)``: the initial ones, or the checkpoint's; :class:`SetupError`
    (the writer closed) when the checkpoint does not fit the scenario or a device table it
    refers to is not on disk (naming the file)."""
    from learning.device_table import MissingTableError

    if checkpoint is None:
        return engine.initial_state(), ChannelUses()
    _refuse_other_table_form(engine, checkpoint, writer, path)
    try:
        state = engine.algorithm.state_from_arrays(checkpoint.arrays)
        expected = engine.algorithm.state_to_arrays(engine.initial_state())
        wrong = [f"{name} {np.shape(checkpoint.arrays.get(name))} (expected {np.shape(value)})"
                 for name, value in expected.items()
                 if np.shape(checkpoint.arrays.get(name)) != np.shape(value)]
        if wrong:
            raise ValueError("arrays of the wrong shape: " + ", ".join(wrong))
        return state, ChannelUses.resumed(checkpoint.attrs, writer)
    except MissingTableError as error:
        writer.close()
        raise SetupError(f"cannot resume {path}: {error} (the run's per-device tables, "
                         "kept beside the trace while runtime.devices_in_memory streams the "
                         "round; use --overwrite to start again)") from None
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        writer.close()
        raise SetupError(f"cannot resume {path}: its checkpoint does not fit this scenario "
                         f"({type(error).__name__}: {error}); use --overwrite to start "
                         "again") from None


def _refuse_other_table_form(engine: Engine, checkpoint, writer: TraceWriter, path: Path) -> None:
    """:class:`SetupError` naming ``runtime.devices_in_memory`` (the writer closed) when the
    checkpoint's per-device tables are in the other form than this run's: on disk (the run
    streamed its devices, a ``[version, K, d]`` reference) against in memory (``[K, d]``),
    or the other way round; resume with the value the run had."""
    fields = getattr(engine.algorithm, "device_fields", lambda: ())()
    on_disk_now = _table_store(engine) is not None
    for name in fields:
        stored = np.shape(checkpoint.arrays.get(name))
        if len(stored) not in (1, 2) or (len(stored) == 1) == on_disk_now:
            continue
        value = engine.scenario.runtime.devices_in_memory
        then, now = (("held every device", "streams them") if on_disk_now else
                     ("streamed its devices (its per-device tables on disk)", "holds every device"))
        writer.close()
        raise SetupError(f"cannot resume {path}: the run {then}, and runtime.devices_in_memory = {value!r} "
                         f"now {now} (per-device table {name}); resume with the value the run had, or "
                         "use --overwrite to start again")


def _resume_clock(engine: Engine, writer: TraceWriter, start: int) -> None:
    """A run with moving devices (``[mobility]``) resumed at round ``start``: its clock set to
    that round's start (the trace's ``round_start_s + round_seconds`` of the round before),
    stepping through every earlier round's start as the run did."""
    moving = getattr(getattr(engine, "uplink", None), "moving", None)
    if start == 0 or moving is None:
        return
    begun, lasted = writer.column("round_start_s")[:start], writer.column("round_seconds")[:start]
    moving.resume([*begun.tolist(), float(begun[-1]) + float(lasted[-1])])


def _first_loss(writer: TraceWriter, start: int) -> float | None:
    """Round 0's committed ``train_loss`` of a resumed trace (the divergence watch's
    reference), else None."""
    losses = writer.column("train_loss") if start > 0 else None
    return float(losses[0]) if losses is not None and losses.size else None


def _extend_rounds(writer: TraceWriter, scenario: Scenario, scenario_text: str) -> None:
    """Make a resumed trace whose scenario had fewer rounds equal the start of a run
    made with ``scenario.rounds`` from the beginning.

    The old last round was evaluated because it was last (``Engine``: every
    ``eval.every`` rounds *and* after the last); a longer run evaluates it only when
    it is on the ``eval.every`` grid, so its evaluation cells are reset first, then
    the new scenario is recorded. Both steps are idempotent, so a kill between them
    is resumed to the same result. Nothing else of a run depends on its round count
    (the model's randomness is keyed by round, not by the total).
    """
    from cosim.limits import toml_loads

    old_rounds = int(toml_loads(writer.stored_scenario)["rounds"])  # checked by the resume
    if old_rounds == scenario.rounds:
        return
    last = old_rounds - 1
    if last < writer.completed_rounds and (last + 1) % scenario.eval.every != 0:
        writer.reset_cells(last, [*EVAL_COLUMNS, *POSTERIOR_MEAN_COLUMNS,
                                  *(f"reliability/{n}" for n in RELIABILITY_SERIES)])
    writer.set_attrs(scenario=scenario_text)
    writer.flush()


def run_command(
    scenario_file: str | None,
    overrides: list[str],
    *,
    resume: bool,
    overwrite: bool,
    plots: bool = True,
    stop_on_divergence: bool = True,
    tensorboard_dir: str | None = None,
) -> int:
    scenario = load_scenario(scenario_file, overrides)
    # a scenario too large for this machine is refused before anything is built
    check_resources(scenario, source=scenario_file or "<default quickstart>")
    if scenario.privacy is not None:  # a target no noise can meet: refused, naming the file
        from cosim.privacy import refuse_over_target

        refuse_over_target(scenario, scenario_file or "<default quickstart>")
    if tensorboard_dir is not None and Path(tensorboard_dir).exists() \
            and not Path(tensorboard_dir).is_dir():
        print(f"cosim run: --tensorboard {tensorboard_dir}: exists and is not a directory",
              file=sys.stderr)
        return EXIT_USAGE
    try:
        summary = run_scenario(scenario, resume=resume, overwrite=overwrite,
                               stop_on_divergence=stop_on_divergence,
                               tensorboard_dir=tensorboard_dir,
                               source=scenario_file or "<default quickstart>")
    except (TraceError, SetupError) as error:
        print(f"cosim run: {error}", file=sys.stderr)
        return EXIT_USAGE
    print(
        f"{scenario.name}: {summary.completed_rounds}/{scenario.rounds} rounds, "
        f"test accuracy {summary.final_accuracy:.4f}, ECE {summary.final_ece:.4f}, "
        f"{summary.channel_uses:.6g} channel uses (OFDM symbols), {summary.wall_s:.1f} s"
    )
    print(f"trace: {summary.trace_path}")
    if summary.completed_rounds > 0:  # what the trace says about the air and the posterior
        from cosim.health import health, health_lines

        try:
            for line in health_lines(health(summary.trace_path)):
                print(f"health: {line}")
        except TraceError as error:  # the run and its trace stand
            print(f"cosim run: no health summary: {error}", file=sys.stderr)
    status = EXIT_DIVERGED if summary.diverged else EXIT_OK
    if plots and summary.completed_rounds > 0:
        from cosim.plots import PlotError, plot_traces

        out = summary.trace_path.with_suffix("")
        out = out.parent / f"{out.name}-figures"
        try:
            for figure in plot_traces([summary.trace_path], out):
                print(f"figure: {figure}")
        except (PlotError, TraceError) as error:  # the run and its trace stand
            print(f"cosim run: no figures: {error}", file=sys.stderr)
    return status

