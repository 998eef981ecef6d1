"""``PrometheusSource`` reads a service's prefill/decode pools from a real Prometheus: each pool variant's
Deployment counts and each pool's signals over the pods labelled ``llm_d_ai_role`` (llm-d's
``llm-d.ai/role``), as ``ServiceObservation.pools``."""

from __future__ import annotations

import time
from typing import Any

import pytest
from support.promcompare import Counting, assert_same
from support.promserver import FakeDeployment, FakeExporter, FakePod

from autoscaler.adapters.prometheus import connect
from autoscaler.config import FleetConfig
from autoscaler.config.loading import parse_config
from autoscaler.faults.promserver import PromServer
from autoscaler.state import ServiceObservation
from autoscaler.wiring import build_source

SLO = {"interactive": {"ttft_s": 2.0, "itl_s": 0.1}, "batch": {"ttft_s": 20.0, "itl_s": 0.25}}


def _variant(name: str) -> dict[str, Any]:
    return {"name": name, "gpu": "H100-SXM", "price_per_gpu_hour": 2.0, "min_replicas": 1, "max_replicas": 4,
            "kv_cache_tokens": 400_000, "profile": "llama-3-8b/h100-sxm"}


def _observe(tmp_path: Any, exporter: FakeExporter, cfg: FleetConfig, service: str) -> ServiceObservation:
    """``service``'s observation by the Prometheus source once a real Prometheus has scraped ``exporter``
    for more than one 3-s window."""
    prom = PromServer(tmp_path / "prom", [exporter.target])
    try:
        prom.start()
        prom.wait_for("count(up == 1)", lambda r: bool(r) and r[0]["value"][1] == "1")
        time.sleep(4.5)  # more than one 3 s window of scrapes
        prom.wait_for("min(count_over_time(up[3s])) >= 2", bool)  # two scrapes a target in the window, however loaded
        src = build_source(cfg, connect(cfg.prometheus, prom.url))
        return src.observe(0.0)[service]
    finally:
        prom.stop()
        exporter.close()


@pytest.mark.slow
def test_each_pool_is_read_by_its_role_label(tmp_path: Any) -> None:
    pods = [FakePod("pd-pre-0", "m-pd", variant="pre", running=2, waiting=4, kv=0.3, rate_rps=4, role="prefill"),
            FakePod("pd-dec-0", "m-pd", variant="dec", running=10, kv=0.6, rate_rps=3, role="decode"),
            FakePod("pd-dec-1", "m-pd", variant="dec", running=20, kv=0.4, rate_rps=5, role="decode"),
            # a pod named as the decode variant's but labelled prefill is not the decode pool's
            FakePod("pd-dec-9", "m-pd", variant="dec", running=99, kv=0.9, rate_rps=1, role="prefill")]
    exporter = FakeExporter([*pods, FakeDeployment("pd-pre", 1, 1), FakeDeployment("pd-dec", 3, 2)])
    cfg = parse_config({"services": [{"name": "pd", "model": "m-pd", "slo": SLO, "variants": [],
                                      "roles": {"prefill": [_variant("pre")], "decode": [_variant("dec")]}}],
                        "controller": {"tick_s": 1, "window_s": 3}}, "<roles>")
    obs = _observe(tmp_path, exporter, cfg, "pd")
    assert obs.errors == []
    assert obs.variants == {}
    pre, dec = obs.pools["prefill"], obs.pools["decode"]
    assert (pre.variants["pre"].ready, pre.variants["pre"].starting) == (1, 0)
    assert (dec.variants["dec"].ready, dec.variants["dec"].starting) == (2, 1)  # kube-state-metrics: 3 asked, 2 ready
    assert pre.signals.running == 2 and pre.signals.queue_length == 4 and pre.signals.kv_usage == pytest.approx(0.3)
    assert dec.signals.running == 30  # pd-dec-9 (labelled prefill) left out
    assert dec.signals.kv_usage == pytest.approx(0.5)  # the mean of 0.6 and 0.4
    assert dec.variants["dec"].signals.running == 30
    assert dec.signals.request_rate_rps == pytest.approx(8.0, rel=0.25)  # 3 + 5 req/s


@pytest.mark.slow
def test_the_service_wide_signals_leave_the_prefill_pods_out(tmp_path: Any) -> None:
    # An aggregated pod, a decode pod and a prefill pod: the service-wide rates read the pods that
    # finish requests (aggregated + decode), so the prefill pod's one-token requests are not counted
    # again: 2 + 3 = 5 requests/s, not 9 (13 with the pod below). A pod named as the aggregated
    # variant's but labelled prefill is left out by the query's ``llm_d_ai_role!="prefill"``. The
    # gauges read every pod (a request is in flight on one pod at a time): running 5 + 2 + 10 + 50.
    pods = [FakePod("mix-agg-0", "m-mix", variant="agg", running=5, kv=0.2, rate_rps=2),
            FakePod("mix-pre-0", "m-mix", variant="pre", running=2, kv=0.9, rate_rps=4, role="prefill"),
            FakePod("mix-dec-0", "m-mix", variant="dec", running=10, kv=0.6, rate_rps=3, role="decode"),
            FakePod("mix-agg-9", "m-mix", variant="agg", running=50, kv=0.9, rate_rps=4, role="prefill")]
    exporter = FakeExporter([*pods, FakeDeployment("mix-agg", 2, 2), FakeDeployment("mix-pre", 1, 1),
                             FakeDeployment("mix-dec", 1, 1)])
    cfg = parse_config({"services": [{"name": "mix", "model": "m-mix", "slo": SLO, "variants": [_variant("agg")],
                                      "roles": {"prefill": [_variant("pre")], "decode": [_variant("dec")]}}],
                        "controller": {"tick_s": 1, "window_s": 3}}, "<roles>")
    obs = _observe(tmp_path, exporter, cfg, "mix")
    assert obs.errors == []
    assert obs.signals.running == 67
    assert obs.signals.kv_usage == pytest.approx(0.65)  # the mean of 0.2, 0.9, 0.6 and 0.9
    assert obs.signals.request_rate_rps == pytest.approx(5.0, rel=0.25)
    assert obs.pools["prefill"].signals.running == 2  # the pool is still read apart
    assert sorted(p.name for p in obs.pods) == ["mix-agg-0", "mix-agg-9", "mix-dec-0", "mix-pre-0"]


@pytest.mark.slow
def test_pools_read_from_the_per_pod_aggregation_equal_their_own_queries(tmp_path: Any) -> None:
    """Two services with pools (one with an aggregated variant too), batched: read from the per-pod
    aggregation (``prometheus.aggregate``, the role label's matchers evaluated in the client) and
    with each scope's query sent apart, every field of both observations agrees (floats within
    1e-12: the same series added in another order), and the aggregation sent no union branch."""

    from autoscaler.adapters.prometheus import LiveRunner, PrometheusSource

    pods = [FakePod("pd-pre-0", "m-pd", variant="pre", running=2, waiting=4, kv=0.3, rate_rps=4, role="prefill"),
            FakePod("pd-dec-0", "m-pd", variant="dec", running=10, kv=0.6, rate_rps=3, role="decode"),
            FakePod("pd-dec-1", "m-pd", variant="dec", running=20, kv=0.4, rate_rps=5, role="decode"),
            FakePod("pd-dec-9", "m-pd", variant="dec", running=99, kv=0.9, rate_rps=1, role="prefill"),
            FakePod("mix-agg-0", "m-mix", variant="agg", running=5, kv=0.2, rate_rps=2),
            FakePod("mix-pre-0", "m-mix", variant="pre", running=2, kv=0.9, rate_rps=4, role="prefill"),
            FakePod("mix-dec-0", "m-mix", variant="dec", running=10, kv=0.6, rate_rps=3, role="decode"),
            FakePod("mix-agg-9", "m-mix", variant="agg", running=50, kv=0.9, rate_rps=4, role="prefill")]
    exporter = FakeExporter([*pods, FakeDeployment("pd-pre", 1, 1), FakeDeployment("pd-dec", 3, 2),
                             FakeDeployment("mix-agg", 2, 2)])
    roles = {"prefill": [_variant("pre")], "decode": [_variant("dec")]}
    cfg = parse_config({"services": [{"name": "pd", "model": "m-pd", "slo": SLO, "variants": [], "roles": roles},
                                     {"name": "mix", "model": "m-mix", "slo": SLO, "variants": [_variant("agg")],
                                      "roles": roles}],
                        "controller": {"tick_s": 1, "window_s": 3}}, "<roles>")
    prom = PromServer(tmp_path / "prom", [exporter.target])
    try:
        prom.start()
        prom.wait_for("count(up == 1)", lambda r: bool(r) and r[0]["value"][1] == "1")
        time.sleep(4.5)
        prom.wait_for("min(count_over_time(up[3s])) >= 2", bool)  # two scrapes a target in the window, however loaded
        at = time.time() - 0.5
        got = {}
        for aggregate, batch in ((True, True), (False, False)):
            pc = cfg.prometheus.model_copy(update={"batch": batch, "aggregate": aggregate})
            runner = Counting(LiveRunner(connect(pc, prom.url)))
            src = PrometheusSource(pc, cfg.services, runner, window_s=3.0, clock=lambda _: at)
            src.observe(0.0)
            got[aggregate] = (src.observe(1.0), runner.sent)
    finally:
        prom.stop()
        exporter.close()
    (agg, sent), (apart, _) = got[True], got[False]
    assert_same(agg, apart)
    assert agg["pd"].errors == [] and agg["mix"].errors == []
    assert agg["mix"].signals.running == 67 and agg["pd"].pools["decode"].signals.running == 30
    assert agg["mix"].signals.request_rate_rps == pytest.approx(5.0, rel=0.25)
    assert any(q.startswith("sum by (llm_d_ai_role, model_name, namespace, pod)") for q in sent)
