"""Test helpers: a real Prometheus (``autoscaler.faults.promserver``), fake vLLM pods, a proxy.

``FakePod`` / ``FakeExporter`` serve hand-made vLLM 0.33 series whose counters grow linearly in
wall time, so every rate and quantile has a value computable by hand. ``Proxy`` sits in front of
a Prometheus and fails on demand (HTTP 503, slow answers), checks credentials, or speaks TLS.
"""

from __future__ import annotations

import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from autoscaler.faults.promserver import PROMTOOL, Target, require
from autoscaler.loop.export import MetricsServer, serve


def backfill(openmetrics: Path, tsdb: Path) -> None:
    """``promtool tsdb create-blocks-from openmetrics``; AssertionError with promtool's output on failure."""
    res = subprocess.run([require(PROMTOOL), "tsdb", "create-blocks-from", "openmetrics", str(openmetrics), str(tsdb)],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr


# --------------------------------------------------------------------------- fake vLLM pods
# TTFT per request: half in (0.1, 0.25], half in (0.25, 0.5] -> p50 = 0.25, p95 = 0.25 + 0.25 * 0.9 = 0.475.
TTFT_SHARES = (("0.1", 0.0), ("0.25", 0.5), ("0.5", 1.0))
# TPOT per request: all in (0.025, 0.05] -> p95 = 0.025 + 0.025 * 0.95 = 0.04875.
TPOT_SHARES = (("0.025", 0.0), ("0.05", 1.0))
PROMPT_TOKENS_PER_REQUEST = 1000.0
PREFIX_HIT_FRACTION = 0.4


def _single(family: type[GaugeMetricFamily] | type[CounterMetricFamily], metric: str, names: list[str],
            labels: list[str], value: float, ts: float | None = None) -> Metric:
    """A family of ``metric`` holding one sample."""
    fam = family(metric, metric, labels=names)
    fam.add_metric(labels, value, timestamp=ts)
    return fam


@dataclass
class FakePod:
    """One vLLM pod: gauges as given, counters growing at ``rate_rps`` requests per wall second.

    ``stamp`` pins every sample's timestamp (unix seconds) to simulate a pod whose data stopped.
    """

    name: str
    model: str
    variant: str = "h100"
    running: float = 0.0
    waiting: float = 0.0
    kv: float = 0.0
    rate_rps: float = 0.0
    stamp: float | None = None
    namespace: str = "default"
    tpot_metric: str = "vllm:request_time_per_output_token_seconds"
    """The TPOT histogram's name: a vLLM before 0.11 has the per-step ``vllm:time_per_output_token_seconds``."""
    t0: float = field(default_factory=time.time)
    role: str = ""
    """llm-d's pod label ``llm-d.ai/role`` as Prometheus keeps it (``llm_d_ai_role``); "" for none."""

    def families(self) -> list[Metric]:
        labels = ["0", self.model, self.namespace, self.name, self.variant] + ([self.role] if self.role else [])
        names = ["engine", "model_name", "namespace", "pod", "variant"] + (["llm_d_ai_role"] if self.role else [])
        now = time.time()
        n = self.rate_rps * (now - self.t0)
        ts = self.stamp
        # A counter's sample carries the time its value was computed: Prometheus would stamp it with the
        # scrape's start, and on a busy machine the gap between the two moves a short window's rate.
        # Gauges keep the scrape's time, so a pod that stops answering goes stale as a real one does
        # (explicitly stamped series are never marked stale).
        cts = now if self.stamp is None else self.stamp
        out = [_single(GaugeMetricFamily, metric, names, labels, value, ts) for metric, value in (
            ("vllm:num_requests_running", self.running), ("vllm:num_requests_waiting", self.waiting),
            ("vllm:kv_cache_usage_perc", self.kv))]
        out += [_single(CounterMetricFamily, metric, names, labels, value, cts) for metric, value in (
            ("vllm:prompt_tokens", PROMPT_TOKENS_PER_REQUEST * n),
            ("vllm:prefix_cache_queries", PROMPT_TOKENS_PER_REQUEST * n),
            ("vllm:prefix_cache_hits", PREFIX_HIT_FRACTION * PROMPT_TOKENS_PER_REQUEST * n))]
        success = CounterMetricFamily("vllm:request_success", "s", labels=[*names, "finished_reason"])
        success.add_metric([*labels, "stop"], n, timestamp=cts)
        success.add_metric([*labels, "abort"], 0.0, timestamp=cts)
        out.append(success)
        for metric, shares in (("vllm:time_to_first_token_seconds", TTFT_SHARES),
                               (self.tpot_metric, TPOT_SHARES),
                               ("vllm:e2e_request_latency_seconds", ())):
            h = HistogramMetricFamily(metric, metric, labels=names)
            h.add_metric(labels, [*((le, f * n) for le, f in shares), ("+Inf", n)], 0.3 * n, timestamp=cts)
            out.append(h)
        return out


@dataclass
class FakeSGLangPod:
    """One SGLang 0.5.23 pod (``python/sglang/srt/metrics/collector.py``): ``running`` requests, counters
    growing at ``rate_rps`` requests per wall second, every request's per-request TPOT in (0.025, 0.05]
    (``TPOT_SHARES``, sum 0.03 per request) and its tokens 0.02 s apart (ITL), ``retract_share`` of
    requests retracted."""

    name: str
    model: str
    variant: str = "h100"
    running: float = 0.0
    rate_rps: float = 0.0
    retract_share: float = 0.5
    namespace: str = "default"
    t0: float = field(default_factory=time.time)

    def families(self) -> list[Metric]:
        names = ["model_name", "namespace", "pod", "variant"]
        labels = [self.model, self.namespace, self.name, self.variant]
        n = self.rate_rps * (time.time() - self.t0)
        out = [_single(GaugeMetricFamily, metric, names, labels, value) for metric, value in (
            ("sglang:num_running_reqs", self.running), ("sglang:num_queue_reqs", 0.0), ("sglang:token_usage", 0.2))]
        out += [_single(CounterMetricFamily, metric, names, labels, value) for metric, value in (
            ("sglang:num_requests", n), ("sglang:num_retracted_requests", self.retract_share * n))]
        for metric, shares, total in (("sglang:request_time_per_output_token_seconds", TPOT_SHARES, 0.03 * n),
                                      ("sglang:inter_token_latency_seconds", (), 0.02 * 10 * n)):
            count = n if shares else 10 * n
            h = HistogramMetricFamily(metric, metric, labels=names)
            h.add_metric(labels, [*((le, f * count) for le, f in shares), ("+Inf", count)], total)
            out.append(h)
        return out


GATEWAY_LABELS = {
    "llm_d_epp_request_total": ("model_name", "target_model_name", "fairness_id", "priority"),
    "inference_objective_request_total": ("model_name", "target_model_name", "priority"),
    "inference_model_request_total": ("model_name", "target_model_name"),
}
"""Each endpoint-picker request counter's labels: llm-d-router v0.10.0 ``pkg/epp/metrics`` (the first
two, both counted per request), gateway-api-inference-extension v1.0.0 ``site-src/guides/metrics.md``."""


@dataclass
class FakeGateway:
    """An endpoint picker counting ``rate_rps`` requests per wall second of ``model`` (priority 2)
    under each of ``counters``, as one EPP exports every name of its release."""

    model: str
    rate_rps: float
    counters: tuple[str, ...]
    t0: float = field(default_factory=time.time)

    def families(self) -> list[Metric]:
        n = self.rate_rps * (time.time() - self.t0)
        values = {"model_name": self.model, "target_model_name": self.model, "fairness_id": "default-flow",
                  "priority": "2"}
        return [_single(CounterMetricFamily, name, list(GATEWAY_LABELS[name]),
                        [values[k] for k in GATEWAY_LABELS[name]], n) for name in self.counters]


@dataclass
class FakeFlowControl:
    """An endpoint picker's flow control for ``model`` (pool ``pool``), as llm-d-router v0.10.0
    (``pkg/epp/metrics/llm_d_router_metrics.go``) exports it under ``prefix`` (``llm_d_epp`` or GIE's
    deprecated ``inference_extension``): per priority label, ``dispatched`` req/s each after ``wait_s``
    seconds in the queue, ``rejected`` req/s answered 429 at once (``RejectedCapacity``), ``queue``
    requests held now; and ``llm_d_epp_request_total`` counting both."""

    model: str
    pool: str
    prefix: str
    dispatched: dict[str, float]
    wait_s: dict[str, float]
    rejected: dict[str, float]
    queue: dict[str, float]
    t0: float = field(default_factory=time.time)

    def families(self) -> list[Metric]:
        dt = time.time() - self.t0
        flow = ["fairness_id", "priority", "inference_pool", "model_name", "target_model_name"]
        hist = HistogramMetricFamily(f"{self.prefix}_flow_control_request_queue_duration_seconds", "q",
                                     labels=[*flow[:2], "outcome", *flow[2:]])
        size = GaugeMetricFamily(f"{self.prefix}_flow_control_queue_size", "s", labels=flow)
        requests = CounterMetricFamily("llm_d_epp_request", "r", labels=list(GATEWAY_LABELS["llm_d_epp_request_total"]))
        for p in self.dispatched:
            pool = ["default-flow", p, self.pool, self.model, self.model]
            n = self.dispatched[p] * dt
            hist.add_metric([*pool[:2], "Dispatched", *pool[2:]], [("+Inf", n)], self.wait_s[p] * n)
            if self.rejected.get(p):
                r = self.rejected[p] * dt
                hist.add_metric([*pool[:2], "RejectedCapacity", *pool[2:]], [("+Inf", r)], 0.0)
            size.add_metric(pool, self.queue[p])
            total = (self.dispatched[p] + self.rejected.get(p, 0.0)) * dt
            requests.add_metric([self.model, self.model, "default-flow", p], total)
        return [hist, size, requests]


@dataclass
class FakeDeployment:
    """kube-state-metrics series of one Deployment."""

    name: str
    spec: int
    ready: int
    namespace: str = "default"

    def families(self) -> list[Metric]:
        spec = GaugeMetricFamily("kube_deployment_spec_replicas", "s", labels=["namespace", "deployment"])
        spec.add_metric([self.namespace, self.name], self.spec)
        ready = GaugeMetricFamily("kube_deployment_status_replicas_ready", "r", labels=["namespace", "deployment"])
        ready.add_metric([self.namespace, self.name], self.ready)
        return [spec, ready]


class FakeExporter(Collector):
    """Serves the families of ``items`` (``FakePod``/``FakeDeployment``, mutable) on a free port."""

    def __init__(self, items: list[Any]) -> None:
        self.items = items
        registry = CollectorRegistry()
        registry.register(self)
        self.server: MetricsServer | None = serve(registry, "127.0.0.1:0")

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterable[Metric]:
        merged: dict[str, Metric] = {}
        for item in self.items:
            for fam in item.families():
                if fam.name in merged:
                    merged[fam.name].samples.extend(fam.samples)
                else:
                    merged[fam.name] = fam
        return list(merged.values())

    @property
    def target(self) -> Target:
        assert self.server is not None
        return Target(f"127.0.0.1:{self.server.port}")

    def close(self) -> None:
        """Stop serving (idempotent): Prometheus then sees the target down."""
        if self.server is not None:
            self.server.close()
            self.server = None


class LocalHTTPServer:
    """A threaded HTTP(S) server for ``handler`` on 127.0.0.1 (free port), serving until ``close``.

    ``tls`` is a ``(certfile, keyfile)`` pair to serve HTTPS. The listen backlog is 128: the default
    5 drops concurrent connects (1 s SYN retries).
    """

    def __init__(self, handler: type[BaseHTTPRequestHandler], tls: tuple[Path, Path] | None = None) -> None:
        class Server(ThreadingHTTPServer):
            request_queue_size = 128
            daemon_threads = True

        self.httpd = Server(("127.0.0.1", 0), handler)
        if tls is not None:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(str(tls[0]), str(tls[1]))
            self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True)
        self.scheme = "https" if tls is not None else "http"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


class Proxy:
    """Forwards GET requests to ``upstream``; ``mode`` is ``pass``, ``503`` or ``slow`` (sleep, then 503).

    ``require`` is an ``Authorization`` header value to demand (401 otherwise); ``tls`` is a
    ``(certfile, keyfile)`` pair to serve HTTPS. ``seen`` counts requests.
    """

    def __init__(self, upstream: str, require: str | None = None, tls: tuple[Path, Path] | None = None,
                 slow_s: float = 2.0) -> None:
        self.upstream = upstream
        self.mode = "pass"
        self.require = require
        self.slow_s = slow_s
        self.seen = 0
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                proxy.seen += 1
                if proxy.require is not None and self.headers.get("Authorization") != proxy.require:
                    return self._send(401, b'{"status":"error","error":"unauthorized"}')
                if proxy.mode == "slow":
                    time.sleep(proxy.slow_s)
                if proxy.mode in ("503", "slow"):
                    return self._send(503, b'{"status":"error","errorType":"unavailable","error":"overloaded"}')
                try:
                    with urllib.request.urlopen(proxy.upstream + self.path, timeout=10) as r:
                        self._send(r.status, r.read())
                except urllib.error.HTTPError as exc:
                    self._send(exc.code, exc.read())

            def _send(self, code: int, body: bytes) -> None:
                try:
                    self.send_response(code)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (its timeout): nothing to answer

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet."""

        self.http = LocalHTTPServer(Handler, tls)

    @property
    def url(self) -> str:
        return self.http.url

    def close(self) -> None:
        self.http.close()


def self_signed(workdir: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (openssl), as ``(certfile, keyfile)``."""
    cert, key = workdir / "cert.pem", workdir / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True, timeout=60)
    return cert, key
