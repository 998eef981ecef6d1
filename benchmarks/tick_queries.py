"""Benchmark: Prometheus queries per tick and a tick's wall time, batched and per service (issue 35).

Starts Debian's ``prometheus`` on 127.0.0.1 scraping a generated exposition: N services x 3 variants
x ``--pods`` vLLM 0.11 pods each (the gauges, counters and histograms the vllm-0.11 query set reads,
counters growing with wall time), one kube-state-metrics Deployment per variant and one gateway
counter per service. Then, for each N of ``--services``, ``PrometheusSource.observe`` runs
``--ticks`` times with ``prometheus.batch`` on and off (query set ``auto``; the first tick, which
detects each service's set, is not counted): the queries each tick sent (a counting ``QueryRunner``)
and its wall time (median, min-max). Goal (issue 35): queries per tick O(signals), not O(services x
signals). Per tick also Prometheus's own CPU (``/proc/<pid>/stat`` of its process, user + system, over
the observation) less what it spends scraping meanwhile (its CPU rate over the ``IDLE_S`` before each
path's ticks, times the tick's wall), and the client's (``time.process_time``). Paths: ``aggregated``
(batch and ``prometheus.aggregate``, the default), ``batched`` (batch, aggregate off: a union branch
per scope), ``per service`` (batch off). Nothing here is a test; the figures depend on the machine
(docs/benchmarks.md).

    python benchmarks/tick_queries.py [--services 1 10 100] [--pods 1] [--ticks 3] [--max-concurrency 8]
                                      [--paths aggregated batched per-service]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from autoscaler.adapters.prometheus import LiveRunner, PrometheusSource, connect
from autoscaler.config.loading import parse_config
from autoscaler.faults.promserver import PromServer, Target

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the benchmarks' own modules
from fleet_exposition import VARIANTS, WINDOW_S, Counting, fleet_services, serve
from provenance import stamp

PATHS = {"aggregated": (True, True), "batched": (True, False), "per-service": (False, False)}
IDLE_S = 5.0
"""Seconds Prometheus is watched idle (scraping only) before each path's ticks, for its scrape CPU rate."""


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (``/proc/<pid>/stat`` fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Figures:
    queries: int
    walls: list[float]
    prom_cpu: list[float]  # Prometheus's CPU per tick less its scraping's, seconds
    client_cpu: list[float]
    errors: int


def tick_figures(url: str, pid: int, services: int, path: str, ticks: int, concurrency: int) -> Figures:
    """What each counted tick of ``services`` read through ``path`` cost (``Figures``)."""
    batch, aggregate = PATHS[path]
    cfg = parse_config({
        "services": fleet_services(services),
        "controller": {"tick_s": WINDOW_S, "window_s": WINDOW_S},
        "prometheus": {"batch": batch, "aggregate": aggregate, "max_concurrency": concurrency, "timeout_s": 60},
    }, "<tick_queries>")
    runner = Counting(LiveRunner(connect(cfg.prometheus, url)))
    src = PrometheusSource(cfg.prometheus, cfg.services, runner, window_s=WINDOW_S)
    src.observe(0.0)  # detects each service's query set
    c0 = cpu_s(pid)
    time.sleep(IDLE_S)
    idle_rate = (cpu_s(pid) - c0) / IDLE_S
    walls, counts, errors, prom, client = [], set(), 0, [], []
    for k in range(ticks):
        runner.sent = 0
        t, c, pc = time.perf_counter(), time.process_time(), cpu_s(pid)
        obs = src.observe(float(k + 1))
        walls.append(time.perf_counter() - t)
        client.append(time.process_time() - c)
        prom.append(cpu_s(pid) - pc - idle_rate * walls[-1])
        counts.add(runner.sent)
        errors = sum(len(o.errors) for o in obs.values())
    if len(counts) != 1:
        raise RuntimeError(f"queries per tick varied across ticks: {sorted(counts)}")
    return Figures(counts.pop(), walls, prom, client, errors)


def spread(xs: list[float]) -> str:
    return f"{statistics.median(xs):.3f} s ({min(xs):.3f}-{max(xs):.3f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    ap.add_argument("--services", type=int, nargs="+", default=[1, 10, 100],
                    help="fleet sizes to measure, services of 3 variants each")
    ap.add_argument("--pods", type=int, default=1, help="pods per variant")
    ap.add_argument("--ticks", type=int, default=3, help="ticks counted per size and path (after the first)")
    ap.add_argument("--max-concurrency", type=int, default=8, help="prometheus.max_concurrency")
    ap.add_argument("--paths", nargs="+", choices=list(PATHS), default=list(PATHS), help="paths, in this order")
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
            try:
                series = prom.query("count({__name__=~\".+\"})")[0]["value"][1]
            except OSError:  # a loaded machine: the count is context, not a figure
                series = "?"
            print(f"{largest} services x {len(VARIANTS)} variants x {args.pods} pod(s) exported, "
                  f"{series} series; window {WINDOW_S:g} s, max_concurrency {args.max_concurrency}, "
                  f"{args.ticks} ticks each after the first\n")
            print("| services | path | queries / tick | tick wall, median (min-max) | Prometheus CPU / tick "
                  "(less scraping) | client CPU / tick | errors |")
            print("|---|---|---|---|---|---|---|")
            assert prom.proc is not None
            for n in args.services:
                for path in args.paths:
                    f = tick_figures(prom.url, prom.proc.pid, n, path, args.ticks, args.max_concurrency)
                    print(f"| {n} | {path} | {f.queries} | {spread(f.walls)} | {spread(f.prom_cpu)} | "
                          f"{spread(f.client_cpu)} | {f.errors} |", flush=True)
        finally:
            prom.stop()
            exporter.shutdown()


if __name__ == "__main__":
    main()
