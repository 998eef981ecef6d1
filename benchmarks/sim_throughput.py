"""Benchmark: simulated requests per wall-second of the fleet simulator under PID control.

Runs the whole Azure LLM inference 2023 conv trace (19,366 requests) through ``autoscaler simulate``'s
code path (PID controller, example fleet) ``--repeat`` times at each ``--rate-scale`` and prints the
median and spread, in one process (one core): wall seconds, and the process's CPU seconds
(``time.process_time``), the fairer figure on a machine shared with other work (``"compiled": true``: the
simulator's core was a build of ``benchmarks/compiled_core.py``). Goal (issue 33):
>= 100,000 simulated requests per wall-second at 1x, no more than 20 % slower at 100x.

With ``--memory`` it runs each scale once more under ``tracemalloc`` and prints the peak Python heap
of the run per request (the workload's own requests excluded: they are built before tracing starts),
bytes; tracemalloc slows the run, so that run is not timed. With ``--days D`` it prints what a D-day
replay of the median rate of the highest scale would take: ``D x 86400 x`` that scale's arrival rate
requests at its median simulated req/s (an estimate, not a run). ``--span START:END`` simulates only
the trace's arrivals in that span (seconds after its first), e.g. ``--rate-scale 100 --span 0:720``:
12 minutes at 100x, about as many requests as the whole trace at 20x.

Runs keep no per-request objects (``run_simulation(keep_requests=False)``), as ``autoscaler simulate``.

    python benchmarks/sim_throughput.py [--data ../shared/data] [--repeat 5] [--rate-scale 1 20]
                                        [--span START:END] [--memory] [--days 14]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

from autoscaler.config.loading import load_config
from autoscaler.simulate import run_simulation
from autoscaler.simulator import engine
from autoscaler.workload.build import build_workload, parse_span

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the benchmarks' own modules
from provenance import stamp

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data",
                    help="folder holding azure-llm-2023/AzureLLMInferenceTrace_conv.csv")
    ap.add_argument("--repeat", type=int, default=5, help="runs per rate scale (the median is reported)")
    ap.add_argument("--rate-scale", type=float, nargs="+", default=[1.0, 20.0],
                    help="rate scales of the trace to simulate")
    ap.add_argument("--json", action="store_true", help="print one JSON object per rate scale")
    ap.add_argument("--memory", action="store_true",
                    help="one more run per scale under tracemalloc: peak heap per request, bytes")
    ap.add_argument("--span", default=None, metavar="START:END",
                    help="only the trace's arrivals in this span, seconds (a shorter run at a high scale)")
    ap.add_argument("--days", type=float, default=None,
                    help="estimate a replay of this many days at the highest scale's rate and speed")
    args = ap.parse_args()
    print(f"{Path(__file__).name}: {stamp()}", file=sys.stderr if args.json else sys.stdout, flush=True)
    trace = args.data / "azure-llm-2023" / "AzureLLMInferenceTrace_conv.csv"
    cfg = load_config(ROOT / "examples" / "fleet.yaml")
    try:
        span = None if args.span is None else parse_span(args.span)
    except ValueError as exc:
        ap.error(str(exc))
    # the engine imported from a C extension: a build of benchmarks/compiled_core.py, not the sources
    compiled = not str(engine.__file__).endswith(".py")
    rows: list[dict[str, float | int | str | bool]] = []
    for scale in args.rate_scale:
        wl = build_workload(trace, None, scale, 1.0, 0, 0.2, span=span)
        rates, walls, cpus = [], [], []
        for k in range(args.repeat):
            t, c = time.perf_counter(), time.process_time()
            run_simulation(cfg, wl, "pid", keep_requests=False)
            wall, cpu = time.perf_counter() - t, time.process_time() - c
            print(f"x{scale:g}: run {k + 1}/{args.repeat} {wall:.2f} s wall, {cpu:.2f} s CPU", file=sys.stderr,
                  flush=True)
            walls.append(wall)
            cpus.append(cpu)
            rates.append(len(wl.requests) / wall)
        row = {
            "trace": trace.name + ("" if args.span is None else f" {args.span}"),
            "rate_scale": scale,
            "requests": len(wl.requests),
            "repeat": args.repeat,
            "median_wall_s": statistics.median(walls),
            "median_simulated_requests_per_s": statistics.median(rates),
            "min_simulated_requests_per_s": min(rates),
            "max_simulated_requests_per_s": max(rates),
            "median_cpu_s": statistics.median(cpus),
            "median_simulated_requests_per_cpu_s": len(wl.requests) / statistics.median(cpus),
            "arrival_rate_rps": len(wl.requests) / max(wl.duration_s, 1e-9),
            "compiled": compiled,
        }
        if args.memory:
            tracemalloc.start()
            run_simulation(cfg, wl, "pid", keep_requests=False)
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            row["peak_heap_bytes_per_request"] = peak / len(wl.requests)
        rows.append(row)
        if args.json:
            print(json.dumps(row))
        else:
            print(f"{trace.name} x{scale:g}: {row['requests']} requests, median {row['median_wall_s']:.2f} s wall, "
                  f"median {row['median_simulated_requests_per_s']:,.0f} simulated req/s "
                  f"(min {row['min_simulated_requests_per_s']:,.0f}, max {row['max_simulated_requests_per_s']:,.0f}, "
                  f"n={args.repeat}); median {row['median_cpu_s']:.2f} s CPU, "
                  f"{row['median_simulated_requests_per_cpu_s']:,.0f} req/CPU-s"
                  + (f", peak heap {row['peak_heap_bytes_per_request']:,.0f} B/request" if args.memory else "")
                  + (" (compiled core)" if compiled else ""))
    if args.days is not None and rows:
        top = rows[-1]
        n = args.days * 86400 * float(top["arrival_rate_rps"])
        wall = n / float(top["median_simulated_requests_per_s"])
        est = {"days": args.days, "rate_scale": top["rate_scale"], "requests": n, "estimated_wall_s": wall}
        if "peak_heap_bytes_per_request" in top:
            est["estimated_peak_heap_bytes"] = n * float(top["peak_heap_bytes_per_request"])
        if args.json:
            print(json.dumps(est))
        else:
            heap = f", ~{est['estimated_peak_heap_bytes'] / 2**30:.1f} GiB heap" if "estimated_peak_heap_bytes" in est \
                else ""
            print(f"estimate: {args.days:g} days at x{top['rate_scale']:g}'s rate "
                  f"({float(top['arrival_rate_rps']):.1f} req/s): {n:,.0f} requests, ~{wall / 60:.1f} min wall{heap}")


if __name__ == "__main__":
    main()
