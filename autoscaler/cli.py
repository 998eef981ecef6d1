"""The ``autoscaler`` command line (typer + rich).

Every user error (bad fleet file, bad trace line, unknown controller) prints one line
``error: <what and where>`` on stderr and exits with status 2; no traceback.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from autoscaler import files
from autoscaler.config import FleetConfig
from autoscaler.config.base import MAX_INT
from autoscaler.config.loading import default_config, load_config
from autoscaler.errors import AutoscalerError, Terminated
from autoscaler.workload.build import DEFAULT_BATCH_FRACTION, build_workload, parse_span
from controllers.registry import NAMES

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Observability-driven control-loop autoscaler for LLM inference fleets.")
console = Console()
err_console = Console(stderr=True)


@app.callback()
def _main() -> None:
    """Observability-driven control-loop autoscaler for LLM inference fleets."""


def _fail(msg: str) -> typer.Exit:
    one_line = msg.replace("\r", "\\r").replace("\n", "\\n")  # a name may hold a newline; the error stays one line
    err_console.print(f"[bold red]error:[/] {escape(one_line)}", highlight=False, soft_wrap=True)
    return typer.Exit(2)


def _load_cfg(config: Path | None) -> FleetConfig:
    return default_config() if config is None else load_config(config)


def _warn(msg: str) -> None:
    err_console.print(f"[bold yellow]warning:[/] {escape(msg)}", highlight=False, soft_wrap=True)


class _Progress:
    """Progress of a long run on stderr: a bar on a terminal, a line per 10 % otherwise (logs, CI)."""

    def __init__(self, label: str, enabled: bool = True) -> None:
        self.label = label
        self.enabled = enabled
        self.bar: Progress | None = None
        self.next = 0.1

    def __enter__(self) -> _Progress:
        if self.enabled and err_console.is_terminal:
            self.bar = Progress(TextColumn("[bold]{task.description}[/]"), BarColumn(), TaskProgressColumn(),
                                TimeElapsedColumn(), console=err_console, transient=True)
            self.bar.__enter__()
            self.task = self.bar.add_task(self.label, total=1.0)
        return self

    def update(self, fraction: float) -> None:
        """Record progress (0..1)."""
        if self.bar is not None:
            self.bar.update(self.task, completed=fraction)
            return
        while self.enabled and fraction >= self.next - 1e-9 and self.next <= 1.0 + 1e-9:
            err_console.print(f"{self.label}: {self.next:.0%}", highlight=False)
            self.next += 0.1

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.__exit__(None, None, None)


def _interrupted(out: Path, names: tuple[str, ...], exc: KeyboardInterrupt) -> typer.Exit:
    """Remove what the run had written of its outputs, say so, and exit 130 (Ctrl-C) or 143 (SIGTERM)."""
    try:
        files.clear(out, names)
    except ValueError as err:
        _warn(str(err))
    err_console.print(f"[bold red]interrupted:[/] no results written to {escape(str(out))} (the files an earlier "
                      "run left there under the same names were removed when this one started)", highlight=False,
                      soft_wrap=True)
    return typer.Exit(143 if isinstance(exc, Terminated) else 130)


def _fmt(x: Any, spec: str = ".3f") -> str:
    return "-" if x is None else format(x, spec)


def results_table(res: dict[str, Any]) -> Table:
    """A rich table of one run's ``results.json``."""
    a = res["admission"]
    policy = "" if a["policy"] == "none" else f"@{a['policy']}"
    t = Table(title=f"{res['controller']}{policy} on {res['workload']}", show_header=True)
    t.add_column("metric")
    t.add_column("value", justify="right")
    r = res["requests"]
    if policy:
        t.add_row("requests total / completed / rejected / shed / failed",
                  f"{r['total']} / {r['completed']} / {r['rejected']} / {r['rejected_admission']} / {r['failed']}")
    else:
        t.add_row("requests total / completed / rejected / failed",
                  f"{r['total']} / {r['completed']} / {r['rejected']} / {r['failed']}")
    for c, d in res["slo_attainment_detail"].items():
        t.add_row(f"SLO attainment {c} (TTFT / ITL / both)",
                  f"{_fmt(d['ttft'], '.2%')} / {_fmt(d['itl'], '.2%')} / {_fmt(d['both'], '.2%')}")
    bp = res["slo_attainment_by_priority"]
    t.add_row("SLO attainment critical / standard / sheddable",
              f"{_fmt(bp['critical'], '.2%')} / {_fmt(bp['standard'], '.2%')} / {_fmt(bp['sheddable'], '.2%')}")
    if policy:
        t.add_row(f"admission {a['policy']}: shed (429s) / deferred / mid-workflow",
                  f"{a['shed']} ({a['shed_attempts']}) / {a['deferred']} / {a['shed_mid_workflow']}")
    if a["retries"]:
        t.add_row("client retries", str(a["retries"]))
    for k, label in (("ttft_s", "TTFT"), ("itl_s", "ITL")):
        q = res[k]
        t.add_row(f"{label} p50 / p95 / p99 (s)", f"{_fmt(q['p50'])} / {_fmt(q['p95'])} / {_fmt(q['p99'])}")
    for v, h in res["gpu_hours"].items():
        t.add_row(f"GPU-hours / $ {v}", f"{h:.2f} / ${res['cost_usd'][v]:.2f}")
    t.add_row("cost per successful request", f"${_fmt(res['cost_per_successful_request_usd'], '.7f')}")
    t.add_row("cost per successful task", f"${_fmt(res['cost_per_successful_task_usd'], '.7f')}")
    t.add_row("prefix-cache hit rate", _fmt(res["prefix_cache_hit_rate"], ".2%"))
    t.add_row("preemptions / scale events", f"{res['preemptions']} / {res['scale_events']}")
    crashes = res.get("crashes") or []
    if crashes:
        applied = [c for c in crashes if c["applied"]]
        skipped = "; ".join(f"{c['variant']} at {c['time_s']:g} s: {c['why']}" for c in crashes if not c["applied"])
        t.add_row("injected crashes applied / failed requests",
                  f"{len(applied)} of {len(crashes)} / {sum(c['failed_requests'] for c in applied)}"
                  + (f" (skipped: {skipped})" if skipped else ""))
    t.add_row("simulated requests per wall-second",
              f"{_fmt(res['simulated_requests_per_s'], ',.0f')} ({res['wall_s']:.2f} s wall)")
    return t


@app.command()
def simulate(
    config: Annotated[Path | None, typer.Option(help="Fleet YAML file (default: the embedded example fleet).")] = None,
    trace: Annotated[Path | None, typer.Option(help="Request trace (Azure CSV, Mooncake JSONL or ServeGen folder); "
                                               "default: the embedded synthetic workload.")] = None,
    trace_format: Annotated[str | None, typer.Option(help="azure | mooncake (default: detected).")] = None,
    span: Annotated[str | None, typer.Option(
        help="START:END seconds: only the requests arriving then (a ServeGen folder: that part of its "
             "time axis; default its first day).", show_default=False)] = None,
    lengths_from: Annotated[Path | None, typer.Option(
        help="With a ServeGen folder: draw each request's (input, output) tokens from this trace.")] = None,
    controller: Annotated[str, typer.Option(
        help=f"Controller spec NAME[:key=value...]; NAME is one of {', '.join(NAMES)}.")] = "pid",
    rate_scale: Annotated[float, typer.Option(help="Thin (<1) or superpose jittered copies (>1).")] = 1.0,
    time_scale: Annotated[float, typer.Option(help="Multiply arrival times (0.5 = twice as fast).")] = 1.0,
    batch_fraction: Annotated[
        float, typer.Option(help="Share of trace requests in the batch class.")
    ] = DEFAULT_BATCH_FRACTION,
    service: Annotated[str | None, typer.Option(help="Service the trace targets (default: first).")] = None,
    seed: Annotated[int, typer.Option(help="Seed for class assignment and rate shaping.")] = 0,
    out: Annotated[Path, typer.Option(help="Directory for results.json, timeline.csv, timeline.png.")] = Path(
        "out"),
    plot: Annotated[bool, typer.Option("--plot", help="Write timeline.png.", metavar="")] = False,
    json_output: Annotated[bool, typer.Option("--json", help="Print results.json instead of a table.",
                                              metavar="")] = False,
    serve_metrics: Annotated[str | None, typer.Option(
        help="HOST:PORT: run in scaled real time and serve every replica's vLLM metrics for Prometheus.")] = None,
    speed: Annotated[float | None, typer.Option(
        help="With --serve-metrics: simulated seconds per wall second (default 1).")] = None,
    admission: Annotated[str | None, typer.Option(
        help="Admission policy at the gateway: none | pid | mpc (default: none for the anchors, the fleet "
             "file's controller.admission otherwise).", show_default=False)] = None,
) -> None:
    """Run the control loop on a trace against the embedded fleet simulator."""
    from autoscaler.report import OUTPUTS, write_outputs
    from autoscaler.simulate import long_run_warning, run_simulation
    from controllers.registry import parse_spec

    names = (*OUTPUTS, "realtime.json")
    try:
        if seed < 0:
            raise ValueError(f"--seed must be >= 0, got {seed}")
        if serve_metrics is None and speed is not None:
            raise ValueError("--speed needs --serve-metrics")
        cfg = _load_cfg(config)
        if service is not None and service not in {s.name for s in cfg.services}:
            raise ValueError(f"unknown service '{service}' (fleet has: {', '.join(s.name for s in cfg.services)})")
        parse_spec(controller)  # a bad spec fails before the trace is read
        _check_admission(admission)
        span_s = None if span is None else parse_span(span)
        files.check_writable(out)
        files.clear(out, names)
        if serve_metrics is not None:
            res = _served_simulation(cfg, controller, service, serve_metrics, 1.0 if speed is None else speed, out,
                                     plot, json_output, admission,
                                     lambda: build_workload(trace, trace_format, rate_scale, time_scale, seed,
                                                            batch_fraction, span_s, lengths_from))
        else:
            wl = build_workload(trace, trace_format, rate_scale, time_scale, seed, batch_fraction, span_s, lengths_from)
            warning = long_run_warning(cfg, wl, service)
            if warning:
                _warn(warning)
            shown = controller if admission is None else f"{controller}@{admission}"
            with _Progress(f"simulating {len(wl.requests)} requests, {shown}", not json_output) as bar:
                run = run_simulation(cfg, wl, controller, service, progress=bar.update, admission=admission)
            res = write_outputs(run, out, plot=plot)
    except KeyboardInterrupt as exc:
        raise _interrupted(out, names, exc) from None
    except (AutoscalerError, ValueError, OSError) as exc:
        raise _fail(str(exc)) from None
    if json_output:
        console.print_json(json.dumps(res))
    else:
        console.print(results_table(res))
        written = [out / "results.json", out / "timeline.csv"] + ([out / "timeline.png"] if plot else [])
        console.print(f"wrote {', '.join(str(p) for p in written[:-1])} and {written[-1]}", highlight=False,
                      soft_wrap=True)


def _check_admission(admission: str | None) -> None:
    from autoscaler.config import ADMISSION_MODES

    if admission is not None and admission not in ADMISSION_MODES:
        raise ValueError(f"--admission must be one of {', '.join(ADMISSION_MODES)}, got '{admission}'")


def _served_simulation(cfg: FleetConfig, controller: str, service: str | None, address: str, speed: float,
                       out: Path, plot: bool, quiet: bool, admission: str | None, workload: Any) -> dict[str, Any]:
    """``simulate --serve-metrics``: bind the address and say so first, then build the workload and run
    paced (``autoscaler.realtime``); writes ``realtime.json`` beside the results."""
    from prometheus_client import CollectorRegistry

    from autoscaler.loop.admission import PATH, AdmissionDocument
    from autoscaler.loop.export import parse_address, serve
    from autoscaler.realtime import LiveSimulation, write_tick_times
    from autoscaler.report import write_outputs

    if not 0 < speed < float("inf"):
        raise ValueError(f"--speed must be a finite number > 0, got {speed:g}")
    try:
        host, _ = parse_address(address)
    except ValueError as exc:
        raise ValueError(f"--serve-metrics {address}: {exc}") from None
    registry = CollectorRegistry()
    document = AdmissionDocument()
    try:
        server = serve(registry, address, {PATH: document.json})
    except OSError as exc:
        raise ValueError(f"--serve-metrics {address}: {exc.strerror or exc}") from None
    try:
        err_console.print(f"serving metrics at http://{host}:{server.port}/metrics and admission thresholds at "
                          f"{PATH}, at {speed:g}x real time", highlight=False, soft_wrap=True)
        wl = workload()
        live = LiveSimulation(cfg, wl, controller, service, registry=registry, admission=admission, document=document)
        shown = controller if admission is None else f"{controller}@{admission}"
        with _Progress(f"serving {len(wl.requests)} requests, {shown}", not quiet) as bar:
            run = live.run(speed=speed, progress=bar.update)
        res = write_outputs(run, out, plot=plot)
        write_tick_times(live, speed, out / "realtime.json")
        return res
    finally:
        server.close()


class _StderrLog:
    """While open, the ``autoscaler`` loggers (failed queries, ignored pods) write to this command's stderr."""

    def __init__(self, level: int) -> None:
        import logging
        import sys

        self.logger = logging.getLogger("autoscaler")
        self.level = level
        self.handler = logging.StreamHandler(sys.stderr)
        self.handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))

    def __enter__(self) -> None:
        self.old_level = self.logger.level
        self.logger.addHandler(self.handler)
        self.logger.setLevel(self.level)

    def __exit__(self, *exc: object) -> None:
        self.logger.removeHandler(self.handler)
        self.logger.setLevel(self.old_level)


def _prometheus(cfg: FleetConfig, url: str | None) -> Any:
    """A reachable client for ``url`` (or the fleet file's ``prometheus.url``).

    Bad settings exit 2; an unreachable server exits 1, both with one line.
    """
    from autoscaler.adapters.prometheus import PrometheusError, check_reachable, connect

    url = url or cfg.prometheus.url
    if not url:
        raise _fail("no Prometheus URL: pass --prometheus-url or set prometheus.url in the fleet file")
    try:
        client = connect(cfg.prometheus, url)
    except PrometheusError as exc:
        raise _fail(str(exc)) from None
    try:
        check_reachable(client)
    except PrometheusError as exc:
        err_console.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None
    return client


@app.command("dry-run")
def dry_run(
    prometheus_url: Annotated[str | None, typer.Option(help="Prometheus base URL (default: prometheus.url).")] = None,
    config: Annotated[Path | None, typer.Option(help="Fleet YAML file (default: the embedded example fleet).")] = None,
    once: Annotated[bool, typer.Option("--once", help="Decide once and exit.", metavar="")] = False,
    interval: Annotated[float | None, typer.Option(help="Wall seconds between ticks (default: tick_s / speed).")
                        ] = None,
    ticks: Annotated[int | None, typer.Option(help="Stop after this many ticks (default: run until Ctrl-C).")] = None,
    output: Annotated[str, typer.Option(help="table | json (one JSON object per tick and line).")] = "table",
    speed: Annotated[float, typer.Option(help="Source runs this many times faster than real time "
                                         "(a simulator served with --speed); 1 for a real cluster.")] = 1.0,
    serve_metrics: Annotated[str | None, typer.Option(help="HOST:PORT to serve the autoscaler_* metrics.")] = None,
    controller: Annotated[str, typer.Option(
        help=f"Controller spec NAME[:key=value...]; NAME is one of {', '.join(NAMES)}.")] = "pid",
) -> None:
    """Observe a live Prometheus and print, tick by tick, what the loop would do. Never actuates."""
    import logging
    import math

    from autoscaler.loop.export import parse_address
    from controllers.registry import build

    try:
        cfg = _load_cfg(config)
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
        raise _fail(str(exc)) from None
    # The table shows failures and ignored pods itself; JSON keeps stdout for data and logs to stderr.
    with _StderrLog(logging.WARNING if output == "json" else logging.ERROR):
        _dry_run_ticks(cfg, ctrl, prometheus_url, once, interval, ticks, output, speed, serve_metrics)


def _dry_run_ticks(cfg: FleetConfig, ctrl: Any, prometheus_url: str | None, once: bool, interval: float | None,
                   ticks: int | None, output: str, speed: float, serve_metrics: str | None) -> None:
    """The dry-run loop of ``dry_run`` (arguments already checked)."""
    import time

    from autoscaler.dryrun import DryRun, tick_json, tick_tables
    from autoscaler.loop.admission import PATH
    from autoscaler.loop.export import serve
    from autoscaler.loop.ticker import run_every
    from autoscaler.wiring import build_source

    client = _prometheus(cfg, prometheus_url)
    run = DryRun(cfg, build_source(cfg, client, speed=speed, window_s=ctrl.window_s), ctrl, speed)
    try:
        server = serve(run.metrics.registry, serve_metrics, {PATH: run.document.json}) if serve_metrics else None
    except ValueError as exc:
        raise _fail(f"--serve-metrics {serve_metrics}: {exc}") from None
    except OSError as exc:
        raise _fail(f"--serve-metrics {serve_metrics}: {exc.strerror or exc}") from None
    done, failed = [0], [0]

    def tick() -> None:
        record = run.tick()
        wall = time.time()
        done[0] += 1
        failed[0] += any(st.estimate.errors for st in record.services.values())
        if output == "json":
            typer.echo(json.dumps(tick_json(run, record, wall)))
        else:
            for item in tick_tables(run, record, wall):
                console.print(item)

    try:
        run_every(interval if interval is not None else ctrl.tick_s / speed, tick, 1 if once else ticks)
    except KeyboardInterrupt as exc:
        err_console.print(f"[bold red]interrupted:[/] dry-run stopped after {done[0]} tick(s)", highlight=False)
        raise typer.Exit(143 if isinstance(exc, Terminated) else 130) from None
    finally:
        if server is not None:
            server.close()
    if failed[0]:
        # A bounded run (--once, --ticks) whose queries failed did not show what the loop would do.
        err_console.print(f"[bold red]error:[/] queries failed on {failed[0]} of {done[0]} tick(s); the loop held "
                          "there", highlight=False, soft_wrap=True)
        raise typer.Exit(1)


@app.command()
def backtest(
    start: Annotated[str, typer.Option(help="Range start: unix seconds or ISO 8601 (UTC if no offset).")],
    end: Annotated[str, typer.Option(help="Range end: unix seconds or ISO 8601.")],
    prometheus_url: Annotated[str | None, typer.Option(help="Prometheus base URL (default: prometheus.url).")] = None,
    config: Annotated[Path | None, typer.Option(help="Fleet YAML file (default: the embedded example fleet).")] = None,
    step: Annotated[float | None, typer.Option(help="Seconds between ticks (default: the controller's tick).")] = None,
    service: Annotated[str | None, typer.Option(help="Service to plot (default: first).")] = None,
    out: Annotated[Path, typer.Option(help="Directory for timeline.csv and timeline.png.")] = Path("out"),
    plot: Annotated[bool, typer.Option("--plot", help="Write timeline.png.", metavar="")] = False,
    json_output: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.", metavar="")] = False,
    controller: Annotated[str, typer.Option(
        help=f"Controller spec NAME[:key=value...]; NAME is one of {', '.join(NAMES)}.")] = "pid",
) -> None:
    """Replay the decisions the loop would have made over a past range of a Prometheus's history."""
    import logging

    from autoscaler.backtest import OUTPUTS, check_range, parse_time, run_backtest, write_outputs
    from controllers.registry import build

    try:
        cfg = _load_cfg(config)
        if service is not None and service not in {s.name for s in cfg.services}:
            raise ValueError(f"unknown service '{service}' (fleet has: {', '.join(s.name for s in cfg.services)})")
        t0, t1 = parse_time(start, "--start"), parse_time(end, "--end")
        dt = build(controller, cfg).tick_s if step is None else step
        check_range(t0, t1, dt)  # bad input exits 2 before connecting, even to an unreachable server
        files.check_writable(out)
        files.clear(out, OUTPUTS)
    except (AutoscalerError, ValueError) as exc:
        raise _fail(str(exc)) from None
    with _StderrLog(logging.ERROR):
        try:
            client = _prometheus(cfg, prometheus_url)
            url = prometheus_url or cfg.prometheus.url or ""
            run = run_backtest(cfg, client, t0, t1, dt, controller)
            for warning in run.warnings:
                _warn(warning)
            summary = write_outputs(run, out, url, service, plot=plot)
        except KeyboardInterrupt as exc:
            raise _interrupted(out, OUTPUTS, exc) from None
        except (ValueError, OSError) as exc:
            raise _fail(str(exc)) from None
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



DEFAULT_COMPARE = "hpa,keda,kpa,aibrix,dynamo,wva,static,static-ilp,pid"


@app.command()
def compare(
    config: Annotated[Path | None, typer.Option(help="Fleet YAML file (default: the embedded example fleet).")] = None,
    trace: Annotated[Path | None, typer.Option(help="Request trace (Azure CSV, Mooncake JSONL or ServeGen folder); "
                                               "default: the embedded synthetic workload.")] = None,
    trace_format: Annotated[str | None, typer.Option(help="azure | mooncake (default: detected).")] = None,
    span: Annotated[str | None, typer.Option(
        help="START:END seconds: only the requests arriving then (a ServeGen folder: that part of its "
             "time axis; default its first day).", show_default=False)] = None,
    lengths_from: Annotated[Path | None, typer.Option(
        help="With a ServeGen folder: draw each request's (input, output) tokens from this trace.")] = None,
    controllers: Annotated[str, typer.Option(help="Comma-separated controllers or baseline specs "
                                             f"(name:key=value...). Default: {DEFAULT_COMPARE.replace(',', ', ')}.",
                                             show_default=False)] = DEFAULT_COMPARE,
    rate_scale: Annotated[float, typer.Option(help="Thin (<1) or superpose jittered copies (>1).")] = 1.0,
    time_scale: Annotated[float, typer.Option(help="Multiply arrival times (0.5 = twice as fast).")] = 1.0,
    batch_fraction: Annotated[
        float, typer.Option(help="Share of trace requests in the batch class.")
    ] = DEFAULT_BATCH_FRACTION,
    service: Annotated[str | None, typer.Option(help="Service the trace targets (default: first).")] = None,
    seed: Annotated[int, typer.Option(help="Seed for class assignment and rate shaping.")] = 0,
    workers: Annotated[int | None, typer.Option(help="Processes (default: min(controllers, CPUs)).")] = None,
    out: Annotated[Path, typer.Option(help="Directory for compare.json and compare.png.")] = Path("out"),
    json_output: Annotated[bool, typer.Option("--json", help="Print compare.json instead of a table.",
                                              metavar="")] = False,
    wide: Annotated[bool, typer.Option("--wide", help="Add p99 ITL, $, $/succ. task, scale events, wall s.",
                                       metavar="")] = False,
    floor: Annotated[float, typer.Option(help="Interactive SLO attainment a row needs to be ranked by cost.")
                     ] = 0.99,
    admission: Annotated[str | None, typer.Option(
        help="Admission policy at the gateway: none | pid | mpc (default: none for the anchors, the fleet "
             "file's controller.admission otherwise); a row SPEC@POLICY sets its own.", show_default=False)] = None,
) -> None:
    """Run several controllers on the same trace, fleet and seed and print them side by side."""
    from autoscaler.compare import OUTPUTS, check_names, columns, legend, run_compare, table_cells, write_comparison
    from autoscaler.simulate import long_run_warning

    try:
        if not 0 <= floor <= 1:
            raise ValueError(f"--floor must be in [0, 1], got {floor:g}")
        if seed < 0:
            raise ValueError(f"--seed must be >= 0, got {seed}")
        if workers is not None and workers < 1:
            raise ValueError(f"--workers must be >= 1, got {workers}")
        cfg = _load_cfg(config)
        if service is not None and service not in {s.name for s in cfg.services}:
            raise ValueError(f"unknown service '{service}' (fleet has: {', '.join(s.name for s in cfg.services)})")
        names = [c.strip() for c in controllers.split(",")]
        names = names if any(names) else []
        if "" in names:
            raise ValueError(f"--controllers '{controllers}': an empty entry (two commas, or one at an end)")
        check_names(names)
        _check_admission(admission)
        span_s = None if span is None else parse_span(span)
        files.check_writable(out)
        files.clear(out, OUTPUTS)
        wl = build_workload(trace, trace_format, rate_scale, time_scale, seed, batch_fraction, span_s, lengths_from)
        warning = long_run_warning(cfg, wl, service)
        if warning:
            _warn(warning)
        finished = []

        def done(row: dict[str, Any]) -> None:
            finished.append(row)
            err_console.print(f"done {len(finished)}/{len(names)}: {row['controller']} ({row['wall_s']:.1f} s)",
                              highlight=False)

        comp = run_compare(cfg, wl, names, service, workers, done=done, floor=floor, admission=admission)
        paths = write_comparison(comp, cfg, service, out)
    except KeyboardInterrupt as exc:
        raise _interrupted(out, OUTPUTS, exc) from None
    except (AutoscalerError, ValueError, OSError) as exc:
        raise _fail(str(exc)) from None
    if json_output:
        console.print_json(json.dumps(comp.rows))
        return
    t = Table(title=f"{len(wl.requests)} requests of {wl.source} (rate x{rate_scale:g}, seed {seed})",
              title_justify="left")
    for i, (h, _) in enumerate(columns(wide)):
        t.add_column(h, justify="left" if i == 0 else "right", overflow="fold", no_wrap=i > 0)
    for cells in table_cells(comp.rows, wide):
        t.add_row(*cells)
    # Printed whole whatever the terminal (or pipe) width: 100 columns, or the wide table's own width.
    width = max(console.width if console.is_terminal else 0, 170 if wide else 100)
    Console(width=width, highlight=False).print(t)
    for line in legend(comp.rows):
        console.print(line, highlight=False, soft_wrap=True)
    console.print(f"wrote {' and '.join(str(p) for p in paths)}", highlight=False, soft_wrap=True)


@app.command("run")
def run_daemon(
    config: Annotated[Path, typer.Option(help="Fleet YAML file.")],
    controller: Annotated[str, typer.Option(
        help=f"Controller spec NAME[:key=value...]; NAME is one of {', '.join(NAMES)}.")] = "pid",
    kubeconfig: Annotated[Path | None, typer.Option(
        help="kubeconfig file (default: the pod's service account in a cluster, else $KUBECONFIG or "
             "~/.kube/config).")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Do everything but the writes; log them.",
                                          metavar="")] = False,
    port: Annotated[int, typer.Option(help="Port of /metrics, /healthz, /readyz and /v1/admission.")] = 9090,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "0.0.0.0",
    prometheus_url: Annotated[str | None, typer.Option(help="Prometheus base URL (default: prometheus.url).")] = None,
    identity: Annotated[str | None, typer.Option(
        help="This daemon's name in the Lease (default: $POD_NAME, else HOST-PID).")] = None,
    log_format: Annotated[str, typer.Option(help="text | json (one JSON object per line).")] = "text",
) -> None:
    """Run the control loop on a cluster (docs/daemon.md).

    Leader election, scale subresource writes, admission ConfigMaps, Events. SIGTERM finishes the
    tick and releases the lease."""
    import logging
    import os
    import signal
    import socket
    import sys

    from autoscaler.adapters.kubernetes import connect as kube_connect
    from autoscaler.adapters.prometheus import PrometheusError
    from autoscaler.adapters.prometheus import connect as prom_connect
    from autoscaler.daemon import Daemon, json_formatter
    from autoscaler.wiring import build_source

    try:
        cfg = _load_cfg(config)
        if log_format not in ("text", "json"):
            raise ValueError(f"--log-format must be text or json, got '{log_format}'")
        if not 0 <= port <= 65535:
            raise ValueError(f"--port must be in 0..65535, got {port}")
        url = prometheus_url or cfg.prometheus.url
        if not url:
            raise ValueError("no Prometheus URL: pass --prometheus-url or set prometheus.url in the fleet file")
        source = build_source(cfg, prom_connect(cfg.prometheus, url))
        api = kube_connect(kubeconfig)
        name = identity or os.environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}"
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(json_formatter() if log_format == "json" else
                             logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root = logging.getLogger("autoscaler")
        root.addHandler(handler)
        root.setLevel(logging.INFO)
        daemon = Daemon(cfg, controller, source, api, name, f"{host}:{port}", dry_run=dry_run)
    except (AutoscalerError, PrometheusError, ValueError) as exc:
        raise _fail(str(exc)) from None
    except OSError as exc:
        raise _fail(f"--host {host} --port {port}: {exc.strerror or exc}") from None
    signal.signal(signal.SIGTERM, lambda *_: daemon.stop())
    logging.getLogger("autoscaler.daemon").info("%s serving on %s:%d (%s%s)", name, host, daemon.server.port,
                                                controller, ", dry run" if dry_run else "")
    try:
        daemon.run()
    except KeyboardInterrupt:
        daemon.stop()


admission_app = typer.Typer(no_args_is_help=True, help="Admission thresholds for a real gateway.")
app.add_typer(admission_app, name="admission")


@admission_app.command("objectives")
def admission_objectives(
    source: Annotated[str, typer.Argument(help="the loop's address (http://HOST:PORT, /v1/admission added) "
                                                "or a file holding an admission document")],
    pool: Annotated[str | None, typer.Option(
        help="the InferencePool the objectives name (default: the service)")] = None,
    namespace: Annotated[str | None, typer.Option(help="the objectives' namespace")] = None,
) -> None:
    """Print the thresholds in force as Gateway API Inference Extension InferenceObjectives.

    One objective per service and priority (docs/admission.md), for `kubectl apply -f -`.
    """
    import yaml

    from autoscaler.adapters.gateway_api import objectives, read_document
    try:
        manifests = objectives(read_document(source), pool, namespace)
    except ValueError as exc:
        raise _fail(str(exc)) from None
    if not manifests:
        raise _fail(f"admission document at {source}: no thresholds published yet (the loop publishes them "
                    "at its first decision)")
    typer.echo(yaml.safe_dump_all(manifests, sort_keys=False), nl=False)


dashboards_app = typer.Typer(no_args_is_help=True, help="The Grafana dashboards and Prometheus rules.")
app.add_typer(dashboards_app, name="dashboards")


@dashboards_app.command("export")
def dashboards_export(
    out: Annotated[Path, typer.Option(help="directory to write dashboards/, provisioning/ and rules/ under")],
    config: Annotated[Path | None, typer.Option(help="fleet file (default: the embedded default fleet)")] = None,
    objective: Annotated[float, typer.Option(
        help="fraction of interactive requests within their objectives the burn-rate alerts defend")] = 0.99,
    prometheus_url: Annotated[str | None, typer.Option(
        help="the URL the provisioned Grafana datasource points at (default: the fleet's prometheus.url, "
             "else http://prometheus:9090)")] = None,
) -> None:
    """Write the dashboard bundle for a fleet: Grafana dashboards, provisioning, Prometheus rules
    (docs/dashboards.md)."""
    from autoscaler.dashboards.bundle import render, write
    from autoscaler.urls import check_url

    try:
        cfg = _load_cfg(config)
        if not str(out).strip():
            raise ValueError("--out must name a directory")
        if prometheus_url is not None:
            check_url(prometheus_url)
        paths = write(render(cfg, objective, prometheus_url), out)
    except (AutoscalerError, ValueError, OSError) as exc:
        raise _fail(str(exc)) from None
    console.print(f"wrote {len(paths)} files under {out}", highlight=False, soft_wrap=True)


faults_app = typer.Typer(no_args_is_help=True, help="Fault scenarios: the failures the anchors' users reported.")
app.add_typer(faults_app, name="faults")


@faults_app.command("run")
def faults_run(
    scenarios: Annotated[str | None, typer.Option(
        help="comma-separated scenario names (default: every *.yaml of --suite)", show_default=False)] = None,
    controllers: Annotated[str, typer.Option(help="comma-separated controller specs (SPEC@POLICY sets a row's "
                                             "admission policy)")] = "pid,mpc,hpa,keda,kpa,aibrix,dynamo,wva",
    out: Annotated[Path | None, typer.Option(help="directory for faults.json and faults.md")] = None,
    json_output: Annotated[bool, typer.Option("--json", help="print the rows as JSON instead of a table",
                                              metavar="")] = False,
    suite: Annotated[Path | None, typer.Option(
        help="folder of scenario files (default: benchmarks/faults of this source tree)", show_default=False)] = None,
    data: Annotated[Path, typer.Option(help="folder holding the traces that trace scenarios name")] = Path(
        "../shared/data"),
    workers: Annotated[int | None, typer.Option(help="processes for the simulator rows (default: CPUs)")] = None,
    seed: Annotated[int | None, typer.Option(help="workload seed of every scenario (default: each file's own)",
                                             show_default=False)] = None,
) -> None:
    """Run the fault scenarios against the controllers and print one table.

    Scenario x controller -> harmful actions, interactive attainment, requests failed, retries and
    cost (docs/faults.md)."""
    from autoscaler.faults.rows import markdown_table, write_results
    from autoscaler.faults.suite import load_suite, run_suite, suite_dir

    try:
        if workers is not None and workers < 1:
            raise ValueError(f"--workers must be >= 1, got {workers}")
        if seed is not None and not 0 <= seed <= MAX_INT:
            raise ValueError(f"--seed must be in [0, 2**53], got {seed}")
        names = [c.strip() for c in controllers.split(",")]
        if "" in names or len(set(names)) != len(names):
            raise ValueError(f"--controllers '{controllers}': an empty or repeated entry")
        wanted = None if scenarios is None else [s.strip() for s in scenarios.split(",")]
        if wanted is not None and ("" in wanted or len(set(wanted)) != len(wanted)):
            raise ValueError(f"--scenarios '{scenarios}': an empty or repeated entry")
        suite_path = suite_dir() if suite is None else suite
        chosen = load_suite(suite_path, wanted)
        if seed is not None:
            chosen = [sc.model_copy(update={"seed": seed}) for sc in chosen]
        if out is not None:
            files.check_writable(out)
        total = len(chosen) * len(names)
        finished: list[dict[str, Any]] = []

        def done(row: dict[str, Any]) -> None:
            finished.append(row)
            err_console.print(f"done {len(finished)}/{total}: {row['scenario']} x {row['controller']} "
                              f"({row['wall_s']:.0f} s)", highlight=False)

        rows = run_suite(chosen, names, data, workers, done)
        paths = write_results(rows, out) if out is not None else []
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    except (AutoscalerError, ValueError, OSError, RuntimeError) as exc:
        raise _fail(str(exc)) from None
    if json_output:
        typer.echo(json.dumps(rows, indent=2))
        return
    typer.echo(markdown_table(rows))
    if paths:
        console.print(f"wrote {' and '.join(str(p) for p in paths)}", highlight=False, soft_wrap=True)


profiles_app = typer.Typer(no_args_is_help=True, help="The shipped performance profiles.")
app.add_typer(profiles_app, name="profiles")

_SOURCE_LABEL = {"llm-inference-bench": "LIB", "splitwise": "Splitwise"}


def profiles_table() -> Table:
    """Every shipped profile: where its rows come from, how many, its errors, how its prefill slope was set."""
    from models.profiles import shipped_entries

    table = Table(title="Shipped performance profiles",
                  caption="LIB: LLM-Inference-Bench All_results.csv (+ Fig_21 TTFT where prefill is fitted); "
                          "Splitwise: perf_model.csv. Errors: mean |predicted / measured - 1|. prior: "
                          "prefill slope pinned (docs/simulator.md). *: a stand-in carrying another profile's "
                          "step times (coefficients.json's stand_in says which and why).")
    table.add_column("profile", no_wrap=True)
    table.add_column("source", no_wrap=True)
    for col in ("fit rows", "held out", "held-out err", "fit err"):
        table.add_column(col, justify="right")
    table.add_column("prefill")
    for name, e in sorted(shipped_entries().items()):
        mark = "*" if "stand_in" in e else ""
        table.add_row(name + mark, _SOURCE_LABEL[e["source"]], str(e["rows_fitted"]), str(e["rows_held_out"]),
                      f"{e['heldout_mape']:.1%}", f"{e['fit_mape']:.1%}",
                      "fitted" if e["prefill_prior"] is None else "prior")
    return table


@profiles_app.command("list")
def profiles_list(
    json_output: Annotated[bool, typer.Option("--json", help="Print a JSON list of {name, model, gpu, "
                                              "tensor_parallel, rows_fitted, rows_held_out, heldout_mape}.",
                                              metavar="")] = False,
) -> None:
    """Every shipped profile with its source rows and held-out error (a fleet file's profile: names one)."""
    from models.profiles import listing

    if json_output:
        typer.echo(json.dumps(listing(), indent=2))
    else:
        console.print(profiles_table())


profile_app = typer.Typer(no_args_is_help=True, help="A profile from your own measurements.")
app.add_typer(profile_app, name="profile")


def _fit_table(res: Any) -> Table:
    """The fitted coefficients beside the shipped profile of the same (model, GPU, TP), if any."""
    from models.profiles import list_profiles, profile_name, shipped_entries

    doc = res.document
    name = profile_name(doc["model"], doc["gpu"], doc["tensor_parallel"])
    shipped = shipped_entries()[name]["coefficients"] if name in list_profiles() else None
    table = Table(title=f"profile fit: {doc['model']} on {doc['tensor_parallel']} x {doc['gpu']}",
                  caption="se: standard error / value")
    table.add_column("coefficient", no_wrap=True)
    table.add_column("fitted", justify="right")
    table.add_column("se", justify="right")
    if shipped is not None:
        table.add_column(f"shipped {name}", justify="right")
    se = doc["relative_standard_error"]
    for key, value in doc["coefficients"].items():
        row = [key, f"{value:.4g}", f"{se[key]:.1%}"]
        if shipped is not None:
            row.append(f"{shipped[key]:.4g}")
        table.add_row(*row)
    return table


@profile_app.command("fit")
def profile_fit(
    model: Annotated[str, typer.Option(help="Model key: a shipped profile name's first part, e.g. llama-3-8b.")],
    gpu: Annotated[str, typer.Option(help="GPU, as in a fleet file or a profile name, e.g. H100-SXM.")],
    out: Annotated[Path, typer.Option(help="Profile file to write (*.json; a fleet file's profile: names it).")],
    bench: Annotated[list[Path] | None, typer.Option(
        help="Result JSON of vllm bench serve --save-result --save-detailed against one replica (repeat for "
             "a sweep).")] = None,
    prometheus_url: Annotated[str | None, typer.Option(help="Prometheus base URL of the live fleet.")] = None,
    selector: Annotated[str | None, typer.Option(
        help='PromQL matchers of the pods of this model on this GPU, e.g. model_name="m",variant="h100".')] = None,
    start: Annotated[str | None, typer.Option(help="Range start: unix seconds or ISO 8601 (UTC if no offset).")] = None,
    end: Annotated[str | None, typer.Option(help="Range end: unix seconds or ISO 8601.")] = None,
    tensor_parallel: Annotated[int, typer.Option(help="GPUs per replica (vLLM --tensor-parallel-size).")] = 1,
    window: Annotated[float, typer.Option(help="Prometheus: seconds per window (one row per busy pod-window).")] = 60.0,
    resolution: Annotated[float, typer.Option(help="Prometheus: the scrape interval, seconds.")] = 15.0,
    max_num_batched_tokens: Annotated[int, typer.Option(
        help="Benchmark: the server's --max-num-batched-tokens.")] = 8192,
    tolerance: Annotated[float, typer.Option(
        help="Benchmark: seconds within which tokens of one engine step reach the client.")] = 0.001,
    json_output: Annotated[bool, typer.Option("--json", help="Print the profile file's content as JSON.",
                                              metavar="")] = False,
) -> None:
    """Fit a profile to a vLLM benchmark's results (--bench) or a Prometheus range (--prometheus-url); write it.

    Give exactly one of --bench and --prometheus-url (with --selector, --start and --end).
    """
    import logging

    from autoscaler import profile_fit as pf
    from autoscaler.backtest import parse_time

    try:
        if (bench is None) == (prometheus_url is None):
            raise ValueError("give either --bench FILE (one or more) or --prometheus-url with --selector, --start "
                             "and --end")
        gpu = gpu.lower()  # fleet files write H100-SXM, profile names h100-sxm
        if bench is not None:
            res = pf.from_bench(bench, model, gpu, tensor_parallel, out, max_num_batched_tokens, tolerance)
        else:
            if prometheus_url is None or selector is None or start is None or end is None:
                raise ValueError("--prometheus-url needs --selector, --start and --end")
            t0, t1 = parse_time(start, "--start"), parse_time(end, "--end")
            with _StderrLog(logging.ERROR):
                res = pf.from_prometheus(lambda url: _prometheus(default_config(), url), prometheus_url, selector,
                                         t0, t1, model, gpu, tensor_parallel, out, window, resolution,
                                         log=lambda m: err_console.print(m, highlight=False, soft_wrap=True))
    except (AutoscalerError, ValueError) as exc:
        raise _fail(str(exc)) from None
    except OSError as exc:
        raise _fail(f"{out}: {exc.strerror or exc}") from None
    if json_output:
        typer.echo(json.dumps(res.document, indent=2))
        return
    console.print(_fit_table(res))
    f = res.fit
    console.print(f"{f.rows_fitted} {f.unit}s fitted, {f.rows_held_out} held out; held-out error {f.heldout_mape:.1%} "
                  f"(fit {f.fit_mape:.1%}): mean |predicted / measured - 1| of their durations", highlight=False,
                  soft_wrap=True)
    console.print(f"wrote {res.out}", highlight=False, soft_wrap=True)


if __name__ == "__main__":
    app()
