"""The loop's idle-to-minimum rule on a service with prefill/decode pools (``autoscaler.loop.runner``,
``idle_pools``; issue 34): the pools the controller's plan still serves with are kept at that plan, the
aggregated variants go to their minimums, and the rule never scales a pool up."""

from __future__ import annotations

from typing import Any

from support.recording import RecordingActuator

from autoscaler.config import Service
from autoscaler.config.loading import parse_config
from autoscaler.loop.runner import ControlLoop, idle_pools
from autoscaler.state import PoolObservation, ServiceEstimate, ServiceObservation, Signals, VariantObservation
from controllers.base import Controller, Decision, Reason, hold

SLO = {"interactive": {"ttft_s": 2.0, "itl_s": 0.1}, "batch": {"ttft_s": 20.0, "itl_s": 0.25}}


def variant(name: str, lo: int = 0, current: int = 0) -> dict[str, Any]:
    return {"name": name, "gpu": "H100-SXM", "price_per_gpu_hour": 2.0, "min_replicas": lo, "max_replicas": 8,
            "initial_replicas": current, "kv_cache_tokens": 400_000, "profile": "llama-3-8b/h100-sxm"}


def service() -> Service:
    doc = {"services": [{"name": "svc", "model": "m", "slo": SLO, "variants": [variant("agg", lo=1, current=3)],
                         "roles": {"prefill": [variant("p1"), variant("p2", lo=1)], "decode": [variant("d")]}}],
           "controller": {"tick_s": 15, "window_s": 60, "guard": {"idle_ticks_to_min": 2}}}
    return parse_config(doc, "<pd>").services[0]


def estimate(p1: int, p2: int, d: int) -> ServiceEstimate:
    pools = {"prefill": PoolObservation("prefill", Signals(), {"p1": VariantObservation(p1, 0),
                                                               "p2": VariantObservation(p2, 0)}),
             "decode": PoolObservation("decode", Signals(), {"d": VariantObservation(d, 0)})}
    return ServiceEstimate("svc", 100.0, Signals(), {"agg": VariantObservation(3, 0)}, {"agg": 1.0}, True, 0.0, 0.0, 0,
                           pools=pools)


def test_pools_the_plan_serves_with_keep_the_plan_never_more_than_today() -> None:
    # today p1 4, p2 2, d 2; the plan p1 3, p2 5, d 2: p1 down to 3 (the plan), p2 stays 2 (the idle
    # rule never scales up), d stays 2.
    svc = service()
    out, kept = idle_pools(svc, estimate(4, 2, 2), Decision({"agg": 3, "p1": 3, "p2": 5, "d": 2}, "plan"))
    assert kept
    assert out == {"p1": 3, "p2": 2, "d": 2}


def test_a_plan_that_leaves_a_pool_empty_takes_both_to_their_minimums() -> None:
    # the plan holds no decode replica: the pools are not in use, each variant goes to its minimum
    # (p2's is 1), as the rule did before pools could be kept.
    svc = service()
    out, kept = idle_pools(svc, estimate(4, 2, 2), Decision({"p1": 3, "p2": 2, "d": 0}, "plan"))
    assert not kept
    assert out == {"p1": 0, "p2": 1, "d": 0}


def test_a_controller_that_cannot_decide_leaves_the_rule_as_it_was() -> None:
    svc = service()
    out, kept = idle_pools(svc, estimate(4, 2, 2), hold({"p1": 4, "p2": 2, "d": 2}, "no data"))
    assert not kept
    assert out == {"p1": 0, "p2": 1, "d": 0}


def test_a_pool_variant_left_out_of_the_plan_counts_at_its_current_replicas() -> None:
    # Decision.desired may leave a variant out (it keeps its count): d counts as its 2 today.
    svc = service()
    out, kept = idle_pools(svc, estimate(4, 2, 2), Decision({"p1": 1, "p2": 2}, "plan"))
    assert kept
    assert out == {"p1": 1, "p2": 2, "d": 2}


class _Planner(Controller):
    """Always plans p1 3, p2 1, d 1 and the aggregated variant at 3."""

    scales_roles = True

    def __init__(self) -> None:
        super().__init__("planner", 15.0, 60.0)

    def decide(self, est: ServiceEstimate, svc: Service) -> Decision:
        return Decision({"agg": 3, "p1": 3, "p2": 1, "d": 1}, "plan", Reason.NO_CHANGE)


class _Idle:
    """Nothing arrives, runs or waits; today agg 3, p1 3, p2 1, d 1 (all ready)."""

    def observe(self, now: float) -> dict[str, ServiceObservation]:
        sig = Signals(request_rate_rps=0.0, arrival_rate_rps=0.0, running=0.0, queue_length=0.0)
        pools = {"prefill": PoolObservation("prefill", Signals(), {"p1": VariantObservation(3, 0),
                                                                   "p2": VariantObservation(1, 0)}),
                 "decode": PoolObservation("decode", Signals(), {"d": VariantObservation(1, 0)})}
        return {"svc": ServiceObservation("svc", now, sig, {"agg": VariantObservation(3, 0)}, history_s=now,
                                          pools=pools)}


def test_the_loop_keeps_the_planned_pair_and_takes_the_aggregated_variant_down() -> None:
    # Idle for 2 ticks (the configured idle_ticks_to_min): the rule fires on the 2nd; the aggregated
    # variant goes from 3 toward its minimum 1 (the guard's max_step_down 2 allows it at once), the
    # pools stay as the planner holds them (one decode replica is the pair's only one).
    doc = {"services": [{"name": "svc", "model": "m", "slo": SLO, "variants": [variant("agg", lo=1, current=3)],
                         "roles": {"prefill": [variant("p1", current=3), variant("p2", current=1)],
                                   "decode": [variant("d", current=1)]}}],
           "controller": {"tick_s": 15, "window_s": 60, "guard": {"idle_ticks_to_min": 2}}}
    cfg = parse_config(doc, "<pd>")
    act = RecordingActuator()
    loop = ControlLoop(cfg, _Idle(), act, _Planner())
    loop.start(0.0)
    loop.tick(60.0)
    st = loop.tick(75.0).services["svc"]
    assert st.decision.code is Reason.IDLE_TO_MIN
    assert "kept at the controller's plan" in st.decision.reason
    assert act.writes == [("svc", "agg", 1)]
    assert st.pool_applied == {"p1": 3, "p2": 1, "d": 1}
