"""A service of prefill/decode pools scaled by the PID through the loop on the emulated API server: each
pool's variant is its own Deployment (``<service>-<variant>``, or its ``kubernetes.workloads`` entry), so
one tick writes two scale targets through the scale subresource."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from autoscaler.adapters.kubernetes import KubernetesActuator
from autoscaler.config.loading import parse_config
from autoscaler.errors import ConfigError
from autoscaler.faults.kubeapi import deployment, emulated_cluster
from autoscaler.loop.runner import ControlLoop
from autoscaler.state import PoolObservation, ServiceObservation, Signals, VariantObservation
from controllers.registry import build

NS = "llm"
SLO = {"interactive": {"ttft_s": 2.0, "itl_s": 0.1}, "batch": {"ttft_s": 20.0, "itl_s": 0.25}}


def _variant(name: str) -> dict[str, Any]:
    return {"name": name, "gpu": "H100-SXM", "price_per_gpu_hour": 2.0, "min_replicas": 1, "max_replicas": 4,
            "initial_replicas": 1, "kv_cache_tokens": 400_000, "profile": "llama-3-8b/h100-sxm"}


class _Source:
    """Both pools at one replica, each error at the PID's clip (prefill TTFT 4 s of 2 s, decode ITL 0.2 s
    of 0.1 s): each loop asks for ceil(1 + 0.2 x 3 + 0.005 x 3 x 15) = 2 replicas (tests/unit/test_pid_roles.py)."""

    def observe(self, now: float) -> dict[str, ServiceObservation]:
        def pool(role: str, name: str, **sig: float) -> PoolObservation:
            return PoolObservation(role, Signals(**sig), {name: VariantObservation(1, 0)})

        return {"pd": ServiceObservation("pd", now, Signals(running=4.0, queue_length=3.0), {}, history_s=now, pools={
            "prefill": pool("prefill", "pre", ttft_mean_s=4.0), "decode": pool("decode", "dec", tpot_mean_s=0.2)})}


def test_each_pool_is_written_to_its_own_deployment() -> None:
    cfg = parse_config({"services": [{"name": "pd", "model": "m", "slo": SLO, "variants": [],
                                      "roles": {"prefill": [_variant("pre")], "decode": [_variant("dec")]}}],
                        "controller": {"tick_s": 15, "window_s": 60},
                        "kubernetes": {"namespace": NS, "workloads": {"pd": {"dec": {"name": "decode-pool"}}}}},
                       "<pd>")
    with emulated_cluster() as c:
        apps = client.AppsV1Api(c.api())
        apps.create_namespaced_deployment(NS, deployment("pd-pre", NS, 1))
        apps.create_namespaced_deployment(NS, deployment("decode-pool", NS, 1))
        loop = ControlLoop(cfg, _Source(), KubernetesActuator(cfg.kubernetes, cfg.services, c.api()), build("pid", cfg))
        loop.start(0.0)
        st = loop.tick(75.0).services["pd"]
        puts = sorted(w[:5] for w in c.emu.writes if w[1] == "deployments/scale")
        got = {name: int(apps.read_namespaced_deployment(name, NS).spec.replicas) for name in ("pd-pre", "decode-pool")}
    assert puts == [("PUT", "deployments/scale", NS, "decode-pool", 2), ("PUT", "deployments/scale", NS, "pd-pre", 2)]
    assert got == {"pd-pre": 2, "decode-pool": 2}
    assert all(res.ok and res.changed for res in st.actuation.values()) and set(st.actuation) == {"pre", "dec"}


def test_two_pool_variants_may_not_share_a_workload() -> None:
    with pytest.raises(ConfigError, match=r"roles.prefill\[pre\] and .*roles.decode\[dec\] both scale Deployment 'x'"):
        parse_config({"services": [{"name": "pd", "model": "m", "slo": SLO, "variants": [],
                                    "roles": {"prefill": [_variant("pre")], "decode": [_variant("dec")]}}],
                      "kubernetes": {"workloads": {"pd": {"pre": {"name": "x"}, "dec": {"name": "x"}}}}}, "<pd>")

