"""The loop's admission publishes run ``writers`` services at once (``ControlLoop.tick``, issue 35): a
fleet's first publish and each ConfigMap heartbeat write every service's ConfigMap in one tick, one
API call each. Side by side, a tick publishes what one after another publishes, records the same, and
counts and raises per service as before."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from autoscaler.loop.actuate import ActuationResult, ActuationStatus
from autoscaler.loop.runner import ControlLoop, TickError
from autoscaler.state import ServiceObservation, Signals, VariantObservation
from controllers.base import Controller, Decision, Reason

NAMES = ["a", "b", "c", "d", "e", "f"]


def fleet(make_fleet: Any) -> Any:
    one = make_fleet(2, min_replicas=1, max_replicas=8)
    return one.model_copy(update={"services": [one.services[0].model_copy(update={"name": n}) for n in NAMES]})


class Fleet:
    """Every service observed alike: 2 ready replicas of ``h100``."""

    def observe(self, now: float) -> dict[str, ServiceObservation]:
        sig = {"request_rate_rps": 5.0, "running": 3.0, "queue_length": 0.0}
        return {n: ServiceObservation(n, now, Signals.of(sig), {"h100": VariantObservation(2, 0)}) for n in NAMES}


class Shedding(Controller):
    """Its own guard (no warm-up hold); service ``NAMES[i]`` asks for ``2 + i % 3`` replicas, a
    sheddable threshold of ``i`` s and an ITL budget of ``10 + i``, so each publish is its own."""

    def __init__(self) -> None:
        super().__init__("shedding-test", 15.0, 60.0, own_guard=True)

    def decide(self, est, svc) -> Decision:
        i = NAMES.index(svc.name)
        n = 2 + i % 3
        return Decision({"h100": n}, "test", Reason.SCALE_UP if n > 2 else Reason.NO_CHANGE,
                        admission={"sheddable": float(i)}, itl_budget={"h100": 10 + i})


class Writes:
    def scale(self, service: str, variant: str, replicas: int, remove_first: Any = ()) -> ActuationResult:
        return ActuationResult(ActuationStatus.APPLIED, before=2, after=replicas)


class Sink:
    """Records each publish (service, thresholds, budget); ``refuses`` answer ``conflict``, ``raises``
    raise; with ``barrier``, each publish waits there first (all of them must be under way at once)."""

    def __init__(self, refuses: frozenset[str] = frozenset(), raises: frozenset[str] = frozenset(),
                 barrier: threading.Barrier | None = None) -> None:
        self.refuses, self.raises, self.barrier = refuses, raises, barrier
        self.got: list[tuple[str, dict[str, float | None], dict[str, int]]] = []
        self.lock = threading.Lock()

    def publish(self, service: str, thresholds: Any, itl_budget: Any = None) -> ActuationResult:
        if self.barrier is not None:
            self.barrier.wait()
        with self.lock:
            self.got.append((service, dict(thresholds), dict(itl_budget or {})))
        if service in self.raises:
            raise RuntimeError(f"publish {service}")
        if service in self.refuses:
            return ActuationResult(ActuationStatus.CONFLICT, "refused")
        return ActuationResult(ActuationStatus.APPLIED)


def tick(make_fleet: Any, sink: Sink, writers: int) -> tuple[ControlLoop, Any]:
    loop = ControlLoop(fleet(make_fleet), Fleet(), Writes(), Shedding(), admission=sink, writers=writers)
    try:
        return loop, loop.tick(100.0)
    except TickError as exc:
        return loop, exc


def summary(record: Any) -> dict[str, tuple[Any, ...]]:
    """What a record says per service: applied, reason, the writes' and the publish's statuses."""
    return {name: (st.applied, st.reason, {v: r.status for v, r in st.actuation.items()},
                   None if st.admission is None else st.admission.status)
            for name, st in record.services.items()}


def test_side_by_side_publishes_and_records_what_one_after_another_does(make_fleet) -> None:
    """Six services, publishes 8 at once against one at a time: the same six publishes (service i:
    sheddable ``i`` s, budget ``10 + i``, by hand from ``Shedding``), the same record in the fleet's
    order (scale-ups of c, f to 4 and b, e to 3 applied), and the refused publishes (b, e) counted alike."""
    refuses = frozenset({"b", "e"})
    runs = {w: tick(make_fleet, Sink(refuses), w) for w in (1, 8)}
    want = [(n, {"sheddable": float(i)}, {"h100": 10 + i}) for i, n in enumerate(NAMES)]
    one_loop, one = runs[1]
    assert one_loop.admission.got == want  # type: ignore[union-attr]  # in order, one after another
    loop, rec = runs[8]
    assert sorted(loop.admission.got) == want  # type: ignore[union-attr]
    assert list(rec.services) == NAMES == list(one.services)
    assert summary(rec) == summary(one)
    assert {n: st.applied["h100"] for n, st in rec.services.items()} == {"a": 2, "b": 3, "c": 4, "d": 2, "e": 3,
                                                                          "f": 4}
    assert [n for n, st in rec.services.items() if st.admission.status is ActuationStatus.CONFLICT] == ["b", "e"]
    assert loop.actuation_errors == one_loop.actuation_errors == {
        ("b", "admission", ActuationStatus.CONFLICT): 1, ("e", "admission", ActuationStatus.CONFLICT): 1}


def test_publishes_run_side_by_side(make_fleet) -> None:
    """With 8 writers the six publishes are under way at once: each waits at a barrier of six, which
    only opens when all six have reached it (one after another, the first would wait for ever, so the
    barrier's timeout breaks it and every publish raises)."""
    sink = Sink(barrier=threading.Barrier(len(NAMES), timeout=120))
    _, rec = tick(make_fleet, sink, 8)
    assert not isinstance(rec, TickError), rec
    assert sorted(s for s, _, _ in sink.got) == NAMES
    assert all(st.admission.status is ActuationStatus.APPLIED for st in rec.services.values())


@pytest.mark.parametrize("writers", [1, 8])
def test_a_publish_that_raises_costs_its_own_service_alone(make_fleet, writers: int) -> None:
    """b's and e's publishes raise: the tick raises ``TickError`` naming b then e (the fleet's order)
    whichever ended first, its record holds the four others, and each raise is counted as a failed
    publish (``error``), with 1 writer and with 8."""
    loop, out = tick(make_fleet, Sink(raises=frozenset({"e", "b"})), writers)
    assert isinstance(out, TickError)
    assert list(out.errors) == ["b", "e"]
    assert list(out.record.services) == ["a", "c", "d", "f"]
    assert loop.actuation_errors == {("b", "admission", ActuationStatus.ERROR): 1,
                                     ("e", "admission", ActuationStatus.ERROR): 1}
