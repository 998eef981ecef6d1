"""Benchmark: the daemon's tick at fleet scale (issue 35, "a tick that scales").

N services x 3 variants x ``--pods`` pods: their Deployments and pods stored in the emulated API
server (``autoscaler.faults.kubeapi``: 500 x 3 x 7 = 10,500 pods at the largest size), their series in
a real Prometheus (Debian's ``prometheus``) scraping the generated exposition ``tick_queries.py``
uses (``fleet_exposition.py``), both served from a child process so that the figures of this one are
the daemon's alone. Here one ``autoscaler.daemon.Daemon`` (controller ``--controller``, the MPC by
default; leading, its Lease renewed before each tick outside the counts) ticks: observe (Prometheus
and the API server's counts and pods), estimate, decide, actuate (scale subresource writes, an Event
per change). The first tick (which detects each service's query set and starts the loop's window)
is not counted; the counted ``--ticks`` start once a window has passed, as the daemon's first
decisions do.

Printed per size and ``kubernetes.watch`` setting: tick wall p50 / p99, the process's peak resident
set (``ru_maxrss``, KiB -> MiB: the whole process since it started, the interpreter and its imports
included; the API server and the exporter are in the child), Prometheus queries per tick (a counting
``QueryRunner``), API calls per tick counted at the server (reads: get and list; writes: create,
update, patch, delete; watches opened; the Lease's calls left out), the scale writes and Events per
tick from the daemon's own records, and the plan's solve p99 (the largest ``solve_ms`` of each tick's
decisions: one joint plan per tick with several services). ``--daemons K`` (shards by Lease) is left
to the sharding work (issue 35's other half).

    python benchmarks/fleet_scale.py [--services 10 100] [--pods 7] [--ticks 5] [--watch on|off|both]
                                     [--controller mpc] [--scrape-interval 2s]
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing
import resource
import statistics
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from kubernetes import client

from autoscaler.adapters.kubernetes import with_deadline
from autoscaler.adapters.prometheus import connect
from autoscaler.config import FleetConfig
from autoscaler.config.loading import parse_config
from autoscaler.daemon import Daemon
from autoscaler.faults.promserver import PromServer, Target
from autoscaler.wiring import build_source

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the benchmarks' own modules
from fleet_exposition import VARIANTS, WINDOW_S, Counting, fleet_services, serve
from provenance import stamp

NAMESPACE = "default"  # the exposition's
READS = ("get", "list")
WRITES = ("create", "update", "patch", "delete")
LEASE = "leases"
log = logging.getLogger("fleet_scale")
MAX_REPLICAS = 16


def deployment(name: str, replicas: int) -> dict[str, Any]:
    labels = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai"}]}}},
            "status": {"replicas": replicas, "readyReplicas": replicas, "availableReplicas": replicas}}


def pod(name: str, app: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NAMESPACE,
                                                            "labels": {"app": app}},
            "spec": {"nodeName": "emulated", "containers": [{"name": "vllm", "image": "vllm/vllm-openai"}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}


def cluster_side(conn: Connection, services: int, pods: int) -> None:
    """The child: the emulated API server holding the fleet and the exporter serving its series; answers
    ``requests`` (the server's request counts) until ``stop``."""
    from autoscaler.faults.kubeapi import EmulatedCluster

    logging.disable(logging.WARNING)
    cluster = EmulatedCluster().start()
    names = [f"s{s}-{v}" for s in range(services) for v, _, _ in VARIANTS]
    cluster.put("apps/v1/deployments", [deployment(n, pods) for n in names])
    cluster.put("v1/pods", [pod(f"{n}-{k}", n) for n in names for k in range(pods)])
    exporter = serve(services, pods)
    conn.send((cluster.url, exporter.server_address[1]))
    while True:
        cmd = conn.recv()
        if cmd == "requests":
            conn.send(dict(cluster.emu.requests))
        else:
            break
    exporter.shutdown()
    cluster.stop()


def fleet(services: int, watch: bool) -> FleetConfig:
    return parse_config({
        "services": fleet_services(services, MAX_REPLICAS),
        "controller": {"tick_s": WINDOW_S, "window_s": WINDOW_S},
        "prometheus": {"batch": True, "max_concurrency": 8, "timeout_s": 60},
        "kubernetes": {"namespace": NAMESPACE, "watch": watch, "pod_deletion_cost": False},
    }, "<fleet_scale>")


@dataclass
class Figures:
    walls: list[float]
    queries: list[int]
    reads: list[int]
    writes: list[int]
    watches: int
    scales: list[int]
    events: list[int]
    solve_ms: list[float]
    holds: Counter[str]


def api(url: str, user_agent: str) -> client.ApiClient:
    cfg = client.Configuration(host=url)
    cfg.retries = 0
    out = client.ApiClient(cfg)
    out.user_agent = user_agent
    return with_deadline(out, 60.0)


def delta(after: dict[Any, int], before: dict[Any, int], verbs: tuple[str, ...]) -> int:
    return sum(n - before.get(k, 0) for k, n in after.items() if k[0] in verbs and k[1] != LEASE)


def run(conn: Connection, kube_url: str, prom_url: str, services: int, watch: bool, ticks: int,
        controller: str) -> Figures:
    """Ticks of one daemon over the first ``services`` services, ``kubernetes.watch`` on or off."""
    cfg = fleet(services, watch)
    source = build_source(cfg, connect(cfg.prometheus, prom_url))
    counting = Counting(source.runner)  # type: ignore[arg-type]
    source.runner = counting
    d = Daemon(cfg, controller, source, api(kube_url, f"fleet-scale/{services}/{watch}"), "bench", "127.0.0.1:0")
    try:
        if d.cache is not None and not d.cache.wait_synced(600):
            raise RuntimeError("the watch cache did not list within 600 s")
        assert d.elector.try_acquire_or_renew()
        d.tick()  # detects the query sets, starts the loop (and its window)
        began = time.monotonic()
        out = Figures([], [], [], [], 0, [], [], [], Counter())
        conn.send("requests")
        start = conn.recv()
        for k in range(ticks):
            if k == 0:
                time.sleep(max(0.0, WINDOW_S - (time.monotonic() - began)))
            assert d.elector.try_acquire_or_renew()
            conn.send("requests")
            before = conn.recv()
            counting.sent = 0
            t = time.perf_counter()
            record = d.tick()
            out.walls.append(time.perf_counter() - t)
            conn.send("requests")
            after = conn.recv()
            assert record is not None
            out.queries.append(counting.sent)
            out.reads.append(delta(after, before, READS))
            out.writes.append(delta(after, before, WRITES))
            out.scales.append(sum(1 for st in record.services.values() for r in st.actuation.values() if r.changed))
            out.events.append(sum(int(r.changed) + int(r.external is not None)  # EventRecorder.result's
                                  for st in record.services.values() for r in st.actuation.values()))
            solves = [float(st.decision.terms["solve_ms"]) for st in record.services.values()
                      if "solve_ms" in st.decision.terms]
            out.solve_ms.append(max(solves, default=float("nan")))
            out.holds.update(str(st.decision.code.value) for st in record.services.values())
            if k == 0:
                log.info("first counted tick: %s", {n: st.reason for n, st in record.services.items()})
        conn.send("requests")
        out.watches = delta(conn.recv(), start, ("watch",))
        return out
    finally:
        d.elector.release()
        d.server.close()
        if d.cache is not None:
            d.cache.stop()


def p99(xs: list[float]) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(0.99 * len(s)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    ap.add_argument("--services", type=int, nargs="+", default=[10, 100], help="fleet sizes (3 variants each)")
    ap.add_argument("--pods", type=int, default=7, help="pods per variant")
    ap.add_argument("--ticks", type=int, default=5, help="ticks counted per size (after the first)")
    ap.add_argument("--watch", choices=("on", "off", "both"), default="on", help="kubernetes.watch")
    ap.add_argument("--controller", default="mpc", help="controller spec")
    ap.add_argument("--scrape-interval", default="2s", help="Prometheus's scrape interval")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args()
    print(f"{Path(__file__).name}: {stamp()}", flush=True)
    logging.basicConfig(level=logging.ERROR)
    largest = max(args.services)
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    side = ctx.Process(target=cluster_side, args=(child, largest, args.pods), daemon=True)
    side.start()
    kube_url, port = parent.recv()
    rows = []
    with tempfile.TemporaryDirectory(prefix="fleet-scale-") as work:
        prom = PromServer(Path(work), [Target(f"127.0.0.1:{port}")], scrape_interval=args.scrape_interval)
        try:
            prom.start()
            prom.wait_for("count(up == 1)", lambda r: bool(r) and r[0]["value"][1] == "1")
            time.sleep(WINDOW_S + 4)  # a whole window of scrapes
            series = prom.query("count({__name__=~\".+\"})")[0]["value"][1]
            print(f"{largest} services x {len(VARIANTS)} variants x {args.pods} pods "
                  f"({largest * len(VARIANTS) * args.pods} pods, {series} series) in the emulated API server and "
                  f"Prometheus; controller {args.controller}, window {WINDOW_S:g} s, {args.ticks} ticks each after "
                  "the first\n")
            print("| services | watch | tick wall p50 / p99 | peak RSS | Prometheus queries / tick | "
                  "API reads / tick | API writes / tick | scales + Events / tick | watches opened | plan solve p99 |")
            print("|---|---|---|---|---|---|---|---|---|---|")
            for n in args.services:
                for watch in {"on": [True], "off": [False], "both": [True, False]}[args.watch]:
                    f = run(parent, kube_url, prom.url, n, watch, args.ticks, args.controller)
                    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
                    row = {"services": n, "watch": watch, "wall_p50_s": statistics.median(f.walls),
                           "wall_p99_s": p99(f.walls), "peak_rss_mib": rss, "queries": sorted(set(f.queries)),
                           "reads": f.reads, "writes": f.writes, "scales": f.scales, "events": f.events,
                           "watches": f.watches, "solve_p99_ms": p99(f.solve_ms), "decisions": dict(f.holds)}
                    rows.append(row)
                    print(f"| {n} | {'on' if watch else 'off'} | {row['wall_p50_s']:.2f} / {row['wall_p99_s']:.2f} s | "
                          f"{rss:.0f} MiB | {'/'.join(map(str, row['queries']))} | "
                          f"{statistics.mean(f.reads):.1f} | {statistics.mean(f.writes):.1f} | "
                          f"{statistics.mean(f.scales):.1f} + {statistics.mean(f.events):.1f} | {f.watches} | "
                          f"{row['solve_p99_ms']:.0f} ms |", flush=True)
        finally:
            prom.stop()
            parent.send("stop")
            side.join(timeout=30)
    for row in rows:
        print(f"  {row['services']} services, watch {'on' if row['watch'] else 'off'}: decisions {row['decisions']}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
