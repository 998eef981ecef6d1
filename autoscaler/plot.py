"""Plots of runs: one run's timeline, and several controllers side by side.

Every plot gives a variant the same colour (its position in the fleet file), draws legends outside
the axes (they never cover data), and shows the signal the controller acts on against its setpoint
beside the p95 latencies, since the PID controls window means, not p95s. For a planning controller
(the MPC) the timeline adds what it planned two ticks before each tick against what happened, and the
demand it planned for against the arrivals.
"""

from __future__ import annotations

import math
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

    from autoscaler.config import FleetConfig, Service

PLAN_AHEAD = 2
"""Ticks ahead the replicas panel draws a planning controller's plan (the plan's third step: the last
one in ``timeline.csv``, two ticks after the one it applies)."""

_LEGEND = {"loc": "upper left", "bbox_to_anchor": (1.01, 1.0), "fontsize": 8, "borderaxespad": 0.0}


def variant_colors(svc: Service) -> dict[str, str]:
    """variant -> matplotlib colour, by its position in the fleet file (the same in every plot)."""
    return {v.name: f"C{i}" for i, v in enumerate(svc.variants)}


def _used(svc: Service, rows: list[dict[str, Any]]) -> list[str]:
    return [v.name for v in svc.variants if any(r[f"ready_{v.name}"] or r[f"starting_{v.name}"] for r in rows)]


def _replicas(ax: Axes, svc: Service, rows: list[dict[str, Any]], t: list[float]) -> float:
    """Ready replicas per variant, stacked, and ready + starting dashed; returns the highest total."""
    colors = variant_colors(svc)
    used = _used(svc, rows)
    stacks = [[r[f"ready_{v}"] for r in rows] for v in used]
    ax.stackplot(t, *stacks, labels=[f"{v} ready" for v in used], colors=[colors[v] for v in used], alpha=0.8,
                 step="post")
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
        cols = [c for v in svc.variants if (c := r.get(f"plan_{v.name}")) is not None]
        if len(cols) < len(svc.variants):
            continue
        times.append(rows[i + k]["time_s"])
        totals.append(sum(int(str(c).split("/")[k]) for c in cols))
    return times, totals


def _latency(ax: Axes, svc: Service, rows: list[dict[str, Any]], t: list[float]) -> None:
    slo = svc.slo["interactive"]
    ax.plot(t, [r["ttft_p95_s"] for r in rows], color="tab:red", lw=0.9, label="p95 TTFT")
    ax.axhline(slo.ttft_s, color="tab:red", ls=":", lw=0.9, label="TTFT SLO")
    ax.plot(t, [r["tpot_p95_s"] for r in rows], color="tab:blue", lw=0.9, label="p95 of requests' mean TPOT")
    ax.axhline(slo.itl_s, color="tab:blue", ls=":", lw=0.9, label="ITL SLO (a request's mean)")
    ax.set_yscale("log")
    ax.set_ylabel("latency (s)")


def _gaps(values: list[Any]) -> list[float]:
    """``values`` with NaN for the unknown (None) ones: matplotlib leaves a gap there, as it does for None."""
    return [math.nan if v is None else float(v) for v in values]


def _controlled(ax: Axes, rows: list[dict[str, Any]], t: list[float], signal: str) -> None:
    """The controller's measurement against its setpoint; for a planning controller, the demand it
    planned for against the arrivals (absent for controllers with neither)."""
    demand = [r.get("ctl_demand_rps") for r in rows]
    if any(d is not None for d in demand):
        ax.plot(t, [r["arrival_rate_rps"] for r in rows], color="black", lw=0.8, label="arrivals")
        ax.plot(t, _gaps(demand), color="tab:orange", lw=0.9,
                label="demand planned for (forecast quantile, hold, queue)")
        ax.set_ylabel("req/s")
        return
    measured = [r.get("ctl_measurement") for r in rows]
    if not any(m is not None for m in measured):
        ax.text(0.5, 0.5, "this controller has no setpoint", ha="center", va="center", transform=ax.transAxes)
        ax.set_yticks([])
        return
    ax.plot(t, _gaps(measured), color="tab:purple", lw=0.9, label=f"controlled: {signal}")
    ax.plot(t, _gaps([r.get("ctl_setpoint") for r in rows]), color="tab:purple", ls=":", lw=0.9, label="setpoint")
    ax.set_ylabel("controlled signal")


def plot_timeline(cfg: FleetConfig, service: str, title: str, rows: list[dict[str, Any]], path: Path) -> None:
    """Write a four-panel PNG of ``service``'s timeline rows (``autoscaler.timeline``; a None count is a
    gap): arrival rate, replicas per variant (stacked), p95 TTFT/TPOT against the SLO, and the controlled
    signal against its setpoint. ``title`` says which controller ran on what."""
    svc = cfg.service(service)
    rows = [r for r in rows if r["service"] == svc.name]
    t = [r["time_s"] / 60 for r in rows]
    fig, axes = plt.subplots(4, 1, figsize=(12, 10), sharex=True)
    axes[0].plot(t, [r["arrival_rate_rps"] for r in rows], color="black", lw=1, label="arrivals")
    axes[0].set_ylabel("arrivals (req/s)")
    axes[0].set_title(title)
    _replicas(axes[1], svc, rows, t)
    _latency(axes[2], svc, rows, t)
    _controlled(axes[3], rows, t, cfg.controller.pid.setpoint_signal)
    axes[3].set_xlabel("time (min)")
    for ax in axes:
        if ax.get_legend_handles_labels()[0]:
            ax.legend(**_LEGEND)
    fig.tight_layout()
    with atomic(path) as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    plt.close(fig)


def plot_compare(timelines: dict[str, list[dict[str, Any]]], svc: Service, path: Path) -> None:
    """Write a PNG with one row of panels per controller: ready replicas per variant (stacked, with
    ready + starting dashed, on one replica axis for every row) and p95 TTFT/TPOT against the
    interactive SLO, on a shared time axis.

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
    handles: list[Artist] = [Patch(color=colors[v.name], alpha=0.8, label=f"{v.name} ready") for v in svc.variants]
    handles.append(Line2D([], [], color="black", ls="--", lw=0.8, label="ready + starting"))
    handles += axes[0][1].get_legend_handles_labels()[0]
    fig.legend(handles=handles, loc="upper center", ncol=len(handles), fontsize=8, frameon=False)
    axes[0][0].set_title(f"{svc.name}: replicas per variant", pad=18)
    axes[0][1].set_title("latency vs interactive SLO", pad=18)
    axes[-1][0].set_xlabel("time (min)")
    axes[-1][1].set_xlabel("time (min)")
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.35 / fig.get_figheight()))
    with atomic(path) as tmp:
        fig.savefig(tmp, dpi=90, format="png")
    plt.close(fig)
