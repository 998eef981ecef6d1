"""The finished requests' mix read through a real Prometheus (issue 28): the simulator exports vLLM's
per-request length histograms, ``vllm:request_prompt_tokens`` and ``vllm:request_generation_tokens``
(vLLM 0.33.0 ``vllm/v1/metrics/loggers.py`` observes them with the e2e latency of each finished request;
``shared/data/vllm-metrics/vllm_metrics_v0.33.0.csv``), and the live query set reads their ``_sum``'s rate
over the same requests ``request_rate_rps`` counts, so a starved fleet reads the prompts it finished."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from support.promserver import backfill
from support.starved import LONGEST, PROMPT, starved

from autoscaler.adapters.prometheus import LiveRunner, PrometheusSource, connect
from autoscaler.faults.promserver import PromServer
from autoscaler.loop.forecast import served_mix
from autoscaler.simulator.exposition import OpenMetricsHistory, SimCollector
from autoscaler.simulator.fleet import FleetSimulator


def test_a_starved_fleet_read_through_prometheus_finishes_1000_token_prompts(tmp_path: Path, make_fleet) -> None:
    cfg = make_fleet(1, max_model_len=LONGEST, controller={"window_s": 60})
    sim = FleetSimulator(cfg, starved())
    history = OpenMetricsHistory(SimCollector(sim))
    base = int(time.time()) - 3600  # within the default retention, far from the live head
    for t in range(0, 50, 5):
        sim.run_until(float(t))
        history.record(base + t)
    history.write(tmp_path / "h.om")
    backfill(tmp_path / "h.om", tmp_path / "tsdb")
    prom = PromServer(tmp_path / "prom", tsdb=tmp_path / "tsdb").start()
    try:
        src = PrometheusSource(cfg.prometheus, cfg.services, LiveRunner(connect(cfg.prometheus, prom.url)),
                               window_s=60.0, clock=lambda _: base + 45.0)
        obs = src.observe(0.0)["svc"]
    finally:
        prom.stop()
    sig = obs.signals
    assert obs.errors == []
    assert sig.request_rate_rps is not None and sig.request_rate_rps > 0
    assert sig.prompt_tokens_rps / sig.request_rate_rps > LONGEST  # prefills over completions: impossible
    mean_in, mean_out = served_mix(sig, LONGEST)
    assert mean_in == pytest.approx(PROMPT, rel=1e-6)  # every prompt is 1000 tokens
    assert mean_out == pytest.approx(2.0, rel=1e-6)  # only the 2-token requests finished
