"""Benchmark: simulated requests per wall-second of the fleet simulator under PID control.

Runs the whole Azure LLM inference 2023 conv trace (19,366 requests) through ``autoscaler simulate``'s
code path (PID controller, example fleet) ``--repeat`` times at each ``--rate-scale`` and prints the
median and spread. Goal (issue 2): >= 20,000 simulated requests per wall-second on a 2-core machine.

    python benchmarks/sim_throughput.py [--data ../shared/data] [--repeat 5] [--rate-scale 1 20]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from autoscaler.config.loading import load_config
from autoscaler.simulate import run_simulation
from autoscaler.workload.build import build_workload

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
    args = ap.parse_args()
    print(f"{Path(__file__).name}: {stamp()}", file=sys.stderr if args.json else sys.stdout, flush=True)
    trace = args.data / "azure-llm-2023" / "AzureLLMInferenceTrace_conv.csv"
    cfg = load_config(ROOT / "examples" / "fleet.yaml")
    for scale in args.rate_scale:
        wl = build_workload(trace, None, scale, 1.0, 0, 0.2)
        rates, walls = [], []
        for k in range(args.repeat):
            t = time.perf_counter()
            run_simulation(cfg, wl, "pid")
            wall = time.perf_counter() - t
            print(f"x{scale:g}: run {k + 1}/{args.repeat} {wall:.2f} s", file=sys.stderr, flush=True)
            walls.append(wall)
            rates.append(len(wl.requests) / wall)
        row = {
            "trace": trace.name,
            "rate_scale": scale,
            "requests": len(wl.requests),
            "repeat": args.repeat,
            "median_wall_s": statistics.median(walls),
            "median_simulated_requests_per_s": statistics.median(rates),
            "min_simulated_requests_per_s": min(rates),
            "max_simulated_requests_per_s": max(rates),
        }
        if args.json:
            print(json.dumps(row))
        else:
            print(f"{trace.name} x{scale:g}: {row['requests']} requests, median {row['median_wall_s']:.2f} s wall, "
                  f"median {row['median_simulated_requests_per_s']:,.0f} simulated req/s "
                  f"(min {row['min_simulated_requests_per_s']:,.0f}, max {row['max_simulated_requests_per_s']:,.0f}, "
                  f"n={args.repeat})")


if __name__ == "__main__":
    main()
