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
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from autoscaler.config import FleetConfig, default_config, load_config
from autoscaler.errors import AutoscalerError
from autoscaler.workload.types import Workload

# The embedded default workload's mean rate: Azure conv's measured 5.53 req/s x 11, so that the
# example fleet (about 16 req/s per replica at the ITL SLO, ``models.capacity``) scales over ~4-12 replicas.
EMBEDDED_RATE_RPS = 60.0

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Observability-driven control-loop autoscaler for LLM inference fleets.")
console = Console()
err_console = Console(stderr=True)


@app.callback()
def _main() -> None:
    """Observability-driven control-loop autoscaler for LLM inference fleets."""


def _fail(msg: str) -> typer.Exit:
    err_console.print(f"[bold red]error:[/] {msg}", highlight=False, soft_wrap=True)
    return typer.Exit(2)


def build_workload(
    trace: Path | None,
    trace_format: str | None,
    rate_scale: float,
    time_scale: float,
    seed: int,
    batch_fraction: float,
) -> Workload:
    """Load (or synthesise) the workload, assign classes and workflows, and shape its rate.

    Raises:
        TraceError: a malformed trace.
        ValueError: bad shaping arguments.
    """
    from autoscaler.workload.classes import assign_classes, group_workflows
    from autoscaler.workload.loader import load_trace
    from autoscaler.workload.shaping import shape
    if trace is None:
        from autoscaler.workload.synthetic import synthetic_workload

        wl = synthetic_workload(seed=seed, mean_rate_rps=EMBEDDED_RATE_RPS, batch_fraction=batch_fraction)
    else:
        wl = group_workflows(load_trace(trace, trace_format))
        wl = assign_classes(wl, batch_fraction=batch_fraction, seed=seed)
    if rate_scale != 1.0 or time_scale != 1.0:
        wl = shape(wl, time_scale=time_scale, rate_scale=rate_scale, seed=seed)
    return wl


def _load_cfg(config: Path | None) -> FleetConfig:
    return default_config() if config is None else load_config(config)


def _fmt(x: Any, spec: str = ".3f") -> str:
    return "-" if x is None else format(x, spec)


def results_table(res: dict[str, Any]) -> Table:
    """A rich table of one run's ``results.json``."""
    t = Table(title=f"{res['controller']} on {res['workload']}", show_header=True)
    t.add_column("metric")
    t.add_column("value", justify="right")
    r = res["requests"]
    t.add_row("requests total / completed / rejected / failed",
              f"{r['total']} / {r['completed']} / {r['rejected']} / {r['failed']}")
    for c, d in res["slo_attainment_detail"].items():
        t.add_row(f"SLO attainment {c} (TTFT / ITL / both)",
                  f"{_fmt(d['ttft'], '.2%')} / {_fmt(d['itl'], '.2%')} / {_fmt(d['both'], '.2%')}")
    for k, label in (("ttft_s", "TTFT"), ("itl_s", "ITL")):
        q = res[k]
        t.add_row(f"{label} p50 / p95 / p99 (s)", f"{_fmt(q['p50'])} / {_fmt(q['p95'])} / {_fmt(q['p99'])}")
    for v, h in res["gpu_hours"].items():
        t.add_row(f"GPU-hours / $ {v}", f"{h:.2f} / ${res['cost_usd'][v]:.2f}")
    t.add_row("cost per successful request", f"${_fmt(res['cost_per_successful_request_usd'], '.7f')}")
    t.add_row("cost per successful task", f"${_fmt(res['cost_per_successful_task_usd'], '.7f')}")
    t.add_row("prefix-cache hit rate", _fmt(res["prefix_cache_hit_rate"], ".2%"))
    t.add_row("preemptions / scale events", f"{res['preemptions']} / {res['scale_events']}")
    t.add_row("simulated requests per wall-second",
              f"{_fmt(res['simulated_requests_per_s'], ',.0f')} ({res['wall_s']:.2f} s wall)")
    return t


@app.command()
def simulate(
    config: Annotated[Path | None, typer.Option(help="Fleet YAML file (default: the embedded example fleet).")] = None,
    trace: Annotated[Path | None, typer.Option(help="Request trace (Azure CSV or Mooncake JSONL); "
                                               "default: the embedded synthetic workload.")] = None,
    trace_format: Annotated[str | None, typer.Option(help="azure | mooncake (default: detected).")] = None,
    controller: Annotated[str, typer.Option(help="pid | static")] = "pid",
    rate_scale: Annotated[float, typer.Option(help="Thin (<1) or superpose jittered copies (>1).")] = 1.0,
    time_scale: Annotated[float, typer.Option(help="Multiply arrival times (0.5 = twice as fast).")] = 1.0,
    batch_fraction: Annotated[float, typer.Option(help="Share of trace requests in the batch class.")] = 0.2,
    service: Annotated[str | None, typer.Option(help="Service the trace targets (default: first).")] = None,
    seed: Annotated[int, typer.Option(help="Seed for class assignment and rate shaping.")] = 0,
    out: Annotated[Path, typer.Option(help="Directory for results.json, timeline.csv, timeline.png.")] = Path(
        "out"),
    plot: Annotated[bool, typer.Option("--plot", help="Write timeline.png.")] = False,
    json_output: Annotated[bool, typer.Option("--json", help="Print results.json instead of a table.")] = False,
) -> None:
    """Run the control loop on a trace against the embedded fleet simulator."""
    from autoscaler.report import write_outputs
    from autoscaler.simulate import run_simulation

    try:
        cfg = _load_cfg(config)
        if service is not None and service not in {s.name for s in cfg.services}:
            raise ValueError(f"unknown service '{service}' (fleet has: {', '.join(s.name for s in cfg.services)})")
        wl = build_workload(trace, trace_format, rate_scale, time_scale, seed, batch_fraction)
        with Progress(TextColumn("[bold]simulating[/] {task.description}"), BarColumn(),
                      TaskProgressColumn(), TimeElapsedColumn(), console=err_console,
                      disable=json_output, transient=True) as bar:
            task = bar.add_task(f"{len(wl.requests)} requests, {controller}", total=1.0)
            run = run_simulation(cfg, wl, controller, service,
                                 progress=lambda f: bar.update(task, completed=f))
        res = write_outputs(run, out, plot=plot)
    except (AutoscalerError, ValueError) as exc:
        raise _fail(str(exc)) from None
    if json_output:
        console.print_json(json.dumps(res))
    else:
        console.print(results_table(res))
        console.print(f"wrote {out / 'results.json'} and {out / 'timeline.csv'}"
                      + (f" and {out / 'timeline.png'}" if plot else ""))


if __name__ == "__main__":
    app()
