"""The options several commands share, defined once (typer ``Annotated`` aliases).

A command names its parameter and default; the help text lives here, so ``simulate`` and
``compare`` (the workload options), and the live commands (``dry-run``, ``backtest``, ``run``)
describe the same option the same way.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from controllers.registry import NAMES

ConfigOpt = Annotated[Path | None, typer.Option(help="Fleet YAML file (default: the embedded example fleet).")]
ControllerOpt = Annotated[str, typer.Option(
    help=f"Controller spec NAME[:key=value...]; NAME is one of {', '.join(NAMES)}.")]
PrometheusUrlOpt = Annotated[str | None, typer.Option(help="Prometheus base URL (default: prometheus.url).")]
PlotOpt = Annotated[bool, typer.Option("--plot", help="Write timeline.png.", metavar="")]

# The workload of simulate and compare (autoscaler.workload.build.build_workload).
TraceOpt = Annotated[Path | None, typer.Option(
    help="Request trace (Azure CSV, Mooncake JSONL or ServeGen folder); default: the embedded synthetic workload.")]
TraceFormatOpt = Annotated[str | None, typer.Option(help="azure | mooncake (default: detected).")]
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
