"""``autoscaler compare``: several controllers on the same trace, fleet and seed, side by side."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from autoscaler import files
from autoscaler.cli.common import (
    app,
    check_admission,
    check_service,
    console,
    controller_list,
    err_console,
    examples,
    fail,
    interrupted,
    load_cfg,
    output_format,
    print_document,
    say,
    warn,
)
from autoscaler.cli.options import (
    DEFAULT_BATCH_FRACTION,
    BatchFractionOpt,
    ConfigOpt,
    ControllersAliasOpt,
    JsonAliasOpt,
    LengthsFromOpt,
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
from autoscaler.formats import count

if TYPE_CHECKING:
    from rich.table import Table

DEFAULT_COMPARE = "hpa,keda,kpa,aibrix,dynamo,wva,static,static-ilp,pid"


@app.command(epilog=examples(
    "autoscaler compare",
    "autoscaler compare --controller hpa,keda,pid,mpc --trace azure_conv.csv --rate-scale 0.5",
    "autoscaler compare --controller pid@none,pid@pid --wide",
    "autoscaler compare --controller hpa:metric=queue:target=5,pid -o json",
))
def compare(
    config: ConfigOpt = None,
    trace: TraceOpt = None,
    trace_format: TraceFormatOpt = None,
    span: SpanOpt = None,
    lengths_from: LengthsFromOpt = None,
    controller: Annotated[str | None, typer.Option(
        help="Comma-separated controller specs NAME[:key=value...] (SPEC@POLICY sets a row's admission policy). "
             f"Default: {DEFAULT_COMPARE.replace(',', ', ')}.", show_default=False)] = None,
    controllers_alias: ControllersAliasOpt = None,
    rate_scale: RateScaleOpt = 1.0,
    time_scale: TimeScaleOpt = 1.0,
    batch_fraction: BatchFractionOpt = DEFAULT_BATCH_FRACTION,
    service: TraceServiceOpt = None,
    seed: SeedOpt = 0,
    workers: Annotated[int | None, typer.Option(help="Processes (default: min(controllers, CPUs)).")] = None,
    out: Annotated[Path, typer.Option(help="Directory for compare.json and compare.png.")] = Path("out"),
    output: Annotated[str, typer.Option("--output", "-o", help=output_help(
        "table | json | yaml", "json, yaml: the rows of compare.json."))] = "table",
    json_alias: JsonAliasOpt = False,
    wide: Annotated[bool, typer.Option("--wide", help="Add p99 ITL, $, $/succ. task, scale events, wall s (folded "
                                       "to the terminal's width, or $COLUMNS).")] = False,
    floor: Annotated[float, typer.Option(help="Interactive SLO attainment a row needs to be ranked by cost.")
                     ] = 0.99,
    whole: Annotated[bool, typer.Option(
        "--whole", help="Build every request of the trace up front, once, shared by the rows. By default a "
                        "trace is streamed: each row makes its requests from compact columns as its run "
                        "reaches them (the same rows in less memory); a row whose controller reads the whole "
                        "workload (oracle, bound, mpc:forecast=perfect) builds it for its own run. Not "
                        "streamed: the embedded workload, --time-scale on a ServeGen folder, a file's rows "
                        "out of order.")] = False,
    admission: Annotated[str | None, typer.Option(
        help="Admission policy at the gateway: none | pid | mpc (default: none for the anchors, the fleet "
             "file's controller.admission otherwise); a row SPEC@POLICY sets its own.", show_default=False)] = None,
) -> None:
    """Run several controllers on the same trace, fleet and seed and print them side by side."""
    from autoscaler.compare import (
        FAILED_KEY,
        OUTPUTS,
        check_controllers,
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
    from autoscaler.workload.build import build_any, build_workload, check_shaping, parse_span
    from autoscaler.workload.stream import AnyWorkload
    from autoscaler.workload.stream import count as requests

    try:
        output = output_format(output, json_alias)
        controllers = controller_list(controller, controllers_alias, DEFAULT_COMPARE)
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
            raise ValueError(f"--controller '{controllers}': an empty entry (two commas, or one at an end)")
        check_names(names)
        check_admission(admission)
        span_s = None if span is None else parse_span(span)
        files.check_writable(out)
        wl: AnyWorkload
        if trace is None or whole:
            wl = build_workload(trace, trace_format, rate_scale, time_scale, seed, batch_fraction, span_s, lengths_from)
        else:  # streamed where it streams bit for bit (build_any), else whole
            wl = build_any(trace, trace_format, rate_scale, time_scale, seed, batch_fraction, span_s, lengths_from)
        check_controllers(names, cfg, wl, service)  # a bad spec's parameter: one line, before any other
        files.clear(out, OUTPUTS)  # once the trace is read: a mistyped --trace loses no earlier results
        # the first line comes before the rows' first progress (a piped run would otherwise be silent)
        err_console.print(f"compare: {count(len(names), 'row')} on {count(requests(wl), 'request')} of {wl.source}",
                          markup=False, highlight=False, soft_wrap=True)
        warning = long_run_warning(cfg, wl, service)
        if warning:
            warn(warning)
        finished = []

        def done(row: dict[str, Any]) -> None:
            finished.append(row)
            how = "failed" if row.get(FAILED_KEY) else "done"
            err_console.print(f"{how} {len(finished)}/{len(names)}: {row['controller']} ({row['wall_s']:.1f} s)",
                              markup=False, highlight=False)

        rows = progress_rows(names, wl)
        with Display(rows, "compare", err_console):
            comp = run_compare(cfg, wl, names, service, workers, done=done, floor=floor, admission=admission,
                               progress=rows)
        paths = write_comparison(comp, cfg, service, out)
    except KeyboardInterrupt as exc:
        raise interrupted(out, OUTPUTS, exc) from None
    except (AutoscalerError, ValueError, OSError) as exc:
        raise fail(str(exc)) from None
    if output != "table":
        print_document(comp.rows, output)
        _exit_if_failed(comp.rows)
        return
    print_table(f"{requests(wl)} requests of {wl.source} (rate x{rate_scale:g}, seed {seed})",
                columns(wide), table_cells(comp.rows, wide), wide)
    for line in legend(comp.rows):
        say(line)
    say(f"wrote {' and '.join(str(p) for p in paths)}")
    _exit_if_failed(comp.rows)


NAME_WIDTH = 10
"""Width of the controller column when deciding whether columns fit, characters (its header,
"controller"); printed, the column takes the width left, a longer spec folding onto more lines."""


def table_width(wide: bool) -> int:
    """Columns to print the table in: ``$COLUMNS`` when set, else the terminal's width, else (a pipe)
    the table's own width (100, or 170 with ``--wide``), so a piped table is never cut."""
    env = os.environ.get("COLUMNS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    return console.width if console.is_terminal else (170 if wide else 100)


def print_table(title: str, heads: tuple[tuple[str, Any], ...], rows: list[list[str]], wide: bool) -> None:
    """The comparison table within ``table_width``, numbers never cut: when the whole table is wider,
    its columns are printed as several tables one under the other, each led by the controller column."""
    from rich.console import Console
    from rich.measure import Measurement
    from rich.table import Table
    from rich.text import Text

    width = table_width(wide)
    out = Console(width=width, highlight=False, emoji=False)

    def table(cols: list[int], label: str | None, name_width: int | None = None) -> Table:
        t = Table(title=None if label is None else Text(label), title_justify="left")  # Text: printed verbatim
        t.add_column(heads[0][0], overflow="fold", max_width=name_width)  # a long spec folds onto more lines
        for i in cols[1:]:
            t.add_column(heads[i][0], justify="right", no_wrap=True)
        for cells in rows:
            t.add_row(*(Text(cells[i]) for i in cols))
        return t

    def fits(cols: list[int]) -> bool:
        unbounded = out.options.update_width(10 * width)  # a measurement is capped at the width measured in
        return Measurement.get(out, unbounded, table(cols, None, NAME_WIDTH)).maximum <= width

    parts: list[list[int]] = [[0]]
    for i in range(1, len(heads)):
        if fits([*parts[-1], i]) or parts[-1] == [0]:
            parts[-1].append(i)
        else:
            parts.append([0, i])
    for k, cols in enumerate(parts):
        out.print(table(cols, title if k == 0 else None))


def _exit_if_failed(rows: list[dict[str, Any]]) -> None:
    """Exit 1 with one line when a row failed (the other rows are written and shown)."""
    from autoscaler.compare import failed

    bad = failed(rows)
    if bad:
        err_console.print(f"[bold red]error:[/] {len(bad)} of {count(len(rows), 'row')} failed: "
                          f"{', '.join(r['controller'] for r in bad)} (the row's 'failed' says why)",
                          highlight=False, soft_wrap=True)
        raise typer.Exit(1)
