"""What the baselines share: count placement, sample windows, calibrated targets, the registry, and
how the loop and the simulation run them (own guard, own tick, scrapes between ticks)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from support.recording import RecordingActuator

import autoscaler.simulate as simulate
from autoscaler.adapters.simulator import SimMetricsSource
from autoscaler.config.loading import parse_config
from autoscaler.loop.runner import ControlLoop
from autoscaler.simulator.metrics import ReplicaMetrics
from autoscaler.state import ServiceObservation, Signals, VariantObservation
from autoscaler.workload.types import Request, Workload
from controllers.base import Controller, Decision
from controllers.baselines.calibrate import calibrate
from controllers.baselines.common import SampleWindow, place_count
from controllers.registry import BASELINE_NAMES, build, parse_spec
from controllers.static import workload_mix
from models.capacity import RequestMix, marginal_costs, variant_weights
from models.profiles import get_profile

SLO = {"interactive": {"ttft_s": 2.0, "itl_s": 0.1}, "batch": {"ttft_s": 20.0, "itl_s": 0.25}}


def three_variants():
    def v(name: str, price: float, profile: str, **kw) -> dict:
        return {"name": name, "gpu": profile.split("/")[1].upper(), "price_per_gpu_hour": price, "max_replicas": 10,
                "kv_cache_tokens": 400000,
                "profile": profile, **kw}
    return parse_config({"services": [{"name": "svc", "model": "m", "slo": SLO, "variants": [
        v("big", 3.0, "llama-3-8b/h100-sxm"), v("cheap", 1.5, "llama-3-8b/gh200", max_replicas=2, min_replicas=1),
        v("old", 1.8, "llama-3-8b/a100-80gb")]}]})


# ------------------------------------------------------------------------------------ common
def test_place_count_adds_cheapest_per_capacity_and_removes_most_expensive() -> None:
    svc = three_variants().services[0]
    w = {"big": 10.0, "cheap": 10.0, "old": 4.0}  # $/h per req/s: cheap 0.15, big 0.30, old 0.45
    # from {0, 1, 0}: cheap to its cap 2, then big
    assert place_count(5, svc, {"big": 0, "cheap": 1, "old": 0}, w) == {"big": 3, "cheap": 2, "old": 0}
    # down from {2, 2, 2} to 3: old first (0.45), then big (0.30)
    assert place_count(3, svc, {"big": 2, "cheap": 2, "old": 2}, w) == {"big": 1, "cheap": 2, "old": 0}
    # never below a minimum: cheap stays at 1
    assert place_count(0, svc, {"big": 1, "cheap": 1, "old": 0}, w) == {"big": 0, "cheap": 1, "old": 0}


def test_sample_window_mean_over_half_open_interval() -> None:
    w = SampleWindow(60.0)
    for t, v in ((0.0, 10.0), (2.0, 20.0), (4.0, 30.0)):
        w.add(t, v)
    assert w.mean(4.0, 6.0) == 20.0  # (−2, 4]: all three
    assert w.mean(4.0, 4.0) == 25.0  # (0, 4]: 20 and 30
    assert w.mean(100.0, 6.0) is None


def test_calibration_is_littles_law_at_70_percent_of_capacity() -> None:
    cfg = three_variants()
    svc, engine = cfg.services[0], cfg.engine
    mix = RequestMix.from_requests([1000], [200])
    caps = variant_weights(svc, engine, mix)
    # the cheapest per capacity is the GH200 variant "cheap" (1.5 $/h, the fastest profile)
    assert min(caps, key=lambda n: {"big": 3.0, "cheap": 1.5, "old": 1.8}[n] / caps[n]) == "cheap"
    gh200 = get_profile("llama-3-8b/gh200")
    t0, a, b, g = marginal_costs(gh200)
    tokens = 1000 + gh200.attention_tokens_per_pair * 1000 * 1001 / 2  # the prompt's attention pairs included
    r = 0.7 * caps["cheap"]
    step = t0 / (1 - r * (a * tokens + b * 200 + g * (1000 * 200 + 200 * 200 / 2)))
    decoding = r * step * 200
    decode_step = t0 + r * step * (b * 200 + g * (1000 * 200 + 200 * 200 / 2))
    prefill = a * tokens + decode_step  # one chunk: 1000 tokens < 8192 - decoding
    cal = calibrate(svc, engine, mix)
    assert decoding < 8192 - 1000
    assert cal.variant == "cheap"
    assert cal.concurrency == pytest.approx(r * (prefill + 200 * step), rel=1e-12)
    kv = r * (prefill * 1016 + step * (1016 * 200 + 200 * 200 / 2))  # 16-token block of slack
    assert cal.kv_usage == pytest.approx(kv / 400000, rel=1e-12)


def test_calibration_uses_the_requests_the_service_accepts() -> None:
    cfg = three_variants()
    svc = cfg.services[0]  # max_model_len 32768
    reqs = [Request(arrival_s=float(i), input_tokens=1000, output_tokens=200) for i in range(3)]
    reqs.append(Request(arrival_s=3.0, input_tokens=40000, output_tokens=10))  # rejected by vLLM
    mix = workload_mix(svc, Workload(reqs))
    assert mix is not None and mix.mean_input == 1000 and mix.mean_output == 200
    assert calibrate(svc, cfg.engine, mix) == calibrate(svc, cfg.engine,
                                                                  RequestMix.from_requests([1000], [200]))


# ------------------------------------------------------------------------------------ registry
def test_specs_parse_and_bad_ones_fail_in_one_line() -> None:
    assert parse_spec("hpa:metric=queue:target=5") == ("hpa", {"metric": "queue", "target": 5})
    assert parse_spec("dynamo:ttft=2:itl=0.1") == ("dynamo", {"ttft": 2, "itl": 0.1})
    with pytest.raises(ValueError, match="unknown controller 'nope'; choose one of: pid, static, hpa"):
        parse_spec("nope")
    with pytest.raises(ValueError, match="bad parameter 'speed=3' for kpa; it takes: target"):
        parse_spec("kpa:speed=3")
    with pytest.raises(ValueError, match="for wva; its spec takes no parameters; it has no settings of its own"):
        parse_spec("wva:x=1")


# ------------------------------------------------------------------------------------ loop
class _Source:
    def __init__(self) -> None:
        self.calls = 0

    def observe(self, now: float) -> dict[str, ServiceObservation]:
        self.calls += 1
        return {"svc": ServiceObservation("svc", now, Signals(), {"h100": VariantObservation(2, 0)})}


class _Jump(Controller):
    def __init__(self) -> None:
        super().__init__("jump", 15.0, 300.0, own_guard=True)

    def decide(self, est, svc) -> Decision:
        return Decision({"h100": 50}, "jump")


def test_own_guard_controllers_get_bounds_only(make_fleet) -> None:
    cfg = make_fleet(replicas=2, min_replicas=1, max_replicas=30,
                     controller={"guard": {"max_step_up": 1, "scale_down_cooldown_s": 600}})
    act = RecordingActuator()
    loop = ControlLoop(cfg, _Source(), act, _Jump())
    rec = loop.tick(5.0)  # inside the first window: our loop would hold; the baseline decides
    # our guard would allow +1 per tick; the baseline's +48 is only clamped to max_replicas 30
    assert rec.services["svc"].applied == {"h100": 30}
    assert act.writes == [("svc", "h100", 30)]


# ------------------------------------------------------------------------------------ source
def _stub_sim(pods: list[SimpleNamespace]) -> SimpleNamespace:
    svc = SimpleNamespace(replicas=pods, arrivals=0, arrivals_by_priority=[0, 0, 0], flow=None, gateway=[], pd=None,
                          variants={"h100": None}, arrival_bins=lambda now: (0, 0, 0),
                          counts=lambda v: SimpleNamespace(ready=len(pods), starting=0, draining=0))
    return SimpleNamespace(services={"svc": svc})


def test_scrape_keeps_gauge_samples_for_max_over_time() -> None:
    pod = SimpleNamespace(rid=1, variant="h100", state="ready", ready_s=0.0, refresh_gauges=lambda: None,
                          metrics=ReplicaMetrics())
    src = SimMetricsSource(_stub_sim([pod]), window_s=60.0)  # type: ignore[arg-type]
    pod.metrics.kv_usage, pod.metrics.waiting = 0.2, 1
    src.scrape(15.0)
    pod.metrics.kv_usage, pod.metrics.waiting = 0.9, 7
    src.scrape(30.0)
    pod.metrics.kv_usage, pod.metrics.waiting = 0.1, 0
    [p] = src.observe(60.0)["svc"].pods
    assert (p.kv_usage, p.waiting, p.kv_usage_max, p.waiting_max) == (0.1, 0.0, 0.9, 7.0)
    [p] = src.observe(90.0)["svc"].pods  # window (30, 90]: the t=30 sample has left
    assert (p.kv_usage_max, p.waiting_max) == (0.1, 0.0)


# ------------------------------------------------------------------------------------ simulation
def small_workload(n: int = 400, gap_s: float = 0.5) -> Workload:
    return Workload([Request(arrival_s=i * gap_s, input_tokens=500, output_tokens=50) for i in range(n)])


def test_simulation_ticks_at_the_controller_period_and_scrapes_between(make_fleet, monkeypatch) -> None:
    cfg = make_fleet(replicas=1, min_replicas=1, max_replicas=4)  # fleet tick 15 s
    scrapes: list[float] = []
    real = SimMetricsSource.scrape

    def spy(self, now: float) -> None:
        scrapes.append(now)
        real(self, now)

    monkeypatch.setattr(SimMetricsSource, "scrape", spy)
    run = simulate.run_simulation(cfg, small_workload(), "wva", steady_start=False)
    times = [r.time_s for r in run.ticks]
    assert times[:3] == [60.0, 120.0, 180.0]
    # scrapes at 15, 30, 45 between ticks, then at the tick itself (observe)
    assert scrapes[:5] == [15.0, 30.0, 45.0, 60.0, 75.0]


@pytest.mark.parametrize("name", BASELINE_NAMES)
def test_every_baseline_runs_in_the_loop(make_fleet, name: str) -> None:
    cfg = make_fleet(replicas=1, min_replicas=1, max_replicas=4)
    run = simulate.run_simulation(cfg, small_workload(), name)
    assert run.controller == name
    assert all(sr.status is not None for sr in run.sim.requests)
    assert build(name, cfg, None, small_workload()).name == name


def test_a_number_with_an_underscore_is_refused_not_read_as_python_reads_it() -> None:
    # float("1_5") == 15.0 and int("4_0") == 40: a typo for 1.5 would run with 15
    with pytest.raises(ValueError, match=r"^mpc shed_weight must be a number without '_', got '1_5'$"):
        parse_spec("mpc:shed=1:shed_weight=1_5")
    with pytest.raises(ValueError, match=r"^mpc horizon must be a whole number without '_', got '4_0'$"):
        parse_spec("mpc:horizon=4_0")
    assert parse_spec("mpc:shed=1:shed_weight=1.5") == ("mpc", {"shed": 1, "shed_weight": 1.5})


def test_a_parameter_that_needs_another_is_refused_without_it() -> None:
    # shed_weight prices the shedding that only shed=1 plans: alone it would be read by nothing
    for spec in ("mpc:shed_weight=3", "mpc:shed=0:shed_weight=3"):
        with pytest.raises(ValueError, match=r"^mpc shed_weight needs shed=1 in the same spec \(without it nothing "
                                             rf"reads shed_weight\), got '{spec}'$"):
            parse_spec(spec)
    assert parse_spec("mpc:shed_weight=3:shed=1") == ("mpc", {"shed_weight": 3.0, "shed": 1})
    # hold_s acts under either hedge (it fixes the band hedge's hold too): taken alone
    assert parse_spec("mpc:hold_s=120") == ("mpc", {"hold_s": 120.0})


def test_the_oracles_pool_parameters_are_refused_without_roles() -> None:
    # oracle_controller reads pd_util (the pools' capacity share) and route (the plan's split handed to
    # the router) only when roles=1 plans the pools: without it oracle:route=0 and oracle:pd_util=0.6 ran
    # the aggregated plan, the parameter silently dropped
    for spec, key in (("oracle:route=0", "route"), ("oracle:pd_util=0.6", "pd_util"),
                      ("oracle:roles=0:route=1", "route"), ("oracle:peak_s=30:roles=0:pd_util=0.5", "pd_util")):
        with pytest.raises(ValueError, match=rf"^oracle {key} needs roles=1 in the same spec \(without it nothing "
                                             rf"reads {key}\), got '{spec}'$"):
            parse_spec(spec)
    assert parse_spec("oracle:roles=1:route=0:pd_util=0.6") == ("oracle", {"roles": 1, "route": 0, "pd_util": 0.6})
    assert parse_spec("oracle:peak_s=30") == ("oracle", {"peak_s": 30.0})  # peak_s acts with or without roles
