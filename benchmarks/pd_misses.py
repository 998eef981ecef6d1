"""Where a mixed (aggregated + prefill/decode) fleet's SLO misses are: each request of one simulated run
split by where it ran, and the remotely prefilled ones' TTFT split into its parts (issue 34: why the
pools' plan serves less than planned).

A request's place is its last attempt's replica: an aggregated variant, or a decode replica that took
it prefilled remotely (``remote``) or prefilled it itself (``local``). An aggregated one is further
split by the prefill pool's state when it was routed: no prefill replica ready, the pool ready and not
saturated, or every routable prefill replica saturated (``FleetSimulator._saturated``), the case in
which ``simulator.pd_saturation_filter`` spills a fresh arrival to the aggregated replicas
(``FleetSimulator._spill``). A remote request's TTFT is split into the prefill (its queue and compute
on the prefill replica, routed to prefilled), the decode replica's admission (prefilled to the start
of its KV read), the read, and the last prompt token (the read's end to the first token); the metrics
are ``autoscaler.report``'s (``outcome_columns``: TTFT from the first attempt's arrival, mean ITL
``(finish - first token) / (output tokens - 1)``).

    PYTHONPATH=$PWD python benchmarks/pd_misses.py --controller oracle:roles=1 \\
        --trace ../shared/data/azure-llm-2023/AzureLLMInferenceTrace_code.csv --rate-scale 20 \\
        [--config examples/fleet-mixed-pd.yaml] [--span 0:1800] [--seed 0]

It also prints the run's GPU-hours per variant (``summarize``'s ``gpu_hours``). Under
``simulator.prefill_priority`` the pool's state at routing is judged as ``_spill`` judges it then
(``FleetSimulator.prefill_saturated``, called here): a prefill replica saturated for that arrival by the
requests it would wait behind (``PrefillReplica.ahead``).

It observes the run by wrapping three ``FleetSimulator`` methods (``_route_pd``, ``on_prefilled``,
``push_transfer``) for this process only; the run itself is ``run_simulation``'s, so its
attainment and cost are those ``autoscaler simulate`` prints for the same arguments.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from autoscaler.config.loading import load_config
from autoscaler.errors import AutoscalerError
from autoscaler.loop.runner import TickError
from autoscaler.report import outcome, outcome_columns, summarize
from autoscaler.simulate import run_simulation
from autoscaler.simulator.disagg import DECODE
from autoscaler.simulator.fleet import FleetSimulator
from autoscaler.workload.build import build_workload, parse_span
from controllers.registry import parse_spec

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the benchmarks' own modules
from provenance import stamp

BATCH_FRACTION = 0.2  # autoscaler.cli.options.DEFAULT_BATCH_FRACTION, what ``simulate`` uses by default


@contextmanager
def observed(rec: dict[int, dict[str, Any]]) -> Iterator[None]:
    """Record per request id, while the block runs: when it was routed, whether remotely, the prefill
    pool's state then, when it was prefilled, and its KV read's start and end (seconds)."""
    route, prefilled, transfer = FleetSimulator._route_pd, FleetSimulator.on_prefilled, FleetSimulator.push_transfer

    def _route_pd(self: FleetSimulator, svc: Any, sr: Any, held: bool = False) -> bool:
        pool = [r for r in svc.prefill_ready if not r.cordoned] or svc.prefill_ready
        full = bool(pool) and all(self.prefill_saturated(r, sr.req.priority) for r in pool)
        sent = route(self, svc, sr, held)
        if sent:
            rec[sr.req.rid] = {"routed": self.now, "remote": sr in self._handoffs, "pool": len(pool), "full": full}
        return sent

    def on_prefilled(self: FleetSimulator, sr: Any, replica: Any, now: float) -> None:
        rec.setdefault(sr.req.rid, {})["prefilled"] = now
        prefilled(self, sr, replica, now)

    def push_transfer(self: FleetSimulator, t: float, sr: Any) -> None:
        r = rec.setdefault(sr.req.rid, {})
        r["read_start"], r["read_end"] = self.now if sr.replica is None else sr.replica._now, t
        transfer(self, t, sr)

    FleetSimulator._route_pd = _route_pd  # type: ignore[method-assign]
    FleetSimulator.on_prefilled = on_prefilled  # type: ignore[method-assign]
    FleetSimulator.push_transfer = push_transfer  # type: ignore[method-assign]
    try:
        yield
    finally:
        FleetSimulator._route_pd = route  # type: ignore[method-assign]
        FleetSimulator.on_prefilled = prefilled  # type: ignore[method-assign]
        FleetSimulator.push_transfer = transfer  # type: ignore[method-assign]


def place(sr: Any, r: dict[str, Any]) -> str:
    """Where a request's last attempt ran (module docstring)."""
    rep = sr.replica
    if rep is None:
        return "none"
    if rep.role == DECODE:
        return "decode, " + ("remote" if r.get("remote") else "local")
    if not r.get("pool"):
        return f"{rep.variant}, no prefill ready"
    return f"{rep.variant}, " + ("pool saturated (spill)" if r.get("full") else "pool not saturated")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--controller", required=True, help="controller spec, as simulate's")
    ap.add_argument("--trace", required=True, help="trace file, as simulate's")
    ap.add_argument("--config", default="examples/fleet-mixed-pd.yaml", help="fleet file")
    ap.add_argument("--rate-scale", type=float, default=1.0, help="the trace's arrival rate times this")
    ap.add_argument("--span", default="0:1800", help="START:END seconds of the trace")
    ap.add_argument("--seed", type=int, default=0, help="seed of the workload and the simulation")
    args = ap.parse_args(argv)
    try:  # bad input: one line naming the option, exit 2 (argparse's), as simulate's
        parse_spec(args.controller)
        cfg = load_config(args.config)
        wl = build_workload(Path(args.trace), None, args.rate_scale, 1.0, args.seed, BATCH_FRACTION,
                            parse_span(args.span), None)
    except (AutoscalerError, ValueError, OSError) as exc:
        ap.error(str(exc))
    print(f"{Path(__file__).name}: {stamp()}", flush=True)
    rec: dict[int, dict[str, Any]] = {}
    try:
        with observed(rec):
            run = run_simulation(cfg, wl, args.controller, measure=outcome)
    except TickError as exc:  # a decision raised mid-run: the run not done (exit 1, as simulate's)
        print(f"{ap.prog}: controller {args.controller}: {exc}", file=sys.stderr)
        return 1
    except (AutoscalerError, ValueError) as exc:  # refused when built (dynamo-pd on a fleet without pools)
        ap.error(f"--controller {args.controller}: {exc}")
    res = summarize(run)
    o = outcome_columns(run)
    final = run.sim.final
    where = np.array([place(sr, rec.get(sr.req.rid, {})) for sr in final])
    att = res["slo_attainment"]
    print(f"{args.controller} on {args.config}, seed {args.seed}: attainment all {att['all'] * 100:.2f} %, "
          f"interactive {att['interactive'] * 100:.2f} %, cost ${res['cost_usd']['total']:.2f}")
    hours = res["gpu_hours"]
    print("GPU-hours: " + ", ".join(f"{k} {v:.2f}" for k, v in hours.items() if v > 0 or k == "total"))
    for i, cls in enumerate(("interactive", "batch")):
        m = o["cls"] == i
        if not m.any():
            continue
        print(f"\n{cls}: {int(m.sum())} requests, {int((m & ~o['ok']).sum())} missed")
        print("| ran on | requests | share | TTFT met | ITL met | both met | misses | median ITL (s) |")
        print("|---|---|---|---|---|---|---|---|")
        for w in sorted(set(where[m])):
            k = m & (where == w)
            itl = o["itl"][k]
            med = float(np.nanmedian(itl)) if np.isfinite(itl).any() else float("nan")
            print(f"| {w} | {int(k.sum())} | {k.sum() / m.sum():.3f} | {o['ttft_ok'][k].mean() * 100:.2f} % | "
                  f"{o['itl_ok'][k].mean() * 100:.2f} % | {o['ok'][k].mean() * 100:.2f} % | "
                  f"{int((k & ~o['ok']).sum())} | {med:.4f} |")

    def col(key: str) -> np.ndarray:
        return np.array([rec.get(sr.req.rid, {}).get(key, np.nan) for sr in final], dtype=float)

    routed, pre, rs, re_ = col("routed"), col("prefilled"), col("read_start"), col("read_end")
    first = o["arrival"] + o["ttft"]
    remote = (o["cls"] == 0) & (where == "decode, remote")
    print("\nremote interactive requests, mean seconds: | TTFT | requests | prefill | decode admission | read | "
          "last token | TTFT |")
    print("|---|---|---|---|---|---|---|")
    for label, k in (("met", remote & o["ttft_ok"]), ("missed", remote & ~o["ttft_ok"])):
        if k.any():
            print(f"| {label} | {int(k.sum())} | {np.nanmean(pre[k] - routed[k]):.3f} | "
                  f"{np.nanmean(rs[k] - pre[k]):.3f} | {np.nanmean(re_[k] - rs[k]):.4f} | "
                  f"{np.nanmean(first[k] - re_[k]):.3f} | {np.nanmean(o['ttft'][k]):.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
