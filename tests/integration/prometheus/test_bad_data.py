"""Bad data never drives a decision (``docs/anchors.md#failures-users-reported``: outages read as idle,
NaN at zero traffic, stale pods, one pod blocking all, absurd values).

Most tests run the loop against a real Prometheus (``tests/support/promserver.py``) scraping fake vLLM pods,
one scrape target per pod, whose values are set by hand.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from support.promserver import FakeDeployment, FakeExporter, FakePod, Proxy

from autoscaler.adapters.prometheus import HISTORY_STEPS, PrometheusSource, connect
from autoscaler.config import FleetConfig
from autoscaler.config.loading import parse_config
from autoscaler.faults.promserver import PromServer
from autoscaler.loop.estimate import estimate
from autoscaler.loop.export import LoopMetrics
from autoscaler.loop.runner import ControlLoop
from autoscaler.state import SIGNALS, ServiceObservation, Signals, VariantObservation
from autoscaler.wiring import build_source
from controllers.base import Reason
from controllers.registry import build

SLO = {"interactive": {"ttft_s": 2.0, "itl_s": 0.1}, "batch": {"ttft_s": 20.0, "itl_s": 0.25}}
WINDOW_S = 5.0


def fleet(name: str, *, idle_ticks: int = 2, staleness_s: float = 30.0, timeout_s: float = 2.0,
          queries: dict[str, str] | None = None) -> FleetConfig:
    """Service ``name`` (model ``m-<name>``), one variant ``h100`` with 1..4 replicas."""
    return parse_config({
        "services": [{"name": name, "model": f"m-{name}", "slo": SLO, "variants": [{
            "name": "h100", "gpu": "H100-SXM", "price_per_gpu_hour": 2.0, "min_replicas": 1, "max_replicas": 4,
            "kv_cache_tokens": 400_000, "profile": "llama-3-8b/h100-sxm"}]}],
        "controller": {"tick_s": 1, "window_s": WINDOW_S,
                       "guard": {"max_step_down": 2, "scale_down_cooldown_s": 0, "idle_ticks_to_min": idle_ticks}},
        "prometheus": {"staleness_s": staleness_s, "timeout_s": timeout_s, "queries": queries or {}},
    }, "<test>")


@dataclass
class World:
    prom: PromServer
    spare: PromServer
    exporters: dict[str, FakeExporter]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    t0 = time.time()
    pods = {
        "idle-0": FakePod("idle-h100-0", "m-idle"),
        "idle-1": FakePod("idle-h100-1", "m-idle"),
        "stale-0": FakePod("stale-h100-0", "m-stale", running=3, kv=0.2, rate_rps=5),
        # Every sample stamped two minutes ago: within Prometheus's 5 m lookback, beyond our 30 s bound.
        "stale-1": FakePod("stale-h100-1", "m-stale", running=5, kv=0.6, stamp=t0 - 120),
        "miss-0": FakePod("miss-h100-0", "m-miss", running=2, kv=0.3, rate_rps=4),
        "miss-1": FakePod("miss-h100-1", "m-miss", running=6, kv=0.5, rate_rps=4),
        "bad-0": FakePod("bad-h100-0", "m-bad", running=2, kv=0.3, rate_rps=4),
        "bad-1": FakePod("bad-h100-1", "m-bad", running=4, kv=1.7, rate_rps=4),
        "bad-2": FakePod("bad-h100-2", "m-bad", running=-1, kv=0.2, rate_rps=4),
    }
    deployments = [FakeDeployment("idle-h100", 3, 3), FakeDeployment("stale-h100", 2, 2),
                   FakeDeployment("miss-h100", 2, 2), FakeDeployment("bad-h100", 3, 3)]
    exporters = {k: FakeExporter([p]) for k, p in pods.items()}
    exporters["ksm"] = FakeExporter(deployments)
    work = tmp_path_factory.mktemp("bad-data")
    targets = [e.target for e in exporters.values()]
    # Two servers on the same targets, warming up together; the outage test stops the spare.
    servers = [PromServer(work / "main", targets), PromServer(work / "spare", targets)]
    try:
        for s in servers:
            s.start()
        for s in servers:
            s.wait_for("count(up == 1)", lambda r: bool(r) and int(r[0]["value"][1]) == len(targets))
        time.sleep(WINDOW_S + 1.5)  # a whole window of samples: the loop decides nothing on less
        yield World(servers[0], servers[1], exporters)
    finally:
        for s in servers:
            s.stop()
        for e in exporters.values():
            e.close()


def source(cfg: FleetConfig, url: str) -> PrometheusSource:
    return build_source(cfg, connect(cfg.prometheus, url))


def dry_loop(cfg: FleetConfig, src: PrometheusSource) -> ControlLoop:
    loop = ControlLoop(cfg, src, None, build("pid", cfg))
    loop.start(-cfg.controller.window_s)  # Prometheus has the history: no warm-up hold
    return loop


def exported(metrics: LoopMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Samples of the loop's own metrics, parsed back from the text exposition."""
    text = generate_latest(metrics.registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


# ----------------------------------------------------------------------------- zero traffic
@pytest.mark.slow
def test_zero_traffic_nan_quantiles_read_as_idle_and_scale_to_minimum(world: World) -> None:
    promql = ('histogram_quantile(0.95, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket'
              '{model_name="m-idle"}[5s])))')
    assert world.prom.query(promql)[0]["value"][1] == "NaN"  # the anchors' 0/0: Prometheus answers NaN
    cfg = fleet("idle", idle_ticks=2)
    loop = dry_loop(cfg, source(cfg, world.prom.url))
    first = loop.tick(0.0).services["idle"]
    second = loop.tick(1.0).services["idle"]
    est = first.estimate
    assert est.errors == []
    assert est.signals.ttft_p95_s is None and est.signals.slo_p95_ratio is None
    assert est.signals.ttft_mean_s is None and est.signals.slo_mean_ratio is None  # 0/0 means too
    assert est.signals.request_rate_rps == 0.0 and est.signals.running == 0.0
    assert est.idle is True
    assert first.applied == {"h100": 3}  # one idle tick of two: no change yet
    assert second.applied == {"h100": 1}  # 3 - max_step_down 2 = min_replicas 1
    assert "idle for 2 ticks" in second.reason


@pytest.mark.slow
def test_no_decision_until_prometheus_holds_a_whole_window(world: World, tmp_path: Path) -> None:
    # A Prometheus started just now on the same targets holds a second or two of the 5-s window: the
    # loop holds and says why, then decides once the window is covered.
    fresh = PromServer(tmp_path / "fresh", [e.target for e in world.exporters.values()]).start()
    try:
        fresh.wait_for('count(vllm:num_requests_running{model_name="m-idle"}) == 2', bool)
        # The history query is a subquery at window / 30 (0.17 s) steps: a first sample newer than its
        # last step is not seen yet (an empty answer, history unknown). Two steps later it is.
        time.sleep(2 * WINDOW_S / HISTORY_STEPS)
        cfg = fleet("idle")
        loop = dry_loop(cfg, source(cfg, fresh.url))
        st = loop.tick(0.0).services["idle"]
        assert st.estimate.history_s is not None and st.estimate.history_s < WINDOW_S - 1
        assert st.decision.hold and st.decision.code is Reason.WARMING_UP
        assert st.decision.reason.startswith("warming up: the source holds") and st.applied == st.estimate.current
        time.sleep(WINDOW_S + 0.5)
        st = loop.tick(1.0).services["idle"]
        assert st.estimate.history_s >= WINDOW_S - 1
        assert st.decision.code is not Reason.WARMING_UP
    finally:
        fresh.stop()


def test_every_default_query_parses_with_an_empty_selector(world: World) -> None:
    # A user's selector override may be empty; the queries with extra matchers must still parse
    # (Prometheus answers HTTP 400 to a syntax error, which PromServer.query raises).
    from autoscaler.promql import QUERY_SETS, render

    for qs in QUERY_SETS.values():
        for name, template in qs.signals.items():
            assert isinstance(world.prom.query(render(template, "", 5.0)), list), (qs.name, name)


def test_mean_ratios_are_window_means_over_the_interactive_slo() -> None:
    cfg = fleet("svc")
    slo = cfg.services[0].slo["interactive"]
    sig: dict[str, float | None] = dict.fromkeys(SIGNALS, None)
    sig.update(ttft_mean_s=0.6 * slo.ttft_s, tpot_mean_s=0.2 * slo.itl_s)

    def signals() -> Signals:
        obs = ServiceObservation("svc", 0.0, Signals.of(sig), {"h100": VariantObservation(2, 0)})
        return estimate(obs, cfg.services[0], {"h100": 10.0}).signals

    est_signals = signals()
    assert est_signals.ttft_mean_ratio == pytest.approx(0.6)
    assert est_signals.tpot_mean_ratio == pytest.approx(0.2)
    assert est_signals.slo_mean_ratio == pytest.approx(0.6)  # the larger of the two
    # One unknown (no request with two output tokens finished): the known ratio is a lower bound of
    # the larger one, so it stands only once it is past the SLO itself.
    sig["tpot_mean_s"] = None
    assert signals().slo_mean_ratio is None  # 0.6 < 1: could be either side of the setpoint
    sig["ttft_mean_s"] = 3.0 * slo.ttft_s
    assert signals().slo_mean_ratio == pytest.approx(3.0)


# ----------------------------------------------------------------------------- failures
@pytest.mark.slow
def test_http_5xx_and_timeouts_are_unknown_hold_and_are_counted(world: World, caplog: pytest.LogCaptureFixture
                                                                ) -> None:
    proxy = Proxy(world.prom.url, slow_s=4.0)
    try:
        cfg = fleet("idle", idle_ticks=1, timeout_s=2.0)
        loop = dry_loop(cfg, source(cfg, proxy.url))
        metrics = LoopMetrics(loop)
        ok = loop.tick(0.0)
        metrics.record(ok, 0.01)
        assert ok.services["idle"].applied == {"h100": 1}  # healthy and idle: toward the minimum
        proxy.mode = "503"
        with caplog.at_level(logging.WARNING, logger="autoscaler.loop.runner"):
            down = loop.tick(1.0)
        metrics.record(down, 0.01)
        proxy.mode = "slow"
        slow = loop.tick(2.0)
        metrics.record(slow, 0.01)
    finally:
        proxy.close()
    for rec, problem in ((down, "HTTP 503"), (slow, "timed out")):
        st = rec.services["idle"]
        assert st.estimate.errors and all(problem in e for e in st.estimate.errors), st.estimate.errors
        assert all(v is None for v in st.estimate.signals.flat().values())
        assert st.estimate.idle is None  # an outage is not an idle window
        assert st.decision.hold and "metric queries failed" in st.reason
        assert st.applied == {"h100": 3}  # held at the last known count: no scale-down
    n_failed = len(down.services["idle"].estimate.errors) + len(slow.services["idle"].estimate.errors)
    assert loop.query_failures["idle"] == n_failed
    assert any("metric queries failed" in r.getMessage() for r in caplog.records)
    samples = exported(metrics)
    assert samples[("autoscaler_metric_query_failures_total", (("service", "idle"),))] == n_failed
    assert samples[("autoscaler_decisions_total", (("reason", "metrics_error"), ("service", "idle")))] == 2


def test_prometheus_stopped_mid_run_holds_replicas(world: World) -> None:
    cfg = fleet("idle", idle_ticks=1)
    loop = dry_loop(cfg, source(cfg, world.spare.url))
    before = loop.tick(0.0).services["idle"]
    assert before.estimate.errors == [] and before.applied == {"h100": 1}
    world.spare.stop()
    after = loop.tick(1.0).services["idle"]
    assert after.estimate.errors and all("connection failed" in e for e in after.estimate.errors)
    assert after.decision.hold and after.applied == {"h100": 3}
    assert loop.guards["idle"].idle_ticks == 0


def test_errors_hold_even_when_the_controller_would_scale() -> None:
    cfg = fleet("svc")

    class Source:
        def __init__(self) -> None:
            self.errors: list[str] = []

        def observe(self, now: float) -> dict[str, ServiceObservation]:
            sig: dict[str, float | None] = dict.fromkeys(SIGNALS, 1.0)
            # 5x the SLOs and 100 req/s arriving at two replicas: the PID scales up
            sig.update(ttft_p95_s=10.0, tpot_p95_s=0.5, arrival_rate_rps=100.0)
            return {"svc": ServiceObservation("svc", now, Signals.of(sig), {"h100": VariantObservation(2, 0)},
                                              list(self.errors))}

    src = Source()
    src.errors = ["svc request_rate_rps: HTTP 503"]
    loop = ControlLoop(cfg, src, None, build("pid", cfg))
    loop.start(-WINDOW_S)
    held = loop.tick(0.0).services["svc"]
    src.errors = []
    acted = loop.tick(1.0).services["svc"]
    assert held.decision.hold and held.applied == {"h100": 2}
    assert acted.applied["h100"] > 2


# ----------------------------------------------------------------------------- stale and missing pods
def test_stale_pod_is_ignored_and_others_decide(world: World) -> None:
    cfg = fleet("stale", staleness_s=30.0)
    src = source(cfg, world.prom.url)
    st = dry_loop(cfg, src).tick(0.0).services["stale"]
    assert st.estimate.errors == []
    assert st.estimate.signals.running == 3.0 and st.estimate.signals.kv_usage == pytest.approx(0.2)
    assert any("stale-h100-1" in w and "old" in w for w in src.warnings["stale"])
    assert not st.decision.hold  # the fresh pod's quantiles decide
    loose = fleet("stale", staleness_s=1000.0)  # the same pod, inside the bound, counts
    assert source(loose, world.prom.url).observe(0.0)["stale"].signals.running == 8.0


def test_pod_without_metrics_does_not_block_the_others(world: World) -> None:
    cfg = fleet("miss")
    src = source(cfg, world.prom.url)
    assert src.observe(0.0)["miss"].signals.running == 8.0
    world.exporters["miss-1"].close()  # the pod's endpoint stops answering (GPU hang, crash)
    world.prom.wait_for('vllm:num_requests_running{pod="miss-h100-1"}', lambda r: r == [])
    st = dry_loop(cfg, src).tick(1.0).services["miss"]
    assert st.estimate.errors == []
    assert st.estimate.signals.running == 2.0 and st.estimate.signals.kv_usage == pytest.approx(0.3)
    assert st.estimate.variants["h100"].current == 2  # kube-state-metrics still counts it
    assert not st.decision.hold


# ----------------------------------------------------------------------------- absurd values
def test_pods_with_absurd_gauges_are_ignored_with_a_warning(world: World) -> None:
    cfg = fleet("bad")
    src = source(cfg, world.prom.url)
    obs = src.observe(0.0)["bad"]
    assert obs.errors == []
    assert obs.signals.running == 2.0 and obs.signals.kv_usage == pytest.approx(0.3)
    warnings = src.warnings["bad"]
    assert any("bad-h100-1" in w and "vllm:kv_cache_usage_perc=1.7" in w for w in warnings), warnings
    assert any("bad-h100-2" in w and "vllm:num_requests_running=-1" in w for w in warnings), warnings
    assert obs.variants["h100"].current == 3


def test_negative_rate_and_infinite_value_from_queries_are_rejected(world: World) -> None:
    cfg = fleet("miss", queries={
        "request_rate_rps": "-1 * sum(rate(vllm:e2e_request_latency_seconds_count{$sel}[$window]))",
        "kv_usage": "avg(vllm:kv_cache_usage_perc{$sel}) / 0",
    })
    st = dry_loop(cfg, source(cfg, world.prom.url)).tick(0.0).services["miss"]
    est = st.estimate
    assert est.signals.request_rate_rps is None and est.signals.kv_usage is None
    assert any("rejected request_rate_rps=-" in w for w in est.warnings), est.warnings
    assert any("rejected kv_usage=inf" in w for w in est.warnings), est.warnings
    assert est.idle is None  # a negative rate is not "no traffic"


def test_estimate_rejects_absurd_values_whatever_the_source() -> None:
    cfg = fleet("svc")
    sig: dict[str, Any] = dict.fromkeys(SIGNALS, 0.0)
    sig.update(request_rate_rps=-2.0, ttft_p95_s=math.inf, kv_usage=1.5, prefix_hit_rate=0.5, running=math.nan)
    obs = ServiceObservation("svc", 0.0, Signals.of(sig),
                             {"h100": VariantObservation(1, 0, signals=Signals(kv_usage=-0.1))})
    est = estimate(obs, cfg.services[0], {"h100": 1.0})
    assert est.signals.request_rate_rps is None and est.signals.ttft_p95_s is None
    assert est.signals.kv_usage is None and est.variants["h100"].signals.kv_usage is None
    assert est.signals.running is None  # NaN is undefined, not absurd: no warning
    assert est.signals.prefix_hit_rate == 0.5
    assert len(est.warnings) == 4, est.warnings
    assert est.idle is None
