"""One overloaded replica run two ways (whole or lean requests, whole or streamed workload) and the
check that both runs gave the same outcomes, for the simulator's equivalence tests."""

from __future__ import annotations

from typing import Any

from autoscaler.simulator.fleet import FleetSimulator


def overloaded_run(make_fleet: Any, workload: Any, keep: bool = False, t_end: float = 10_000.0) -> FleetSimulator:
    """One replica, overloaded: clients time out (8 s) and retry once, the gateway sheds sheddable
    requests past a queue of 4, the replica crashes at 20 s, and prompts over ``max_model_len`` (8192)
    are rejected; run to ``t_end`` s. ``make_fleet`` is the tests' fleet fixture."""
    cfg = make_fleet(1, max_model_len=8192, client_timeout_s=8.0, startup_s=5.0,
                     crashes=[{"time_s": 20.0, "variant": "h100"}],
                     simulator={"clients": {"max_retries": 1, "backoff_base_s": 0.5},
                                "gateway": {"queue_depth_threshold": 4}})
    cfg.engine.max_num_seqs = 4
    sim = FleetSimulator(cfg, workload, admission=True, keep_requests=keep)
    flow = sim.services["svc"].flow
    assert flow is not None
    flow.set_thresholds({"sheddable": 0.0})
    sim.run_until(t_end)
    return sim


def same_outcomes(a: FleetSimulator, b: FleetSimulator) -> None:
    """Both runs' per-request outcomes (status, first-token and end times) are the same, bit for bit."""
    (sa, fa, ea), (sb, fb, eb) = a.outcome_arrays(), b.outcome_arrays()
    assert list(sa) == list(sb)
    assert fa.tobytes() == fb.tobytes() and ea.tobytes() == eb.tobytes()
