"""The fault suite (autoscaler.faults): every short scenario of benchmarks/faults gives our controllers
zero harmful actions; the rules that count harm fire on controllers built to do the harm; scenario
files fail with one-line errors; ``autoscaler faults run`` keeps its interface."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from support.paths import DATA_DIR
from typer.testing import CliRunner

from autoscaler.cli import app
from autoscaler.errors import ConfigError
from autoscaler.faults.rows import ROW_KEYS
from autoscaler.faults.scenario import load_scenario, scenario_fleet, scenario_workload
from autoscaler.faults.suite import load_suite, run_sim_row, run_suite, suite_dir
from autoscaler.state import ServiceEstimate
from controllers.base import Controller, Decision, Reason

pytestmark = pytest.mark.slow  # whole module: its fixtures run scaled real-time fleets or the fault suite

SHORT = [sc for sc in load_suite(suite_dir()) if sc.short]
SIM = [sc for sc in SHORT if sc.layer == "simulator"]
LIVE = [sc for sc in SHORT if sc.layer == "live"]
OURS = ("pid", "mpc")


@pytest.fixture(scope="module")
def sim_rows() -> dict[tuple[str, str], dict[str, Any]]:
    rows = run_suite(SIM, OURS, DATA_DIR, workers=2)
    return {(r["scenario"], r["controller"]): r for r in rows}


@pytest.mark.parametrize(("scenario", "controller"), [(sc.name, c) for sc in SIM for c in OURS])
def test_our_controllers_do_no_harm_in_the_simulator_scenarios(sim_rows: dict[tuple[str, str], dict[str, Any]],
                                                                scenario: str, controller: str) -> None:
    row = sim_rows[(scenario, controller)]
    assert row["harmful_actions"] == 0, row["harm"]
    assert set(ROW_KEYS) <= set(row)


def test_the_mpc_removes_no_replica_while_a_pod_reports_nothing() -> None:
    # Seed 1 of pod-metrics-missing: with one GH200 pod silent and the load rising, the MPC's plan
    # dropped a GH200 for 75 s (its 38 req/s fitted three); a silent pod may be serving anything.
    sc = next(s for s in SIM if s.name == "pod-metrics-missing").model_copy(update={"seed": 1})
    row = run_sim_row(sc, "mpc", scenario_fleet(sc), scenario_workload(sc, DATA_DIR))
    assert row["harm"]["down_on_missing_data"] == 0, row["harm"]


LEASE_RULES = ("two_writers", "leaderless")
"""The Lease harm a starved row's figures say nothing of (docs/faults.md, "The pace a live row kept")."""


def check_live_row(row: dict[str, Any], last_arrival_s: float) -> None:
    """What a live row promises. Every row: its pace, which spans the fleet's run (simulated 0 to at
    least the last arrival) within the row's wall time (measured apart, set-up and teardown included),
    so kept x 20 x wall_s reaches the last arrival; an attainment that is a share. A row kept at pace:
    no harm and over half the interactive requests within the SLO. A starved row (docs/faults.md):
    its attainment and its Lease harm are no evidence about the controller; the rest of its harm is."""
    pace = row["pace"]  # the pace the fleet kept, as measured (autoscaler.faults.pace)
    assert pace is not None and pace["target_x"] == 20.0 and pace["window_s"] == 60.0, pace
    assert pace["kept"] * 20.0 * row["wall_s"] >= last_arrival_s, (pace, row["wall_s"], last_arrival_s)
    attained = row["slo_attainment_interactive"]
    assert attained is not None and 0.0 <= attained <= 1.0
    if pace["starved"]:
        assert all(n == 0 for rule, n in row["harm"].items() if rule not in LEASE_RULES), row["harm"]
    else:
        assert row["harmful_actions"] == 0, row["harm"]
        assert attained > 0.5


@pytest.mark.parametrize("controller", OURS)
@pytest.mark.parametrize("scenario", [sc.name for sc in LIVE])
def test_our_controllers_do_no_harm_in_the_live_scenarios(scenario: str, controller: str) -> None:
    sc = next(s for s in LIVE if s.name == scenario)
    (row,) = run_suite([sc], [controller], DATA_DIR)
    check_live_row(row, max(r.arrival_s for r in scenario_workload(sc, DATA_DIR).requests))


def test_a_starved_live_row_is_held_to_what_a_starved_row_promises() -> None:
    # docs/faults.md's starved two-daemons row (44.77 % at 0.65 / 0.38 of 20x; one two_writers
    # event, as its fixed-conversion run had): its attainment and its Lease harm are the machine's
    # load, so it passes; the same figures at pace fail, and a starved row that scaled down on
    # missing data fails (that harm is the controller's at any pace). 600 simulated s in 60 wall s.
    pace = {"target_x": 20.0, "kept": 0.65, "lowest": 0.38, "window_s": 60.0, "starved": True}
    row = {"slo_attainment_interactive": 0.4477, "harmful_actions": 1, "wall_s": 60.0, "pace": pace,
           "harm": {"two_writers": 1, "leaderless": 0, "down_on_missing_data": 0}}
    check_live_row(row, 600.0)  # 0.65 x 20 x 60 = 780 >= 600
    with pytest.raises(AssertionError):
        check_live_row({**row, "pace": {**pace, "lowest": 0.55, "starved": False}}, 600.0)
    with pytest.raises(AssertionError):
        check_live_row({**row, "harm": {**row["harm"], "down_on_missing_data": 1}}, 600.0)
    with pytest.raises(AssertionError):  # a pace that cannot have spanned the run: 0.65 x 20 x 40 = 520 < 600
        check_live_row({**row, "wall_s": 40.0}, 600.0)


def test_the_suite_has_a_scenario_for_every_reported_failure() -> None:
    reported = {r for sc in load_suite(suite_dir()) for r in sc.reported}
    for thread in ("ai-dynamo/dynamo#3131", "ai-dynamo/dynamo#6985", "ai-dynamo/dynamo#14765", "kedacore/keda#3064",
                   "ai-dynamo/dynamo#14251", "ai-dynamo/dynamo#4420", "ai-dynamo/dynamo#10528",
                   "vllm-project/aibrix#1032", "vllm-project/aibrix#2670", "vllm-project/aibrix#1159",
                   "vllm-project/aibrix#1014", "llm-d/llm-d-autoscaling#1352", "llm-d/llm-d-autoscaling#1071",
                   "kserve/kserve#1247", "kubeai-project/kubeai#67", "volcano-sh/kthena#1589"):
        assert thread in reported, thread


# ----------------------------------------------------------------------------- the rules fire
class Harmful(Controller):
    """A controller built to do one harm: ``mode`` ``missing-as-zero`` removes a replica whenever a
    query failed (an outage read as idle); ``doubling`` doubles the fleet every tick; ``shrink``
    removes the busiest replica at the first tick from 1000 s on (after long-generations' drop),
    without the loop's drain (its own guard)."""

    def __init__(self, mode: str) -> None:
        super().__init__(mode, 15.0, 60.0, own_guard=True)
        self.mode = mode
        self.shrunk = False

    def decide(self, est: ServiceEstimate, svc: object) -> Decision:
        cur = dict(est.current)
        if self.mode == "missing-as-zero" and est.errors:
            name = max(cur, key=lambda v: cur[v])
            cur[name] -= 1
        elif self.mode == "doubling" and est.signals.running:
            cur = {v: max(1, 2 * n) for v, n in cur.items()}
        elif self.mode == "shrink" and est.time_s >= 1000.0 and not self.shrunk and est.pods:
            busiest = max(est.pods, key=lambda p: p.running)
            cur[busiest.variant] -= 1
            self.shrunk = True
            return Decision(cur, self.mode, Reason.SCALE_DOWN, remove_first={busiest.variant: [busiest.name]})
        return Decision(cur, self.mode, Reason.SCALE_UP)


def _run(name: str, controller: Controller, grace_s: float | None = None) -> tuple[dict[str, Any], Any]:
    from autoscaler.faults.harm import harm_counts
    from autoscaler.faults.inject import Injector
    from autoscaler.simulate import SimulationDriver

    sc = load_suite(suite_dir(), [name])[0]
    cfg = scenario_fleet(sc)
    if grace_s is not None:
        cfg.simulator.termination_grace_s = grace_s
    driver = SimulationDriver(cfg, scenario_workload(sc, DATA_DIR), controller)
    injector = Injector(sc, driver)
    run = driver.run(on_step=injector.on_step)
    return harm_counts(sc, run), run


def test_a_scale_down_on_missing_data_is_counted() -> None:
    harm, run = _run("prometheus-outage", Harmful("missing-as-zero"))
    # One replica removed per tick of the 600-s outage (40 ticks) down to the minimum: as many
    # scale-downs as the fleet had replicas above its minimum when Prometheus went down.
    at_start = next(t for t in run.ticks if t.time_s >= 900.0).services[run.sim.target].estimate.current
    floor = {v.name: v.min_replicas for v in run.sim.cfg.service(run.sim.target).variants}
    assert harm["down_on_missing_data"] == sum(at_start.values()) - sum(floor.values()) > 0, harm


def test_a_doubling_fleet_is_counted_as_overshoot() -> None:
    harm, _ = _run("silent-new-pods", Harmful("doubling"))
    assert harm["overshoot"] >= 1, harm


def test_generations_cut_without_draining_are_counted() -> None:
    # the busiest pod removed at once under 2000-token answers, with a 1-s grace: it cuts what the pod
    # still holds, and every cut generation is a failed request
    from autoscaler.report import summarize

    harm, run = _run("long-generations", Harmful("shrink"), grace_s=1.0)
    failed = summarize(run)["requests"]["failed"]
    assert harm["cut_generations"] > 0 and harm["cut_generations"] == run.sim.cut_requests == failed, harm


def test_pods_held_pending_are_counted_for_an_anchor_that_waits_on_them() -> None:
    sc = load_suite(suite_dir(), ["pending-pods"])[0]
    row = run_sim_row(sc, "hpa", scenario_fleet(sc), scenario_workload(sc, DATA_DIR))
    assert row["harm"]["held_pending"] > 0  # HPA keeps asking for H100 pods no node can take


class PoolShrinker(Controller):
    """Holds every pool, except that it removes one replica of ``role``'s pool at the first tick at or
    after each of ``at_s`` (its own guard: nothing cuts it)."""

    scales_roles = True

    def __init__(self, role: str, at_s: tuple[float, ...]) -> None:
        super().__init__("pool-shrinker", 15.0, 60.0, own_guard=True)
        self.role, self.at_s, self.done = role, at_s, 0

    def decide(self, est: ServiceEstimate, svc: object) -> Decision:
        cur = {**est.current, **est.pool_current}
        if self.done < len(self.at_s) and est.time_s >= self.at_s[self.done]:
            self.done += 1
            (v,) = est.pools[self.role].current
            cur[v] -= 1
            return Decision(cur, "pool-shrinker", Reason.SCALE_DOWN)
        return Decision(cur, "pool-shrinker", Reason.NO_CHANGE)


@pytest.mark.parametrize(("scenario", "role", "rule"), [
    # the decode pool loses 3 of its 4 replicas at 2400 s, back (cold, 300 s) by about 2700 s: the prefill
    # pool shrunk at 2430 s is inside the loss, at 3300 s it is not
    ("decode-pool-loss", "prefill", "down_while_pool_lost"),
    # the link is slow from 1800 to 2400 s (its signals until 2520 s), the load steady at 8 req/s
    ("transfer-slowdown", "decode", "down_on_link_slowdown"),
])
def test_a_pool_shrunk_during_the_fault_is_counted_and_after_it_is_not(scenario: str, role: str, rule: str) -> None:
    at = (2430.0, 3300.0) if scenario == "decode-pool-loss" else (1830.0, 3000.0)
    harm, run = _run(scenario, PoolShrinker(role, at))
    downs = [t.time_s for t in run.ticks if t.services[run.sim.target].decision.code == Reason.SCALE_DOWN]
    assert len(downs) == 2 and downs[0] < at[0] + 15.0 and downs[1] < at[1] + 15.0, downs
    assert harm[rule] == 1, harm
    held, _ = _run(scenario, PoolShrinker(role, ()))
    assert held[rule] == 0, held


def test_the_pool_scenarios_run_in_the_suite_and_other_controllers_get_a_not_applicable_row() -> None:
    scenarios = load_suite(suite_dir(), ["decode-pool-loss", "transfer-slowdown"])
    rows = {(r["scenario"], r["controller"]): r for r in run_suite(scenarios, ["pid", "keda"], DATA_DIR, workers=1)}
    for sc in scenarios:
        pid, keda = rows[(sc.name, "pid")], rows[(sc.name, "keda")]
        assert set(ROW_KEYS) <= set(pid) and "failed" not in pid and "not_applicable" not in pid
        assert set(pid["harm"]) == {h.rule for h in sc.harm}
        assert pid["slo_attainment_interactive"] is not None
        assert keda["not_applicable"].startswith("service llama-3.1-8b has no aggregated variant")
        assert keda["harmful_actions"] is None and "failed" not in keda


# ----------------------------------------------------------------------------- files and the CLI
def _scenario(tmp_path: Path, text: str, name: str = "bad") -> Path:
    (tmp_path / f"{name}.yaml").write_text(text)
    return tmp_path / f"{name}.yaml"


MINIMAL = """name: bad
reported: [x/y#1]
failure: f
harmful: h
workload: {piecewise: {knots: [[0, 1], [60, 1]]}}
harm: [{rule: overshoot}]
"""


@pytest.mark.parametrize(("extra", "where"), [
    ("faults: [{kind: external_edit, time_s: 1, variant: h100, replicas: 2}]", "faults[0]: external_edit is not"),
    ("faults: [{kind: prometheus_down, start_s: 10, end_s: 5}]", "end_s must be after start_s"),
    ("faults: [{kind: meteor}]", "faults.0"),
    ("faults: [{time_s: 5}]", "faults.0: a fault needs a kind: crash,"),
    ("harm: [{rule: vibes}]", "harm.0.rule"),
])
def test_a_bad_scenario_is_a_one_line_error_naming_file_and_key(tmp_path: Path, extra: str, where: str) -> None:
    text = MINIMAL.replace("harm: [{rule: overshoot}]\n", "") + extra + ("\nharm: [{rule: overshoot}]\n"
                                                                         if "harm" not in extra else "\n")
    with pytest.raises(ConfigError) as err:
        load_scenario(_scenario(tmp_path, text))
    msg = str(err.value)
    assert "\n" not in msg and "bad.yaml" in msg and where in msg, msg


@pytest.mark.parametrize(("workload", "where"), [
    ("{piecewise: {knots: [[0, 1], [60, 1], [30, 2]]}}", "workload.piecewise: Value error, knots: times must"),
    ("{piecewise: {knots: [[-100, 1], [60, 1]]}}", "knots: times must start at >= 0 s"),
    ("{piecewise: {knots: [[0, 0], [60, 0]]}}", "and one > 0"),
])
def test_a_rate_curve_no_workload_can_follow_names_file_and_key(tmp_path: Path, workload: str, where: str) -> None:
    text = MINIMAL.replace("workload: {piecewise: {knots: [[0, 1], [60, 1]]}}", f"workload: {workload}")
    with pytest.raises(ConfigError) as err:
        load_scenario(_scenario(tmp_path, text))
    assert "bad.yaml" in str(err.value) and where.split("Value error, ")[-1] in str(err.value), str(err.value)


def test_faults_naming_what_the_fleet_lacks_or_out_of_order_are_errors(tmp_path: Path) -> None:
    text = MINIMAL.replace("harm:", "faults: [{kind: pod_metrics_missing, variant: tpu, start_s: 0, end_s: 10}]\nharm:")
    with pytest.raises(ConfigError, match=r"scenario bad: faults\[0\]\.variant: no variant 'tpu' in its fleet"):
        scenario_fleet(load_scenario(_scenario(tmp_path, text)))
    live = MINIMAL.replace("harm:", "layer: live\nfaults: [{kind: second_daemon, time_s: 100, kill_s: 50}]\nharm:")
    with pytest.raises(ConfigError, match=r"bad.yaml: faults.0.second_daemon: .*kill_s must be after time_s"):
        load_scenario(_scenario(tmp_path, live))
    sizes = MINIMAL.replace("[60, 1]]}}", "[60, 1]], input_tokens: [1000, 500, 2000]}}")
    with pytest.raises(ConfigError, match=r"^scenario bad: workload.piecewise: input_tokens"):
        scenario_workload(load_scenario(_scenario(tmp_path, sizes)), DATA_DIR)


def test_an_empty_suite_folder_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"no \*\.yaml fault scenarios there"):
        load_suite(tmp_path)


def test_unknown_scenario_lists_the_known_ones(tmp_path: Path) -> None:
    _scenario(tmp_path, MINIMAL)
    with pytest.raises(ConfigError, match=r"unknown scenario nope \(known: bad\)"):
        load_suite(tmp_path, ["nope"])


def test_faults_run_prints_the_rows_as_json_and_its_progress_on_stderr(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    import autoscaler.progress as progress

    monkeypatch.setattr(progress, "LINE_EVERY_S", 0.0)  # a line at every poll of a running row
    monkeypatch.setattr(progress, "POLL_S", 0.05)
    res = CliRunner().invoke(app, ["faults", "run", "--scenarios", "nan-at-zero", "--controller", "pid,keda",
                                   "-o", "json", "--out", str(tmp_path / "out"), "--data", str(DATA_DIR)])
    assert res.exit_code == 0, res.output
    for name in ("pid", "keda"):
        assert re.search(rf"^faults run: nan-at-zero x {name} \d+% \(\d+/\d+ s simulated\), \d+ s$", res.stderr,
                         re.MULTILINE), res.stderr
    assert res.stdout.startswith("["), res.stdout  # the JSON alone on stdout
    rows = json.loads(res.stdout[res.stdout.index("["):])
    assert [r["controller"] for r in rows] == ["pid", "keda"] and all(set(ROW_KEYS) <= set(r) for r in rows)
    assert json.loads((tmp_path / "out" / "faults.json").read_text()) == rows


def test_faults_run_with_a_bad_controller_fails_before_running(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["faults", "run", "--scenarios", "nan-at-zero", "--controller", "pid,nope"])
    assert res.exit_code == 2 and "nope" in res.output


def test_faults_run_seed_sets_every_scenarios_workload_seed(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["faults", "run", "--scenarios", "nan-at-zero", "--controller", "pid",
                                   "-o", "json", "--seed", "3", "--data", str(DATA_DIR)])
    assert res.exit_code == 0, res.output
    (row,) = json.loads(res.stdout[res.stdout.index("["):])
    assert row["seed"] == 3
    sc = load_suite(suite_dir(), ["nan-at-zero"])[0]
    arrivals = [[r.arrival_s for r in scenario_workload(sc.model_copy(update={"seed": s}), DATA_DIR).requests]
                for s in (0, 3)]
    assert arrivals[0] != arrivals[1]
    for seed in ("-1", str(2**53 + 1)):
        bad = CliRunner().invoke(app, ["faults", "run", "--scenarios", "nan-at-zero", "--seed", seed])
        assert bad.exit_code == 2 and "--seed must be in [0, 2**53]" in bad.output
