"""Benchmark helper: sha256 digests of one simulation's outputs, to check two builds give the same bits.

Runs ``sim_throughput.py``'s case (the Azure LLM inference 2023 conv trace under the PID on
``examples/fleet.yaml``, ``run_simulation(keep_requests=False)``) once and prints one JSON object: the
sha256 of each request's outcome (``FleetSimulator.outcome_codes``: status code, first- and last-token
times as float64 bytes), of every replica's metrics (gauges, counters, successes, histogram counts,
sums and counts) for the replicas still in each service's list at the end, of each tick's record
(time, decision, applied counts, reason, limits; their ``repr``: floats printed exactly), of the
run's end time, and of the four together (``all``), beside the run's ``requests`` and ``tick_count``;
with ``"compiled"``: whether the simulator's engine was imported from a C extension (a build of
``benchmarks/compiled_core.py``). Two builds agree on every output this covers when their ``all``
digests are equal; ``compiled_core.py --check`` runs this script in the checkout and in its build
and compares.

    python benchmarks/sim_digest.py [--data ../shared/data] [--rate-scale 1] [--span START:END]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

from autoscaler.config.loading import load_config
from autoscaler.simulate import SimulationRun, run_simulation
from autoscaler.simulator import engine
from autoscaler.workload.build import build_workload, parse_span

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the benchmarks' own modules
from provenance import stamp

ROOT = Path(__file__).resolve().parents[1]


def digests(run: SimulationRun) -> dict[str, str]:
    """sha256 hex digests of ``run``'s outputs by part (``outcomes``, ``metrics``, ``ticks``, ``end``) and
    of the parts' bytes in that order (``all``)."""
    status, t_first, t_finish = run.sim.outcome_codes()
    rows = []
    for name, svc in run.sim.services.items():
        for r in svc.replicas:
            m = r.metrics
            hists = (m.ttft, m.itl, m.tpot, m.e2e, m.iteration_tokens, m.request_prompt_tokens,
                     m.request_generation_tokens)
            rows.append(repr((name, r.name, r.state, m.running, m.waiting, m.kv_usage, m.prompt_tokens,
                              m.generation_tokens, m.prefix_queries, m.prefix_hits, m.preemptions,
                              sorted(m.success.items()), [(h.counts, h.total, h.count) for h in hists])))
    ticks = [repr((rec.time_s, s, tick.decision, tick.applied, tick.reason, tick.limits))
             for rec in run.ticks for s, tick in rec.services.items()]
    parts = {
        "outcomes": status.tobytes() + t_first.tobytes() + t_finish.tobytes(),
        "metrics": "\n".join(rows).encode(),
        "ticks": "\n".join(ticks).encode(),
        "end": repr(run.end_s).encode(),
    }
    out = {k: hashlib.sha256(v).hexdigest() for k, v in parts.items()}
    out["all"] = hashlib.sha256(b"".join(parts.values())).hexdigest()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data",
                    help="folder holding azure-llm-2023/AzureLLMInferenceTrace_conv.csv")
    ap.add_argument("--rate-scale", type=float, default=1.0, help="rate scale of the trace to simulate")
    ap.add_argument("--span", default=None, metavar="START:END",
                    help="only the trace's arrivals in this span, seconds")
    args = ap.parse_args()
    trace = args.data / "azure-llm-2023" / "AzureLLMInferenceTrace_conv.csv"
    try:
        span = None if args.span is None else parse_span(args.span)
    except ValueError as exc:
        ap.error(str(exc))
    if not trace.is_file():
        ap.error(f"{trace}: no such file (give --data)")
    wl = build_workload(trace, None, args.rate_scale, 1.0, 0, 0.2, span=span)
    run = run_simulation(load_config(ROOT / "examples" / "fleet.yaml"), wl, "pid", keep_requests=False)
    print(f"{Path(__file__).name}: {stamp()}", file=sys.stderr, flush=True)  # stdout keeps the JSON alone
    print(json.dumps({"rate_scale": args.rate_scale, "span": args.span, "requests": len(wl.requests),
                      "tick_count": len(run.ticks), "compiled": not str(engine.__file__).endswith(".py"),
                      **digests(run)}))


if __name__ == "__main__":
    main()
