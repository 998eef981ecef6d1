"""Benchmark: Prometheus queries per tick and a tick's wall time, batched and per service (issue 35).

Starts Debian's ``prometheus`` on 127.0.0.1 scraping a generated exposition: N services x 3 variants
x ``--pods`` vLLM 0.11 pods each (the gauges, counters and histograms the vllm-0.11 query set reads,
counters growing with wall time), one kube-state-metrics Deployment per variant and one gateway
counter per service. Then, for each N of ``--services``, ``PrometheusSource.observe`` runs
``--ticks`` times with ``prometheus.batch`` on and off (query set ``auto``; the first tick, which
detects each service's set, is not counted): the queries each tick sent (a counting ``QueryRunner``)
and its wall time (median, min-max). Goal (issue 35): queries per tick O(signals), not O(services x
signals). Nothing here is a test; the figures depend on the machine (docs/benchmarks.md).

    python benchmarks/tick_queries.py [--services 1 10 100] [--pods 1] [--ticks 3] [--max-concurrency 8]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from autoscaler.adapters.prometheus import LiveRunner, PrometheusSource, connect
from autoscaler.config.loading import parse_config
from autoscaler.faults.promserver import PromServer, Target

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the benchmarks' own modules
from fleet_exposition import VARIANTS, WINDOW_S, Counting, fleet_services, serve
from provenance import stamp


def tick_figures(url: str, services: int, batch: bool, ticks: int, concurrency: int
                 ) -> tuple[int, list[float], int]:
    """(queries per tick, wall seconds of each counted tick, errors in the last) for ``services``."""
    cfg = parse_config({
        "services": fleet_services(services),
        "controller": {"tick_s": WINDOW_S, "window_s": WINDOW_S},
        "prometheus": {"batch": batch, "max_concurrency": concurrency, "timeout_s": 60},
    }, "<tick_queries>")
    runner = Counting(LiveRunner(connect(cfg.prometheus, url)))
    src = PrometheusSource(cfg.prometheus, cfg.services, runner, window_s=WINDOW_S)
    src.observe(0.0)  # detects each service's query set
    walls, counts, errors = [], set(), 0
    for k in range(ticks):
        runner.sent = 0
        t = time.perf_counter()
        obs = src.observe(float(k + 1))
        walls.append(time.perf_counter() - t)
        counts.add(runner.sent)
        errors = sum(len(o.errors) for o in obs.values())
    if len(counts) != 1:
        raise RuntimeError(f"queries per tick varied across ticks: {sorted(counts)}")
    return counts.pop(), walls, errors


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    ap.add_argument("--services", type=int, nargs="+", default=[1, 10, 100],
                    help="fleet sizes to measure, services of 3 variants each")
    ap.add_argument("--pods", type=int, default=1, help="pods per variant")
    ap.add_argument("--ticks", type=int, default=3, help="ticks counted per size and path (after the first)")
    ap.add_argument("--max-concurrency", type=int, default=8, help="prometheus.max_concurrency")
    args = ap.parse_args()
    print(f"{Path(__file__).name}: {stamp()}", flush=True)
    largest = max(args.services)
    exporter = serve(largest, args.pods)
    with tempfile.TemporaryDirectory(prefix="tick-queries-") as work:
        prom = PromServer(Path(work), [Target(f"127.0.0.1:{exporter.server_address[1]}")], scrape_interval="2s")
        try:
            prom.start()
            prom.wait_for("count(up == 1)", lambda r: bool(r) and r[0]["value"][1] == "1")
            time.sleep(WINDOW_S + 4)  # a whole window of scrapes
            series = prom.query("count({__name__=~\".+\"})")[0]["value"][1]
            print(f"{largest} services x {len(VARIANTS)} variants x {args.pods} pod(s) exported, "
                  f"{series} series; window {WINDOW_S:g} s, max_concurrency {args.max_concurrency}, "
                  f"{args.ticks} ticks each after the first\n")
            print("| services | path | queries / tick | tick wall, median (min-max) | errors |")
            print("|---|---|---|---|---|")
            for n in args.services:
                for batch in (True, False):
                    q, walls, errors = tick_figures(prom.url, n, batch, args.ticks, args.max_concurrency)
                    print(f"| {n} | {'batched' if batch else 'per service'} | {q} | "
                          f"{statistics.median(walls):.3f} s ({min(walls):.3f}-{max(walls):.3f}) | {errors} |",
                          flush=True)
        finally:
            prom.stop()
            exporter.shutdown()


if __name__ == "__main__":
    main()
