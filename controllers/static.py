"""Static provisioning baseline: a fixed replica count per variant, e.g. sized for the trace's peak."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from autoscaler.config import EngineConfig, Service
from autoscaler.workload.stream import WorkloadStream
from controllers.base import Controller, Decision, Reason
from controllers.split import split_capacity
from models.capacity import ReplicaSpec, RequestMix, mean_itl_rate, variant_weights

if TYPE_CHECKING:
    from autoscaler.state import ServiceEstimate
    from autoscaler.workload.stream import AnyWorkload
    from autoscaler.workload.types import Request, Workload

PEAK_WINDOW_S = 60.0


class StaticController(Controller):
    """Always asks for the same replicas per variant (a peak-provisioned fleet never scales).

    It brings its own (empty) stabilisation: the loop applies only the replica bounds, none of its
    adaptive rules (idle scale-to-minimum, step limits), so the fleet really stays fixed.

    Args:
        replicas: service -> variant -> replicas; variants not listed keep their current count.
        tick_s, window_s: the loop's period and signal window (nothing here reads signals).
        name: the spec it was built from.
    """

    def __init__(self, replicas: dict[str, dict[str, int]], tick_s: float, window_s: float,
                 name: str = "static") -> None:
        super().__init__(name, tick_s, window_s, own_guard=True)
        self.replicas = replicas

    def decide(self, est: ServiceEstimate, svc: Service) -> Decision:
        """The fixed replicas of ``svc``."""
        return Decision({**est.current, **self.replicas.get(svc.name, {})}, self.name, Reason.FIXED)


class ScheduledController(StaticController):
    """Fixed replicas per time window, as a cron-style schedule (e.g. KEDA's cron scaler) sets them.

    Args:
        schedule: ``(start_s, replicas)`` pairs sorted by ``start_s``, the first at 0; ``replicas``
            is service -> variant -> count, held from ``start_s`` until the next pair's ``start_s``.
        tick_s, window_s: as ``StaticController``.

    Raises:
        ValueError: empty, unsorted, or not starting at 0.
    """

    def __init__(self, schedule: list[tuple[float, dict[str, dict[str, int]]]], tick_s: float, window_s: float,
                 name: str = "scheduled") -> None:
        starts = [t for t, _ in schedule]
        if not schedule or starts[0] != 0 or starts != sorted(starts):
            raise ValueError(f"schedule must start at 0 s and be sorted by start time, got starts {starts}")
        super().__init__(schedule[0][1], tick_s, window_s, name)
        self.schedule = schedule

    def decide(self, est: ServiceEstimate, svc: Service) -> Decision:
        """The replicas of the window holding ``est.time_s``."""
        replicas = next(r for t, r in reversed(self.schedule) if t <= est.time_s)
        return Decision({**est.current, **replicas.get(svc.name, {})}, self.name, Reason.FIXED)


def served(workload: Workload, max_model_len: int | None) -> list[Request]:
    """The requests a deployment with ``max_model_len`` accepts (all when None); vLLM rejects the rest."""
    if max_model_len is None:
        return workload.requests
    return [r for r in workload.requests if r.input_tokens + r.output_tokens <= max_model_len]


def served_columns(workload: AnyWorkload, max_model_len: int | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Arrival times (s), prompt and output tokens of the requests ``served`` gives, in arrival order; of
    a ``WorkloadStream`` (``autoscaler.workload.stream``) read from its columns, its requests unmade."""
    if isinstance(workload, WorkloadStream):
        a, i, o = workload.arrival_s, workload.input_tokens, workload.output_tokens
    else:
        reqs = workload.requests
        a = np.array([r.arrival_s for r in reqs], dtype=float)
        i = np.array([r.input_tokens for r in reqs], dtype=np.int64)
        o = np.array([r.output_tokens for r in reqs], dtype=np.int64)
    if max_model_len is not None:
        keep = i + o <= max_model_len
        a, i, o = a[keep], i[keep], o[keep]
    return a, i, o


def peak_rate_rps(workload: AnyWorkload, window_s: float = PEAK_WINDOW_S, max_model_len: int | None = None) -> float:
    """Highest arrival rate over any ``window_s``-second sliding window of the served requests, requests/s."""
    return _peak_rate(served_columns(workload, max_model_len)[0].tolist(), window_s)


def _peak_rate(t: list[float], window_s: float) -> float:
    """Most arrivals (sorted times ``t``, seconds) in any ``window_s``-second window, over ``window_s``."""
    best, lo = 0, 0
    for hi in range(len(t)):
        while t[hi] - t[lo] > window_s:
            lo += 1
        best = max(best, hi - lo + 1)
    return best / window_s


def workload_mix(svc: Service, workload: AnyWorkload) -> RequestMix | None:
    """The request mix of the requests ``svc`` accepts (``max_model_len``), None when there are none."""
    return _mix(served_columns(workload, svc.max_model_len))


def _mix(columns: tuple[np.ndarray, np.ndarray, np.ndarray]) -> RequestMix | None:
    """``workload_mix`` of ``served_columns``' arrays."""
    _, ins, outs = columns
    if not ins.size:
        return None
    return RequestMix.from_requests(ins, outs)


def provision_for(svc: Service, engine: EngineConfig, mix: RequestMix | None, rate_rps: float,
                  mean_itl_s: float | None = None) -> dict[str, int]:
    """Replicas per variant whose capacity covers ``rate_rps`` (requests/s).

    Per-replica capacity is ``models.capacity.replica_capacity`` at the service's interactive SLO for
    ``mix`` (None: no request is accepted, every variant at its minimum); with ``mean_itl_s``, at most
    the rate at which the mean ITL reaches it (``mean_itl_rate``: a fleet whose PID sits at its
    setpoint). Variants are filled at the lowest cost for the capacity (``controllers.split``),
    starting from each variant's minimum.
    """
    if mix is None:
        return {v.name: v.min_replicas for v in svc.variants}
    weights = variant_weights(svc, engine, mix)
    if mean_itl_s is not None:
        weights = {v.name: min(weights[v.name], mean_itl_rate(ReplicaSpec.of(v, engine), mix, mean_itl_s))
                   for v in svc.variants}
    return split_capacity(rate_rps, svc.variants, {}, weights)


def peak_provisioning(svc: Service, engine: EngineConfig, workload: AnyWorkload) -> dict[str, int]:
    """Replicas per variant for the workload's peak 60-s arrival rate (``provision_for``)."""
    return provision_for(svc, engine, workload_mix(svc, workload),
                         peak_rate_rps(workload, max_model_len=svc.max_model_len))


OPENING_WINDOW_S = 300.0
"""The opening traffic a steady start provisions for: the workload's first this many seconds (``opening_rate_rps``)."""


def opening_rate_rps(workload: AnyWorkload, window_s: float = OPENING_WINDOW_S,
                     max_model_len: int | None = None) -> float:
    """Peak 60-s arrival rate (``peak_rate_rps``) of the served requests in the workload's first
    ``window_s`` seconds, requests/s (0 for an empty workload)."""
    t0 = _first_arrival_s(workload)
    if t0 is None:
        return 0.0
    return _opening_rate(served_columns(workload, max_model_len)[0], t0, window_s)


def _first_arrival_s(workload: AnyWorkload) -> float | None:
    """The arrival time of the workload's first request, seconds (None: it has none)."""
    if isinstance(workload, WorkloadStream):
        return float(workload.arrival_s[0]) if workload.count else None
    return workload.requests[0].arrival_s if workload.requests else None


def _opening_rate(arrivals: np.ndarray, t0: float, window_s: float) -> float:
    """``opening_rate_rps`` of the served arrival times ``arrivals`` (s) of a workload starting at ``t0``."""
    return _peak_rate(arrivals[arrivals - t0 < window_s].tolist(), PEAK_WINDOW_S)


def steady_start_fleet(svc: Service, engine: EngineConfig, workload: AnyWorkload, mean_itl_s: float) -> dict[str, int]:
    """Replicas per variant of a fleet that has been serving ``workload``'s opening traffic a while:
    ``provision_for`` its opening rate (``opening_rate_rps``) with the mean ITL at ``mean_itl_s`` (the
    PID's setpoint x the ITL SLO); where every adaptive controller starts in simulation."""
    # opening_rate_rps and workload_mix from one read of the served columns (issue 33: each read walks
    # every request in Python; a run's setup read them twice)
    t0 = _first_arrival_s(workload)
    columns = served_columns(workload, svc.max_model_len)
    opening = 0.0 if t0 is None else _opening_rate(columns[0], t0, OPENING_WINDOW_S)
    return provision_for(svc, engine, _mix(columns), opening, mean_itl_s)
