"""Admission at the simulated gateway (autoscaler.simulator.gateway), the clients' retries, the
policies (controllers.admission) and the published document (autoscaler.loop.admission).

The gateway tests use one replica with ``max_num_seqs`` 1 and a saturation depth of 0, so the replica
runs one request and holds at most one more: every later arrival waits at the gateway, and the order
in which requests get their first token is the gateway's dispatch order.
"""

from __future__ import annotations

import json
import math
import urllib.request
from collections import Counter

import pytest

from autoscaler.adapters.simulator import SimAdmissionSink
from autoscaler.config import GatewayConfig
from autoscaler.loop.actuate import ActuationStatus
from autoscaler.loop.admission import AdmissionDocument, check_thresholds, parse_document, parse_itl_budgets
from autoscaler.loop.export import serve
from autoscaler.report import summarize
from autoscaler.simulate import SimulationRun, run_simulation
from autoscaler.simulator.engine import COMPLETED, SHED
from autoscaler.simulator.fleet import FleetSimulator
from autoscaler.state import ServiceEstimate, Signals
from autoscaler.workload.types import BATCH, INTERACTIVE, Request, Workload
from controllers.admission import PIDAdmission, PlanAdmission, build_admission, wait_budgets

ONE_AT_A_TIME = {"engine": {"max_num_seqs": 1, "max_num_batched_tokens": 8192},
                 "gateway": {"queue_depth_threshold": 0}}


def req(t: float, priority: int, out: int = 10, workflow: int | None = None, step: int | None = None) -> Request:
    cls = BATCH if priority == 0 else INTERACTIVE
    return Request(arrival_s=t, input_tokens=100, output_tokens=out, request_class=cls, priority=priority,
                   workflow_id=workflow, step=step)


def gateway_sim(make_fleet, requests: list[Request], clients: dict | None = None, **gateway) -> FleetSimulator:
    sim_cfg = {"gateway": {"queue_depth_threshold": 0, **gateway}, "clients": clients or {"max_retries": 0}}
    cfg = make_fleet(1, simulator=sim_cfg, engine=ONE_AT_A_TIME["engine"])
    return FleetSimulator(cfg, Workload(requests, source="test:gateway"), admission=True)


def first_token_order(sim: FleetSimulator, rids: list[int]) -> list[int]:
    return sorted(rids, key=lambda i: sim.final[i].t_first)


def test_dispatch_is_by_priority_then_arrival(make_fleet) -> None:
    # r0 runs (1000 output tokens), r1 waits in the replica; r2..r6 wait at the gateway.
    reqs = [req(0.0, 0, out=1000), req(0.01, 0), req(0.02, 0), req(0.03, 1), req(0.04, 2), req(0.05, 0),
            req(0.06, 2)]
    sim = gateway_sim(make_fleet, reqs)
    sim.run_until(0.07)
    assert sim.services["svc"].flow.queued == [2, 1, 2]
    sim.run_until(10_000)
    assert sim.done
    assert first_token_order(sim, [2, 3, 4, 5, 6]) == [4, 6, 3, 2, 5]  # critical, standard, sheddable; FCFS within


def test_pods_time_from_their_own_arrival_and_the_gateway_exports_the_wait(make_fleet) -> None:
    """vLLM's TTFT and e2e start when the engine takes the request in (vLLM 0.33
    ``vllm/v1/metrics/stats.py``: ``_time_since(req_stats.arrival_time)``), so the pod's histograms
    leave out the gateway's queue, which the EPP's own queue-duration histogram holds (llm-d-router
    v0.10.0): client TTFT = pod TTFT + gateway wait, request by request, and in sum."""
    from autoscaler.simulator.exposition import SimCollector

    reqs = [req(0.0, 0, out=1000), req(0.01, 0), req(0.02, 0), req(0.03, 1), req(0.04, 2)]
    sim = gateway_sim(make_fleet, reqs)
    sim.run_until(10_000)
    assert sim.done
    final = [sim.final[i] for i in range(len(reqs))]
    waits = [sr.waited_s for sr in final]
    assert all(w is not None for w in waits) and sum(waits) > 10.0  # r2..r4 waited behind r0's 1000 tokens
    for sr in final:
        assert sr.received_s == pytest.approx(sr.req.arrival_s + sr.waited_s)
    pod = sim.services["svc"].replicas[0].metrics
    client = sum(sr.t_first - sr.req.arrival_s for sr in final)
    assert pod.ttft.count == len(reqs)
    assert pod.ttft.total == pytest.approx(client - sum(waits))
    assert pod.e2e.total == pytest.approx(sum(sr.t_finish - sr.received_s for sr in final))
    flow = sim.services["svc"].flow
    families = {f.name: f for f in SimCollector(sim).collect()}
    queued = families["llm_d_epp_flow_control_request_queue_duration_seconds"]
    sums = {(x.labels["priority"], x.labels["outcome"]): x.value for x in queued.samples if x.name.endswith("_sum")}
    by_priority = [sum(sr.waited_s for sr in final if sr.req.priority == p) for p in range(3)]
    assert sums == {(str(p), "Dispatched"): pytest.approx(by_priority[p]) for p in range(3)}
    assert flow.wait_sum_s == pytest.approx(by_priority)
    sizes = {x.labels["priority"]: x.value for x in families["llm_d_epp_flow_control_queue_size"].samples}
    assert sizes == {"0": 0.0, "1": 0.0, "2": 0.0}


def test_workflow_in_progress_goes_first(make_fleet) -> None:
    # r0 is step 0 of workflow 7 and is dispatched; r2 (new, standard) queues before r3 (workflow 7, step 1).
    reqs = [req(0.0, 1, out=1000, workflow=7, step=0), req(0.01, 1), req(0.02, 1), req(0.03, 1, workflow=7, step=1)]
    sim = gateway_sim(make_fleet, reqs)
    sim.run_until(10_000)
    assert first_token_order(sim, [2, 3]) == [3, 2]
    assert sim.final[3].continuing and not sim.final[2].continuing


def test_deferred_request_keeps_its_deadline(make_fleet) -> None:
    # Threshold 0 for standard: behind a queued critical request, a continuing standard one is
    # deferred and a new one shed.
    reqs = [req(0.0, 1, out=2000, workflow=1, step=0), req(0.01, 1), req(0.02, 2),
            req(0.03, 1, workflow=1, step=1), req(0.04, 1)]
    sim = gateway_sim(make_fleet, reqs, defer_s=3.0)
    assert sim.services["svc"].flow.set_thresholds({"standard": 0.0}) is None
    sim.run_until(0.05)
    flow = sim.services["svc"].flow
    assert flow.deferred[1] == 1 and flow.shed[1] == 1
    assert sim.final[4].status == SHED and sim.final[4].t_finish == pytest.approx(0.04)
    deferred = sim.final[3]
    assert deferred.status is None and deferred.deadline_s == pytest.approx(3.03)
    sim.run_until(3.03 - 1e-6)
    assert deferred.status is None  # 2000 tokens on one replica take far longer than 3 s
    sim.run_until(3.03)
    assert deferred.status == SHED and deferred.t_finish == pytest.approx(3.03)
    sim.run_until(10_000)
    assert sim.done and sim.shed_mid_workflow == 1


def test_deferred_request_dispatched_before_its_deadline_is_served(make_fleet) -> None:
    reqs = [req(0.0, 1, out=20, workflow=1, step=0), req(0.01, 1), req(0.02, 2), req(0.03, 1, workflow=1, step=1)]
    sim = gateway_sim(make_fleet, reqs, defer_s=30.0)
    sim.services["svc"].flow.set_thresholds({"standard": 0.0})
    sim.run_until(10_000)
    assert sim.services["svc"].flow.deferred[1] == 1
    assert sim.final[3].status == COMPLETED and sim.final[3].t_first < 3.03 + 27


def test_shed_requests_are_retried_as_configured_and_counted_apart(make_fleet) -> None:
    clients = {"max_retries": 2, "backoff_base_s": 0.5, "backoff_cap_s": 0.75, "jitter": 0.25}
    reqs = [req(0.0, 0, out=3000), req(0.01, 0), req(0.02, 0), req(0.03, 0)]
    sim = gateway_sim(make_fleet, reqs, clients=clients)
    sim.services["svc"].flow.set_thresholds({"sheddable": 0.0})
    sends: list[float] = []
    original = FleetSimulator._arrive

    def arrive(self, sr):
        if sr.req.rid == 3:
            sends.append(self.now)
        original(self, sr)

    FleetSimulator._arrive = arrive  # type: ignore[method-assign]
    try:
        sim.run_until(10_000)
    finally:
        FleetSimulator._arrive = original  # type: ignore[method-assign]
    assert sim.done
    last = sim.final[3]
    assert last.status == SHED and last.attempt == 2 and len(sends) == 3
    # delays min(0.5 x 2^k, 0.75) x (1 - 0.25 u): k = 0 in [0.375, 0.5], k = 1 in [0.5625, 0.75]
    d0, d1 = sends[1] - sends[0], sends[2] - sends[1]
    assert 0.375 <= d0 <= 0.5 and 0.5625 <= d1 <= 0.75
    run = SimulationRun(sim, [], "static", sim.now, 1.0, "pid")
    res = summarize(run)
    assert res["requests"]["rejected_admission"] == 1 == res["admission"]["shed"]
    # r2 found the gateway queue empty (admitted, it waits); r3 found r2 ahead of it, three times
    assert res["admission"]["shed_attempts"] == 3 and res["admission"]["retries"] == 2
    # Sheddable requests: 4 accepted, r3 shed for good (a miss); r0..r2 met the batch SLO or not.
    ok = sum(1 for i in (0, 1, 2) if sim.final[i].status == COMPLETED
             and sim.final[i].t_first - sim.final[i].req.arrival_s <= 20.0
             and (sim.final[i].t_finish - sim.final[i].t_first) / (sim.final[i].req.output_tokens - 1) <= 0.25)
    assert res["slo_attainment_by_priority"]["sheddable"] == pytest.approx(ok / 4)
    assert res["slo_attainment_by_priority"]["critical"] is None


def test_a_request_never_succeeds_twice(make_fleet, monkeypatch) -> None:
    # A 5-s client timeout on requests of 200 to 1100 output tokens (~2 to ~11 s): attempts time out
    # (vLLM aborts them) and are retried.
    completions: Counter[int] = Counter()
    original = FleetSimulator._end

    def end(self, sr, status):
        if status == COMPLETED:
            completions[sr.req.rid] += 1
        original(self, sr, status)

    monkeypatch.setattr(FleetSimulator, "_end", end)
    reqs = [req(i * 0.5, i % 3, out=200 + 300 * (i % 4)) for i in range(30)]
    cfg = make_fleet(1, client_timeout_s=5.0, simulator={"clients": {"max_retries": 3}})
    run = run_simulation(cfg, Workload(reqs, source="test:timeouts"), "static", admission="pid")
    assert run.sim.done
    assert completions and max(completions.values()) == 1
    served = sum(r.metrics.success["stop"] for r in run.sim.services["svc"].replicas)
    assert served == sum(completions.values()) == sum(sr.status == COMPLETED for sr in run.sim.final)
    res = summarize(run)
    attempts = sum(sr.attempt + 1 for sr in run.sim.final)
    assert res["admission"]["retries"] == attempts - len(reqs) > 0


def test_crash_failures_are_retried_without_admission(make_fleet) -> None:
    reqs = [req(i * 0.2, 1, out=400) for i in range(40)]
    cfg = make_fleet(2, startup_s=5.0, crashes=[{"time_s": 3.0, "variant": "h100"}],
                     simulator={"clients": {"max_retries": 2}})
    run = run_simulation(cfg, Workload(reqs, source="test:crash"), "static")
    assert run.sim.crash_outcomes()[0]["failed_requests"] > 0
    assert run.sim.retries >= run.sim.crash_outcomes()[0]["failed_requests"]
    assert all(sr.status == COMPLETED for sr in run.sim.final)  # every failed attempt succeeded on retry


# ------------------------------------------------------------------------------ thresholds, published
@pytest.mark.parametrize("bad", [{"critical": math.nan}, {"standard": -1.0}, {"gold": 1.0}, {"critical": math.inf},
                                 {"sheddable": "1"}])
def test_malformed_thresholds_are_refused_and_the_last_good_stay(make_fleet, bad) -> None:
    assert check_thresholds(bad) is not None
    sim = FleetSimulator(make_fleet(1), Workload([req(0.0, 1)]), admission=True)
    sink = SimAdmissionSink(sim)
    assert sink.publish("svc", {"critical": None, "standard": 2.0, "sheddable": 0.5}).ok
    res = sink.publish("svc", bad)
    assert res.status is ActuationStatus.INVALID and "svc" in res.message
    assert sim.services["svc"].flow.thresholds == [0.5, 2.0, None]
    doc = AdmissionDocument()
    assert doc.publish("svc", {"standard": 2.0}).ok
    assert doc.publish("svc", bad).status is ActuationStatus.INVALID
    assert parse_document(doc.json()) == {"svc": {"standard": 2.0}} and doc.generation == 1


def test_thresholds_round_trip_through_get_v1_admission() -> None:
    from prometheus_client import CollectorRegistry

    doc = AdmissionDocument()
    sent = {"critical": None, "standard": 1.5, "sheddable": 0.0}
    assert doc.publish("chat", sent).ok and doc.publish("code", {"sheddable": 4.0}).ok
    server = serve(CollectorRegistry(), "127.0.0.1:0", {"/v1/admission": doc.json})
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/v1/admission", timeout=5) as r:
            assert r.headers["Content-Type"] == "application/json"
            body = r.read()
    finally:
        server.close()
    assert parse_document(body) == {"chat": sent, "code": {"sheddable": 4.0}}
    raw = json.loads(body)
    assert raw["apiVersion"] == "autoscaler/v1" and raw["generation"] == 2
    with pytest.raises(ValueError, match="apiVersion"):
        parse_document(json.dumps({**raw, "apiVersion": "v2"}))
    with pytest.raises(ValueError, match="standard"):
        parse_document(json.dumps({**raw, "services": {"chat": {"thresholds": {"standard": -2}}}}))


# ------------------------------------------------------------------------------ the policies
def estimate(signals: dict[str, float | None], ready_capacity: float = 0.0, t: float = 0.0) -> ServiceEstimate:
    return ServiceEstimate("svc", t, Signals.of(signals), {}, {}, False, ready_capacity, ready_capacity, 0)


def test_wait_budgets_follow_the_class_slos(make_fleet) -> None:
    cfg = make_fleet(1)  # interactive TTFT 2 s, batch 20 s
    assert wait_budgets(cfg.services[0], cfg.controller.admission_settings) == {
        "critical": 1.0, "standard": 1.0, "sheddable": 10.0}


def test_plan_admission_serves_the_highest_priority_first(make_fleet) -> None:
    cfg = make_fleet(1)
    svc = cfg.services[0]
    policy = PlanAdmission(cfg.controller.admission_settings)
    sig = {"arrival_rate_rps.critical": 3.0, "arrival_rate_rps.standard": 5.0, "arrival_rate_rps.sheddable": 4.0,
           "gateway_queue.sheddable": 60.0}  # + 1 req/s of sheddable backlog over DRAIN_S = 60 s
    # 10 req/s: critical 3 and standard 5 served whole, sheddable 2 of 5 (short 60 %: its budget)
    assert policy.thresholds(estimate(sig, 10.0), svc) == {"critical": None, "standard": None, "sheddable": 10.0}
    # 2 req/s: critical short by a third (its budget), the others get nothing
    assert policy.thresholds(estimate(sig, 2.0), svc) == {"critical": 1.0, "standard": 0.0, "sheddable": 0.0}
    # without gateway data it holds what is in force
    assert policy.thresholds(estimate({}, 2.0), svc) == {"critical": 1.0, "standard": 0.0, "sheddable": 0.0}


def test_pid_admission_law(make_fleet) -> None:
    cfg = make_fleet(1)
    svc = cfg.services[0]
    s = cfg.controller.admission_settings  # kp 0.5, ki 0.02, max 4 budgets
    policy = PIDAdmission(s)
    # nothing queued at any priority, 1 req/s dispatched each: the queue implies no wait
    waits = {f"gateway_{k}.{p}": v for p in ("critical", "standard", "sheddable")
             for k, v in (("queue", 0.0), ("dispatched_rps", 1.0))}
    # no wait: e = -1; first tick dt = 0: threshold = b (1 + kp) = 1.5 budgets
    out = policy.thresholds(estimate(waits, t=0.0), svc)
    assert out["standard"] == pytest.approx(1.5) and out["sheddable"] == pytest.approx(15.0)
    for k in range(1, 40):  # idle for 10 min: the integral stops at the anti-windup bound
        out = policy.thresholds(estimate(waits, t=15.0 * k), svc)
    assert out["standard"] == pytest.approx(4.0 * 1.0)  # max_budgets x budget
    assert policy.integral[("svc", "standard")] == pytest.approx((1 - 4.0) / 0.02)
    # a surge: 6 standard requests queued, dispatched at 2 req/s, imply a 3-s wait (Little), above the
    # 2-s mean of those dispatched: e = 3 / 1 - 1 = 2 for one tick; u = kp e + ki (I + e dt)
    surge = {**waits, "gateway_queue.standard": 6.0, "gateway_dispatched_rps.standard": 2.0,
             "gateway_wait_s.standard": 2.0}
    out = policy.thresholds(estimate(surge, t=600.0), svc)
    i_new = (1 - 4.0) / 0.02 + 2.0 * 15.0
    assert out["standard"] == pytest.approx(max(0.0, 1.0 * (1 - 0.5 * 2.0 - 0.02 * i_new)))
    assert out["critical"] == pytest.approx(4.0)  # its own wait is still 0
    for k in range(2, 6):
        out = policy.thresholds(estimate(surge, t=585.0 + 15.0 * k), svc)
    assert out["standard"] == 0.0
    # unknown gateway data: hold
    assert policy.thresholds(estimate({}, t=700.0), svc) == out


def test_build_admission_names() -> None:
    from autoscaler.config import AdmissionConfig

    assert build_admission("none", AdmissionConfig()) is None
    assert isinstance(build_admission("pid", AdmissionConfig()), PIDAdmission)
    with pytest.raises(ValueError, match="unknown admission policy 'fifo'"):
        build_admission("fifo", AdmissionConfig())


def test_simulate_cli_refuses_an_unknown_admission_policy(tmp_path) -> None:
    from typer.testing import CliRunner

    from autoscaler.cli import app

    res = CliRunner().invoke(app, ["simulate", "--admission", "fifo", "--out", str(tmp_path / "o")])
    assert res.exit_code != 0 and "--admission must be one of none, pid, mpc" in res.output
    res = CliRunner().invoke(app, ["compare", "--controller", "pid@fifo", "--out", str(tmp_path / "o")])
    assert res.exit_code != 0 and "unknown admission policy 'fifo'" in res.output


def test_the_gateways_shed_rate_is_read_as_its_arrival_rate_is(make_fleet) -> None:
    # The shed counter of the sheddable priority grows as its arrivals counter does (and the
    # standard priority's arrivals at half that pace, nothing shed): the two rates are equal, and
    # the shed rate of a priority that sheds nothing is 0. Without flow control there is no shed rate.
    from autoscaler.adapters.simulator import SimMetricsSource

    sim = gateway_sim(make_fleet, [req(10_000.0, 0)])
    svc = sim.services["svc"]
    src = SimMetricsSource(sim, window_s=60.0)
    for k in range(5):
        svc.arrivals_by_priority[0] = svc.flow.shed[0] = 30 * k
        svc.arrivals_by_priority[1] = 15 * k
        src.scrape(15.0 * k)
    sig = src.observe(60.0)["svc"].signals.flat()
    assert sig["arrival_rate_rps.sheddable"] > 0
    assert sig["gateway_shed_rps.sheddable"] == pytest.approx(sig["arrival_rate_rps.sheddable"])
    assert sig["arrival_rate_rps.standard"] == pytest.approx(sig["arrival_rate_rps.sheddable"] / 2)
    assert sig["gateway_shed_rps.standard"] == 0.0 == sig["gateway_shed_rps.critical"]
    plain = FleetSimulator(make_fleet(1), Workload([req(10_000.0, 0)], source="test"))
    src = SimMetricsSource(plain, window_s=60.0)
    for k in range(3):
        src.scrape(15.0 * k)
    assert src.observe(30.0)["svc"].signals.priority("sheddable").shed_rps is None  # no flow control: unknown


def test_streaming_takes_only_a_boolean(make_fleet) -> None:
    from autoscaler.config.loading import parse_config
    from autoscaler.errors import ConfigError

    doc = make_fleet(1).model_dump(mode="json", exclude_unset=True)
    for bad in ("yes", "true", 1):
        with pytest.raises(ConfigError, match=r"simulator\.clients\.streaming"):
            parse_config({**doc, "simulator": {"clients": {"streaming": bad}}}, "f.yaml")
    assert parse_config({**doc, "simulator": {"clients": {"streaming": True}}}, "f.yaml").simulator.clients.streaming


@pytest.mark.parametrize(("saturation", "in_replica"), [("pool", 2), ("pod", 3)])
def test_the_pool_rule_holds_at_a_mean_saturation_of_one_the_pod_rule_past_the_threshold(
        make_fleet, saturation: str, in_replica: int) -> None:
    """One replica running one request at a time, queue_depth_threshold 2. The pool rule (GIE v1.5+,
    llm-d-router v0.10.0) holds once max(waiting / 2, kv / 0.8) reaches 1: 2 waiting in the replica.
    The per-pod rule (GIE v1.0-v1.3) dispatches while waiting <= 2: 3 waiting. Of 10 requests sent
    at once, 1 runs and the rest wait at the gateway."""
    reqs = [req(0.001 * i, 2, out=1000) for i in range(10)]
    sim = gateway_sim(make_fleet, reqs, queue_depth_threshold=2, saturation=saturation)
    sim.run_until(0.5)
    (replica,) = sim.services["svc"].replicas
    assert len(replica.waiting) == in_replica
    assert sim.services["svc"].flow.queued == [0, 0, 10 - 1 - in_replica]


def test_the_concurrency_detector_holds_the_pool_to_max_concurrency_in_flight(make_fleet) -> None:
    """llm-d-router's concurrency-detector (requests mode): saturation = requests in flight over
    max_concurrency per replica. One replica running one request at a time, max_concurrency 3: of 10
    requests sent at once, 1 runs, 2 wait in the replica (3 in flight: saturation 1), 7 wait at the
    gateway; each completion lets exactly one more in."""
    reqs = [req(0.001 * i, 2, out=1000) for i in range(10)]
    sim = gateway_sim(make_fleet, reqs, saturation="concurrency", max_concurrency=3)
    sim.run_until(0.5)
    (replica,) = sim.services["svc"].replicas
    assert (replica.n_running, len(replica.waiting)) == (1, 2)
    assert sim.services["svc"].flow.queued == [0, 0, 7]
    first = sim.final[0]
    while first.t_finish is None:
        sim.run_until(sim.now + 1.0)
    sim.run_until(first.t_finish + 1e-3)
    assert replica.outstanding == 3 and sim.services["svc"].flow.queued == [0, 0, 6]


def test_the_concurrency_detector_filters_replicas_at_their_limit_with_headroom(make_fleet) -> None:
    """Two replicas, max_concurrency 2, headroom 0.5: a replica is a candidate while it holds fewer
    than int(2 x 1.5) = 3; the pool is held at 4 in flight (saturation 4 / (2 x 2) = 1)."""
    reqs = [req(0.001 * i, 2, out=1000) for i in range(10)]
    sim_cfg = {"gateway": {"saturation": "concurrency", "max_concurrency": 2, "headroom": 0.5},
               "clients": {"max_retries": 0}}
    cfg = make_fleet(2, simulator=sim_cfg, engine=ONE_AT_A_TIME["engine"])
    sim = FleetSimulator(cfg, Workload(reqs, source="test:gateway"), admission=True)
    sim.run_until(0.5)
    assert sorted(r.outstanding for r in sim.services["svc"].replicas) == [2, 2]
    assert sim.services["svc"].flow.queued == [0, 0, 6]


def test_a_following_gateway_takes_the_published_itl_budget_at_most_every_refresh(make_fleet) -> None:
    """budget_refresh_s 60, headroom 0.5: a published budget of 4 replaces max_concurrency (filter
    int(4 x 1.5) = 6); one of 9 a moment later waits for the refresh; 61 s on it is taken (filter 13).
    A malformed budget is refused and changes nothing, thresholds included."""
    sim_cfg = {"gateway": {"saturation": "concurrency", "headroom": 0.5, "budget_refresh_s": 60.0}}
    sim = FleetSimulator(make_fleet(1, simulator=sim_cfg), Workload([req(0.0, 1)]), admission=True)
    svc, sink = sim.services["svc"], SimAdmissionSink(sim)
    assert sink.publish("svc", {"standard": 1.0}, {"h100": 4}).ok
    assert (svc.max_concurrency, svc.dispatch_limit) == ({"h100": 4}, {"h100": 6})
    sim.run_until(30.0)
    assert sink.publish("svc", {}, {"h100": 9}).ok and svc.max_concurrency == {"h100": 4}
    sim.run_until(61.0)
    assert sink.publish("svc", {}, {"h100": 9}).ok
    assert (svc.max_concurrency, svc.dispatch_limit) == ({"h100": 9}, {"h100": 13})
    sim.run_until(200.0)
    for bad in ({"h100": 0}, {"h100": 2.5}, {"h100": True}):
        res = sink.publish("svc", {"standard": 5.0}, bad)  # type: ignore[dict-item]
        assert res.status is ActuationStatus.INVALID and "ITL budget" in res.message
    assert svc.max_concurrency == {"h100": 9} and svc.flow.thresholds[1] == 1.0


def test_without_budget_refresh_s_the_gateway_keeps_its_configured_budget(make_fleet) -> None:
    sim = FleetSimulator(make_fleet(1, simulator={"gateway": {"saturation": "concurrency", "max_concurrency": "auto"}}),
                         Workload([req(0.0, 1)]), admission=True)
    before = dict(sim.services["svc"].max_concurrency)
    assert SimAdmissionSink(sim).publish("svc", {}, {"h100": 3}).ok
    assert sim.services["svc"].max_concurrency == before != {"h100": 3}


def test_auto_min_takes_the_fewest_published_for_every_variant() -> None:
    from autoscaler.config.loading import default_config

    cfg = default_config()
    cfg.simulator.gateway = GatewayConfig(saturation="concurrency", max_concurrency="auto-min", budget_refresh_s=60.0)
    sim = FleetSimulator(cfg, Workload([req(0.0, 1)]), admission=True)
    svc = sim.services[cfg.services[0].name]
    assert SimAdmissionSink(sim).publish(svc.cfg.name, {}, {"h100": 30, "gh200": 12}).ok
    assert svc.max_concurrency == {v.name: 12 for v in cfg.services[0].variants}


@pytest.mark.parametrize("gateway", [{"saturation": "pool"}, {"saturation": "concurrency", "max_concurrency": 7},
                                     {"saturation": "concurrency", "concurrency_mode": "tokens"}])
def test_budget_refresh_s_needs_a_concurrency_detector_on_an_auto_request_budget(gateway: dict) -> None:
    with pytest.raises(ValueError, match="budget_refresh_s follows the learned ITL budget"):
        GatewayConfig(**gateway, budget_refresh_s=60.0)
    with pytest.raises(ValueError, match="greater than 0"):
        GatewayConfig(saturation="concurrency", budget_refresh_s=0.0)


def test_the_itl_budget_is_in_the_served_document_and_a_malformed_one_is_refused() -> None:
    doc = AdmissionDocument()
    assert doc.publish("chat", {"standard": 1.0}, {"h100": 21, "a100": 9}).ok
    assert doc.publish("chat", {}, {"a100": 8}).ok  # variants left out keep theirs
    raw = json.loads(doc.json())
    assert raw["services"]["chat"]["itl_budget"] == {"h100": 21, "a100": 8}
    assert parse_document(doc.json()) == {"chat": {"standard": 1.0}}
    assert doc.publish("chat", {"standard": 2.0}, {"a100": -1}).status is ActuationStatus.INVALID
    assert json.loads(doc.json())["services"]["chat"] == {**raw["services"]["chat"],
                                                          "updated_unix_s": raw["services"]["chat"]["updated_unix_s"]}
    assert doc.generation == 2
    assert parse_itl_budgets(doc.json()) == {"chat": {"h100": 21, "a100": 8}}
    for bad in ({"h100": 0}, [3], {"h100": "3"}):
        raw["services"]["chat"]["itl_budget"] = bad
        with pytest.raises(ValueError, match=r"services\.chat\.itl_budget"):
            parse_itl_budgets(json.dumps(raw))
    plain = AdmissionDocument()
    assert plain.publish("code", {"standard": 1.0}).ok
    assert "itl_budget" not in json.loads(plain.json())["services"]["code"]


def test_priority_holdback_ceilings_are_linear_by_rank() -> None:
    """llm-d-router v0.10.0 priority-holdback-policy, rank domain: c_i = max - i (max - min) / (N - 1)
    with i = 0 the highest priority; lowest first here: 0.4, 0.7, 1.0."""
    g = GatewayConfig(saturation="concurrency", usage_limit="priority_holdback", min_ceiling=0.4, max_ceiling=1.0)
    assert g.ceilings(3) == pytest.approx([0.4, 0.7, 1.0])
    assert GatewayConfig().ceilings(3) == [1.0, 1.0, 1.0]
    with pytest.raises(ValueError, match=r"min_ceiling 0\.9 must be below max_ceiling 0\.5"):
        GatewayConfig(usage_limit="priority_holdback", min_ceiling=0.9, max_ceiling=0.5)
    with pytest.raises(ValueError, match="needs a pool saturation"):
        GatewayConfig(saturation="pod", usage_limit="priority_holdback")
    assert GatewayConfig(max_ceiling=0.7).max_ceiling == 0.7  # the static policy reads no ceiling
    for bad in (0, -1, 1.5, 2.0, "2", "auto_min", None):
        with pytest.raises(ValueError, match="a positive integer, auto or auto-min is expected"):
            GatewayConfig(max_concurrency=bad)


def test_priority_holdback_holds_the_lowest_bands_first(make_fleet) -> None:
    """max_concurrency 10, ceilings 0.4 / 0.7 / 1.0 (sheddable / standard / critical). 20 sheddable
    requests at once: dispatched while saturation < 0.4, so 4 in flight. Then 20 standard: up to 7.
    Then 20 critical: up to 10. (Each replica step serves one request of 1,000 tokens: nothing ends
    within the second.)"""
    reqs = ([req(0.001 * i, 0, out=1000) for i in range(20)] + [req(0.1 + 0.001 * i, 1, out=1000) for i in range(20)]
            + [req(0.2 + 0.001 * i, 2, out=1000) for i in range(20)])
    sim = gateway_sim(make_fleet, reqs, saturation="concurrency", max_concurrency=10,
                      usage_limit="priority_holdback", min_ceiling=0.4, max_ceiling=1.0)
    (replica,) = sim.services["svc"].replicas
    flow = sim.services["svc"].flow
    sim.run_until(0.05)
    assert replica.outstanding == 4 and flow.queued == [16, 0, 0]
    sim.run_until(0.15)
    assert replica.outstanding == 7 and flow.queued == [16, 17, 0]
    sim.run_until(0.25)
    assert replica.outstanding == 10 and flow.queued == [16, 17, 17]
