"""A real Prometheus scrapes the simulator's pods labelled as NVIDIA Dynamo labels them
(``prometheus.role_labels: dynamo``: ``dynamo_component="prefill"`` on a prefill worker, ``"backend"`` on
a decode or aggregated worker, with ``dynamo_namespace`` and ``dynamo_endpoint``; ai-dynamo/dynamo
``lib/runtime/src/metrics/prometheus_names.rs`` and ``components/src/dynamo/vllm/args.py``, cited in
``autoscaler.promql.ROLE_LABELLINGS``), and the Prometheus source reads each pool apart: every pool's
gauges equal the sums and means worked out from the simulated replicas themselves, per role, and the
aggregated replica (also ``backend``) is kept out of the decode pool. Read with llm-d's labelling
instead, the same scrape has no pool pods at all."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from autoscaler.adapters.prometheus import connect
from autoscaler.config.loading import parse_config
from autoscaler.faults.promserver import PromServer, Target
from autoscaler.loop.export import serve
from autoscaler.promql import ROLE_LABELLINGS
from autoscaler.simulator.engine import DRAINING, READY
from autoscaler.simulator.exposition import SimCollector
from autoscaler.simulator.fleet import FleetSimulator
from autoscaler.wiring import build_source
from autoscaler.workload.types import Request, Workload

SLO = {"interactive": {"ttft_s": 2.0, "itl_s": 0.1}, "batch": {"ttft_s": 20.0, "itl_s": 0.25}}


def _variant(name: str, replicas: int) -> dict[str, Any]:
    return {"name": name, "gpu": "H100-SXM", "price_per_gpu_hour": 2.0, "min_replicas": replicas,
            "max_replicas": replicas, "initial_replicas": replicas, "kv_cache_tokens": 400_000,
            "profile": "llama-3-8b/h100-sxm"}


def _doc(role_labels: str) -> dict[str, Any]:
    """Service ``svc``: one aggregated replica ``agg``, two prefill ``p``, two decode ``d``."""
    svc = {"name": "svc", "model": "m", "slo": SLO, "variants": [_variant("agg", 1)],
           "roles": {"prefill": [_variant("p", 2)], "decode": [_variant("d", 2)], "non_cached_tokens": 2048}}
    return {"services": [svc], "controller": {"tick_s": 1, "window_s": 3},
            "prometheus": {"role_labels": role_labels}}


@pytest.mark.slow
def test_pods_labelled_the_dynamo_way_are_read_as_each_pool_apart(tmp_path: Path) -> None:
    cfg = parse_config(_doc("dynamo"), "<dynamo>")
    # 24 long prompts (3000-5000 tokens: each prefilled remotely) from t = 0; at 0.5 s every replica is
    # busy, each pool with its own counts (frozen there: the scrape sees the same numbers each time)
    reqs = [Request(arrival_s=0.01 * i, input_tokens=3000 + 500 * (i % 5), output_tokens=400) for i in range(24)]
    sim = FleetSimulator(cfg, Workload(reqs))
    sim.run_until(0.5)
    by_role: dict[str, list[tuple[float, float, float]]] = {"": [], "prefill": [], "decode": []}
    for r in sim.services["svc"].replicas:
        assert r.state in (READY, DRAINING)
        r.refresh_gauges()
        by_role[r.role].append((r.metrics.running, r.metrics.waiting, r.metrics.kv_usage))
    assert [len(by_role[k]) for k in ("", "prefill", "decode")] == [1, 2, 2]
    want = {role: (sum(x[0] for x in rows), sum(x[1] for x in rows), sum(x[2] for x in rows) / len(rows))
            for role, rows in by_role.items()}
    # the pools differ, so reading one for the other (or the aggregated pod in the decode pool) shows
    assert len({w[:2] for w in want.values()}) == 3 and want["prefill"][0] > 0 and want["decode"][0] > 0

    registry = CollectorRegistry()
    lock = threading.Lock()
    registry.register(SimCollector(sim, lock, role_labels=ROLE_LABELLINGS["dynamo"]))
    server = serve(registry, "127.0.0.1:0")
    prom = PromServer(tmp_path / "prom", [Target(f"127.0.0.1:{server.port}")])
    try:
        prom.start()
        prom.wait_for("count(up == 1)", lambda r: bool(r) and r[0]["value"][1] == "1")
        prom.wait_for("min(count_over_time(up[3s])) >= 2", bool)  # two scrapes in the window, however loaded
        # what Prometheus stores: Dynamo's three labels on the vLLM gauges
        series = prom.wait_for('vllm:num_requests_running{dynamo_namespace="dynamo",dynamo_endpoint="generate"}',
                               lambda r: len(r) == 5)
        obs = build_source(cfg, connect(cfg.prometheus, prom.url)).observe(0.0)["svc"]
        llm_d = parse_config(_doc("llm-d"), "<llm-d>")
        other = build_source(llm_d, connect(llm_d.prometheus, prom.url)).observe(0.0)["svc"]
    finally:
        prom.stop()
        server.close()
    components = sorted((s["metric"]["variant"], s["metric"]["dynamo_component"]) for s in series)
    assert components == [("agg", "backend"), ("d", "backend"), ("d", "backend"), ("p", "prefill"), ("p", "prefill")]
    assert obs.errors == []
    assert (obs.variants["agg"].ready, obs.pools["prefill"].variants["p"].ready,
            obs.pools["decode"].variants["d"].ready) == (1, 2, 2)
    for role in ("prefill", "decode"):
        sig = obs.pools[role].signals
        running, waiting, kv = want[role]
        assert (sig.running, sig.queue_length) == (running, waiting), role
        assert sig.kv_usage == pytest.approx(kv, rel=1e-9), role
    agg = obs.variants["agg"].signals
    assert (agg.running, agg.queue_length) == want[""][:2]
    assert obs.signals.running == sum(w[0] for w in want.values())  # the gauges read every pod
    # llm-d's labelling finds no pod labelled llm_d_ai_role on the same scrape: no pool is read
    assert other.pools["prefill"].signals.running is None and other.pools["decode"].signals.running is None
    assert other.pools["decode"].variants["d"].ready == 2  # (kube-state-metrics still counts the Deployment)
