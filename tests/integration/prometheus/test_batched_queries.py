"""Batched queries (``prometheus.batch``) against a real Prometheus: a tick over several services reads
the same observations as one query per service and variant (every value, unknown, warning and
error), in a number of queries that does not grow with the services; one service's bad series
stays its own."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support.promcompare import Counting, assert_same
from support.promserver import FakeDeployment, FakeExporter, FakeFlowControl, FakeGateway, FakePod, FakeSGLangPod

from autoscaler.adapters import prometheus
from autoscaler.adapters.prometheus import LiveRunner, PrometheusSource, connect, split, union
from autoscaler.config import FleetConfig
from autoscaler.config.loading import parse_config
from autoscaler.faults.promserver import PromServer

SLO = {"interactive": {"ttft_s": 2.0, "itl_s": 0.1}, "batch": {"ttft_s": 20.0, "itl_s": 0.25}}
VARIANTS = (("h100", "H100-SXM", "llama-3-8b/h100-sxm"), ("a100", "A100-80GB", "llama-3-8b/a100-80gb"),
            ("b100", "A100-80GB", "llama-3-8b/a100-80gb"))
SERVICES = [f"s{i}" for i in range(6)]
WINDOW_S = 3.0


def fleet(services: list[str], prometheus: dict[str, Any]) -> FleetConfig:
    """``services`` (model ``m-<name>``), three variants each; staleness 30 s."""
    return parse_config({
        "services": [{"name": s, "model": f"m-{s}", "slo": SLO, "variants": [
            {"name": v, "gpu": gpu, "price_per_gpu_hour": 2.0, "min_replicas": 0, "max_replicas": 4,
             "kv_cache_tokens": 400_000, "profile": profile} for v, gpu, profile in VARIANTS]} for s in services],
        "controller": {"tick_s": 1, "window_s": WINDOW_S},
        "prometheus": {"staleness_s": 30.0, **prometheus},
    }, "<test>")


@dataclass
class World:
    prom: PromServer
    at: float  # the unix time both paths evaluate at


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    t0 = time.time()
    items: list[Any] = [
        # s0: vLLM 0.11 in every variant, two pods in h100, kube-state-metrics for h100, a gateway
        FakePod("s0-h100-0", "m-s0", running=2, waiting=1, kv=0.3, rate_rps=4),
        FakePod("s0-h100-1", "m-s0", running=3, kv=0.5, rate_rps=6),
        FakePod("s0-a100-0", "m-s0", variant="a100", running=1, kv=0.1, rate_rps=2),
        FakePod("s0-b100-0", "m-s0", variant="b100", running=4, kv=0.7, rate_rps=1),
        FakeDeployment("s0-h100", 3, 2),
        FakeGateway("m-s0", 5.0, ("llm_d_epp_request_total", "inference_objective_request_total")),
        # s1: SGLang (detected), h100 alone: a100 and b100 have no series
        FakeSGLangPod("s1-h100-0", "m-s1", running=2, rate_rps=4),
        # s2: a stale pod (a100) and one with KV usage above 1 (b100), beside a good one
        FakePod("s2-h100-0", "m-s2", running=1, kv=0.2, rate_rps=3),
        FakePod("s2-a100-0", "m-s2", variant="a100", running=5, kv=0.6, stamp=t0 - 120),
        FakePod("s2-b100-0", "m-s2", variant="b100", running=1, kv=1.5, rate_rps=1),
        # s3: no pod series at all; kube-state-metrics says 2 replicas, none ready
        FakeDeployment("s3-h100", 2, 0),
        # s4: a vLLM of 0.9.2-0.10 (detected) behind flow control
        FakePod("s4-h100-0", "m-s4", running=1, kv=0.2, rate_rps=2, tpot_metric="vllm:time_per_output_token_seconds"),
        FakeFlowControl("m-s4", "s4", "llm_d_epp", dispatched={"2": 3.0, "1": 2.0}, wait_s={"2": 0.1, "1": 0.4},
                        rejected={"1": 1.0}, queue={"2": 0.0, "1": 4.0}),
        # s5: two pods of one variant, a GIE v1.0 gateway
        FakePod("s5-h100-0", "m-s5", running=2, kv=0.4, rate_rps=5),
        FakePod("s5-h100-1", "m-s5", running=2, kv=0.2, rate_rps=5),
        FakeGateway("m-s5", 2.0, ("inference_model_request_total",)),
    ]
    exporter = FakeExporter(items)
    prom = PromServer(tmp_path_factory.mktemp("batched") / "prom", [exporter.target])
    try:
        prom.start()
        prom.wait_for("count(up == 1)", lambda r: bool(r) and r[0]["value"][1] == "1")
        time.sleep(WINDOW_S + 2.5)  # more than one window of 1-s scrapes
        prom.wait_for("min(count_over_time(up[3s])) >= 2", bool)  # two scrapes a target in the window, however loaded
        yield World(prom, time.time() - 0.5)
    finally:
        prom.stop()
        exporter.close()


def source(world: World, services: list[str], batch: bool, fail: str | None = None, deadline_s: float | None = None,
           **prometheus: Any) -> tuple[PrometheusSource, Counting]:
    cfg = fleet(services, {"batch": batch, **prometheus})
    runner = Counting(LiveRunner(connect(cfg.prometheus, world.prom.url)), fail)
    src = PrometheusSource(cfg.prometheus, cfg.services, runner, window_s=WINDOW_S, clock=lambda _: world.at,
                           deadline_s=deadline_s)
    return src, runner


@pytest.mark.parametrize("aggregate", [True, False])
def test_batched_observations_equal_per_service_ones(world: World, aggregate: bool) -> None:
    """Batched, each scope's pod-scoped signals read from the per-pod aggregation (``aggregate``) or
    as a branch of the union: the observations of the queries sent apart (exactly, without the
    aggregation; within ``support.promcompare.REL`` with it, the same series added in another order)."""
    batched, b_runner = source(world, SERVICES, batch=True, aggregate=aggregate)
    apart, a_runner = source(world, SERVICES, batch=False)
    for tick in range(2):  # the first detects each service's query set, the second reads with it
        b, a = batched.observe(float(tick)), apart.observe(float(tick))
        assert_same(b, a, exact=not aggregate)
        assert batched.warnings == apart.warnings
        assert {k: q.name for k, q in batched.detected.items()} == {k: q.name for k, q in apart.detected.items()}
    # What the fixture holds is what both read, so the comparison is not of two empty observations.
    assert {k: q.name for k, q in batched.detected.items()} == {
        "s0": "vllm-0.11", "s1": "sglang", "s2": "vllm-0.11", "s4": "vllm-0.9.2", "s5": "vllm-0.11"}
    s0 = b["s0"]
    assert s0.errors == [] and s0.signals.running == 10.0 and s0.variants["h100"].signals.running == 5.0
    assert (s0.variants["h100"].ready, s0.variants["h100"].starting) == (2, 1)
    assert s0.signals.arrival_rate_rps == pytest.approx(5.0, rel=0.1)
    assert b["s1"].signals.running == 2.0 and b["s1"].variants["a100"].signals.running is None
    assert any("s1/a100: no series match the selectors" in w for w in batched.warnings["s1"])
    assert any("pod s2-a100-0 ignored: newest sample" in w for w in batched.warnings["s2"])
    assert any("pod s2-b100-0 ignored: vllm:kv_cache_usage_perc=1.5" in w for w in batched.warnings["s2"])
    assert b["s2"].signals.running == 1.0  # the good pod alone
    assert b["s3"].signals.running is None and (b["s3"].variants["h100"].ready, b["s3"].variants["h100"].starting) == (
        0, 2)
    assert b["s4"].signals.priority("standard").queue == 4.0
    assert b["s5"].signals.arrival_rate_rps == pytest.approx(2.0, rel=0.1)
    assert len(b_runner.sent) < len(a_runner.sent) / 5


# Per tick with the query set known: the per-pod inventory (age, running, waiting, kv, kv_max,
# waiting_max, prefix_hits, prefix_queries, and kube-state-metrics' spec and ready), the pod-scoped
# signals (autoscaler.promql: 20 per vLLM set less the gateway's arrivals, read service-wide), and the
# service-wide ones (arrivals, five per-priority gateway queries, two gateway totals, the history).
INVENTORY, POD_SIGNALS, SERVICE_WIDE = 10, 19, 1 + 5 + 2 + 1


@pytest.mark.parametrize("n", [2, 4, 6])
def test_queries_per_tick_do_not_grow_with_the_services(world: World, n: int) -> None:
    batched, runner = source(world, SERVICES[:n], batch=True, aggregate=False)
    batched.observe(0.0)
    first = len(runner.sent)
    runner.sent.clear()
    batched.observe(1.0)
    # s3 exports no pod series, so its query set is looked for again each tick: one detection query
    # for every service still undetected (the first tick: all of them)
    again = 1 if "s3" in SERVICES[:n] else 0
    assert len(runner.sent) == again + INVENTORY + POD_SIGNALS + SERVICE_WIDE
    assert first == 1 + INVENTORY + POD_SIGNALS + SERVICE_WIDE
    apart, a_runner = source(world, SERVICES[:n], batch=False)
    apart.observe(0.0)
    a_runner.sent.clear()
    apart.observe(1.0)
    assert len(a_runner.sent) > n * INVENTORY * 3  # per variant: the inventory alone


# The per-pod aggregation of vllm-0.11's pod-scoped signals: one query per distinct term (the request,
# prompt- and generation-token rates, the finished requests' prompt and generation tokens; TTFT, ITL
# and TPOT buckets, each for both quantiles; TTFT's and TPOT's _sum and _count; KV usage's sum and
# count; waiting; running; the two prefix-cache counters; successes; aborts; preemptions).
AGGREGATED_POD_SIGNALS = 5 + 3 + 4 + 2 + 1 + 1 + 2 + 3


@pytest.mark.parametrize("n", [2, 4, 6])
def test_aggregated_queries_per_tick_do_not_grow_with_the_services(world: World, n: int) -> None:
    batched, runner = source(world, SERVICES[:n], batch=True, query_set="vllm-0.11")
    batched.observe(0.0)
    runner.sent.clear()
    obs = batched.observe(1.0)
    assert len(runner.sent) == INVENTORY + AGGREGATED_POD_SIGNALS + SERVICE_WIDE
    pods = [q for q in runner.sent if q.startswith("sum by (model_name, namespace, pod")]
    assert len(pods) == AGGREGATED_POD_SIGNALS - 1  # KV usage's count is "count by"
    assert not any("__autoscaler_scope" in q for q in pods)
    assert obs["s0"].signals.running == 10.0 and obs["s0"].variants["h100"].signals.running == 5.0


def test_one_service_sends_the_queries_it_always_did(world: World) -> None:
    batched, b_runner = source(world, ["s0"], batch=True)
    apart, a_runner = source(world, ["s0"], batch=False)
    assert_same(batched.observe(0.0), apart.observe(0.0))
    assert sorted(b_runner.sent) == sorted(a_runner.sent)
    assert not any("__autoscaler_scope" in q for q in b_runner.sent)


def test_a_quantile_of_an_empty_first_bucket_is_read_as_prometheus_reads_it(world: World) -> None:
    """``histogram_quantile(0, ...)`` over buckets whose first holds no observation (TTFT's 0.1-s bucket,
    ``support.promserver.TTFT_SHARES``): rank 0 falls in it, and Prometheus's 0 / 0 there is NaN. The
    client-side quantile raised ZeroDivisionError in the task settling the tick's aggregated scopes, so
    every one of them (every service's every pod-scoped signal) read "timed out" at the deadline."""
    ttft = "histogram_quantile(0, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket{$sel}[$window])))"
    override: dict[str, Any] = {"queries": {"ttft_p50_s": ttft}, "query_set": "vllm-0.11"}
    batched, _ = source(world, ["s0", "s5"], batch=True, deadline_s=20.0, **override)
    apart, _ = source(world, ["s0", "s5"], batch=False, deadline_s=20.0, **override)
    b = batched.observe(0.0)
    assert_same(b, apart.observe(0.0))
    assert b["s0"].errors == [] and b["s5"].errors == []
    assert b["s0"].signals.running == 10.0 and b["s5"].signals.running == 4.0


def test_a_scope_the_aggregation_cannot_read_fails_alone(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """An error computing one scope's value from the per-pod answers is that scope's error: it was raised
    in a pool task, seen by no one, and left that scope and every one settled after it waiting for the
    deadline."""
    real = prometheus.scope_value

    def failing(decomposed: Any, answers: Any, rest: Any, names: Any, pod_label: str) -> float | None:
        if "s0-h100-0" in names:
            raise ZeroDivisionError("float division by zero")
        return real(decomposed, answers, rest, names, pod_label)

    monkeypatch.setattr(prometheus, "scope_value", failing)
    batched, _ = source(world, ["s0", "s5"], batch=True, deadline_s=20.0, query_set="vllm-0.11")
    b = batched.observe(0.0)
    assert any(e.startswith("s0 running: per-pod aggregation: ") for e in b["s0"].errors), b["s0"].errors
    assert b["s0"].variants["a100"].signals.running == 1.0  # a scope without that pod
    assert b["s5"].errors == [] and b["s5"].signals.running == 4.0


def test_one_services_bad_series_stays_its_own(world: World) -> None:
    """A ``kv_usage`` override that matches one-to-one only where one pod is in scope fails (HTTP 422,
    many-to-many) where two are: the batched query is refused as a whole and sent again branch by
    branch, so the scopes of one pod keep their value and the others have the error, as apart."""
    override: dict[str, Any] = {
        "queries": {"kv_usage": "vllm:kv_cache_usage_perc{$sel} / on() vllm:num_requests_running{$sel}"}}
    batched, b_runner = source(world, SERVICES, batch=True, **override)
    apart, _ = source(world, SERVICES, batch=False, **override)
    for tick in range(2):
        b = batched.observe(float(tick))
        assert_same(b, apart.observe(float(tick)))
    # one pod in scope: 0.1 / 1 (s0's a100), 0.2 / 1 (s4); two pods (s0, s0's h100, s5): the error
    assert b["s0"].variants["a100"].signals.kv_usage == pytest.approx(0.1)
    assert b["s4"].signals.kv_usage == pytest.approx(0.2)
    for scope in ("s0 kv_usage", "s0/h100 kv_usage", "s5 kv_usage"):
        assert any(e.startswith(f"{scope}: HTTP 422") for e in b[scope.split()[0].split("/")[0]].errors), scope
    assert b["s5"].signals.running == 4.0  # the other signals of the failing scopes are read
    batched_kv = [q for q in b_runner.sent if "vllm:kv_cache_usage_perc{" in q and " / on() " in q]
    assert any("__autoscaler_scope" in q for q in batched_kv)  # tried batched first


def test_a_failed_batched_query_fails_that_signal_everywhere_as_apart(world: World) -> None:
    """A transport failure of one signal's query: every scope has that signal unknown and the same
    error line as when each scope's query failed apart; the other signals are read. (The services of
    one query set: the fake fails by query text, and a real failure is not the text's.)"""
    fail, names = "vllm:num_preemptions_total", ["s0", "s2", "s5"]
    batched, _ = source(world, names, batch=True, fail=fail)
    apart, _ = source(world, names, batch=False, fail=fail)
    b = batched.observe(0.0)
    assert_same(b, apart.observe(0.0))
    assert "s0 preemptions_rps: connection failed: Connection refused" in b["s0"].errors
    assert "s5/h100 preemptions_rps: connection failed: Connection refused" in b["s5"].errors
    assert b["s0"].signals.running == 10.0


def test_long_batched_queries_go_in_a_post_body(world: World, tmp_path: Path) -> None:
    """Sixty services' union runs past ``POST_ABOVE``: it is POSTed, and Prometheus answers it."""
    names = [f"s{i}" for i in range(60)]
    batched, runner = source(world, names, batch=True, query_set="vllm-0.11")
    obs = batched.observe(0.0)
    assert max(len(q) for q in runner.sent) > 20_000
    assert obs["s0"].signals.running == 10.0 and obs["s5"].signals.running == 4.0
    assert obs["s59"].signals.running is None and obs["s59"].errors == []


def test_split_gives_each_branch_its_series_and_refuses_an_untagged_one() -> None:
    answer = [{"metric": {"__autoscaler_scope": "1", "pod": "p"}, "value": [1, "2"]},
              {"metric": {"__autoscaler_scope": "0"}, "value": [1, "3"]},
              {"metric": {"__autoscaler_scope": "1", "pod": "q"}, "value": [1, "4"]}]
    assert split(answer, 3) == [[{"metric": {}, "value": [1, "3"]}],
                                [{"metric": {"pod": "p"}, "value": [1, "2"]},
                                 {"metric": {"pod": "q"}, "value": [1, "4"]}],
                                []]
    with pytest.raises(KeyError):
        split([{"metric": {"pod": "p"}, "value": [1, "2"]}], 2)
    with pytest.raises(IndexError):
        split([{"metric": {"__autoscaler_scope": "2"}, "value": [1, "2"]}], 2)
    assert [union(["a", "b", "c"]).count(f'"__autoscaler_scope", "{i}"') for i in range(4)] == [1, 1, 1, 0]
