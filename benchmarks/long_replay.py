"""Benchmark: a long replay of a scenario's trace under the PID, measured (issue 33: a 14-day ServeGen replay).

Builds the scenario's workload (``benchmarks/scenarios/NAME.yaml``, default ``servegen-day``: Alibaba
ServeGen language/m-large at its ``rate_scale``, lengths from the Mooncake conversation trace) over
``--hours`` hours from its span's start (ServeGen's time axis runs on through the days after: hour 24
of ``servegen-day`` is the start of ServeGen day 2), runs it once on the scenario's fleet under the PID
as ``autoscaler simulate`` does (``run_simulation(keep_requests=False)``), and prints: requests, the
run's CPU seconds (``time.process_time``; the workload's building apart) and wall seconds, requests
per CPU-second, and the process's peak resident memory (``ru_maxrss``) before the workload is built,
after it is built, and after the run, with the growth per request of each step, and the run's
interactive SLO attainment and cost (``report.outcome``). Then what ``--days`` days at the same
speed and memory per request would take: a straight-line extrapolation from this run, whose rate is
the scenario's over those hours (a day's rate swings: ServeGen m-large's 5.5x), so the longer the run
the better the figure.

By default a ServeGen trace is streamed (``autoscaler.workload.build.build_stream``): its requests are
kept as columns and made a chunk at a time as the run reaches them; ``--whole`` builds every request
up front (``build_workload``), as before, for comparison: both runs are the same run. Hours past the
end of the trace's windows hold no request (ServeGen m-large's release covers days 0-13): a span
reaching past it is refused.

    python benchmarks/long_replay.py [--data ../shared/data] [--scenario servegen-day] [--hours 3] [--days 14]
                                     [--start S] [--whole]
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

import yaml

from autoscaler.config.loading import parse_config
from autoscaler.report import outcome
from autoscaler.simulate import run_simulation
from autoscaler.workload.build import build_stream
from autoscaler.workload.servegen import WINDOW_S, is_servegen_dir
from autoscaler.workload.stream import AnyWorkload, count

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the benchmarks' own modules
from compare import SCENARIOS, scenario_fleet, scenario_workload
from provenance import stamp

ROOT = Path(__file__).resolve().parents[1]


def _maxrss_bytes() -> int:
    """Peak resident memory of this process so far, bytes (Linux reports ``ru_maxrss`` in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def trace_end_s(folder: Path) -> float:
    """The end of the last window of a ServeGen folder's client files, seconds (its time axis)."""
    end = 0.0
    for f in folder.glob("chunk-*-trace.csv"):
        lines = f.read_text().split()
        if lines:
            end = max(end, float(lines[-1].split(",")[0]) + WINDOW_S)
    return end


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data", help="folder of the traces")
    ap.add_argument("--scenario", default="servegen-day", help="a scenario in benchmarks/scenarios with a trace")
    ap.add_argument("--hours", type=float, default=3.0, help="hours of the trace from its span's start (> 0)")
    ap.add_argument("--start", type=float, default=None,
                    help="seconds on the trace's time axis to start from (default: the scenario's span start)")
    ap.add_argument("--days", type=float, default=14.0, help="days to extrapolate to")
    ap.add_argument("--whole", action="store_true",
                    help="build every request up front (the old path) instead of streaming a ServeGen trace")
    args = ap.parse_args()
    if not args.hours > 0:
        ap.error(f"--hours must be > 0, got {args.hours}")
    print(f"{Path(__file__).name}: {stamp()}", flush=True)
    sc = yaml.safe_load((SCENARIOS / f"{args.scenario}.yaml").read_text())
    if "trace" not in sc:
        ap.error(f"scenario {args.scenario} has no trace")
    start = args.start if args.start is not None else float(sc["span"][0]) if "span" in sc else 0.0
    sc["span"] = [start, start + args.hours * 3600]
    trace = args.data / sc["trace"]
    servegen = is_servegen_dir(trace)
    if servegen and sc["span"][1] > (end := trace_end_s(trace)):
        ap.error(f"--hours {args.hours:g} from {start:g} s reaches {sc['span'][1]:g} s, past the end of {trace}'s "
                 f"windows ({end:g} s): at most {(end - start) / 3600:g} hours")
    stream = servegen and not args.whole
    cfg = parse_config(scenario_fleet(sc), f"{args.scenario} fleet")
    rss0 = _maxrss_bytes()
    c = time.process_time()
    wl: AnyWorkload
    if stream:
        wl = build_stream(trace, float(sc.get("rate_scale", 1.0)), int(sc["seed"]), 0.2,
                          (float(sc["span"][0]), float(sc["span"][1])),
                          args.data / sc["lengths_from"] if "lengths_from" in sc else None)
    else:
        wl = scenario_workload(sc, args.data)
    build_cpu = time.process_time() - c
    rss1 = _maxrss_bytes()
    n = count(wl)
    t, c = time.perf_counter(), time.process_time()
    run = run_simulation(cfg, wl, "pid", keep_requests=False)
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    result = outcome(run)
    rss2 = _maxrss_bytes()
    row = {"scenario": args.scenario, "span_s": sc["span"], "workload": "stream" if stream else "whole",
           "requests": n, "build_cpu_s": build_cpu, "cpu_s": cpu, "wall_s": wall, "requests_per_cpu_s": n / cpu,
           "maxrss_before_workload_bytes": rss0, "maxrss_after_workload_bytes": rss1,
           "maxrss_after_run_bytes": rss2, "workload_bytes_per_request": (rss1 - rss0) / n,
           "run_bytes_per_request": (rss2 - rss1) / n,
           "interactive_attainment": result.attainment, "cost_usd": result.cost_usd}
    print(json.dumps(row))
    scale = args.days * 24 / args.hours
    print(f"{args.scenario}, {args.hours:g} h from {start:g} s, {row['workload']}: {n:,} requests, {cpu:.1f} s CPU "
          f"({n / cpu:,.0f} req/CPU-s), {wall:.1f} s wall; peak RSS {rss0 / 2**20:.0f} -> {rss1 / 2**20:.0f} MiB "
          f"with the workload ({(rss1 - rss0) / n:,.0f} B/request) -> {rss2 / 2**20:.0f} MiB after the run "
          f"({(rss2 - rss1) / n:,.0f} B/request; {(rss2 - rss0) / n:,.0f} B/request in all); building the "
          f"workload took {build_cpu:.1f} s CPU; interactive SLO attainment {result.attainment}, cost "
          f"${result.cost_usd:,.2f}")
    print(f"extrapolated to {args.days:g} days at this run's rate, speed and memory per request: "
          f"{n * scale:,.0f} requests, ~{cpu * scale / 60:.0f} CPU-min, "
          f"~{(rss1 - rss0 + rss2 - rss1) * scale / 2**30:.1f} GiB over the {rss0 / 2**20:.0f} MiB before the workload")


if __name__ == "__main__":
    main()
