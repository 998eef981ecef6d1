"""Timeline plot of a simulation: demand, replicas per variant, and latency against the SLO."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

if TYPE_CHECKING:
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
    stacks = [[r[f"ready_{v.name}"] for r in rows] for v in svc.variants]
    axes[1].stackplot(t, *stacks, labels=[v.name for v in svc.variants], alpha=0.8, step="post")
    starting = [sum(r[f"starting_{v.name}"] for v in svc.variants) for r in rows]
    axes[1].plot(t, [sum(s[i] for s in stacks) + starting[i] for i in range(len(t))], "k--", lw=0.8,
                 label="ready + starting")
    axes[1].set_ylabel("replicas")
    axes[1].legend(loc="upper left", fontsize=8)
    slo = svc.slo["interactive"]
    axes[2].plot(t, [r["ttft_p95_s"] for r in rows], label="p95 TTFT (s)", color="tab:red")
    axes[2].axhline(slo.ttft_s, color="tab:red", ls=":", label="TTFT SLO")
    axes[2].plot(t, [r["tpot_p95_s"] for r in rows], label="p95 TPOT (s)", color="tab:blue")
    axes[2].axhline(slo.itl_s, color="tab:blue", ls=":", label="ITL SLO")
    axes[2].set_yscale("log")
    axes[2].set_ylabel("latency (s)")
    axes[2].set_xlabel("time (min)")
    axes[2].legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
