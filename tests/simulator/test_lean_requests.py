"""``FleetSimulator(keep_requests=False)`` (issue 33, memory): each attempt's ``SimRequest`` is made when
it is sent and dropped when its request ends, and what the results read is kept in arrays. The reference
is the same run keeping every ``SimRequest``: the results and the per-request outcomes must be the same
bits, in a run where requests complete, are rejected, time out, are retried, shed and crash."""

from __future__ import annotations

import gc
import math

import numpy as np
import pytest
from support.overload import overloaded_run, same_outcomes

from autoscaler.report import summarize
from autoscaler.simulate import SimulationRun
from autoscaler.simulator.engine import COMPLETED, FAILED, REJECTED, SHED, SimRequest
from autoscaler.simulator.fleet import FleetSimulator
from autoscaler.workload.types import BATCH, INTERACTIVE, Request, Workload


def workload() -> Workload:
    """A minute of mixed traffic on one replica for ~1/3 of it: long prompts over ``max_model_len``
    (rejected), a backlog that times clients out (retried once), the gateway shedding the lowest
    priority when its estimated wait is over 0 (deferred ones too), one workflow of chained steps."""
    reqs = []
    for i in range(300):
        t = i * 0.2
        prio = i % 3
        reqs.append(Request(arrival_s=t, input_tokens=9000 if i % 37 == 5 else 200 + 10 * (i % 50),
                            output_tokens=1 if i % 41 == 0 else 50 + 7 * (i % 90),
                            request_class=BATCH if prio == 0 else INTERACTIVE, priority=prio,
                            workflow_id=1 if i % 25 == 0 else None))
    return Workload(reqs, source="test:lean")


def simulate(make_fleet, keep: bool, t_end: float = 10_000.0) -> FleetSimulator:
    """One replica, overloaded (``overloaded_run``), on this module's workload."""
    return overloaded_run(make_fleet, workload(), keep=keep, t_end=t_end)


def test_lean_run_has_the_same_outcomes_and_results(make_fleet) -> None:
    kept, lean = simulate(make_fleet, True), simulate(make_fleet, False)
    assert kept.done and lean.done
    status = [sr.status for sr in kept.final]
    # the run exercises every way a request can end, and retries (else the comparison proves little)
    assert {COMPLETED, REJECTED, FAILED, SHED} <= set(status) and kept.retries > 0
    assert kept.crash_log[0]["applied"] and kept.crash_log[0]["failed_requests"] > 0
    same_outcomes(kept, lean)
    # the kept run's arrays are its SimRequests' fields
    s, first, end = kept.outcome_arrays()
    assert list(s) == status
    assert [None if math.isnan(x) else x for x in first] == [sr.t_first for sr in kept.final]
    assert [None if math.isnan(x) else x for x in end] == [sr.t_finish for sr in kept.final]
    ra = summarize(SimulationRun(kept, [], "hand", 100.0, 1.0))
    rb = summarize(SimulationRun(lean, [], "hand", 100.0, 1.0))
    assert ra == rb
    assert kept.last_end_s() == lean.last_end_s() == max(sr.t_finish for sr in kept.final)


def test_lean_run_keeps_no_request_objects(make_fleet) -> None:
    lean = simulate(make_fleet, False)
    assert not lean._live and lean.open_requests == 0
    mine = {id(r) for r in lean.workload.requests}
    gc.collect()
    alive = [o for o in gc.get_objects() if isinstance(o, SimRequest) and id(o.req) in mine]
    assert alive == []
    with pytest.raises(AttributeError, match=r"keep_requests=False.*outcome_arrays"):
        _ = lean.requests
    with pytest.raises(AttributeError, match=r"keep_requests=False.*outcome_arrays"):
        _ = lean.final


def test_fail_open_mid_run_fails_sent_and_unsent_requests_alike(make_fleet) -> None:
    # stopped at 12 s: the requests sent and still open fail then, and so do those never sent
    kept, lean = simulate(make_fleet, True, t_end=12.0), simulate(make_fleet, False, t_end=12.0)
    assert kept.fail_open() == lean.fail_open() > 0
    same_outcomes(kept, lean)
    s, _, end = lean.outcome_arrays()
    unsent = [r.rid for r in lean.workload.requests if r.arrival_s > 12.0]
    assert unsent and all(s[i] == FAILED and end[i] == 12.0 for i in unsent)
    assert np.isnan(lean.outcome_arrays()[1][unsent]).all()
