"""The least-outstanding router's heap (``FleetSimulator._least_outstanding_by_heap``, issue 33) must pick
the replica ``router.least_outstanding`` picks by scanning the routable replicas (the lowest outstanding
count per unit of weight, the earliest ready on a tie), at every request of a run where replicas are
added, drained, cordoned, uncordoned and crash."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.paths import ROOT

from autoscaler.config.loading import load_config
from autoscaler.config.simulator import Crash
from autoscaler.simulate import run_simulation
from autoscaler.simulator.engine import Replica
from autoscaler.simulator.fleet import FleetSimulator
from autoscaler.simulator.router import least_outstanding
from autoscaler.workload.build import build_workload

TRACE = Path("azure-llm-2023") / "AzureLLMInferenceTrace_conv.csv"


def test_heap_router_picks_what_the_scan_picks(monkeypatch: pytest.MonkeyPatch, data_dir: Path) -> None:
    original = FleetSimulator._route
    cordon_setter = Replica.cordoned.fset
    seen = {"routes": 0, "cordons": 0, "uncordons": 0}

    def checked(self: FleetSimulator, svc, sr) -> None:  # type: ignore[no-untyped-def]
        want = least_outstanding(self._routable(svc), svc.weights)
        original(self, svc, sr)
        assert sr.replica is want, f"request {sr.req.rid}: heap chose {sr.replica.name}, scan {want.name}"
        seen["routes"] += 1

    def counted(self: Replica, value: bool) -> None:
        seen["cordons" if value else "uncordons"] += value != self.cordoned
        cordon_setter(self, value)

    monkeypatch.setattr(FleetSimulator, "_route", checked)
    monkeypatch.setattr(Replica, "cordoned", property(Replica.cordoned.fget, counted))
    cfg = load_config(ROOT / "examples" / "fleet.yaml")
    cfg.simulator.crashes = [Crash(time_s=t, variant=v.name) for t in (600.0, 1500.0) for v in cfg.services[0].variants]
    wl = build_workload(data_dir / TRACE, None, 3.0, 1.0, 0, 0.2)
    run = run_simulation(cfg, wl, "pid", keep_requests=False)
    assert seen["routes"] == len(wl.requests)
    # the run moves the routable set every way: replicas added and drained, cordoned and crashed
    assert run.sim.scale_events > 0 and seen["cordons"] > 0
    assert sum(c["applied"] for c in run.sim.crash_outcomes()) >= 2  # of the variants that have ready replicas
