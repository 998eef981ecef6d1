"""The fault suite's faults on prefill/decode pools (autoscaler.faults): a ``crash`` naming a pool (its
role or its variant) takes exactly the replicas counted by hand, a ``link_slowdown`` reaches the
simulator, the scenario file's errors, and a controller that cannot run the pools gets a
not-applicable row."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from autoscaler.config.loading import parse_config
from autoscaler.errors import ConfigError
from autoscaler.faults.harm import Change, RunFacts, _down_on_link_slowdown, pool_loss_windows
from autoscaler.faults.inject import Injector, crash_victims
from autoscaler.faults.rows import make_row, markdown_table, not_applicable_row
from autoscaler.faults.scenario import CrashFault, HarmRule, LinkSlow, Scenario, scenario_fleet
from autoscaler.faults.suite import not_applicable
from autoscaler.simulate import SimulationDriver
from autoscaler.simulator.disagg import DecodeReplica
from autoscaler.simulator.engine import GONE, PROVISIONING
from autoscaler.simulator.fleet import FleetSimulator
from autoscaler.workload.types import Request, Workload
from controllers.registry import build

SLO = {"interactive": {"ttft_s": 2.0, "itl_s": 0.1}, "batch": {"ttft_s": 20.0, "itl_s": 0.25}}


def variant(name: str, replicas: int) -> dict[str, Any]:
    return {"name": name, "gpu": "H100-SXM", "price_per_gpu_hour": 2.0, "min_replicas": 1, "max_replicas": 8,
            "initial_replicas": replicas, "kv_cache_tokens": 400_000, "profile": "llama-3-8b/h100-sxm"}


def pd_doc() -> dict[str, Any]:
    """Service ``svc``: 1 aggregated replica ``agg``, prefill pool ``p`` (2 replicas), decode pools ``d``
    (3) and ``d2`` (1)."""
    return {"services": [{"name": "svc", "model": "m", "slo": SLO, "variants": [variant("agg", 1)],
                          "roles": {"prefill": [variant("p", 2)], "decode": [variant("d", 3), variant("d2", 1)]}}]}


def sim() -> FleetSimulator:
    return FleetSimulator(parse_config(pd_doc(), "<pd>"), Workload([Request(arrival_s=1.0, input_tokens=10,
                                                                            output_tokens=2)]))


@pytest.mark.parametrize(("fault", "crashed"), [
    # decode pool: 3 d + 1 d2 ready; ceil(0.75 x 4) = 3, the oldest first (all ready at 0: made first)
    ({"role": "decode", "fraction": 0.75}, {"d": 3}),
    ({"role": "prefill", "fraction": 0.5}, {"p": 1}),  # ceil(0.5 x 2) = 1
    ({"variant": "d2", "fraction": 0.1}, {"d2": 1}),  # at least one
    ({"variant": "d", "fraction": 1.0}, {"d": 3}),
    # every variant: 1 + 2 + 4 = 7 ready, ceil(0.5 x 7) = 4: agg, then the pools in order
    ({"fraction": 0.5}, {"agg": 1, "p": 2, "d": 1}),
])
def test_a_crash_naming_a_pool_takes_exactly_those_replicas(fault: dict[str, Any], crashed: dict[str, int]) -> None:
    s = sim()
    before = {v: s.services["svc"].counts(v).ready for v in ("agg", "p", "d", "d2")}
    victims = crash_victims(s, CrashFault(kind="crash", time_s=0, **fault))
    failed = [s.crash_replica(r) for r in victims]
    assert failed == [0] * len(victims)  # nothing in flight yet
    assert all(r.state == GONE for r in victims)
    for v, n in before.items():
        c = s.services["svc"].counts(v)
        # each crashed replica is replaced by a cold one, starting
        assert (c.ready, c.starting) == (n - crashed.get(v, 0), crashed.get(v, 0)), v


def test_only_a_ready_replica_crashes() -> None:
    s = sim()
    (r,) = [r for r in s.services["svc"].replicas if r.variant == "d2"]
    s.crash_replica(r)
    (new,) = [x for x in s.services["svc"].replicas if x.variant == "d2" and x.state == PROVISIONING]
    with pytest.raises(ValueError, match=r"replica \d+ of d2 is not ready: only a ready replica crashes"):
        s.crash_replica(new)


def scenario(faults: list[dict[str, Any]], roles: bool = True) -> Scenario:
    """A scenario whose fleet patch gives the default fleet's service (llama-3.1-8b) ``pd_doc``'s pools."""
    fleet = {"services": [{"name": "llama-3.1-8b", "roles": pd_doc()["services"][0]["roles"]}]} if roles else {}
    return Scenario.model_validate({
        "name": "pd", "reported": ["x/y#1"], "failure": "f", "harmful": "h",
        "workload": {"piecewise": {"knots": [[0, 1], [600, 1]]}}, "fleet": fleet,
        "faults": faults, "harm": [{"rule": "down_while_pool_lost"}, {"rule": "down_on_link_slowdown"}],
    })


def test_the_injector_installs_a_link_slowdown_on_the_target_service() -> None:
    sc = scenario([{"kind": "link_slowdown", "start_s": 60, "end_s": 120, "bandwidth_factor": 10}])
    cfg = scenario_fleet(sc)
    wl = Workload([Request(arrival_s=1.0, input_tokens=10, output_tokens=2)])
    driver = SimulationDriver(cfg, wl, build("pid", cfg, None, wl))
    Injector(sc, driver)
    (w,) = driver.sim._link_windows
    assert (w.service, w.start_s, w.end_s, w.bandwidth_factor, w.extra_latency_s) == ("llama-3.1-8b", 60, 120, 10, 0)
    d = next(r for r in driver.sim.services["llama-3.1-8b"].replicas if r.variant == "d")
    assert isinstance(d, DecodeReplica)
    # 1000 tokens x 131,072 B x 8 / 400e9 b/s = 0.00262144 s (+ the default link latency), x10 inside
    plain, slow = driver.sim.transfer_seconds(d, 1000, 59.0), driver.sim.transfer_seconds(d, 1000, 60.0)
    assert slow - plain == pytest.approx(9 * 0.00262144, rel=1e-9)
    assert driver.sim.transfer_seconds(d, 1000, 120.0) == plain


@pytest.mark.parametrize(("faults", "roles", "expected"), [
    ([{"kind": "crash", "time_s": 1, "fraction": 0.5, "variant": "x"}], True,
     "scenario pd: faults[0].variant: no variant 'x' in service 'llama-3.1-8b', the one a crash hits (it has a100, "
     "d, d2, gh200, h100, p)"),
    ([{"kind": "crash", "time_s": 1, "fraction": 0.5, "role": "decode"}], False,
     "scenario pd: faults[0].role: service 'llama-3.1-8b' has no decode pool"),
    ([{"kind": "link_slowdown", "start_s": 1, "end_s": 2, "bandwidth_factor": 2}], False,
     "scenario pd: faults[0]: service 'llama-3.1-8b' has no prefill/decode roles, hence no KV-transfer link to "
     "slow down"),
])
def test_pool_faults_the_fleet_cannot_take_are_one_line_errors(faults: list[dict[str, Any]], roles: bool,
                                                               expected: str) -> None:
    with pytest.raises(ConfigError) as exc:
        scenario_fleet(scenario(faults, roles))
    assert str(exc.value) == expected


def test_a_crash_of_another_services_variant_is_refused() -> None:
    # a crash hits the target service (the first) only: naming a second service's variant would crash
    # nothing and the row would read as a fault survived
    sc = scenario([{"kind": "crash", "time_s": 1, "fraction": 1.0, "variant": "o"}])
    other = {"name": "other", "model": "m", "slo": SLO, "variants": [variant("o", 2)]}
    sc = sc.model_copy(update={"fleet": {"services": [*sc.fleet["services"], other]}})
    with pytest.raises(ConfigError) as exc:
        scenario_fleet(sc)
    assert str(exc.value) == ("scenario pd: faults[0].variant: no variant 'o' in service 'llama-3.1-8b', the one a "
                              "crash hits (it has a100, d, d2, gh200, h100, p)")


@pytest.mark.parametrize(("fault", "expected"), [
    ({"kind": "crash", "time_s": 1, "fraction": 0.5, "variant": "d", "role": "decode"},
     "give variant or role, not both"),
    ({"kind": "link_slowdown", "start_s": 1, "end_s": 2}, "a link slowdown needs bandwidth_factor > 1 or "
                                                          "extra_latency_s > 0"),
])
def test_a_pool_fault_that_says_too_much_or_nothing_is_refused(fault: dict[str, Any], expected: str) -> None:
    with pytest.raises(ValueError, match=expected):
        scenario([fault])


def test_a_controller_that_cannot_run_the_pools_gets_a_not_applicable_row() -> None:
    doc = pd_doc()
    doc["services"][0]["variants"] = []
    cfg = parse_config(doc, "<pd>")
    wl = Workload([Request(arrival_s=1.0 * i, input_tokens=300, output_tokens=20) for i in range(20)])
    assert not_applicable(cfg, "pid", wl) is None
    assert not_applicable(cfg, "dynamo-pd", wl) is None
    assert not_applicable(cfg, "wva-pd", wl) is None
    assert not_applicable(cfg, "hpa", wl) == ("service svc has no aggregated variant: its prefill/decode pools are "
                                              "scaled only by the controllers that scale roles "
                                              "(pid, mpc, dynamo-pd, wva-pd)")
    assert not_applicable(cfg, "dynamo", wl) == ("dynamo does not scale prefill/decode pools, and service svc has "
                                                 "only those")
    row = not_applicable_row(scenario([]), "hpa", "why")
    assert row["not_applicable"] == "why" and "failed" not in row
    assert row["harmful_actions"] is None and row["cost_usd"] is None
    # the cell a short n/a [1], its reason the footnote under the table (no "n/a: why" cell)
    assert markdown_table([row]).splitlines()[2:] == ["| pd | hpa | n/a [1] | - | - | - | - |", "", "- n/a [1]: why"]


def test_a_not_applicable_reason_is_one_footnote_under_the_table_not_a_long_cell() -> None:
    # three rows, two sharing one reason: each cell a short n/a [k], each distinct reason listed once
    rows = [not_applicable_row(scenario([]), c, why) for c, why in (("hpa", "no variant"), ("keda", "no variant"),
                                                                     ("dynamo", "no pools"))]
    assert markdown_table(rows).splitlines() == [
        "| scenario | controller | harmful actions | interactive SLO | failed | retries | cost |",
        "|---|---|---:|---:|---:|---:|---:|",
        "| pd | hpa | n/a [1] | - | - | - | - |",
        "| pd | keda | n/a [1] | - | - | - | - |",
        "| pd | dynamo | n/a [2] | - | - | - | - |",
        "",
        "- n/a [1]: no variant",
        "- n/a [2]: no pools",
    ]


def test_a_base_fleet_that_is_no_fleet_is_named_in_the_error() -> None:
    # a scenario file is a YAML mapping but no fleet: the message must point at base_fleet, not the patch
    sc = scenario([], roles=False).model_copy(update={"base_fleet": "benchmarks/faults/cascade.yaml"})
    with pytest.raises(ConfigError) as exc:
        scenario_fleet(sc)
    assert str(exc.value).startswith("scenario pd: fleet (base_fleet benchmarks/faults/cascade.yaml, patched): ")


class _Facts:
    """What ``_down_on_link_slowdown`` reads of a run: its changes and the arrival rate behind a time."""

    def __init__(self, rates: dict[float, float], changes: list[Change]) -> None:
        self.rates, self.changes = rates, changes

    def recent_rate(self, t: float) -> float:
        return self.rates[t]


def test_a_scale_down_on_a_slow_link_counts_only_while_the_load_the_link_holds_is_kept() -> None:
    # a slowdown 100-200 s: its window runs to 200 + 120 s; 10 req/s at its start
    sc = SimpleNamespace(faults=[LinkSlow(kind="link_slowdown", start_s=100, end_s=200, bandwidth_factor=10)])
    rule = HarmRule(rule="down_on_link_slowdown")
    downs = [Change(150.0, 10.0, 8.0, False), Change(250.0, 10.0, 8.0, False), Change(400.0, 10.0, 8.0, False)]
    # the load kept (>= 90 % of 10) at 150 s, fallen to 8 at 250 s, 400 s after the window: one harmful
    assert _down_on_link_slowdown(rule, _Facts({100.0: 10.0, 150.0: 9.0, 250.0: 8.0, 400.0: 10.0}, downs), sc) == 1
    # no arrivals when the slowdown began: the link holds nothing, no scale-down answers it
    assert _down_on_link_slowdown(rule, _Facts({100.0: 0.0, 150.0: 0.0, 250.0: 0.0, 400.0: 0.0}, downs), sc) == 0


def pool_facts(replicas: list[SimpleNamespace]) -> SimpleNamespace:
    """``RunFacts``' view of the P/D service ``svc`` (``pd_doc``) whose run holds ``replicas``, with its
    ``ready_in``: what ``pool_loss_windows`` reads."""
    svc = parse_config(pd_doc(), "<pd>").service("svc")
    run = SimpleNamespace(sim=SimpleNamespace(target="svc", services={
        "svc": SimpleNamespace(cfg=SimpleNamespace(name="svc"), replicas=replicas)}))
    facts = SimpleNamespace(svc=svc, run=run)
    facts.ready_in = lambda role, t: RunFacts.ready_in(facts, role, t)  # type: ignore[arg-type]
    return facts


def test_a_crash_of_a_pool_with_nothing_ready_opens_no_pool_loss_window() -> None:
    # Prefill: two replicas ready at 0, both crashed at 100, their replacements ready at 400 and 450.
    # Decode: scaled to zero; one replica starting, ready at 900. A crash of every pool at 100 loses the
    # prefill pool until 450 (back at its two) and no decode replica: one window, (100, 450).
    def rep(role: str, ready: float, gone: float | None = None) -> SimpleNamespace:
        return SimpleNamespace(role=role, ready_s=ready, removed_s=None, gone_s=gone)

    replicas = [rep("prefill", 0, 100), rep("prefill", 0, 100), rep("prefill", 400), rep("prefill", 450),
                rep("decode", 900)]
    facts = pool_facts(replicas)
    sc = SimpleNamespace(faults=[CrashFault(kind="crash", time_s=100, fraction=1.0)])
    assert pool_loss_windows(facts, sc, 600) == [(100, 450)]  # type: ignore[arg-type]
    # the decode pool alone: nothing was ready to lose
    sc = SimpleNamespace(faults=[CrashFault(kind="crash", time_s=100, fraction=1.0, role="decode")])
    assert pool_loss_windows(facts, sc, 600) == []  # type: ignore[arg-type]


def test_a_crash_that_takes_no_replica_of_a_pool_opens_no_window_for_it() -> None:
    # Aggregated: one replica ready at 0, crashed at 100 (retired there, not removed by a scale-down).
    # Prefill: two ready at 0, one of them scaled down at 90 and gone (drained) at 100. Decode: one ready at 0.
    # A crash of every variant at 100 took the aggregated replica alone (the oldest first): no pool lost a
    # replica, so no window (it opened one for both pools, each lasting the 600 s limit: no replacement).
    # A crash of decode variant d2 at 100, with no d2 replica ready, takes nothing of the decode pool either.
    def rep(role: str | None, ready: float, gone: float | None = None, removed: float | None = None
            ) -> SimpleNamespace:
        return SimpleNamespace(role=role, ready_s=ready, removed_s=removed, gone_s=gone)

    replicas = [rep(None, 0, 100), rep(None, 400), rep("prefill", 0), rep("prefill", 0, 100, removed=90),
                rep("decode", 0)]
    facts = pool_facts(replicas)
    for fault in ({"fraction": 0.25}, {"variant": "d2", "fraction": 1.0}):
        sc = SimpleNamespace(faults=[CrashFault(kind="crash", time_s=100, **fault)])
        assert pool_loss_windows(facts, sc, 600) == [], fault  # type: ignore[arg-type]
    # the decode replica crashed at 100 too (with the aggregated one): the decode pool's window alone, to the limit
    replicas[-1] = rep("decode", 0, 100)
    sc = SimpleNamespace(faults=[CrashFault(kind="crash", time_s=100, fraction=0.5)])
    assert pool_loss_windows(facts, sc, 600) == [(100, 700)]  # type: ignore[arg-type]


def test_a_rows_crashes_say_what_each_crash_took() -> None:
    row = make_row(scenario([]), "pid", {"slo_attainment": {"interactive": 0.5}, "requests": {"failed": 3},
                                         "admission": {"retries": 0}, "cost_usd": {"total": 1.0}, "wall_s": 1.0},
                   {}, [(100.0, 2, 3), (200.0, 0, 0)])
    assert row["crashes"] == [{"time_s": 100.0, "replicas": 2, "requests_failed": 3},
                              {"time_s": 200.0, "replicas": 0, "requests_failed": 0}]
    assert make_row(scenario([]), "pid", {"slo_attainment": {"interactive": 0.5}, "requests": {"failed": 3},
                                          "admission": {"retries": 0}, "cost_usd": {"total": 1.0},
                                          "wall_s": 1.0}, {})["crashes"] is None
