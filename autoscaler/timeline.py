"""The per-tick timeline of a run (``timeline.csv``): one row per tick and service, for simulations and backtests."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from autoscaler.files import atomic
from autoscaler.loop.export import PLAN_STEPS, decision_kind
from autoscaler.loop.forecast import FORECAST_SIGNALS
from autoscaler.loop.runner import ServiceTick
from autoscaler.loop.warmth import WARMTH_SIGNALS

TIMELINE_SIGNALS = ("request_rate_rps", "ttft_p95_s", "itl_p95_s", "tpot_p95_s", "ttft_mean_s", "tpot_mean_s",
                    "kv_usage", "queue_length", "prefix_hit_rate", "slo_p95_ratio", "slo_mean_ratio",
                    *FORECAST_SIGNALS, *WARMTH_SIGNALS)


def tick_row(time_s: float, service: str, st: ServiceTick, arrival_rate_rps: float | None) -> dict[str, Any]:
    """One timeline row: time, service, arrival rate, signals, replicas per variant (and per pool variant
    where the estimate carries the pools: a controller that scales them), controller terms, the
    decision's kind (``loop.export.decision_kind``: the ``reason`` label of ``autoscaler_decisions_total``)
    and the reason. ``arrival_rate_rps`` (req/s) is written as given, not read from the estimate: a
    simulation passes the workload's arrivals over the tick (``autoscaler.report.timeline_rows``), a
    backtest the observed ``request_rate_rps``; neither is the loop's ``Signals.arrival_rate_rps``."""
    row: dict[str, Any] = {"time_s": time_s, "service": service, "arrival_rate_rps": arrival_rate_rps}
    for s in TIMELINE_SIGNALS:
        row[s] = st.estimate.signals.value(s)
    for v, obs in st.estimate.variants.items():
        row[f"ready_{v}"] = obs.ready
        row[f"starting_{v}"] = obs.starting
        row[f"desired_{v}"] = st.applied[v]
    for pool in st.estimate.pools.values():  # prefill/decode pool variants, for a controller that scales them
        for v, obs in pool.variants.items():
            row[f"ready_{v}"] = obs.ready
            row[f"starting_{v}"] = obs.starting
            row[f"desired_{v}"] = st.pool_applied.get(v, obs.current)
    for k in ("setpoint", "measurement", "p", "i", "d", "target_capacity_rps"):
        row[f"ctl_{k}"] = st.decision.terms.get(k)
    if st.decision.plan:  # a planning controller: its demand, solve time and first three planned steps
        for k in ("demand_rps", "solve_ms"):
            row[f"ctl_{k}"] = st.decision.terms.get(k)
        for v, steps in st.decision.plan.items():
            row[f"plan_{v}"] = "/".join(str(n) for n in steps[:PLAN_STEPS])
    for p, x in st.decision.admission.items():  # thresholds, seconds of estimated wait ("" = no limit)
        row[f"admission_{p}"] = "" if x is None else x
    row["decision"] = decision_kind(st)
    row["reason"] = st.reason
    return row


def write_timeline_csv(rows: list[dict[str, Any]], path: Path) -> None:
    """Write timeline rows as CSV (columns in first-seen order), atomically; nothing when there are no rows."""
    if not rows:
        return
    fields = list(dict.fromkeys(k for row in rows for k in row))
    with atomic(path) as tmp, tmp.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)
