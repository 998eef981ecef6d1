"""Every query of the dashboard bundle against a real Prometheus (Debian ``prometheus``): the bundle's
rules loaded, scraping three running simulations (the PID with the forecast stages and admission by
PID; the MPC; the PID on prefill/decode pools, scaling both), each with its loop's own
metrics. Each panel and annotation query (template variables
substituted), each template variable's label, each recording rule and each part of an alert's ``signals`` must
return data over the run; each alert's expression must parse. The ``recorded`` query set must read
what the raw one reads."""

from __future__ import annotations

import copy
import math
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.fleets import FLEET_DOC, ramp

from autoscaler.config import FleetConfig
from autoscaler.config.loading import parse_config
from autoscaler.dashboards.bundle import Bundle, render, write
from autoscaler.faults.promserver import PromServer, Target
from autoscaler.loop.export import serve
from autoscaler.promql import QUERY_SETS, recorded_name
from autoscaler.promql import render as render_query
from autoscaler.realtime import LiveSimulation
from autoscaler.workload.classes import assign_classes

pytestmark = pytest.mark.slow  # whole module: its fixtures run scaled real-time fleets or the fault suite

SPEED = 20.0
SCRAPE = "250ms"
VARIABLES = {"$namespace": ".*", "$service": ".*", "$model": ".*", "$variant": ".*", "$__rate_interval": "30s"}


@dataclass
class Live:
    cfg: FleetConfig
    bundle: Bundle
    prom: PromServer
    start: float
    end: float


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    work = tmp_path_factory.mktemp("dashboards")
    doc = copy.deepcopy(FLEET_DOC)
    doc["controller"]["forecast"] = {"enabled": True, "horizon_s": 60, "step_s": 15}
    cfg = parse_config(doc, "<test>")
    bundle = render(cfg)
    write(bundle, work / "bundle")
    workload = assign_classes(ramp(), 0.2, 0)
    pool = {"gpu": "H100-SXM", "price_per_gpu_hour": 2.0, "min_replicas": 1, "max_replicas": 8,
            "kv_cache_tokens": 400_000, "profile": "llama-3-8b/h100-sxm"}
    pd = parse_config({"services": [{"name": "pd", "model": "m-pd", "slo": doc["services"][0]["slo"], "variants": [],
                                     "roles": {"prefill": [{**pool, "name": "pre", "initial_replicas": 2}],
                                               "decode": [{**pool, "name": "dec", "initial_replicas": 3}]}}],
                       "controller": doc["controller"]}, "<pd>")
    sims = [LiveSimulation(cfg, workload, "pid", steady_start=False, admission="pid"),
            LiveSimulation(cfg, workload, "mpc", steady_start=False),
            LiveSimulation(pd, workload, "pid", steady_start=False)]
    servers = [serve(s.registry, "127.0.0.1:0") for s in sims]
    prom = PromServer(work / "prom", [Target(f"127.0.0.1:{s.port}") for s in servers], scrape_interval=SCRAPE,
                      rule_files=sorted((work / "bundle" / "rules").glob("*.yaml")))
    stop = threading.Event()
    threads = [threading.Thread(target=s.run, kwargs={"speed": SPEED, "stop": stop}) for s in sims]
    try:
        prom.start()
        prom.wait_for("count(up == 1)", lambda r: bool(r) and r[0]["value"][1] == str(len(servers)))
        start = time.time()
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        time.sleep(1.0)  # a last scrape and rule evaluation
        yield Live(cfg, bundle, prom, start, time.time())
    finally:
        stop.set()
        prom.stop()
        for s in servers:
            s.close()


def substitute(expr: str) -> str:
    """A panel's PromQL with the dashboards' variables set to All (and the rate interval to 30 s)."""
    for var, value in VARIABLES.items():
        expr = expr.replace(var, value)
    assert "$" not in expr, expr
    return expr


def has_data(live: Live, promql: str) -> bool:
    result = live.prom.query_range(promql, live.start, live.end, 1.0)
    return any(not math.isnan(float(v)) for series in result for _, v in series["values"])


def test_every_panel_and_annotation_query_returns_data(live: Live) -> None:
    queries = live.bundle.panel_queries
    assert len(queries) >= 35 and {uid for uid, _, _ in queries} == {
        "autoscaler-overview", "autoscaler-kv-cache", "autoscaler-loop-health", "autoscaler-roles"}
    empty = [f"{uid} / {title}: {expr}" for uid, title, expr in queries if not has_data(live, substitute(expr))]
    assert not empty, "panels with no data:\n" + "\n".join(empty)


def test_every_template_variable_has_values(live: Live) -> None:
    for uid, query in live.bundle.variable_queries:
        m = re.fullmatch(r"label_values\((.+), (\w+)\)", query)
        assert m, f"{uid}: {query}"
        selector, label = m.groups()
        result = live.prom.query(f"count by ({label}) ({substitute(selector)})")
        assert [r["metric"].get(label) for r in result if r["metric"].get(label)], f"{uid}: {query}"


def test_every_recording_rule_is_evaluated(live: Live) -> None:
    assert len(live.bundle.recording) == 19 + 2 * 4  # the rated series; TTFT and ITL ratios over 4 windows
    empty = [r["record"] for r in live.bundle.recording if not has_data(live, r["record"])]
    # The simulator exports what a current EPP does: not GIE v1.0's inference_model_request_total.
    assert empty == [recorded_name("inference_model_request_total")], f"recording rules with no data: {empty}"


def test_every_alert_parses_and_its_signal_returns_data(live: Live) -> None:
    assert len(live.bundle.alerts) == 13
    for alert in live.bundle.alerts:
        live.prom.query_range(alert.expr, live.start, live.end, 1.0)  # parses (AssertionError otherwise)
        for signal in alert.signals:
            assert has_data(live, signal), f"{alert.name}: {signal}"
    loaded = {r["name"] for g in live.prom.query_rules() for r in g["rules"]}
    assert {a.name for a in live.bundle.alerts} <= loaded


def test_the_recorded_query_set_reads_what_the_raw_one_reads(live: Live) -> None:
    raw, recorded = QUERY_SETS["vllm-0.11"], QUERY_SETS["recorded"]
    sel = 'model_name="m"'
    at = live.end
    compared = 0
    for signal, template in raw.signals.items():
        a = live.prom.query(render_query(template, sel, 300.0), at)
        b = live.prom.query(render_query(recorded.signals[signal], sel, 300.0), at)
        assert bool(a) == bool(b), signal
        if a and not math.isnan(float(a[0]["value"][1])):
            # the rule was evaluated up to one evaluation interval before ``at``
            assert float(b[0]["value"][1]) == pytest.approx(float(a[0]["value"][1]), rel=0.05, abs=1e-6), signal
            compared += 1
    assert compared >= 12


def test_the_bundle_files_are_the_exported_layout(live: Live, tmp_path: Path) -> None:
    paths = write(live.bundle, tmp_path)
    assert sorted(str(p.relative_to(tmp_path)) for p in paths) == [
        "dashboards/autoscaler-kv-cache.json", "dashboards/autoscaler-loop-health.json",
        "dashboards/autoscaler-overview.json", "dashboards/autoscaler-roles.json",
        "kubernetes/dashboards-configmap.yaml", "kubernetes/prometheusrule.yaml",
        "provisioning/dashboards/autoscaler.yaml", "provisioning/datasources/autoscaler.yaml",
        "rules/autoscaler-alerts.yaml", "rules/autoscaler-recording.yaml"]
