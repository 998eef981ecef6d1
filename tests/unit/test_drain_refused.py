"""A drained pod whose scale-down write does not land goes back in routing (``autoscaler.loop.drain.restore``).

The fleet has variant ``a`` at 2 replicas, pods ``p1`` and ``p2``, both idle; the controller asks for 1.
The drain's order is ``idle_first``: fewest requests in flight first, ties by name, so ``p1``. Idle, it is
cordoned and named for removal in the same tick (``drain``: running + waiting 0). On 1ee56d1 the drain
dropped it from ``DrainState`` before the write, so a refused write left it out of routing for good
(never removed, never uncordoned once the scale-down was no longer asked for).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from autoscaler.config.loading import parse_config
from autoscaler.loop.actuate import APPLIED, ActuationResult, ActuationStatus
from autoscaler.loop.drain import DrainState, drain, restore
from autoscaler.loop.runner import ControlLoop, TickError
from autoscaler.state import PodObservation, ServiceEstimate, ServiceObservation, Signals, VariantObservation
from controllers.base import Controller, Decision, Reason
from controllers.base import hold as hold_decision

SLO = {"interactive": {"ttft_s": 2.0, "itl_s": 0.1}, "batch": {"ttft_s": 20.0, "itl_s": 0.25}}
DOC = {
    "services": [
        {
            "name": "svc",
            "model": "m",
            "slo": SLO,
            "variants": [
                {
                    "name": "a",
                    "gpu": "H100-SXM",
                    "price_per_gpu_hour": 3.0,
                    "min_replicas": 0,
                    "max_replicas": 8,
                    "initial_replicas": 2,
                    "kv_cache_tokens": 400_000,
                    "profile": "llama-3-8b/h100-sxm",
                }
            ],
        }
    ],
    "controller": {"tick_s": 15, "window_s": 60},
}
CONFLICT = ActuationResult(ActuationStatus.CONFLICT, "the object has been modified")


class Router:
    """A ``Drainer`` that keeps which pods are out of routing, and the calls made."""

    def __init__(self) -> None:
        self.out: set[str] = set()
        self.cordoned: list[str] = []
        self.uncordoned: list[str] = []

    def cordon(self, service: str, pods: Sequence[str]) -> list[str]:
        self.cordoned += pods
        self.out |= set(pods)
        return list(pods)

    def uncordon(self, service: str, pods: Sequence[str]) -> None:
        self.uncordoned += pods
        self.out -= set(pods)


class Actuator:
    """Answers each write with the next of ``answers`` (an exception is raised), recording
    ``(variant, replicas, remove_first)``."""

    def __init__(self, *answers: ActuationResult | BaseException) -> None:
        self.answers = list(answers)
        self.writes: list[tuple[str, int, list[str]]] = []

    def scale(self, service: str, variant: str, replicas: int, remove_first: Sequence[str] = ()) -> ActuationResult:
        self.writes.append((variant, replicas, list(remove_first)))
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer


class Asks(Controller):
    """Asks for ``wants[k]`` replicas of ``a`` at its k-th decision (2 = hold)."""

    def __init__(self, *wants: int) -> None:
        super().__init__("asks", 15.0, 60.0)
        self.wants = list(wants)

    def decide(self, est: ServiceEstimate, svc: Any) -> Decision:
        n = self.wants.pop(0)
        if n == est.current["a"]:
            return hold_decision(est.current, "hold", Reason.SIGNAL_UNKNOWN)
        return Decision({"a": n}, f"want {n}", Reason.SCALE_DOWN)


class Source:
    """Two idle pods of ``a`` on every tick (a refused write removes neither)."""

    def observe(self, now: float) -> dict[str, ServiceObservation]:
        pods = [PodObservation("a", 0.1, 0.0, 0.0, 0.1, 0.0, name=p) for p in ("p1", "p2")]
        sig = Signals(request_rate_rps=5.0, running=0.0, queue_length=0.0)
        return {"svc": ServiceObservation("svc", now, sig, {"a": VariantObservation(2, 0)}, history_s=now, pods=pods)}


def _loop(ctrl: Controller, act: Actuator) -> tuple[ControlLoop, Router]:
    router = Router()
    loop = ControlLoop(parse_config(DOC, "<refused>"), Source(), act, ctrl, drainer=router)
    loop.start(0.0)
    return loop, router


def test_a_refused_write_puts_the_drained_pod_back_in_routing() -> None:
    """2 -> 1 at 60 s, the write refused (a conflict): p1 was cordoned, named first, and is back in
    routing after the tick, untracked; the tick says so. At 75 s the controller holds at 2: nothing is
    written and no pod is out of routing (on 1ee56d1 p1 stayed out)."""
    act = Actuator(CONFLICT)
    loop, router = _loop(Asks(1, 2), act)
    st = loop.tick(60.0).services["svc"]
    assert act.writes == [("a", 1, ["p1"])]
    assert st.actuation == {"a": CONFLICT} and st.applied == {"a": 2}
    assert router.cordoned == ["p1"] and router.uncordoned == ["p1"] and router.out == set()
    assert "1 drained pod(s) back in routing: their removal was not written" in st.reason
    assert loop.drains["svc"] == DrainState()
    loop.tick(75.0)
    assert act.writes == [("a", 1, ["p1"])] and router.out == set()


def test_a_write_refused_then_applied_removes_the_pod_it_drained_again() -> None:
    """Refused at 60 s (p1 back in routing), asked again at 75 s: p1 is drained again (idle: named at
    once) and the applied write removes it; it stays out of routing, as a removed pod does."""
    act = Actuator(CONFLICT, APPLIED)
    loop, router = _loop(Asks(1, 1), act)
    loop.tick(60.0)
    assert router.out == set()
    st = loop.tick(75.0).services["svc"]
    assert act.writes == [("a", 1, ["p1"]), ("a", 1, ["p1"])]
    assert st.applied == {"a": 1} and "back in routing" not in st.reason
    assert router.cordoned == ["p1", "p1"] and router.uncordoned == ["p1"] and router.out == {"p1"}
    assert loop.drains["svc"] == DrainState()


def test_a_write_that_raises_puts_the_drained_pod_back_in_routing() -> None:
    """The write raising (a bug, not a refusal) fails the tick (``TickError``): nothing is known to have
    landed, so p1 is back in routing."""
    act = Actuator(RuntimeError("the API client broke"))
    loop, router = _loop(Asks(1), act)
    with pytest.raises(TickError, match="RuntimeError: the API client broke"):
        loop.tick(60.0)
    assert act.writes == [("a", 1, ["p1"])]
    assert router.cordoned == ["p1"] and router.out == set() and loop.drains["svc"] == DrainState()


def _est(busy: dict[str, int]) -> ServiceEstimate:
    pods = [PodObservation("h100", 0.1, 0.0, float(n), 0.1, 0.0, name=p) for p, n in busy.items()]
    return ServiceEstimate(
        "svc",
        0.0,
        Signals(),
        {"h100": VariantObservation(len(busy), 0)},
        {"h100": 10.0},
        False,
        10.0 * len(busy),
        10.0 * len(busy),
        0,
        pods=pods,
    )


def test_restore_puts_back_only_the_pods_of_variants_whose_write_did_not_land() -> None:
    """3 -> 1: p1 idle (named at once), p2 busy (kept draining, tracked). A write that did not land puts
    back p1 alone; p2 stays draining. One that landed puts back none."""
    for landed, back in (((), ["p1"]), (("h100",), [])):
        state, router = DrainState(), Router()
        out, first, _ = drain(
            router, state, _est({"p1": 0, "p2": 4, "p3": 9}), {"h100": 1}, {"h100": ["p1", "p2", "p3"]}, 300.0, 0.0
        )
        assert out == {"h100": 2} and first == {"h100": ["p1"]} and state.removing == {"p1": ("h100", 0.0)}
        assert restore(router, state, "svc", landed) == back
        assert router.uncordoned == back and state.removing == {} and list(state.pods) == ["p2"]
        assert router.out == {"p1", "p2"} - set(back)


# Two variants, ``a`` (pods a1, a2) and ``b`` (b1, b2), both at 2, every pod idle; the controller asks
# for 1 of each, so each variant's drain takes its first pod by name (``idle_first``), a1 and b1, and
# names it for removal in the same tick. ``_scale`` writes a, then b.
TWO = {
    **DOC,
    "services": [
        {
            **DOC["services"][0],
            "variants": [
                {**DOC["services"][0]["variants"][0], "name": "a"},
                {**DOC["services"][0]["variants"][0], "name": "b"},
            ],
        }
    ],
}


class TwoSource:
    """The four idle pods on every tick."""

    def observe(self, now: float) -> dict[str, ServiceObservation]:
        pods = [PodObservation(p[0], 0.1, 0.0, 0.0, 0.1, 0.0, name=p) for p in ("a1", "a2", "b1", "b2")]
        sig = Signals(request_rate_rps=5.0, running=0.0, queue_length=0.0)
        variants = {"a": VariantObservation(2, 0), "b": VariantObservation(2, 0)}
        return {"svc": ServiceObservation("svc", now, sig, variants, history_s=now, pods=pods)}


class Wants(Controller):
    """Asks for ``wants[k]`` (replicas of a, of b) at its k-th decision; the current counts hold."""

    def __init__(self, *wants: tuple[int, int]) -> None:
        super().__init__("wants", 15.0, 60.0)
        self.wants = list(wants)

    def decide(self, est: ServiceEstimate, svc: Any) -> Decision:
        a, b = self.wants.pop(0)
        if (a, b) == (est.current["a"], est.current["b"]):
            return hold_decision(est.current, "hold", Reason.SIGNAL_UNKNOWN)
        return Decision({"a": a, "b": b}, "down", Reason.SCALE_DOWN)


def _two(ctrl: Controller, act: Any, router: Router | None = None) -> tuple[ControlLoop, Router]:
    router = router or Router()
    loop = ControlLoop(parse_config(TWO, "<two>"), TwoSource(), act, ctrl, drainer=router)
    loop.start(0.0)
    return loop, router


def test_a_write_that_raises_after_another_landed_keeps_that_ones_pods_removed() -> None:
    """a's write applied (a1 removed), then b's raised: the tick fails, b1 is back in routing, and a1,
    whose removal landed, stays out of routing; only b is counted as a failed write and unwritten. On
    cadad4d every variant read as not landed: a1 was put back in routing too, and a counted."""
    act = Actuator(APPLIED, RuntimeError("boom"))
    loop, router = _two(Wants((1, 1)), act)
    with pytest.raises(TickError, match="RuntimeError: boom") as failed:
        loop.tick(60.0)
    assert act.writes == [("a", 1, ["a1"]), ("b", 1, ["b1"])]
    assert router.cordoned == ["a1", "b1"] and router.uncordoned == ["b1"] and router.out == {"a1"}
    assert loop.drains["svc"] == DrainState()
    assert failed.value.record.unwritten == {"svc": ["b"]}
    assert loop.actuation_errors == {("svc", "b", ActuationStatus.ERROR): 1}


class DownRouter(Router):
    """A router whose uncordon raises while ``down``."""

    def __init__(self) -> None:
        super().__init__()
        self.down = True

    def uncordon(self, service: str, pods: Sequence[str]) -> None:
        if self.down:
            raise OSError("router API down")
        super().uncordon(service, pods)


def test_an_uncordon_that_raises_keeps_the_pods_draining_and_the_refusal_counted() -> None:
    """a applied, b refused (a conflict), and putting b1 back in routing raises: the tick still stands
    (the service's record, b's refusal and the uncordon counted as failed writes), b1 stays tracked as
    draining since 60 s, a1 removed. At 75 s, the router up and the controller holding at 2 each, the
    drain puts b1 back in routing. On cadad4d the uncordon's exception failed the tick before the
    refusal was counted, and b1 was dropped from tracking, out of routing for good."""
    act = Actuator(APPLIED, CONFLICT)
    router = DownRouter()
    loop, _ = _two(Wants((1, 1), (2, 2)), act, router)
    st = loop.tick(60.0).services["svc"]
    assert act.writes == [("a", 1, ["a1"]), ("b", 1, ["b1"])]
    assert st.applied == {"a": 1, "b": 2} and "those not put back stay draining" in st.reason
    assert loop.actuation_errors == {
        ("svc", "b", ActuationStatus.CONFLICT): 1,
        ("svc", "uncordon", ActuationStatus.ERROR): 1,
    }
    assert loop.drains["svc"] == DrainState(pods={"b1": ("b", 60.0)}, unsure={"b1"})
    assert router.out == {"a1", "b1"}
    router.down = False
    loop.tick(75.0)
    assert len(act.writes) == 2 and router.uncordoned == ["b1"] and router.out == {"a1"}
    assert loop.drains["svc"] == DrainState()


class Stop(BaseException):
    """Stops a tick between the drain and the restore (as KeyboardInterrupt or SystemExit would)."""


def test_pods_left_named_for_removal_are_dealt_with_at_the_next_drain() -> None:
    """1 of a, 2 of b: a1 is drained and named; the write stops the tick (``Stop``) before any restore.
    At 75 s the controller holds at 2: the next drain tracks a1 again and, no longer removed, puts it back
    in routing. On cadad4d the drain emptied ``removing`` first and a1 stayed out of routing, untracked."""
    act = Actuator(Stop())  # a BaseException: what the loop does not catch
    loop, router = _two(Wants((1, 2), (2, 2)), act)
    with pytest.raises(Stop):
        loop.tick(60.0)
    assert router.out == {"a1"} and loop.drains["svc"] == DrainState(removing={"a1": ("a", 60.0)})
    loop.tick(75.0)
    assert act.writes == [("a", 1, ["a1"])] and router.uncordoned == ["a1"] and router.out == set()
    assert loop.drains["svc"] == DrainState()


class BFails(Router):
    """A router whose cordon of any pod of ``b`` raises."""

    def cordon(self, service: str, pods: Sequence[str]) -> list[str]:
        if any(p.startswith("b") for p in pods):
            raise OSError("router down")
        return super().cordon(service, pods)


def test_a_drain_that_raises_puts_back_the_pods_it_had_named() -> None:
    """The drain takes a1 out and names it, then cordoning b1 raises: the tick fails naming the service,
    nothing is written, and a1 is back in routing (``_restore_quietly`` after the drain), untracked."""
    act = Actuator()
    loop, router = _two(Wants((1, 1)), act, BFails())
    with pytest.raises(TickError, match="OSError: router down"):
        loop.tick(60.0)
    assert act.writes == [] and router.cordoned == ["a1"] and router.uncordoned == ["a1"]
    assert router.out == set() and loop.drains["svc"] == DrainState()


def test_able_to_scale_follows_the_writes_that_came_back_before_a_raise() -> None:
    """autoscaler_able_to_scale after a service's writes raised: a variant whose write came back before the
    raise reads as any tick's (applied: able; refused by a lost lease: unchanged), only the write that raised
    reads as not able. Tick 1: a refused (conflict), b applied: a not able. Tick 2: a applied, then b's write
    raises: a able again, b not. On 5413c8b a stayed not able (a failed service has no ServiceTick)."""
    from prometheus_client import CollectorRegistry

    from autoscaler.loop.actuate import ActuationStatus
    from autoscaler.loop.export import LoopMetrics

    act = Actuator(CONFLICT, APPLIED, APPLIED, RuntimeError("boom"))
    loop, _ = _two(Wants((1, 1), (1, 1)), act)
    metrics = LoopMetrics(loop, registry=CollectorRegistry())
    metrics.record(loop.tick(60.0), 0.1)
    assert metrics._able == {("svc", "a"): False, ("svc", "b"): True}
    with pytest.raises(TickError) as failed:
        loop.tick(75.0)
    assert failed.value.record.unwritten == {"svc": ["b"]}
    metrics.record(failed.value.record, 0.1)
    assert metrics._able == {("svc", "a"): True, ("svc", "b"): False}
    # a write refused because the lease was lost says nothing of the workload: a keeps its last reading
    lost = ActuationResult(ActuationStatus.NOT_LEADER, "lost lease")
    loop, _ = _two(Wants((1, 1)), Actuator(lost, RuntimeError("boom")))
    metrics = LoopMetrics(loop, registry=CollectorRegistry())
    with pytest.raises(TickError) as failed:
        loop.tick(60.0)
    assert failed.value.record.unwritten == {"svc": ["b"]}
    metrics.record(failed.value.record, 0.1)
    assert metrics._able == {("svc", "b"): False}
