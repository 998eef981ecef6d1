"""Several controllers on the same workload, fleet and seed, side by side (``autoscaler compare``).

``run_compare`` simulates each controller (``autoscaler.simulate.run_simulation``, so every one of
them runs in the same loop) in a process of its own when more than one core is available
(``autoscaler.workers.run_each``, ``min(controllers, cpu_count)`` at once: a worker killed fails its own
row only); every run is deterministic,
so the rows equal a serial run's except ``wall_s`` and ``simulated_requests_per_s``.

Each row of ``compare.json`` is the run's ``results.json`` (``autoscaler.report.summarize``), its
``wall_s`` the row's whole wall time (building the controller, ``bound``'s search of minutes
included, then the run), plus:

- ``controller``: the name (or spec) as given; ``SPEC@POLICY`` (``pid@mpc``) runs the row with that
  admission policy (``none``, ``pid``, ``mpc``), else it gets ``admission`` (the CLI's ``--admission``)
  or, without one, ``autoscaler.simulate.default_admission``;
- ``oscillations_per_hour``: direction changes of the target service's replica count (a scale-up
  after a scale-down or the reverse, counted between consecutive scaling actions) per simulated hour;
- ``meets_attainment_floor`` and ``attainment_floor``: whether the row's interactive SLO attainment
  reaches the floor (default 0.99): only such rows are ranked by cost;
- ``ratio_to_best_cost_per_successful_request``: the row's cost per successful request over the
  lowest among the rows that meet the floor (over the ``oracle`` row's when one is present); None
  for a row below the floor (a controller missing the SLO is not cheap, it is failing) or undefined;
- ``ratio_to_bound`` (only where a ``bound`` row ran): the row's cost per successful request over
  the bound's (``controllers.bound``); None for a row below the floor, or when the bound is. The
  table's ratio column is this one when present.

The workload may be a ``WorkloadStream`` (``autoscaler.workload.stream``; the CLI's default for a
trace): every row then makes its requests afresh from the stream's columns as its run reaches them
(a Mooncake file's hash ids read from the file again), so no row, and no worker process, holds the
whole trace's ``Request`` objects. A row whose controller reads the whole workload up front
(``controllers.registry.needs_whole``: ``oracle``, ``bound``, ``mpc:forecast=perfect``) builds it in
its own run (``WorkloadStream.materialise``, the same requests) and drops it with the run; checking its
parameters before the runs (``check_controllers``) builds it on the stream's first chunk only. The
rows are the same as with the whole workload (``tests/cli/test_compare_stream.py``).

A run that raises is a row that says so: ``failed`` holds the error in one line, its figures are
null (never 0), it is not ranked, and the other rows run and are written as usual; an interrupt
still stops the whole comparison.
"""

from __future__ import annotations

import itertools
import json
import os
import textwrap
import time
from collections.abc import Callable, Sequence
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autoscaler.config import ADMISSION_MODES, FleetConfig
from autoscaler.files import write_text
from autoscaler.formats import money, per_request, percent
from autoscaler.progress import Rows
from autoscaler.report import outcome, summarize, timeline_rows
from autoscaler.simulate import SimulationRun, run_simulation
from autoscaler.workers import quiet_worker, run_each
from autoscaler.workload.stream import AnyWorkload, WorkloadStream
from autoscaler.workload.types import Workload
from controllers.base import FleetMismatchError
from controllers.bound import DEFAULT_SIMULATIONS
from controllers.registry import NAMES, build, needs_whole, parse_spec

OUTPUTS = ("compare.json", "compare.png")
COST_KEY = "cost_per_successful_request_usd"
RATIO_KEY = "ratio_to_best_cost_per_successful_request"
REFERENCE = "oracle"
BOUND = "bound"
BOUND_KEY = "ratio_to_bound"
PLOT_SIGNALS = ("ttft_p95_s", "tpot_p95_s")
FAILED_KEY = "failed"
RunResult = tuple[dict[str, Any], list[dict[str, Any]]]


def failed_row(name: str, exc: BaseException, wall_s: float) -> dict[str, Any]:
    """The row of a run that raised ``exc``: the error in one line under ``FAILED_KEY``, every figure
    the table reads null, ``wall_s`` the seconds it ran."""
    message = " ".join(f"{type(exc).__name__}: {exc}".split())
    return {"controller": name, FAILED_KEY: message, "slo_attainment": {"all": None, "interactive": None,
                                                                         "batch": None},
            "ttft_s": {"p99": None}, "itl_s": {"p99": None}, "gpu_hours": {"total": None},
            "cost_usd": {"total": None}, COST_KEY: None, "cost_per_successful_task_usd": None,
            "scale_events": None, "oscillations_per_hour": None, "wall_s": wall_s}


def failed(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows whose run failed."""
    return [r for r in rows if r.get(FAILED_KEY)]


@dataclass
class Comparison:
    """The rows of ``compare.json`` and, per controller, the timeline columns the plot needs."""

    rows: list[dict[str, Any]]
    timelines: dict[str, list[dict[str, Any]]]


def check_names(names: Sequence[str]) -> None:
    """Reject an empty list, duplicates, unknown names and unknown baseline parameters (no workload needed).

    Raises:
        ValueError: one line; an unknown name's message lists the valid ones.
    """
    if not names:
        raise ValueError(f"no controller given; choose from: {', '.join(NAMES)}")
    dup = sorted({n for n in names if list(names).count(n) > 1})
    if dup:
        raise ValueError(f"controller listed twice: {', '.join(dup)}")
    for name in names:
        spec, policy = split_row(name)
        parse_spec(spec)
        if policy is not None and policy not in ADMISSION_MODES:
            raise ValueError(f"'{name}': unknown admission policy '{policy}' (known: {', '.join(ADMISSION_MODES)})")


def split_row(name: str) -> tuple[str, str | None]:
    """``SPEC@POLICY`` -> (spec, policy); a name without ``@`` -> (name, None)."""
    spec, sep, policy = name.partition("@")
    return spec, (policy if sep else None)


def check_controllers(names: Sequence[str], cfg: FleetConfig, workload: AnyWorkload, service: str | None) -> None:
    """``check_names``, then build every controller once so a bad parameter value fails before any run;
    one that cannot run on this fleet (``FleetMismatchError``: a service of pools only for a controller
    that needs an aggregated variant, or none for ``dynamo-pd`` or ``wva-pd``) is left to its run, a failed row. With
    a stream, a controller that reads the whole workload (``needs_whole``) is built on the stream's
    first chunk (``head``): its parameters are checked, its plan is its run's.

    Raises:
        ValueError: see ``check_names``; a parameter value the controller rejects.
    """
    check_names(names)
    for name in names:
        spec = split_row(name)[0]
        if parse_spec(spec)[0] == BOUND:  # its parameters checked; building it is its whole search
            continue
        try:
            build(spec, cfg, service, head(workload) if needs_whole(spec) else workload)
        except FleetMismatchError:  # the fleet's fault, not the spec's: its run says so in its row
            continue


def head(workload: AnyWorkload) -> Workload:
    """A ``Workload``: ``workload`` itself, or a stream's first chunk of requests."""
    if not isinstance(workload, WorkloadStream):
        return workload
    first = next(workload.chunks(), [])
    return Workload(first, block_tokens=workload.block_tokens, source=workload.source, meta=dict(workload.meta))


def direction_changes(deltas: Sequence[int]) -> int:
    """Sign changes between consecutive non-zero replica changes (zeros are skipped)."""
    signs = [1 if d > 0 else -1 for d in deltas if d]
    return sum(1 for a, b in itertools.pairwise(signs) if a != b)


def oscillations_per_hour(run: SimulationRun) -> float:
    """``direction_changes`` of the target service's total replicas per simulated hour."""
    deltas = []
    for rec in run.ticks:
        st = rec.services[run.sim.target]
        deltas.append(sum(st.applied.values()) - sum(st.estimate.current.values()))
    return direction_changes(deltas) / (run.end_s / 3600) if run.end_s > 0 else 0.0


DEFAULT_FLOOR = 0.99


def add_ratios(rows: list[dict[str, Any]], floor: float = DEFAULT_FLOOR) -> None:
    """Set ``meets_attainment_floor``, ``attainment_floor`` and ``RATIO_KEY`` on every row (module
    docstring), in place."""
    for r in rows:
        att = r["slo_attainment"]["interactive"]
        r["attainment_floor"] = floor
        r["meets_attainment_floor"] = att is not None and att >= floor
    ranked = [r for r in rows if r["meets_attainment_floor"] and r[COST_KEY] is not None]
    ref_row = next((r for r in rows if r["controller"] == REFERENCE), None)
    ref = ref_row[COST_KEY] if ref_row is not None else min((r[COST_KEY] for r in ranked), default=None)
    for r in rows:
        ok = r in ranked and ref is not None and ref > 0
        r[RATIO_KEY] = r[COST_KEY] / ref if ok else None
    bound = bound_row(rows)
    if bound is not None:
        b = bound[COST_KEY] if bound in ranked else None
        for r in rows:
            r[BOUND_KEY] = r[COST_KEY] / b if r in ranked and b is not None and b > 0 else None


def bound_row(rows: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The first row that ran ``bound`` (any parameters, any admission), or None."""
    return next((r for r in rows if split_row(r["controller"])[0].split(":")[0] == BOUND), None)


def ratio_cell(r: dict[str, Any]) -> str:
    """The table's ratio: over the bound where a bound row ran (``BOUND_KEY``), else ``RATIO_KEY``."""
    return _fmt(r[BOUND_KEY] if BOUND_KEY in r else r[RATIO_KEY], ".2f")


def _plot_columns(run: SimulationRun) -> list[dict[str, Any]]:
    keep = ("time_s", *PLOT_SIGNALS)
    return [{k: v for k, v in row.items() if k in keep or k.startswith(("ready_", "starting_"))}
            for row in timeline_rows(run) if row["service"] == run.sim.target]


def run_one(name: str, cfg: FleetConfig, workload: AnyWorkload, service: str | None,
            admission: str | None = None, report: Callable[[float], None] | None = None,
            search: Callable[[int], None] | None = None) -> RunResult:
    """Simulate one row (``SPEC`` or ``SPEC@POLICY``); returns its row (without the ratio) and its plot
    columns; a run that raises is a ``failed_row`` with no plot columns (an interrupt propagates).
    ``report`` is called with the simulated time as the run goes (``Rows.reporter``), ``search``
    with each of ``bound``'s search runs as it starts (``Rows.searcher``). The row's ``wall_s`` is
    all of it: building the controller (``bound``'s search, the oracle's offline plan) and the run;
    ``simulated_requests_per_s`` is the run's alone. A stream is replayed afresh (module docstring),
    made whole first for a controller that reads all of it (``needs_whole``)."""
    spec, policy = split_row(name)
    t0 = time.perf_counter()
    try:
        if isinstance(workload, WorkloadStream) and needs_whole(spec):
            workload = workload.materialise()  # this row's own, dropped with its run
        run = run_simulation(cfg, workload, spec, service, admission=policy or admission, measure=outcome,
                             on_step=report, on_search=search, keep_requests=False)
    except Exception as exc:  # any error of one controller's run: the other rows still count
        return failed_row(name, exc, time.perf_counter() - t0), []
    row = summarize(run)
    row["wall_s"] = time.perf_counter() - t0
    row["controller"] = name
    row["oscillations_per_hour"] = oscillations_per_hour(run)
    return row, _plot_columns(run)


_JOB: tuple[FleetConfig, AnyWorkload, str | None, str | None] | None = None
_ROWS: tuple[list[str], Rows | None] = ([], None)


def _init_worker(cfg: FleetConfig, workload: AnyWorkload, service: str | None, admission: str | None,
                 names: list[str], progress: Rows | None) -> None:
    global _JOB, _ROWS
    _JOB = (cfg, workload, service, admission)
    _ROWS = (names, progress)
    quiet_worker()


def _work(name: str) -> RunResult:
    assert _JOB is not None
    return _tracked(name, _ROWS[0], _ROWS[1], *_JOB)


def _tracked(name: str, names: list[str], progress: Rows | None, cfg: FleetConfig, workload: AnyWorkload,
             service: str | None, admission: str | None) -> RunResult:
    """``run_one``, its progress in ``progress`` (row ``names.index(name)``) when given."""
    if progress is None:
        return run_one(name, cfg, workload, service, admission)
    i = names.index(name)
    progress.start(i)
    try:
        return run_one(name, cfg, workload, service, admission, progress.reporter(i), progress.searcher(i))
    finally:
        progress.finish(i)


def search_runs(name: str) -> int:
    """The most search runs row ``name`` makes before its own: ``bound``'s ``simulations``, else 0.

    Raises:
        ValueError: as ``parse_spec``.
    """
    kind, params = parse_spec(split_row(name)[0])
    return int(params.get("simulations", DEFAULT_SIMULATIONS)) if kind == BOUND else 0


def progress_rows(controllers: Sequence[str], workload: AnyWorkload) -> Rows:
    """The ``Rows`` of a comparison: one per controller, each spanning the workload's last arrival
    (``search_runs`` for a row that searches first).

    Raises:
        ValueError: as ``parse_spec``.
    """
    if isinstance(workload, WorkloadStream):
        last = workload.last_arrival_s
    else:
        last = workload.requests[-1].arrival_s if workload.requests else 0.0
    return Rows(list(controllers), [last] * len(controllers), [search_runs(c) for c in controllers])


def run_compare(cfg: FleetConfig, workload: AnyWorkload, controllers: Sequence[str], service: str | None = None,
                workers: int | None = None,
                done: Callable[[dict[str, Any]], None] | None = None, floor: float = DEFAULT_FLOOR,
                admission: str | None = None, progress: Rows | None = None) -> Comparison:
    """Simulate every controller on ``workload`` (whole, or a stream each row replays: module
    docstring) and collect the rows in the order given.

    Args:
        admission: the admission policy of rows that name none (None: ``simulate.default_admission``).
        workers: processes (default ``min(len(controllers), os.cpu_count())``); 1 runs serially here.
        done: called with each row as its run finishes.
        progress: where the rows report how far they have got (``progress_rows``; shown by
            ``autoscaler.progress.Display``).
        floor: interactive attainment a row needs to be ranked by cost (``add_ratios``).

    Raises:
        ValueError: ``workers`` below 1; see ``check_controllers``.
    """
    if workers is not None and workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    check_controllers(controllers, cfg, workload, service)
    n = min(len(controllers), os.cpu_count() or 1) if workers is None else min(workers, len(controllers))
    results: dict[str, RunResult] = {}
    if n == 1:
        for name in controllers:
            results[name] = _tracked(name, list(controllers), progress, cfg, workload, service, admission)
            if done is not None:
                done(results[name][0])
    else:
        # each row in a process of its own: one killed fails its row alone (``autoscaler.workers``)
        started = time.perf_counter()
        with closing(run_each(list(controllers), n, _work, _init_worker,
                              (cfg, workload, service, admission, list(controllers), progress))) as each:
            for name, outcome in each:
                if isinstance(outcome, Exception):  # the worker itself died (killed, out of memory): a failed row
                    results[name] = failed_row(name, outcome, time.perf_counter() - started), []
                else:
                    results[name] = outcome
                if progress is not None:  # a worker that died could not say so
                    progress.finish(list(controllers).index(name))
                if done is not None:
                    done(results[name][0])
    rows = [results[name][0] for name in controllers]
    add_ratios(rows, floor)
    return Comparison(rows, {name: results[name][1] for name in controllers})


def _fmt(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


# (header, cell) per column; the first set fits 100 columns, --wide adds the second.
_Cell = Callable[[dict[str, Any]], str]
COLUMNS: tuple[tuple[str, _Cell], ...] = (
    ("controller", lambda r: r["controller"] + (" (failed)" if r.get(FAILED_KEY) else
                                                "" if r["meets_attainment_floor"] else " *")),
    ("SLO all", lambda r: percent(r["slo_attainment"]["all"])),
    ("SLO int.", lambda r: percent(r["slo_attainment"]["interactive"])),
    ("SLO batch", lambda r: percent(r["slo_attainment"]["batch"])),
    ("p99 TTFT s", lambda r: _fmt(r["ttft_s"]["p99"], ".2f")),
    ("GPU-h", lambda r: _fmt(r["gpu_hours"]["total"], ".2f")),
    ("$/succ. req", lambda r: per_request(r[COST_KEY])),
    ("ratio", ratio_cell),
    ("osc./h", lambda r: _fmt(r["oscillations_per_hour"], ".1f")),
)
WIDE_COLUMNS: tuple[tuple[str, _Cell], ...] = (
    ("p99 ITL s", lambda r: _fmt(r["itl_s"]["p99"], ".3f")),
    ("$", lambda r: money(r["cost_usd"]["total"])),
    ("$/succ. task", lambda r: per_request(r["cost_per_successful_task_usd"])),
    ("scale events", lambda r: _fmt(r["scale_events"], "d")),
    ("wall s", lambda r: _fmt(r["wall_s"], ".1f")),
)


def columns(wide: bool = False) -> tuple[tuple[str, _Cell], ...]:
    """The table's columns: ``COLUMNS``, and ``WIDE_COLUMNS`` with ``wide``."""
    return COLUMNS + WIDE_COLUMNS if wide else COLUMNS


def table_cells(rows: Sequence[dict[str, Any]], wide: bool = False) -> list[list[str]]:
    """One list of formatted cells per row, in the order of ``columns(wide)``."""
    return [[cell(r) for _, cell in columns(wide)] for r in rows]


LEGEND_WIDTH = 100
"""Most characters in a line under the table: the table's own width when piped (the CLI's
``table_width``), so a legend line never wraps where the table does not."""


def legend(rows: Sequence[dict[str, Any]]) -> list[str]:
    """The lines printed under the table: what ``ratio``, ``*`` and ``osc./h`` mean, and each failed
    row's error; each at most ``LEGEND_WIDTH`` characters (folded at spaces, continuations indented
    two; a single word longer than that, a path in an error, is left whole)."""
    floor = rows[0]["attainment_floor"] if rows else DEFAULT_FLOOR
    ref = "the oracle" if any(r["controller"] == REFERENCE for r in rows) else "the cheapest ranked row"
    bound = bound_row(rows)
    if bound is not None:
        ref = ("the bound (the cheapest oracle schedule reaching the floor in simulation)"
               if bound["meets_attainment_floor"] else "the bound, which is below the floor: none")
    lines = [f"ratio: cost per successful request over {ref}; only rows reaching {floor:.1%} interactive SLO "
             "attainment are ranked.",
             "osc./h: changes of scaling direction (up after down or down after up) per simulated hour."]
    if any(not r["meets_attainment_floor"] and not r.get(FAILED_KEY) for r in rows):
        lines.insert(1, f"*: below the {floor:.1%} floor, not ranked.")
    lines += [f"{r['controller']} failed: {r[FAILED_KEY]}" for r in failed(rows)]
    return [part for line in lines for part in _fold(line)]


def _fold(line: str) -> list[str]:
    """``line`` folded at spaces into lines of at most ``LEGEND_WIDTH``, its own indent kept and the
    continuations indented two more."""
    indent = line[:len(line) - len(line.lstrip(" "))]
    return textwrap.wrap(line, LEGEND_WIDTH, initial_indent="", subsequent_indent=indent + "  ",
                         break_long_words=False, break_on_hyphens=False) or [line]


def markdown_table(rows: Sequence[dict[str, Any]], wide: bool = True) -> str:
    """The comparison as a Markdown table, with its legend under it."""
    heads = [h for h, _ in columns(wide)]
    lines = ["| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    lines += ["| " + " | ".join(cells) + " |" for cells in table_cells(rows, wide)]
    return "\n".join([*lines, "", *legend(rows)])


def write_comparison(comp: Comparison, cfg: FleetConfig, service: str | None, out: Path) -> list[Path]:
    """Write ``compare.json`` and ``compare.png`` (the rows that ran) under ``out``; returns their paths."""
    from autoscaler.plot import plot_compare

    out.mkdir(parents=True, exist_ok=True)
    plotted = {name: t for name, t in comp.timelines.items() if t}  # a failed row has nothing to plot
    if plotted:
        plot_compare(plotted, cfg.service(service), out / "compare.png")
    write_text(out / "compare.json", json.dumps(comp.rows, indent=2) + "\n")
    return [out / "compare.json", *([out / "compare.png"] if plotted else [])]
