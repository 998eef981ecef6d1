"""``prometheus.query_set: auto`` against a simulated fleet exporting each vLLM release range's names
(``SimCollector(release=...)``), scraped by a real Prometheus: the source reads each with its own set
and finds the KV usage and TPOT its names carry (issue 30, item 5)."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
import yaml
from support.fleets import FLEET_DOC, ramp
from typer.testing import CliRunner

from autoscaler.adapters.prometheus import connect
from autoscaler.cli import app
from autoscaler.config.loading import parse_config
from autoscaler.faults.promserver import PromServer, Target
from autoscaler.loop.export import serve
from autoscaler.realtime import LiveSimulation
from autoscaler.wiring import build_source


@pytest.mark.parametrize(("release", "detected"), [
    ("0.11", "vllm-0.11"), ("0.9.2", "vllm-0.9.2"), ("pre-0.9.2", "vllm-pre-0.9.2")])
def test_a_served_fleet_of_each_release_is_read_with_its_own_query_set(tmp_path: Path, release: str,
                                                                        detected: str) -> None:
    cfg = parse_config(FLEET_DOC, "<test>")
    live = LiveSimulation(cfg, ramp(), steady_start=False, vllm_release=release)
    stop = threading.Event()
    live.run(on_step=lambda t: stop.set() if t >= 240 else None, stop=stop)  # mid-ramp: replicas serving
    server = serve(live.registry, "127.0.0.1:0")
    # 1-s scrapes (timeout = interval): at 250 ms a scrape of the whole registry could time out on
    # busy cores, and a failed scrape marks every series stale, so the instant queries came back empty
    prom = PromServer(tmp_path / "prom", [Target(f"127.0.0.1:{server.port}")], scrape_interval="1s")
    try:
        prom.start()
        prom.wait_for("count_over_time(up[1m]) >= 3 and up == 1", bool, timeout_s=30.0)  # a few good scrapes
        src = build_source(cfg, connect(cfg.prometheus, prom.url))
        obs = src.observe(0.0)["llm"]
        # ``autoscaler dry-run`` on the same fleet file picks it by itself and says which
        fleet = tmp_path / "fleet.yaml"
        fleet.write_text(yaml.safe_dump(FLEET_DOC))
        res = CliRunner().invoke(app, ["dry-run", "--prometheus-url", prom.url, "--config", str(fleet), "--once",
                                       "--output", "json"])
    finally:
        prom.stop()
        server.close()
    assert cfg.prometheus.query_set == "auto"
    assert src.query_set(cfg.services[0]).name == detected
    assert obs.errors == [] and obs.signals.kv_usage is not None and obs.signals.running is not None
    assert sum(v.ready for v in obs.variants.values()) >= 1
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout.strip().splitlines()[-1])["services"]["llm"]["query_set"] == detected
