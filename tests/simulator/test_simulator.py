"""Tests for the fleet simulator (autoscaler.simulator) and run_simulation on small hand-built workloads.

Timing expectations are computed from the performance profile's documented step-time model
(``PerformanceProfile.step_time``) and vLLM V1's scheduling rules as the engine module states them
(chunked prefill with an 8192-token budget, one token per decoding sequence per step).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from types import SimpleNamespace

import pytest

from autoscaler.adapters.simulator import SimActuator, pod_name
from autoscaler.errors import ConfigError
from autoscaler.report import summarize
from autoscaler.simulate import run_simulation
from autoscaler.simulator.engine import COMPLETED, DRAINING, FAILED, GONE, PROVISIONING, READY, REJECTED, Replica
from autoscaler.simulator.fleet import FleetSimulator
from autoscaler.simulator.router import least_outstanding
from autoscaler.workload.types import BATCH, Request, Workload
from models.profiles import get_profile, prefill_pairs, shipped_entries

H100 = get_profile("llama-3-8b/h100-sxm")


def st(p: int, n: int = 0, c: int = 0, start: int = 0) -> float:
    """One step: ``p`` prompt tokens after ``start`` already cached (their attention pairs counted),
    ``n`` decodes at ``c`` context tokens in all."""
    return H100.step_time(p, n, c, prefill_pairs(start, p))


def run_all(sim: FleetSimulator, t_end: float = 10_000.0) -> None:
    sim.run_until(t_end)
    assert sim.done, "simulation did not finish every request"


def replicas(sim: FleetSimulator, service: str = "svc") -> list[Replica]:
    return sim.services[service].replicas


# ------------------------------------------------------------------------------ (a) conservation
def mixed_workload() -> tuple[Workload, int]:
    reqs = []
    n_oversize = 0
    for i in range(60):
        if i % 10 == 3:  # 6 requests longer than max_model_len 8192 (prompt + output)
            reqs.append(Request(arrival_s=i * 0.5, input_tokens=8000, output_tokens=500))
            n_oversize += 1
        else:
            reqs.append(Request(arrival_s=i * 0.5, input_tokens=300 + 37 * (i % 7), output_tokens=150 + 90 * (i % 5),
                                request_class=BATCH if i % 4 == 0 else "interactive"))
    return Workload(reqs, source="test:mixed"), n_oversize


def test_every_request_ends_exactly_once(make_fleet, monkeypatch) -> None:
    ends: Counter[int] = Counter()
    original = FleetSimulator._end

    def counting_end(self, sr, status):
        ends[sr.req.rid] += 1
        original(self, sr, status)

    monkeypatch.setattr(FleetSimulator, "_end", counting_end)
    wl, n_oversize = mixed_workload()
    cfg = make_fleet(2, max_model_len=8192, startup_s=5.0, crashes=[{"time_s": 12.0, "variant": "h100"}])
    run = run_simulation(cfg, wl, "pid")
    sim = run.sim
    statuses = Counter(sr.status for sr in sim.requests)
    assert None not in statuses
    assert set(statuses) <= {COMPLETED, REJECTED, FAILED}
    assert statuses[REJECTED] == n_oversize == 6
    assert statuses[FAILED] >= 1, "the crash at t=12 s should fail the crashed replica's in-flight requests"
    assert sum(statuses.values()) == len(wl.requests) == 60
    assert ends == Counter({r.rid: 1 for r in wl.requests})
    res = summarize(run)["requests"]
    assert res == {"total": 60, "completed": statuses[COMPLETED], "rejected": 6, "failed": statuses[FAILED],
                   "rejected_admission": 0}
    # Rejected requests are exactly the oversize ones, rejected on arrival.
    for sr in sim.requests:
        oversize = sr.req.input_tokens + sr.req.output_tokens > 8192
        assert (sr.status == REJECTED) == oversize
        if oversize:
            assert sr.t_finish == sr.req.arrival_s and sr.t_first is None


# ------------------------------------------------------------------------------ (b) KV capacity
def test_kv_usage_never_exceeds_capacity_under_preemption(make_fleet, monkeypatch) -> None:
    cap = 20_000
    cfg = make_fleet(1, kv_cache_tokens=cap)
    # 40 requests of 2000 + 400 tokens: ~9 fit at admission (2000 + 16 slack each), but they grow by 400
    # tokens each while decoding (9 x 2400 > 20000), so the engine must preempt.
    wl = Workload([Request(arrival_s=i * 0.01, input_tokens=2000, output_tokens=400) for i in range(40)])
    peaks: list[int] = []
    original = Replica.on_step_end

    def checked(self, now, version):
        if version == self._version and self._step is not None:
            _t0, k, _b, _g, n, _c, _chunks = self._step
            # KV held at the end of the step (or closed-form decode run) before anything is freed.
            peaks.append(self.kv_used + n * k)
            assert self.kv_used + n * k <= self.kv_cap
        original(self, now, version)
        assert 0 <= self.kv_used <= self.kv_cap

    monkeypatch.setattr(Replica, "on_step_end", checked)
    sim = FleetSimulator(cfg, wl)
    t = 0.0
    while not sim.done:
        t += 0.05
        assert t < 600, "did not finish"
        sim.run_until(t)
        for r in replicas(sim):
            assert r.kv_used <= r.kv_cap
            r.refresh_gauges()
            assert 0.0 <= r.metrics.kv_usage <= 1.0
    assert all(sr.status == COMPLETED for sr in sim.requests)
    assert sum(r.metrics.preemptions for r in replicas(sim)) > 0
    assert max(peaks) > 0.9 * cap  # the cache really was under pressure
    # Every generated token was produced: recomputation after preemption must not lose or add output.
    assert all(sr.generated == sr.req.output_tokens for sr in sim.requests)


# ------------------------------------------------------------------------------ (c) cost
def test_cost_equals_replica_seconds_times_price(make_fleet) -> None:
    price, gpus = 1.5, 2
    cfg = make_fleet(2, price_per_gpu_hour=price, gpus_per_replica=gpus, profile="llama-3-8b/h100-sxm/tp2",
                     startup_s=30.0, crashes=[{"time_s": 20.0, "variant": "h100"}])
    wl = Workload([Request(arrival_s=i * 2.0, input_tokens=500, output_tokens=100) for i in range(30)])
    run = run_simulation(cfg, wl, "pid")
    res = summarize(run)
    end = run.end_s
    reps = replicas(run.sim)
    # Independent sum over replica lifetimes (price from the config, not from the replica object).
    secs = sum((r.gone_s if r.gone_s is not None else end) - r.created_s for r in reps)
    assert res["cost_usd"]["h100"] == pytest.approx(secs * gpus * price / 3600, rel=1e-12)
    assert res["cost_usd"]["total"] == pytest.approx(secs * gpus * price / 3600, rel=1e-12)
    assert res["gpu_hours"]["total"] == pytest.approx(secs * gpus / 3600, rel=1e-12)
    # By hand: two replicas from t=0; one crashes at 20 s and its replacement is created at 20 s, so
    # there are always exactly two paid replicas: 2 x end_s replica-seconds.
    assert len(reps) == 3
    assert secs == pytest.approx(2 * end)
    assert res["cost_usd"]["total"] == pytest.approx(2 * end * gpus * price / 3600)


# ------------------------------------------------------------------------------ (d) crash
def test_crash_fails_in_flight_and_loses_prefix_cache(make_fleet) -> None:
    cfg = make_fleet(1, startup_s=5.0, crashes=[{"time_s": 11.0, "variant": "h100"}])
    h = (1, 2, 3, 4)  # 4 blocks of 512 tokens
    wl = Workload([
        Request(arrival_s=0.0, input_tokens=2048, output_tokens=5, hash_ids=h),     # A: cold
        Request(arrival_s=5.0, input_tokens=2048, output_tokens=5, hash_ids=h),     # B: hit 2047
        Request(arrival_s=10.0, input_tokens=2048, output_tokens=2000, hash_ids=h),  # C: in flight at 11 s
        Request(arrival_s=12.0, input_tokens=300, output_tokens=5),                 # F: waits at the gateway
        Request(arrival_s=20.0, input_tokens=2048, output_tokens=5, hash_ids=h),    # D: first repeat after crash
        Request(arrival_s=25.0, input_tokens=2048, output_tokens=5, hash_ids=h),    # E: hits on the new replica
    ])
    sim = FleetSimulator(cfg, wl)
    run_all(sim)
    a, b, c, f, d, e = sim.requests
    first, second = replicas(sim)
    # before the crash: prefix hits on the first replica (hit capped at input - 1 = 2047)
    assert b.hit_tokens == 2047 and c.hit_tokens == 2047
    assert first.metrics.prefix_hits == 2 * 2047
    # the crash fails the in-flight request at 11 s and retires the replica
    assert c.status == FAILED and c.t_finish == 11.0 and c.replica is first
    assert first.state == GONE and first.gone_s == 11.0
    assert first.metrics.success["error"] == 1
    # the replacement is created at the crash and ready startup_s later
    assert second.created_s == 11.0 and second.ready_s == 16.0
    # F waited at the gateway for the replacement: TTFT = (16 - 12) + one 300-token prefill step
    assert f.status == COMPLETED and f.replica is second
    assert f.t_first - f.req.arrival_s == pytest.approx(4.0 + st(300), rel=1e-12)
    # the replacement starts with an empty prefix cache
    assert d.replica is second and d.hit_tokens == 0
    assert d.t_first - d.req.arrival_s == pytest.approx(st(2048), rel=1e-12)
    assert e.hit_tokens == 2047
    assert second.metrics.prefix_hits == 2047
    assert [s.status for s in (a, b, d, e)] == [COMPLETED] * 4


def test_every_injected_crash_is_reported_with_its_outcome(make_fleet) -> None:
    # 11 s: the one ready replica crashes with one request in flight; 12 s: its replacement is still
    # provisioning (ready at 16 s), so nothing can crash; 5000 s: the run is over before then.
    crashes = [{"time_s": 11.0, "variant": "h100"}, {"time_s": 12.0, "variant": "h100"},
               {"time_s": 5000.0, "variant": "h100"}]
    cfg = make_fleet(1, startup_s=5.0, crashes=crashes)
    wl = Workload([Request(arrival_s=10.0, input_tokens=100, output_tokens=2000),
                   Request(arrival_s=20.0, input_tokens=100, output_tokens=5)])
    sim = FleetSimulator(cfg, wl)
    sim.run_until(100.0)
    assert sim.done
    outcomes = sim.crash_outcomes()
    assert [(c["time_s"], c["applied"], c["failed_requests"]) for c in outcomes] == [
        (11.0, True, 1), (12.0, False, 0), (5000.0, False, 0)]
    assert outcomes[1]["why"] == "no ready replica of the variant"
    assert outcomes[2]["why"] == "after the last request ended"
    assert [sr.status for sr in sim.requests] == [FAILED, COMPLETED]


# ------------------------------------------------------------------------------ (e) single request timing
def test_single_request_ttft_and_decode_time(make_fleet) -> None:
    sim = FleetSimulator(make_fleet(1), Workload([Request(arrival_s=1.0, input_tokens=10_000, output_tokens=50)]))
    run_all(sim)
    (sr,) = sim.requests
    # Prefill in chunks of max_num_batched_tokens = 8192: 8192 then 1808 tokens (attending to the 8192
    # before them too); the first token is out at the end of the last chunk.
    ttft = st(8192) + st(1808, start=8192)
    assert sr.t_first - sr.req.arrival_s == pytest.approx(ttft, rel=1e-12)
    # 49 more tokens, one per decode step; step i reads a context of 10000 + i tokens.
    decode = sum(st(0, 1, 10_000 + i) for i in range(49))
    assert sr.t_finish - sr.t_first == pytest.approx(decode, rel=1e-9)
    # Closed form of the same sum: 49*(t(0,1,0) + g*10000) + g*49*48/2
    g = H100.seconds_per_ctx_token
    assert decode == pytest.approx(49 * (st(0, 1, 0) + g * 10_000) + g * 49 * 48 / 2, rel=1e-12)
    assert sr.status == COMPLETED


def test_a_profile_file_sets_the_step_times(make_fleet, tmp_path) -> None:
    # The H100 profile written to a file with a 30 ms step overhead: the simulator must step at its pace.
    entry = shipped_entries()["llama-3-8b/h100-sxm"]
    path = tmp_path / "slow-h100.json"
    path.write_text(json.dumps({**entry, "coefficients": {**entry["coefficients"], "step_overhead_s": 0.03}}))
    sim = FleetSimulator(make_fleet(1, profile=str(path)),
                         Workload([Request(arrival_s=1.0, input_tokens=1000, output_tokens=3)]))
    run_all(sim)
    (sr,) = sim.requests
    assert sr.t_first - sr.req.arrival_s == pytest.approx(st(1000) - H100.step_overhead_s + 0.03, rel=1e-12)
    decode = sum(st(0, 1, 1000 + i) - H100.step_overhead_s + 0.03 for i in range(2))
    assert sr.t_finish - sr.t_first == pytest.approx(decode, rel=1e-9)


def test_single_token_request_finishes_at_first_token(make_fleet) -> None:
    sim = FleetSimulator(make_fleet(1), Workload([Request(arrival_s=0.0, input_tokens=100, output_tokens=1)]))
    run_all(sim)
    (sr,) = sim.requests
    assert sr.t_first == sr.t_finish == pytest.approx(st(100))


def test_two_requests_share_steps(make_fleet) -> None:
    # Two prompts arrive at t=0. The first starts a prefill step on arrival; the second arrives while that
    # step runs and joins the next step, which also carries the first request's first decode (continuous
    # batching: decode token + prefill chunk in one step).
    wl = Workload([Request(arrival_s=0.0, input_tokens=1000, output_tokens=4) for _ in range(2)])
    sim = FleetSimulator(make_fleet(1), wl)
    run_all(sim)
    r0, r1 = sim.requests
    assert r0.t_first == pytest.approx(st(1000))
    # step 2 = 1000 prefill tokens + 1 decode sequence with a 1000-token context
    t1 = st(1000) + st(1000, 1, 1000)
    assert r1.t_first == pytest.approx(t1)
    assert r0.t_finish > r0.t_first and r1.t_finish > r1.t_first


def test_step_token_budget_counts_decode_tokens(make_fleet, monkeypatch) -> None:
    # vLLM's max_num_batched_tokens (8192) bounds decode tokens + prefill tokens of one step. A 10000-token
    # prompt arriving while another request decodes is prefilled as 8191 (+1 decode token) then 1809.
    steps: list[tuple[int, int]] = []  # (decode sequences, prefill tokens) of each planned step
    chunks_of: dict[int, list[int]] = {}
    original = Replica._start

    def recording(self, now, k, base, g, n, ctx0, chunks, dur):
        p = sum(c for _, c in chunks) if chunks else 0
        steps.append((n, p))
        for sr, c in chunks or []:
            chunks_of.setdefault(sr.req.rid, []).append(c)
        original(self, now, k, base, g, n, ctx0, chunks, dur)

    monkeypatch.setattr(Replica, "_start", recording)
    wl = Workload([Request(arrival_s=0.0, input_tokens=100, output_tokens=2000),
                   Request(arrival_s=1.0, input_tokens=10_000, output_tokens=5)])
    sim = FleetSimulator(make_fleet(1), wl)
    run_all(sim)
    assert chunks_of[1] == [8191, 1809]
    assert all(n + p <= 8192 for n, p in steps)


# ------------------------------------------------------------------------------ (f) determinism
def det_workload() -> Workload:
    reqs = []
    for i in range(150):
        t = i * 0.4 if i < 100 else 40 + (i - 100) * 0.05  # a burst after 40 s
        reqs.append(Request(arrival_s=t, input_tokens=200 + (i * 131) % 1800, output_tokens=20 + (i * 53) % 400,
                            hash_ids=(i % 3, 100 + i % 5), request_class=BATCH if i % 5 == 0 else "interactive"))
    return Workload(reqs, block_tokens=128, source="test:det")


def test_same_input_gives_identical_outcomes(make_fleet) -> None:
    def once():
        cfg = make_fleet(1, min_replicas=1, max_replicas=4, startup_s=20.0,
                         crashes=[{"time_s": 30.0, "variant": "h100"}])
        run = run_simulation(cfg, det_workload(), "pid")
        reqs = [(sr.status, sr.t_first, sr.t_finish, sr.hit_tokens, sr.replica.rid if sr.replica else None)
                for sr in run.sim.requests]
        reps = [(r.rid, r.created_s, r.ready_s, r.gone_s) for r in replicas(run.sim)]
        ticks = [tuple(sorted(rec.services["svc"].applied.items())) for rec in run.ticks]
        return reqs, reps, ticks, run.end_s

    assert once() == once()


# ------------------------------------------------------------------------------ (g) prefix cache
def test_prefix_cache_hits_and_counters(make_fleet) -> None:
    wl = Workload([
        Request(arrival_s=0.0, input_tokens=1500, output_tokens=2, hash_ids=(7, 8, 9)),
        Request(arrival_s=5.0, input_tokens=1500, output_tokens=2, hash_ids=(7, 8, 9)),   # identical
        Request(arrival_s=10.0, input_tokens=1500, output_tokens=2, hash_ids=(7, 8, 77)),  # shares 2 blocks
        # leading run: a miss at block 0 ends the match, even though 8 and 9 are cached
        Request(arrival_s=15.0, input_tokens=1500, output_tokens=2, hash_ids=(50, 8, 9)),
    ], block_tokens=512)
    sim = FleetSimulator(make_fleet(1), wl)
    r = replicas(sim)[0]
    sim.run_until(4.0)
    assert (r.metrics.prefix_hits, r.metrics.prefix_queries) == (0, 1500)
    run_all(sim)
    s1, s2, s3, s4 = sim.requests
    # identical: 3 blocks x 512 = 1536 >= 1500, capped at input - 1 = 1499; only 1 token is prefilled
    assert s2.hit_tokens == 1499
    assert s2.t_first - 5.0 == pytest.approx(st(1, start=1499), rel=1e-12)
    assert s1.t_first == pytest.approx(st(1500), rel=1e-12)
    # two leading blocks: 1024 tokens hit, 476 prefilled
    assert s3.hit_tokens == 1024
    assert s3.t_first - 10.0 == pytest.approx(st(476, start=1024), rel=1e-12)
    assert s4.hit_tokens == 0
    m = r.metrics
    assert m.prefix_hits == 1499 + 1024
    assert m.prefix_queries == 4 * 1500
    assert m.prompt_tokens == 4 * 1500


# ------------------------------------------------------------------------------ (h) router
def _stub(variant: str, waiting: int, prefilling: int, decoding: int, inbound: int = 0) -> SimpleNamespace:
    """A replica as the router reads it: outstanding = waiting + prefilling + decoding (+ inbound: requests
    a prefill replica prefills for it)."""
    return SimpleNamespace(variant=variant, waiting=[None] * waiting, prefilling=[None] * prefilling, n_dec=decoding,
                           inbound=inbound)


def test_least_outstanding_weighted_by_capacity() -> None:
    a = _stub("fast", 1, 1, 1)   # (3+1)/2 = 2
    b = _stub("slow", 0, 0, 1)   # (1+1)/1 = 2 -> tie, earlier (a) wins
    c = _stub("slow", 0, 0, 0)   # (0+1)/1 = 1
    w = {"fast": 2.0, "slow": 1.0}
    assert least_outstanding([a, b], w) is a
    assert least_outstanding([b, a], w) is b
    assert least_outstanding([a, b, c], w) is c
    d = _stub("slow", 0, 0, 0, inbound=2)  # (0+2+1)/1 = 3: its remote prefills count, so a (2) wins
    assert least_outstanding([d, a], w) is a


def test_router_spreads_to_least_outstanding_replica(make_fleet) -> None:
    wl = Workload([Request(arrival_s=i * 0.001, input_tokens=100, output_tokens=300) for i in range(7)])
    sim = FleetSimulator(make_fleet(3), wl)
    run_all(sim)
    rids = [r.rid for r in replicas(sim)]
    # All 7 are still in flight when the next arrives: 1,2,3,1,2,3,1 (ties go to the earlier replica).
    assert [sr.replica.rid for sr in sim.requests] == [rids[i % 3] for i in range(7)]


# ------------------------------------------------------------------------------ (i) draining
def two_replicas_holding_two_and_one(make_fleet, *extra: Request) -> FleetSimulator:
    """Two H100 replicas at t = 1 s: the first holds two long requests, the second one."""
    wl = Workload([*(Request(arrival_s=t, input_tokens=500, output_tokens=500) for t in (0.0, 0.001, 0.002)), *extra])
    sim = FleetSimulator(make_fleet(2, min_replicas=0, max_replicas=4), wl)
    sim.run_until(1.0)
    return sim


def test_draining_replica_finishes_its_work_and_stops_costing(make_fleet) -> None:
    sim = two_replicas_holding_two_and_one(make_fleet, Request(arrival_s=1.5, input_tokens=500, output_tokens=10))
    rep1, rep2 = replicas(sim)
    # rep1 holds requests 0 and 2, rep2 holds request 1: rep2 (fewest outstanding) is drained.
    assert (rep1.outstanding, rep2.outstanding) == (2, 1)
    assert sim.set_replicas("svc", "h100", 1) == -1
    assert rep2.state == DRAINING
    c = sim.services["svc"].counts("h100")
    assert (c.ready, c.starting, c.draining) == (1, 0, 1)
    run_all(sim)
    r0, r1, r2, r3 = sim.requests
    assert all(sr.status == COMPLETED for sr in sim.requests)
    assert r0.replica is rep1 and r2.replica is rep1 and r1.replica is rep2
    assert r3.replica is rep1  # a draining replica takes no new work
    assert rep2.state == GONE and rep2.gone_s == r1.t_finish
    assert rep2.replica_seconds(10_000.0) == pytest.approx(r1.t_finish)
    assert rep1.replica_seconds(10_000.0) == 10_000.0
    assert sim.scale_events == 1


def test_scale_down_removes_starting_replica_first(make_fleet) -> None:
    sim = FleetSimulator(make_fleet(1, min_replicas=0, max_replicas=4, startup_s=10.0), Workload([]))
    sim.run_until(2.0)
    assert sim.set_replicas("svc", "h100", 2) == 1  # created at 2 s
    sim.run_until(2.5)
    assert sim.set_replicas("svc", "h100", 3) == 1  # created at 2.5 s
    sim.run_until(3.0)
    assert sim.set_replicas("svc", "h100", 2) == -1
    reps = replicas(sim)
    assert [r.state for r in reps] == [READY, PROVISIONING, GONE]  # the newest starting one goes
    assert reps[2].replica_seconds(100.0) == pytest.approx(0.5)  # created at 2.5 s, removed at 3 s
    sim.run_until(12.0)
    assert [r.state for r in reps] == [READY, READY, GONE]
    assert sim.scale_events == 3


def test_scale_down_removes_the_named_replicas_first(make_fleet) -> None:
    # The same state as above: rep2 would be drained (fewest outstanding), but the controller names
    # rep1 (through the actuator, by pod name): rep1 drains, rep2 keeps serving.
    sim = two_replicas_holding_two_and_one(make_fleet)
    rep1, rep2 = replicas(sim)
    assert (rep1.outstanding, rep2.outstanding) == (2, 1)
    SimActuator(sim).scale("svc", "h100", 1, [pod_name("svc", "h100", rep1.rid), "svc-h100-nosuch"])
    assert rep1.state == DRAINING and rep2.state == READY


# ------------------------------------------------------------------------------ (j) gateway
def test_gateway_holds_requests_until_a_replica_is_ready(make_fleet) -> None:
    wl = Workload([Request(arrival_s=0.5, input_tokens=400, output_tokens=3)])
    sim = FleetSimulator(make_fleet(0, min_replicas=0, max_replicas=2, startup_s=10.0), wl)
    sim.run_until(1.0)
    assert len(sim.services["svc"].gateway) == 1
    sim.set_replicas("svc", "h100", 1)  # created at 1 s, ready at 11 s
    run_all(sim)
    (sr,) = sim.requests
    assert sr.status == COMPLETED
    assert sr.t_first == pytest.approx(11.0 + st(400), rel=1e-12)


def test_client_timeout_fails_requests_waiting_at_the_gateway(make_fleet) -> None:
    wl = Workload([
        Request(arrival_s=0.0, input_tokens=400, output_tokens=3),  # its client gives up at 5 s
        Request(arrival_s=4.0, input_tokens=400, output_tokens=3),  # at 9 s, before the replica is ready
        Request(arrival_s=8.0, input_tokens=400, output_tokens=3),  # waited 3 s: served
    ])
    sim = FleetSimulator(make_fleet(0, min_replicas=0, max_replicas=2, startup_s=10.0, client_timeout_s=5.0), wl)
    sim.run_until(1.0)
    sim.set_replicas("svc", "h100", 1)  # ready at 11 s
    run_all(sim)
    r0, r1, r2 = sim.requests
    assert (r0.status, r0.t_finish) == (FAILED, 5.0)
    assert (r1.status, r1.t_finish) == (FAILED, 9.0)
    assert r2.status == COMPLETED and r2.t_first == pytest.approx(11.0 + st(400))
    assert math.isclose(r2.t_first - r2.req.arrival_s, 3.0 + st(400))


def test_client_timeout_aborts_queued_and_running_requests_and_frees_their_cache(make_fleet) -> None:
    # One replica, max_num_seqs 256: a 2,000-token decode (~16 s alone) and, behind it, a short one.
    # With a 10 s timeout the long one is aborted mid-decode; the short one completes.
    long = Request(arrival_s=0.0, input_tokens=1000, output_tokens=2000)
    short = Request(arrival_s=1.0, input_tokens=100, output_tokens=10)
    sim = FleetSimulator(make_fleet(1, client_timeout_s=10.0), Workload([long, short]))
    run_all(sim)
    a, b = sim.requests
    assert (a.status, a.t_finish) == (FAILED, 10.0)
    assert b.status == COMPLETED
    (r,) = sim.services["svc"].replicas
    assert r.metrics.success["abort"] == 1
    assert r.kv_used == 0 and r.n_dec == 0 and not r.prefilling and not r.waiting  # nothing held after the abort
    # the aborted decode stopped at the step boundary after 10 s: far fewer than 2,000 tokens generated
    assert r.metrics.generation_tokens < 2000


def test_client_timeout_of_requests_queued_on_a_replica(make_fleet) -> None:
    # One sequence at a time (max_num_seqs 1), ten requests at t = 0 of ~0.8 s each, clients giving up
    # at 4.5 s: five complete, the sixth is aborted while running, the last four while still queued.
    cfg = make_fleet(1, client_timeout_s=4.5)
    cfg.engine.max_num_seqs = 1
    sim = FleetSimulator(cfg, Workload([Request(arrival_s=0.0, input_tokens=100, output_tokens=100)
                                        for _ in range(10)]))
    run_all(sim)
    status = [sr.status for sr in sim.requests]
    assert status == [COMPLETED] * 5 + [FAILED] * 5
    assert all(sr.t_finish == 4.5 for sr in sim.requests[5:])
    assert sim.requests[5].t_first is not None and all(sr.t_first is None for sr in sim.requests[6:])
    (r,) = sim.services["svc"].replicas
    assert r.metrics.success["abort"] == 5 and r.metrics.success["stop"] == 5
    assert r.kv_used == 0 and not r.waiting and not r.busy


def test_a_streaming_clients_timeout_ends_with_its_first_token(make_fleet) -> None:
    # As above, with streaming clients: the sixth request has its first token before 4.5 s and runs to
    # its end; the last four still have none at 4.5 s and fail then.
    cfg = make_fleet(1, client_timeout_s=4.5, simulator={"clients": {"streaming": True}})
    cfg.engine.max_num_seqs = 1
    sim = FleetSimulator(cfg, Workload([Request(arrival_s=0.0, input_tokens=100, output_tokens=100)
                                        for _ in range(10)]))
    run_all(sim)
    assert [sr.status for sr in sim.requests] == [COMPLETED] * 6 + [FAILED] * 4
    assert sim.requests[5].t_finish > 4.5
    assert all(sr.t_finish == 4.5 and sr.t_first is None for sr in sim.requests[6:])


@pytest.mark.parametrize("streaming", [False, True])
def test_a_retried_attempt_times_out_as_its_client_streams(make_fleet, streaming: bool) -> None:
    # No replica until 6 s: the first attempt times out at 5 s with no token and is retried within
    # 0.5 s. The retry's 2,000-token decode (~16 s) outlasts its own 5-s timeout: a non-streaming
    # client gives up on it; a streaming one, which has its first token, reads it to the end.
    cfg = make_fleet(0, min_replicas=0, max_replicas=2, startup_s=5.0, client_timeout_s=5.0,
                     simulator={"clients": {"max_retries": 1, "streaming": streaming}})
    sim = FleetSimulator(cfg, Workload([Request(arrival_s=0.0, input_tokens=400, output_tokens=2000)]))
    sim.run_until(1.0)
    sim.set_replicas("svc", "h100", 1)
    run_all(sim)
    (first,) = sim.requests
    (last,) = sim.final
    assert (first.status, first.t_finish, sim.retries) == (FAILED, 5.0, 1)
    assert last.attempt == 1 and last.t_first is not None
    if streaming:
        assert last.status == COMPLETED and last.t_finish - last.sent_s > 5.0
    else:
        assert last.status == FAILED and last.t_finish == pytest.approx(last.sent_s + 5.0)


def test_a_crashed_replicas_replacement_starts_warm_when_a_warm_node_is_free(make_fleet) -> None:
    # 2 warm nodes, 3 replicas (the first two on the warm nodes). The oldest replica (on a warm node)
    # crashes: its node is free, so the replacement starts warm although 2 replicas are still alive.
    cfg = make_fleet(3, crashes=[{"time_s": 1.0, "variant": "h100"}])
    v = cfg.services[0].variants[0]
    v.warm_nodes, v.startup_warm_s, v.startup_cold_s = 2, 30.0, 300.0
    sim = FleetSimulator(cfg, Workload([Request(arrival_s=5.0, input_tokens=100, output_tokens=5)]))
    assert [r.warm_start for r in sim.services["svc"].replicas] == [True, True, False]
    sim.run_until(2.0)
    new = sim.services["svc"].replicas[-1]
    assert new.warm_start and new.ready_s == pytest.approx(31.0)
    # a fourth replica finds both warm nodes taken: cold
    sim.set_replicas("svc", "h100", 4)
    assert not sim.services["svc"].replicas[-1].warm_start


def test_unknown_crash_target_rejected(make_fleet) -> None:
    # Rejected when the fleet file is validated, before any simulation starts.
    with pytest.raises(ConfigError, match=r"simulator\.crashes\[0\]\.variant: unknown variant 'nope'"):
        make_fleet(1, crashes=[{"time_s": 1.0, "variant": "nope"}])



def test_quiet_gap_is_skipped_only_after_the_idle_rule_had_its_window(make_fleet) -> None:
    # 2 req/s for 600 s, then one request at 4,000 s. After the traffic the 300-s window still holds
    # requests, so the service is not idle and the PID holds (no replica change); skipping to 4,000 s
    # then would keep the fleet at its traffic size through the gap. The idle rule must get its ticks:
    # the fleet is at its minimum (1) well before the lone request.
    cfg = make_fleet(3, min_replicas=1, max_replicas=4)
    reqs = [Request(arrival_s=i * 0.5, input_tokens=500, output_tokens=100) for i in range(1200)]
    reqs.append(Request(arrival_s=4000.0, input_tokens=500, output_tokens=100))
    run = run_simulation(cfg, Workload(reqs), "pid", steady_start=False)
    before = [rec for rec in run.ticks if 1500.0 <= rec.time_s < 4000.0]
    assert before and all(sum(rec.services["svc"].applied.values()) == 1 for rec in before)


def test_a_roofline_profile_steps_at_the_larger_of_weight_reads_and_prefill_flops(make_fleet) -> None:
    # The shipped roofline profile of Llama-2-70B on two H100s, its coefficients read from the document
    # and the step times computed here from the roofline form (docs/simulator.md#step-forms): a
    # 100-token prompt is under the knee (its FLOPs hide under the weight read), a 5000-token one runs
    # as chunks of 2048, 2048 and 904 tokens, each past the knee.
    entry = shipped_entries()["llama-2-70b/h100-sxm/tp2"]
    assert entry["step_form"] == "roofline"
    c = entry["coefficients"]
    o, w, a, r, b = (c[k] for k in ("step_overhead_s", "weight_read_s", "prefill_s_per_token",
                                    "attention_tokens_per_pair", "decode_s_per_seq"))
    g = get_profile("llama-2-70b/h100-sxm/tp2").seconds_per_ctx_token
    assert a * 100 < w < a * 904
    cfg = make_fleet(1, profile="llama-2-70b/h100-sxm/tp2", gpus_per_replica=2,
                     engine={"max_num_batched_tokens": 2048})
    wl = Workload([Request(arrival_s=1.0, input_tokens=100, output_tokens=3),
                   Request(arrival_s=100.0, input_tokens=5000, output_tokens=1)])
    sim = FleetSimulator(cfg, wl)
    run_all(sim)
    short, long = sim.requests
    assert short.t_first - 1.0 == pytest.approx(o + w + a * r * 100 * 101 / 2, rel=1e-12)
    decode = sum(o + w + b + g * (100 + i) for i in range(2))
    assert short.t_finish - short.t_first == pytest.approx(decode, rel=1e-9)
    chunks = [(0, 2048), (2048, 2048), (4096, 904)]
    ttft = sum(o + a * n + a * r * (n * s + n * (n + 1) / 2) for s, n in chunks)
    assert long.t_first - 100.0 == pytest.approx(ttft, rel=1e-12)
