"""``autoscaler simulate``: the loop on a trace against the embedded simulator (paced and served with
``--serve-metrics``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from autoscaler import files
from autoscaler.cli.common import (
    ProgressBar,
    app,
    check_admission,
    check_service,
    console,
    examples,
    fail,
    fmt,
    interrupted,
    load_cfg,
    not_done,
    output_format,
    print_document,
    say,
    warn,
)
from autoscaler.cli.options import (
    DEFAULT_BATCH_FRACTION,
    BatchFractionOpt,
    ConfigOpt,
    ControllerOpt,
    JsonAliasOpt,
    LengthsFromOpt,
    PlotOpt,
    RateScaleOpt,
    SeedOpt,
    SpanOpt,
    TimeScaleOpt,
    TraceFormatOpt,
    TraceOpt,
    TraceServiceOpt,
    output_help,
)
from autoscaler.errors import AutoscalerError
from autoscaler.formats import money, per_request, percent

if TYPE_CHECKING:
    from rich.table import Table

    from autoscaler.config import FleetConfig
    from autoscaler.workload.types import Workload


def results_table(res: dict[str, Any]) -> Table:
    """A rich table of one run's ``results.json``."""
    from rich.markup import escape
    from rich.table import Table

    a = res["admission"]
    policy = a["policy"] != "none"  # the gateway's rows (shed, deferred) only where a policy ran
    # SPEC@POLICY, as compare names a row, @none too: the title says what ran. User text (a trace's
    # path, a spec) verbatim: rich would read "[/]" or "[bold]" in it as markup
    t = Table(title=escape(f"{res['controller']}@{a['policy']} on {res['workload']}"), show_header=True)
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
                  f"{percent(d['ttft'])} / {percent(d['itl'])} / {percent(d['both'])}")
    bp = res["slo_attainment_by_priority"]
    t.add_row("SLO attainment critical / standard / sheddable",
              f"{percent(bp['critical'])} / {percent(bp['standard'])} / {percent(bp['sheddable'])}")
    if policy:
        t.add_row(f"admission {a['policy']}: shed (429s) / deferred / shed mid-workflow",
                  f"{a['shed']} ({a['shed_attempts']}) / {a['deferred']} / {a['shed_mid_workflow']}")
    if a["retries"]:
        t.add_row("client retries", str(a["retries"]))
    for k, label in (("ttft_s", "TTFT"), ("itl_s", "ITL")):
        q = res[k]
        t.add_row(f"{label} p50 / p95 / p99 (s)", f"{fmt(q['p50'])} / {fmt(q['p95'])} / {fmt(q['p99'])}")
    for v, h in res["gpu_hours"].items():
        t.add_row(f"GPU-hours / $ {v}", f"{h:.2f} / {money(res['cost_usd'][v])}")
    t.add_row("cost per successful request", per_request(res['cost_per_successful_request_usd']))
    t.add_row("cost per successful task", per_request(res['cost_per_successful_task_usd']))
    t.add_row("prefix-cache hit rate", percent(res["prefix_cache_hit_rate"]))
    t.add_row("preemptions / scale events", f"{res['preemptions']} / {res['scale_events']}")
    crashes = res.get("crashes") or []
    if crashes:
        applied = [c for c in crashes if c["applied"]]
        skipped = "; ".join(f"{c['variant']} at {c['time_s']:g} s: {c['why']}" for c in crashes if not c["applied"])
        t.add_row("injected crashes applied / failed requests",
                  f"{len(applied)} of {len(crashes)} / {sum(c['failed_requests'] for c in applied)}"
                  + (f" (skipped: {skipped})" if skipped else ""))
    t.add_row("simulated requests per wall-second",
              f"{fmt(res['simulated_requests_per_s'], ',.0f')} ({res['wall_s']:.2f} s wall)")
    return t


@app.command(epilog=examples(
    "autoscaler simulate",
    "autoscaler simulate --trace azure_conv.csv --controller mpc --out runs/mpc --plot",
    "autoscaler simulate --trace servegen/m-large --span 0:3600 --lengths-from azure_conv.csv",
    "autoscaler simulate --serve-metrics 127.0.0.1:8000 --speed 10",
    "autoscaler simulate -o json | jq .slo_attainment",
))
def simulate(
    config: ConfigOpt = None,
    trace: TraceOpt = None,
    trace_format: TraceFormatOpt = None,
    span: SpanOpt = None,
    lengths_from: LengthsFromOpt = None,
    controller: ControllerOpt = "pid",
    rate_scale: RateScaleOpt = 1.0,
    time_scale: TimeScaleOpt = 1.0,
    batch_fraction: BatchFractionOpt = DEFAULT_BATCH_FRACTION,
    service: TraceServiceOpt = None,
    seed: SeedOpt = 0,
    out: Annotated[Path, typer.Option(help="Directory for results.json, timeline.csv, timeline.png.")] = Path(
        "out"),
    plot: PlotOpt = False,
    output: Annotated[str, typer.Option("--output", "-o", help=output_help(
        "table | json | yaml", "table: the results as a table; json, yaml: results.json."))] = "table",
    json_alias: JsonAliasOpt = False,
    serve_metrics: Annotated[str | None, typer.Option(
        help="HOST:PORT: run in scaled real time and serve every replica's vLLM metrics for Prometheus.")] = None,
    speed: Annotated[float | None, typer.Option(
        help="With --serve-metrics: simulated seconds per wall second (default 1).")] = None,
    admission: Annotated[str | None, typer.Option(
        help="Admission policy at the gateway: none | pid | mpc (default: none for the anchors, the fleet "
             "file's controller.admission otherwise).", show_default=False)] = None,
    whole: Annotated[bool, typer.Option(
        "--whole", help="Build every request of the trace up front. By default a trace is streamed (kept as "
                        "columns, its requests made as the run reaches them: the same run in less memory) "
                        "unless the controller reads the whole workload (oracle, bound, mpc:forecast=perfect), "
                        "--serve-metrics is given, or the trace does not stream (--time-scale on a ServeGen "
                        "folder, a file's rows out of order).")] = False,
) -> None:
    """Run the control loop on a trace against the embedded fleet simulator."""
    from autoscaler.compare import search_runs
    from autoscaler.loop.runner import TickError
    from autoscaler.report import OUTPUTS, outcome, write_outputs
    from autoscaler.simulate import long_run_warning, run_simulation
    from autoscaler.workload.build import build_any, build_workload, check_shaping, parse_span
    from autoscaler.workload.stream import AnyWorkload, count
    from controllers.registry import needs_whole, parse_spec

    names = (*OUTPUTS, "realtime.json")
    try:
        output = output_format(output, json_alias)
        quiet = output != "table"
        if seed < 0:
            raise ValueError(f"--seed must be >= 0, got {seed}")
        if serve_metrics is None and speed is not None:
            raise ValueError("--speed needs --serve-metrics")
        check_shaping(rate_scale, time_scale, batch_fraction)  # before the fleet file, the trace or any work
        cfg = load_cfg(config)
        check_service(cfg, service)
        parse_spec(controller)  # a bad spec fails before the trace is read
        check_admission(admission)
        span_s = None if span is None else parse_span(span)
        files.check_writable(out)

        def workload() -> Workload:
            built = build_workload(trace, trace_format, rate_scale, time_scale, seed, batch_fraction, span_s,
                                   lengths_from)
            files.clear(out, names)  # once the trace is read: a mistyped --trace loses no earlier results
            return built

        if serve_metrics is not None:
            res = _served_simulation(cfg, controller, service, serve_metrics, 1.0 if speed is None else speed, out,
                                     plot, quiet, admission, workload)
        else:
            wl: AnyWorkload
            if trace is None or whole or needs_whole(controller):
                wl = workload()
            else:  # streamed where it streams bit for bit (build_any), else whole
                wl = build_any(trace, trace_format, rate_scale, time_scale, seed, batch_fraction, span_s, lengths_from)
                files.clear(out, names)
            warning = long_run_warning(cfg, wl, service)
            if warning:
                warn(warning)
            shown = controller if admission is None else f"{controller}@{admission}"
            most = search_runs(controller)

            def searching(run: int) -> None:  # bound's search: minutes of whole simulations before the bar moves
                if run and not quiet:
                    say(f"{shown}: searching, run {run} of at most {most}", err=True)

            with ProgressBar(f"simulating {count(wl)} requests, {shown}", not quiet) as bar:
                run = run_simulation(cfg, wl, controller, service, progress=bar.update, admission=admission,
                                     measure=outcome, on_search=searching, keep_requests=False)
            res = write_outputs(run, out, plot=plot)
    except KeyboardInterrupt as exc:
        raise interrupted(out, names, exc) from None
    except TickError as exc:  # a decision (or its write) raised mid-run: valid input, the run not done (exit 1)
        raise not_done(f"controller {controller}: {exc}; no results written to {out}") from None
    except (AutoscalerError, ValueError, OSError) as exc:
        raise fail(str(exc)) from None
    if output != "table":
        print_document(res, output)
        return
    console.print(results_table(res))
    written = [out / "results.json", out / "timeline.csv"] + ([out / "timeline.png"] if plot else [])
    say(f"wrote {', '.join(str(p) for p in written[:-1])} and {written[-1]}")


def _served_simulation(cfg: FleetConfig, controller: str, service: str | None, address: str, speed: float,
                       out: Path, plot: bool, quiet: bool, admission: str | None, workload: Any) -> dict[str, Any]:
    """``simulate --serve-metrics``: bind the address and say so first, then build the workload and run
    paced (``autoscaler.realtime``); writes ``realtime.json`` beside the results."""
    from autoscaler.loop.admission import PATH
    from autoscaler.realtime import LiveSimulation, served, write_tick_times
    from autoscaler.report import write_outputs

    with served(address, speed) as endpoint:
        say(f"serving metrics at http://{endpoint.host}:{endpoint.port}/metrics and admission thresholds at {PATH}, "
            f"at {speed:g}x real time", err=True)
        wl = workload()
        live = LiveSimulation(cfg, wl, controller, service, registry=endpoint.registry, admission=admission,
                              document=endpoint.document)
        shown = controller if admission is None else f"{controller}@{admission}"
        with ProgressBar(f"serving {len(wl.requests)} requests, {shown}", not quiet) as bar:
            run = live.run(speed=speed, progress=bar.update)
        res = write_outputs(run, out, plot=plot)
        write_tick_times(live, speed, out / "realtime.json")
        return res
