"""The mix per request the forecast is fed (``autoscaler.loop.forecast.served_mix``, issue 28): the
finished requests' lengths over the finished requests, so a starved fleet (many prompts prefilled, few
requests finished) reads the mix it finishes, not prompt tokens counted at prefill over requests counted
at completion (C2 on servegen-day seed 0 read 44k-1.4M tokens a request, no prompt there over 126k)."""

from __future__ import annotations

import pytest
from support.starved import LONGEST, PROMPT, starved

from autoscaler.adapters.simulator import SimMetricsSource
from autoscaler.config import ForecastConfig
from autoscaler.loop.forecast import ForecastStage, served_mix
from autoscaler.simulator.fleet import FleetSimulator
from autoscaler.state import ServiceEstimate, Signals


def test_a_starved_fleet_reads_the_prompts_it_finished(make_fleet) -> None:
    # At 45 s the replica has prefilled the 80 long prompts and the short ones, and finished only the short
    # ones (2-token outputs). Prompt tokens at prefill over completions read a mean above max_model_len,
    # which no accepted request can have (the old reading); the finished requests' prompt tokens over
    # them read 1000 (every prompt is 1000 tokens) and their outputs 2 (only the short ones finished).
    sim = FleetSimulator(make_fleet(1, max_model_len=LONGEST), starved())
    src = SimMetricsSource(sim, 60.0)
    for t in (0.0, 15.0, 30.0, 45.0):
        sim.run_until(t)
        sig = src.observe(t)["svc"].signals
    assert sig.running == 80 and sig.queue_length == 0  # the long ones all run: starved, not queued
    assert sig.request_rate_rps is not None and sig.request_rate_rps > 0
    assert sig.prompt_tokens_rps / sig.request_rate_rps > LONGEST  # the old, impossible mix
    assert sig.generation_tokens_rps / sig.request_rate_rps > LONGEST
    mean_in, mean_out = served_mix(sig, LONGEST)
    assert mean_in == pytest.approx(PROMPT, rel=1e-9)
    assert mean_out == pytest.approx(2.0, rel=1e-9)


def _tick(stage: ForecastStage, t: float, sig: Signals) -> Signals:
    est = ServiceEstimate("svc", t, sig, {}, {}, False, 0.0, 0.0, 0, history_s=600.0)
    out = stage.apply(est, window_s=300.0).signals
    assert out.forecast is not None
    return out


def test_the_forecast_is_fed_the_finished_requests_mix() -> None:
    # A starved tick: 0.5 req/s finish, holding 6,000 prompt and 100 output tokens/s (12,000 and 200 a
    # request), while 60,000 prompt tokens/s are prefilled and 20,000 output tokens/s generated for the
    # requests still running. The forecast's mix is 12,000 / 200 (the old one: 120,000 / 40,000).
    stage = ForecastStage(ForecastConfig(enabled=True, step_s=60, horizon_s=120), longest=131072)
    sig = Signals(request_rate_rps=0.5, prompt_tokens_rps=60_000.0, generation_tokens_rps=20_000.0,
                  request_prompt_tokens_rps=6_000.0, request_generation_tokens_rps=100.0)
    for t in range(600, 1200, 15):
        out = _tick(stage, float(t), sig)
    assert out.forecast.input_tokens == pytest.approx(12_000.0)
    assert out.forecast.output_tokens == pytest.approx(200.0)


def test_without_the_histograms_a_mix_above_the_longest_request_is_unknown() -> None:
    # A source with no per-request histogram (SGLang's query set): the token counters over the
    # completions, read only within 1..max_model_len tokens; outside, unknown, never a plan input.
    assert served_mix(Signals(request_rate_rps=0.5, prompt_tokens_rps=60_000.0, generation_tokens_rps=100.0),
                      32768) == (None, 200.0)
    assert served_mix(Signals(request_rate_rps=0.5, prompt_tokens_rps=6_000.0, generation_tokens_rps=100.0),
                      32768) == (12_000.0, 200.0)
    # unknown is never zero: no completions, or no token rate, is no mix
    assert served_mix(Signals(request_rate_rps=0.0, request_prompt_tokens_rps=0.0), 32768) == (None, None)
    assert served_mix(Signals(request_rate_rps=0.5), 32768) == (None, None)
    # a histogram's mean is read before the counters' (the counters here would read 120,000)
    assert served_mix(Signals(request_rate_rps=0.5, prompt_tokens_rps=60_000.0, request_prompt_tokens_rps=6_000.0),
                      32768)[0] == 12_000.0


def test_a_forecast_fed_an_impossible_mix_holds_none() -> None:
    # Only counters, each tick's mean above the longest request: the forecaster is fed None, so it has
    # no mix (the plan keeps its own), where before it forecast 120,000 tokens a request.
    stage = ForecastStage(ForecastConfig(enabled=True, step_s=60, horizon_s=120), longest=32768)
    sig = Signals(request_rate_rps=0.5, prompt_tokens_rps=60_000.0, generation_tokens_rps=100.0)
    for t in range(600, 1200, 15):
        out = _tick(stage, float(t), sig)
    assert out.forecast.input_tokens is None
    assert out.forecast.output_tokens == pytest.approx(200.0)
