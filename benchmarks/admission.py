"""Benchmark: admission through a surge (``benchmarks/scenarios/surge.yaml``), one run per row.

Each row is ``SCALING@ADMISSION`` (``pid@none``, ``mpc@mpc``...) on the same workload, fleet and seed;
by default the scenario's ``controllers``: ``pid`` and ``mpc`` under each policy and ``mpc:shed=1@mpc``
(the MPC planning shedding with scaling).
Besides the run's ``results.json`` figures it reports, over the scenario's ``surge`` window:

- ``critical_surge``: SLO attainment of the critical requests that arrived in the window (shed ones
  count as misses);
- ``surge_by_priority``: per priority, of the requests that arrived in the window, the share that met
  the TTFT target and the share that met the ITL target (both of all arrivals: a shed or failed
  request meets neither) and the share that met both;
- ``goodput_surge_rps``: requests meeting their SLO that finished in the window, per second, and its
  ratio to ``capacity_rps``, the capacity at the interactive SLO of the fleet the run started with
  (``autoscaler.simulate.start_at``; ``models.capacity.variant_weights``);
- ``shed_mid_workflow_while_lower_admitted``: requests continuing a workflow shed for good at a time
  when a new request of a lower priority was dispatched within the second before;
- ``sheddable_max_wait_after_s``: the longest gateway wait of a sheddable request dispatched after
  the window (the gateway's ``max_wait_s`` bounds it).

``--gateway KEY=VALUE,...`` lays settings over the fleet's ``simulator.gateway`` for every row
(``saturation=concurrency,usage_limit=priority_holdback``: ``autoscaler.config.GatewayConfig``).
With ``admitter=probabilistic`` the shed column adds ``[N adm.]``, the attempts the admitter rejected.
``--slowdown X`` runs every variant's steps X times longer than its profile says (GPUs slower than
measured, which no controller is told: ``simulator.slowdown``); with ``budget_refresh_s`` in
``--gateway`` the concurrency detector follows the ITL budget the MPC learns (docs/admission.md).

With ``--seeds`` it runs each seed's workload (the scenario's own seed by default), prints a table
per seed and then each row's spread over the seeds (min / median / max).

    python benchmarks/admission.py [--scenario surge.yaml] [--seeds 0,1,2] [--out runs/admission]
                                   [--workers N] [--rows pid@none,mpc@mpc] [--gateway KEY=VALUE,...]
                                   [--slowdown X]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from rich.console import Console

from autoscaler.compare import check_controllers, split_row
from autoscaler.config import FleetConfig
from autoscaler.config.loading import parse_config
from autoscaler.errors import ConfigError
from autoscaler.files import write_text
from autoscaler.progress import Display, Rows
from autoscaler.report import request_outcomes, summarize
from autoscaler.simulate import run_simulation, start_at
from autoscaler.simulator.engine import SHED
from autoscaler.workload.types import CRITICAL, PRIORITIES, SHEDDABLE, Workload
from controllers.registry import build
from models.capacity import variant_weights

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from compare import scenario_fleet, scenario_workload  # noqa: E402
from provenance import stamp  # noqa: E402

SCENARIOS = HERE / "scenarios"


def capacity_rps(cfg: FleetConfig, workload: Workload) -> float:
    """Capacity at the interactive SLO of the fleet a PID run starts with, requests/s."""
    start = start_at(cfg, build("pid", cfg, None, workload), workload, None, True)
    svc = start.services[0]
    w = variant_weights(svc, start.engine)
    return sum(v.start_replicas * w[v.name] for v in svc.variants)


def run_row(row: str, cfg: FleetConfig, workload: Workload, window: tuple[float, float],
            report: Callable[[float], None] | None = None) -> dict[str, Any]:
    """One ``SCALING@ADMISSION`` run and its figures (module docstring); ``report`` gets the simulated time."""
    spec, admission = split_row(row)
    run = run_simulation(cfg, workload, spec, admission=admission, on_step=report)
    res = summarize(run)
    o = request_outcomes(run)
    final = run.sim.final
    arrival = np.array([sr.req.arrival_s for sr in final])
    t1, t2 = window
    surge = (arrival >= t1) & (arrival < t2)
    in_window = surge & (o["priority"] == CRITICAL)
    by_priority = {}
    for level, name in enumerate(PRIORITIES):
        mask = surge & (o["priority"] == level)
        by_priority[name] = {k: float(o[k][mask].mean()) if mask.any() else None for k in ("ttft_ok", "itl_ok", "ok")}
    done = o["finish"][o["ok"]]
    goodput = float(((done >= t1) & (done < t2)).sum()) / (t2 - t1)
    dispatched = sorted((sr.dispatched_s, sr.req.priority) for sr in final
                        if sr.dispatched_s is not None and not sr.continuing)
    times = np.array([t for t, _ in dispatched])
    prios = np.array([p for _, p in dispatched])
    bad = 0
    for sr in final:
        if sr.status == SHED and sr.continuing and sr.t_finish is not None:  # a shed request has ended
            lo, hi = np.searchsorted(times, [sr.t_finish - 1.0, sr.t_finish], side="right")
            bad += bool((prios[lo:hi] < sr.req.priority).any())
    late = [sr.waited_s for sr in final if sr.waited_s is not None and sr.req.priority == SHEDDABLE
            and sr.dispatched_s is not None and sr.dispatched_s >= t2]
    return {"row": row, "results": res, "critical_surge": float(o["ok"][in_window].mean()) if in_window.any() else None,
            "surge_by_priority": by_priority,
            "goodput_surge_rps": goodput, "shed_mid_workflow_while_lower_admitted": bad,
            "sheddable_max_wait_after_s": max(late, default=0.0)}


def admitter(a: dict[str, Any]) -> str:
    """`` [N adm.]``: the attempts the probabilistic admitter rejected, when one ran; else nothing."""
    return f" [{a['admitter_rejected']} adm.]" if "admitter_rejected" in a else ""


def table(rows: list[dict[str, Any]], capacity: float) -> str:
    """The Markdown table of the rows."""
    head = ("| row | critical in surge | in surge TTFT / ITL met: critical, standard, sheddable "
            "| critical / standard / sheddable (run) | goodput in surge (x capacity) "
            "| $/succ. task | shed / deferred / retries | shed mid-workflow (while lower admitted) "
            "| sheddable max wait after |")
    lines = [head, "|" + "---|" * 9]
    for r in rows:
        res = r["results"]
        bp = res["slo_attainment_by_priority"]
        a = res["admission"]

        def pct(x: float | None) -> str:
            return "-" if x is None else f"{x:.2%}"
        cost = res["cost_per_successful_task_usd"]
        sp = r["surge_by_priority"]
        parts = ", ".join(f"{pct(sp[p]['ttft_ok'])} / {pct(sp[p]['itl_ok'])}" for p in reversed(PRIORITIES))
        lines.append(
            f"| {r['row']} | {pct(r['critical_surge'])} | {parts} | {pct(bp['critical'])} / {pct(bp['standard'])} / "
            f"{pct(bp['sheddable'])} | {r['goodput_surge_rps']:.1f} ({r['goodput_surge_rps'] / capacity:.2f}) | "
            f"{'-' if cost is None else f'${cost:.6f}'} | "
            f"{a['shed']}{admitter(a)} / {a['deferred']} / {a['retries']} | "
            f"{a['shed_mid_workflow']} ({r['shed_mid_workflow_while_lower_admitted']}) | "
            f"{r['sheddable_max_wait_after_s']:.0f} s |")
    return "\n".join(lines)


def spread(by_seed: dict[int, list[dict[str, Any]]], capacity: dict[int, float]) -> str:
    """The Markdown table of each row's min / median / max over the seeds."""
    lines = ["| row | critical in surge | goodput in surge (x capacity) | $/succ. task |", "|" + "---|" * 4]
    rows = [r["row"] for r in next(iter(by_seed.values()))]

    def mmm(xs: list[float], fmt: str) -> str:
        return " / ".join(format(x, fmt) for x in (min(xs), float(np.median(xs)), max(xs)))
    for i, row in enumerate(rows):
        crit = [runs[i]["critical_surge"] for runs in by_seed.values()]
        good = [runs[i]["goodput_surge_rps"] / capacity[s] for s, runs in by_seed.items()]
        cost = [runs[i]["results"]["cost_per_successful_task_usd"] for runs in by_seed.values()]
        lines.append(f"| {row} | {mmm(crit, '.2%')} | {mmm(good, '.2f')} | {mmm(cost, '.6f')} |")
    return "\n".join(lines)


_JOB: tuple[FleetConfig, dict[int, Workload], tuple[float, float], Rows] | None = None


def _init(cfg: FleetConfig, workloads: dict[int, Workload], window: tuple[float, float], progress: Rows) -> None:
    global _JOB
    _JOB = (cfg, workloads, window, progress)


def _work(job: tuple[int, tuple[int, str]]) -> dict[str, Any]:
    assert _JOB is not None
    cfg, workloads, window, progress = _JOB
    i, (seed, row) = job
    progress.start(i)
    try:
        return run_row(row, cfg, workloads[seed], window, progress.reporter(i))
    finally:
        progress.finish(i)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenario", default="surge.yaml",
                    help="a scenario under benchmarks/scenarios with a surge window")
    ap.add_argument("--seeds", default=None, help="comma-separated workload seeds (default: the scenario's)")
    ap.add_argument("--out", type=Path, default=HERE.parent / "runs" / "admission",
                    help="folder for <scenario>.json (default runs/admission)")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="runs at once (default: the CPUs)")
    ap.add_argument("--rows", default=None, help="comma-separated SCALING@ADMISSION rows (default: the scenario's)")
    ap.add_argument("--gateway", default=None,
                    help="KEY=VALUE,... laid over the fleet's simulator.gateway (GatewayConfig) for every row")
    ap.add_argument("--slowdown", type=float, default=None,
                    help="every variant's steps this many times longer than its profile says (simulator.slowdown: "
                         "GPUs slower than measured, which the controllers are not told)")
    args = ap.parse_args()
    path = SCENARIOS / args.scenario
    if not path.is_file():
        ap.error(f"--scenario {args.scenario}: no such scenario in {SCENARIOS}")
    if args.workers < 1:
        ap.error(f"--workers must be >= 1, got {args.workers}")
    sc = yaml.safe_load(path.read_text())
    if not isinstance(sc, dict) or "surge" not in sc:
        ap.error(f"--scenario {args.scenario}: no surge window (a 'surge: {{start_s, end_s}}' entry) to report on")
    if args.out.exists() and not args.out.is_dir():
        ap.error(f"--out {args.out}: not a folder")
    for flag, value in (("--rows", args.rows), ("--seeds", args.seeds)):
        if value is not None and not value.strip():
            ap.error(f"{flag} is empty: leave it out for the scenario's")
    if args.gateway:
        gateway: dict[str, Any] = {}
        for item in args.gateway.split(","):
            key, eq, value = (part.strip() for part in item.partition("="))
            if not key or not eq or key in gateway:
                ap.error(f"--gateway takes KEY=VALUE,... with each key once, got {args.gateway!r}")
            try:
                gateway[key] = yaml.safe_load(value)
            except yaml.YAMLError:
                ap.error(f"--gateway {key}: {value!r} is not a value")
        sc.setdefault("fleet", {}).setdefault("simulator", {}).setdefault("gateway", {}).update(gateway)
    try:
        cfg = parse_config(scenario_fleet(sc), path.name)
        if args.slowdown is not None:
            doc = cfg.model_dump()
            doc["simulator"]["slowdown"] = {v.name: args.slowdown for s in cfg.services for v in s.variants}
            cfg = parse_config(doc, f"{path.name} --slowdown")
    except ConfigError as exc:
        ap.error(str(exc))
    try:
        seeds = [int(x) for x in args.seeds.split(",")] if args.seeds else [int(sc["seed"])]
        if any(x < 0 for x in seeds):
            raise ValueError
    except ValueError:
        ap.error(f"--seeds takes comma-separated integers >= 0, got {args.seeds!r}")
    workloads = {s: scenario_workload({**sc, "seed": s}, HERE) for s in seeds}
    window = (float(sc["surge"]["start_s"]), float(sc["surge"]["end_s"]))
    rows = args.rows.split(",") if args.rows else sc["controllers"]
    try:  # every row's spec and policy before any run: a bad last row must not cost the others' runs
        check_controllers(rows, cfg, workloads[seeds[0]], None)
    except ValueError as exc:
        ap.error(f"--rows: {exc}")
    cap = {s: capacity_rps(cfg, wl) for s, wl in workloads.items()}
    jobs = [(s, r) for s in seeds for r in rows]
    # progress on stderr (autoscaler.progress): a bar per running row on a terminal, else a line every 15 s
    err = Console(stderr=True)
    err.print(f"admission: {len(jobs)} runs ({len(seeds)} seed(s) x {len(rows)} rows), "
              f"{min(args.workers, len(jobs))} at once", highlight=False)
    shown = Rows([f"seed {s} {r}" for s, r in jobs], [workloads[s].requests[-1].arrival_s for s, _ in jobs])
    with ProcessPoolExecutor(max_workers=min(args.workers, len(jobs)), initializer=_init,
                             initargs=(cfg, workloads, window, shown)) as pool, \
            Display(shown, "admission", err):
        out = list(pool.map(_work, enumerate(jobs)))
    by_seed = {s: out[i * len(rows):(i + 1) * len(rows)] for i, s in enumerate(seeds)}
    args.out.mkdir(parents=True, exist_ok=True)
    write_text(args.out / f"{sc['name']}.json", json.dumps(
        {"seeds": {str(s): {"capacity_rps": cap[s], "rows": by_seed[s]} for s in seeds}}, indent=2) + "\n")
    for s in seeds:
        print(f"### {sc['name']}, seed {s}: {len(workloads[s].requests)} requests; fleet capacity at the SLO "
              f"{cap[s]:.1f} req/s; window {window[0]:g}-{window[1]:g} s ({stamp()})\n")
        print(table(by_seed[s], cap[s]) + "\n")
    if len(seeds) > 1:
        print(f"### {sc['name']} ({stamp()}): min / median / max over seeds {', '.join(map(str, seeds))}\n")
        print(spread(by_seed, cap))


if __name__ == "__main__":
    main()
