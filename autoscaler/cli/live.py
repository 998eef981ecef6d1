"""``autoscaler dry-run`` and ``autoscaler backtest``: the loop over a live Prometheus, never actuating."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from autoscaler import files
from autoscaler.cli.common import (
    StderrLog,
    app,
    check_service,
    connect_prometheus,
    console,
    err_console,
    examples,
    fail,
    interrupted,
    load_cfg,
    not_done,
    output_format,
    print_document,
    say,
    warn,
)
from autoscaler.cli.options import (
    ConfigOpt,
    JsonAliasOpt,
    LiveControllerOpt,
    PlotOpt,
    PrometheusUrlOpt,
    check_live_controller,
    output_help,
)
from autoscaler.errors import AutoscalerError, Terminated

if TYPE_CHECKING:
    from autoscaler.config import FleetConfig

SpeedOpt = Annotated[float, typer.Option(help="Source runs this many times faster than real time (a simulator "
                                         "served with --speed); 1 for a real cluster.")]


@app.command("dry-run", epilog=examples(
    "autoscaler dry-run --prometheus-url http://localhost:9090 --once",
    "autoscaler dry-run --config fleet.yaml --controller mpc -o json",
    "autoscaler dry-run --prometheus-url http://localhost:9090 --speed 10   # a simulator served at 10x",
))
def dry_run(
    prometheus_url: PrometheusUrlOpt = None,
    config: ConfigOpt = None,
    once: Annotated[bool, typer.Option("--once", help="Decide once and exit (exit 1 when no series matched the "
                                       "fleet's selectors).")] = False,
    interval: Annotated[float | None, typer.Option(help="Wall seconds between ticks (default: tick_s / speed).")
                        ] = None,
    ticks: Annotated[int | None, typer.Option(help="Stop after this many ticks (default: run until Ctrl-C).")] = None,
    output: Annotated[str, typer.Option("--output", "-o", help=output_help(
        "table | json", "json: one JSON object per tick and line (no yaml: the output is a stream)."))] = "table",
    speed: SpeedOpt = 1.0,
    serve_metrics: Annotated[str | None, typer.Option(help="HOST:PORT to serve the autoscaler_* metrics.")] = None,
    controller: LiveControllerOpt = "pid",
) -> None:
    """Observe a live Prometheus and print, tick by tick, what the loop would do. Never actuates.

    Exit status: 0; 1 when Prometheus cannot be reached, a bounded run's queries failed, a decision
    raised (one line: the controller, service, time and exception), or --once matched no series at all
    (the line names the selectors); 2 on bad input; 130 on Ctrl-C.
    """
    import logging
    import math

    from autoscaler.adapters.prometheus import check_speed
    from autoscaler.loop.export import parse_address
    from controllers.registry import build

    try:
        output = output_format(output, False, ("table", "json"))
        check_live_controller(controller, "dry-run")
        cfg = load_cfg(config)
        ctrl = build(controller, cfg)
        if once and (interval is not None or ticks is not None):
            raise ValueError("--once excludes --interval and --ticks")
        check_speed(speed, ctrl.window_s)
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
    from autoscaler.dryrun import DryRun, TickCount, run_ticks, serve_dry_run, tick_json, tick_tables, unmatched
    from autoscaler.loop.runner import TickError, TickRecord
    from autoscaler.wiring import build_source

    client = connect_prometheus(cfg, prometheus_url)
    run = DryRun(cfg, build_source(cfg, client, speed=speed, window_s=ctrl.window_s), ctrl, speed)
    try:
        server = serve_dry_run(run, serve_metrics) if serve_metrics else None
    except ValueError as exc:
        raise fail(str(exc)) from None
    count = TickCount()
    nothing: list[str] = []

    def show(record: TickRecord, wall: float) -> None:
        nothing[:] = unmatched(run, record)
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
    except TickError as exc:  # a decision raised (a bug): valid input, the run not done (exit 1)
        raise not_done(f"controller {ctrl.name}: {exc}; dry-run stopped after {count.done} tick(s)") from None
    finally:
        if server is not None:
            server.close()
    if count.failed:
        # A bounded run (--once, --ticks) whose queries failed did not show what the loop would do.
        err_console.print(f"[bold red]error:[/] queries failed on {count.failed} of {count.done} tick(s); the loop "
                          "held there", highlight=False, soft_wrap=True)
        raise typer.Exit(1)
    if once and nothing:
        # Every cell was "?": the fleet file's selectors name nothing in this Prometheus.
        say(f"error: --once: no series matched the fleet's selectors in this Prometheus: {'; '.join(nothing)}",
            err=True)
        raise typer.Exit(1)


@app.command(epilog=examples(
    "autoscaler backtest --prometheus-url http://localhost:9090 --start 2025-01-01T00:00 --end 2025-01-01T06:00",
    "autoscaler backtest --config fleet.yaml --start 1735689600 --end 1735693200 --controller mpc -o json",
    "autoscaler backtest --prometheus-url http://localhost:9090 --start 1735689600 --end 1735693200 --speed 10",
))
def backtest(
    start: Annotated[str, typer.Option(help="Range start: unix seconds or ISO 8601 (UTC if no offset).")],
    end: Annotated[str, typer.Option(help="Range end: unix seconds or ISO 8601.")],
    prometheus_url: PrometheusUrlOpt = None,
    config: ConfigOpt = None,
    step: Annotated[float | None, typer.Option(help="Seconds between ticks (default: the controller's tick).")] = None,
    service: Annotated[str | None, typer.Option(help="Service to plot (default: first).")] = None,
    out: Annotated[Path, typer.Option(help="Directory for timeline.csv and timeline.png.")] = Path("out"),
    plot: PlotOpt = False,
    output: Annotated[str, typer.Option("--output", "-o", help=output_help(
        "table | json | yaml", "json, yaml: the summary as a document."))] = "table",
    json_alias: JsonAliasOpt = False,
    speed: SpeedOpt = 1.0,
    controller: LiveControllerOpt = "pid",
) -> None:
    """Replay the decisions the loop would have made over a past range of a Prometheus's history.

    A range recorded from a simulator served at --speed N is read at that speed: rates divided by N,
    windows N times shorter, the default --step the controller's tick / N (at least 1 s).
    """
    import logging
    import math

    from autoscaler.adapters.prometheus import check_speed
    from autoscaler.backtest import OUTPUTS, check_range, parse_time, run_backtest, write_outputs
    from autoscaler.loop.runner import TickError
    from controllers.registry import build

    try:
        output = output_format(output, json_alias)
        check_live_controller(controller, "backtest")
        if not 0 < speed < math.inf:
            raise ValueError(f"--speed must be a finite number > 0, got {speed:g}")
        cfg = load_cfg(config)
        check_speed(speed, build(controller, cfg).window_s)
        if cfg.prometheus.query_set == "recorded" and speed != 1:
            raise ValueError("prometheus.query_set recorded reads rates recorded over real time: --speed must be 1")
        check_service(cfg, service)
        t0, t1 = parse_time(start, "--start"), parse_time(end, "--end")
        dt = max(1, round(build(controller, cfg).tick_s / speed)) if step is None else step
        check_range(t0, t1, dt)  # bad input exits 2 before connecting, even to an unreachable server
        files.check_writable(out)
        files.clear(out, OUTPUTS)
    except (AutoscalerError, ValueError) as exc:
        raise fail(str(exc)) from None
    with StderrLog(logging.ERROR):
        try:
            client = connect_prometheus(cfg, prometheus_url)
            url = prometheus_url or cfg.prometheus.url or ""
            run = run_backtest(cfg, client, t0, t1, dt, controller, speed)
            for warning in run.warnings:
                warn(warning)
            summary = write_outputs(run, out, url, service, plot=plot)
        except KeyboardInterrupt as exc:
            raise interrupted(out, OUTPUTS, exc) from None
        except TickError as exc:  # a decision raised (a bug): valid input, the run not done (exit 1)
            raise not_done(f"controller {controller}: {exc}; no results written to {out}") from None
        except (ValueError, OSError) as exc:
            raise fail(str(exc)) from None
    # A range whose queries failed did not show what the loop would do (dry-run's bounded runs alike).
    failed_ticks = sum(bool(rec.services[summary["service"]].estimate.errors) for rec in run.ticks)
    if output != "table":
        print_document(summary, output)
        _exit_if_queries_failed(failed_ticks, summary["ticks"])
        return
    from datetime import UTC, datetime

    from rich.table import Table

    span = " .. ".join(f"{datetime.fromtimestamp(x, UTC):%Y-%m-%d %H:%M:%S}" for x in (t0, t1))
    t = Table(title=f"backtest {span} UTC every {dt:g} s", show_header=True)
    t.add_column("metric")
    t.add_column("value", justify="right")
    for k, v in summary.items():
        value = ", ".join(f"{kind} {n}" for kind, n in sorted(v.items())) if isinstance(v, dict) else str(v)
        t.add_row(k.replace("_", " "), value)
    console.print(t)
    say(f"wrote {out / 'timeline.csv'}" + (f" and {out / 'timeline.png'}" if plot else ""))
    _exit_if_queries_failed(failed_ticks, summary["ticks"])


def _exit_if_queries_failed(failed: int, ticks: int) -> None:
    """Exit 1 with one line when queries failed on some tick (the outputs are written)."""
    if failed:
        err_console.print(f"[bold red]error:[/] queries failed on {failed} of {ticks} tick(s); the loop held there",
                          highlight=False, soft_wrap=True)
        raise typer.Exit(1)
