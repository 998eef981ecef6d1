"""Plots of runs: one run's timeline, and several controllers side by side.

Every plot gives a variant the same colour (its position in the fleet file), draws legends outside
the axes (they never cover data), and shows the signal the controller acts on against its setpoint
beside the p95 latencies, since the PID controls window means, not p95s. Latencies are drawn over
their SLOs (1 = SLO), the per-token one as vLLM's ITL averaged per request (what it calls TPOT, and
what the ``itl_s`` objective judges), so each curve has one line to cross. For a planning controller
(the MPC) the timeline adds what it planned two ticks before each tick against what happened, and the
demand it planned for against the arrivals.
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.artist import Artist
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from autoscaler.files import atomic

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from autoscaler.config import FleetConfig, Service

PLAN_AHEAD = 2
"""Ticks ahead the replicas panel draws a planning controller's plan (the plan's third step: the last
one in ``timeline.csv``, two ticks after the one it applies)."""

_LEGEND = {"loc": "upper left", "bbox_to_anchor": (1.01, 1.0), "fontsize": 8, "borderaxespad": 0.0}


def plotted(svc: Service) -> list[str]:
    """The variants drawn: the aggregated ones, then the prefill/decode pools' (whose columns the timeline
    has under a controller that scales the pools, ``autoscaler.timeline.tick_row``)."""
    return [v.name for v in svc.variants] + [v.name for _, v in svc.role_variants()]


def variant_colors(svc: Service) -> dict[str, str]:
    """variant -> matplotlib colour, by its position in the fleet file (the same in every plot)."""
    return {v: f"C{i}" for i, v in enumerate(plotted(svc))}


def _used(svc: Service, rows: list[dict[str, Any]]) -> list[str]:
    return [v for v in plotted(svc) if any(r.get(f"ready_{v}") or r.get(f"starting_{v}") for r in rows)]


def _replicas(ax: Axes, svc: Service, rows: list[dict[str, Any]], t: list[float]) -> float:
    """Ready replicas per variant, stacked, and ready + starting dashed; returns the highest total."""
    colors = variant_colors(svc)
    used = _used(svc, rows)
    stacks = [[r[f"ready_{v}"] for r in rows] for v in used]
    if stacks:  # none for a service of pools only under a controller that holds them (no pool columns)
        ax.stackplot(t, *stacks, labels=[f"{v} ready" for v in used], colors=[colors[v] for v in used],
                     alpha=0.8, step="post")
    total = [sum(r[f"ready_{v}"] + r[f"starting_{v}"] for v in used) for r in rows]
    ax.plot(t, total, "k--", lw=0.8, label="ready + starting", drawstyle="steps-post")
    ahead_t, ahead = planned_ahead(rows, svc, PLAN_AHEAD)
    if ahead:
        ax.plot([x / 60.0 for x in ahead_t], ahead, color="tab:orange", ls=":", lw=1.0, drawstyle="steps-post",
                label=f"planned {PLAN_AHEAD} ticks before")
    ax.set_ylabel("replicas")
    return max([*total, *ahead], default=0.0)


def planned_ahead(rows: list[dict[str, Any]], svc: Service, k: int) -> tuple[list[float], list[int]]:
    """A planning controller's total replicas for each tick as planned ``k`` ticks before it
    (``plan_<variant>`` columns: ``n1/n2/n3``), at the tick it was planned for, seconds; empty for
    other controllers. Rows are one service's, one per tick."""
    times: list[float] = []
    totals: list[int] = []
    for i, r in enumerate(rows[:len(rows) - k]):
        names = plotted(svc)
        cols = [c for v in names if (c := r.get(f"plan_{v}")) is not None]
        if not cols or len(cols) < len(names):
            continue
        times.append(rows[i + k]["time_s"])
        totals.append(sum(int(str(c).split("/")[k]) for c in cols))
    return times, totals


def _latency(ax: Axes, svc: Service, rows: list[dict[str, Any]], t: list[float]) -> None:
    """p95 TTFT and the p95 of requests' mean ITL (vLLM's TPOT), each over its own interactive SLO, on
    one axis with one SLO line at 1: above it is a violation of that objective, whichever it is."""
    slo = svc.slo["interactive"]
    ax.plot(t, _ratios([r["ttft_p95_s"] for r in rows], slo.ttft_s), color="tab:red", lw=0.9,
            label=f"p95 TTFT / its SLO ({slo.ttft_s:g} s)")
    ax.plot(t, _ratios([r["tpot_p95_s"] for r in rows], slo.itl_s), color="tab:blue", lw=0.9,
            label=f"p95 of requests' mean ITL / its SLO ({slo.itl_s * 1e3:g} ms)")
    ax.axhline(1.0, color="black", ls=":", lw=0.9, label="SLO")
    ax.set_yscale("log")
    low, high = ax.get_ylim()
    ax.set_ylim(low, max(high, 1.5))  # the SLO line inside the panel, not on its edge
    ax.set_ylabel("latency / SLO (1 = SLO)")


def _ratios(values: list[Any], slo_s: float) -> list[float]:
    """Latencies (s; None unknown: a gap) over their SLO (s)."""
    return [v / slo_s for v in _gaps(values)]


def _gaps(values: list[Any]) -> list[float]:
    """``values`` with NaN for the unknown (None) ones: matplotlib leaves a gap there, as it does for None."""
    return [math.nan if v is None else float(v) for v in values]


SIGNAL_LABELS = {
    "slo_mean_ratio": "mean latency / SLO, the worse of TTFT and ITL (1 = SLO)",
    "slo_p95_ratio": "p95 latency / SLO, the worse of TTFT and ITL (1 = SLO)",
    "ttft_mean_ratio": "mean TTFT / SLO (1 = SLO)",
    "ttft_p95_ratio": "p95 TTFT / SLO (1 = SLO)",
    "tpot_mean_ratio": "mean of requests' mean ITL / SLO (1 = SLO)",
    "tpot_p95_ratio": "p95 of requests' mean ITL / SLO (1 = SLO)",
    "kv_usage": "KV cache in use (fraction of the pool)",
    "queue_per_replica": "waiting requests per ready replica",
}
"""A PID setpoint signal (``config.control.SetpointSignal``) -> what it measures, with its unit."""


def _controlled(ax: Axes, rows: list[dict[str, Any]], t: list[float], signal: str) -> None:
    """The controller's measurement against its setpoint; for a planning controller, the demand it
    planned for against the arrivals (absent for controllers with neither)."""
    demand = [r.get("ctl_demand_rps") for r in rows]
    if any(d is not None for d in demand):
        ax.plot(t, [r["arrival_rate_rps"] for r in rows], color="black", lw=0.8, label="arrivals over each tick")
        ax.plot(t, _gaps(demand), color="tab:orange", lw=0.9,
                label="demand planned for (forecast quantile, hold, queue)")
        ax.set_ylabel("demand (req/s)")
        return
    measured = [r.get("ctl_measurement") for r in rows]
    if not any(m is not None for m in measured):
        ax.text(0.5, 0.5, "this controller has no setpoint", ha="center", va="center", transform=ax.transAxes)
        ax.set_yticks([])
        return
    label = SIGNAL_LABELS.get(signal, signal.replace("_", " "))
    ax.plot(t, _gaps(measured), color="tab:purple", lw=0.9, label="controlled signal")
    ax.plot(t, _gaps([r.get("ctl_setpoint") for r in rows]), color="tab:purple", ls=":", lw=0.9, label="setpoint")
    ax.set_ylabel("\n".join(textwrap.wrap(label, 30)), fontsize=9)


def _scale_decisions(ax: Axes, svc: Service, rows: list[dict[str, Any]], t: list[float]) -> None:
    """A marker per variant and tick whose desired replicas changed from the tick before (up: a
    triangle up, down: down), in the variant's colour, at the new total desired; unknown counts
    (a backtest's gaps) mark nothing."""
    colors = variant_colors(svc)
    names = plotted(svc)
    for kind, sign, marker in (("up", 1, "^"), ("down", -1, "v")):
        for v in names:
            xs, ys = [], []
            for i in range(1, len(rows)):
                before, now = _gaps([rows[i - 1].get(f"desired_{v}"), rows[i].get(f"desired_{v}")])
                if math.isfinite(before) and math.isfinite(now) and (now - before) * sign > 0:
                    xs.append(t[i])
                    ys.append(sum(_gaps([rows[i].get(f"desired_{u}") for u in names])))
            if xs:
                ax.plot(xs, ys, ls="none", marker=marker, ms=6, color=colors[v], markeredgecolor="black",
                        markeredgewidth=0.5, label=f"{v} scaled {kind}", gid=f"scale-{kind}")


def summary_line(results: dict[str, Any]) -> str:
    """SLO attainment per request class and the run's GPU-hours and cost, as ``results.json`` has them."""
    slo = results["slo_attainment"]
    parts = [f"{c} {'n/a' if slo[c] is None else f'{100 * slo[c]:.2f} %'}" for c in slo]
    return (f"within SLO: {', '.join(parts)}  |  {results['gpu_hours']['total']:.2f} GPU-h, "
            f"${results['cost_usd']['total']:.2f}")


def arrivals(rows: list[dict[str, Any]], until_s: float | None) -> list[float]:
    """The arrival rate per tick (req/s), NaN for a tick whose interval begins at or after ``until_s``
    (the workload's last arrival, s): past the workload's end, not a drop in demand."""
    out = _gaps([r["arrival_rate_rps"] for r in rows])
    if until_s is None:
        return out
    return [math.nan if i > 0 and rows[i - 1]["time_s"] >= until_s else x for i, x in enumerate(out)]


def plot_timeline(cfg: FleetConfig, service: str, title: str, rows: list[dict[str, Any]], path: Path,
                  results: dict[str, Any] | None = None, arrivals_until_s: float | None = None) -> None:
    """Write a four-panel PNG of ``service``'s timeline rows (``autoscaler.timeline``; a None count is a
    gap): arrival rate, replicas per variant (stacked, with a marker at each scale decision), p95 TTFT
    and requests' mean ITL over their SLOs, and the controlled signal against its setpoint. ``title``
    says which controller ran on what; ``results`` (``results.json``), when given, adds the SLO
    attainment and cost under it; ticks past ``arrivals_until_s`` (s) show no arrival rate."""
    fig = timeline_figure(cfg, service, title, rows, results, arrivals_until_s)
    with atomic(path) as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    plt.close(fig)


def timeline_figure(cfg: FleetConfig, service: str, title: str, rows: list[dict[str, Any]],
                    results: dict[str, Any] | None = None, arrivals_until_s: float | None = None) -> Figure:
    """The figure ``plot_timeline`` writes (the caller closes it)."""
    svc = cfg.service(service)
    rows = [r for r in rows if r["service"] == svc.name]
    t = [r["time_s"] / 60 for r in rows]
    fig, axes = plt.subplots(4, 1, figsize=(12, 10), sharex=True)
    axes[0].plot(t, arrivals(rows, arrivals_until_s), color="black", lw=1, label="arrivals")
    axes[0].set_ylabel("arrivals over each tick (req/s)")
    axes[0].set_title(title if results is None else f"{title}\n{summary_line(results)}", fontsize=11)
    _replicas(axes[1], svc, rows, t)
    _scale_decisions(axes[1], svc, rows, t)
    _latency(axes[2], svc, rows, t)
    _controlled(axes[3], rows, t, cfg.controller.pid.setpoint_signal)
    axes[3].set_xlabel("time (min)")
    for ax in axes:
        if ax.get_legend_handles_labels()[0]:
            ax.legend(**_LEGEND)
    fig.tight_layout()
    return fig


def plot_compare(timelines: dict[str, list[dict[str, Any]]], svc: Service, path: Path) -> None:
    """Write a PNG with one row of panels per controller: ready replicas per variant (stacked, with
    ready + starting dashed, on one replica axis for every row) and p95 TTFT and requests' mean ITL over
    the interactive SLO, on a shared time axis.

    ``timelines`` maps controller name to ``timeline_rows``-style rows of ``svc`` (``time_s``,
    ``ready_<variant>``, ``starting_<variant>``, ``ttft_p95_s``, ``tpot_p95_s``).
    """
    names = list(timelines)
    fig, axes = plt.subplots(len(names), 2, figsize=(14, 2.4 * len(names) + 0.6), sharex=True, squeeze=False)
    top = 1.0
    for (ax_rep, ax_lat), name in zip(axes, names, strict=True):
        rows = timelines[name]
        t = [r["time_s"] / 60 for r in rows]
        top = max(top, _replicas(ax_rep, svc, rows, t))
        ax_rep.set_ylabel(f"{name}\nreplicas")
        _latency(ax_lat, svc, rows, t)
    for ax_rep, _ in axes:
        ax_rep.set_ylim(0, top * 1.05)
    colors = variant_colors(svc)
    handles: list[Artist] = [Patch(color=colors[v], alpha=0.8, label=f"{v} ready") for v in plotted(svc)]
    handles.append(Line2D([], [], color="black", ls="--", lw=0.8, label="ready + starting"))
    handles += axes[0][1].get_legend_handles_labels()[0]
    fig.legend(handles=handles, loc="upper center", ncol=len(handles), fontsize=8, frameon=False)
    axes[0][0].set_title(f"{svc.name}: replicas per variant", pad=18)
    axes[0][1].set_title("latency over the interactive SLO", pad=18)
    axes[-1][0].set_xlabel("time (min)")
    axes[-1][1].set_xlabel("time (min)")
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.35 / fig.get_figheight()))
    with atomic(path) as tmp:
        fig.savefig(tmp, dpi=90, format="png")
    plt.close(fig)
