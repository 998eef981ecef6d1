"""A real Prometheus (Debian's ``prometheus`` package) on 127.0.0.1, for the fault suite's live
scenarios and the tests.

``PromServer`` writes a config, starts the ``prometheus`` binary on a free port with its own TSDB
directory, waits until ``/-/ready``, and ``stop()`` kills it (also from ``__exit__``); started again
on the same TSDB it serves what it had scraped (an outage, then recovery).
"""

from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
MISSING = ("{binary} not found: what runs a real Prometheus (the live fault scenarios, some tests) needs "
           "Debian's prometheus package (apt-get install prometheus, which brings promtool; .ci/run installs it)")


def require(binary: str) -> str:
    """``binary``'s path; RuntimeError saying how to get it when it is not installed."""
    if not Path(binary).is_file():
        raise RuntimeError(MISSING.format(binary=binary))
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


BIND_TRIES = 3
"""Ports a server tries before its bind failure is an error (``PromServer.start``)."""


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
        """Start and wait until ready; raises RuntimeError (with the log's tail) if it does not come up.
        A port taken between ``free_port`` and Prometheus's bind (another process on a busy machine)
        is given up for a new one, up to ``BIND_TRIES`` times."""
        for _ in range(BIND_TRIES - 1):
            try:
                return self._start(timeout_s)
            except RuntimeError as exc:
                if "address already in use" not in str(exc):
                    raise
                self.port = free_port()
        return self._start(timeout_s)

    def _start(self, timeout_s: float) -> PromServer:
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

    def pause(self) -> None:
        """Freeze the server (SIGSTOP): the kernel still accepts connections on its port, and nothing
        answers them, as a Prometheus that is overloaded or stuck in a long GC pause."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """Let a paused server run again (SIGCONT); it answers what waited."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        """Kill the server (idempotent; a paused one too)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
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
