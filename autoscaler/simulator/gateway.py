"""A service's gateway under an admission policy: a queue per priority, thresholds, and dispatch.

The rules are ``autoscaler.config.GatewayConfig``'s. The threshold of a priority is the longest
*estimated* queue wait, seconds, a request of that priority may be admitted to (None: no limit).
A wait, not a queue length, because the same queue length means a different wait on two replicas
or twenty, for short prompts or long ones, while the TTFT objective it protects is in seconds.

Estimated wait of a request of priority p: the requests queued ahead of it (every queued request of
a higher priority; of its own, the in-progress ones, and the new ones too when it is new) over the
rate at which the queue drains for it, the service's completions over the last ``RATE_WINDOW_S``
less the arrivals of higher priorities over the same window (they will overtake it); 0 with nothing
ahead, infinite when nothing drains for it.

The probabilistic admitter (``GatewayConfig.admitter``, llm-d-router v0.10.0 ``probabilistic-admitter``,
``pkg/epp/framework/plugins/requestcontrol/admitter/probabilisticadmitter/plugin.go`` and its
README.md; unchanged up to commit ebab687927f5 of 2026-08-21) is an ``Admitter`` plugin, which the
EPP's director runs after flow control has dispatched a request and before scheduling
(``pkg/epp/requestcontrol/director.go``, ``HandleRequest``): so here it screens each request
``pop`` hands out (``release``). It always passes a request of a priority >= 0; one of a negative
priority (the EPP's *sheddable*, ``pkg/epp/util/request/sheddable.go``) it rejects with probability
``admitter_shed_probability`` of its own saturation (``fleet.FleetSimulator._admitter_saturation``). The
director returns that rejection as an ``Internal`` error, HTTP 500 (``errcommon.BuildErrResponse``;
the plugin's own ``ResourceExhausted`` is wrapped), counted in ``llm_d_epp_request_error_total`` with
``error_code="Internal"``; flow control has already counted the request ``Dispatched``, so here too it
is dispatched (``dispatched``, ``queue_duration``), not shed (``shed``, which mirrors flow control's
rejections and evictions), and counted apart in ``admitter_rejected``. Which of our priorities the
EPP sees negative: ``epp_sheddable``; which requests the admitter may reject: ``admitter_screens`` (with
``continuation_objective: protected`` none that continues a workflow in progress).
"""

from __future__ import annotations

import math
import random
from collections import deque
from collections.abc import Callable, Mapping

from autoscaler.config import GatewayConfig
from autoscaler.loop.admission import check_thresholds
from autoscaler.simulator.engine import SimRequest
from autoscaler.simulator.metrics import Histogram
from autoscaler.workload.types import PRIORITIES, SHEDDABLE

RATE_WINDOW_S = 30.0
"""Seconds of completions and arrivals the wait estimate reads: a few TTFT objectives, short enough to
follow a surge within one controller tick."""

ADMIT, DEFER, SHED_429 = "admit", "defer", "shed"

# How an attempt left flow control, as an EPP labels its queue-duration histogram (llm-d-router v0.10.0
# ``pkg/epp/flowcontrol/types`` ``QueueOutcome.String()``): a 429 at the door is ``RejectedCapacity``, a
# deferred one shed at its deadline ``EvictedTTL``, one whose client gave up ``EvictedContextCancelled``.
DISPATCHED, REJECTED, EVICTED_TTL, CANCELLED = "Dispatched", "RejectedCapacity", "EvictedTTL", "EvictedContextCancelled"
OUTCOMES = (DISPATCHED, REJECTED, EVICTED_TTL, CANCELLED)
QUEUE_DURATION_BUCKETS = (0.0001, 0.0005, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                          30.0, 60.0)
"""Buckets of ``llm_d_epp_flow_control_request_queue_duration_seconds``, seconds (llm-d-router v0.10.0
``pkg/epp/metrics/llm_d_router_metrics.go``)."""

ADMITTER_SEED = 5
"""The probabilistic admitter's random stream (the retry jitter's is ``fleet.RETRY_SEED``): the same
run always draws the same rejections; drawn from only while the admitter is on."""


def admitter_shed_probability(saturation: float, power: float, k: float) -> float:
    """The probability with which llm-d-router v0.10.0's ``probabilistic-admitter`` rejects a request
    of a negative priority: ``min(saturation^power x k, 1)`` (``Admit``, ``plugin.go``).

    Args:
        saturation: the admitter's own saturation (>= 0, dimensionless; module docstring).
        power: the curve's exponent (> 0; the plugin's default 5).
        k: its scale (> 0; default 300): every such request is rejected from ``(1 / k)^(1 / power)`` on
            (about 0.32 with the defaults).

    Returns:
        A probability in [0, 1]: 0 at saturation 0.
    """
    return min(saturation ** power * k, 1.0)


class Gateway:
    """Flow control in front of one service's router (module docstring).

    Args:
        cfg: the gateway settings.

    Attributes:
        thresholds: priority level -> threshold, seconds (None: no limit); all None until set.
        queued: priority level -> requests waiting in the gateway.
        arrivals, dispatched, shed, deferred: priority level -> attempts counted so far.
        admitter_rejected: priority level -> attempts flow control dispatched and the probabilistic
            admitter then rejected (HTTP 500; module docstring); all 0 with no admitter.
        wait_sum_s: priority level -> seconds waited in the gateway by the dispatched requests.
        queue_duration: outcome (``OUTCOMES``) -> priority level -> the seconds each attempt spent in
            flow control until that outcome (0 for a 429 at the door).
    """

    def __init__(self, cfg: GatewayConfig) -> None:
        self.cfg = cfg
        n = len(PRIORITIES)
        self.thresholds: list[float | None] = [None] * n
        self._continuing: list[deque[SimRequest]] = [deque() for _ in range(n)]
        self._new: list[deque[SimRequest]] = [deque() for _ in range(n)]
        # dispatch order: each priority's in-progress workflows, then its new requests, top priority first
        self._order = [(p, q) for p in reversed(range(n)) for q in (self._continuing[p], self._new[p])]
        self.queued = [0] * n
        self._queued_continuing = [0] * n
        self.started: set[int] = set()  # workflows with a request dispatched
        self._completions: deque[float] = deque()
        self._arrival_times: list[deque[float]] = [deque() for _ in range(n)]
        self.arrivals = [0] * n
        self.dispatched = [0] * n
        self.shed = [0] * n
        self.deferred = [0] * n
        self.admitter_rejected = [0] * n
        self._admitter = random.Random(ADMITTER_SEED) if cfg.admitter == "probabilistic" else None
        self.wait_sum_s = [0.0] * n
        self.queue_duration = {o: [Histogram(QUEUE_DURATION_BUCKETS) for _ in range(n)] for o in OUTCOMES}

    # ------------------------------------------------------------------ thresholds
    def set_thresholds(self, thresholds: Mapping[str, float | None]) -> str | None:
        """Apply ``thresholds`` (priority name -> seconds or None; priorities left out keep theirs), or
        return why not (``check_thresholds``) and keep the ones in force."""
        why = check_thresholds(thresholds)
        if why is not None:
            return why
        for name, x in thresholds.items():
            self.thresholds[PRIORITIES.index(name)] = None if x is None else float(x)
        return None

    # ------------------------------------------------------------------ estimates
    def _prune(self, now: float) -> None:
        cut = now - RATE_WINDOW_S
        while self._completions and self._completions[0] <= cut:
            self._completions.popleft()
        for times in self._arrival_times:
            while times and times[0] <= cut:
                times.popleft()

    def continues(self, sr: SimRequest) -> bool:
        """True when ``sr`` belongs to a workflow with a request already dispatched."""
        return sr.req.workflow_id is not None and sr.req.workflow_id in self.started

    def estimated_wait_s(self, sr: SimRequest, now: float) -> float:
        """Seconds ``sr`` would wait in the queue if admitted now (module docstring)."""
        p = sr.req.priority
        ahead = sum(self.queued[p + 1:]) + (self._queued_continuing[p] if self.continues(sr) else self.queued[p])
        if ahead == 0:
            return 0.0
        self._prune(now)
        overtaking = sum(len(t) for t in self._arrival_times[p + 1:])
        drain = (len(self._completions) - overtaking) / RATE_WINDOW_S
        return ahead / drain if drain > 0 else math.inf

    # ------------------------------------------------------------------ intake
    def offer(self, sr: SimRequest, now: float) -> str:
        """Decide on an arriving attempt: ``ADMIT`` (queued), ``DEFER`` (queued with
        ``sr.deadline_s`` set) or ``SHED_429`` (not queued: the caller answers HTTP 429)."""
        p = sr.req.priority
        self.arrivals[p] += 1
        self._arrival_times[p].append(now)
        limit = self.thresholds[p]
        continuing = sr.continuing = self.continues(sr)
        verdict = ADMIT
        if limit is not None and self.estimated_wait_s(sr, now) > limit:
            verdict = DEFER if continuing else SHED_429
        if verdict == SHED_429:
            self.shed[p] += 1
            self.queue_duration[REJECTED][p].observe(0.0)
            return SHED_429
        if verdict == DEFER:
            self.deferred[p] += 1
            sr.deadline_s = now + self.cfg.defer_s
        sr.queued_s = now
        (self._continuing if continuing else self._new)[p].append(sr)
        self.queued[p] += 1
        self._queued_continuing[p] += continuing
        return verdict

    def expire(self, sr: SimRequest, now: float) -> None:
        """A deferred ``sr`` reached its deadline still queued at ``now``: it leaves the queue, counted as shed."""
        self.discard(sr, now, EVICTED_TTL)
        self.shed[sr.req.priority] += 1

    def discard(self, sr: SimRequest, now: float, outcome: str = CANCELLED) -> None:
        """``sr`` left the queue undispatched at ``now`` (its client gave up, or its deadline passed:
        ``outcome``); its entry is skipped when reached (the caller sets its status)."""
        p = sr.req.priority
        if sr.queued_s is not None:
            self.queue_duration[outcome][p].observe(now - sr.queued_s)
        self.queued[p] -= 1
        self._queued_continuing[p] -= sr.continuing
        sr.queued_s = None

    # ------------------------------------------------------------------ dispatch
    @property
    def waiting(self) -> int:
        """Requests in the gateway's queues."""
        return sum(self.queued)

    def _head(self, q: deque[SimRequest]) -> SimRequest | None:
        while q and q[0].queued_s is None:  # discarded entries
            q.popleft()
        return q[0] if q else None

    def pop(self, now: float, lowest: int = 0) -> SimRequest | None:
        """The next request to dispatch of a priority level of at least ``lowest`` (the bands below it
        are held: ``GatewayConfig.usage_limit``), taken out of its queue (None when there is none):
        one that has waited ``max_wait_s`` first (the oldest such), else the highest priority's
        in-progress workflows, then its new requests. Counted dispatched, as flow control counts it;
        ``release`` then passes it on (or its admitter rejects it)."""
        if not any(self.queued[lowest:]):
            return None
        heads = [(q[0].queued_s, q) for p, q in self._order if p >= lowest and self._head(q) is not None]
        aged = [h for h in heads if h[0] is not None and now - h[0] >= self.cfg.max_wait_s]
        queue = min(aged, key=lambda h: h[0] or 0.0)[1] if aged else heads[0][1]
        sr = queue.popleft()
        p = sr.req.priority
        self.queued[p] -= 1
        self._queued_continuing[p] -= sr.continuing
        self.dispatched[p] += 1
        assert sr.queued_s is not None
        sr.waited_s = now - sr.queued_s
        sr.dispatched_s = now
        self.wait_sum_s[p] += sr.waited_s
        self.queue_duration[DISPATCHED][p].observe(sr.waited_s)
        sr.queued_s = None
        return sr

    # ------------------------------------------------------------------ after dispatch
    def epp_sheddable(self, level: int) -> bool:
        """True when the EPP sees priority ``level`` as *sheddable* (a negative ``InferenceObjective``
        priority): while its threshold is 0 (``adapters.gateway_api.objective_priority``: the rank
        minus 3), and for ``sheddable`` always when ``cfg.sheddable_objective`` is ``negative``;
        otherwise the objective carries the rank, 0-2, which the EPP never sheds."""
        return self.thresholds[level] == 0 or (level == SHEDDABLE and self.cfg.sheddable_objective == "negative")

    def admitter_screens(self, sr: SimRequest) -> bool:
        """True when the probabilistic admitter may reject ``sr``: it is on, and ``sr``'s objective is
        negative, its class's (``epp_sheddable``) unless ``sr`` continues a workflow in progress
        (``continues`` when it arrived) and ``cfg.continuation_objective`` is ``protected``: it is then
        sent under an objective of priority >= 0, which the plugin always passes."""
        if self._admitter is None or not self.epp_sheddable(sr.req.priority):
            return False
        return not (sr.continuing and self.cfg.continuation_objective == "protected")

    def release(self, sr: SimRequest, saturation: Callable[[], float]) -> bool:
        """The EPP's steps between flow control's dispatch of ``sr`` (``pop``) and the router: True
        when it goes on to a replica (its workflow is then in progress), False when the
        probabilistic admitter rejects it (the caller ends the attempt; module docstring).
        ``saturation`` gives the admitter's saturation of the pool; it is read, and a random number
        drawn, only for a request the admitter may reject (``admitter_screens``)."""
        rng = self._admitter
        p = sr.req.priority
        if rng is not None and self.admitter_screens(sr):
            g = self.cfg
            if rng.random() < admitter_shed_probability(saturation(), g.admitter_power, g.admitter_k):
                self.admitter_rejected[p] += 1
                sr.dispatched_s = None  # it never reached a replica
                return False
        if sr.req.workflow_id is not None:
            self.started.add(sr.req.workflow_id)
        return True

    def completed(self, now: float) -> None:
        """A request of the service completed at ``now`` (the drain rate of the wait estimate)."""
        self._completions.append(now)
