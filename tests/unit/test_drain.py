"""Drain before removal (autoscaler.loop.drain) and the guard's cut of a variant above its cap."""

from __future__ import annotations

from collections.abc import Sequence

from autoscaler.loop.drain import DrainState, drain
from autoscaler.loop.guard import GuardState, guard
from autoscaler.state import PodObservation, ServiceEstimate, Signals, VariantObservation
from controllers.base import Decision, Reason


class Recorder:
    """A ``Drainer`` that records what it was asked and cordons every pod but ``refused``."""

    def __init__(self, refused: Sequence[str] = ()) -> None:
        self.cordoned: list[str] = []
        self.uncordoned: list[str] = []
        self.refused = set(refused)

    def cordon(self, service: str, pods: Sequence[str]) -> list[str]:
        taken = [p for p in pods if p not in self.refused]
        self.cordoned += taken
        return taken

    def uncordon(self, service: str, pods: Sequence[str]) -> None:
        self.uncordoned += list(pods)


def _est(busy: dict[str, int], starting: int = 0) -> ServiceEstimate:
    pods = [PodObservation("h100", 0.1, 0.0, float(n), 0.1, 0.0, name=p) for p, n in busy.items()]
    return ServiceEstimate("svc", 0.0, Signals(), {"h100": VariantObservation(len(busy), starting)}, {"h100": 10.0},
                           False, 10.0 * (len(busy) + starting), 10.0 * len(busy), starting, pods=pods)


def test_a_busy_pod_is_cordoned_and_kept_until_it_holds_nothing() -> None:
    state, d = DrainState(), Recorder()
    est = _est({"p1": 3, "p2": 5, "p3": 7})
    out, first, notes = drain(d, state, est, {"h100": 2}, {"h100": ["p1", "p2", "p3"]}, 300.0, 0.0)
    assert out == {"h100": 3} and first == {"h100": []} and d.cordoned == ["p1"] and notes
    # 60 s later p1 has finished its three requests: now it goes, named first
    est = _est({"p1": 0, "p2": 5, "p3": 7})
    out, first, _ = drain(d, state, est, {"h100": 2}, {"h100": ["p2", "p1", "p3"]}, 300.0, 60.0)
    assert out == {"h100": 2} and first == {"h100": ["p1"]} and d.cordoned == ["p1"] and not state.pods


def test_a_pod_still_busy_at_the_timeout_is_removed_anyway() -> None:
    state, d = DrainState(), Recorder()
    drain(d, state, _est({"p1": 3, "p2": 5}), {"h100": 1}, {"h100": ["p1", "p2"]}, 300.0, 0.0)
    out, first, _ = drain(d, state, _est({"p1": 1, "p2": 5}), {"h100": 1}, {"h100": ["p1", "p2"]}, 300.0, 300.0)
    assert out == {"h100": 1} and first == {"h100": ["p1"]}


def test_a_decision_that_no_longer_removes_puts_the_pods_back() -> None:
    state, d = DrainState(), Recorder()
    drain(d, state, _est({"p1": 3, "p2": 5}), {"h100": 1}, {"h100": ["p1", "p2"]}, 300.0, 0.0)
    out, first, _ = drain(d, state, _est({"p1": 3, "p2": 5}), {"h100": 3}, {}, 300.0, 15.0)
    assert out == {"h100": 3} and d.uncordoned == ["p1"] and not state.pods and not first


def test_starting_replicas_and_pods_it_cannot_cordon_go_at_once() -> None:
    state, d = DrainState(), Recorder(refused=["p1"])
    # 2 ready + 1 starting -> 1: the starting one holds nothing; p1 cannot be cordoned, so it is not waited on
    out, first, _ = drain(d, state, _est({"p1": 3, "p2": 5}, starting=1), {"h100": 1}, {"h100": ["p1", "p2"]},
                          300.0, 0.0)
    assert out == {"h100": 1} and first == {"h100": ["p1"]} and d.cordoned == []


def test_a_variant_above_its_cap_comes_down_at_once_despite_the_cooldown(make_fleet) -> None:
    full = make_fleet(4, min_replicas=0, max_replicas=8).services[0]
    # as autoscaler.loop.runner.available caps a variant whose pods cannot be placed at its 2 ready ones
    svc = full.model_copy(update={"variants": [full.variants[0].model_copy(update={"max_replicas": 2})]})
    state = GuardState(last_scale_up_s=0.0)  # a scale-up 10 s ago: scale-downs are cooling down
    from autoscaler.config import GuardConfig

    cfg = GuardConfig()
    out = guard(Decision({"h100": 1}, "down", Reason.SCALE_DOWN), {"h100": 5}, svc, cfg, state, 10.0, {"h100": 10.0})
    assert out.replicas == {"h100": 2}  # to the cap at once; the step below it waits for the cool-down
