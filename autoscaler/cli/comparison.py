"""``autoscaler compare``: several controllers on the same trace, fleet and seed, side by side."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from autoscaler import files
from autoscaler.cli.common import (
    app,
    check_admission,
    check_service,
    console,
    err_console,
    fail,
    interrupted,
    load_cfg,
    warn,
)
from autoscaler.cli.options import (
    BatchFractionOpt,
    ConfigOpt,
    LengthsFromOpt,
    RateScaleOpt,
    SeedOpt,
    SpanOpt,
    TimeScaleOpt,
    TraceFormatOpt,
    TraceOpt,
    TraceServiceOpt,
)
from autoscaler.errors import AutoscalerError
from autoscaler.workload.build import DEFAULT_BATCH_FRACTION, build_workload, check_shaping, parse_span

DEFAULT_COMPARE = "hpa,keda,kpa,aibrix,dynamo,wva,static,static-ilp,pid"


@app.command()
def compare(
    config: ConfigOpt = None,
    trace: TraceOpt = None,
    trace_format: TraceFormatOpt = None,
    span: SpanOpt = None,
    lengths_from: LengthsFromOpt = None,
    controllers: Annotated[str, typer.Option(help="Comma-separated controllers or baseline specs "
                                             f"(name:key=value...). Default: {DEFAULT_COMPARE.replace(',', ', ')}.",
                                             show_default=False)] = DEFAULT_COMPARE,
    rate_scale: RateScaleOpt = 1.0,
    time_scale: TimeScaleOpt = 1.0,
    batch_fraction: BatchFractionOpt = DEFAULT_BATCH_FRACTION,
    service: TraceServiceOpt = None,
    seed: SeedOpt = 0,
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
    from autoscaler.compare import (
        FAILED_KEY,
        OUTPUTS,
        check_names,
        columns,
        legend,
        progress_rows,
        run_compare,
        table_cells,
        write_comparison,
    )
    from autoscaler.progress import Display
    from autoscaler.simulate import long_run_warning

    try:
        if not 0 <= floor <= 1:
            raise ValueError(f"--floor must be in [0, 1], got {floor:g}")
        if seed < 0:
            raise ValueError(f"--seed must be >= 0, got {seed}")
        if workers is not None and workers < 1:
            raise ValueError(f"--workers must be >= 1, got {workers}")
        check_shaping(rate_scale, time_scale, batch_fraction)  # before the fleet file, the trace or any work
        cfg = load_cfg(config)
        check_service(cfg, service)
        names = [c.strip() for c in controllers.split(",")]
        names = names if any(names) else []
        if "" in names:
            raise ValueError(f"--controllers '{controllers}': an empty entry (two commas, or one at an end)")
        check_names(names)
        check_admission(admission)
        span_s = None if span is None else parse_span(span)
        files.check_writable(out)
        files.clear(out, OUTPUTS)
        wl = build_workload(trace, trace_format, rate_scale, time_scale, seed, batch_fraction, span_s, lengths_from)
        warning = long_run_warning(cfg, wl, service)
        if warning:
            warn(warning)
        finished = []

        def done(row: dict[str, Any]) -> None:
            finished.append(row)
            how = "failed" if row.get(FAILED_KEY) else "done"
            err_console.print(f"{how} {len(finished)}/{len(names)}: {row['controller']} ({row['wall_s']:.1f} s)",
                              highlight=False)

        rows = progress_rows(names, wl)
        with Display(rows, "compare", err_console):
            comp = run_compare(cfg, wl, names, service, workers, done=done, floor=floor, admission=admission,
                               progress=rows)
        paths = write_comparison(comp, cfg, service, out)
    except KeyboardInterrupt as exc:
        raise interrupted(out, OUTPUTS, exc) from None
    except (AutoscalerError, ValueError, OSError) as exc:
        raise fail(str(exc)) from None
    if json_output:
        console.print_json(json.dumps(comp.rows))
        _exit_if_failed(comp.rows)
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
    _exit_if_failed(comp.rows)


def _exit_if_failed(rows: list[dict[str, Any]]) -> None:
    """Exit 1 with one line when a row failed (the other rows are written and shown)."""
    from autoscaler.compare import failed

    bad = failed(rows)
    if bad:
        err_console.print(f"[bold red]error:[/] {len(bad)} of {len(rows)} rows failed: "
                          f"{', '.join(r['controller'] for r in bad)} (the row's 'failed' says why)",
                          highlight=False, soft_wrap=True)
        raise typer.Exit(1)
