"""Tests for autoscaler.report.summarize on a hand-built run, and the Prometheus-style histogram helpers."""

from __future__ import annotations

import re

import pytest

from autoscaler.config.loading import default_config, parse_config
from autoscaler.plot import planned_ahead
from autoscaler.report import summarize, timeline_rows
from autoscaler.simulate import SimulationRun, run_simulation
from autoscaler.simulator.engine import COMPLETED, FAILED, REJECTED
from autoscaler.simulator.fleet import FleetSimulator
from autoscaler.simulator.metrics import (
    E2E_BUCKETS,
    ITL_BUCKETS,
    TTFT_BUCKETS,
    Histogram,
    histogram_quantile,
)
from autoscaler.workload.types import BATCH, INTERACTIVE, Request, Workload

# SLOs (conftest fleet): interactive ttft 2 s, itl 0.1 s; batch ttft 20 s, itl 0.25 s.
# (arrival, input, output, class, workflow, status, t_first, t_finish) -> ttft, mean itl, verdict
ROWS = [
    (0.0, 100, 11, INTERACTIVE, 1, COMPLETED, 1.0, 1.9),     # ttft 1.0, itl 0.9/10 = 0.09 -> ok
    (1.0, 100, 11, INTERACTIVE, 1, COMPLETED, 4.0, 4.5),     # ttft 3.0 > 2 -> miss (workflow 1 fails)
    (2.0, 100, 21, INTERACTIVE, None, COMPLETED, 2.5, 4.1),  # ttft 0.5, itl 1.6/20 = 0.08 -> ok
    (3.0, 100, 11, BATCH, None, COMPLETED, 13.0, 15.0),      # ttft 10 <= 20, itl 0.2 <= 0.25 -> ok
    (4.0, 100, 11, BATCH, None, COMPLETED, 5.0, 8.0),        # ttft 1, itl 0.3 > 0.25 -> miss
    (5.0, 100, 11, INTERACTIVE, None, FAILED, None, 6.0),    # failed -> miss
    (6.0, 40000, 11, INTERACTIVE, None, REJECTED, None, 6.0),  # rejected -> not in attainment
    (7.0, 100, 1, INTERACTIVE, None, COMPLETED, 7.5, 7.5),   # ttft 0.5, one token (itl 0) -> ok
]
PRICE = 3.6  # $/GPU-hour
END_S = 100.0
WALL_S = 0.5


def hand_run(make_fleet) -> SimulationRun:
    cfg = make_fleet(2, price_per_gpu_hour=PRICE)
    reqs = [Request(arrival_s=a, input_tokens=i, output_tokens=o, request_class=c, workflow_id=w)
            for a, i, o, c, w, *_ in ROWS]
    sim = FleetSimulator(cfg, Workload(reqs, source="test:hand"))
    for sr, (*_, status, t_first, t_finish) in zip(sim.requests, ROWS, strict=True):
        sr.status, sr.t_first, sr.t_finish = status, t_first, t_finish
    r1, r2 = sim.services["svc"].replicas
    r1.metrics.prefix_hits, r1.metrics.prefix_queries = 300.0, 1000.0
    r2.metrics.prefix_hits, r2.metrics.prefix_queries = 0.0, 500.0
    return SimulationRun(sim, [], "hand", END_S, WALL_S)


def test_request_counts(make_fleet) -> None:
    res = summarize(hand_run(make_fleet))
    assert res["requests"] == {"total": 8, "completed": 6, "rejected": 1, "failed": 1, "rejected_admission": 0}
    assert res["controller"] == "hand" and res["workload"] == "test:hand" and res["service"] == "svc"


def test_slo_attainment_per_class_and_all(make_fleet) -> None:
    res = summarize(hand_run(make_fleet))
    # interactive accepted: rows 0,1,2,5,7 -> ok 0,2,7 = 3/5; batch: rows 3,4 -> ok 3 = 1/2;
    # all accepted (rejected row 6 excluded): 7 -> ok 0,2,3,7 = 4/7
    assert res["slo_attainment"] == pytest.approx({"interactive": 3 / 5, "batch": 1 / 2, "all": 4 / 7})
    d = res["slo_attainment_detail"]
    assert d["interactive"] == pytest.approx({"requests": 5, "ttft": 3 / 5, "itl": 4 / 5, "both": 3 / 5})
    assert d["batch"] == pytest.approx({"requests": 2, "ttft": 1.0, "itl": 1 / 2, "both": 1 / 2})
    # all: ttft ok rows 0,2,3,4,7 = 5/7; itl ok rows 0,1,2,3,7 = 5/7
    assert d["all"] == pytest.approx({"requests": 7, "ttft": 5 / 7, "itl": 5 / 7, "both": 4 / 7})


def test_cost_and_cost_per_success(make_fleet) -> None:
    res = summarize(hand_run(make_fleet))
    cost = 2 * END_S * PRICE / 3600  # two replicas from 0 to end_s: 0.2 $
    assert cost == pytest.approx(0.2)
    assert res["cost_usd"] == pytest.approx({"h100": cost, "total": cost})
    assert res["gpu_hours"] == pytest.approx({"h100": 2 * END_S / 3600, "total": 2 * END_S / 3600})
    assert res["cost_per_successful_request_usd"] == pytest.approx(cost / 4)
    # tasks: workflow 1 (rows 0,1: fails), rows 2,3,7 succeed, rows 4,5,6 fail -> 3 of 7
    assert res["tasks"] == {"total": 7, "successful": 3}
    assert res["cost_per_successful_task_usd"] == pytest.approx(cost / 3)


def test_latency_percentiles(make_fleet) -> None:
    res = summarize(hand_run(make_fleet))
    # completed TTFTs sorted: 0.5 0.5 1 1 3 10; linear interpolation at rank q*(n-1):
    # p50 -> 2.5 -> 1.0 ; p95 -> 4.75 -> 3 + 0.75*7 = 8.25 ; p99 -> 4.95 -> 3 + 0.95*7 = 9.65
    assert res["ttft_s"] == pytest.approx({"p50": 1.0, "p95": 8.25, "p99": 9.65})
    # completed ITLs sorted: 0 0.05 0.08 0.09 0.2 0.3 ; p50 = 0.085, p95 = 0.2 + 0.75*0.1, p99 = 0.2 + 0.95*0.1
    assert res["itl_s"] == pytest.approx({"p50": 0.085, "p95": 0.275, "p99": 0.295})


def test_other_fields(make_fleet) -> None:
    res = summarize(hand_run(make_fleet))
    assert res["prefix_cache_hit_rate"] == pytest.approx(300 / 1500)
    assert res["preemptions"] == 0
    assert res["scale_events"] == 0
    assert res["simulated_s"] == END_S
    assert res["wall_s"] == WALL_S
    assert res["simulated_requests_per_s"] == pytest.approx(8 / WALL_S)


def test_no_successes_gives_none_not_zero_division(make_fleet) -> None:
    run = hand_run(make_fleet)
    for sr in run.sim.requests:
        sr.status, sr.t_first = FAILED, None
    res = summarize(run)
    assert res["cost_per_successful_request_usd"] is None
    assert res["cost_per_successful_task_usd"] is None
    assert res["ttft_s"] == {"p50": None, "p95": None, "p99": None}
    assert res["slo_attainment"]["all"] == 0.0


def test_multi_service_cost_keys() -> None:
    slo = {"interactive": {"ttft_s": 2.0, "itl_s": 0.1}, "batch": {"ttft_s": 20.0, "itl_s": 0.25}}

    def svc(name: str, price: float, n: int) -> dict:
        return {"name": name, "model": "m", "slo": slo, "variants": [{
            "name": "v", "gpu": "H100-SXM", "price_per_gpu_hour": price, "gpus_per_replica": 2,
            "min_replicas": n, "max_replicas": n, "kv_cache_tokens": 400000, "profile": "llama-3-8b/h100-sxm/tp2"}]}

    cfg = parse_config({"services": [svc("a", 1.0, 1), svc("b", 2.0, 3)]})
    sim = FleetSimulator(cfg, Workload([]), service="a")
    res = summarize(SimulationRun(sim, [], "x", 36.0, 1.0))
    # a: 1 replica x 36 s x 2 GPUs x $1 / 3600 = 0.02 ; b: 3 x 36 x 2 x $2 / 3600 = 0.12
    assert res["cost_usd"] == pytest.approx({"a/v": 0.02, "b/v": 0.12, "total": 0.14})
    assert res["gpu_hours"] == pytest.approx({"a/v": 0.02, "b/v": 0.06, "total": 0.08})
    assert res["requests"]["total"] == 0
    assert res["slo_attainment"] == {"interactive": None, "batch": None, "all": None}


# ==================================================================================== histograms
B = (0.1, 0.5, 1.0)


@pytest.mark.parametrize(("q", "want"), [
    # deltas 10 | 20 | 10 | 0 (+Inf), total 40
    (0.5, 0.1 + (0.5 - 0.1) * (20 - 10) / 20),   # rank 20 in (0.1, 0.5]: 0.3
    (0.25, 0.0 + 0.1 * 10 / 10),                 # rank 10 at the top of the first bucket (lower bound 0): 0.1
    (0.1, 0.1 * 4 / 10),                         # rank 4: 0.04
    (0.95, 0.5 + 0.5 * (38 - 30) / 10),          # rank 38 in (0.5, 1]: 0.9
])
def test_histogram_quantile_linear_interpolation(q: float, want: float) -> None:
    assert histogram_quantile(q, B, [10, 20, 10, 0]) == pytest.approx(want)


def test_histogram_quantile_inf_bucket_returns_highest_finite_bound() -> None:
    assert histogram_quantile(0.5, B, [0, 0, 0, 5]) == 1.0
    # 10 observations, 2 in +Inf: q=0.95 -> rank 9.5 > 8 -> in +Inf -> 1.0
    assert histogram_quantile(0.95, B, [4, 4, 0, 2]) == 1.0


def test_histogram_quantile_skips_empty_buckets() -> None:
    # cumulative 10, 10, 20: rank 10 is reached in the first bucket (Prometheus: first le with cum >= rank)
    assert histogram_quantile(0.5, B, [10, 0, 10, 0]) == pytest.approx(0.1)
    # rank 15 -> third bucket (0.5, 1]: 0.5 + 0.5 * 5/10 = 0.75
    assert histogram_quantile(0.75, B, [10, 0, 10, 0]) == pytest.approx(0.75)


def test_histogram_quantile_no_observations_is_none() -> None:
    assert histogram_quantile(0.5, B, [0, 0, 0, 0]) is None


def test_histogram_observe_le_semantics() -> None:
    h = Histogram(B)
    h.observe(0.1)         # exactly on a bound: counted in le=0.1
    h.observe(0.1000001)   # just above: le=0.5
    h.observe(0.7, n=3)    # le=1.0, three observations
    h.observe(5.0)         # +Inf
    assert h.counts == [1, 1, 3, 1]
    assert h.cumulative() == [1, 2, 5, 6]
    assert h.count == 6
    assert h.total == pytest.approx(0.1 + 0.1000001 + 2.1 + 5.0)


def test_buckets_match_published_vllm_metrics(data_dir) -> None:
    # shared/data/vllm-metrics/METRICS.md tabulates vLLM 0.33.0's bucket lists.
    text = (data_dir / "vllm-metrics" / "METRICS.md").read_text()

    def published(metric: str) -> tuple[float, ...]:
        line = next(ln for ln in text.splitlines() if ln.startswith(f"| `{metric}`"))
        m = re.search(r"buckets ([0-9.,]+)", line)
        assert m, f"no bucket list for {metric} in METRICS.md"
        return tuple(float(x) for x in m.group(1).strip(",").split(","))

    assert published("vllm:time_to_first_token_seconds") == TTFT_BUCKETS
    assert published("vllm:inter_token_latency_seconds") == ITL_BUCKETS
    assert published("vllm:e2e_request_latency_seconds") == E2E_BUCKETS


def test_every_variant_is_listed_in_gpu_hours_and_cost_even_unused() -> None:
    # A static fleet of one GH200 (the example's minimum) serves 20 small requests; the H100 and
    # A100 variants never run a replica, so they cost exactly 0, and are listed as such.
    wl = Workload([Request(arrival_s=float(t), input_tokens=200, output_tokens=20) for t in range(20)])
    res = summarize(run_simulation(default_config(), wl, "static"))
    assert list(res["gpu_hours"]) == ["h100", "a100", "gh200", "total"] == list(res["cost_usd"])
    assert res["gpu_hours"]["h100"] == 0.0 and res["gpu_hours"]["a100"] == 0.0 and res["cost_usd"]["a100"] == 0.0
    assert res["gpu_hours"]["gh200"] > 0 and res["gpu_hours"]["total"] == res["gpu_hours"]["gh200"]


def test_planned_ahead_puts_each_plan_at_the_tick_it_was_for() -> None:
    # Plans at ticks 0, 15, 30 s (n1/n2/n3 per variant): the third step of the plan made at 0 s is
    # for 30 s: 3 + 1 = 4 replicas; the one made at 15 s is for 45 s: 5 + 0 = 5.
    cfg = default_config()
    svc = cfg.services[0]
    names = [v.name for v in svc.variants]
    plans = [("1/2/3", "0/0/1", "0/0/0"), ("2/3/5", "1/1/0", "0/0/0"), ("3/3/3", "0/0/0", "0/0/0"),
             ("3/3/3", "0/0/0", "0/0/0")]
    rows = [{"time_s": 15.0 * i, **{f"plan_{v}": p for v, p in zip(names, plan, strict=True)}}
            for i, plan in enumerate(plans)]
    assert planned_ahead(rows, svc, 2) == ([30.0, 45.0], [4, 5])
    assert planned_ahead([{"time_s": 0.0}, {"time_s": 15.0}, {"time_s": 30.0}], svc, 2) == ([], [])


def test_timeline_arrival_rate_is_the_workloads_arrivals_over_each_tick_not_the_loops_signal(make_fleet) -> None:
    # timeline.csv's arrival_rate_rps (docs/simulator.md): the workload's requests arriving in
    # (previous tick, this tick] over the tick's 15 s, by hand: 1, 2, 3 s -> 3/15 at 15 s; none in
    # (15, 30]; 31..36 s and 45 s (an arrival on a tick counts in the tick it ends) -> 7/15 at 45 s;
    # none in (45, 60] and (60, 75]; 80 s -> 1/15 at 90 s.
    times = [1.0, 2.0, 3.0, 31.0, 32.0, 33.0, 34.0, 35.0, 36.0, 45.0, 80.0]
    wl = Workload([Request(arrival_s=t, input_tokens=100, output_tokens=10) for t in times])
    run = run_simulation(make_fleet(1, controller={"window_s": 60.0}), wl, "pid")
    rows = timeline_rows(run)
    assert [r["time_s"] for r in rows] == [15.0, 30.0, 45.0, 60.0, 75.0, 90.0]
    assert [r["arrival_rate_rps"] for r in rows] == pytest.approx([3 / 15, 0.0, 7 / 15, 0.0, 0.0, 1 / 15])
    # The loop's own arrival signal at 60 s is not the column: the gateway counter's rate() over the
    # 60-s window (Prometheus 2.x promql/functions.go extrapolatedRate), by hand: samples at 15, 30, 45,
    # 60 s read 3, 3, 10, 10 -> an increase of 7 over 45 s sampled, extrapolated 15 s to the window's
    # start (within 1.1 sample intervals; the counter's zero lies 45 * 3/7 s before the first sample,
    # farther) -> 7 * 60/45 over 60 s = 7/45 req/s, while the column reads 0.0.
    signal = run.ticks[3].services["svc"].estimate.signals.arrival_rate_rps
    assert signal == pytest.approx(7 / 45)
