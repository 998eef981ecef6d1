"""Test helpers: a real Prometheus (Debian ``prometheus`` package) on 127.0.0.1, fake vLLM pods, a proxy.

``PromServer`` writes a temporary config, starts ``/usr/bin/prometheus`` on a free port with its
own TSDB directory, waits until ``/-/ready``, and ``stop()`` kills it (also from ``__exit__``).
``FakePod`` / ``FakeExporter`` serve hand-made vLLM 0.33 series whose counters grow linearly in
wall time, so every rate and quantile has a value computable by hand. ``Proxy`` sits in front of
a Prometheus and fails on demand (HTTP 503, slow answers), checks credentials, or speaks TLS.
"""

from __future__ import annotations

import json
import shutil
import socket
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from autoscaler.loop.export import MetricsServer, serve

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
MISSING = ("{binary} not found: the tests that run a real Prometheus need Debian's prometheus package "
           "(apt-get install prometheus, which brings promtool; .ci/run installs it)")


def require(binary: str) -> str:
    """``binary``'s path; AssertionError saying how to get it when it is not installed."""
    assert Path(binary).is_file(), MISSING.format(binary=binary)
    return binary


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Target:
    """One scrape target: ``host:port`` and static labels."""

    address: str
    labels: dict[str, str] = field(default_factory=dict)


class PromServer:
    """A Prometheus scraping ``targets`` every ``scrape_interval`` (a Prometheus duration), evaluating
    ``rule_files`` as often."""

    def __init__(self, workdir: Path, targets: Iterable[Target] = (), scrape_interval: str = "1s",
                 tsdb: Path | None = None, rule_files: Iterable[Path] = ()) -> None:
        self.workdir = workdir
        self.targets = list(targets)
        self.scrape_interval = scrape_interval
        self.rule_files = [str(p) for p in rule_files]
        self.tsdb = tsdb or workdir / "tsdb"
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """Base URL."""
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 15.0) -> PromServer:
        """Start and wait until ready; raises RuntimeError (with the log's tail) if it does not come up."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        conf: dict[str, Any] = {
            "global": {"scrape_interval": self.scrape_interval, "scrape_timeout": self.scrape_interval,
                       "evaluation_interval": self.scrape_interval},
            "rule_files": self.rule_files,
            "scrape_configs": [
                {"job_name": f"t{i}", "honor_labels": True,
                 "static_configs": [{"targets": [t.address], "labels": t.labels}]}
                for i, t in enumerate(self.targets)
            ],
        }
        cfg = self.workdir / "prometheus.yml"
        cfg.write_text(yaml.safe_dump(conf))
        self.log = self.workdir / "prometheus.log"
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                [require(PROMETHEUS), f"--config.file={cfg}", f"--storage.tsdb.path={self.tsdb}",
                 f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
                stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as r:
                    if r.status == 200:
                        return self
            except OSError:
                time.sleep(0.05)
        tail = self.log.read_text()[-2000:]
        self.stop()
        raise RuntimeError(f"prometheus did not become ready:\n{tail}")

    def stop(self) -> None:
        """Kill the server (idempotent)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def __enter__(self) -> PromServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def query(self, promql: str, at: float | None = None) -> list[dict[str, Any]]:
        """Instant query result (``data.result``), at unix time ``at`` (default: the server's now)."""
        q = urllib.parse.urlencode({"query": promql, **({} if at is None else {"time": f"{at:.3f}"})})
        with urllib.request.urlopen(f"{self.url}/api/v1/query?{q}", timeout=5) as r:
            return json.loads(r.read())["data"]["result"]

    def query_range(self, promql: str, start: float, end: float, step_s: float) -> list[dict[str, Any]]:
        """Range query result (``data.result``) from ``start`` to ``end`` (unix s) every ``step_s``;
        AssertionError with Prometheus's error when it refuses the query (HTTP 400: a parse error)."""
        q = urllib.parse.urlencode({"query": promql, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": step_s})
        try:
            with urllib.request.urlopen(f"{self.url}/api/v1/query_range?{q}", timeout=10) as r:
                return json.loads(r.read())["data"]["result"]
        except urllib.error.HTTPError as exc:
            raise AssertionError(f"{promql}: {json.loads(exc.read()).get('error')}") from None

    def query_rules(self) -> list[dict[str, Any]]:
        """The rule groups the server loaded (``/api/v1/rules``, ``data.groups``)."""
        with urllib.request.urlopen(f"{self.url}/api/v1/rules", timeout=5) as r:
            return json.loads(r.read())["data"]["groups"]

    def wait_for(self, promql: str, ok: Callable[[list[dict[str, Any]]], bool], timeout_s: float = 15.0
                 ) -> list[dict[str, Any]]:
        """Poll ``promql`` until ``ok(result)``; AssertionError on timeout."""
        deadline = time.monotonic() + timeout_s
        result: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            result = self.query(promql)
            if ok(result):
                return result
            time.sleep(0.2)
        raise AssertionError(f"timed out waiting for {promql}: last {result}")


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
    t0: float = field(default_factory=time.time)

    def families(self) -> list[Metric]:
        labels = ["0", self.model, self.namespace, self.name, self.variant]
        names = ["engine", "model_name", "namespace", "pod", "variant"]
        n = self.rate_rps * (time.time() - self.t0)
        ts = self.stamp
        out: list[Metric] = []
        for metric, value in (("vllm:num_requests_running", self.running), ("vllm:num_requests_waiting", self.waiting),
                              ("vllm:kv_cache_usage_perc", self.kv)):
            g = GaugeMetricFamily(metric, metric, labels=names)
            g.add_metric(labels, value, timestamp=ts)
            out.append(g)
        for metric, value in (("vllm:prompt_tokens", PROMPT_TOKENS_PER_REQUEST * n),
                              ("vllm:prefix_cache_queries", PROMPT_TOKENS_PER_REQUEST * n),
                              ("vllm:prefix_cache_hits", PREFIX_HIT_FRACTION * PROMPT_TOKENS_PER_REQUEST * n)):
            c = CounterMetricFamily(metric, metric, labels=names)
            c.add_metric(labels, value, timestamp=ts)
            out.append(c)
        success = CounterMetricFamily("vllm:request_success", "s", labels=[*names, "finished_reason"])
        success.add_metric([*labels, "stop"], n, timestamp=ts)
        success.add_metric([*labels, "abort"], 0.0, timestamp=ts)
        out.append(success)
        for metric, shares in (("vllm:time_to_first_token_seconds", TTFT_SHARES),
                               ("vllm:request_time_per_output_token_seconds", TPOT_SHARES),
                               ("vllm:e2e_request_latency_seconds", ())):
            h = HistogramMetricFamily(metric, metric, labels=names)
            h.add_metric(labels, [*((le, f * n) for le, f in shares), ("+Inf", n)], 0.3 * n, timestamp=ts)
            out.append(h)
        return out


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
