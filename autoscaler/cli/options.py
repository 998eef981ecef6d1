"""The options several commands share, defined once (typer ``Annotated`` aliases).

A command names its parameter and default; the help text lives here, so ``simulate`` and
``compare`` (the workload options), and the live commands (``dry-run``, ``backtest``, ``run``)
describe the same option the same way. One spelling per concept: ``-o/--output`` for the output
format, ``--controller`` for the controller (a comma-separated list where a command runs several).

The controller names are written out here, not imported from ``controllers.registry`` (which imports
every controller and, through them, scipy): ``--help`` answers without them, and
tests/cli/test_help.py checks the lists against the registry.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

CONTROLLERS = ("pid", "static", "hpa", "keda", "kpa", "aibrix", "aibrix-apa", "dynamo", "dynamo-pd", "wva",
               "wva-pd", "static-ilp", "oracle", "bound", "mpc")
"""``controllers.registry.NAMES``, in its order."""
NEEDS_A_TRACE = ("oracle", "bound")
"""Controllers built from a trace's future (``controllers.registry``): offered by simulate and compare only."""
LIVE_CONTROLLERS = tuple(n for n in CONTROLLERS if n not in NEEDS_A_TRACE)
"""What dry-run, backtest and run offer: every controller that needs no trace."""
TRACE_FORMATS = ("azure", "mooncake", "servegen")
"""``--trace-format`` choices: ``autoscaler.workload.loader.LOADERS`` and a ServeGen model folder."""

ConfigOpt = Annotated[Path | None, typer.Option(help="Fleet YAML file (default: the embedded example fleet).")]
ControllerOpt = Annotated[str, typer.Option(
    help=f"Controller spec NAME[:key=value...]; NAME is one of {', '.join(CONTROLLERS)}.")]
LiveControllerOpt = Annotated[str, typer.Option(
    help=f"Controller spec NAME[:key=value...]; NAME is one of {', '.join(LIVE_CONTROLLERS)} "
         f"({' and '.join(NEEDS_A_TRACE)} need a trace: simulate, compare).")]
ControllersAliasOpt = Annotated[str | None, typer.Option("--controllers", hidden=True,
                                                         help="Deprecated spelling of --controller.")]
PrometheusUrlOpt = Annotated[str | None, typer.Option(help="Prometheus base URL (default: prometheus.url).")]
PlotOpt = Annotated[bool, typer.Option("--plot", help="Write timeline.png.")]
JsonAliasOpt = Annotated[bool, typer.Option("--json", hidden=True, help="Deprecated: use -o json.")]


def output_help(formats: str, what: str) -> str:
    """The ``-o/--output`` help of a command: the formats it offers and what each prints."""
    return f"Output format: {formats}. {what}"


# The workload of simulate and compare (autoscaler.workload.build.build_workload).
TraceOpt = Annotated[Path | None, typer.Option(
    help="Request trace (Azure CSV, Mooncake JSONL or ServeGen folder); default: the embedded synthetic workload.")]
TraceFormatOpt = Annotated[str | None, typer.Option(
    help=f"Trace format: {' | '.join(TRACE_FORMATS)} (servegen: a ServeGen model folder); default: detected.",
    show_default=False)]
SpanOpt = Annotated[str | None, typer.Option(
    help="START:END seconds: only the requests arriving then (a ServeGen folder: that part of its "
         "time axis; default its first day).", show_default=False)]
LengthsFromOpt = Annotated[Path | None, typer.Option(
    help="With a ServeGen folder: draw each request's (input, output) tokens from this trace.")]
RateScaleOpt = Annotated[float, typer.Option(help="Thin (<1) or superpose jittered copies (>1).")]
TimeScaleOpt = Annotated[float, typer.Option(help="Multiply arrival times (0.5 = twice as fast).")]
BatchFractionOpt = Annotated[float, typer.Option(help="Share of trace requests in the batch class.")]
TraceServiceOpt = Annotated[str | None, typer.Option(help="Service the trace targets (default: first).")]
SeedOpt = Annotated[int, typer.Option(help="Seed for class assignment and rate shaping.")]

DEFAULT_BATCH_FRACTION = 0.2
"""``autoscaler.workload.build.DEFAULT_BATCH_FRACTION`` (that module imports numpy; a test checks they agree)."""


def check_live_controller(spec: str, command: str) -> None:
    """ValueError when ``spec`` names a controller that needs a trace (``NEEDS_A_TRACE``) in a live command,
    or, in a real-time one (``run``, ``dry-run``), gives ``time_limit`` above the MPC's default
    (``controllers.mpc.SOLVE_TIME_LIMIT_S``, 10 s): that option lets a simulated solve run on, and a
    live tick must end. A malformed value is left to ``controllers.registry.build``'s message."""
    name, _, opts = spec.strip().partition(":")
    if name in NEEDS_A_TRACE:
        raise ValueError(f"--controller {name} needs a trace (simulate, compare); {command} takes one of: "
                         f"{', '.join(LIVE_CONTROLLERS)}")
    if command in ("run", "dry-run"):
        from controllers.mpc import SOLVE_TIME_LIMIT_S

        for opt in opts.split(":"):
            key, _, value = opt.partition("=")
            try:
                limit = float(value)
            except ValueError:
                continue
            if key.strip() == "time_limit" and limit > SOLVE_TIME_LIMIT_S:
                raise ValueError(f"--controller {spec}: time_limit={value} is for simulation (a solve may run "
                                 f"on); {command} runs in real time: at most {SOLVE_TIME_LIMIT_S:g} s")
