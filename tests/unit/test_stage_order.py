"""A service's stage in the loop (decide, guard, the pools' guard, drain) makes its one call out, the
drain's cordon, last: a stage that raises before it takes no pod out of routing."""

from __future__ import annotations

from typing import Any

import pytest
from support.recording import RecordingActuator

from autoscaler.config.loading import parse_config
from autoscaler.loop.runner import ControlLoop, TickError
from autoscaler.state import PodObservation, ServiceEstimate, ServiceObservation, Signals, VariantObservation
from controllers.base import Controller, Decision, Reason
from controllers.base import hold as hold_decision

SLO = {"interactive": {"ttft_s": 2.0, "itl_s": 0.1}, "batch": {"ttft_s": 20.0, "itl_s": 0.25}}
DOC = {"services": [{"name": "svc", "model": "m", "slo": SLO, "variants": [
    {"name": "a", "gpu": "H100-SXM", "price_per_gpu_hour": 3.0, "min_replicas": 0, "max_replicas": 8,
     "initial_replicas": 2, "kv_cache_tokens": 400_000, "profile": "llama-3-8b/h100-sxm"}]}],
       "controller": {"tick_s": 15, "window_s": 60}}


class Drainer:
    """Records the pods cordoned (taken out of routing) and uncordoned."""

    def __init__(self) -> None:
        self.cordoned: list[str] = []
        self.uncordoned: list[str] = []

    def cordon(self, service: str, pods: Any) -> list[str]:
        self.cordoned += list(pods)
        return list(pods)

    def uncordon(self, service: str, pods: Any) -> None:
        self.uncordoned += list(pods)


class WantsOne(Controller):
    """Asks one replica of ``a`` (the fleet has two: a scale-down whose pod the drain cordons first)."""

    def __init__(self) -> None:
        super().__init__("wants-one", 15.0, 60.0)

    def decide(self, est: ServiceEstimate, svc: Any) -> Decision:
        if est.current["a"] == 1:
            return hold_decision(est.current, "hold", Reason.SIGNAL_UNKNOWN)
        return Decision({"a": 1}, "want 1", Reason.SCALE_DOWN)


class Source:
    def observe(self, now: float) -> dict[str, ServiceObservation]:
        pods = [PodObservation("a", 0.1, 0.0, 0.0, 0.1, 0.0, name=p) for p in ("p1", "p2")]
        sig = Signals(request_rate_rps=5.0, running=0.0, queue_length=0.0)
        return {"svc": ServiceObservation("svc", now, sig, {"a": VariantObservation(2, 0)}, history_s=now, pods=pods)}


def _loop(drainer: Drainer) -> tuple[ControlLoop, RecordingActuator]:
    act = RecordingActuator()
    loop = ControlLoop(parse_config(DOC, "<stage>"), Source(), act, WantsOne(), drainer=drainer)
    loop.start(0.0)
    return loop, act


def test_the_drain_cordons_a_pod_where_the_stage_completes() -> None:
    """The control: with nothing raising, the scale-down 2 -> 1 cordons one idle pod first."""
    drainer = Drainer()
    loop, _ = _loop(drainer)
    loop.tick(60.0)
    assert len(drainer.cordoned) == 1


def test_a_stage_that_raises_in_the_pools_guard_cordons_nothing() -> None:
    """The pools' guard raising (a bug) fails the service's stage before the drain: no pod is
    cordoned and no scale written. Before, the drain ran first, so a pod left routing and, its
    scale-down never written, was never put back (a review's case)."""
    drainer = Drainer()
    loop, act = _loop(drainer)

    def broken(*args: Any) -> Any:
        raise KeyError("decode-b")

    loop._guard_pools = broken  # type: ignore[method-assign]
    with pytest.raises(TickError, match="KeyError"):
        loop.tick(60.0)
    assert drainer.cordoned == [] and act.writes == []


class JointWantsOne(WantsOne):
    """``WantsOne`` that planned the services together this tick (as the MPC under a GPU budget) and
    raises deciding ``a`` (a bug)."""

    @property
    def plans_jointly(self) -> bool:
        return True

    def decide(self, est: ServiceEstimate, svc: Any) -> Decision:
        if svc.name == "a":
            raise ZeroDivisionError("decide a")
        return super().decide(est, svc)


class TwoSource:
    """Services ``a`` and ``b``, two idle pods each (``<service>-p1``, ``<service>-p2``)."""

    def observe(self, now: float) -> dict[str, ServiceObservation]:
        out = {}
        for name in ("a", "b"):
            pods = [PodObservation("a", 0.1, 0.0, 0.0, 0.1, 0.0, name=f"{name}-{p}") for p in ("p1", "p2")]
            sig = Signals(request_rate_rps=5.0, running=0.0, queue_length=0.0)
            out[name] = ServiceObservation(name, now, sig, {"a": VariantObservation(2, 0)}, history_s=now, pods=pods)
        return out


def test_a_decision_that_raises_in_a_joint_plan_cordons_no_pod_of_another_service() -> None:
    """b's part of a joint plan asks 2 -> 1, but a's decision raises: no service is written, and b's
    drain, which would cordon one of its pods first, does not run either (the drains run once every
    decision of the tick stands). Before, b was drained as it was decided, so one of its pods left
    routing in a tick that wrote no scale-down."""
    doc = {**DOC, "services": [{**DOC["services"][0], "name": n} for n in ("a", "b")]}
    drainer = Drainer()
    act = RecordingActuator()
    loop = ControlLoop(parse_config(doc, "<stage>"), TwoSource(), act, JointWantsOne(), drainer=drainer)
    loop.start(0.0)
    with pytest.raises(TickError, match="a: ZeroDivisionError"):
        loop.tick(60.0)
    assert drainer.cordoned == [] and act.writes == []
