"""The ``cosim`` command: ``run | validate | compile | inspect | verify | plot | scenarios | study`` and ``--version``.

Only ``run`` and ``compile`` import TensorFlow (and with it Sionna, TensorFlow-Probability and the
learning and PHY modules); ``validate``, ``inspect``, ``plot``, ``scenarios`` and
``--version`` import none of them (nor does ``study``: its workers import TensorFlow,
the command does not), so they start in a fraction of a second
(``tests/cosim/test_cli_startup.py`` holds this, ``benchmarks/cli_startup.py`` times
it); ``run`` answers the refusals that need none (an existing trace, a bad key or value,
a bad path: :func:`_refuse_run_early`) before it imports TensorFlow, 0.9 s against 11-12
s when TensorFlow came first (2026-12-02, the tests' tiny scenario, load 4-5).
``validate`` gets d by arithmetic (:func:`cosim.scenario.scenario_num_params`), not from
a model.

TensorFlow's import-time noise on a machine without a GPU (absl's "All log
messages before absl::InitializeLog()" and the "Unable to register cuDNN/cuBLAS
factory" lines) is filtered only while TensorFlow is being imported, by the hook the
``cosim`` package installs (:mod:`native.tensorflow_import`); everything else TensorFlow
prints passes through. The command also sets ``TF_CPP_MIN_LOG_LEVEL=3`` (unless the
environment says otherwise), which hides TensorFlow's C++ log lines while it runs.

The command also turns on TensorFlow's BFC allocator for host memory
(``TF_CPU_ALLOCATOR_USE_BFC=true``, unless the environment already says
otherwise): without it every large tensor is a fresh ``mmap`` whose page faults
cost as much as the arithmetic (figures in ``benchmarks/README.md``). It changes no number,
only where buffers come from. Library users set it before importing TensorFlow
(:func:`cosim.api.run` sets both, as the command does).
"""

from __future__ import annotations

import argparse
import os
import sys
from importlib import metadata
from pathlib import Path

from cosim.exit_codes import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
)
from cosim.figure_command import (  # noqa: F401 (PLOT_AXES, PLOT_FORMATS: where tests find them)
    PLOT_AXES,
    PLOT_FORMATS,
    add_plot_parser,
    plot_command,
)
from cosim.usage import UsageError
from cosim.usage import existing_trace as _existing
from native.tensorflow_import import import_for_command

DISTRIBUTION = "aircomp-cosim"


def package_version() -> str:
    """The installed version of the ``aircomp-cosim`` distribution (importlib.metadata),
    or ``"unknown (not installed)"`` for a source tree used without installing it."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "unknown (not installed)"


class _VersionAction(argparse.Action):
    """``--version``: print ``aircomp-cosim VERSION`` on stdout and exit 0 (the version
    is looked up only when asked for)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS,
                 help="print the installed version and exit"):
        super().__init__(option_strings=option_strings, dest=dest, default=default, nargs=0,
                         help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"{DISTRIBUTION} {package_version()}")
        parser.exit()


EXAMPLES_RUN = """examples:
  cosim run                                   # the shipped quickstart scenario
  cosim run paper_mnist --set rounds=5        # a shipped scenario by name (`cosim scenarios`)
  cosim run scenarios/paper_mnist.toml --set rounds=5
  cosim run scenarios/imperfect_csi.toml --set csi.nmse_db=-5 --set seed=2
  cosim run scenarios/quickstart.toml --resume  # continue a killed run
  cosim run scenarios/quickstart.toml --resume --set rounds=60  # extend a finished run

exit status: 0 done, 2 bad input or a file fault (nothing written), 3 a round
diverged (NaN/Inf, or a loss 1000x round 0's; the trace holds it), 130 interrupted.
"""

EXAMPLES_VALIDATE = """examples:
  cosim validate scenarios/paper_mnist.toml
  cosim validate paper_mnist                  # a shipped scenario by name
  cosim validate scenarios/quickstart.toml --set power.tx_power_dbm=10
  cosim validate algs_mnist                   # a study: every point checked, its cost
  cosim validate algs_mnist --seeds 2 --rounds 5 --only algorithm.name=fedavg  # shrunk
"""

EXAMPLES_COMPILE = """One round of the scenario, shrunk to a few devices, compiles the Numba kernels its
runs reach and leaves them in Numba's on-disk cache (NUMBA_CACHE_DIR, or beside the
installed modules): a later `cosim run` of it starts its first round at once instead of
after about two minutes. Nothing is written but that cache.

examples:
  cosim compile                               # the shipped quickstart's kernels
  cosim compile paper_mnist
  cosim compile scenarios/quickstart.toml --set ofdm.domain=\"time\"
"""

EXAMPLES_SCENARIOS = """Each entry: the name `cosim run NAME` / `cosim validate NAME` take (a script's
file name for a .sh: run it with `bash PATH`), the file's first comment line, and
the installed file's path.

examples:
  cosim scenarios
  cosim validate paper_mnist
"""

EXAMPLES_INSPECT = """examples:
  cosim inspect runs/quickstart-seed1.h5
"""

EXAMPLES_VERIFY = """Each trace (or every run of a study directory) is ok, incomplete (fewer rounds than
planned: resume it), damaged (a dataset fails its checksum, cannot be read or holds a
number no run writes; named), unreadable (this user may not read the file) or not a
trace. Nothing is written; TensorFlow is not imported.

exit status: 0 all ok, 1 some incomplete (none damaged), 2 some damaged, unreadable or
not a trace.

examples:
  cosim verify runs/quickstart-seed1.h5
  cosim verify studies/power                 # every runs/*.h5 of a study
"""

EXAMPLES_STUDY = """examples:
  cosim study run study.toml --out studies/power          # worker processes on this machine
  cosim study run study.toml --out studies/power --address auto   # the cluster of `ray start`
  cosim study run study.toml --out studies/power --executor ray   # an embedded Ray, to try one
  cosim study run power_budget_quickstart --out studies/try --seeds 2 --rounds 5 \
      --only algorithm.name=bayes_aircomp,fedavg --set eval.every=1   # a shrunk try
  cosim study report studies/power --x uplink
  cosim study compact studies/power   # drop the finished runs' resume checkpoints

exit status of `study run`: 0 every run done, 1 some run failed or diverged (the others
complete; DIR/status.json says which and why), 2 bad input (nothing run) or a file the
study writes for itself that it cannot write (a full disk: runs stopped), 129 / 130 /
143 stopped by SIGHUP / SIGINT / SIGTERM (status.json says stopped). Run it again
to complete what is missing. File format: docs/studies.md.
"""


def _command(subparsers, name: str, help: str, epilog: str) -> argparse.ArgumentParser:
    """A subcommand whose ``--help`` ends with its examples (``epilog``, shown as written)."""
    return subparsers.add_parser(name, help=help, epilog=epilog,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)


def _parser() -> argparse.ArgumentParser:
    """The ``cosim`` argument parser: ``--version`` and one subparser per command, in
    the order ``cosim --help`` lists them (each added by its ``_add_*_parser``)."""
    parser = argparse.ArgumentParser(
        prog="cosim",
        description="Signal-level OFDM PHY co-simulation of Bayesian federated learning "
        "with over-the-air posterior aggregation.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Run `cosim COMMAND --help` for the options and examples of each command.",
    )
    parser.add_argument("--version", action=_VersionAction)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    _add_run_parser(sub)
    _add_validate_parser(sub)
    _add_scenario_args(_command(sub, "compile", "compile a scenario's kernels ahead, once for "
                                "this machine", EXAMPLES_COMPILE))
    _add_inspect_parser(sub)
    _add_verify_parser(sub)
    add_plot_parser(sub, _command)
    _add_study_parser(sub)
    _command(sub, "scenarios", "list the shipped scenarios and studies: name, description, path",
             EXAMPLES_SCENARIOS)
    return parser


def _add_scenario_args(p: argparse.ArgumentParser) -> None:
    """The scenario positional and ``--set`` of ``run`` and ``validate``."""
    p.add_argument(
        "scenario",
        nargs="?",
        default=None,
        help="scenario TOML file, or the name of a shipped scenario (`cosim scenarios`; "
        "default: the shipped quickstart scenario)",
    )
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY.PATH=VALUE",
        help="override one scenario key (TOML value syntax); repeatable",
    )


def _add_run_parser(sub) -> None:
    """``cosim run``: a scenario, ``--set``, ``--resume`` | ``--overwrite`` and the
    run's switches."""
    run = _command(sub, "run", "run a scenario and write its HDF5 trace and figures", EXAMPLES_RUN)
    _add_scenario_args(run)
    mode = run.add_mutually_exclusive_group()
    mode.add_argument(
        "--resume",
        action="store_true",
        help="continue from the last completed round of the trace (a larger `rounds` extends it)",
    )
    mode.add_argument(
        "--overwrite", action="store_true", help="replace an existing trace (never a non-trace file)"
    )
    run.add_argument(
        "--continue-on-divergence",
        action="store_true",
        help="report a diverged round once and go on instead of stopping (exit status 3 still); "
        "with --resume, go on from a trace that holds a diverged round (refused without it)",
    )
    run.add_argument(
        "--no-plots", action="store_true", help="do not write figures next to the trace"
    )
    run.add_argument(
        "--tensorboard", metavar="DIR", default=None,
        help="also write every round's scalars as TensorBoard summaries into DIR "
        "(`tensorboard --logdir DIR`; the trace stays the record)",
    )


def _add_validate_parser(sub) -> None:
    """``cosim validate``: a scenario (or a study), ``--set`` and a study's ``--seeds``,
    ``--rounds`` and ``--only``."""
    validate = _command(
        sub, "validate",
        "check a scenario (or a study) and print what it implies and costs", EXAMPLES_VALIDATE)
    _add_scenario_args(validate)
    _add_study_options(validate, with_set=False)


def _add_study_options(p: argparse.ArgumentParser, *, with_set: bool = True) -> None:
    """``--set``, ``--seeds``, ``--rounds`` and ``--only`` of a study
    (:mod:`cosim.study.options`; ``validate`` has its ``--set`` already)."""
    if with_set:
        p.add_argument("--set", dest="overrides", action="append", default=[],
                       metavar="KEY.PATH=VALUE",
                       help="override one scenario key of every point (TOML value syntax, as "
                       "`cosim run --set`); repeatable")
    p.add_argument("--seeds", default=None, metavar="N|A,B,...",
                   help="a study's seeds: N, its first N; A,B,..., exactly those (one seed: 7,)")
    p.add_argument("--rounds", type=int, default=None, metavar="N",
                   help="a study's rounds for every point (as --set rounds=N)")
    p.add_argument("--only", action="append", default=[], metavar="AXIS=V1,V2",
                   help="run only a study's points whose AXIS is one of the values (written as "
                   "in run names: 10 for 10.0); repeatable, every one must hold")


def _add_inspect_parser(sub) -> None:
    """``cosim inspect``: one trace."""
    inspect = _command(sub, "inspect", "summarise a trace", EXAMPLES_INSPECT)
    inspect.add_argument("trace", help="HDF5 trace written by `cosim run`")


def _add_verify_parser(sub) -> None:
    """``cosim verify``: traces or study directories."""
    verify = _command(sub, "verify", "check that traces are whole (checksums, rounds)",
                      EXAMPLES_VERIFY)
    verify.add_argument("paths", nargs="+", help="traces or study directories")


def _add_study_parser(sub) -> None:
    """``cosim study run | report | compact``, each with its own arguments."""
    study = _command(
        sub, "study",
        "run many scenarios (an axis product x seeds) in worker processes or as Ray tasks, "
        "and report them", EXAMPLES_STUDY)
    study_sub = study.add_subparsers(dest="study_command", metavar="STUDY_COMMAND")
    study_run = _command(
        study_sub, "run",
        "run every point of a study that is not complete yet", EXAMPLES_STUDY)
    study_run.add_argument(
        "study", help="study TOML file (docs/studies.md), or the name of a shipped study (`cosim scenarios`)")
    study_run.add_argument("--out", required=True, help="output directory (traces in DIR/runs/)")
    _add_study_options(study_run)
    study_run.add_argument(
        "--address", default=None,
        help="run on this Ray cluster (`auto`, or HOST:PORT of `ray start --head`) instead "
        "of in worker processes on this machine")
    study_run.add_argument(
        "--executor", choices=("local", "ray"), default=None,
        help="local: worker processes on this machine, no network socket (the default "
        "without --address); ray: Ray tasks (the default with --address; without it, an "
        "embedded Ray on this machine)")
    study_run.add_argument(
        "--num-cpus", type=int, default=None,
        help="CPUs of the local executor or embedded Ray (default: this machine's cores; "
        "ignored with --address)")
    study_report = _command(
        study_sub, "report",
        "tidy table, seed summary with 95%% CI, figures and the cost used against the "
        "estimate, of a study directory", EXAMPLES_STUDY)
    study_report.add_argument("out", metavar="DIR", help="the --out of `cosim study run`")
    study_report.add_argument("--x", choices=("rounds", "uplink", "uplink_seconds", "uplink_energy", "total"),
                              default="rounds",
                              help="x of the figures (default: rounds): the round, cumulative uplink "
                              "OFDM symbols, uplink seconds, device transmit joules or all channel uses")
    study_compact = _command(
        study_sub, "compact",
        "drop the resume checkpoint of every finished run of a study directory (frees most "
        "of its disk; those runs can be reported, no longer extended)", EXAMPLES_STUDY)
    study_compact.add_argument("out", metavar="DIR", help="the --out of `cosim study run`")


def main(argv: list[str] | None = None) -> int:
    """Run the ``cosim`` command line ``argv`` (default: ``sys.argv[1:]``); the exit status.

    TensorFlow is imported for ``run`` only; a bad scenario, override or file exits 2
    with one message and no traceback. Everything the command writes to stdout and
    stderr goes through :class:`cosim.printable.PrintableStream`: a key, label or path
    holding control characters (``\x1b[2J``) is echoed with them escaped.
    """
    from cosim.printable import PrintableStream, open_std_streams

    streams = sys.stdout, sys.stderr
    out, err = open_std_streams()
    sys.stdout, sys.stderr = PrintableStream(out), PrintableStream(err)
    try:
        return _main(argv)
    finally:
        sys.stdout, sys.stderr = streams


def _main(argv: list[str] | None) -> int:
    """Parse ``argv`` and run its command; a bad input's one line (exit 2), an interrupt's
    (exit 130) or a closed stdout's silence (exit 0) instead of a traceback."""
    args = _parser().parse_args(argv)
    if args.command is None:
        _parser().print_help()
        return EXIT_USAGE
    errors: tuple[type[Exception], ...] = (UsageError,)
    if args.command in ("run", "validate", "compile", "study"):
        from cosim.scenario import ScenarioError

        errors = (ScenarioError, UsageError)
    try:
        if args.command == "run":
            scenario = _refuse_run_early(args)  # what needs no TensorFlow, before its import
            if sys.stderr.isatty():  # a terminal sees life at once, before TensorFlow's seconds
                print(f"cosim run: {scenario.name}, seed {scenario.seed}, {scenario.rounds} rounds "
                      f"-> {scenario.trace_path}; starting TensorFlow", file=sys.stderr, flush=True)
            import_for_command()
    except errors as error:
        print(f"cosim {args.command}: {error}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("cosim: interrupted while starting; nothing was run", file=sys.stderr)
        return EXIT_INTERRUPTED

    try:
        return _dispatch(args)
    except errors as error:
        print(f"cosim {args.command}: {error}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("cosim: interrupted; completed rounds are in the trace (use --resume)", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # the reader went away (`cosim scenarios | head`): stop quietly
        if not _stdout_reader_gone():  # another pipe broke (a worker's): an error, not this
            raise
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK


def _stdout_reader_gone() -> bool:
    """Whether stdout is a pipe whose reader has closed it (its write end polls POLLERR):
    the one broken pipe that ends a command quietly with status 0."""
    import select

    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (OSError, ValueError, AttributeError):  # no file descriptor (a captured stream)
        return False


def _refuse_run_early(args: argparse.Namespace):
    """The refusals of ``cosim run`` that need no TensorFlow, before it is imported (a
    refusal answers in a fraction of a second instead of after TensorFlow's seconds): a bad
    scenario file, key or value (``ScenarioError``), a scenario too large for the machine,
    a ``--tensorboard`` that is a file, and a trace path the run may not write (an existing
    trace without ``--resume`` / ``--overwrite``, a directory, a parent it cannot write:
    :func:`cosim.trace.check_trace_target`); :func:`cosim.run.run_command` checks them
    again. The scenario, for the line the command prints at once."""
    from cosim.scenario import check_resources, load_scenario
    from cosim.trace import TraceError, check_trace_target

    scenario = load_scenario(args.scenario, args.overrides)
    check_resources(scenario, source=args.scenario or "<default quickstart>")
    board = args.tensorboard
    if board is not None and Path(board).exists() and not Path(board).is_dir():
        raise UsageError(f"--tensorboard {board}: exists and is not a directory")
    try:
        check_trace_target(scenario.trace_path, resume=args.resume, overwrite=args.overwrite)
    except TraceError as error:
        raise UsageError(str(error)) from None
    return scenario


def _dispatch(args: argparse.Namespace) -> int:
    """Run the command ``args.command`` names with its parsed arguments; its exit status.
    Bad input raises :class:`UsageError` (or a ``ScenarioError``) for :func:`_main`."""
    if args.command == "run":
        from cosim.run import run_command

        return run_command(
            args.scenario,
            args.overrides,
            resume=args.resume,
            overwrite=args.overwrite,
            plots=not args.no_plots,
            stop_on_divergence=not args.continue_on_divergence,
            tensorboard_dir=args.tensorboard,
        )
    if args.command == "validate":
        return validate_command(args.scenario, args.overrides, seeds=args.seeds,
                                rounds=args.rounds, only=args.only)
    if args.command == "compile":
        from cosim.compile_command import compile_command

        return compile_command(args.scenario, args.overrides)
    if args.command == "scenarios":
        return scenarios_command()
    if args.command == "study":
        return study_command(args)
    if args.command == "verify":
        return verify_command(args.paths)
    if args.command == "inspect":
        return inspect_command(args.trace)
    if args.command == "plot":
        return plot_command(args)
    return EXIT_USAGE


def verify_command(paths: list[str]) -> int:
    """``cosim verify``: one verdict line per trace (:func:`cosim.trace.verify.verify_paths`;
    ok on stdout, the others on stderr); 0 all ok, 1 some incomplete (none damaged), 2
    some damaged, unreadable or not a trace."""
    from cosim.trace.verify import verify_paths

    verdicts = verify_paths(paths)
    for verdict in verdicts:
        print(verdict.line(), file=sys.stdout if verdict.state == "ok" else sys.stderr)
    states = {v.state for v in verdicts}
    if states & {"damaged", "unreadable", "not a trace"}:
        return EXIT_USAGE
    return EXIT_FAILED if "incomplete" in states else EXIT_OK


def inspect_command(trace: str) -> int:
    """``cosim inspect``: print the trace's summary and health section
    (:func:`cosim.trace.summarize`, :func:`cosim.health.health_section`); a missing or
    unreadable trace raises :class:`UsageError`."""
    from cosim.health import health_section
    from cosim.trace import TraceError, read_trace, summarize

    try:
        data = read_trace(_existing(trace))
        text = summarize(data) + health_section(data)  # the trace read once
    except TraceError as error:
        raise UsageError(str(error)) from None
    print(text)
    return EXIT_OK


def validate_command(scenario_file: str | None, overrides: list[str], *,
                     seeds: str | None = None, rounds: int | None = None,
                     only: list[str] | tuple[str, ...] = ()) -> int:
    """``cosim validate``: print the resolved scenario and what it implies (d, N1/N2,
    symbols per round, memory, the dataset's files checked with the loader's restricted
    reader, the estimated cost), or raise :class:`cosim.scenario.ScenarioError` (also
    for a scenario too large for the machine's memory). d comes from
    :func:`cosim.scenario.scenario_num_params`: no model is built, TensorFlow is not
    imported."""
    from cosim.scenario import (
        check_resources,
        describe,
        load_scenario,
        scenario_num_params,
        scenario_to_toml,
    )
    from cosim.scenario.scene import tracing_cost_line
    from cosim.study.cost import study_cost_lines

    if scenario_file is not None and _is_study(scenario_file):
        return _validate_study(scenario_file, overrides, seeds=seeds, rounds=rounds, only=only)
    instead = {"--seeds": "; a scenario takes --set seed=N", "--rounds": "; a scenario takes "
               "--set rounds=N", "--only": " (a filter of its points)"}
    for flag, given in (("--seeds", seeds), ("--rounds", rounds), ("--only", only or None)):
        if given is not None:
            raise UsageError(f"{flag}: an option of a study{instead[flag]}")
    scenario = load_scenario(scenario_file, overrides)
    num_params = scenario_num_params(scenario)
    check_resources(scenario, num_params, source=scenario_file or "<default quickstart>")
    from learning.data.files import DatasetFormatError, check_dataset_files

    try:
        data = check_dataset_files(scenario.data.dataset, scenario.data.data_dir)
    except DatasetFormatError as error:
        raise UsageError(f"data.data_dir = {scenario.data.data_dir!r}: {error}") from None
    lines = [f"  data      {data}"]
    if "(the run will stop)" not in data:  # the dataset is there: its partition is drawn
        from cosim.local_data import partition_line

        lines.append(partition_line(scenario, scenario_file or "<default quickstart>"))
    projection = None
    if scenario.privacy is not None:  # a target no noise can meet is refused here
        from cosim.privacy import refuse_over_target

        projection = refuse_over_target(scenario, scenario_file or "<default quickstart>")
    print(scenario_to_toml(scenario))
    print(describe(scenario, num_params))
    for line in filter(None, [*lines, *study_cost_lines([scenario]), tracing_cost_line(scenario)]):
        print(line)
    if projection is not None:
        privacy = scenario.privacy
        print(projection.line(privacy.delta, scenario.rounds, privacy.accountant))
        if privacy.target_epsilon is not None:
            from cosim.privacy import plan_line, plan_noise_floor
            from cosim.scenario.derived import uplink_phase_values

            floor = plan_noise_floor(scenario, uplink_phase_values(scenario, num_params))
            print(plan_line(scenario, projection, floor))
    return EXIT_OK


def _validate_study(study_file: str, overrides: list[str], *, seeds: str | None,
                    rounds: int | None, only) -> int:
    """``cosim validate STUDY``: every point validated (with ``--set``, ``--seeds``,
    ``--rounds``, ``--only`` applied), the datasets checked, the study's cost and the
    privacy projection of each axis combination."""
    from cosim.scenario.scene import tracing_cost_line
    from cosim.study import load_study
    from cosim.study.cost import study_cost_lines
    from cosim.study.options import parse_options
    from learning.data.files import DatasetFormatError, check_dataset_files

    study = load_study(study_file, validate=False)
    options = parse_options(study, overrides=overrides, seeds=seeds, rounds=rounds, only=only)
    study = options.apply(study)
    points = study.points()  # every point validated
    print(f"study {study.source}: {len(points)} runs ({len(study.seeds)} seeds x "
          f"{len(points) // len(study.seeds)} axis combinations), every point valid"
          + ("" if options.empty else f"; options {options.flags()}"))
    for dataset, data_dir in sorted({(p.scenario.data.dataset, p.scenario.data.data_dir)
                                     for p in points}, key=str):
        try:
            print(f"  data      {check_dataset_files(dataset, data_dir)}")
        except DatasetFormatError as error:
            raise UsageError(f"data.data_dir = {data_dir!r}: {error}") from None
    _check_partitions(points)
    for line in study_cost_lines([p.scenario for p in points]):
        print(line)
    tracing = sorted({line for point in points if (line := tracing_cost_line(point.scenario))})
    for line in [*tracing, *_study_privacy_lines(points)]:
        print(line)
    return EXIT_OK


def _check_partitions(points) -> None:
    """Each distinct partition of a study's points drawn (its data, K and seed), where the
    dataset is there: a point whose devices a class cannot feed is refused naming it."""
    from cosim.local_data import partition_line
    from learning.data.files import check_dataset_files

    seen = set()
    for point in points:
        scenario = point.scenario
        key = (repr(scenario.data), scenario.cell.num_devices, scenario.seed)
        if key in seen or "(the run will stop)" in check_dataset_files(
                scenario.data.dataset, scenario.data.data_dir):
            continue
        seen.add(key)
        partition_line(scenario, point.name)


def _study_privacy_lines(points) -> list[str]:
    """One ``privacy`` line per axis combination of a study whose runs have ``[privacy]``:
    its projected epsilon (:func:`cosim.privacy.project`, at its first seed: only a clip
    norm's bound depends on the seed, through the largest data share), without training; a target no noise can meet is refused as by
    ``cosim validate``."""
    from cosim.privacy import refuse_over_target
    from cosim.scenario import toml_value

    lines, seen = [], set()
    for point in points:
        scenario = point.scenario
        combination = ", ".join(f"{key} = {toml_value(value) if isinstance(value, dict) else value}"
                                for key, value in point.axis_values.items())
        if scenario.privacy is None or combination in seen:
            continue
        seen.add(combination)
        projection = refuse_over_target(scenario, f"{point.name}")
        privacy = scenario.privacy
        line = projection.line(privacy.delta, scenario.rounds, privacy.accountant)
        lines.append(line.replace("  privacy   ", f"  privacy   {combination or 'every run'}: ", 1))
    return lines


def _is_study(path: str) -> bool:
    """A study file (top-level ``seeds``, as no scenario has) or a shipped study's name."""
    import tomllib

    from cosim.limits import toml_loads
    from cosim.scenario.load import shipped_scenario_path, shipped_study_path

    file = Path(path)
    if not file.is_file():
        return shipped_scenario_path(path) is None and shipped_study_path(path) is not None
    try:
        return "seeds" in toml_loads(file.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError, OSError):
        return False  # the scenario loader reports it


def study_command(args: argparse.Namespace) -> int:
    """``cosim study run | report | compact``: :func:`cosim.study.run_study` (0 / 1),
    :func:`cosim.study.report.report` (0; its table of results per point, its files, then the
    :func:`cosim.study.report.cost_summary` line) or :func:`cosim.study.compact_study` (0 / 1); a bad study raises
    :class:`cosim.study.StudyError` (exit 2). Neither imports TensorFlow here."""
    if args.study_command == "run":
        from cosim.study import run_study

        if args.num_cpus is not None and args.num_cpus < 1:
            raise UsageError(f"--num-cpus: must be >= 1 (got {args.num_cpus})")
        from cosim.study import load_study
        from cosim.study.options import parse_options

        options = parse_options(load_study(args.study, validate=False),
                                overrides=args.overrides, seeds=args.seeds, rounds=args.rounds,
                                only=args.only)
        return run_study(args.study, args.out, address=args.address, num_cpus=args.num_cpus,
                         executor=args.executor, options=options)
    if args.study_command == "report":
        import pandas as pd

        from cosim.study.report import cost_summary, report

        written = report(args.out, x=args.x)
        print((Path(args.out) / "results.md").read_text(encoding="utf-8"))
        for path in written:
            print(path)
        print(cost_summary(pd.read_csv(Path(args.out) / "cost.csv")))
        return EXIT_OK
    if args.study_command == "compact":
        from cosim.study.runner import compact_study

        return compact_study(args.out)
    raise UsageError("give a subcommand: run, report or compact (`cosim study --help`)")


def scenarios_command() -> int:
    """``cosim scenarios``: the shipped scenarios (:func:`cosim.scenario.shipped_scenarios`),
    then the shipped studies (:func:`cosim.scenario.shipped_studies`), each under a
    heading: its name and first comment line, then its path on the next line."""
    from cosim.scenario.load import shipped_scenarios, shipped_scenarios_dir, shipped_studies

    shipped, studies = shipped_scenarios(), shipped_studies()
    if not shipped:
        raise UsageError(f"no shipped scenarios found in {shipped_scenarios_dir()}")
    width = max(len(s.name) for s in shipped + studies)
    for heading, entries in (("scenarios (cosim run NAME)", shipped),
                             ("studies (cosim study run NAME --out DIR)", studies)):
        if entries:
            print(f"{heading}:")
        for s in entries:
            print(f"  {s.name:<{width}}  {s.description}".rstrip())
            print(f"  {'':<{width}}  {s.path}")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
