"""``autoscaler dry-run`` and ``autoscaler backtest``: the loop over a live Prometheus, never actuating."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from autoscaler import files
from autoscaler.cli.common import (
    StderrLog,
    app,
    check_service,
    connect_prometheus,
    console,
    err_console,
    fail,
    interrupted,
    load_cfg,
    warn,
)
from autoscaler.cli.options import ConfigOpt, ControllerOpt, PlotOpt, PrometheusUrlOpt
from autoscaler.config import FleetConfig
from autoscaler.errors import AutoscalerError, Terminated


@app.command("dry-run")
def dry_run(
    prometheus_url: PrometheusUrlOpt = None,
    config: ConfigOpt = None,
    once: Annotated[bool, typer.Option("--once", help="Decide once and exit.", metavar="")] = False,
    interval: Annotated[float | None, typer.Option(help="Wall seconds between ticks (default: tick_s / speed).")
                        ] = None,
    ticks: Annotated[int | None, typer.Option(help="Stop after this many ticks (default: run until Ctrl-C).")] = None,
    output: Annotated[str, typer.Option(help="table | json (one JSON object per tick and line).")] = "table",
    speed: Annotated[float, typer.Option(help="Source runs this many times faster than real time "
                                         "(a simulator served with --speed); 1 for a real cluster.")] = 1.0,
    serve_metrics: Annotated[str | None, typer.Option(help="HOST:PORT to serve the autoscaler_* metrics.")] = None,
    controller: ControllerOpt = "pid",
) -> None:
    """Observe a live Prometheus and print, tick by tick, what the loop would do. Never actuates."""
    import logging
    import math

    from autoscaler.loop.export import parse_address
    from controllers.registry import build

    try:
        cfg = load_cfg(config)
        ctrl = build(controller, cfg)
        if output not in ("table", "json"):
            raise ValueError(f"--output must be table or json, got '{output}'")
        if once and (interval is not None or ticks is not None):
            raise ValueError("--once excludes --interval and --ticks")
        # `not 0 < x < inf` also rejects NaN.
        if not 0 < speed < math.inf:
            raise ValueError(f"--speed must be a finite number > 0, got {speed:g}")
        if interval is not None and not 0 < interval < math.inf:
            raise ValueError(f"--interval must be a finite number > 0, got {interval:g}")
        if cfg.prometheus.query_set == "recorded" and speed != 1:
            raise ValueError("prometheus.query_set recorded reads rates recorded over real time: --speed must be 1")
        if ticks is not None and ticks < 1:
            raise ValueError(f"--ticks must be >= 1, got {ticks}")
        if serve_metrics is not None:
            try:
                parse_address(serve_metrics)  # before connecting: a bad address is bad input (exit 2)
            except ValueError as exc:
                raise ValueError(f"--serve-metrics {serve_metrics}: {exc}") from None
    except (AutoscalerError, ValueError) as exc:
        raise fail(str(exc)) from None
    # The table shows failures and ignored pods itself; JSON keeps stdout for data and logs to stderr.
    with StderrLog(logging.WARNING if output == "json" else logging.ERROR):
        _dry_run_ticks(cfg, ctrl, prometheus_url, once, interval, ticks, output, speed, serve_metrics)


def _dry_run_ticks(cfg: FleetConfig, ctrl: Any, prometheus_url: str | None, once: bool, interval: float | None,
                   ticks: int | None, output: str, speed: float, serve_metrics: str | None) -> None:
    """The dry-run of ``dry_run`` (arguments already checked): ticks printed as tables or JSON lines."""
    from autoscaler.dryrun import DryRun, TickCount, run_ticks, serve_dry_run, tick_json, tick_tables
    from autoscaler.loop.runner import TickRecord
    from autoscaler.wiring import build_source

    client = connect_prometheus(cfg, prometheus_url)
    run = DryRun(cfg, build_source(cfg, client, speed=speed, window_s=ctrl.window_s), ctrl, speed)
    try:
        server = serve_dry_run(run, serve_metrics) if serve_metrics else None
    except ValueError as exc:
        raise fail(str(exc)) from None
    count = TickCount()

    def show(record: TickRecord, wall: float) -> None:
        if output == "json":
            typer.echo(json.dumps(tick_json(run, record, wall)))
        else:
            for item in tick_tables(run, record, wall):
                console.print(item)

    try:
        run_ticks(run, interval if interval is not None else ctrl.tick_s / speed, 1 if once else ticks, show, count)
    except KeyboardInterrupt as exc:
        err_console.print(f"[bold red]interrupted:[/] dry-run stopped after {count.done} tick(s)", highlight=False)
        raise typer.Exit(143 if isinstance(exc, Terminated) else 130) from None
    finally:
        if server is not None:
            server.close()
    if count.failed:
        # A bounded run (--once, --ticks) whose queries failed did not show what the loop would do.
        err_console.print(f"[bold red]error:[/] queries failed on {count.failed} of {count.done} tick(s); the loop "
                          "held there", highlight=False, soft_wrap=True)
        raise typer.Exit(1)


@app.command()
def backtest(
    start: Annotated[str, typer.Option(help="Range start: unix seconds or ISO 8601 (UTC if no offset).")],
    end: Annotated[str, typer.Option(help="Range end: unix seconds or ISO 8601.")],
    prometheus_url: PrometheusUrlOpt = None,
    config: ConfigOpt = None,
    step: Annotated[float | None, typer.Option(help="Seconds between ticks (default: the controller's tick).")] = None,
    service: Annotated[str | None, typer.Option(help="Service to plot (default: first).")] = None,
    out: Annotated[Path, typer.Option(help="Directory for timeline.csv and timeline.png.")] = Path("out"),
    plot: PlotOpt = False,
    json_output: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.", metavar="")] = False,
    controller: ControllerOpt = "pid",
) -> None:
    """Replay the decisions the loop would have made over a past range of a Prometheus's history."""
    import logging

    from autoscaler.backtest import OUTPUTS, check_range, parse_time, run_backtest, write_outputs
    from controllers.registry import build

    try:
        cfg = load_cfg(config)
        check_service(cfg, service)
        t0, t1 = parse_time(start, "--start"), parse_time(end, "--end")
        dt = build(controller, cfg).tick_s if step is None else step
        check_range(t0, t1, dt)  # bad input exits 2 before connecting, even to an unreachable server
        files.check_writable(out)
        files.clear(out, OUTPUTS)
    except (AutoscalerError, ValueError) as exc:
        raise fail(str(exc)) from None
    with StderrLog(logging.ERROR):
        try:
            client = connect_prometheus(cfg, prometheus_url)
            url = prometheus_url or cfg.prometheus.url or ""
            run = run_backtest(cfg, client, t0, t1, dt, controller)
            for warning in run.warnings:
                warn(warning)
            summary = write_outputs(run, out, url, service, plot=plot)
        except KeyboardInterrupt as exc:
            raise interrupted(out, OUTPUTS, exc) from None
        except (ValueError, OSError) as exc:
            raise fail(str(exc)) from None
    if json_output:
        console.print_json(json.dumps(summary))
        return
    from datetime import UTC, datetime

    span = " .. ".join(f"{datetime.fromtimestamp(x, UTC):%Y-%m-%d %H:%M:%S}" for x in (t0, t1))
    t = Table(title=f"backtest {span} UTC every {dt:g} s", show_header=True)
    t.add_column("metric")
    t.add_column("value", justify="right")
    for k, v in summary.items():
        value = ", ".join(f"{kind} {n}" for kind, n in sorted(v.items())) if isinstance(v, dict) else str(v)
        t.add_row(k.replace("_", " "), value)
    console.print(t)
    console.print(f"wrote {out / 'timeline.csv'}" + (f" and {out / 'timeline.png'}" if plot else ""),
                  highlight=False, soft_wrap=True)
