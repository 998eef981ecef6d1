"""The simulator's metrics source reports how long each variant's longest-Pending replica has waited
for a node (``VariantObservation.unschedulable_s``), pool variants too; every figure by hand from the
order times and the unschedulable window."""

from __future__ import annotations

from typing import Any

from autoscaler.adapters.simulator import SimMetricsSource
from autoscaler.config.loading import parse_config
from autoscaler.simulator.fleet import FleetSimulator
from autoscaler.workload.types import Request, Workload

SLO = {"interactive": {"ttft_s": 2.0, "itl_s": 0.1}, "batch": {"ttft_s": 20.0, "itl_s": 0.25}}


def variant(name: str, gpu: str = "H100-SXM") -> dict[str, Any]:
    return {"name": name, "gpu": gpu, "price_per_gpu_hour": 2.0, "min_replicas": 0, "max_replicas": 8,
            "initial_replicas": 1, "kv_cache_tokens": 400_000, "profile": "llama-3-8b/h100-sxm"}


def fleet(roles: bool = False) -> FleetSimulator:
    """``h100`` (and with ``roles`` a decode pool ``d``) whose new pods cannot be placed from 100 to 400 s;
    ``a100`` always placed."""
    svc: dict[str, Any] = {"name": "svc", "model": "m", "slo": SLO, "variants": [variant("h100"), variant("a100")]}
    if roles:
        svc["roles"] = {"prefill": [variant("p")], "decode": [variant("d")], "non_cached_tokens": 2048}
    doc = {"services": [svc], "simulator": {"unschedulable": [
        {"variant": "h100", "start_s": 100.0, "end_s": 400.0},
        {"variant": "d", "start_s": 100.0, "end_s": 400.0}] if roles else [
        {"variant": "h100", "start_s": 100.0, "end_s": 400.0}]}}
    wl = Workload([Request(arrival_s=float(t), input_tokens=100, output_tokens=10) for t in range(0, 600, 5)])
    return FleetSimulator(parse_config(doc, "<pending>"), wl)


def ages(src: SimMetricsSource, sim: FleetSimulator, t: float) -> dict[str, float | None]:
    sim.run_until(t)
    obs = src.observe(t)["svc"]
    out = {v: o.unschedulable_s for v, o in obs.variants.items()}
    out.update({v: o.unschedulable_s for pool in obs.pools.values() for v, o in pool.variants.items()})
    return out


def test_the_longest_pending_replicas_wait_is_observed_and_drops_to_zero_once_placed() -> None:
    sim = fleet()
    src = SimMetricsSource(sim, 60.0)
    assert ages(src, sim, 50.0) == {"h100": 0.0, "a100": 0.0}  # nothing waits: 0, known
    sim.set_replicas("svc", "h100", 2)  # asked for at 50 s: placed at once, before the window
    sim.set_replicas("svc", "a100", 2)
    assert ages(src, sim, 120.0) == {"h100": 0.0, "a100": 0.0}  # the 50-s one is placed (loading)
    sim.set_replicas("svc", "h100", 3)  # asked for at 120 s: Pending until 400 s
    sim.set_replicas("svc", "a100", 3)  # a100 places at once
    assert ages(src, sim, 135.0) == {"h100": 15.0, "a100": 0.0}
    sim.set_replicas("svc", "h100", 4)  # a second one at 135 s: the longest is still the 120-s one
    assert ages(src, sim, 300.0) == {"h100": 180.0, "a100": 0.0}  # 300 - 120
    assert ages(src, sim, 399.0) == {"h100": 279.0, "a100": 0.0}
    assert ages(src, sim, 400.0) == {"h100": 0.0, "a100": 0.0}  # both placed at the window's end


def test_a_pool_variants_pending_wait_is_observed_too() -> None:
    sim = fleet(roles=True)
    src = SimMetricsSource(sim, 60.0)
    sim.run_until(110.0)
    sim.set_replicas("svc", "d", 2)  # asked for at 110 s, in d's window
    got = ages(src, sim, 200.0)
    assert got == {"h100": 0.0, "a100": 0.0, "p": 0.0, "d": 90.0}  # 200 - 110
