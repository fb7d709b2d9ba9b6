"""``cosim plot``: its arguments (:func:`add_plot_parser`) and the command
(:func:`plot_command`, :func:`cosim.plots.plot_traces`). Building the parser imports
neither matplotlib nor h5py; the command imports them."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cosim.exit_codes import EXIT_OK
from cosim.usage import UsageError
from cosim.usage import existing_trace as _existing

EXAMPLES_PLOT = """Figures (each as FIGURE.FORMAT): accuracy_vs_<x> and nll_vs_<x> for every --x, ece,
reliability, and, when a trace holds their data, posterior, distortion_by_distance,
power_per_device, csi_nmse and cell_map (a figure no trace has data for is skipped
with one line on stderr). Rounds are numbered from 0, as in `cosim inspect`.

examples:
  cosim plot runs/quickstart-seed1.h5 --out figures/
  cosim plot runs/a.h5 runs/b.h5 --out figures/ --labels proposed fedavg
  cosim plot runs/a.h5 runs/b.h5 --out figures/ --x uplink   # uplink symbols only
  cosim plot runs/a.h5 runs/b.h5 --out figures/ --x uplink_seconds,uplink_energy
  cosim plot runs/a.h5 --out figures/ --x total,rounds --format png,pdf
  cosim plot runs/a.h5 --out figures/ --format svg --size 3.3,2.4 --dpi 600
  cosim plot studies/schemes/runs/*.h5 --out figures/ --x uplink_energy  # labels: what differs
"""

PLOT_AXES = ("rounds", "uplink", "uplink_seconds", "uplink_energy", "total")
"""``cosim plot --x`` choices (``cosim.plots.ACCURACY_AXES``; not imported here, so that
building the parser imports no matplotlib)."""
PLOT_FORMATS = ("png", "pdf", "svg")
"""``cosim plot --format`` choices (``cosim.plots.FORMATS``)."""


def _comma_choices(choices: tuple[str, ...]):
    """An argparse ``type``: a comma-separated list of ``choices`` -> list of str."""

    def parse(text: str) -> list[str]:
        values = [v.strip().lower() for v in text.split(",") if v.strip()]
        bad = [v for v in values if v not in choices] or ([] if values else [text])
        if bad:
            raise argparse.ArgumentTypeError(
                f"invalid choice: {bad[0]!r} (choose from {', '.join(map(repr, choices))})")
        return values

    return parse


def _positive_number(text: str) -> float:
    """An argparse ``type``: a finite number > 0."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (value > 0 and value != float("inf")):
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {text!r}")
    return value


def _size_in(text: str) -> tuple[float, float]:
    """An argparse ``type``: ``W,H`` in inches, both finite and > 0."""
    parts = text.split(",")
    try:
        if len(parts) != 2:
            raise argparse.ArgumentTypeError("")
        return _positive_number(parts[0]), _positive_number(parts[1])
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"must be W,H in inches, two numbers > 0 (e.g. 3.5,2.6), got {text!r}") from None


def add_plot_parser(sub, command) -> None:
    """``cosim plot``: traces, ``--out``, ``--labels``, ``--x``, ``--format``, ``--dpi``
    and ``--size``, added to ``sub`` with ``command`` (``cosim.cli._command``)."""
    plot = command(
        sub, "plot",
        "draw the paper's kinds of figure from one or more traces", EXAMPLES_PLOT)
    plot.add_argument("traces", nargs="+", help="HDF5 traces")
    plot.add_argument("--out", required=True, help="output directory for the figures")
    plot.add_argument("--labels", nargs="+", default=None,
                      help="one legend label per trace (default: of several traces, the "
                      "scenario keys' values in which they differ; of one, its algorithm)")
    plot.add_argument(
        "--x",
        action="append",
        type=_comma_choices(PLOT_AXES),
        default=None,
        metavar="{rounds,uplink,uplink_seconds,uplink_energy,total}",
        help="x-axis of the accuracy and NLL figures; repeatable or a comma list: cumulative "
        "uplink OFDM symbols (uplink, the default: *_vs_uplink_symbols, the channel uses an "
        "AirComp method changes), cumulative uplink + downlink OFDM symbols (total, the "
        "paper's channel uses: *_vs_channel_uses; with the default downlink > 99.9 %% "
        "downlink), cumulative uplink air time in seconds (uplink_seconds: "
        "*_vs_uplink_seconds), cumulative device transmit energy in joules (uplink_energy: "
        "*_vs_uplink_energy) or the round from 0 (rounds: *_vs_rounds)",
    )
    plot.add_argument(
        "--format",
        dest="formats",
        action="append",
        type=_comma_choices(PLOT_FORMATS),
        default=None,
        metavar="{png,pdf,svg}",
        help="file format; repeatable or a comma list (--format png,pdf); default png. PDF "
        "and SVG are vector files (PDF embeds its TrueType fonts, SVG draws text as paths)",
    )
    plot.add_argument("--log-x", action=argparse.BooleanOptionalAction, default=None,
                      help="log x axis in the accuracy, NLL and ECE figures; --no-log-x a linear "
                      "one (default: log where the data span over two decades, as the uplink "
                      "energy of analog and digital runs does)")
    plot.add_argument("--log-y", action=argparse.BooleanOptionalAction, default=None,
                      help="log y axis in the accuracy, NLL and ECE figures; --no-log-y a linear "
                      "one (default: as --log-x)")
    plot.add_argument("--dpi", type=_positive_number, default=None,
                      help="resolution of PNG files in dots per inch (default 300)")
    plot.add_argument(
        "--size", type=_size_in, default=None, metavar="W,H",
        help="size of one panel in inches (default 3.5,2.6: one column of a two-column "
        "paper); a figure of r x c panels is about c W by r H (the reliability diagram's and "
        "the cell map's square panels are W by W)",
    )


def plot_command(args: argparse.Namespace) -> int:
    """``cosim plot``: draw the figures of ``args.traces`` into ``args.out``
    (:func:`cosim.plots.plot_traces`), print each file's path; all or nothing: a bad
    trace or option raises :class:`UsageError` and leaves no output directory."""
    from cosim import plots
    from cosim.trace import TraceError

    traces = [_existing(p) for p in args.traces]
    if args.labels is not None and len(args.labels) != len(traces):
        raise UsageError(
            f"--labels: got {len(args.labels)} labels for {len(traces)} traces"
        )

    try:  # --dpi beyond plots.MAX_DPI, --size beyond plots.MAX_PANEL_IN
        options = plots.FigureOptions(
            formats=tuple(f for group in args.formats or [plots.DEFAULT_FORMATS] for f in group),
            dpi=args.dpi or plots.DEFAULT_DPI,
            panel_size_in=args.size or plots.DEFAULT_PANEL_SIZE_IN,
        )
    except ValueError as error:
        raise UsageError(str(error)) from None

    def note(text: str) -> None:
        print(f"cosim plot: {text}", file=sys.stderr)

    try:  # all or nothing: a bad trace leaves no output directory
        written = plots.plot_traces(
            traces, Path(args.out), labels=args.labels,
            x=[a for group in args.x or [[plots.DEFAULT_ACCURACY_AXIS]] for a in group],
            formats=options.formats, dpi=options.dpi, size_in=options.panel_size_in,
            note=note, log_x=args.log_x, log_y=args.log_y,
        )
    except (TraceError, plots.PlotError) as error:
        raise UsageError(str(error)) from None
    for path in written:
        print(path)
    return EXIT_OK
