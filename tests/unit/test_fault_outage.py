"""The simulator layer's ``prometheus_down`` (autoscaler.faults.inject.FaultySource): a Prometheus that
is down scrapes nothing, so its samples have a gap, as the suite's scenario file promises ("every
query fails, nothing is scraped", docs/faults.md) and as a stopped Prometheus leaves one live."""

from __future__ import annotations

from support.paths import DATA_DIR

from autoscaler.adapters.simulator import SimMetricsSource
from autoscaler.faults.inject import FaultySource, Injector
from autoscaler.faults.scenario import scenario_fleet, scenario_workload
from autoscaler.faults.suite import load_suite, suite_dir
from autoscaler.simulate import SimulationDriver
from controllers.registry import build


def test_a_prometheus_that_is_down_takes_no_sample_and_leaves_a_gap() -> None:
    # prometheus-outage: down 900-1500 s, 15-s ticks and scrapes, the PID's 300-s window. Each tick
    # observes (as the loop does; an observation scrapes a source a scrape interval stale). Inside the
    # outage no sample is taken; the first observation after it (1500 s) holds one sample in its
    # window, the first since 885 s, so no rate (Prometheus's rate() needs two), never a full window's.
    sc = load_suite(suite_dir(), ["prometheus-outage"])[0]
    cfg = scenario_fleet(sc)
    driver = SimulationDriver(cfg, scenario_workload(sc, DATA_DIR), build("pid", cfg))
    Injector(sc, driver)
    source = driver.source
    assert isinstance(source, FaultySource) and isinstance(source.inner, SimMetricsSource)
    inner, sim, name = source.inner, driver.sim, driver.sim.target
    seen: list[float] = []
    for k in range(1, 101):  # to 1500 s
        now = 15.0 * k
        sim.run_until(now)
        obs = source.observe(now)[name]
        seen.extend(t for t in inner._arrivals[name].times if t not in seen)
        if 900.0 <= now < 1500.0:
            assert obs.errors and obs.signals.request_rate_rps is None
    assert [t for t in seen if 885.0 < t < 1500.0] == []
    assert max(t for t in seen if t < 1500.0) == 885.0 and seen[-1] == 1500.0
    assert obs.errors == [] and obs.signals.request_rate_rps is None  # one sample in the window: no rate
