"""A variant whose Deployment name is another's plus ``-...`` (``examples/fleet-mixed-pd.yaml``'s ``h100``
beside ``h100-prefill`` and ``h100-decode``) matches the other's pod names by its default pattern
(``<service>-<variant>-.*``): the Prometheus source must still read each variant's own pods only. Under
llm-d's labelling the aggregated ``h100`` read every pool pod as its own; under Dynamo's, where decode and
aggregated pods are both ``dynamo_component="backend"``, a decode variant ``h100`` read an aggregated
``h100-pd``'s pods too. A real Prometheus scrapes a frozen simulated fleet and each variant's and pool's
gauges must equal the sums worked out from its own simulated replicas."""

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
from autoscaler.simulator.exposition import SimCollector
from autoscaler.simulator.fleet import FleetSimulator
from autoscaler.wiring import build_source
from autoscaler.workload.types import Request, Workload

SLO = {"interactive": {"ttft_s": 2.0, "itl_s": 0.1}, "batch": {"ttft_s": 20.0, "itl_s": 0.25}}


def _variant(name: str, replicas: int) -> dict[str, Any]:
    return {"name": name, "gpu": "H100-SXM", "price_per_gpu_hour": 2.0, "min_replicas": replicas,
            "max_replicas": replicas, "initial_replicas": replicas, "kv_cache_tokens": 400_000,
            "profile": "llama-3-8b/h100-sxm"}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("labelling", "agg", "pre", "dec"),
    [
        ("llm-d", "h100", "h100-prefill", "h100-decode"),  # the shipped mixed fleet's names
        ("dynamo", "h100", "h100-prefill", "h100-decode"),
        ("dynamo", "h100-pd", "pre", "h100"),  # the decode variant's name is the aggregated one's prefix
    ],
)
def test_each_variant_reads_its_own_pods_when_one_name_prefixes_another(
    tmp_path: Path, labelling: str, agg: str, pre: str, dec: str
) -> None:
    svc = {"name": "svc", "model": "m", "slo": SLO, "variants": [_variant(agg, 1)],
           "roles": {"prefill": [_variant(pre, 2)], "decode": [_variant(dec, 2)], "non_cached_tokens": 2048}}
    cfg = parse_config({"services": [svc], "controller": {"tick_s": 1, "window_s": 3},
                        "prometheus": {"role_labels": labelling}}, "<prefixes>")
    # 24 long prompts (each prefilled remotely) and 6 short ones on the aggregated replica's share; at 0.5 s
    # every replica is busy and the counts are frozen there
    reqs = [Request(arrival_s=0.01 * i, input_tokens=3000 + 500 * (i % 5), output_tokens=400) for i in range(30)]
    sim = FleetSimulator(cfg, Workload(reqs))
    sim.run_until(0.5)
    own: dict[str, list[float]] = {agg: [], pre: [], dec: []}
    for r in sim.services["svc"].replicas:
        r.refresh_gauges()
        own[r.variant].append(r.metrics.running)
    assert [len(own[v]) for v in (agg, pre, dec)] == [1, 2, 2]
    want = {v: sum(x) for v, x in own.items()}
    assert all(w > 0 for w in want.values())  # every variant busy: a pod read twice shows

    registry = CollectorRegistry()
    registry.register(SimCollector(sim, threading.Lock(), role_labels=ROLE_LABELLINGS[labelling]))
    server = serve(registry, "127.0.0.1:0")
    prom = PromServer(tmp_path / "prom", [Target(f"127.0.0.1:{server.port}")])
    try:
        prom.start()
        prom.wait_for("count(up == 1)", lambda r: bool(r) and r[0]["value"][1] == "1")
        prom.wait_for("min(count_over_time(up[3s])) >= 2", bool)  # two scrapes in the window, however loaded
        prom.wait_for("vllm:num_requests_running", lambda r: len(r) == 5)
        obs = build_source(cfg, connect(cfg.prometheus, prom.url)).observe(0.0)["svc"]
    finally:
        prom.stop()
        server.close()
    assert obs.errors == []
    assert obs.variants[agg].signals.running == want[agg]
    assert obs.pools["prefill"].signals.running == want[pre]
    assert obs.pools["decode"].signals.running == want[dec]
    assert obs.pools["decode"].variants[dec].signals.running == want[dec]
    assert obs.signals.running == sum(want.values())
