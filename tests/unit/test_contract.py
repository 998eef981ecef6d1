"""The controller contract (controllers.base), the registry (controllers.registry), and what the loop does
with actuation results and admission thresholds (autoscaler.loop.runner, .actuate, .export, .ticker)."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence

import pytest
from prometheus_client.parser import text_string_to_metric_families

from autoscaler.loop.actuate import APPLIED, ActuationResult, ActuationStatus
from autoscaler.loop.export import LoopMetrics
from autoscaler.loop.runner import ControlLoop, TickError
from autoscaler.loop.ticker import run_every
from autoscaler.state import ServiceObservation, Signals, VariantObservation
from controllers.base import Controller, Decision, Reason
from controllers.registry import NAMES, ROLE_ONLY, build, parse_spec


class Source:
    def __init__(self, ready: int = 2) -> None:
        self.ready = ready

    def observe(self, now: float) -> dict[str, ServiceObservation]:
        sig = {"request_rate_rps": 5.0, "running": 3.0, "queue_length": 0.0}
        return {"svc": ServiceObservation("svc", now, Signals.of(sig), {"h100": VariantObservation(self.ready, 0)})}


class Actuator:
    def __init__(self, results: list[ActuationResult]) -> None:
        self.results = results
        self.calls: list[tuple[str, str, int]] = []

    def scale(self, service: str, variant: str, replicas: int, remove_first: Sequence[str] = ()) -> ActuationResult:
        self.calls.append((service, variant, replicas))
        return self.results.pop(0)


class Sink:
    def __init__(self, result: ActuationResult = APPLIED) -> None:
        self.result = result
        self.published: list[tuple[str, dict[str, float]]] = []
        self.budgets: list[dict[str, int]] = []

    def publish(self, service: str, thresholds: Mapping[str, float],
                itl_budget: Mapping[str, int] | None = None) -> ActuationResult:
        self.published.append((service, dict(thresholds)))
        self.budgets.append(dict(itl_budget or {}))
        return self.result


class Fixed(Controller):
    """Asks for ``want`` replicas (and admission thresholds) and records every guard cut it is told of."""

    def __init__(self, want: int, admission: dict[str, float] | None = None,
                 itl_budget: dict[str, int] | None = None) -> None:
        super().__init__("fixed-test", 15.0, 60.0, own_guard=True)
        self.want = want
        self.admission = admission or {}
        self.itl_budget = itl_budget or {}
        self.cuts: list[tuple[dict[str, int], dict[str, int]]] = []

    def decide(self, est, svc) -> Decision:
        return Decision({"h100": self.want}, "test", Reason.SCALE_UP, admission=dict(self.admission),
                        itl_budget=dict(self.itl_budget))

    def on_guard_cut(self, service, intended, applied, weights) -> None:
        self.cuts.append((dict(intended), dict(applied)))


def samples(metrics: LoopMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    from prometheus_client import generate_latest

    text = generate_latest(metrics.registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


@pytest.mark.parametrize("status", [ActuationStatus.CONFLICT, ActuationStatus.FORBIDDEN, ActuationStatus.UNREACHABLE])
def test_a_failed_write_keeps_the_variant_is_counted_and_exported(make_fleet, status: ActuationStatus) -> None:
    cfg = make_fleet(2, min_replicas=1, max_replicas=8)
    ctrl = Fixed(5)
    act = Actuator([ActuationResult(status, "HTTP 409: the object has been modified"), APPLIED])
    loop = ControlLoop(cfg, Source(), act, ctrl)
    metrics = LoopMetrics(loop)
    rec = loop.tick(15.0)
    metrics.record(rec, 0.01)
    st = rec.services["svc"]
    assert act.calls == [("svc", "h100", 5)]
    assert st.actuation == {"h100": ActuationResult(status, "HTTP 409: the object has been modified")}
    assert st.applied == {"h100": 2}  # nothing changed: still the current count
    assert ctrl.cuts == [({"h100": 5}, {"h100": 2})]  # the controller is told, like a guard cut
    assert loop.actuation_errors == {("svc", "h100", status): 1}
    s = samples(metrics)
    key = (("result", status.value), ("service", "svc"), ("target", "h100"))
    assert s[("autoscaler_actuation_errors_total", key)] == 1
    assert s[("autoscaler_able_to_scale", (("service", "svc"), ("variant", "h100")))] == 0.0
    metrics.record(loop.tick(30.0), 0.01)  # the retry applies
    s = samples(metrics)
    assert s[("autoscaler_able_to_scale", (("service", "svc"), ("variant", "h100")))] == 1.0
    assert s[("autoscaler_actuation_errors_total", key)] == 1


def test_a_write_not_made_for_want_of_the_lease_is_counted_apart_and_leaves_able_to_scale(make_fleet) -> None:
    """A write the fence stopped (``not_leader``) is counted under its own result, and says nothing about
    whether the workload can scale: ``autoscaler_able_to_scale`` keeps the last real write's value (1 here),
    so the AutoscalerActuationFailing alert does not page for a daemon that lost its Lease."""
    cfg = make_fleet(2, min_replicas=1, max_replicas=8)
    act = Actuator([APPLIED, ActuationResult(ActuationStatus.NOT_LEADER, "no longer leads: not written")])
    loop = ControlLoop(cfg, Source(), act, Fixed(5))
    metrics = LoopMetrics(loop)
    metrics.record(loop.tick(15.0), 0.01)  # applied: 2 -> 5
    loop.controller = Fixed(6)
    rec = loop.tick(30.0)
    metrics.record(rec, 0.01)
    assert rec.services["svc"].actuation["h100"].status is ActuationStatus.NOT_LEADER
    assert rec.services["svc"].applied == {"h100": 2}  # the source still shows 2: nothing changed
    s = samples(metrics)
    assert s[("autoscaler_actuation_errors_total", (("result", "not_leader"), ("service", "svc"),
                                                    ("target", "h100")))] == 1
    assert s[("autoscaler_actuation_errors_total", (("result", "conflict"), ("service", "svc"),
                                                    ("target", "h100")))] == 0
    assert s[("autoscaler_able_to_scale", (("service", "svc"), ("variant", "h100")))] == 1.0


def test_admission_thresholds_go_to_the_sink_and_are_exported(make_fleet) -> None:
    cfg = make_fleet(2, min_replicas=1, max_replicas=8)
    sink = Sink()
    loop = ControlLoop(cfg, Source(), Actuator([APPLIED]), Fixed(2, {"low": 1.5, "high": 30.0}), admission=sink)
    metrics = LoopMetrics(loop)
    rec = loop.tick(15.0)
    metrics.record(rec, 0.01)
    assert sink.published == [("svc", {"low": 1.5, "high": 30.0})]
    assert rec.services["svc"].admission == APPLIED
    s = samples(metrics)
    assert s[("autoscaler_admission_threshold", (("priority", "low"), ("service", "svc")))] == 1.5
    refused = Sink(ActuationResult(ActuationStatus.INVALID, "unknown priority 'x'"))
    loop = ControlLoop(cfg, Source(), Actuator([APPLIED]), Fixed(2, {"x": 1.0}), admission=refused)
    loop.tick(15.0)
    assert loop.actuation_errors == {("svc", "admission", ActuationStatus.INVALID): 1}


def test_the_controllers_itl_budget_goes_to_the_sink_with_the_thresholds(make_fleet) -> None:
    cfg = make_fleet(2, min_replicas=1, max_replicas=8)
    sink = Sink()
    ControlLoop(cfg, Source(), Actuator([APPLIED]), Fixed(2, {"low": 1.5}, {"h100": 12}), admission=sink).tick(15.0)
    assert sink.published == [("svc", {"low": 1.5})] and sink.budgets == [{"h100": 12}]
    alone = Sink()  # a budget without thresholds is still published
    ControlLoop(cfg, Source(), Actuator([APPLIED]), Fixed(2, None, {"h100": 7}), admission=alone).tick(15.0)
    assert alone.published == [("svc", {})] and alone.budgets == [{"h100": 7}]


def test_no_admission_thresholds_publish_nothing(make_fleet) -> None:
    cfg = make_fleet(2, min_replicas=1, max_replicas=8)
    sink = Sink()
    ControlLoop(cfg, Source(), Actuator([APPLIED]), Fixed(2), admission=sink).tick(15.0)
    assert sink.published == []


class Bare(Controller):
    def decide(self, est, svc) -> Decision:
        return Decision({}, "bare")


def test_controller_settings_are_validated() -> None:
    with pytest.raises(ValueError, match=r"x: tick_s must be a finite number > 0, got 0\.0"):
        Bare("x", 0.0, 60.0)
    with pytest.raises(ValueError, match="window_s must be a finite number > 0, got inf"):
        Bare("x", 15.0, float("inf"))
    bare = Bare("x", 15.0, 60.0)
    assert not bare.own_guard
    assert bare.on_guard_cut("svc", {"a": 2}, {"a": 1}, {"a": 1.0}) is None  # no memory: nothing to track


# The oracle plans on the trace's future and the bound searches it by simulation: simulation only. The
# controllers of ROLE_ONLY scale prefill/decode pools only (tests/unit/test_baselines_dynamo_pd.py).
LIVE_NAMES = tuple(n for n in NAMES if n not in ("oracle", "bound", *ROLE_ONLY))


@pytest.mark.parametrize("name", LIVE_NAMES)
def test_every_controller_builds_without_a_trace(make_fleet, name: str) -> None:
    cfg = make_fleet(2, min_replicas=1, max_replicas=8)
    spec = f"{name}:peak_rps=20" if name == "static-ilp" else name
    ctrl = build(spec, cfg)
    assert ctrl.name == spec and ctrl.tick_s > 0 and ctrl.window_s > 0
    actuator = Actuator([APPLIED] * 4)
    est_loop = ControlLoop(cfg, Source(), actuator, ctrl)
    est_loop.start(-ctrl.window_s)
    st = est_loop.tick(ctrl.tick_s).services["svc"]
    # The controller itself decided (a window of history exists: no warm-up hold), or held on a signal
    # this source does not give (per-pod gauges, latency); and the actuator saw exactly the change.
    assert st.decision.code is not Reason.WARMING_UP
    assert st.decision.reason.startswith(name) or st.decision.code is Reason.SIGNAL_UNKNOWN, st.decision.reason
    n = st.applied["h100"]
    assert actuator.calls == ([] if n == 2 else [("svc", "h100", n)])


def test_controller_periods_come_from_the_fleet_or_the_anchor(make_fleet) -> None:
    cfg = make_fleet(2, controller={"tick_s": 10, "window_s": 120})
    assert (build("pid", cfg).tick_s, build("pid", cfg).window_s) == (10.0, 120.0)
    assert build("hpa", cfg).tick_s == 15.0 and build("hpa", cfg).window_s == 120.0  # HPA's sync period
    assert (build("dynamo", cfg).tick_s, build("dynamo", cfg).window_s) == (180.0, 180.0)
    assert build("kpa", cfg).tick_s == 2.0
    assert not build("pid", cfg).own_guard and build("static", cfg).own_guard and build("wva", cfg).own_guard


def test_static_without_a_trace_holds_the_initial_replicas(make_fleet) -> None:
    cfg = make_fleet(3, min_replicas=1, max_replicas=8)
    assert build("static", cfg).replicas == {"svc": {"h100": 3}}
    sized = build("static:peak_rps=100", cfg).replicas["svc"]["h100"]
    assert sized > build("static:peak_rps=10", cfg).replicas["svc"]["h100"]


def test_parse_spec_checks_names_and_values() -> None:
    assert parse_spec(" static:peak_rps=5 ") == ("static", {"peak_rps": 5.0})
    with pytest.raises(ValueError, match="static peak_rps must be > 0"):
        parse_spec("static:peak_rps=0")
    # pid's spec takes no parameters: the error says where its gains are set instead
    with pytest.raises(ValueError, match=r"bad parameter 'kp=1' for pid; its spec takes no parameters; its gains "
                                         r"and setpoint \(kp, ki, kd, setpoint, deadband, ...\) are set in the fleet "
                                         r"file under controller.pid \(docs/configuration.md#controller\)"):
        parse_spec("pid:kp=1")


def test_run_every_keeps_a_fixed_schedule() -> None:
    clock = [100.0]
    started: list[float] = []

    def tick() -> None:
        started.append(clock[0])
        clock[0] += 0.3 if len(started) != 2 else 1.5  # the second tick overruns its 1 s period

    def sleep(s: float) -> None:
        clock[0] += s

    assert run_every(1.0, tick, 4, sleep=sleep, clock=lambda: clock[0]) == 4
    # due at 100, 101, 102, 103: the overrun tick (101 -> 102.5) is followed at once, then back on time
    assert started == [100.0, 101.0, 102.5, 103.0]
    started.clear()
    clock[0] = 200.0

    def slow(n: int = 2) -> None:
        started.append(clock[0])
        clock[0] += 0.3 if len(started) != n else 4.5  # the second tick overruns four periods

    assert run_every(1.0, slow, 4, sleep=sleep, clock=lambda: clock[0]) == 4
    # 201 -> 205.5: the ticks due at 202, 203 and 204 are skipped, one runs at once (due 205), then 206
    assert started == [200.0, 201.0, 205.5, 206.0]
    with pytest.raises(ValueError, match="finite number > 0"):
        run_every(0.0, tick, 1)
    with pytest.raises(ValueError, match="limit must be >= 1"):
        run_every(1.0, tick, 0)


def test_the_loop_tells_the_controller_whether_an_admission_policy_runs(make_fleet) -> None:
    from controllers.admission import build_admission

    cfg = make_fleet(2, min_replicas=1, max_replicas=8)
    told: list[bool] = []

    class Listening(Fixed):
        def on_admission(self, enforced: bool) -> None:
            told.append(enforced)

    ControlLoop(cfg, Source(), None, Listening(2))
    ControlLoop(cfg, Source(), None, Listening(2), Sink(), build_admission("mpc", cfg.controller.admission_settings))
    assert told == [False, True]
    # the MPC with shed=1 plans shedding only where a policy runs
    from controllers.mpc import MPCController

    mpc = build("mpc:shed=1", cfg)
    assert isinstance(mpc, MPCController) and mpc.shed_enforced  # before any loop: as configured
    ControlLoop(cfg, Source(), None, mpc)
    assert not mpc.shed_enforced


def test_a_dry_run_tells_the_controller_it_shadows_whether_an_admission_policy_runs(make_fleet) -> None:
    # The dry-run wraps its controller in a Shadow; the loop's on_admission must reach the MPC inside,
    # or mpc:shed=1 plans on shedding that no policy enforces (fewer replicas than `run` would ask).
    from autoscaler.dryrun import DryRun
    from controllers.mpc import MPCController

    for admission, enforced in (("none", False), ("mpc", True)):
        cfg = make_fleet(2, min_replicas=1, max_replicas=8, controller={"admission": admission})
        mpc = build("mpc:shed=1", cfg)
        assert isinstance(mpc, MPCController)
        mpc.shed_enforced = not enforced  # so the assertion below sees the loop's call, not the default
        DryRun(cfg, Source(), mpc)
        assert mpc.shed_enforced is enforced


class Fleet:
    """``names`` services observed alike: 2 ready replicas of ``h100`` each."""

    def __init__(self, names: list[str]) -> None:
        self.names = names

    def observe(self, now: float) -> dict[str, ServiceObservation]:
        sig = {"request_rate_rps": 5.0, "running": 3.0, "queue_length": 0.0}
        return {n: ServiceObservation(n, now, Signals.of(sig), {"h100": VariantObservation(2, 0)}) for n in self.names}


class MeetingActuator:
    """Each write waits until ``parties`` writes are in flight at once (a barrier): sequential writes
    never get there and break it (``BrokenBarrierError``, after its timeout: a bound on a failure,
    not a timing). ``fail``: services whose write is refused."""

    def __init__(self, parties: int, fail: frozenset[str] = frozenset()) -> None:
        self.barrier = threading.Barrier(parties, timeout=30) if parties > 1 else None
        self.fail = fail
        self.calls: list[tuple[str, str, int]] = []
        self.lock = threading.Lock()

    def scale(self, service: str, variant: str, replicas: int, remove_first: Sequence[str] = ()) -> ActuationResult:
        if self.barrier is not None:
            self.barrier.wait()
        with self.lock:
            self.calls.append((service, variant, replicas))
        return ActuationResult(ActuationStatus.CONFLICT, "HTTP 409") if service in self.fail else APPLIED


def test_the_services_scale_writes_run_side_by_side_and_each_result_stays_its_services(make_fleet) -> None:
    """Issue 35: with ``writers`` = 3 the three services' writes are in flight at once (the barrier of
    3 is met, which one-at-a-time writes never reach); each service's result, applied count, guard cut
    and failure count are its own, as when written one after another (``writers`` = 1, in order)."""
    one = make_fleet(2, min_replicas=1, max_replicas=8)
    names = ["a", "b", "c"]
    cfg = one.model_copy(update={"services": [one.services[0].model_copy(update={"name": n}) for n in names]})
    for writers, parties in ((3, 3), (1, 1)):
        ctrl = Fixed(5)
        act = MeetingActuator(parties, fail=frozenset({"b"}))
        loop = ControlLoop(cfg, Fleet(names), act, ctrl, writers=writers)
        rec = loop.tick(15.0)
        assert act.barrier is None or not act.barrier.broken
        assert sorted(act.calls) == [(n, "h100", 5) for n in names]
        if writers == 1:
            assert act.calls == [(n, "h100", 5) for n in names]  # one after another, in the fleet's order
        assert {n: st.applied for n, st in rec.services.items()} == {"a": {"h100": 5}, "b": {"h100": 2},
                                                                      "c": {"h100": 5}}
        assert rec.services["b"].actuation["h100"].status is ActuationStatus.CONFLICT
        assert rec.services["a"].actuation["h100"] == APPLIED
        assert ctrl.cuts == [({"h100": 5}, {"h100": 2})]  # b's alone
        assert loop.actuation_errors == {("b", "h100", ActuationStatus.CONFLICT): 1}


class RaisingActuator(MeetingActuator):
    """``MeetingActuator`` whose write of the ``raises`` services raises (a bug in the actuator)."""

    def __init__(self, parties: int, raises: frozenset[str], fail: frozenset[str] = frozenset()) -> None:
        super().__init__(parties, fail)
        self.raises = raises

    def scale(self, service: str, variant: str, replicas: int, remove_first: Sequence[str] = ()) -> ActuationResult:
        res = super().scale(service, variant, replicas, remove_first)
        if service in self.raises:
            raise KeyError(f"{service}/{variant}")
        return res


def test_a_write_that_raises_costs_its_own_service_alone(make_fleet) -> None:
    """Service b's write raises: a and c are still written, their results told to the controller and counted
    (c's conflict), side by side and one after another alike; then the tick raises ``TickError`` with b's
    error, caused by it, and a and c's record (the daemon writes their Events, logs the failure and ticks
    again). Before, a and c's writes landed (side by side) or c was never written (one after another), and
    neither service's result reached the controller or the failure counts."""
    one = make_fleet(2, min_replicas=1, max_replicas=8)
    names = ["a", "b", "c"]
    cfg = one.model_copy(update={"services": [one.services[0].model_copy(update={"name": n}) for n in names]})
    for writers, parties in ((3, 3), (1, 1)):
        ctrl = Fixed(5)
        act = RaisingActuator(parties, raises=frozenset({"b"}), fail=frozenset({"c"}))
        loop = ControlLoop(cfg, Fleet(names), act, ctrl, writers=writers)
        with pytest.raises(TickError, match="b: KeyError: 'b/h100'") as failed:
            loop.tick(15.0)
        assert list(failed.value.errors) == ["b"] and isinstance(failed.value.__cause__, KeyError)
        rec = failed.value.record
        assert {n: st.applied for n, st in rec.services.items()} == {"a": {"h100": 5}, "c": {"h100": 2}}
        assert rec.services["c"].actuation["h100"].status is ActuationStatus.CONFLICT
        assert sorted(act.calls) == [(n, "h100", 5) for n in names]
        assert ctrl.cuts == [({"h100": 5}, {"h100": 2})]  # c's refused write, told
        # b's raise counts as a failed write of the variant it was due to write (``error``), c's refusal as its own
        assert loop.actuation_errors == {("c", "h100", ActuationStatus.CONFLICT): 1,
                                         ("b", "h100", ActuationStatus.ERROR): 1}
        assert rec.unwritten == {"b": ["h100"]}


class RaisingFor(Fixed):
    """``Fixed`` whose decision for the ``raises`` services raises (a bug in the controller)."""

    def __init__(self, want: int, raises: frozenset[str]) -> None:
        super().__init__(want)
        self.raises = raises

    def decide(self, est, svc) -> Decision:
        if svc.name in self.raises:
            raise ZeroDivisionError(f"decide {svc.name}")
        return super().decide(est, svc)


@pytest.mark.parametrize("writers", [1, 2])
def test_a_decision_that_raises_costs_its_own_service_alone(make_fleet, writers: int) -> None:
    """Services a and b at 2 replicas each; the controller asks 1 replica of each (a scale-down), but
    raises deciding a. b is still decided and written (2 -> 1) and in the record; a is written nothing
    (no action, so no scale-down), counted as no failed write, and the tick raises ``TickError`` naming
    a's ZeroDivisionError, caused by it. Before, ``_stage`` ran outside the per-service handling, so a's
    raise left the tick at once: b was never written and the daemon got no record."""
    one = make_fleet(2, min_replicas=1, max_replicas=8)
    cfg = one.model_copy(update={"services": [one.services[0].model_copy(update={"name": n}) for n in ("a", "b")]})
    ctrl = RaisingFor(1, frozenset({"a"}))
    act = MeetingActuator(1)
    loop = ControlLoop(cfg, Fleet(["a", "b"]), act, ctrl, writers=writers)
    with pytest.raises(TickError, match="a: ZeroDivisionError: decide a") as failed:
        loop.tick(15.0)
    assert list(failed.value.errors) == ["a"] and isinstance(failed.value.__cause__, ZeroDivisionError)
    assert act.calls == [("b", "h100", 1)]
    rec = failed.value.record
    assert {n: st.applied for n, st in rec.services.items()} == {"b": {"h100": 1}}
    assert rec.unwritten == {} and loop.actuation_errors == {}


class JointRaisingFor(RaisingFor):
    """``RaisingFor`` that says it planned the services in one problem this tick (as the MPC does under
    shared GPU quotas or a budget)."""

    @property
    def plans_jointly(self) -> bool:
        return True


def test_a_decision_that_raises_in_a_joint_plan_writes_no_service(make_fleet) -> None:
    """As above, but the services were planned together (shared GPU limits): b's part assumed a's, so
    writing b alone could pass the shared limit (a review's case: a budget of 14 GPUs held at 16). The
    tick raises ``TickError`` naming a, and neither service is written."""
    one = make_fleet(2, min_replicas=1, max_replicas=8)
    cfg = one.model_copy(update={"services": [one.services[0].model_copy(update={"name": n}) for n in ("a", "b")]})
    act = MeetingActuator(1)
    loop = ControlLoop(cfg, Fleet(["a", "b"]), act, JointRaisingFor(1, frozenset({"a"})))
    with pytest.raises(TickError, match="a: ZeroDivisionError: decide a") as failed:
        loop.tick(15.0)
    assert list(failed.value.errors) == ["a"]
    assert act.calls == []
    assert failed.value.record.services == {}


def test_the_mpc_says_when_it_planned_the_services_together(make_fleet) -> None:
    """``MPCController.plans_jointly`` is True after a ``prepare`` that solved two services under a GPU
    budget, False without limits (each ``decide`` solves its own)."""
    from controllers.mpc import MPCController

    one = make_fleet(2, min_replicas=1, max_replicas=8)
    two = one.model_copy(update={"services": [one.services[0].model_copy(update={"name": n}) for n in ("a", "b")]})
    weights = {s.name: {v.name: 10.0 for v in s.variants} for s in two.services}
    for cfg, joint in ((two, False), (two.model_copy(update={"gpu_limits": two.gpu_limits.model_copy(
            update={"budget": 64})}), True)):
        ctrl = MPCController(cfg, weights, forecast="last", hold_s=0)
        loop = ControlLoop(cfg, Fleet(["a", "b"]), MeetingActuator(1), ctrl)
        loop.start(0.0)
        loop.tick(ctrl.window_s + 15.0)
        assert ctrl.plans_jointly is joint
