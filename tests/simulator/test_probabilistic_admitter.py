"""The probabilistic admitter at the simulated gateway (``GatewayConfig.admitter``), after llm-d-router
v0.10.0's ``probabilistic-admitter`` (``pkg/epp/framework/plugins/requestcontrol/admitter/
probabilisticadmitter``: ``plugin.go`` and README.md).

The fleet tests use one replica with ``max_num_seqs`` 1 (as tests/simulator/test_admission.py) and an
admitter KV threshold so small that any KV in use makes its saturation huge (probability 1), while an
idle replica reads 0 (probability 0): which requests it rejects then follows from the mapping alone.
"""

from __future__ import annotations

import math
import random

import pytest

from autoscaler.adapters.gateway_api import objective_priority
from autoscaler.config import GatewayConfig
from autoscaler.config.loading import parse_config
from autoscaler.errors import ConfigError
from autoscaler.report import summarize
from autoscaler.simulate import SimulationRun
from autoscaler.simulator.engine import COMPLETED, SHED, SimRequest
from autoscaler.simulator.fleet import FleetSimulator
from autoscaler.simulator.gateway import (
    ADMITTER_SEED,
    DISPATCHED,
    REJECTED,
    Gateway,
    admitter_shed_probability,
)
from autoscaler.workload.types import BATCH, CRITICAL, INTERACTIVE, PRIORITIES, SHEDDABLE, STANDARD, Request, Workload

ON = {"admitter": "probabilistic"}


def req(t: float, priority: int, out: int = 10, workflow: int | None = None) -> Request:
    cls = BATCH if priority == SHEDDABLE else INTERACTIVE
    return Request(arrival_s=t, input_tokens=100, output_tokens=out, request_class=cls, priority=priority,
                   workflow_id=workflow, step=None if workflow is None else 0)


def attempt(priority: int, workflow: int | None = None) -> SimRequest:
    return SimRequest(req(0.0, priority, workflow=workflow))


# ------------------------------------------------------------------ the curve
@pytest.mark.parametrize(("sat", "expected"), [
    (0.0, 0.0),
    (0.08, 0.08 ** 5 * 300),      # 9.8304e-4: the README's "dead zone", < 0.1 %
    (0.15, 0.0227813),            # README: ~2.3 %
    (0.2, 0.096),                 # README: ~9.6 %
    (0.3, 0.729),                 # README: ~73 %
    (0.32, 1.0),                  # 0.32^5 x 300 = 1.0066: capped
    (1.0, 1.0),
    (7.5, 1.0),
])
def test_the_shed_probability_with_the_plugins_defaults(sat: float, expected: float) -> None:
    """min(sat^5 x 300, 1), computed by hand, against the README's shedding-curve table."""
    g = GatewayConfig()
    assert admitter_shed_probability(sat, g.admitter_power, g.admitter_k) == pytest.approx(expected, rel=1e-5)
    assert (g.admitter_power, g.admitter_k, g.admitter_queue_depth_threshold, g.admitter_kv_cache_threshold) == (
        5.0, 300.0, 5, 0.8)


def test_every_negative_request_is_rejected_from_0_32_on() -> None:
    """The full-shed point (1/k)^(1/power) = exp(-ln(300) / 5) = 0.31958 (the README says ~0.34, where
    the probability is already 1: 0.34^5 x 300 = 1.36)."""
    assert admitter_shed_probability(0.3195, 5.0, 300.0) < 1.0
    assert admitter_shed_probability(0.3197, 5.0, 300.0) == 1.0


def test_the_shed_probability_follows_power_and_k() -> None:
    """power 2, k 4: 0.25^2 x 4 = 0.25; 0.5^2 x 4 = 1; power 0.5, k 0.1: sqrt(0.81) x 0.1 = 0.09."""
    assert admitter_shed_probability(0.25, 2.0, 4.0) == pytest.approx(0.25)
    assert admitter_shed_probability(0.5, 2.0, 4.0) == 1.0
    assert admitter_shed_probability(0.81, 0.5, 0.1) == pytest.approx(0.09)


# ------------------------------------------------------------------ who is sheddable
@pytest.mark.parametrize("threshold", [None, 0.0, 1.5])
@pytest.mark.parametrize("level", range(len(PRIORITIES)))
def test_the_epps_sheddable_is_a_negative_objective_priority(level: int, threshold: float | None) -> None:
    """The plugin rejects only priority < 0 (``IsSheddable``). With the objectives as the adapter
    publishes them (``rank``) that is a class whose threshold is 0, whatever the class; with
    ``sheddable_objective: negative`` the sheddable class always, and the others as before."""
    name = PRIORITIES[level]
    for mode in ("rank", "negative"):
        g = Gateway(GatewayConfig(sheddable_objective=mode, **ON))
        assert g.set_thresholds({name: threshold}) is None
        negative = objective_priority(name, threshold) < 0 or (mode == "negative" and level == SHEDDABLE)
        assert g.epp_sheddable(level) is negative


def test_critical_and_standard_pass_at_any_saturation_and_draw_nothing() -> None:
    """Priority >= 0 is admitted before the plugin reads any metric or draws; the sheddable class,
    published negative, is rejected at a saturation past the full-shed point."""
    g = Gateway(GatewayConfig(sheddable_objective="negative", **ON))
    assert g._admitter is not None
    state = g._admitter.getstate()

    def unread() -> float:
        raise AssertionError("saturation read for a priority the admitter never rejects")
    for level in (STANDARD, CRITICAL):
        assert all(g.release(attempt(level), unread) for _ in range(1000))
    assert g._admitter.getstate() == state
    assert not any(g.release(attempt(SHEDDABLE), lambda: 0.5) for _ in range(1000))
    assert g.admitter_rejected == [1000, 0, 0]


def test_a_rejected_request_leaves_its_workflow_not_started() -> None:
    g = Gateway(GatewayConfig(sheddable_objective="negative", **ON))
    assert not g.release(attempt(SHEDDABLE, workflow=7), lambda: 1.0)
    assert 7 not in g.started
    assert g.release(attempt(SHEDDABLE, workflow=8), lambda: 0.0)
    assert 8 in g.started


@pytest.mark.parametrize("sat", [0.15, 0.2, 0.25, 0.3])
def test_the_rejected_share_is_the_curves_within_four_sigma(sat: float) -> None:
    """n = 20,000 sheddable attempts at a fixed saturation: the rejections are Binomial(n, p),
    p = sat^5 x 300, so within 4 standard deviations sqrt(n p (1 - p)) of n p (0.99994 of the
    time for a fair stream; the stream is seeded, so this run is always the same one)."""
    n = 20_000
    p = sat ** 5 * 300
    g = Gateway(GatewayConfig(sheddable_objective="negative", **ON))
    rejected = sum(not g.release(attempt(SHEDDABLE), lambda: sat) for _ in range(n))
    assert rejected == g.admitter_rejected[SHEDDABLE]
    assert abs(rejected - n * p) <= 4 * math.sqrt(n * p * (1 - p))


def test_the_admitter_is_off_by_default_and_draws_nothing() -> None:
    g = Gateway(GatewayConfig(sheddable_objective="negative"))
    assert g._admitter is None
    assert all(g.release(attempt(SHEDDABLE), lambda: 99.0) for _ in range(100))
    assert g.admitter_rejected == [0, 0, 0]


# ------------------------------------------------------------------ continuing workflows
def through(g: Gateway, sr: SimRequest, sat: float) -> bool:
    """``sr`` offered to ``g`` at time 0, dispatched (``pop``) and screened at saturation ``sat``."""
    g.offer(sr, 0.0)
    assert g.pop(0.0) is sr
    return g.release(sr, lambda: sat)


def started(g: Gateway, workflow: int) -> None:
    """A first request of ``workflow`` goes through at saturation 0 (probability 0): it is in progress."""
    assert through(g, attempt(SHEDDABLE, workflow=workflow), 0.0)
    assert workflow in g.started


def test_a_continuing_request_is_sent_under_a_protected_objective_and_never_rejected() -> None:
    """``continuation_objective: protected``: at a saturation past the full-shed point (probability
    1) the admitter rejects every new sheddable request, the first of a new workflow included, and
    passes every one continuing a workflow in progress, without reading the saturation or drawing
    (the plugin returns before either for priority >= 0)."""
    g = Gateway(GatewayConfig(sheddable_objective="negative", continuation_objective="protected", **ON))
    assert g._admitter is not None
    started(g, 1)
    state = g._admitter.getstate()

    def unread() -> float:
        raise AssertionError("saturation read for a protected continuation")
    for _ in range(500):
        sr = attempt(SHEDDABLE, workflow=1)
        g.offer(sr, 0.0)
        assert sr.continuing and not g.admitter_screens(sr)
        assert g.pop(0.0) is sr and g.release(sr, unread)
    assert g._admitter.getstate() == state
    assert not through(g, attempt(SHEDDABLE), 0.5)
    assert not through(g, attempt(SHEDDABLE, workflow=2), 0.5)  # a workflow's first request is new
    assert 2 not in g.started
    assert g.admitter_rejected == [2, 0, 0]


def test_with_the_same_objective_a_continuing_request_is_rejected_like_a_new_one() -> None:
    """``same`` (default): a continuing sheddable request is screened at the class's objective, and
    at probability 1 rejected; the first request of the workflow stays the one in progress."""
    assert GatewayConfig().continuation_objective == "same"
    g = Gateway(GatewayConfig(sheddable_objective="negative", **ON))
    started(g, 1)
    sr = attempt(SHEDDABLE, workflow=1)
    assert not through(g, sr, 0.5)
    assert sr.continuing and g.admitter_screens(sr)
    assert g.admitter_rejected == [1, 0, 0]


@pytest.mark.parametrize("sat", [0.15, 0.2, 0.25])
def test_protected_continuations_leave_new_requests_the_curves_share(sat: float) -> None:
    """20,000 new sheddable requests, each followed by one continuing workflow 1, at saturation
    ``sat``: no continuation is rejected, and the new ones get exactly the decisions of the seeded
    stream drawn once per new request (``rng.random() < sat^5 x 300``, recomputed here from
    ``ADMITTER_SEED``: the continuations draw nothing), whose count is within 4 standard deviations of
    Binomial(n, p)."""
    n, p = 20_000, sat ** 5 * 300
    g = Gateway(GatewayConfig(sheddable_objective="negative", continuation_objective="protected", **ON))
    started(g, 1)
    new = []
    for _ in range(n):
        new.append(through(g, attempt(SHEDDABLE), sat))
        assert through(g, attempt(SHEDDABLE, workflow=1), sat)
    stream = random.Random(ADMITTER_SEED)
    stream.random()  # the first request of workflow 1, drawn at saturation 0
    assert new == [not stream.random() < p for _ in range(n)]
    rejected = n - sum(new)
    assert rejected == g.admitter_rejected[SHEDDABLE]
    assert abs(rejected - n * p) <= 4 * math.sqrt(n * p * (1 - p))


def test_with_the_same_objective_every_sheddable_request_draws_as_before() -> None:
    """``same``: new and continuing requests alike draw once each from the seeded stream and are
    rejected when the draw is below the curve's probability (0.096 at saturation 0.2), as before the
    option existed."""
    g = Gateway(GatewayConfig(sheddable_objective="negative", **ON))
    started(g, 1)
    got = [through(g, attempt(SHEDDABLE, workflow=1 if i % 2 else None), 0.2) for i in range(4000)]
    stream = random.Random(ADMITTER_SEED)
    stream.random()
    assert got == [not stream.random() < 0.2 ** 5 * 300 for _ in range(4000)]
    assert got[1::2].count(False) > 0  # continuations among the rejected


@pytest.mark.parametrize("level", [SHEDDABLE, STANDARD, CRITICAL])
def test_protected_covers_a_class_whose_threshold_is_zero(level: int) -> None:
    """With the adapter's objectives (``rank``) a class whose threshold is 0 is published negative
    (rank - 3): its new requests are rejected at probability 1, its continuations pass under
    ``protected`` and not under ``same``."""
    for mode, passes in (("protected", True), ("same", False)):
        g = Gateway(GatewayConfig(continuation_objective=mode, **ON))
        started(g, 1)  # at threshold None: the sheddable class is rank 0 and passes
        assert g.set_thresholds({PRIORITIES[level]: 0.0}) is None
        cont = attempt(level, workflow=1)
        cont.continuing = True  # as offer marks it (offer would defer it above a threshold of 0)
        assert g.release(cont, lambda: 0.5) is passes
        assert not g.release(attempt(level), lambda: 0.5)


# ------------------------------------------------------------------ settings
@pytest.mark.parametrize(("key", "value", "message"), [
    ("admitter", "random", "admitter"),
    ("admitter_power", 0, "admitter_power"),
    ("admitter_power", -1.5, "admitter_power"),
    ("admitter_k", 0.0, "admitter_k"),
    ("admitter_queue_depth_threshold", 0, "admitter_queue_depth_threshold"),
    ("admitter_queue_depth_threshold", 2.5, "admitter_queue_depth_threshold"),
    ("admitter_kv_cache_threshold", 0, "admitter_kv_cache_threshold"),
    ("admitter_k", "300", "admitter_k"),
    ("sheddable_objective", "minus_one", "sheddable_objective"),
    ("continuation_objective", "always", "continuation_objective"),
    ("continuation_objective", True, "continuation_objective"),
])
def test_bad_admitter_settings_are_one_line_naming_the_key(make_fleet, key: str, value: object, message: str) -> None:
    """The plugin's own checks (each > 0, ``Factory`` in plugin.go), and ours on the choices."""
    doc = make_fleet(1).model_dump(mode="json", exclude_unset=True)
    with pytest.raises(ConfigError, match=rf"simulator\.gateway\.{message}") as err:
        parse_config({**doc, "simulator": {"gateway": {key: value}}}, "f.yaml")
    assert "\n" not in str(err.value)


def test_a_kv_threshold_above_one_is_the_plugins_to_take() -> None:
    """The plugin checks only > 0 (unlike the utilization detector's threshold, at most 1)."""
    assert GatewayConfig(admitter_kv_cache_threshold=1.5).admitter_kv_cache_threshold == 1.5


# ------------------------------------------------------------------ in the fleet
def admitter_sim(make_fleet, requests: list[Request], **gateway) -> FleetSimulator:
    sim_cfg = {"gateway": {"queue_depth_threshold": 5, "admitter_kv_cache_threshold": 1e-9, **ON, **gateway},
               "clients": {"max_retries": 0}}
    cfg = make_fleet(1, simulator=sim_cfg, engine={"max_num_seqs": 1, "max_num_batched_tokens": 8192})
    return FleetSimulator(cfg, Workload(requests, source="test:admitter"), admission=True)


def test_the_admitter_rejects_negative_objectives_once_kv_is_in_use(make_fleet) -> None:
    """r0 (sheddable) finds the replica idle: saturation 0, dispatched. Then its KV is in use and the
    admitter's saturation is far past 0.32: the sheddable r1-r3 are rejected when flow control
    dispatches them (shed, counted Dispatched in flow control, not as its 429s), the critical r4
    and standard r5 pass."""
    reqs = [req(0.0, SHEDDABLE, out=200), req(0.01, SHEDDABLE), req(0.02, SHEDDABLE), req(0.03, SHEDDABLE),
            req(0.04, CRITICAL), req(0.05, STANDARD)]
    sim = admitter_sim(make_fleet, reqs, sheddable_objective="negative")
    sim.run_until(10_000)
    assert sim.done
    assert [sim.final[i].status for i in range(6)] == [COMPLETED, SHED, SHED, SHED, COMPLETED, COMPLETED]
    flow = sim.services["svc"].flow
    assert flow.admitter_rejected == [3, 0, 0] and flow.shed == [0, 0, 0]
    assert flow.dispatched == [4, 1, 1]
    assert flow.queue_duration[DISPATCHED][SHEDDABLE].count == 4 and flow.queue_duration[REJECTED][SHEDDABLE].count == 0
    assert all(sim.final[i].dispatched_s is None for i in (1, 2, 3))
    res = summarize(SimulationRun(sim, [], "static", sim.now, 1.0, "pid"))
    assert res["admission"]["admitter_rejected"] == 3 == res["admission"]["shed"]
    assert res["admission"]["shed_attempts"] == 0


def test_with_the_adapters_objectives_only_a_zero_threshold_is_rejected(make_fleet) -> None:
    """``sheddable_objective: rank``: the sheddable class is published at priority 0 and passes; once
    its threshold is 0 (objective -3) the admitter rejects it, and so it would the critical class's."""
    reqs = [req(0.0, SHEDDABLE, out=200), req(0.01, SHEDDABLE), req(0.02, CRITICAL)]
    sim = admitter_sim(make_fleet, reqs)
    sim.run_until(10_000)
    assert [sim.final[i].status for i in range(3)] == [COMPLETED] * 3
    sim = admitter_sim(make_fleet, reqs)
    sim.services["svc"].flow.set_thresholds({"sheddable": 0.0, "critical": 0.0})
    sim.run_until(10_000)
    # r0 (idle replica, saturation 0) passes; r1 and r2 find nothing queued ahead (estimated wait 0,
    # admitted by the threshold) but KV in use: the admitter rejects both
    assert [sim.final[i].status for i in range(3)] == [COMPLETED, SHED, SHED]
    assert sim.services["svc"].flow.admitter_rejected == [1, 0, 1]


def test_the_admitter_off_leaves_a_run_unchanged(make_fleet) -> None:
    """Off (the default), its parameters change nothing: the same run, attempt by attempt."""
    reqs = [req(0.005 * i, i % 3, out=50 + 7 * (i % 5), workflow=i // 4 if i % 2 else None) for i in range(300)]

    def outcome(**gateway) -> list[tuple]:
        sim = admitter_sim(make_fleet, reqs, **gateway)
        sim.services["svc"].flow.set_thresholds({"sheddable": 0.0})
        sim.run_until(100_000)
        assert sim.done
        return [(sr.status, sr.attempt, sr.t_first, sr.t_finish, sr.waited_s) for sr in sim.final]

    base = outcome(admitter="none")
    assert base == outcome(admitter="none", admitter_power=1.0, admitter_k=1000.0, sheddable_objective="negative")
    assert base != outcome(sheddable_objective="negative")  # the admitter on: some run differs


def test_a_protected_continuation_completes_where_the_same_objective_sheds_it(make_fleet) -> None:
    """r0 (sheddable, workflow 1) finds the replica idle and goes on: workflow 1 is in progress. r1
    continues it and r2 is new, both while r0's KV is in use (admitter probability 1): ``same``
    rejects both (1 shed mid-workflow), ``protected`` passes r1, which completes after r0."""
    reqs = [req(0.0, SHEDDABLE, out=200, workflow=1), req(0.01, SHEDDABLE, workflow=1), req(0.02, SHEDDABLE)]
    for mode, status, mid in (("same", SHED, 1), ("protected", COMPLETED, 0)):
        sim = admitter_sim(make_fleet, reqs, sheddable_objective="negative", continuation_objective=mode)
        sim.run_until(10_000)
        assert sim.done
        assert [sim.final[i].status for i in range(3)] == [COMPLETED, status, SHED]
        assert sim.final[1].continuing and not sim.final[2].continuing
        assert sim.shed_mid_workflow == mid
        assert sim.services["svc"].flow.admitter_rejected == [2 if mode == "same" else 1, 0, 0]


def test_protected_changes_only_what_the_admitter_screens(make_fleet) -> None:
    """300 requests, workflows among them: with the admitter off, ``protected`` is the same run as
    ``same`` attempt by attempt; with it on (sheddable negative) the runs differ, and no attempt the
    admitter rejected (shed after flow control dispatched it: ``waited_s`` set) continued a workflow
    under ``protected``, while some did under ``same``."""
    reqs = [req(0.005 * i, i % 3, out=50 + 7 * (i % 5), workflow=i // 4 if i % 2 else None) for i in range(300)]

    def run(**gateway) -> FleetSimulator:
        sim = admitter_sim(make_fleet, reqs, **gateway)
        sim.run_until(100_000)
        assert sim.done
        return sim

    def outcome(sim: FleetSimulator) -> list[tuple]:
        return [(sr.status, sr.attempt, sr.t_first, sr.t_finish, sr.waited_s) for sr in sim.final]

    def rejected_continuing(sim: FleetSimulator) -> int:
        return sum(sr.status == SHED and sr.waited_s is not None and sr.continuing for sr in sim.final)

    off = {"admitter": "none", "sheddable_objective": "negative"}
    assert outcome(run(**off, continuation_objective="protected")) == outcome(run(**off))
    same = run(sheddable_objective="negative")
    protected = run(sheddable_objective="negative", continuation_objective="protected")
    assert outcome(same) != outcome(protected)
    assert rejected_continuing(same) > 0
    assert rejected_continuing(protected) == 0
