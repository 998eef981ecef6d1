"""The loop's idle-to-minimum rule (``autoscaler.loop.estimate``'s ``idle``, ``guard.idle_ticks_to_min``)
with requests the gateway counts but never routes: a request it sheds (HTTP 429) or rejects is a request
arriving, so the service is not idle, even while no replica sees one."""

from __future__ import annotations

import pytest
from support.recording import RecordingActuator

from autoscaler.config import Service
from autoscaler.config.loading import parse_config
from autoscaler.loop.estimate import estimate
from autoscaler.loop.runner import ControlLoop
from autoscaler.state import PrioritySignals, ServiceEstimate, ServiceObservation, Signals, VariantObservation
from controllers.base import Controller, Decision, Reason, hold

SLO = {"interactive": {"ttft_s": 2.0, "itl_s": 0.1}, "batch": {"ttft_s": 20.0, "itl_s": 0.25}}
DOC = {"services": [{"name": "svc", "model": "m", "slo": SLO, "variants": [
    {"name": "a", "gpu": "H100-SXM", "price_per_gpu_hour": 3.0, "min_replicas": 0, "max_replicas": 8,
     "initial_replicas": 2, "kv_cache_tokens": 400_000, "profile": "llama-3-8b/h100-sxm"}]}],
       "controller": {"tick_s": 15, "window_s": 60, "guard": {"idle_ticks_to_min": 3}}}


def quiet(arriving: float | None = None, shed: float | None = None) -> Signals:
    """2 replicas up, no request finished, running or waiting on them; the gateway's counters as given
    (None: unknown): ``arriving`` req/s counted, ``shed`` req/s of them shed (sheddable priority)."""
    prio = {} if shed is None and arriving is None else {"sheddable": PrioritySignals(arrival_rate_rps=arriving,
                                                                                      shed_rps=shed)}
    return Signals(request_rate_rps=0.0, running=0.0, queue_length=0.0, arrival_rate_rps=arriving, by_priority=prio)


@pytest.mark.parametrize("arriving,shed,idle", [
    (None, None, True),  # no gateway counter: the replicas' counters alone, as before
    (0.0, 0.0, True),  # the gateway counted nothing
    (4.0, 4.0, False),  # every request shed before a replica saw it: before, idle
    (4.0, None, False),  # counted, none routed (rejected, or shed where shedding is not read): before, idle
    (None, 4.0, False),  # a priority's shedding alone
])
def test_a_service_whose_requests_the_gateway_counts_is_not_idle(arriving: float | None, shed: float | None,
                                                                  idle: bool) -> None:
    cfg = parse_config(DOC, "<idle>")
    obs = ServiceObservation("svc", 0.0, quiet(arriving, shed), {"a": VariantObservation(2, 0)})
    assert estimate(obs, cfg.services[0], {"a": 1.0}).idle is idle


class _Holds(Controller):
    """Holds every variant where it is (no latency to act on: nothing served)."""

    def __init__(self) -> None:
        super().__init__("holds", 15.0, 60.0)

    def decide(self, est: ServiceEstimate, svc: Service) -> Decision:
        return hold(est.current, "hold: slo_mean_ratio unknown", Reason.SIGNAL_UNKNOWN)


class _Shedding:
    """2 replicas of ``a`` up, none serving: the gateway counts ``arriving`` req/s and sheds them all."""

    def __init__(self, arriving: float) -> None:
        self.arriving = arriving

    def observe(self, now: float) -> dict[str, ServiceObservation]:
        sig = quiet(self.arriving, self.arriving)
        return {"svc": ServiceObservation("svc", now, sig, {"a": VariantObservation(2, 0)}, history_s=now)}


def decisions(arriving: float, ticks: int) -> list[Decision]:
    cfg = parse_config(DOC, "<idle>")
    loop = ControlLoop(cfg, _Shedding(arriving), RecordingActuator(), _Holds())
    loop.start(0.0)
    return [loop.tick(60.0 + 15.0 * k).services["svc"].decision for k in range(ticks)]


def test_requests_shed_at_the_gateway_never_take_the_service_to_its_minimum() -> None:
    # 3 idle ticks take a service to its minimum (0 here), on the third (each tick counts itself). The
    # gateway sheds 4 req/s for 6 ticks: the controller's hold stands on each (before, the third tick on
    # went idle to minimum: 2 -> 0, and a PID with the queue unknown was then woken again on the same
    # arrivals). With nothing counted, the same ticks go to the minimum from the third, so the rule
    # itself still runs.
    assert [d.code for d in decisions(4.0, 6)] == [Reason.SIGNAL_UNKNOWN] * 6
    idle = decisions(0.0, 6)
    assert [d.code for d in idle] == [Reason.SIGNAL_UNKNOWN] * 2 + [Reason.IDLE_TO_MIN] * 4
    assert idle[-1].desired == {"a": 0}
