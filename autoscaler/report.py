"""Results of a simulation: the ``results.json`` summary, the per-tick timeline, and the plot.

Definitions:
- A request *meets its SLO* when it completed, its TTFT <= the class's ``ttft_s`` and its mean
  inter-token latency ((finish - first token) / (output tokens - 1)) <= the class's ``itl_s``.
- A request's outcome is its last attempt's (clients retry, ``simulator.clients``); its TTFT counts
  from its first attempt's arrival, as its user waited.
- SLO attainment of a class = requests meeting the SLO / requests of that class that were accepted
  (completed, failed, or shed by the gateway with no retry left: ``rejected_admission``, a miss);
  requests rejected for exceeding ``max_model_len`` are reported apart. By priority
  (``slo_attainment_by_priority``) the same over that priority's accepted requests.
- A *task* is a workflow (all requests sharing a ``workflow_id``), or a single request without one;
  it succeeds when every one of its requests meets its SLO (so one shed request fails it).
- Goodput = requests meeting their SLO per second: ``mean`` over the span from the first arrival to the
  last, ``min_60s`` the lowest of its whole 60-s windows (by completion time); None on a span under 60 s.
- ``admission``: ``shed`` requests whose last attempt was shed, ``shed_attempts`` attempts answered
  HTTP 429 (deferred ones past their deadline included), ``deferred`` attempts deferred, ``retries``
  attempts sent again by their clients, ``shed_mid_workflow`` shed requests that continued a workflow
  in progress; with ``simulator.gateway.admitter`` also ``admitter_rejected``, attempts its admitter
  rejected after flow control dispatched them (HTTP 500; their requests count in ``shed`` when that
  was their last attempt, not in ``shed_attempts``).
- Cost = sum over replicas of (seconds from creation to removal, provisioning included) x
  $/replica-hour / 3600; GPU-hours likewise with GPUs per replica.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from autoscaler.files import write_text
from autoscaler.simulate import SimulationRun
from autoscaler.simulator.engine import COMPLETED, FAILED, REJECTED, SHED
from autoscaler.simulator.fleet import STATUSES
from autoscaler.timeline import tick_row, write_timeline_csv
from autoscaler.workload.stream import WorkloadStream, arrival_times, columns
from autoscaler.workload.types import PRIORITIES, REQUEST_CLASSES
from controllers.bound import Outcome

GOODPUT_WINDOW_S = 60.0


def _quantiles(x: np.ndarray) -> dict[str, float | None]:
    if x.size == 0:
        return {"p50": None, "p95": None, "p99": None}
    p50, p95, p99 = np.percentile(x, [50, 95, 99])
    return {"p50": float(p50), "p95": float(p95), "p99": float(p99)}


def outcome_columns(run: SimulationRun) -> dict[str, Any]:
    """``request_outcomes`` with codes for names, its columns read in place where they can be: ``status``
    (uint8 index in ``fleet.STATUSES``), ``cls`` (uint8 index in ``REQUEST_CLASSES``), ``priority``,
    ``ttft``, ``itl``, ``finish``, ``ttft_ok``, ``itl_ok``, ``ok``, ``arrival`` and ``task`` (None: every
    request its own task). What ``summarize`` reads: on a streamed run without ``keep_requests`` the
    arrivals, classes, priorities, finish times and status codes are the workload's and the
    simulator's own arrays, not copies (issue 33: a 14-day replay's results step), and the values are
    ``request_outcomes``' to the bit (the same float64 arithmetic on the same values)."""
    svc = run.sim.cfg.service(run.sim.target)
    wl = run.sim.workload
    status, t_first, finish = run.sim.outcome_codes()
    task: np.ndarray | None
    if isinstance(wl, WorkloadStream):
        arrival = arrival_times(wl)
        cls, priority, out_tokens, task = wl.request_class, wl.priority, wl.output_tokens, wl.unit
    else:
        cols = columns(wl)
        arrival, priority, out_tokens, task = cols.arrival_s, cols.priority, cols.output_tokens, cols.task
        code = {c: i for i, c in enumerate(REQUEST_CLASSES)}
        cls = np.array([code[c] for c in cols.request_class], dtype=np.uint8)
    tokens = out_tokens.astype(float)
    ttft = t_first - arrival  # NaN without a first token
    completed = status == STATUSES.index(COMPLETED)
    with np.errstate(divide="ignore", invalid="ignore"):
        itl = np.where(completed & (tokens > 1) & ~np.isnan(t_first) & ~np.isnan(finish),
                       (finish - t_first) / (tokens - 1), np.where(completed, 0.0, np.nan))
    del tokens
    # each class's SLO, looked up per request by its code (a class no request has is never read)
    present = np.bincount(cls, minlength=len(REQUEST_CLASSES)) > 0
    ttft_slo = np.array([svc.slo[c].ttft_s if p else np.nan for c, p in zip(REQUEST_CLASSES, present, strict=False)])
    itl_slo = np.array([svc.slo[c].itl_s if p else np.nan for c, p in zip(REQUEST_CLASSES, present, strict=False)])
    with np.errstate(invalid="ignore"):
        ttft_ok = completed & (ttft <= ttft_slo[cls])
        itl_ok = completed & (itl <= itl_slo[cls])
    return {"status": status, "cls": cls, "priority": priority, "ttft": ttft, "itl": itl, "finish": finish,
            "ttft_ok": ttft_ok, "itl_ok": itl_ok, "ok": ttft_ok & itl_ok, "arrival": arrival, "task": task}


def request_outcomes(run: SimulationRun) -> dict[str, np.ndarray]:
    """Per-request arrays (each request's last attempt): ``status``, ``cls``, ``priority``, ``ttft`` and
    ``itl`` (s, NaN when undefined), ``ok``, ``finish`` (s, NaN while open), ``arrival`` (s) and ``task``
    (the request's workflow, or itself: ``autoscaler.workload.stream.Columns``): ``outcome_columns``
    with names for codes (object arrays), priorities as int64 and every task numbered."""
    o = outcome_columns(run)
    o["status"] = np.array(STATUSES, dtype=object)[o["status"]]
    o["cls"] = np.array(REQUEST_CLASSES, dtype=object)[o["cls"]]
    o["priority"] = o["priority"].astype(np.int64)
    if o["task"] is None:
        o["task"] = np.arange(len(o["ok"]), dtype=np.int64)
    return o


def goodput(ok: np.ndarray, finish: np.ndarray, start_s: float, end_s: float,
            window_s: float = GOODPUT_WINDOW_S) -> dict[str, float | None]:
    """Requests meeting their SLO per second between ``start_s`` and ``end_s``, by completion time:
    ``mean`` over the span and ``min_60s``, the lowest over its whole ``window_s`` windows (None when
    the span holds none)."""
    span = end_s - start_s
    if span <= 0:
        return {"mean": None, "min_60s": None}
    done = finish[ok]
    done = done[(done >= start_s) & (done < end_s)]
    n_windows = int(span // window_s)
    low = None
    if n_windows:
        counts = np.histogram(done, bins=n_windows, range=(start_s, start_s + n_windows * window_s))[0]
        low = float(counts.min()) / window_s
    return {"mean": len(done) / span, "min_60s": low}


def outcome(run: SimulationRun) -> Outcome:
    """A run's interactive SLO attainment (None without interactive requests) and total cost, $: what
    ``bound``'s search compares candidates by (``summarize``'s figures)."""
    res = summarize(run)
    return Outcome(res["slo_attainment"]["interactive"], float(res["cost_usd"]["total"]))


def summarize(run: SimulationRun) -> dict[str, Any]:
    """The ``results.json`` document of a run (see module docstring for definitions)."""
    sim = run.sim
    o = outcome_columns(run)
    status, cls = o["status"], o["cls"]
    accepted = status != STATUSES.index(REJECTED)
    slo: dict[str, Any] = {}
    detail: dict[str, Any] = {}
    for i, c in enumerate((*REQUEST_CLASSES, "all")):
        mask = accepted if c == "all" else accepted & (cls == i)
        n = int(mask.sum())
        def frac(m, n=n, mask=mask):
            return (float((m & mask).sum()) / n if n else None)
        slo[c] = frac(o["ok"])
        detail[c] = {"requests": n, "ttft": frac(o["ttft_ok"]), "itl": frac(o["itl_ok"]), "both": frac(o["ok"])}
    completed = status == STATUSES.index(COMPLETED)
    by_priority: dict[str, float | None] = {}
    for level, name in enumerate(PRIORITIES):
        mask = accepted & (o["priority"] == level)
        by_priority[name] = float((o["ok"] & mask).sum()) / int(mask.sum()) if mask.any() else None

    def key_of(service: str, variant: str) -> str:
        return variant if len(sim.services) == 1 else f"{service}/{variant}"

    # every variant is listed, 0.0 when it never ran a replica: absent would read as unknown
    gpu_hours = {key_of(s.cfg.name, v): 0.0 for s in sim.services.values() for v in s.all_variants}
    cost = dict(gpu_hours)
    for s in sim.services.values():
        for r in s.replicas:
            v = s.all_variants[r.variant]
            key = key_of(r.service, r.variant)
            secs = r.replica_seconds(run.end_s)
            gpu_hours[key] += secs * v.gpus_per_replica / 3600
            cost[key] += secs * r.price_per_hour / 3600
    gpu_hours["total"] = sum(gpu_hours.values())
    cost["total"] = sum(cost.values())

    ok = o["ok"]
    n_ok = int(ok.sum())
    task = o["task"]
    if task is None:  # every request its own task (a stream without workflows): no numbering needed
        n_tasks, n_tasks_ok = len(ok), n_ok
    else:
        n_tasks = int(task.max()) + 1 if task.size else 0
        failed_task = np.zeros(n_tasks, dtype=bool)
        failed_task[task[~ok]] = True  # a task succeeds when every one of its requests does
        n_tasks_ok = n_tasks - int(failed_task.sum())
    hits = sum(r.metrics.prefix_hits for s in sim.services.values() for r in s.replicas)
    queries = sum(r.metrics.prefix_queries for s in sim.services.values() for r in s.replicas)
    total = sim.request_count
    first_arrival_s = float(o["arrival"][0]) if total else 0.0
    flows = [s.flow for s in sim.services.values() if s.flow is not None]
    admission = {
        "policy": run.admission,
        "shed": sim.shed_final,
        "shed_attempts": sum(sum(f.shed) for f in flows),
        "deferred": sum(sum(f.deferred) for f in flows),
        "retries": sim.retries,
        "shed_mid_workflow": sim.shed_mid_workflow,
    }
    if sim.cfg.simulator.gateway.admitter != "none" and flows:  # absent otherwise: default results unchanged
        admission["admitter_rejected"] = sum(sum(f.admitter_rejected) for f in flows)
    extra: dict[str, Any] = {}
    solves = [st.decision.terms["solve_ms"] for t in run.ticks for st in t.services.values()
              if "solve_ms" in st.decision.terms]
    if solves:  # a planning controller (mpc): its solve time per tick, milliseconds
        extra["solve_ms"] = {"p50": float(np.percentile(solves, 50)), "p99": float(np.percentile(solves, 99)),
                             "max": float(max(solves))}
    return {
        "controller": run.controller,
        "workload": sim.workload.source,
        "service": sim.target,
        "requests": {
            "total": total,
            "completed": int(completed.sum()),
            "rejected": int((status == STATUSES.index(REJECTED)).sum()),
            "failed": int((status == STATUSES.index(FAILED)).sum()),
            "rejected_admission": int((status == STATUSES.index(SHED)).sum()),
        },
        "slo_attainment": slo,
        "slo_attainment_detail": detail,
        "slo_attainment_by_priority": by_priority,
        "goodput_rps": goodput(ok, o["finish"], first_arrival_s, sim.last_arrival_s),
        "admission": admission,
        "ttft_s": _quantiles(o["ttft"][completed]),
        "itl_s": _quantiles(o["itl"][completed]),
        "gpu_hours": gpu_hours,
        "cost_usd": cost,
        "cost_per_successful_request_usd": cost["total"] / n_ok if n_ok else None,
        "cost_per_successful_task_usd": cost["total"] / n_tasks_ok if n_tasks_ok else None,
        "tasks": {"total": n_tasks, "successful": n_tasks_ok},
        "prefix_cache_hit_rate": hits / queries if queries else None,
        "preemptions": int(sum(r.metrics.preemptions for s in sim.services.values() for r in s.replicas)),
        "scale_events": sim.scale_events,
        "crashes": sim.crash_outcomes(),
        "simulated_s": run.end_s,
        "wall_s": run.wall_s,
        "simulated_requests_per_s": total / run.wall_s if run.wall_s > 0 else None,
        **extra,
    }


def timeline_rows(run: SimulationRun) -> list[dict[str, Any]]:
    """One row per (tick, service): arrivals, signals, replicas per variant, controller terms, reason.

    ``arrival_rate_rps`` is the workload's own arrivals over the tick, not the loop's arrival signal
    (the gateway counter's rate over the controller's window): the requests arriving in
    (previous tick, this tick] (the first tick: [0, tick]), each once (retries are not counted), over
    that interval in seconds (after a skipped quiet stretch, the whole stretch), in req/s; 0.0 for a
    service the workload does not target.
    """
    arrivals = arrival_times(run.sim.workload)
    # Arrivals up to and including each tick: tick i counts (t_{i-1}, t_i], the first one [0, t_0].
    arrived = np.searchsorted(arrivals, [rec.time_s for rec in run.ticks], side="right")
    rows = []
    prev, before = 0.0, 0
    for rec, upto in zip(run.ticks, arrived, strict=True):
        demand = (int(upto) - before) / max(rec.time_s - prev, 1e-9)
        prev, before = rec.time_s, int(upto)
        for name, st in rec.services.items():
            rows.append(tick_row(rec.time_s, name, st, demand if name == run.sim.target else 0.0))
    return rows


OUTPUTS = ("results.json", "timeline.csv", "timeline.png")


def write_outputs(run: SimulationRun, out: Path, plot: bool = False) -> dict[str, Any]:
    """Write ``results.json`` and ``timeline.csv`` (and ``timeline.png`` with ``plot``) under ``out``,
    each atomically (``autoscaler.files``)."""
    out.mkdir(parents=True, exist_ok=True)
    results = summarize(run)
    rows = timeline_rows(run)
    write_timeline_csv(rows, out / "timeline.csv")
    if plot:
        from autoscaler.plot import plot_timeline

        plot_timeline(run.sim.cfg, run.sim.target, f"{run.controller}: {run.sim.target} on {run.sim.workload.source}",
                      rows, out / "timeline.png", results, run.sim.last_arrival_s)
    write_text(out / "results.json", json.dumps(results, indent=2) + "\n")  # last: the run's results are whole
    return results
