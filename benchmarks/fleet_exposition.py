"""A generated fleet for the benchmarks that start a real Prometheus (``tick_queries.py``, ``fleet_scale.py``):
N services x 3 variants x ``pods`` vLLM 0.11 pods each, as the Prometheus text exposition a scrape of
the whole fleet returns (the gauges, counters and histograms the vllm-0.11 query set reads, counters
growing with wall time; one kube-state-metrics Deployment per variant; one gateway counter per
service), an HTTP server serving it, the fleet file's services for it, and a ``QueryRunner`` that
counts the queries sent. Deployments are ``s<i>-<variant>`` in namespace ``default``, pods
``s<i>-<variant>-<k>``, service ``s<i>`` serving model ``m-s<i>``."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from autoscaler.adapters.prometheus import LiveRunner

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


def serve(services: int, pods: int, host: str = "127.0.0.1") -> ThreadingHTTPServer:
    """``exposition`` of the fleet on ``host``, any free port, from a daemon thread."""
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
    """A ``QueryRunner`` counting the queries it sends and when each was in flight (``spans``:
    ``time.monotonic`` start and end, s)."""

    def __init__(self, inner: LiveRunner) -> None:
        self.inner = inner
        self.sent = 0
        self.spans: list[tuple[float, float]] = []
        self._lock = threading.Lock()

    def query(self, promql: str, at: float | None) -> list[dict[str, Any]]:
        with self._lock:
            self.sent += 1
        start = time.monotonic()
        try:
            return self.inner.query(promql, at)
        finally:
            with self._lock:
                self.spans.append((start, time.monotonic()))

    def reset(self) -> None:
        with self._lock:
            self.sent = 0
            self.spans = []

    def in_flight_s(self) -> float:
        """How long at least one query was in flight since the last ``reset``, s: the union of
        ``spans`` (the tick's wall spent waiting on Prometheus, its queries overlapping)."""
        total, end = 0.0, -float("inf")
        for a, b in sorted(self.spans):
            if b > end:
                total += b - max(a, end)
                end = b
        return total


def fleet_services(services: int, max_replicas: int = 4) -> list[dict[str, Any]]:
    """The fleet file's ``services`` for the first ``services`` services of the exposition."""
    return [{"name": f"s{s}", "model": f"m-s{s}", "slo": SLO, "variants": [
        {"name": v, "gpu": gpu, "price_per_gpu_hour": 2.0, "min_replicas": 0, "max_replicas": max_replicas,
         "kv_cache_tokens": 400_000, "profile": profile} for v, gpu, profile in VARIANTS]} for s in range(services)]
