"""The simulator as a scrape target: served values equal the simulated replicas' own metrics, vLLM's
colon names survive Prometheus's content negotiation, and the paced run decides as the plain one."""

from __future__ import annotations

import csv
import json
import threading
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families
from support.fleets import FLEET_DOC, ramp
from support.paths import ROOT
from support.promserver import GATEWAY_LABELS
from typer.testing import CliRunner

from autoscaler.cli import app
from autoscaler.config.loading import parse_config
from autoscaler.loop.export import serve
from autoscaler.realtime import LiveSimulation
from autoscaler.simulator.engine import DRAINING, READY
from autoscaler.simulator.exposition import OpenMetricsHistory

# What Prometheus 2.42 sends: it prefers OpenMetrics, whose prometheus_client writer would turn
# ``vllm:`` into ``vllm_``.
PROMETHEUS_ACCEPT = ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
                     "text/plain;version=0.0.4;q=0.5,*/*;q=0.1")


def _scrape(port: int) -> tuple[str, str]:
    req = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers={"Accept": PROMETHEUS_ACCEPT})
    with urllib.request.urlopen(req, timeout=5) as r:
        return r.headers["Content-Type"], r.read().decode()


def test_served_metrics_equal_the_replicas_metrics() -> None:
    cfg = parse_config(FLEET_DOC, "<test>")
    live = LiveSimulation(cfg, ramp(), steady_start=False)
    stop = threading.Event()
    live.run(on_step=lambda t: stop.set() if t >= 240 else None, stop=stop)  # mid-ramp, several replicas
    sim = live.sim
    svc = sim.services["llm"]
    before = svc.counts("h100")
    sim.set_replicas("llm", "h100", before.current + 1)  # one more replica, still provisioning
    server = serve(live.registry, "127.0.0.1:0")
    try:
        ctype, text = _scrape(server.port)
    finally:
        server.close()
    assert ctype.startswith("text/plain; version=0.0.4")
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for fam in text_string_to_metric_families(text) for s in fam.samples}
    serving = [r for r in svc.replicas if r.state in (READY, DRAINING)]
    assert len(serving) >= 2
    for r in serving:
        r.refresh_gauges()
        base = {"model_name": "m", "engine": "0", "namespace": "default", "pod": f"llm-{r.variant}-{r.rid}",
                "variant": r.variant}

        def get(name: str, extra: dict[str, str] | None = None, base: dict[str, str] = base) -> float:
            return samples[(name, tuple(sorted({**base, **(extra or {})}.items())))]

        assert get("vllm:num_requests_running") == r.metrics.running
        assert get("vllm:kv_cache_usage_perc") == r.metrics.kv_usage
        assert get("vllm:prompt_tokens_total") == r.metrics.prompt_tokens
        assert get("vllm:request_success_total", {"finished_reason": "stop"}) == r.metrics.success["stop"]
        assert get("vllm:time_to_first_token_seconds_count") == r.metrics.ttft.count
        assert get("vllm:time_to_first_token_seconds_bucket", {"le": "+Inf"}) == r.metrics.ttft.count
        assert get("vllm:time_to_first_token_seconds_bucket", {"le": "0.5"}) == sum(
            c for b, c in zip(r.metrics.ttft.bounds, r.metrics.ttft.counts, strict=False) if b <= 0.5)
        # as a vLLM's prometheus_client counters and histograms do (the v1 engine capture in
        # shared/data/vllm-metrics has ``vllm:prefix_cache_queries_created``), each carries a ``_created``
        # time; the CacheConfig info has no ``model_name`` (vLLM 0.33 ``vllm/v1/metrics/loggers.py``)
        assert get("vllm:prompt_tokens_created") == get("vllm:time_to_first_token_seconds_created") > 1.7e9
        info = {k for k in samples if k[0] == "vllm:cache_config_info" and dict(k[1])["pod"] == base["pod"]}
        assert len(info) == 1 and "model_name" not in dict(next(iter(info))[1])
    exported_pods = {dict(k[1])["pod"] for k in samples if k[0] == "vllm:num_requests_running"}
    assert len(exported_pods) == len(serving)  # the provisioning replica has no endpoint yet
    dep = (("deployment", "llm-h100"), ("namespace", "default"))
    assert samples[("kube_deployment_spec_replicas", dep)] == before.current + 1
    assert samples[("kube_deployment_status_replicas_ready", dep)] == before.ready
    # The gateway's counters as llm-d-router v0.10.0's EPP exports them (pkg/epp/metrics): both names count
    # every request received, by priority (the ramp's requests are all one class).
    received = svc.arrivals
    assert received > 0 and received == sum(svc.arrivals_by_priority)
    gateway = {k: v for k, v in samples.items() if k[0] in GATEWAY_LABELS}
    assert {name for name, _ in gateway} == {"llm_d_epp_request_total", "inference_objective_request_total"}
    for (name, labels), value in gateway.items():
        assert tuple(sorted(GATEWAY_LABELS[name])) == tuple(k for k, _ in labels)
        assert dict(labels)["model_name"] == "m" and value == received


def test_history_file_keeps_vllm_names(tmp_path: Path) -> None:
    cfg = parse_config(FLEET_DOC, "<test>")
    live = LiveSimulation(cfg, ramp(), steady_start=False)
    history = OpenMetricsHistory(live.collector)
    stop = threading.Event()
    live.run(substep_s=5.0, on_step=lambda t: (history.record(1_700_000_000 + t), t >= 30 and stop.set()), stop=stop)
    history.write(tmp_path / "h.om")
    text = (tmp_path / "h.om").read_text()
    assert text.rstrip().endswith("# EOF")
    assert 'vllm:num_requests_running{' in text and "vllm_num_requests_running" not in text
    stamps = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
              if line.startswith("vllm:num_requests_running{") and 'pod="llm-a100-1"' in line]
    assert stamps == [1_700_000_000 + t for t in range(5, 35, 5)]  # every 5 s up to the tick that stopped it


def _azure(path: Path, n: int = 240) -> Path:
    rows = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    for i in range(n):  # two requests per second for two minutes
        rows.append(f"2023-11-16 18:{15 + i // 120:02d}:{(i % 120) // 2:02d}.{5_000_000 * (i % 2):07d},"
                    f"{300 + (i * 97) % 1200},{20 + (i * 31) % 200}")
    path.write_text("\n".join(rows) + "\n")
    return path


def test_paced_served_run_decides_as_the_plain_run(tmp_path: Path) -> None:
    trace = _azure(tmp_path / "t.csv")
    plain = CliRunner().invoke(app, ["simulate", "--trace", str(trace), "--out", str(tmp_path / "plain")])
    served = CliRunner().invoke(app, ["simulate", "--trace", str(trace), "--out", str(tmp_path / "served"),
                                      "--serve-metrics", "127.0.0.1:0", "--speed", "200"])
    assert plain.exit_code == 0, plain.output
    assert served.exit_code == 0, served.output

    def desired(out: Path) -> list[dict[str, str]]:
        with (out / "timeline.csv").open() as f:
            return [{k: v for k, v in row.items() if k.startswith(("time_s", "desired_", "ready_"))}
                    for row in csv.DictReader(f)]

    assert desired(tmp_path / "served") == desired(tmp_path / "plain")
    # it says where it listens first, before the workload is even read, then its progress
    first = served.stderr.splitlines()[0]
    assert first.startswith("serving metrics at http://127.0.0.1:")
    assert first.endswith("/metrics and admission thresholds at /v1/admission, at 200x real time")
    assert served.stderr.splitlines()[-1] == "serving 240 requests, pid: 100%"
    times = json.loads((tmp_path / "served" / "realtime.json").read_text())
    assert times["speed"] == 200 and len(times["wall_unix_s"]) == len(desired(tmp_path / "plain"))
    assert times["wall_unix_s"] == sorted(times["wall_unix_s"])


def test_speed_without_serve_metrics_exits_2() -> None:
    res = CliRunner().invoke(app, ["simulate", "--speed", "10"])
    assert res.exit_code == 2 and "--speed needs --serve-metrics" in res.stderr


def test_the_example_scrape_config_is_valid() -> None:
    import subprocess

    from autoscaler.faults.promserver import PROMTOOL, require

    example = ROOT / "examples" / "prometheus.yml"
    res = subprocess.run([require(PROMTOOL), "check", "config", str(example)], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "127.0.0.1:9400" in example.read_text()  # the address its header serves the simulator at
