"""``report.outcome_columns`` and ``FleetSimulator.outcome_codes`` (issue 33, the results step's memory):
the results read status codes and the simulator's own columns in place, and give what a plain loop
over each request's status, times and SLO gives, and what ``request_outcomes`` gave before (names)."""

from __future__ import annotations

import math

import numpy as np
from support.overload import overloaded_run

from autoscaler.report import outcome_columns, request_outcomes, summarize
from autoscaler.simulate import SimulationRun
from autoscaler.simulator.engine import COMPLETED, REJECTED
from autoscaler.simulator.fleet import STATUSES
from autoscaler.workload.types import BATCH, INTERACTIVE, Request, Workload


def ten() -> Workload:
    """Ten requests, 0.3 s apart, on one replica taking 4 at a time: one prompt over ``max_model_len``
    (rejected), a one-token output (ITL 0), the rest queueing behind long outputs (some miss TTFT)."""
    reqs = [Request(arrival_s=0.3 * i, input_tokens=9000 if i == 3 else 400 + 100 * i,
                    output_tokens=1 if i == 5 else 150 + 90 * i,
                    request_class=BATCH if i % 4 == 1 else INTERACTIVE, priority=i % 3) for i in range(10)]
    return Workload(reqs, source="test:ten")


def by_hand(sim, cls: str) -> tuple[int, int]:
    """(requests meeting the SLO, accepted requests) of class ``cls``, one request at a time."""
    slo = sim.cfg.service(sim.target).slo[cls]
    status, first, end = sim.outcome_arrays()
    ok = accepted = 0
    for r, s, f, e in zip(sim.workload.requests, status, first, end, strict=True):
        if r.request_class != cls or s == REJECTED:
            continue
        accepted += 1
        if s != COMPLETED:
            continue
        itl = 0.0 if r.output_tokens == 1 else (e - f) / (r.output_tokens - 1)
        ok += (f - r.arrival_s) <= slo.ttft_s and itl <= slo.itl_s
    return ok, accepted


def test_attainment_is_the_hand_count_on_ten_requests(make_fleet) -> None:
    lean = overloaded_run(make_fleet, ten(), keep=False)
    assert lean.done
    res = summarize(SimulationRun(lean, [], "hand", 100.0, 1.0))
    inter_ok, inter_n = by_hand(lean, INTERACTIVE)
    batch_ok, batch_n = by_hand(lean, BATCH)
    assert (inter_n, batch_n) == (6, 3)  # request 3 (interactive) rejected; 1, 5, 9 batch
    assert 0 < inter_ok < inter_n  # the queue makes some miss: the count is not trivially all or none
    assert res["slo_attainment"][INTERACTIVE] == inter_ok / inter_n
    assert res["slo_attainment"][BATCH] == batch_ok / batch_n
    assert res["slo_attainment"]["all"] == (inter_ok + batch_ok) / (inter_n + batch_n)
    assert res["requests"]["rejected"] == 1 and res["tasks"] == {"total": 10, "successful": inter_ok + batch_ok}


def test_codes_are_views_of_the_outcomes(make_fleet) -> None:
    lean = overloaded_run(make_fleet, ten(), keep=False)
    kept = overloaded_run(make_fleet, ten(), keep=True)
    for sim in (lean, kept):
        codes, first, end = sim.outcome_codes()
        status, first2, end2 = sim.outcome_arrays()
        assert [STATUSES[c] for c in codes] == list(status)
        assert first.tobytes() == first2.tobytes() and end.tobytes() == end2.tobytes()
    codes, first, _ = lean.outcome_codes()
    assert not codes.flags.writeable and not first.flags.writeable  # the simulator's own columns, read-only
    assert codes.dtype == np.uint8 and math.isnan(first[3])  # the rejected request never had a first token


def test_request_outcomes_keep_names_and_values(make_fleet) -> None:
    lean = overloaded_run(make_fleet, ten(), keep=False)
    run = SimulationRun(lean, [], "hand", 100.0, 1.0)
    o, c = request_outcomes(run), outcome_columns(run)
    assert list(o["status"]) == list(lean.outcome_arrays()[0])
    assert list(o["cls"]) == [r.request_class for r in lean.workload.requests]
    assert o["priority"].dtype == np.int64 and list(o["priority"]) == [i % 3 for i in range(10)]
    for k in ("ttft", "itl", "finish", "ok", "ttft_ok", "itl_ok", "arrival"):
        assert o[k].tobytes() == c[k].tobytes()
    assert list(o["task"]) == list(range(10))
