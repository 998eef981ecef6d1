"""A daemon's tick whose scale write of one service raises (``autoscaler.daemon.Daemon.tick`` over
``ControlLoop.tick``'s ``TickError``): the other services' Events are still written, and the tick
still fails, naming the service whose write raised."""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Any

import pytest
from kubernetes import client

from autoscaler.adapters.prometheus import connect
from autoscaler.daemon import Daemon
from autoscaler.loop.actuate import ActuationResult, ActuationStatus
from autoscaler.loop.runner import TickError
from autoscaler.state import ServiceObservation, Signals, VariantObservation
from autoscaler.wiring import build_source
from controllers.base import Controller, Decision, Reason

NAMES = ["a", "b", "c"]


class Fleet:
    """Every service observed alike: 2 ready replicas of ``h100``."""

    def observe(self, now: float) -> dict[str, ServiceObservation]:
        sig = {"request_rate_rps": 5.0, "running": 3.0, "queue_length": 0.0}
        return {n: ServiceObservation(n, now, Signals.of(sig), {"h100": VariantObservation(2, 0)}) for n in NAMES}


class Five(Controller):
    """Asks for 5 replicas of ``h100`` on every tick (its own guard: no warm-up hold)."""

    def __init__(self) -> None:
        super().__init__("five-test", 15.0, 60.0, own_guard=True)

    def decide(self, est, svc) -> Decision:
        return Decision({"h100": 5}, "test", Reason.SCALE_UP)


class Writes:
    """Each write goes 2 -> its target; the ``raises`` services' writes raise (a bug, not a refusal)."""

    def __init__(self, raises: frozenset[str]) -> None:
        self.raises = raises

    def scale(self, service: str, variant: str, replicas: int, remove_first: Sequence[str] = ()) -> ActuationResult:
        if service in self.raises:
            raise KeyError(f"{service}/{variant}")
        return ActuationResult(ActuationStatus.APPLIED, before=2, after=replicas)


class Events:
    """An ``EventRecorder`` that records the Events it is asked for: (service, variant, before, after)."""

    def __init__(self) -> None:
        self.written: list[tuple[str, str, int | None, int | None]] = []
        self.lock = threading.Lock()

    def result(self, name: str, v: str, res: ActuationResult, reason: str) -> int:
        with self.lock:
            self.written.append((name, v, res.before, res.after))
        return 1

    def other_writer(self, name: str, v: str, ours: int, theirs: int, quiet_s: float) -> bool:
        raise AssertionError("no other writer in this test")


def failures(d: Daemon) -> dict[str, float]:
    """``autoscaler_tick_failures_total`` of daemon ``d`` (identity ``d``) by shard."""
    out = {}
    for shard in range(d.shards.n):
        value = d.registry.get_sample_value("autoscaler_tick_failures_total", {"identity": "d", "shard": str(shard)})
        assert value is not None, f"no failure count of shard {shard}: it must read 0 before any failure"
        out[str(shard)] = value
    return out


def dry_daemon(make_fleet, shards: dict[str, int] | None = None) -> Daemon:
    """A dry-run daemon over services a, b, c (each 1-8 replicas of ``h100``); with ``shards`` (service ->
    shard) the services are split over that many shards. Its API client and Prometheus are never called."""
    one = make_fleet(2, min_replicas=1, max_replicas=8)
    update: dict[str, Any] = {"services": [one.services[0].model_copy(update={"name": n}) for n in NAMES]}
    if shards is not None:
        update["kubernetes"] = one.kubernetes.model_copy(
            update={"shards": len(set(shards.values())), "service_shards": shards})
    cfg = one.model_copy(update=update)
    api = client.ApiClient(client.Configuration(host="http://127.0.0.1:1"))  # dry-run: never called
    source = build_source(cfg, connect(cfg.prometheus, "http://127.0.0.1:1"))
    return Daemon(cfg, "pid", source, api, "d", "127.0.0.1:0", dry_run=True)


@pytest.mark.parametrize("raises", [frozenset({"b"}), frozenset({"a", "c"})])
def test_a_write_that_raises_still_leaves_the_other_services_events_written(make_fleet, caplog,
                                                                            raises: frozenset[str]) -> None:
    """Services a, b, c each scale 2 -> 5; the writes of ``raises`` raise. Every other service gets its
    ``ScaledUp`` Event (2 -> 5) and its decision in the tick's metrics; the tick still raises ``TickError``,
    naming each failed service and its KeyError, which no Event reports as a scale. Before, the
    loop's exception left the daemon no record, so no Event was written for the services that did scale."""
    d = dry_daemon(make_fleet)
    try:
        loop = d.loops[0] = d._new_loop(0.0)
        loop.source, loop.controller, loop.actuator = Fleet(), Five(), Writes(raises)
        events = d.events = Events()  # type: ignore[assignment]
        with caplog.at_level(logging.INFO), pytest.raises(TickError) as failed:
            d.tick()
        ok = [n for n in NAMES if n not in raises]
        assert sorted(events.written) == [(n, "h100", 2, 5) for n in ok]
        assert list(failed.value.errors) == sorted(raises)
        assert all(isinstance(e, KeyError) for e in failed.value.errors.values())
        assert sorted(failed.value.record.services) == ok
        for n in sorted(raises):
            assert f"{n}: KeyError: '{n}/h100'" in str(failed.value)
        assert isinstance(failed.value.__cause__, KeyError)
        logged = {r.getMessage() for r in caplog.records}
        assert {f"{n}: decision" for n in ok} <= logged  # the services written are logged as decided
        assert not {f"{n}: decision" for n in raises} & logged  # a failed one never reads as decided
        assert d.metrics is not None
        assert {n for (n, _) in d.metrics._decisions} == set(ok)
        assert d.ticks == 0  # a failed tick is not counted (``/readyz``), as before
    finally:
        d.server.close()


@pytest.mark.parametrize("raises", [frozenset({"a"}), frozenset({"a", "c"})])
def test_a_shard_whose_write_raises_leaves_the_other_shards_ticked_and_their_events_written(
        make_fleet, caplog, raises: frozenset[str]) -> None:
    """Two shards, a and b on shard 0, c on shard 1, one daemon leading both; a's write raises (and c's).
    Shard 1 is still ticked, and every service written (b, and c unless it raised) gets its Event; the
    tick raises shard 0's ``TickError`` (naming a alone) and logs shard 1's failure, when it has one, as
    ``tick failed`` naming c. Before, shard 0's exception ended the tick: no Event at all, shard 1
    never ticked."""
    d = dry_daemon(make_fleet, {"a": 0, "b": 0, "c": 1})
    try:
        for i in (0, 1):
            loop = d.loops[i] = d._new_loop(0.0, i)
            assert [s.name for s in loop.cfg.services] == (["a", "b"] if i == 0 else ["c"])
            loop.source, loop.controller, loop.actuator = Fleet(), Five(), Writes(raises)
        events = d.events = Events()  # type: ignore[assignment]
        with caplog.at_level(logging.INFO), pytest.raises(TickError) as failed:
            d.tick()
        assert sorted(events.written) == [(n, "h100", 2, 5) for n in NAMES if n not in raises]
        assert list(failed.value.errors) == ["a"] and sorted(failed.value.record.services) == ["b"]
        later = [r for r in caplog.records if r.getMessage().startswith("tick failed: ")]
        assert ["c: KeyError: 'c/h100'" in r.getMessage() for r in later] == ([True] if "c" in raises else [])
        assert failures(d) == {"0": 1.0, "1": 1.0 if "c" in raises else 0.0}  # AutoscalerShardFailing's count
    finally:
        d.server.close()


class Thresholds:
    """An ``AdmissionSink`` whose publishing of the ``raises`` services' thresholds raises (a bug)."""

    def __init__(self, raises: frozenset[str]) -> None:
        self.raises = raises

    def publish(self, service: str, thresholds: object, itl_budget: object = None) -> ActuationResult:
        if service in self.raises:
            raise RuntimeError(f"publish {service}")
        return ActuationResult(ActuationStatus.APPLIED)


class FiveShedding(Five):
    """``Five`` with an admission threshold, so every service's results publish one."""

    def decide(self, est, svc) -> Decision:
        decision = super().decide(est, svc)
        decision.admission = {"sheddable": 1.0}
        return decision


def test_results_that_raise_when_published_cost_their_own_service_alone(make_fleet) -> None:
    """Services a, b, c each scale 2 -> 5 and publish an admission threshold; b's publishing raises
    after every write has landed. a and c still get their ``ScaledUp`` Events (2 -> 5) and are in the
    record; the tick raises ``TickError`` naming b's RuntimeError. Before, the raise in b's results
    (``ControlLoop._act``) left the loop at once: c's results were never told, and the daemon, with no
    record, wrote no Event for the three writes that landed."""
    d = dry_daemon(make_fleet)
    try:
        loop = d.loops[0] = d._new_loop(0.0)
        loop.source, loop.controller, loop.actuator = Fleet(), FiveShedding(), Writes(frozenset())
        loop.admission = Thresholds(frozenset({"b"}))  # type: ignore[assignment]
        events = d.events = Events()  # type: ignore[assignment]
        with pytest.raises(TickError) as failed:
            d.tick()
        assert sorted(events.written) == [("a", "h100", 2, 5), ("c", "h100", 2, 5)]
        assert list(failed.value.errors) == ["b"] and isinstance(failed.value.errors["b"], RuntimeError)
        assert sorted(failed.value.record.services) == ["a", "c"]
        assert failed.value.record.services["c"].applied == {"h100": 5}
        assert loop.actuation_errors == {("b", "admission", ActuationStatus.ERROR): 1}  # counted as a failed publish
    finally:
        d.server.close()


class Raising(Five):
    """Raises in ``prepare`` (a bug before any write of its loop, and before any service's decision: a
    decision that raises costs its own service alone, ``test_contract.py``)."""

    def prepare(self, estimates) -> None:
        raise ValueError("prepare: decide every service")


@pytest.mark.parametrize("bad", [0, 1])
def test_a_shard_that_raises_before_its_writes_leaves_the_other_shards_ticked(make_fleet, bad: int) -> None:
    """Two shards, a and b on shard 0, c on shard 1, one daemon leading both; shard ``bad``'s
    controller raises in ``prepare``. The other shard's services still scale 2 -> 5 and get their
    Events; the tick raises the ValueError and is not counted. Before, only a ``TickError`` was caught
    per shard: shard 0's raise left shard 1 unticked, and shard 1's left shard 0's two landed writes
    (a, b) without an Event."""
    d = dry_daemon(make_fleet, {"a": 0, "b": 0, "c": 1})
    try:
        for i in (0, 1):
            loop = d.loops[i] = d._new_loop(0.0, i)
            loop.source, loop.actuator = Fleet(), Writes(frozenset())
            loop.controller = Raising() if i == bad else Five()
        events = d.events = Events()  # type: ignore[assignment]
        with pytest.raises(ValueError, match="decide"):
            d.tick()
        good = ["c"] if bad == 0 else ["a", "b"]
        assert sorted(events.written) == [(n, "h100", 2, 5) for n in good]
        assert d.ticks == 0
        # the shard that raised is counted, the other not: its ticks keep the loop's duration counting,
        # so only this count shows the failing shard (AutoscalerShardFailing)
        assert failures(d) == {str(bad): 1.0, str(1 - bad): 0.0}
    finally:
        d.server.close()


def _sample(metrics: Any, name: str, labels: dict[str, str]) -> float | None:
    """The value of ``name``'s sample with ``labels`` in a collector's families, None when absent."""
    for family in metrics.collect():
        for s in family.samples:
            if s.name == name and s.labels == labels:
                return float(s.value)
    return None


def test_a_write_that_raises_every_tick_alerts_as_a_failed_write(make_fleet) -> None:
    """One service, a, whose write (2 -> 5) raises on each of two ticks. Each tick is recorded (the loop
    does not read as stalled), so the write itself must read as failed: ``autoscaler_actuation_errors_total``
    {a, h100, error} is 2 (AutoscalerActuationFailing: 3 in 10 minutes) and ``autoscaler_able_to_scale``
    {a, h100} is 0. Before, the raise was counted nowhere and able_to_scale stayed 1: with the tick now
    recorded (no LoopStalled either) a service that never scaled raised no alert."""
    cfg = make_fleet(2, min_replicas=1, max_replicas=8)
    cfg = cfg.model_copy(update={"services": [cfg.services[0].model_copy(update={"name": "a"})]})
    api = client.ApiClient(client.Configuration(host="http://127.0.0.1:1"))  # dry-run: never called
    source = build_source(cfg, connect(cfg.prometheus, "http://127.0.0.1:1"))
    d = Daemon(cfg, "pid", source, api, "d", "127.0.0.1:0", dry_run=True)
    try:
        loop = d.loops[0] = d._new_loop(0.0)
        loop.source, loop.controller, loop.actuator = Fleet(), Five(), Writes(frozenset({"a"}))
        d.events = Events()  # type: ignore[assignment]
        for _ in range(2):
            with pytest.raises(TickError):
                d.tick()
        assert d.metrics is not None
        assert _sample(d.metrics, "autoscaler_loop_duration_seconds_count", {}) == 2
        errors = {"service": "a", "target": "h100", "result": "error"}
        assert _sample(d.metrics, "autoscaler_actuation_errors_total", errors) == 2
        assert _sample(d.metrics, "autoscaler_able_to_scale", {"service": "a", "variant": "h100"}) == 0
    finally:
        d.server.close()


class Down:
    """The daemon's source whose ``observe`` raises (a bug, not a query that failed), counting the calls."""

    def __init__(self) -> None:
        self.source = object()  # no ``services``: not a PrometheusSource
        self.connectors: dict[object, object] = {}  # no workload read (the daemon's gauges)
        self.states: dict[object, object] = {}
        self.calls = 0

    def observe(self, now: float) -> dict[str, ServiceObservation]:
        self.calls += 1
        raise RuntimeError("observe bug")


def test_a_source_that_raises_is_queried_once_a_tick_not_once_a_shard(make_fleet) -> None:
    """Three shards led by one daemon, each loop reading the daemon's one observation (``ShardView``);
    the source raises. The tick raises it, having asked the source once, not once per shard (each shard
    now goes on after another's raise: a source that raised after its deadline would have cost the
    tick three deadlines, toward the stall that gives the Leases up)."""
    one = make_fleet(2, min_replicas=1, max_replicas=8)
    kube = one.kubernetes.model_copy(update={"shards": 3, "service_shards": {"a": 0, "b": 1, "c": 2}})
    cfg = one.model_copy(update={"services": [one.services[0].model_copy(update={"name": n}) for n in NAMES],
                                 "kubernetes": kube})
    api = client.ApiClient(client.Configuration(host="http://127.0.0.1:1"))  # dry-run: never called
    source = build_source(cfg, connect(cfg.prometheus, "http://127.0.0.1:1"))
    d = Daemon(cfg, "pid", source, api, "d", "127.0.0.1:0", dry_run=True)
    try:
        for i in range(3):
            loop = d.loops[i] = d._new_loop(0.0, i)
            loop.controller, loop.actuator = Five(), Writes(frozenset())
        down = d.source = Down()  # type: ignore[assignment]
        d.events = Events()  # type: ignore[assignment]
        with pytest.raises(RuntimeError, match="observe bug"):
            d.tick()
        assert down.calls == 1
    finally:
        d.server.close()


class RaisingFor(Five):
    """``Five`` whose decision for service b raises (a bug in the controller)."""

    def decide(self, est, svc) -> Decision:
        if svc.name == "b":
            raise ValueError(f"decide {svc.name}")
        return super().decide(est, svc)


def test_a_decision_that_raises_leaves_the_other_services_events_written(make_fleet, caplog) -> None:
    """Services a, b, c each scale 2 -> 5, but the controller raises deciding b. a and c still get their
    ``ScaledUp`` Events and their decisions logged; b gets neither, and the tick raises ``TickError`` naming
    b's ValueError (logged as ``tick failed`` by ``_tick_once``). Before, b's raise ended the loop's tick
    before any write: no service scaled and no Event was written."""
    d = dry_daemon(make_fleet)
    try:
        loop = d.loops[0] = d._new_loop(0.0)
        loop.source, loop.controller, loop.actuator = Fleet(), RaisingFor(), Writes(frozenset())
        events = d.events = Events()  # type: ignore[assignment]
        with caplog.at_level(logging.INFO), pytest.raises(TickError) as failed:
            d.tick()
        assert sorted(events.written) == [("a", "h100", 2, 5), ("c", "h100", 2, 5)]
        assert list(failed.value.errors) == ["b"] and isinstance(failed.value.__cause__, ValueError)
        logged = {r.getMessage() for r in caplog.records}
        assert {"a: decision", "c: decision"} <= logged and "b: decision" not in logged
        assert failures(d) == {"0": 1.0}
    finally:
        d.server.close()
