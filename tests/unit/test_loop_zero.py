"""The loop's scale from zero (``autoscaler.loop.runner``, ``scale_from_zero``) with the queue known and
unknown: an unknown queue is not "nothing waiting" (it was read as 0), and not a hold either."""

from __future__ import annotations

from typing import Any

from support.recording import RecordingActuator

from autoscaler.config import Service
from autoscaler.config.loading import parse_config
from autoscaler.loop.runner import QUEUE_UNKNOWN_AT_ZERO, ControlLoop
from autoscaler.state import ServiceEstimate, ServiceObservation, Signals, VariantObservation
from controllers.base import Controller, Decision, Reason

SLO = {"interactive": {"ttft_s": 2.0, "itl_s": 0.1}, "batch": {"ttft_s": 20.0, "itl_s": 0.25}}


def variant(name: str, price: float) -> dict[str, Any]:
    return {"name": name, "gpu": "H100-SXM", "price_per_gpu_hour": price, "min_replicas": 0, "max_replicas": 8,
            "initial_replicas": 0, "kv_cache_tokens": 400_000, "profile": "llama-3-8b/h100-sxm"}


class _Wakes(Controller):
    """Asks for 2 of ``a`` on every tick (a controller that wakes on the arrivals); counts its calls."""

    def __init__(self) -> None:
        super().__init__("wakes", 15.0, 60.0)
        self.calls = 0

    def decide(self, est: ServiceEstimate, svc: Service) -> Decision:
        self.calls += 1
        return Decision({"a": 2, "b": 0}, "plan: 2 of a for the arrivals", Reason.SCALE_UP)


class _Plans(Controller):
    """Plans zero for every variant, not a hold (the MPC at a rate too low to pay a cold start)."""

    def __init__(self) -> None:
        super().__init__("plans", 15.0, 60.0)

    def decide(self, est: ServiceEstimate, svc: Service) -> Decision:
        return Decision({"a": 0, "b": 0}, "plan: 0 replicas", Reason.NO_CHANGE)


class _Zero:
    """No replica up; 6 req/s arrive; the queue as given (None: unknown); ``unavailable``: both variants
    marked so (their pods cannot be placed)."""

    def __init__(self, queue: float | None) -> None:
        self.queue = queue
        self.arriving: float | None = 6.0
        self.unavailable = False

    def observe(self, now: float) -> dict[str, ServiceObservation]:
        sig = Signals(arrival_rate_rps=self.arriving, queue_length=self.queue)
        counts = {n: VariantObservation(0, 0, unavailable=self.unavailable) for n in ("a", "b")}
        return {"svc": ServiceObservation("svc", now, sig, counts, history_s=now)}


class _Stays(Controller):
    """Holds every variant at zero (a controller with no latency to act on: the PID with no replica up)."""

    def __init__(self) -> None:
        super().__init__("stays", 15.0, 60.0)

    def decide(self, est: ServiceEstimate, svc: Service) -> Decision:
        return Decision({"a": 0, "b": 0}, "hold: slo_mean_ratio unknown", Reason.SIGNAL_UNKNOWN, hold=True)


def run(queue: float | None, ctrl: Controller | None = None, arriving: float | None = 6.0,
        unavailable: bool = False) -> tuple[Decision, int]:
    doc = {"services": [{"name": "svc", "model": "m", "slo": SLO, "variants": [variant("a", 3.0), variant("b", 2.0)]}],
           "controller": {"tick_s": 15, "window_s": 60}}
    cfg = parse_config(doc, "<zero>")
    ctrl = ctrl or _Wakes()
    source = _Zero(queue)
    source.arriving = arriving
    source.unavailable = unavailable
    loop = ControlLoop(cfg, source, RecordingActuator(), ctrl)
    loop.start(0.0)
    return loop.tick(60.0).services["svc"].decision, getattr(ctrl, "calls", -1)


def test_requests_waiting_with_nothing_up_wake_the_cheapest_variant_on_the_loop_s_rule() -> None:
    # 4 waiting, no replica: the loop's own rule, one of the cheaper variant (b, $2/h against $3/h for
    # the same profile), the controller not asked
    d, calls = run(4.0)
    assert d.code is Reason.SCALE_FROM_ZERO and d.desired == {"a": 0, "b": 1} and calls == 0


def test_an_unknown_queue_with_nothing_up_is_said_and_left_to_the_controller() -> None:
    # unknown, not 0: the loop's rule cannot size from it, and the decision says so (before, it read as
    # 0 and said nothing); not a hold: the controller still wakes the fleet on what it knows
    d, calls = run(None)
    assert calls == 1 and d.desired == {"a": 2, "b": 0} and d.code is Reason.SCALE_UP and not d.hold
    assert d.reason == f"plan: 2 of a for the arrivals; {QUEUE_UNKNOWN_AT_ZERO}"
    # a known empty queue: the controller's decision as it is
    d, calls = run(0.0)
    assert calls == 1 and d.reason == "plan: 2 of a for the arrivals"


def test_arrivals_with_the_queue_unknown_wake_the_cheapest_variant_where_the_controller_keeps_zero() -> None:
    # a controller that keeps every variant at zero (no replica, so no latency: the PID's hold) while
    # 6 req/s arrive and the queue is unknown: no signal ever appears without a replica, so the loop's
    # rule wakes one of the cheaper variant (b) on the arrivals (before, the fleet stayed at zero)
    d, _ = run(None, _Stays())
    assert d.code is Reason.SCALE_FROM_ZERO and d.desired == {"a": 0, "b": 1}
    assert d.reason == "scale from zero: 6 req/s arriving, the queue unknown and no replica"
    # the arrivals unknown too, or known to be 0: nothing says a request is there, the controller's hold stands
    for arriving in (None, 0.0):
        d, _ = run(None, _Stays(), arriving)
        assert d.desired == {"a": 0, "b": 0} and d.hold and QUEUE_UNKNOWN_AT_ZERO in d.reason, d.reason
    # a zero the controller planned (not a hold) stands: waking it each tick it plans zero would flap
    d, _ = run(None, _Plans())
    assert d.desired == {"a": 0, "b": 0} and not d.hold and QUEUE_UNKNOWN_AT_ZERO in d.reason, d.reason


def test_no_variant_with_room_leaves_the_decision_to_the_controller() -> None:
    # both variants marked unavailable with none ready: each is capped at 0 (``available``), so the
    # loop's scale from zero has nothing to wake, whether requests wait (4) or arrive with the queue
    # unknown; the controller's decision stands (before, min() of no candidate raised and lost the tick)
    for queue in (4.0, None):
        d, _ = run(queue, _Stays(), unavailable=True)
        assert d.desired == {"a": 0, "b": 0} and d.code is not Reason.SCALE_FROM_ZERO, d.reason
