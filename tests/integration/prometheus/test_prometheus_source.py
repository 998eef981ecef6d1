"""``PrometheusSource`` against a real Prometheus: signals equal hand calculations, replica counts,
selectors, the query sets' metric names, auth, TLS, and configuration errors."""

from __future__ import annotations

import base64
import csv
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from support.paths import DATA_DIR
from support.promserver import (
    PREFIX_HIT_FRACTION,
    PROMPT_TOKENS_PER_REQUEST,
    FakeDeployment,
    FakeExporter,
    FakeFlowControl,
    FakeGateway,
    FakePod,
    FakeSGLangPod,
    Proxy,
    self_signed,
)

from autoscaler.adapters.prometheus import PrometheusError, PrometheusSource, connect
from autoscaler.config import FleetConfig
from autoscaler.config.loading import parse_config
from autoscaler.errors import ConfigError
from autoscaler.faults.promserver import PromServer, Target
from autoscaler.promql import QUERY_SETS
from autoscaler.wiring import build_source

SLO = {"interactive": {"ttft_s": 2.0, "itl_s": 0.1}, "batch": {"ttft_s": 20.0, "itl_s": 0.25}}
V0_CAPTURE = "vllm-metrics/exposition_v0engine_cpu_Qwen3-0.6B_capture.txt"


def _variant(name: str, gpu: str, profile: str) -> dict[str, Any]:
    return {"name": name, "gpu": gpu, "price_per_gpu_hour": 2.0, "min_replicas": 0, "max_replicas": 4,
            "kv_cache_tokens": 400_000, "profile": profile}


def fleet(prometheus: dict[str, Any] | None = None, name: str = "src", model: str = "m-src") -> FleetConfig:
    return parse_config({
        "services": [{"name": name, "model": model, "slo": SLO, "variants": [
            _variant("h100", "H100-SXM", "llama-3-8b/h100-sxm"),
            _variant("a100", "A100-80GB", "llama-3-8b/a100-80gb")]}],
        "controller": {"tick_s": 1, "window_s": 3},
        "prometheus": prometheus or {},
    }, "<test>")


class _Static(BaseHTTPRequestHandler):
    body = b""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""


@dataclass
class World:
    prom: PromServer
    work: Path


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    # A module fixture cannot use the function-scoped ``data_dir``; same directory, same rule: never skip.
    assert DATA_DIR.is_dir(), f"shared data directory missing: {DATA_DIR}"
    pods = [FakePod("src-h100-0", "m-src", running=2, waiting=1, kv=0.3, rate_rps=4),
            FakePod("src-h100-1", "m-src", running=3, kv=0.5, rate_rps=6),
            FakePod("src-a100-0", "m-src", variant="a100", running=1, kv=0.1, rate_rps=2)]
    gateways = [FakeGateway("m-src", 5.0, ("llm_d_epp_request_total", "inference_objective_request_total")),
                FakeGateway("m-gie", 3.0, ("inference_objective_request_total",)),
                FakeGateway("m-old", 2.0, ("inference_model_request_total",))]
    sglang = FakeSGLangPod("sgl-h100-0", "m-sgl", running=2, rate_rps=4)
    pods.append(FakePod("v092-h100-0", "m-092", running=1, kv=0.2, rate_rps=2,
                        tpot_metric="vllm:time_per_output_token_seconds"))  # a vLLM of 0.9.2-0.10
    flows = [FakeFlowControl(model, "src", prefix, **FLOW) for model, prefix in FLOW_MODELS.items()]
    pods += [FakePod("src-h100-0", model, waiting=1, kv=0.2, rate_rps=4) for model in FLOW_MODELS]
    # No kube-state-metrics for a100.
    exporter = FakeExporter([*pods, *gateways, *flows, sglang, FakeDeployment("src-h100", 3, 2)])
    handler = type("V0", (_Static,), {"body": (DATA_DIR / V0_CAPTURE).read_bytes()})
    static = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=static.serve_forever, daemon=True)
    thread.start()
    work = tmp_path_factory.mktemp("source")
    # A real old server's capture, labelled as a pod would be by Kubernetes service discovery.
    v0 = Target(f"127.0.0.1:{static.server_address[1]}", {"namespace": "default", "pod": "qwen-h100-0"})
    prom = PromServer(work / "prom", [exporter.target, v0])
    try:
        prom.start()
        prom.wait_for("count(up == 1)", lambda r: bool(r) and r[0]["value"][1] == "2")
        time.sleep(4.5)  # more than one 3 s window of scrapes
        prom.wait_for("min(count_over_time(up[3s])) >= 2", bool)  # two scrapes a target in the window, however loaded
        yield World(prom, work)
    finally:
        prom.stop()
        exporter.close()
        static.shutdown()
        static.server_close()


def observe(cfg: FleetConfig, url: str) -> tuple[PrometheusSource, Any]:
    src = build_source(cfg, connect(cfg.prometheus, url))
    return src, src.observe(0.0)[cfg.services[0].name]


@pytest.mark.slow
def test_signals_equal_hand_calculations(world: World) -> None:
    _, obs = observe(fleet(), world.prom.url)
    assert obs.errors == []
    s = obs.signals
    assert s.running == 6.0 and s.queue_length == 1.0
    assert s.kv_usage == pytest.approx((0.3 + 0.5 + 0.1) / 3)
    # Quantiles and ratios depend only on the buckets' proportions (promserver.TTFT_SHARES, TPOT_SHARES).
    assert s.ttft_p50_s == pytest.approx(0.25)
    assert s.ttft_p95_s == pytest.approx(0.25 + 0.25 * (0.95 - 0.5) / 0.5)
    assert s.tpot_p95_s == pytest.approx(0.025 + 0.025 * 0.95)
    assert s.prefix_hit_rate == pytest.approx(0.4)
    # Counters grow at 4 + 6 + 2 requests per second.
    assert s.request_rate_rps == pytest.approx(12.0, rel=0.1)
    assert s.success_rps == pytest.approx(12.0, rel=0.1) and s.abort_rps == 0.0
    assert s.prompt_tokens_rps == pytest.approx(12.0 * PROMPT_TOKENS_PER_REQUEST, rel=0.1)
    assert s.itl_p95_s is None and s.preemptions_rps is None  # not exported by the fake pods
    h100, a100 = obs.variants["h100"], obs.variants["a100"]
    assert h100.signals.running == 5.0 and h100.signals.kv_usage == pytest.approx(0.4)
    assert a100.signals.request_rate_rps == pytest.approx(2.0, rel=0.1)
    assert (h100.ready, h100.starting) == (2, 1)  # kube-state-metrics: spec 3, ready 2
    assert (a100.ready, a100.starting) == (1, 0)  # no Deployment series: the one fresh pod
    assert sorted((p.variant, p.running, p.waiting) for p in obs.pods) == [
        ("a100", 1.0, 0.0), ("h100", 2.0, 1.0), ("h100", 3.0, 0.0)]
    # The cache-warmth model's per-pod counters: each fake pod hits PREFIX_HIT_FRACTION of its prompt tokens.
    assert sorted(p.name for p in obs.pods) == ["src-a100-0", "src-h100-0", "src-h100-1"]
    for p in obs.pods:
        assert p.prefix_queries_total is not None and p.prefix_queries_total > 0
        assert p.prefix_hits_total == pytest.approx(PREFIX_HIT_FRACTION * p.prefix_queries_total)
        assert p.ready_s is None  # Prometheus alone cannot tell


def test_sglang_reads_its_per_request_tpot_and_retractions(world: World) -> None:
    """SGLang 0.5.23 exports per-request TPOT (``sglang:request_time_per_output_token_seconds``, as
    vLLM's; its own test ``test_request_tpot_excludes_invalid_or_incomplete_decode``) and retractions,
    its preemptions (``sglang:num_retracted_requests_total``, ``metrics/collector.py``)."""
    _, obs = observe(fleet({"query_set": "sglang"}, name="sgl", model="m-sgl"), world.prom.url)
    s = obs.signals
    assert s.tpot_mean_s == pytest.approx(0.03)  # the per-request TPOT, not the ITL's 0.02
    assert s.tpot_p95_s == pytest.approx(0.025 + 0.025 * 0.95)  # TPOT_SHARES, as the vLLM pods'
    assert s.preemptions_rps == pytest.approx(0.5 * 4, rel=0.1)
    assert s.running == 2.0


@pytest.mark.parametrize(("model", "rate"), [("m-src", 5.0), ("m-gie", 3.0), ("m-old", 2.0)])
def test_arrivals_read_whichever_gateway_counter_the_scrape_has(world: World, model: str, rate: float) -> None:
    """llm-d-router v0.10.0's EPP counts each request twice, as ``llm_d_epp_request_total`` and the
    deprecated ``inference_objective_request_total`` (m-src: 5 req/s, not 10); a GIE v1.1-v1.5 EPP
    only the latter (m-gie); a v1.0 EPP ``inference_model_request_total`` (m-old)."""
    _, obs = observe(fleet(model=model), world.prom.url)
    assert obs.signals.arrival_rate_rps == pytest.approx(rate, rel=0.1)


# Flow control per EPP priority label: critical (2), standard (1), and sheddable shed to below every rank
# (-3, ``adapters.gateway_api.SHED_OFFSET``), plus a label no objective of ours carries (7).
FLOW = {"dispatched": {"2": 3.0, "1": 2.0, "-3": 1.0, "7": 5.0}, "wait_s": {"2": 0.1, "1": 0.4, "-3": 1.0, "7": 9.0},
        "rejected": {"-3": 2.0}, "queue": {"2": 0.0, "1": 4.0, "-3": 6.0, "7": 50.0}}
FLOW_MODELS = {"m-fc": "llm_d_epp", "m-fcold": "inference_extension"}


@pytest.mark.parametrize("model", list(FLOW_MODELS))
def test_flow_control_gives_each_priority_its_gateway_signals(world: World, model: str) -> None:
    """What an EPP's flow control exports (llm-d-router v0.10.0, or GIE's deprecated names) becomes each
    priority's signals, and the service's TTFT and queue include the gateway's: vLLM's TTFT starts at
    the engine (vLLM 0.33 ``vllm/v1/metrics/stats.py``), after the gateway's queue."""
    _, obs = observe(fleet(model=model), world.prom.url)
    assert obs.errors == []
    sig = obs.signals
    want = {"critical": (3.0, 3.0, 0.1, 0.0, 0.0), "standard": (2.0, 2.0, 0.4, 0.0, 4.0),
            "sheddable": (3.0, 1.0, 1.0, 2.0, 6.0)}  # arrivals = dispatched + rejected
    for p, (arrival, dispatched, wait, shed, queue) in want.items():
        got = sig.priority(p)
        assert got.arrival_rate_rps == pytest.approx(arrival, rel=0.1), p
        assert got.dispatched_rps == pytest.approx(dispatched, rel=0.1), p
        assert got.wait_s == pytest.approx(wait, rel=1e-6), p  # rate(_sum) / rate(_count): exact
        assert got.shed_rps == pytest.approx(shed, abs=0.1 * arrival), p
        assert got.queue == queue, p
    # the pod's mean TTFT 0.3 s plus the mean wait of every request dispatched, label 7's included (the
    # pod's TTFT counts them too): (3 x 0.1 + 2 x 0.4 + 1 x 1.0 + 5 x 9) / 11
    assert sig.ttft_mean_s == pytest.approx(0.3 + 47.1 / 11, rel=1e-3)
    assert sig.queue_length == 1.0 + 4.0 + 6.0  # the pod's waiting + the gateway's queues
    assert sig.priority("standard").queue_wait_s == pytest.approx(4.0 / 2.0, rel=0.1)


class GatewayRunner:
    """Answers the per-priority gateway queries from ``answers`` (kind -> series, or an exception to
    raise), the service-wide totals from ``totals``, and one h100 pod (TTFT mean 0.3 s, 1 waiting)."""

    def __init__(self, answers: dict[str, Any], totals: dict[str, Any] | None = None) -> None:
        self.answers, self.totals = answers, totals or {}
        self.seen: list[str] = []

    @staticmethod
    def kind(q: str) -> str:
        for marker, kind in (("queue_size", "queue"), ("request_total", "arrival"), ("Rejected", "shed"),
                             ("_sum{", "waited")):
            if marker in q:
                return kind
        return "dispatched"

    def query(self, promql: str, at: float | None) -> list[dict[str, Any]]:
        self.seen.append(promql)
        if "flow_control" in promql or "request_total" in promql:
            table = self.answers if "by (priority)" in promql else self.totals
            answer = table.get(self.kind(promql), [])
            if isinstance(answer, Exception):
                raise answer
            return answer
        pod = {"pod": "src-h100-0"}
        if "src-a100" in promql:
            return []
        if "time() - timestamp" in promql:
            return [{"metric": pod, "value": [0, "1"]}]
        if promql.startswith("time() - min("):
            return [{"metric": {}, "value": [0, "100"]}]
        if promql.startswith("vllm:") or "max_over_time" in promql:
            return [{"metric": pod, "value": [0, "0.5"]}]
        if "time_to_first_token_seconds_sum" in promql:
            return [{"metric": {}, "value": [0, "0.3"]}]
        if promql.startswith("sum(vllm:num_requests_waiting"):
            return [{"metric": {}, "value": [0, "1"]}]
        return []


def _per(values: dict[str, str]) -> list[dict[str, Any]]:
    return [{"metric": {"priority": p}, "value": [0, v]} for p, v in values.items()]


def _one(x: str) -> list[dict[str, Any]]:
    return [{"metric": {}, "value": [0, x]}]


def test_gateway_signals_add_a_priority_s_labels_and_never_read_a_bad_value_as_zero() -> None:
    # standard (rank 1) dispatched under two labels within one window, its band shed to -2 for part of
    # it: 2 req/s after 2.0 s and 2 req/s after 0.5 s wait 1.25 s on average, not 2.5; critical's queue
    # gauge is NaN (unknown, not 0: so is the service's queue); "+1" and "0_1" are no label an EPP writes.
    answers = {"dispatched": _per({"1": "2", "-2": "2", "2": "3", "0": "1", "+1": "9", "0_1": "9"}),
               "waited": _per({"1": "4", "-2": "1", "2": "0.3", "0": "0"}),
               "queue": _per({"1": "4", "2": "NaN", "0": "0"}),
               "arrival": _per({"1": "4", "2": "3", "0": "1"}), "shed": _per({"1": "0", "2": "0", "0": "0"})}
    runner = GatewayRunner(answers, {"waited": _one("5.3"), "dispatched": _one("8")})
    cfg = fleet()
    src = PrometheusSource(cfg.prometheus, cfg.services, runner, window_s=300.0)
    obs = src.observe(0.0)["src"]
    sig = obs.signals
    assert sig.priority("standard").wait_s == pytest.approx(5.0 / 4.0)
    assert sig.priority("standard").dispatched_rps == 4.0
    assert sig.priority("critical").wait_s == pytest.approx(0.1)
    assert sig.priority("critical").queue is None and sig.priority("standard").queue == 4.0
    assert sig.queue_length is None  # one band's queue unknown: the service's is unknown, not the pod's 1
    assert sig.ttft_mean_s == pytest.approx(0.3 + 5.3 / 8)  # the service-wide totals over the window
    # the per-priority series over a minute (GATEWAY_WINDOW_S), the totals over the 300-s window
    assert all("[60000ms]" in q for q in runner.seen if "by (priority) (rate(" in q)
    assert all("[300000ms]" in q for q in runner.seen if "flow_control" in q and "by (priority)" not in q)
    # shed: llm-d-router's QueueOutcome strings for a 429 or 503, not a client that gave up (RE2 anchors =~)
    shed = re.search(r'outcome=~"([^"]+)"', next(q for q in runner.seen if "Rejected" in q))
    assert shed is not None
    outcomes = {o: bool(re.fullmatch(shed[1], o)) for o in ("RejectedCapacity", "RejectedNoEndpoints", "EvictedTTL",
                                                            "EvictedNoEndpoints", "EvictedContextCancelled")}
    assert outcomes == {"RejectedCapacity": True, "RejectedNoEndpoints": True, "EvictedTTL": True,
                        "EvictedNoEndpoints": True, "EvictedContextCancelled": False}
    # a gateway that showed flow control and whose wait query fails: the users' TTFT is unknown too
    runner.totals = {"waited": RuntimeError("HTTP 503"), "dispatched": _one("8")}
    runner.answers = {**answers, "queue": _per({"1": "4", "2": "0", "0": "0"})}
    later = src.observe(15.0)["src"]
    assert later.errors == [] and later.signals.ttft_mean_s is None
    assert later.signals.queue_length == 1.0 + 4.0
    assert any("users' TTFT is too" in w for w in src.warnings["src"])


def test_a_sped_source_reads_the_per_priority_series_over_a_minute_of_its_own_clock() -> None:
    # GATEWAY_WINDOW_S is 60 s of the source's clock, as the window is 300 of it: at 20x both shrink
    # by 20 on the wall (3 s and 15 s), at 0.5x both grow by 2 (120 s and 600 s). The per-priority
    # window is the shorter of the two, both in wall seconds (it read min(15 wall, 60) = 15 s at 20x:
    # 300 s of the source, five times the minute; and 60 wall s = 30 source s at 0.5x).
    cfg = fleet()
    for speed, gateway, window in ((20.0, "[3000ms]", "[15000ms]"), (0.5, "[120000ms]", "[600000ms]")):
        runner = GatewayRunner({"arrival": _per({"1": "4"})})
        PrometheusSource(cfg.prometheus, cfg.services, runner, window_s=300.0, speed=speed).observe(0.0)
        per = [q for q in runner.seen if "by (priority)" in q and "ms]" in q]  # the queue is a gauge: no window
        totals = [q for q in runner.seen if "flow_control" in q and "by (priority)" not in q]
        assert per and totals
        assert all(gateway in q for q in per), per
        assert all(window in q for q in totals), totals


def test_the_gateway_wait_is_a_ratio_known_where_the_rates_speed_is_not() -> None:
    # 5.3 s waited per wall second by 8 dispatched per wall second: 0.6625 s a request, whatever the
    # speed that turns wall seconds into the source's (it divides both). Measured at 2x and where the
    # source's clock stood still (measured 0: rates unknown), the users' TTFT is the pods' 0.3 s plus
    # 0.6625 s, and no warning calls the wait unknown (it was failed there: TTFT unknown, a warning).
    cfg = fleet()
    answers = {"dispatched": _per({"1": "2"}), "waited": _per({"1": "1"}), "arrival": _per({"1": "2"}),
               "queue": _per({"1": "0", "2": "0", "0": "0"})}
    speeds = [2.0, 0.0]
    src = PrometheusSource(cfg.prometheus, cfg.services, GatewayRunner(answers, {"waited": _one("5.3"),
                           "dispatched": _one("8")}), window_s=300.0, speed=20.0,
                           measured_speed=lambda wall_s: speeds.pop(0))
    for t in (0.0, 15.0):
        sig = src.observe(t)["src"].signals
        assert sig.ttft_mean_s == pytest.approx(0.3 + 0.6625)
        assert not any("wait is unknown" in w for w in src.warnings.get("src", []))
    assert src.rate_speed is None and sig.request_rate_rps is None  # the rates themselves are unknown there


def test_a_priority_s_gateway_wait_is_known_where_the_rates_speed_is_not() -> None:
    # standard (rank 1) waited 1 s per wall second for 2 dispatched per wall second: 0.5 s a request,
    # whatever the speed (it divides both); critical (rank 2) waited 0.3 s/s for 3/s: 0.1 s. Measured
    # at 2x the rates are per second of the source (1 dispatched/s); where its clock stood still (0)
    # they are unknown, and the waits are still 0.5 s and 0.1 s (they were unknown there too).
    cfg = fleet()
    answers = {"dispatched": _per({"1": "2", "2": "3"}), "waited": _per({"1": "1", "2": "0.3"}),
               "arrival": _per({"1": "2", "2": "3"}), "queue": _per({"1": "0", "2": "0", "0": "0"})}
    speeds = [2.0, 0.0]
    src = PrometheusSource(cfg.prometheus, cfg.services, GatewayRunner(answers, {"waited": _one("1.3"),
                           "dispatched": _one("5")}), window_s=300.0, speed=20.0,
                           measured_speed=lambda wall_s: speeds.pop(0))
    sig = src.observe(0.0)["src"].signals
    assert sig.priority("standard").dispatched_rps == pytest.approx(1.0)
    for t in (0.0, 15.0):
        sig = src.observe(t)["src"].signals if t else sig
        assert sig.priority("standard").wait_s == pytest.approx(0.5)
        assert sig.priority("critical").wait_s == pytest.approx(0.1)
    assert src.rate_speed is None and sig.priority("standard").dispatched_rps is None


def test_custom_selectors_from_the_fleet_file(world: World) -> None:
    cfg = fleet({"selectors": {"src": {"service": 'model_name="m-src"', "variants": {
        "h100": {"pods": 'variant="h100"', "deployment": ""}}}}})
    _, obs = observe(cfg, world.prom.url)
    assert obs.errors == []
    assert (obs.variants["h100"].ready, obs.variants["h100"].starting) == (2, 0)  # pods counted, KSM not asked
    assert obs.variants["h100"].signals.running == 5.0


def test_pre_09_query_set_reads_a_real_v0_capture(world: World) -> None:
    cfg_old = fleet({"query_set": "vllm-pre-0.9"}, name="qwen", model="Qwen/Qwen3-0.6B")
    _, old = observe(cfg_old, world.prom.url)
    assert old.errors == []
    assert old.variants["h100"].ready == 1 and old.variants["a100"].ready == 0  # one pod, no Deployment series
    assert old.signals.kv_usage == 0.0 and old.signals.running == 0.0  # vllm:gpu_cache_usage_perc
    assert old.signals.request_rate_rps == 0.0  # a frozen capture: no traffic
    _, new = observe(fleet({"query_set": "vllm-0.11"}, name="qwen", model="Qwen/Qwen3-0.6B"), world.prom.url)
    assert new.signals.kv_usage is None  # vllm:kv_cache_usage_perc does not exist before 0.9.2
    # <= 0.8 counted prefix-cache blocks, not tokens: the warmth model is not fed block counts
    assert [(p.prefix_hits_total, p.prefix_queries_total) for p in old.pods] == [(None, None)]


@pytest.mark.parametrize(("name", "model", "detected"), [
    ("src", "m-src", "vllm-0.11"),  # FakePod: the per-request TPOT histogram of 0.11 and later
    ("v092", "m-092", "vllm-0.9.2"),  # kv_cache_usage_perc, the per-step time_per_output_token only
    ("qwen", "Qwen/Qwen3-0.6B", "vllm-pre-0.9.2"),  # the real V0-engine capture: gpu_cache_usage_perc
    ("sgl", "m-sgl", "sglang"),
])
def test_auto_detects_each_service_s_query_set_from_its_series(world: World, caplog: pytest.LogCaptureFixture,
                                                                name: str, model: str, detected: str) -> None:
    """The default ``auto`` reads each server with the set of its release range, and logs the choice."""
    with caplog.at_level("INFO", logger="autoscaler.adapters.prometheus"):
        src, obs = observe(fleet(name=name, model=model), world.prom.url)
    assert src.query_set(src.services[0]).name == detected
    assert f"{name}: query set {detected}, detected" in caplog.text
    assert obs.errors == [] and obs.signals.kv_usage is not None and obs.signals.running is not None
    if detected in ("vllm-0.11", "vllm-0.9.2"):  # both have the TPOT_SHARES histogram under their name
        assert obs.signals.tpot_p95_s == pytest.approx(0.025 + 0.025 * 0.95)


def _names(template: str) -> set[str]:
    names = set(re.findall(r"\b((?:vllm|sglang):[a-zA-Z0-9_:]+)\{", template))
    return {re.sub(r"_(bucket|count|sum)$", "", n) for n in names}


def test_query_set_metric_names_exist_in_the_documented_servers(data_dir: Path) -> None:
    d = data_dir / "vllm-metrics"
    with (d / "vllm_metrics_v0.33.0.csv").open() as f:
        v033 = {r["exposed_sample_names"] if r["exposed_sample_names"].startswith("vllm:") else r["name_as_defined"]
                for r in csv.DictReader(f)}
    with (d / "sglang_metrics_v0.5.23.csv").open() as f:
        sglang = {r["name"] for r in csv.DictReader(f)}
    # Two names the shared table lacks: the retraction counter of sglang's metrics/collector.py (a
    # comment line sits between its ``Counter(`` and ``name=``, which the table's extraction skips) and
    # the per-request TPOT histogram its own test_request_tpot_excludes_invalid_or_incomplete_decode reads.
    sglang |= {"sglang:num_retracted_requests_total", "sglang:request_time_per_output_token_seconds"}
    old = set(re.findall(r"# TYPE (vllm:\S+)", (data_dir / V0_CAPTURE).read_text()))
    old |= set(re.findall(r"`(vllm:gpu_[a-z_]+)`", (d / "METRICS.md").read_text()))  # "Renamed / removed"
    # 0.9.2-0.10: 0.33's gauges and counters, and the per-step TPOT histogram removed since (METRICS.md).
    v092 = (v033 - {"vllm:inter_token_latency_seconds", "vllm:request_time_per_output_token_seconds"}) | {
        "vllm:time_per_output_token_seconds"}
    for name, known in (("vllm-0.11", v033), ("vllm-0.9.2", v092), ("vllm-pre-0.9.2", old), ("sglang", sglang)):
        qs = QUERY_SETS[name]
        used = set().union(*(_names(t) for t in qs.signals.values())) | {qs.kv_usage, qs.waiting, qs.running}
        used |= {n for n in (qs.prefix_hits, qs.prefix_queries) if n is not None}
        assert used <= known, f"{name}: unknown {sorted(used - known)}"


def test_bearer_and_basic_auth_are_sent(world: World) -> None:
    token = world.work / "token"
    token.write_text("s3cret\n")
    password = world.work / "password"
    password.write_text("pw")
    for auth, header in (({"bearer_token_file": str(token)}, "Bearer s3cret"),
                         ({"basic_auth": {"username": "u", "password_file": str(password)}},
                          "Basic " + base64.b64encode(b"u:pw").decode())):
        proxy = Proxy(world.prom.url, require=header)
        try:
            _, with_auth = observe(fleet(auth), proxy.url)
            _, without = observe(fleet(), proxy.url)
        finally:
            proxy.close()
        assert with_auth.errors == [] and with_auth.signals.running == 6.0
        assert without.errors and all("HTTP 401" in e for e in without.errors)


@pytest.mark.slow
def test_tls_verification_custom_ca_and_verify_off(world: World) -> None:
    cert, key = self_signed(world.work)
    proxy = Proxy(world.prom.url, tls=(cert, key))
    try:
        _, strict = observe(fleet(), proxy.url)
        _, with_ca = observe(fleet({"ca_file": str(cert)}), proxy.url)
        _, off = observe(fleet({"tls_verify": False}), proxy.url)
    finally:
        proxy.close()
    assert strict.errors and all("TLS error" in e for e in strict.errors)
    assert with_ca.errors == [] and with_ca.signals.running == 6.0
    assert off.errors == [] and off.signals.running == 6.0


def test_speed_shrinks_windows_and_divides_rates() -> None:
    cfg = fleet()

    class Runner:
        def __init__(self) -> None:
            self.seen: list[str] = []

        def query(self, promql: str, at: float | None) -> list[dict[str, Any]]:
            self.seen.append(promql)
            if "time() - timestamp" in promql:
                return [{"metric": {"pod": "src-h100-0"}, "value": [0, "1"]}]
            if promql.startswith("histogram_quantile(0.95"):
                return [{"metric": {}, "value": [0, "0.5"]}]
            return [{"metric": {}, "value": [0, "3"]}] if promql.startswith("sum(rate(") else []

    runner = Runner()
    src = PrometheusSource(cfg.prometheus, cfg.services, runner, window_s=cfg.controller.window_s, speed=4.0)
    obs = src.observe(0.0)["src"]
    assert any("[750ms]" in q for q in runner.seen)  # 3 s of the source's time at 4x = 0.75 wall seconds
    # 3 completions per wall second from a source running 4x faster: 0.75 per second of its own clock
    assert obs.signals.request_rate_rps == 0.75
    assert obs.signals.ttft_p95_s == 0.5  # a latency is not a rate


def test_a_failed_or_absurd_prefix_counter_query_is_a_warning_not_a_hold() -> None:
    # Only the cache-warmth model reads the per-pod prefix counters: their failure must not hold the loop.
    class Runner:
        def query(self, promql: str, at: float | None) -> list[dict[str, Any]]:
            pod = {"pod": "src-h100-0"}
            if "src-a100" in promql:  # the other variant has no pods
                return []
            if "vllm:prefix_cache_hits_total{" in promql and promql.startswith("sum by"):
                raise RuntimeError("HTTP 503")
            if "vllm:prefix_cache_queries_total{" in promql and promql.startswith("sum by"):
                return [{"metric": pod, "value": [0, "-5"]}]
            if "time() - timestamp" in promql:
                return [{"metric": pod, "value": [0, "1"]}]
            if promql.startswith("vllm:") or "max_over_time" in promql:
                return [{"metric": pod, "value": [0, "0.5"]}]
            return []

    cfg = fleet()
    src = PrometheusSource(cfg.prometheus, cfg.services, Runner(), window_s=cfg.controller.window_s)
    obs = src.observe(0.0)["src"]
    assert obs.errors == []
    assert [(p.name, p.prefix_hits_total, p.prefix_queries_total) for p in obs.pods] == [("src-h100-0", None, None)]
    warnings = " | ".join(src.warnings["src"])
    assert "src/h100 pods (prefix_hits): RuntimeError: HTTP 503" in warnings
    assert "prefix_queries counter -5 ignored" in warnings


def test_a_tick_waits_one_deadline_for_a_prometheus_that_never_answers() -> None:
    # Issue 31 item 6: the breaking pass's Prometheus accepted and never answered; each query was
    # bounded, the tick was not (53 s). Here the pod queries answer and every signal query hangs
    # until the test releases it, after observe() returns: observe must not wait for them.
    released = threading.Event()
    hung: list[str] = []

    class Runner:
        def query(self, promql: str, at: float | None) -> list[dict[str, Any]]:
            pod = {"pod": "src-h100-0"}
            if "__name__=~" in promql:  # which server: a vLLM of 0.11 or later
                return [{"metric": {"__name__": "vllm:inter_token_latency_seconds_count"}, "value": [0, "1"]}]
            if "src-a100" in promql or "kube_deployment" in promql:
                return []
            if 'pod=~"src-h100-.*"' in promql:  # the first round: the variant's pods
                return [{"metric": pod, "value": [0, "1" if "time() - timestamp" in promql else "0.5"]}]
            hung.append(promql)
            released.wait(120)  # a generous safety net: the assertion below fails long before
            return []

    cfg = fleet({"max_concurrency": 2})
    src = PrometheusSource(cfg.prometheus, cfg.services, Runner(), window_s=cfg.controller.window_s, deadline_s=0.5)
    try:
        obs = src.observe(0.0)["src"]
        assert not released.is_set()
        assert hung  # the signal queries were sent and did not answer
    finally:
        released.set()
    # the pods (answered) are used; every unanswered signal is unknown, with the deadline as the reason
    assert obs.variants["h100"].counts_known and obs.variants["h100"].ready == 1
    assert obs.signals.request_rate_rps is None and obs.signals.ttft_p95_s is None
    assert obs.errors and all("no answer within the observation's deadline (0.5 s)" in e for e in obs.errors)
    assert any(e.startswith("src history:") for e in obs.errors)


@pytest.mark.parametrize(("section", "message"), [
    ({"queries": {"nope": "sum(x{$sel})"}}, "unknown signal 'nope'"),
    ({"queries": {"running": "sum(vllm:num_requests_running)"}}, "must contain $sel"),
    ({"queries": {"running": "sum(x{$sel}[$range])"}}, "unknown placeholder"),
    ({"selectors": {"other": {}}}, "unknown service 'other'"),
    ({"selectors": {"src": {"variants": {"l4": {}}}}}, "unknown variant"),
    ({"bearer_token_file": "t", "basic_auth": {"username": "u", "password_file": "p"}}, "not both"),
])
def test_bad_prometheus_section_is_one_line_error(section: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        fleet(section)


def test_unreadable_credentials_are_errors(tmp_path: Path) -> None:
    with pytest.raises(PrometheusError, match="bearer_token_file"):
        connect(fleet({"bearer_token_file": str(tmp_path / "missing")}).prometheus, "http://127.0.0.1:9")
    with pytest.raises(PrometheusError, match="ca_file"):
        connect(fleet({"ca_file": str(tmp_path / "missing.pem")}).prometheus, "https://127.0.0.1:9")
