"""Timeline plot of a simulation: demand, replicas per variant, and latency against the SLO."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

if TYPE_CHECKING:
    from autoscaler.config import Service
    from autoscaler.simulate import SimulationRun


def plot_timeline(run: SimulationRun, rows: list[dict[str, Any]], path: Path) -> None:
    """Write a three-panel PNG: arrival rate, replicas per variant (stacked), p95 TTFT/TPOT vs SLO."""
    svc = run.sim.cfg.service(run.sim.target)
    rows = [r for r in rows if r["service"] == svc.name]
    t = [r["time_s"] / 60 for r in rows]
    fig, axes = plt.subplots(3, 1, figsize=(11, 8), sharex=True)
    axes[0].plot(t, [r["arrival_rate_rps"] for r in rows], color="black", lw=1)
    axes[0].set_ylabel("arrivals (req/s)")
    axes[0].set_title(f"{run.controller}: {svc.name} on {run.sim.workload.source}")
    used = [v for v in svc.variants if any(r[f"ready_{v.name}"] or r[f"starting_{v.name}"] for r in rows)]
    stacks = [[r[f"ready_{v.name}"] for r in rows] for v in used]
    axes[1].stackplot(t, *stacks, labels=[f"{v.name} ready" for v in used], alpha=0.8, step="post")
    starting = [sum(r[f"starting_{v.name}"] for v in used) for r in rows]
    axes[1].plot(t, [sum(s[i] for s in stacks) + starting[i] for i in range(len(t))], "k--", lw=0.8,
                 label="ready + starting")
    axes[1].set_ylabel("replicas")
    axes[1].legend(loc="upper right", fontsize=8)
    slo = svc.slo["interactive"]
    axes[2].plot(t, [r["ttft_p95_s"] for r in rows], label="p95 TTFT (s)", color="tab:red")
    axes[2].axhline(slo.ttft_s, color="tab:red", ls=":", label="TTFT SLO (interactive)")
    axes[2].plot(t, [r["tpot_p95_s"] for r in rows], label="p95 TPOT (s)", color="tab:blue")
    axes[2].axhline(slo.itl_s, color="tab:blue", ls=":", label="ITL SLO (interactive, per-request mean)")
    axes[2].set_yscale("log")
    axes[2].set_ylabel("latency (s)")
    axes[2].set_xlabel("time (min)")
    axes[2].legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_compare(timelines: dict[str, list[dict[str, Any]]], svc: Service, path: Path) -> None:
    """Write a PNG with one row of panels per controller: ready replicas per variant (stacked, with
    ready + starting dashed) and p95 TTFT/TPOT against the interactive SLO, on a shared time axis.

    ``timelines`` maps controller name to ``timeline_rows``-style rows of ``svc`` (``time_s``,
    ``ready_<variant>``, ``starting_<variant>``, ``ttft_p95_s``, ``tpot_p95_s``).
    """
    names = list(timelines)
    fig, axes = plt.subplots(len(names), 2, figsize=(13, 2.4 * len(names) + 0.6), sharex=True, squeeze=False)
    slo = svc.slo["interactive"]
    colors = {v.name: f"C{i}" for i, v in enumerate(svc.variants)}  # the same colour for a variant in every row
    for (ax_rep, ax_lat), name in zip(axes, names, strict=True):
        rows = timelines[name]
        t = [r["time_s"] / 60 for r in rows]
        used = [v.name for v in svc.variants if any(r[f"ready_{v.name}"] or r[f"starting_{v.name}"] for r in rows)]
        stacks = [[r[f"ready_{v}"] for r in rows] for v in used]
        ax_rep.stackplot(t, *stacks, labels=used, colors=[colors[v] for v in used], alpha=0.8, step="post")
        ax_rep.plot(t, [sum(r[f"ready_{v}"] + r[f"starting_{v}"] for v in used) for r in rows], "k--", lw=0.7,
                    label="ready + starting")
        ax_rep.set_ylabel(f"{name}\nreplicas")
        ax_rep.legend(loc="upper right", fontsize=7)
        ax_lat.plot(t, [r["ttft_p95_s"] for r in rows], color="tab:red", lw=0.8, label="p95 TTFT")
        ax_lat.axhline(slo.ttft_s, color="tab:red", ls=":", lw=0.8, label="TTFT SLO")
        ax_lat.plot(t, [r["tpot_p95_s"] for r in rows], color="tab:blue", lw=0.8, label="p95 TPOT")
        ax_lat.axhline(slo.itl_s, color="tab:blue", ls=":", lw=0.8, label="ITL SLO")
        ax_lat.set_yscale("log")
        ax_lat.set_ylabel("latency (s)")
        ax_lat.legend(loc="upper right", fontsize=7)
    axes[0][0].set_title(f"{svc.name}: replicas per variant")
    axes[0][1].set_title("latency vs interactive SLO")
    axes[-1][0].set_xlabel("time (min)")
    axes[-1][1].set_xlabel("time (min)")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
