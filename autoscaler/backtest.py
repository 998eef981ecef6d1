"""``autoscaler backtest``: replay the decisions the loop would have made over a past time range.

The loop (any controller of the registry, default ``pid``, built without a trace; no actuator) ticks
at ``start + k * step`` for ``k = 0..(end - start) / step`` through a ``PrometheusSource`` whose
instant queries are answered from range queries (``custom_query_range``): ``RangeRunner`` fetches
each distinct query once, from the first tick that needs it to ``end``, so a backtest costs one
range query per distinct PromQL string (the set of valid pods changes the string only when pods
come or go). ``step`` replaces ``controller.tick_s`` (the PID's time step). A source served at
``speed`` times real time (``autoscaler simulate --serve-metrics --speed``) is read as dry-run reads
it (``adapters.prometheus``: windows shrink and rates are divided by ``speed``); the loop's time and
``controller.tick_s`` are then the source's seconds, ``step * speed`` per tick. Outputs are the
``simulate`` timeline (``timeline.csv``, same columns; the ``arrival_rate_rps`` column is the
observed ``request_rate_rps``, since arrivals are not in Prometheus) and plot.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from prometheus_api_client import PrometheusConnect

from autoscaler.adapters.prometheus import RangeRunner
from autoscaler.config import FleetConfig
from autoscaler.loop.runner import TickRecord
from autoscaler.timeline import tick_row, write_timeline_csv
from autoscaler.urls import redact
from autoscaler.wiring import Replay, build_loop, build_source
from controllers.registry import build

# Prometheus refuses range queries of more than 11,000 points per series (web/api/v1/api.go).
MAX_POINTS = 11_000


def parse_time(text: str, option: str = "time") -> float:
    """Unix seconds from ``text``: a number, or ISO 8601 (UTC when it has no offset).

    ``option`` (e.g. ``--start``) names the value in errors.

    Raises:
        ValueError: neither, not finite, or outside the calendar (years 1..9999, e.g. milliseconds
            passed as seconds).
    """
    try:
        t = float(text)
    except ValueError:
        try:
            dt = datetime.fromisoformat(text)
        except ValueError:
            raise ValueError(f"{option} '{text}' is neither unix seconds nor an ISO 8601 time") from None
        t = (dt if dt.tzinfo else dt.replace(tzinfo=UTC)).timestamp()
    if not math.isfinite(t):
        raise ValueError(f"{option} must be a finite time, got '{text}'")
    try:
        datetime.fromtimestamp(t, UTC)
    except (OverflowError, OSError, ValueError):
        raise ValueError(f"{option} {text}: outside the calendar (years 1..9999; milliseconds passed as "
                         "seconds?)") from None
    return t


def check_range(start: float, end: float, step: float) -> tuple[int, int, int]:
    """``(start, step, ticks)`` of the grid ``start + k * step`` over ``[start, end]``, in whole seconds.

    Raises:
        ValueError: ``end <= start``, ``step`` not a whole number of seconds >= 1, or more than
            ``MAX_POINTS`` ticks.
    """
    if not 1 <= step < math.inf or step != int(step):
        raise ValueError(f"--step must be a whole number of seconds >= 1, got {step:g}")
    t0, t1, dt = round(start), round(end), int(step)
    if t1 <= t0:
        raise ValueError("--end must be after --start")
    n = (t1 - t0) // dt + 1
    if n > MAX_POINTS:
        raise ValueError(f"{n} ticks exceed Prometheus's {MAX_POINTS} points per query; use a larger --step")
    return t0, dt, n


OUTPUTS = ("timeline.csv", "timeline.png")


@dataclass
class BacktestRun:
    """A replayed range: the loop's records at ``start + time_s``."""

    cfg: FleetConfig
    ticks: list[TickRecord]
    start: int
    step: int
    range_queries: int
    controller: str = "pid"
    warnings: list[str] = field(default_factory=list)


def run_backtest(cfg: FleetConfig, client: PrometheusConnect, start: float, end: float, step: float,
                 controller: str = "pid", speed: float = 1.0) -> BacktestRun:
    """Replay the loop over ``[start, end]`` every ``step`` (wall) seconds with ``controller`` (a
    registry spec, built without a trace; see the module docstring) on a source served at ``speed``
    times real time (1: a real cluster). ``warnings`` holds each distinct source warning (no series
    match the selectors, pods ignored) with the number of ticks it was given on.

    Raises:
        ValueError: a bad range (``check_range``), speed or controller spec.
    """
    t0, dt, n = check_range(start, end, step)
    if not 0 < speed < math.inf:
        raise ValueError(f"--speed must be a finite number > 0, got {speed:g}")
    cfg = cfg.model_copy(deep=True)
    tick_s = dt * speed  # the loop's time step, in the source's seconds
    cfg.controller.tick_s = float(tick_s)
    ctrl = build(controller, cfg)
    source = build_source(cfg, client, speed=speed, window_s=ctrl.window_s,
                          replay=Replay(t0, t0 + (n - 1) * dt, dt))
    runner = source.runner
    assert isinstance(runner, RangeRunner)
    loop = build_loop(cfg, "backtest", source, ctrl)  # the range has history before its start
    ticks, seen = [], Counter[str]()
    for k in range(n):
        ticks.append(loop.tick(float(k * tick_s)))
        seen.update({w for lines in source.warnings.values() for w in lines})
    warnings = [f"{count} of {n} ticks: {w}" for w, count in seen.items()]
    return BacktestRun(cfg, ticks, t0, dt, runner.queries, ctrl.name, warnings)


def timeline_rows(run: BacktestRun) -> list[dict[str, Any]]:
    """Rows with ``report.timeline_rows``'s columns (arrival rate = observed request rate).

    A variant's replica columns are None (empty in the CSV) on ticks where its count was unknown.
    """
    rows = []
    for rec in run.ticks:
        for name, st in rec.services.items():
            row = tick_row(rec.time_s, name, st, st.estimate.signals.request_rate_rps)
            for v, obs in st.estimate.variants.items():
                if not obs.counts_known:
                    row[f"ready_{v}"] = row[f"starting_{v}"] = row[f"desired_{v}"] = None
            rows.append(row)
    return rows


def write_outputs(run: BacktestRun, out: Path, url: str, service: str | None = None, plot: bool = False
                  ) -> dict[str, Any]:
    """Write ``timeline.csv`` (and ``timeline.png``) under ``out``; return a summary.

    Summary keys, all of the target service's rows of ``timeline.csv``: ``ticks``, ``range_queries``,
    ``decisions`` (rows per value of the timeline's ``decision`` column: ``scale_up``, ``scale_down``,
    ``no_change``, or why nothing could be decided), ``scale_changes`` (``scale_up`` + ``scale_down``),
    ``holds`` (rows the controller could not decide), ``query_failures`` (failed queries).
    """
    out.mkdir(parents=True, exist_ok=True)
    rows = timeline_rows(run)
    write_timeline_csv(rows, out / "timeline.csv")
    target = run.cfg.service(service).name
    if plot and rows:
        from autoscaler.plot import plot_timeline

        source = f"{redact(url)} from {datetime.fromtimestamp(run.start, UTC):%Y-%m-%d %H:%M:%S} UTC"
        plot_rows = [{k: math.nan if v is None and k.startswith(("ready_", "starting_", "desired_")) else v
                      for k, v in row.items()} for row in rows]  # unknown counts are gaps
        plot_timeline(run.cfg, target, f"{run.controller} (backtest): {target} on {source}", plot_rows,
                      out / "timeline.png")
    mine = [row for row in rows if row["service"] == target]
    decisions: dict[str, int] = {}
    for row in mine:
        decisions[row["decision"]] = decisions.get(row["decision"], 0) + 1
    sts = [rec.services[target] for rec in run.ticks]
    return {
        "service": target,
        "ticks": len(mine),
        "range_queries": run.range_queries,
        "decisions": decisions,
        "scale_changes": decisions.get("scale_up", 0) + decisions.get("scale_down", 0),
        "holds": sum(st.decision.hold for st in sts),
        "query_failures": sum(len(st.estimate.errors) for st in sts),
    }
