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
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from autoscaler.adapters.prometheus import LiveRunner, PrometheusSource, connect
from autoscaler.config.loading import parse_config
from autoscaler.faults.promserver import PromServer, Target

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the benchmarks' own modules
from provenance import stamp

VARIANTS = (("h100", "H100-SXM", "llama-3-8b/h100-sxm"), ("a100", "A100-80GB", "llama-3-8b/a100-80gb"),
            ("b100", "A100-80GB", "llama-3-8b/a100-80gb"))
WINDOW_S = 10.0
SLO = {"interactive": {"ttft_s": 2.0, "itl_s": 0.1}, "batch": {"ttft_s": 20.0, "itl_s": 0.25}}
BUCKETS = ((0.1, 0.0), (0.25, 0.5), (0.5, 1.0))  # (le, share of requests at or below)


def exposition(services: int, pods: int, t0: float) -> bytes:
    """The Prometheus text exposition of the whole fleet now; request counters grow at 1 + pod index
    requests per second from ``t0``."""
    dt = time.time() - t0
    out: list[str] = []
    for s in range(services):
        model = f"m-s{s}"
        out.append(f'llm_d_epp_request_total{{model_name="{model}",target_model_name="{model}",priority="2"}} '
                   f"{3.0 * dt:.3f}")
        for v, _, _ in VARIANTS:
            dep = f"s{s}-{v}"
            out.append(f'kube_deployment_spec_replicas{{namespace="default",deployment="{dep}"}} {pods}')
            out.append(f'kube_deployment_status_replicas_ready{{namespace="default",deployment="{dep}"}} {pods}')
            for p in range(pods):
                lab = f'model_name="{model}",namespace="default",pod="{dep}-{p}",engine="0"'
                n = (1 + p) * dt
                out += [f"vllm:num_requests_running{{{lab}}} {1 + p}", f"vllm:num_requests_waiting{{{lab}}} {p}",
                        f"vllm:kv_cache_usage_perc{{{lab}}} {0.1 * (1 + p % 9):.1f}",
                        f"vllm:prompt_tokens_total{{{lab}}} {1000 * n:.3f}",
                        f"vllm:generation_tokens_total{{{lab}}} {200 * n:.3f}",
                        f"vllm:prefix_cache_queries_total{{{lab}}} {1000 * n:.3f}",
                        f"vllm:prefix_cache_hits_total{{{lab}}} {400 * n:.3f}",
                        f'vllm:request_success_total{{{lab},finished_reason="stop"}} {n:.3f}',
                        f"vllm:num_preemptions_total{{{lab}}} 0"]
                for h in ("vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds",
                          "vllm:request_time_per_output_token_seconds", "vllm:e2e_request_latency_seconds"):
                    out += [f'{h}_bucket{{{lab},le="{le}"}} {share * n:.3f}' for le, share in BUCKETS]
                    out += [f'{h}_bucket{{{lab},le="+Inf"}} {n:.3f}', f"{h}_sum{{{lab}}} {0.3 * n:.3f}",
                            f"{h}_count{{{lab}}} {n:.3f}"]
    return ("\n".join(out) + "\n").encode()


def serve(services: int, pods: int) -> ThreadingHTTPServer:
    t0 = time.time()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = exposition(services, pods, t0)
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet."""

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


class Counting:
    """A ``QueryRunner`` counting the queries it sends."""

    def __init__(self, inner: LiveRunner) -> None:
        self.inner = inner
        self.sent = 0
        self._lock = threading.Lock()

    def query(self, promql: str, at: float | None) -> list[dict[str, Any]]:
        with self._lock:
            self.sent += 1
        return self.inner.query(promql, at)


def tick_figures(url: str, services: int, batch: bool, ticks: int, concurrency: int
                 ) -> tuple[int, list[float], int]:
    """(queries per tick, wall seconds of each counted tick, errors in the last) for ``services``."""
    cfg = parse_config({
        "services": [{"name": f"s{s}", "model": f"m-s{s}", "slo": SLO, "variants": [
            {"name": v, "gpu": gpu, "price_per_gpu_hour": 2.0, "min_replicas": 0, "max_replicas": 4,
             "kv_cache_tokens": 400_000, "profile": profile} for v, gpu, profile in VARIANTS]}
            for s in range(services)],
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
