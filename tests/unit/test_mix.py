"""The loop's served-mix capacities (autoscaler.loop.mix) and the PID's integral across a change of them."""

from __future__ import annotations

from dataclasses import replace

import pytest

from autoscaler.config import FleetConfig
from autoscaler.config.loading import default_fleet_document
from autoscaler.loop.mix import MIN_REQUESTS, STEADY_TOLERANCE, MixTracker
from autoscaler.state import Signals
from controllers.pid import PIDState, rescale
from models.capacity import RequestMix, variant_weights

CFG = FleetConfig.model_validate(default_fleet_document())
SVC = CFG.services[0]
ENGINE = CFG.engine
WINDOW_S = 300.0


def served(rate: float, input_tokens: float, output_tokens: float, hit: float | None = None) -> Signals:
    """A steady window's signals: no queue, completions equal to the arrivals."""
    return Signals(request_rate_rps=rate, prompt_tokens_rps=rate * input_tokens,
                   generation_tokens_rps=rate * output_tokens, prefix_hit_rate=hit,
                   queue_length=0.0, running=20.0, arrival_rate_rps=rate)


def settle(m: MixTracker, signals: Signals) -> dict[str, float]:
    """Feed ``signals`` every 15 s for one window after the tracker's last tick; the capacities at its end."""
    start_s = m._running[-1][0] + 15.0 if m._running else 0.0
    t = start_s
    while t < start_s + WINDOW_S:
        m.update(signals, t)
        t += 15.0
    return m.update(signals, t)


def expected(input_tokens: float, output_tokens: float, hit: float) -> dict[str, float]:
    return variant_weights(SVC, ENGINE, RequestMix.from_means(input_tokens, output_tokens, hit))


def test_starts_at_the_declared_typical_request() -> None:
    t = SVC.typical_request
    assert MixTracker(SVC, ENGINE, WINDOW_S).weights == expected(t.input_tokens, t.output_tokens, t.prefix_hit_rate)
    assert MixTracker(SVC, ENGINE, WINDOW_S).weights == variant_weights(SVC, ENGINE)


def test_sizes_for_the_served_mix_once_the_window_holds_enough_requests() -> None:
    # dynamo#10528's burst: 8000-token prompts where 1024 were declared; a GH200 is then worth about
    # a sixth of the declared capacity
    m = MixTracker(SVC, ENGINE, WINDOW_S)
    declared = dict(m.weights)
    w = settle(m, served(5.0, 8000, 400, 0.1))
    assert w == expected(8000, 400, 0.1)
    assert w["gh200"] < declared["gh200"] / 4
    assert m.basis == (8000, 400, 0.1)


def test_keeps_the_capacities_inside_the_tolerance_and_without_enough_data() -> None:
    m = MixTracker(SVC, ENGINE, WINDOW_S)
    declared = dict(m.weights)
    assert settle(m, served(5.0, 1024 * 1.2, 256 * 0.8)) == declared  # both within 25 %
    few = MIN_REQUESTS / WINDOW_S * 0.9  # fewer completions in the window than MIN_REQUESTS
    assert settle(m, served(few, 8000, 256)) == declared
    for missing in ("request_rate_rps", "prompt_tokens_rps", "generation_tokens_rps"):
        sig = replace(served(5.0, 8000, 256), **{missing: None})
        assert settle(m, sig) == declared
    assert settle(m, replace(served(5.0, 8000, 256), prompt_tokens_rps=float("nan"))) == declared
    assert settle(m, served(0.0, 8000, 256)) == declared  # no traffic is not a mix


def test_the_prefix_hit_rate_counts_through_the_tokens_it_leaves_to_compute() -> None:
    # 1024 tokens at hit 0.5 leave 512 to compute: outside the tolerance of 1024 at hit 0
    m = MixTracker(SVC, ENGINE, WINDOW_S)
    assert settle(m, served(5.0, 1024, 256, 0.5)) == expected(1024, 256, 0.5)
    # unknown hit rate (a server exporting none): the declared one
    m2 = MixTracker(SVC, ENGINE, WINDOW_S)
    assert settle(m2, served(5.0, 4000, 256, None)) == expected(4000, 256, SVC.typical_request.prefix_hit_rate)


def test_a_variant_that_cannot_meet_the_slo_gets_zero_and_no_variant_keeps_the_old() -> None:
    m = MixTracker(SVC, ENGINE, WINDOW_S)
    long_ = expected(16000, 256, 0.0)
    assert long_["a100"] == 0 < long_["h100"]  # (the capacity model's own answer)
    assert settle(m, served(2.0, 16000, 256, 0.0)) == long_
    before = dict(m.weights)
    assert all(w == 0 for w in expected(64000, 256, 0.0).values())
    assert settle(m, served(2.0, 64000, 256, 0.0)) == before


def test_typical_keeps_the_declared_mix() -> None:
    m = MixTracker(SVC, ENGINE, WINDOW_S, observed=False)
    declared = dict(m.weights)
    assert settle(m, served(5.0, 8000, 400)) == declared


@pytest.mark.parametrize("mode", ["observed", "typical"])
def test_the_loop_counts_capacity_at_the_served_mix(mode: str) -> None:
    from autoscaler.simulate import run_simulation
    from autoscaler.workload.types import Request, Workload

    doc = default_fleet_document()
    doc["controller"]["capacity_mix"] = mode
    cfg = FleetConfig.model_validate(doc)
    reqs = [Request(arrival_s=i / 2.0, input_tokens=6000, output_tokens=100) for i in range(1200)]
    run = run_simulation(cfg, Workload(reqs), "pid")
    est = run.ticks[-1].services[cfg.services[0].name].estimate
    declared = variant_weights(cfg.services[0], cfg.engine)
    if mode == "typical":
        assert est.weights == declared
    else:
        assert est.weights["gh200"] < declared["gh200"] / 3


def test_pid_integral_stands_for_the_same_replicas_after_a_change() -> None:
    # 3 replicas counted at 10 req/s each (integral 30) are 6 req/s at 2 each
    state = PIDState(integral=30.0, weights=(("a", 10.0),))
    out = rescale(state, {"a": 3}, {"a": 2.0})
    assert out.integral == pytest.approx(6.0)
    assert out.weights == (("a", 2.0),)
    assert rescale(out, {"a": 3}, {"a": 2.0}).integral == pytest.approx(6.0)  # unchanged weights
    first = rescale(PIDState(integral=30.0), {"a": 3}, {"a": 2.0})  # nothing known before: as it is
    assert first.integral == 30.0


def test_only_a_window_whose_running_requests_held_steady_is_read() -> None:
    # Tokens of requests running at either end of the window bias its means by about the change in
    # running requests over its completions (5 req/s x 300 s = 1500): at most 10 % of them is read.
    m = MixTracker(SVC, ENGINE, WINDOW_S)
    declared = dict(m.weights)
    assert m.update(served(5.0, 8000, 400), 0.0) == declared  # less than a window of samples
    grown = 20.0 + STEADY_TOLERANCE * 5.0 * WINDOW_S + 1
    assert m.update(replace(served(5.0, 8000, 400), running=grown), WINDOW_S) == declared
    assert m.update(replace(served(5.0, 8000, 400), running=None), WINDOW_S + 15) == declared
    m2 = MixTracker(SVC, ENGINE, WINDOW_S)
    m2.update(served(5.0, 8000, 400), 0.0)
    within = 20.0 + STEADY_TOLERANCE * 5.0 * WINDOW_S - 1
    assert m2.update(replace(served(5.0, 8000, 400), running=within), WINDOW_S) == expected(8000, 400, 0.0)
    # a standing backlog is read: waiting requests have no tokens counted yet
    m3 = MixTracker(SVC, ENGINE, WINDOW_S)
    assert settle(m3, replace(served(5.0, 8000, 400), queue_length=500.0)) == expected(8000, 400, 0.0)


@pytest.mark.parametrize("bad", [
    {"prompt_tokens_rps": -40000.0}, {"generation_tokens_rps": -1280.0},  # negative counters: not a mix
    {"prompt_tokens_rps": 0.0}, {"generation_tokens_rps": 0.0},  # a mean below one token
    {"request_rate_rps": float("inf")}, {"prompt_tokens_rps": float("inf")},
    {"generation_tokens_rps": 5.0 * 1e9},  # a mean output longer than max_model_len (32768)
    {"prompt_tokens_rps": 5.0 * (SVC.max_model_len + 1)},
])
def test_signals_no_served_request_can_have_are_not_a_mix(bad: dict[str, float]) -> None:
    m = MixTracker(SVC, ENGINE, WINDOW_S)
    declared = dict(m.weights)
    assert settle(m, replace(served(5.0, 8000, 400), **bad)) == declared


@pytest.mark.parametrize("running", [float("nan"), -100.0, float("inf")])
def test_running_requests_that_are_not_a_count_are_unknown(running: float) -> None:
    m = MixTracker(SVC, ENGINE, WINDOW_S)
    declared = dict(m.weights)
    m.update(replace(served(5.0, 8000, 400), running=running), 0.0)
    assert m.update(served(5.0, 8000, 400), WINDOW_S) == declared  # the window's start is unknown
    assert m.update(served(5.0, 8000, 400), 2 * WINDOW_S) == expected(8000, 400, 0.0)


def test_a_mix_no_variant_serves_is_warned_about_once(caplog: pytest.LogCaptureFixture) -> None:
    doc = default_fleet_document()
    doc["services"][0]["max_model_len"] = 131072
    doc["services"][0]["variants"] = [{**v, "kv_cache_tokens": 140000} for v in doc["services"][0]["variants"]]
    svc = FleetConfig.model_validate(doc).services[0]
    m = MixTracker(svc, ENGINE, WINDOW_S)
    for k, prompt in enumerate((64000, 64500, 65000, 63000) * 10):  # the window's mean moves every tick
        m.update(served(2.0, prompt, 256, 0.0), 15.0 * k)
    assert sum("no variant meets the SLO" in r.getMessage() for r in caplog.records) == 1


def test_a_service_of_prefill_decode_pools_only_has_nothing_to_size(caplog: pytest.LogCaptureFixture) -> None:
    # Service.roles without aggregated variants (examples/fleet-pd.yaml): no capacity to derive for any
    # served mix, and no "no variant meets the SLO" warning once the window is steady (an empty set of
    # variants used to read as every variant refusing the mix).
    pools_only = SVC.model_copy(update={"variants": []})
    m = MixTracker(pools_only, ENGINE, WINDOW_S)
    with caplog.at_level("WARNING", logger="autoscaler.loop.mix"):
        assert settle(m, served(5.0, 8000, 400, 0.1)) == {}
    assert [r.getMessage() for r in caplog.records] == []


def test_the_same_capacity_inputs_are_derived_once_and_a_changed_one_again(monkeypatch) -> None:
    """Issue 35: a daemon that starts leading 100 services paid ~60 ms each for capacities that, for
    services on the same variants and mix, are the same numbers. Another name is the same inputs
    (derived once); another KV cache, SLO or mix is not; the copy handed out is the caller's own."""
    import autoscaler.loop.mix as mix

    calls: list[str] = []

    def counting(svc, engine, m):  # type: ignore[no-untyped-def]
        calls.append(svc.name)
        return variant_weights(svc, engine, m)

    monkeypatch.setattr(mix, "variant_weights", counting)
    monkeypatch.setattr(mix, "_cache", mix.Memo(mix.CACHE_SIZE))
    first = MixTracker(SVC, ENGINE, WINDOW_S)
    twin = MixTracker(SVC.model_copy(update={"name": "tenant-b"}), ENGINE, WINDOW_S)
    assert calls == [SVC.name] and twin.weights == first.weights == expected(*first.basis)
    twin.weights[SVC.variants[0].name] = -1.0  # the caller's copy, not the cache's
    assert MixTracker(SVC, ENGINE, WINDOW_S).weights == first.weights and len(calls) == 1
    v0 = SVC.variants[0]
    smaller = SVC.model_copy(update={"variants": [v0.model_copy(update={"kv_cache_tokens": v0.kv_cache_tokens // 4}),
                                                  *SVC.variants[1:]]})
    strict = SVC.model_copy(update={"slo": {**SVC.slo, "interactive": SVC.slo["interactive"].model_copy(
        update={"itl_s": SVC.slo["interactive"].itl_s / 2})}})
    MixTracker(smaller, ENGINE, WINDOW_S)
    MixTracker(strict, ENGINE, WINDOW_S)
    assert len(calls) == 3
    moved = MixTracker(SVC, ENGINE, WINDOW_S)
    t = SVC.typical_request
    assert settle(moved, served(5.0, t.input_tokens * 4, t.output_tokens)) == expected(t.input_tokens * 4,
                                                                                       t.output_tokens,
                                                                                       moved.basis[2])
    assert len(calls) == 4  # the served mix moved: derived
