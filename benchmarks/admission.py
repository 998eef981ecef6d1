"""Benchmark: admission through a surge (``benchmarks/scenarios/surge.yaml``), one run per row.

Each row is ``SCALING@ADMISSION`` (``pid@none``, ``mpc@mpc``...) on the same workload, fleet and seed.
Besides the run's ``results.json`` figures it reports, over the scenario's ``surge`` window:

- ``critical_surge``: SLO attainment of the critical requests that arrived in the window (shed ones
  count as misses);
- ``goodput_surge_rps``: requests meeting their SLO that finished in the window, per second, and its
  ratio to ``capacity_rps``, the capacity at the interactive SLO of the fleet the run started with
  (``autoscaler.simulate.start_at``; ``models.capacity.variant_weights``);
- ``shed_mid_workflow_while_lower_admitted``: requests continuing a workflow shed for good at a time
  when a new request of a lower priority was dispatched within the second before;
- ``sheddable_max_wait_after_s``: the longest gateway wait of a sheddable request dispatched after
  the window (the gateway's ``max_wait_s`` bounds it).

    python benchmarks/admission.py [--out runs/admission] [--workers N] [--rows pid@none,mpc@mpc]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from autoscaler.compare import split_row
from autoscaler.config import FleetConfig
from autoscaler.config.loading import parse_config
from autoscaler.report import request_outcomes, summarize
from autoscaler.simulate import run_simulation, start_at
from autoscaler.simulator.engine import SHED
from autoscaler.workload.types import CRITICAL, SHEDDABLE, Workload
from controllers.registry import build
from models.capacity import variant_weights

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from compare import scenario_fleet, scenario_workload  # noqa: E402

SCENARIO = HERE / "scenarios" / "surge.yaml"


def capacity_rps(cfg: FleetConfig, workload: Workload) -> float:
    """Capacity at the interactive SLO of the fleet a PID run starts with, requests/s."""
    start = start_at(cfg, build("pid", cfg, None, workload), workload, None, True)
    svc = start.services[0]
    w = variant_weights(svc, start.simulator.engine)
    return sum(v.start_replicas * w[v.name] for v in svc.variants)


def run_row(row: str, cfg: FleetConfig, workload: Workload, window: tuple[float, float]) -> dict[str, Any]:
    """One ``SCALING@ADMISSION`` run and its figures (module docstring)."""
    spec, admission = split_row(row)
    run = run_simulation(cfg, workload, spec, admission=admission)
    res = summarize(run)
    o = request_outcomes(run)
    final = run.sim.final
    arrival = np.array([sr.req.arrival_s for sr in final])
    t1, t2 = window
    in_window = (arrival >= t1) & (arrival < t2) & (o["priority"] == CRITICAL)
    done = o["finish"][o["ok"]]
    goodput = float(((done >= t1) & (done < t2)).sum()) / (t2 - t1)
    dispatched = sorted((sr.dispatched_s, sr.req.priority) for sr in final
                        if sr.dispatched_s is not None and not sr.continuing)
    times = np.array([t for t, _ in dispatched])
    prios = np.array([p for _, p in dispatched])
    bad = 0
    for sr in final:
        if sr.status == SHED and sr.continuing:
            lo, hi = np.searchsorted(times, [sr.t_finish - 1.0, sr.t_finish], side="right")
            bad += bool((prios[lo:hi] < sr.req.priority).any())
    late = [sr.waited_s for sr in final if sr.waited_s is not None and sr.req.priority == SHEDDABLE
            and sr.dispatched_s is not None and sr.dispatched_s >= t2]
    return {"row": row, "results": res, "critical_surge": float(o["ok"][in_window].mean()) if in_window.any() else None,
            "goodput_surge_rps": goodput, "shed_mid_workflow_while_lower_admitted": bad,
            "sheddable_max_wait_after_s": max(late, default=0.0)}


def table(rows: list[dict[str, Any]], capacity: float) -> str:
    """The Markdown table of the rows."""
    head = ("| row | critical in surge | critical / standard / sheddable (run) | goodput in surge (x capacity) "
            "| $/succ. task | shed / deferred / retries | shed mid-workflow (while lower admitted) "
            "| sheddable max wait after |")
    lines = [head, "|" + "---|" * 8]
    for r in rows:
        res = r["results"]
        bp = res["slo_attainment_by_priority"]
        a = res["admission"]

        def pct(x: float | None) -> str:
            return "-" if x is None else f"{x:.2%}"
        cost = res["cost_per_successful_task_usd"]
        lines.append(
            f"| {r['row']} | {pct(r['critical_surge'])} | {pct(bp['critical'])} / {pct(bp['standard'])} / "
            f"{pct(bp['sheddable'])} | {r['goodput_surge_rps']:.1f} ({r['goodput_surge_rps'] / capacity:.2f}) | "
            f"{'-' if cost is None else f'${cost:.6f}'} | {a['shed']} / {a['deferred']} / {a['retries']} | "
            f"{a['shed_mid_workflow']} ({r['shed_mid_workflow_while_lower_admitted']}) | "
            f"{r['sheddable_max_wait_after_s']:.0f} s |")
    return "\n".join(lines)


_JOB: tuple[FleetConfig, Workload, tuple[float, float]] | None = None


def _init(cfg: FleetConfig, workload: Workload, window: tuple[float, float]) -> None:
    global _JOB
    _JOB = (cfg, workload, window)


def _work(row: str) -> dict[str, Any]:
    assert _JOB is not None
    return run_row(row, *_JOB)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=HERE.parent / "runs" / "admission")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--rows", default=None, help="comma-separated SCALING@ADMISSION rows (default: the scenario's)")
    args = ap.parse_args()
    sc = yaml.safe_load(SCENARIO.read_text())
    cfg = parse_config(scenario_fleet(sc), "surge fleet")
    wl = scenario_workload(sc, HERE)
    window = (float(sc["surge"]["start_s"]), float(sc["surge"]["end_s"]))
    rows = args.rows.split(",") if args.rows else sc["controllers"]
    cap = capacity_rps(cfg, wl)
    with ProcessPoolExecutor(max_workers=min(args.workers, len(rows)), initializer=_init,
                             initargs=(cfg, wl, window)) as pool:
        out = list(pool.map(_work, rows))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "surge.json").write_text(json.dumps({"capacity_rps": cap, "rows": out}, indent=2) + "\n")
    print(f"### surge: {len(wl.requests)} requests; fleet capacity at the SLO {cap:.1f} req/s; "
          f"window {window[0]:g}-{window[1]:g} s\n")
    print(table(out, cap))


if __name__ == "__main__":
    main()
