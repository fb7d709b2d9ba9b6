"""The ``cosim`` command: ``run | validate | inspect | plot | scenarios | study`` and ``--version``.

Only ``run`` imports TensorFlow (and with it Sionna, TensorFlow-Probability and the
learning and PHY modules); ``validate``, ``inspect``, ``plot``, ``scenarios`` and
``--version`` import none of them (nor does ``study``: its Ray workers import
TensorFlow, the command does not), so they start in a fraction of a second
(``tests/cosim/test_cli_startup.py`` holds this, ``benchmarks/cli_startup.py`` times
it). ``validate`` gets d by arithmetic (:func:`cosim.scenario.scenario_num_params`),
not from a model.

TensorFlow's import-time noise on a machine without a GPU (absl's "All log
messages before absl::InitializeLog()" and the "Unable to register cuDNN/cuBLAS
factory" lines) is filtered here, at the command's edge and only while
TensorFlow is being imported; everything else TensorFlow prints passes through.

The command also turns on TensorFlow's BFC allocator for host memory
(``TF_CPU_ALLOCATOR_USE_BFC=true``, unless the environment already says
otherwise): without it every large tensor is a fresh ``mmap`` whose page faults
cost as much as the arithmetic; measured side by side, one paper-size AirComp
phase took 0.36-0.59 s with it and 0.83-1.25 s without. It changes no number,
only where buffers come from. Library users set it before importing TensorFlow.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
from importlib import metadata
from pathlib import Path

EXIT_OK = 0
EXIT_FAILED = 1
"""Some runs of a study failed (``cosim study run``)."""
EXIT_USAGE = 2
"""Bad input or a file fault; nothing written."""
EXIT_DIVERGED = 3
"""``cosim run`` stopped at a diverged round (:mod:`cosim.divergence`)."""
EXIT_INTERRUPTED = 130
"""Ctrl-C; completed rounds are in the trace."""

_IMPORT_NOISE = re.compile(
    r"(All log messages before absl::InitializeLog\(\) is called"
    r"|Unable to register (cuDNN|cuFFT|cuBLAS) factory"
    r"|computation placer already registered"
    r"|This TensorFlow binary is optimized to use available CPU instructions"
    r"|To enable the following instructions:.*rebuild TensorFlow)"
)


def _import_tensorflow_quietly() -> None:
    """Import TensorFlow with its known GPU-less start-up noise removed from stderr."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")
    if "tensorflow" in sys.modules:
        return
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no real fd 2 (e.g. embedded interpreters)
        import tensorflow

        return
    with tempfile.TemporaryFile(mode="w+b") as captured:
        os.dup2(captured.fileno(), 2)
        try:
            import tensorflow  # noqa: F401
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            for line in captured.read().decode("utf-8", "replace").splitlines():
                if line.strip() and not _IMPORT_NOISE.search(line):
                    print(line, file=sys.stderr)


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

EXAMPLES_PLOT = """examples:
  cosim plot runs/quickstart-seed1.h5 --out figures/
  cosim plot runs/a.h5 runs/b.h5 --out figures/ --labels proposed fedavg
  cosim plot runs/a.h5 runs/b.h5 --out figures/ --x uplink   # uplink symbols only
"""

EXAMPLES_STUDY = """examples:
  cosim study run study.toml --out studies/power          # a local Ray on this machine
  cosim study run study.toml --out studies/power --address auto   # the cluster of `ray start`
  cosim study report studies/power --x uplink

exit status of `study run`: 0 every run done, 1 some run failed or diverged (the others
complete; DIR/status.json says which and why), 2 bad input (nothing run). Run it again
to complete what is missing. File format: docs/studies.md.
"""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cosim",
        description="Signal-level OFDM PHY co-simulation of Bayesian federated learning "
        "with over-the-air posterior aggregation.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Run `cosim COMMAND --help` for the options and examples of each command.",
    )
    parser.add_argument("--version", action=_VersionAction)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    def scenario_args(p: argparse.ArgumentParser) -> None:
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

    run = sub.add_parser(
        "run",
        help="run a scenario and write its HDF5 trace and figures",
        epilog=EXAMPLES_RUN,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    scenario_args(run)
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
        help="report a diverged round once and go on instead of stopping (exit status 3 still)",
    )
    run.add_argument(
        "--no-plots", action="store_true", help="do not write figures next to the trace"
    )

    validate = sub.add_parser(
        "validate",
        help="check a scenario and print what it implies",
        epilog=EXAMPLES_VALIDATE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    scenario_args(validate)

    inspect = sub.add_parser(
        "inspect",
        help="summarise a trace",
        epilog=EXAMPLES_INSPECT,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    inspect.add_argument("trace", help="HDF5 trace written by `cosim run`")

    plot = sub.add_parser(
        "plot",
        help="draw the paper's kinds of figure from one or more traces",
        epilog=EXAMPLES_PLOT,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    plot.add_argument("traces", nargs="+", help="HDF5 traces")
    plot.add_argument("--out", required=True, help="output directory for the PNG files")
    plot.add_argument("--labels", nargs="+", default=None, help="one legend label per trace")
    plot.add_argument(
        "--x",
        choices=("rounds", "uplink", "total"),
        default="total",
        help="x-axis of the accuracy figure: cumulative uplink + downlink OFDM symbols "
        "(total, the paper's channel uses; default: accuracy_vs_channel_uses.png), cumulative "
        "uplink OFDM symbols only (uplink: accuracy_vs_uplink_symbols.png; with the default "
        "downlink, paper_mnist's total is > 99.9 %% downlink) or the round (rounds: "
        "accuracy_vs_rounds.png)",
    )

    study = sub.add_parser(
        "study",
        help="run many scenarios (an axis product x seeds) as Ray tasks, and report them",
        epilog=EXAMPLES_STUDY,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    study_sub = study.add_subparsers(dest="study_command", metavar="STUDY_COMMAND")
    study_run = study_sub.add_parser(
        "run", help="run every point of a study that is not complete yet",
        epilog=EXAMPLES_STUDY, formatter_class=argparse.RawDescriptionHelpFormatter)
    study_run.add_argument("study", help="study TOML file (docs/studies.md)")
    study_run.add_argument("--out", required=True, help="output directory (traces in DIR/runs/)")
    study_run.add_argument(
        "--address", default=None,
        help="connect to this Ray cluster (`auto`, or HOST:PORT of `ray start --head`) instead "
        "of starting a local Ray")
    study_run.add_argument(
        "--num-cpus", type=int, default=None,
        help="CPUs of the local Ray (default: this machine's cores; ignored with --address)")
    study_report = study_sub.add_parser(
        "report", help="tidy table, seed summary with 95%% CI and figures of a study directory",
        epilog=EXAMPLES_STUDY, formatter_class=argparse.RawDescriptionHelpFormatter)
    study_report.add_argument("out", metavar="DIR", help="the --out of `cosim study run`")
    study_report.add_argument("--x", choices=("rounds", "uplink", "total"), default="rounds",
                              help="x of the figures (default: rounds)")

    sub.add_parser(
        "scenarios",
        help="list the shipped scenarios: name, description, path",
        description="List the scenario files shipped with the package.",
        epilog=EXAMPLES_SCENARIOS,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the ``cosim`` command line ``argv`` (default: ``sys.argv[1:]``); the exit status.

    TensorFlow is imported for ``run`` only; a bad scenario, override or file exits 2
    with one message and no traceback.
    """
    args = _parser().parse_args(argv)
    if args.command is None:
        _parser().print_help()
        return EXIT_USAGE
    errors: tuple[type[Exception], ...] = (UsageError,)
    if args.command == "run":
        _import_tensorflow_quietly()
    if args.command in ("run", "validate", "study"):
        from cosim.scenario import ScenarioError

        errors = (ScenarioError, UsageError)

    try:
        if args.command == "run":
            from cosim.run import run_command

            return run_command(
                args.scenario,
                args.overrides,
                resume=args.resume,
                overwrite=args.overwrite,
                plots=not args.no_plots,
                stop_on_divergence=not args.continue_on_divergence,
            )
        if args.command == "validate":
            return validate_command(args.scenario, args.overrides)
        if args.command == "scenarios":
            return scenarios_command()
        if args.command == "study":
            return study_command(args)
        if args.command == "inspect":
            from cosim.trace import TraceError, summarize

            try:
                text = summarize(_existing(args.trace))
            except TraceError as error:
                raise UsageError(str(error)) from None
            print(text)
            return EXIT_OK
        if args.command == "plot":
            from cosim.plots import PlotError, plot_traces
            from cosim.trace import TraceError

            traces = [_existing(p) for p in args.traces]
            if args.labels is not None and len(args.labels) != len(traces):
                raise UsageError(
                    f"--labels: got {len(args.labels)} labels for {len(traces)} traces"
                )
            try:  # all or nothing: a bad trace leaves no output directory
                written = plot_traces(traces, Path(args.out), labels=args.labels, x=args.x)
            except (TraceError, PlotError) as error:
                raise UsageError(str(error)) from None
            for path in written:
                print(path)
            return EXIT_OK
    except errors as error:
        print(f"cosim {args.command}: {error}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("cosim: interrupted; completed rounds are in the trace (use --resume)", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # the reader went away (`cosim scenarios | head`): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    return EXIT_USAGE


def validate_command(scenario_file: str | None, overrides: list[str]) -> int:
    """``cosim validate``: print the resolved scenario and what it implies (d, N1/N2,
    symbols per round, memory), or raise :class:`cosim.scenario.ScenarioError` (also
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

    scenario = load_scenario(scenario_file, overrides)
    num_params = scenario_num_params(scenario)
    check_resources(scenario, num_params, source=scenario_file or "<default quickstart>")
    print(scenario_to_toml(scenario))
    print(describe(scenario, num_params))
    return EXIT_OK


def study_command(args: argparse.Namespace) -> int:
    """``cosim study run | report``: :func:`cosim.study.run_study` (0 / 1) or
    :func:`cosim.study_report.report` (0); a bad study raises
    :class:`cosim.study.StudyError` (exit 2). Neither imports TensorFlow here."""
    if args.study_command == "run":
        from cosim.study import run_study

        if args.num_cpus is not None and args.num_cpus < 1:
            raise UsageError(f"--num-cpus: must be >= 1 (got {args.num_cpus})")
        return run_study(args.study, args.out, address=args.address, num_cpus=args.num_cpus)
    if args.study_command == "report":
        from cosim.study_report import report

        for path in report(args.out, x=args.x):
            print(path)
        return EXIT_OK
    raise UsageError("give a subcommand: run or report (`cosim study --help`)")


def scenarios_command() -> int:
    """``cosim scenarios``: one entry per shipped file
    (:func:`cosim.scenario.shipped_scenarios`): its name and first comment line, then
    its path on the next line, indented."""
    from cosim.scenario import shipped_scenarios, shipped_scenarios_dir

    shipped = shipped_scenarios()
    if not shipped:
        raise UsageError(f"no shipped scenarios found in {shipped_scenarios_dir()}")
    width = max(len(s.name) for s in shipped)
    for s in shipped:
        print(f"{s.name:<{width}}  {s.description}".rstrip())
        print(f"{'':<{width}}  {s.path}")
    return EXIT_OK


class UsageError(Exception):
    """Bad command-line input (exit status 2, no traceback)."""


def _existing(path: str) -> Path:
    """``path`` as a trace file to read; UsageError naming it when it is missing, a
    directory or not a regular file."""
    p = Path(path)
    if p.is_dir():
        raise UsageError(f"cannot read trace {path}: it is a directory")
    if not p.exists():
        raise UsageError(f"no such trace file: {path}")
    if not p.is_file():
        raise UsageError(f"cannot read trace {path}: not a regular file")
    return p


if __name__ == "__main__":
    sys.exit(main())
