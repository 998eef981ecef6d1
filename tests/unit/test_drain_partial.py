"""An uncordon that fails part-way (``autoscaler.loop.drain``): the pods it put back in routing are no longer
tracked as draining, the others still are; and the exposition's HELP of ``autoscaler_actuation_errors_total``
names the uncordon it counts.

``Flaky`` is a drainer that fails on the k-th pod it is asked to put back (counted over every call, in the
order named): the pods before it are back in routing, it and the rest are not, whatever the calls' sizes.
On 21c1a4d one ``uncordon`` call named every pod, and a raise left all of them tracked as draining, those
already back in routing too: a later scale-down took such a pod as drained (never cordoned again) and
removed it while it still took new requests.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from autoscaler.config.loading import parse_config
from autoscaler.loop.actuate import APPLIED, ActuationResult, ActuationStatus
from autoscaler.loop.drain import DrainState, drain, restore
from autoscaler.loop.export import LoopMetrics
from autoscaler.loop.runner import ControlLoop
from autoscaler.state import PodObservation, ServiceEstimate, ServiceObservation, Signals, VariantObservation
from controllers.base import Controller, Decision, Reason
from controllers.base import hold as hold_decision


class Flaky:
    """A ``Drainer`` that keeps which pods are out of routing; its ``fail_at``-th pod put back (1-based,
    over all calls) raises, the pods named before it in that call being back already. ``fail_at`` 0:
    never fails."""

    def __init__(self, fail_at: int = 0) -> None:
        self.fail_at = fail_at
        self.out: set[str] = set()
        self.cordoned: list[str] = []
        self.back: list[str] = []  # the pods put back in routing, in order

    def cordon(self, service: str, pods: Sequence[str]) -> list[str]:
        self.cordoned += pods
        self.out |= set(pods)
        return list(pods)

    def uncordon(self, service: str, pods: Sequence[str]) -> None:
        for p in pods:
            if len(self.back) + 1 == self.fail_at:
                self.fail_at = 0  # fails once
                raise OSError(f"router API down at {p}")
            self.back.append(p)
            self.out.discard(p)


def _est(busy: dict[str, int]) -> ServiceEstimate:
    """Variant h100 with one ready pod per entry of ``busy`` (pod -> requests running)."""
    pods = [PodObservation("h100", 0.1, 0.0, float(n), 0.1, 0.0, name=p) for p, n in busy.items()]
    return ServiceEstimate("svc", 0.0, Signals(), {"h100": VariantObservation(len(busy), 0)}, {"h100": 10.0},
                           False, 10.0 * len(busy), 10.0 * len(busy), 0, pods=pods)


def test_restore_failing_on_the_second_pod_untracks_the_first_alone() -> None:
    """p1, p2, p3 named for removal (taken out at 0, 5, 10 s), the write not landed: the drainer fails on
    the 2nd pod. p1 is back in routing and untracked; p2 (not back) and p3 (never asked) stay tracked as
    draining, with when they were taken out. On 21c1a4d p1 stayed tracked too."""
    router = Flaky(fail_at=2)
    router.out = {"p1", "p2", "p3"}
    state = DrainState(removing={"p1": ("h100", 0.0), "p2": ("h100", 5.0), "p3": ("h100", 10.0)})
    with pytest.raises(OSError, match="at p2"):
        restore(router, state, "svc", landed=())
    assert router.back == ["p1"] and router.out == {"p2", "p3"}
    assert state == DrainState(pods={"p2": ("h100", 5.0), "p3": ("h100", 10.0)}, unsure={"p2"})


@pytest.mark.parametrize("k", [2, 3])
def test_a_drain_that_puts_pods_back_tracks_exactly_those_not_back(k: int) -> None:
    """p1, p2, p3 draining (busy, taken out at 0 s); the decision now holds the variant at its 3: the drain
    puts the three back, failing on the k-th (2nd or 3rd). The k - 1 before it are untracked, the others
    still draining since 0 s (and out of routing). On 21c1a4d all three stayed tracked."""
    pods = ["p1", "p2", "p3"]
    router = Flaky()
    state = DrainState()
    drain(router, state, _est({"p1": 3, "p2": 3, "p3": 3, "p4": 3}), {"h100": 1}, {"h100": pods}, 300.0, 0.0)
    assert router.cordoned == pods and list(state.pods) == pods
    router.fail_at = k
    with pytest.raises(OSError):
        drain(router, state, _est({"p1": 3, "p2": 3, "p3": 3, "p4": 3}), {"h100": 4}, {}, 300.0, 15.0)
    assert router.back == pods[:k - 1] and router.out == set(pods[k - 1:])
    assert state == DrainState(pods={p: ("h100", 0.0) for p in pods[k - 1:]}, unsure={pods[k - 1]})


def test_a_drain_that_keeps_fewer_failing_part_way_untracks_the_pod_it_put_back() -> None:
    """p1, p2, p3 draining (busy, taken out at 0 s), then the decision asks 4 -> 3: p1 stays the victim,
    p2 and p3 go back, failing on the 2nd pod put back (p3). p2 is untracked; p1 and p3 stay draining."""
    router = Flaky()
    state = DrainState()
    busy = {"p1": 3, "p2": 3, "p3": 3, "p4": 3}
    drain(router, state, _est(busy), {"h100": 1}, {"h100": ["p1", "p2", "p3"]}, 300.0, 0.0)
    router.fail_at = 2
    with pytest.raises(OSError, match="at p3"):
        drain(router, state, _est(busy), {"h100": 3}, {"h100": ["p1", "p2", "p3"]}, 300.0, 15.0)
    assert router.back == ["p2"] and router.out == {"p1", "p3"}
    assert state == DrainState(pods={"p1": ("h100", 0.0), "p3": ("h100", 0.0)}, unsure={"p3"})


def test_a_pod_whose_uncordon_raised_after_it_took_effect_is_cordoned_again_before_removal() -> None:
    """p1 draining (taken out at 0 s); the decision holds the variant, and putting p1 back raises after the
    router took it back (the call took effect). p1 stays tracked, marked unsure. At 30 s the scale-down
    takes p1 again: it is cordoned again (on 21c1a4d it counted as drained and, idle, was named for
    removal while routed), tracked from 30 s, and, busy, not named for removal yet."""

    class LateRaise(Flaky):
        def uncordon(self, service: str, pods: Sequence[str]) -> None:
            super().uncordon(service, pods)  # back in routing
            raise OSError("timed out reading the response")

    router = LateRaise()
    state = DrainState()
    drain(router, state, _est({"p1": 2, "p2": 2}), {"h100": 1}, {"h100": ["p1"]}, 300.0, 0.0)
    assert router.cordoned == ["p1"] and state.pods == {"p1": ("h100", 0.0)}
    with pytest.raises(OSError):
        drain(router, state, _est({"p1": 2, "p2": 2}), {"h100": 2}, {}, 300.0, 15.0)
    assert router.out == set() and state == DrainState(pods={"p1": ("h100", 0.0)}, unsure={"p1"})
    out, first, _ = drain(router, state, _est({"p1": 2, "p2": 2}), {"h100": 1}, {"h100": ["p1"]}, 300.0, 30.0)
    assert router.cordoned == ["p1", "p1"] and router.out == {"p1"}
    assert state == DrainState(pods={"p1": ("h100", 30.0)})
    assert out == {"h100": 2} and first == {"h100": []}  # busy: it drains before removal


DOC = {
    "services": [
        {
            "name": "svc",
            "model": "m",
            "slo": {"interactive": {"ttft_s": 2.0, "itl_s": 0.1}, "batch": {"ttft_s": 20.0, "itl_s": 0.25}},
            "variants": [
                {
                    "name": "a",
                    "gpu": "H100-SXM",
                    "price_per_gpu_hour": 3.0,
                    "min_replicas": 0,
                    "max_replicas": 8,
                    "initial_replicas": 4,
                    "kv_cache_tokens": 400_000,
                    "profile": "llama-3-8b/h100-sxm",
                }
            ],
        }
    ],
    "controller": {"tick_s": 15, "window_s": 60},
}
CONFLICT = ActuationResult(ActuationStatus.CONFLICT, "the object has been modified")


class Source:
    """Four idle pods of ``a``, p1 to p4, on every tick (no write removes any)."""

    def observe(self, now: float) -> dict[str, ServiceObservation]:
        pods = [PodObservation("a", 0.1, 0.0, 0.0, 0.1, 0.0, name=f"p{i}") for i in range(1, 5)]
        sig = Signals(request_rate_rps=5.0, running=0.0, queue_length=0.0)
        return {"svc": ServiceObservation("svc", now, sig, {"a": VariantObservation(4, 0)}, history_s=now, pods=pods)}


class Actuator:
    """Answers each write with the next of ``answers``, recording ``(variant, replicas, remove_first)``."""

    def __init__(self, *answers: ActuationResult) -> None:
        self.answers = list(answers)
        self.writes: list[tuple[str, int, list[str]]] = []

    def scale(self, service: str, variant: str, replicas: int, remove_first: Sequence[str] = ()) -> ActuationResult:
        self.writes.append((variant, replicas, list(remove_first)))
        return self.answers.pop(0)


class Asks(Controller):
    """Asks for 2 replicas of ``a`` at every decision."""

    def __init__(self) -> None:
        super().__init__("asks", 15.0, 60.0)

    def decide(self, est: ServiceEstimate, svc: Any) -> Decision:
        if est.current["a"] == 2:
            return hold_decision(est.current, "hold", Reason.SIGNAL_UNKNOWN)
        return Decision({"a": 2}, "want 2", Reason.SCALE_DOWN)


def test_the_next_tick_drains_again_the_pod_put_back_and_not_the_other() -> None:
    """4 -> 2 at 60 s: p1 and p2 (idle, ``idle_first``: by name) are cordoned and named; the write is
    refused, and putting them back fails on the 2nd pod: p1 is back in routing, p2 is not. The uncordon
    is counted once. At 75 s the scale-down stands and the write applies: p2, still out of routing, is
    named first, cordoned again as its call raised (unsure whether it took effect); p1, back in routing,
    is cordoned again before it is named. On 21c1a4d p1 stayed tracked as draining, so it was named for
    removal while still in routing (no second cordon)."""
    act = Actuator(CONFLICT, APPLIED)
    router = Flaky(fail_at=2)
    loop = ControlLoop(parse_config(DOC, "<partial>"), Source(), act, Asks(), drainer=router)
    loop.start(0.0)
    st = loop.tick(60.0).services["svc"]
    assert act.writes == [("a", 2, ["p1", "p2"])] and st.applied == {"a": 4}
    assert router.back == ["p1"] and router.out == {"p2"}
    assert loop.drains["svc"] == DrainState(pods={"p2": ("a", 60.0)}, unsure={"p2"})
    assert loop.actuation_errors == {("svc", "a", ActuationStatus.CONFLICT): 1,
                                     ("svc", "uncordon", ActuationStatus.ERROR): 1}
    loop.tick(75.0)
    assert act.writes == [("a", 2, ["p1", "p2"]), ("a", 2, ["p2", "p1"])]
    assert router.cordoned == ["p1", "p2", "p2", "p1"] and router.out == {"p1", "p2"}
    assert loop.drains["svc"] == DrainState()


def test_the_help_of_actuation_errors_names_every_target_it_counts() -> None:
    """The loop above after its 60 s tick, exposed: ``autoscaler_actuation_errors_total`` carries the
    targets ``a`` (the variant), ``admission`` and ``uncordon``, the uncordon's failure counted 1 with
    result ``error``. Its HELP names the two targets that are not variants, as ``(admission)`` and
    ``(uncordon)``, and the result ``error``. On 21c1a4d the HELP read "Writes (replicas, admission) that
    failed." and named no uncordon."""
    loop = ControlLoop(parse_config(DOC, "<partial>"), Source(), Actuator(CONFLICT), Asks(), drainer=Flaky(2))
    loop.start(0.0)
    metrics = LoopMetrics(loop, registry=CollectorRegistry())
    metrics.record(loop.tick(60.0), 0.1)
    text = generate_latest(metrics.registry).decode()
    fam = next(f for f in text_string_to_metric_families(text) if f.name == "autoscaler_actuation_errors")
    counts = {(s.labels["target"], s.labels["result"]): s.value for s in fam.samples if s.name.endswith("_total")}
    assert {t for t, _ in counts} == {"a", "admission", "uncordon"}
    assert counts[("uncordon", "error")] == 1.0 and counts[("a", "conflict")] == 1.0
    assert sum(counts.values()) == 2.0
    help_line = next(line for line in text.splitlines() if line.startswith("# HELP autoscaler_actuation_errors_total "))
    for target in ("admission", "uncordon"):
        assert f"({target})" in help_line
    assert "result error" in help_line
