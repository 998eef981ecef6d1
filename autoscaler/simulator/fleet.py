"""The fleet simulator: services, their variants' replicas, a router per service, and the event loop.

Deterministic: events are ordered by (time, insertion sequence) and every random number comes from a
stream seeded with a constant (the retry jitter's here, the admitter's in the gateway), so the same
workload and decisions always give the same run.

Replica lifecycle: provisioning (paid for, serves nothing) -> ready (empty prefix cache) ->
draining on scale-down (takes no new work, finishes what it holds, or is killed
``simulator.termination_grace_s`` after with what it still holds failing) -> gone. A crashed
replica's requests fail, its cache is lost, and a replacement starts, as a ReplicaSet recreates a pod.
A replica asked for inside one of its variant's ``simulator.unschedulable`` windows stays Pending
(paid for nothing: no node runs it) until the window ends, and only then starts.

Prefill/decode pools (``Service.roles``): their replicas are ``simulator.disagg``'s, ready in their own
lists (``ServiceSim.prefill_ready``, ``decode_ready``), routed by ``_route_pd`` as llm-d routes; a
remote prefill in progress is in ``_handoffs`` until its KV has been read (``_TRANSFER`` events) or its
attempt ends, which frees what its prefill replica held. A drained replica holding KV for a hand-over
stays until it holds none. A read starting inside a ``simulator.link_slowdowns`` window (or one added
by ``slow_link``) is slower (``transfer_seconds``). The faults (``simulator.crashes``, ``unschedulable``,
``slowdown``) name a pool's variants as they name aggregated ones.

Nodes: ``warm_nodes`` of a variant's nodes hold its weights; a new replica starts warm when one of
them is free (no live replica on it), else cold. Clients: an attempt unfinished ``client_timeout_s``
after it was sent (a streaming client's: with no token yet) fails, wherever it is (gateway, a
replica's queue, or running: vLLM aborts it); one that failed so, on a crashed replica, or was shed
by the gateway (HTTP 429) is retried as ``simulator.clients`` says (``autoscaler.config.ClientConfig``),
each retry a new attempt (``SimRequest``) of the same request; ``requests`` holds every request's
first attempt, ``final`` its last. A request too long for ``max_model_len`` is rejected (HTTP 400) and not retried.

Gateway: without an admission policy, requests go to the router at once (held only while no replica
is ready); with one (``admission=True``), each service's ``autoscaler.simulator.gateway.Gateway``
queues them by priority and dispatches while the pool is not saturated (``GatewayConfig.saturation``;
in the concurrency detector's ``tokens`` and ``hybrid`` modes it counts each replica's tokens in
flight as the EPP's ``inflight-load-producer`` does: charged at dispatch, released at the first token
or the last, ``GatewayConfig``);
with ``GatewayConfig.admitter`` a dispatched request then passes the EPP's probabilistic admitter,
which may reject it (``Gateway.release``; its random stream is the gateway's own, seeded).
"""

from __future__ import annotations

import gc
import itertools
import math
import random
from array import array
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from heapq import heapify, heappop, heappush

import numpy as np

from autoscaler.config import FleetConfig, Roles, Service, Variant
from autoscaler.config.simulator import LinkSlowdown
from autoscaler.simulator.disagg import (
    PREFILL,
    DecodeReplica,
    PrefillReplica,
    dynamo_remote_prefill,
    remote_prefill,
)
from autoscaler.simulator.engine import (
    COMPLETED,
    DRAINING,
    FAILED,
    GONE,
    PROVISIONING,
    READY,
    REJECTED,
    SHED,
    Replica,
    SimRequest,
)
from autoscaler.simulator.gateway import DEFER, SHED_429, Gateway
from autoscaler.simulator.prefix_cache import PrefixCache
from autoscaler.simulator.router import least_outstanding, prefix_affinity
from autoscaler.workload.stream import AnyWorkload, WorkloadStream
from autoscaler.workload.types import PRIORITIES, Request, Workload
from controllers.admission import concurrency_budget, releases_at_first_token, token_budget, token_charge
from models.arrivals import BIN_S
from models.capacity import ReplicaSpec, mean_itl_rate, service_mix, throughput_weights
from models.profiles import get_profile

_READY, _STEP, _CRASH, _RETRY, _TIMEOUT, _DEADLINE, _KILL, _TRANSFER, _DRAIN = range(9)
STATUSES = (None, COMPLETED, REJECTED, FAILED, SHED)  # an ended request's status, by its code (outcome_arrays)
_STATUS_CODE = {status: code for code, status in enumerate(STATUSES)}
_COMPLETED_CODE = _STATUS_CODE[COMPLETED]
RETRIED = frozenset({FAILED, SHED})  # what a client sends again (timeouts, 5xx, 429); not a 400
RETRY_SEED = 4  # the jitter's random stream: the same run always draws the same delays


NO_PLAN_RPS = 1e-3
"""The P/D router's weight of a replica whose variant the plan gives no rate (``ServiceSim.pd_weights``),
requests/s: it takes a request only when the others hold about a thousand times as many per request/s
(a ready replica the plan no longer serves with, on its way out)."""


def _weights(s: Service, cfg: FleetConfig) -> dict[str, float]:
    """variant -> the router's weight of one replica: ``throughput_weights`` for the aggregated variants
    and, the same way, for the prefill and decode variants (compared only among the replicas one routing
    step picks from)."""
    weights = throughput_weights(s, cfg.engine)
    if s.roles is not None:
        mix, itl = service_mix(s), s.slo["interactive"].itl_s
        weights.update({v.name: mean_itl_rate(ReplicaSpec.of(v, cfg.engine), mix, itl) for _, v in s.role_variants()})
    return weights


def _mean_utilization(pods: list[Replica], queue_depth: int, kv_fraction: float) -> float:
    """The mean over ``pods`` (at least one) of ``max(waiting / queue_depth, KV used / (kv_fraction x KV
    capacity))``: the utilization detector's pool saturation and the probabilistic admitter's."""
    def queue(r: Replica) -> float:  # a threshold of 0: any request waiting saturates it
        return len(r.waiting) / queue_depth if queue_depth else (math.inf if r.waiting else 0.0)

    return sum(max(queue(r), r.kv_used / (kv_fraction * r.kv_cap)) for r in pods) / len(pods)


@contextmanager
def collector_paused() -> Iterator[None]:
    """Turn Python's cyclic garbage collector off for the block (back on after, if it was on).

    For building the per-request objects of a run: they live as long as it, and each full collection
    while they are made walks all those made before (about a second of a 387,000-request run).
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


RUN_GC_THRESHOLD0 = 20_000
"""The collector's youngest-generation threshold during a run (``heap_frozen``; CPython's default is 700).
A run allocates a heap entry or request object per event and frees nearly all of them by reference
count (they hold no cycles), yet each 700 allocations not yet freed start a collection: at x100
(``benchmarks/sim_throughput.py --rate-scale 100 --span 0:120``) 62 young and 5 middle collections,
~0.06 s of a 1.45-s run, measured with ``gc.callbacks`` (issue 33); at 20,000, one young collection."""


@contextmanager
def heap_frozen() -> Iterator[None]:
    """Keep the cyclic garbage collector off the objects alive at entry for the block (``gc.freeze``;
    ``gc.unfreeze`` at exit, which also thaws any frozen by a caller), and collect the youngest
    generation less often (``RUN_GC_THRESHOLD0``; the thresholds are restored at exit).

    A run's workload and per-request objects live as long as the run, and a full collection walks
    them all (2 collections, ~0.9 s, of a 15-s 387,000-request run, measured with ``gc.callbacks``);
    frozen, the collector only walks what the run makes. Results do not depend on the collector.
    """
    thresholds = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(thresholds[0] and max(thresholds[0], RUN_GC_THRESHOLD0), *thresholds[1:])  # 0: kept off
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()


@dataclass
class VariantCounts:
    """Replica counts of one variant: ready, starting (provisioning) and draining."""

    ready: int = 0
    starting: int = 0
    draining: int = 0

    @property
    def current(self) -> int:
        """Replicas the Deployment counts (ready + starting); draining ones are terminating."""
        return self.ready + self.starting


class ServiceSim:
    """One service: its variants' replicas, its gateway queue and router.

    Args:
        cfg: the service.
        weights: variant -> speed of one replica, requests/s (``models.capacity.throughput_weights``):
            the router weighs replicas by it.
    """

    def __init__(self, cfg: Service, weights: dict[str, float]) -> None:
        self.cfg = cfg
        self.variants: dict[str, Variant] = {v.name: v for v in cfg.variants}  # its aggregated variants
        self.replicas: list[Replica] = []
        self.ready: list[Replica] = []  # its ready aggregated replicas
        # prefill/decode pools (``disagg``): None without ``roles``
        self.pd: Roles | None = cfg.roles
        self.role_of: dict[str, str] = {v.name: role for role, v in cfg.role_variants()}  # variant -> role
        self.all_variants: dict[str, Variant] = {**self.variants, **{v.name: v for _, v in cfg.role_variants()}}
        self.prefill_ready: list[Replica] = []
        self.decode_ready: list[Replica] = []
        self.prefill_live: list[Replica] = []  # its prefill replicas not gone (``FleetSimulator._prefill_queue``)
        self.gateway: deque[SimRequest] = deque()
        self.weights = weights
        self.arrivals = 0  # attempts received, as a gateway's request counter counts them
        self.arrivals_by_priority = [0] * len(PRIORITIES)
        # the gateway's binned counters (models.arrivals): over completed BIN_S bins, the arrivals
        # and the sum of each bin's arrivals squared; the open bin's index and count
        self._binned = 0
        self._squares = 0
        self._second = -1
        self._second_count = 0
        self.flow: Gateway | None = None  # flow control, under an admission policy
        self.max_concurrency: dict[str, int] = {}  # variant -> requests in flight per replica (concurrency)
        self.dispatch_limit: dict[str, int] = {}  # variant -> the detector's filter: max_concurrency x (1 + headroom)
        self.max_tokens: dict[str, int] = {}  # variant -> tokens in flight per replica (tokens, hybrid modes)
        self.token_limit: dict[str, int] = {}  # variant -> the filter's: max_tokens x (1 + headroom)
        self.tokens: dict[int, int] = {}  # replica rid -> tokens the gateway counts in flight there
        self.ceilings = [1.0] * len(PRIORITIES)  # usage ceiling per priority level, lowest first
        self.budget_set_s = -math.inf  # when a published ITL budget last replaced max_concurrency
        # The least-outstanding router's heap (FleetSimulator._route): (score, route_seq, route_ver, replica)
        # per routable replica, stale entries skipped; None: rebuild it (the routable set changed).
        self.route_heap: list[tuple[float, int, int, Replica]] | None = None
        self.route_marks: list[Replica] = []  # replicas whose outstanding count changed since the last route
        self.route_epoch = 0  # the heap's generation
        self.plan_weights: dict[str, float] = {}  # variant -> the plan's requests/s per replica (follow_plan)
        self.pd_route: dict[str, float] | None = None  # the P/D router's weights (pd_weights); None: recompute
        self.ready_seq = 0  # replicas made ready so far (each one's route_seq)

    def arrival_bins(self, now: float) -> tuple[int, int, int]:
        """The gateway's binned counters at ``now`` (``models.arrivals``): the ``BIN_S`` bins completed
        by ``now``, the arrivals in them, and the sum of each one's arrivals squared."""
        bins = math.floor(now / BIN_S)
        if self._second < bins:
            return bins, self._binned + self._second_count, self._squares + self._second_count ** 2
        return bins, self._binned, self._squares

    def ready_list(self, r: Replica) -> list[Replica]:
        """The list of ready replicas ``r`` belongs in: ``ready``, or its role's pool."""
        if not r.role:
            return self.ready
        return self.prefill_ready if r.role == PREFILL else self.decode_ready

    def invalidate_routes(self) -> None:
        """The routable replicas changed (one ready, gone, draining, cordoned or not): rebuild the heap
        and the P/D router's weights."""
        self.route_heap = None
        self.pd_route = None

    def pd_weights(self) -> dict[str, float]:
        """The weights the P/D router (``FleetSimulator._route_pd``) picks replicas by, variant ->
        requests/s per replica: ``weights`` until a plan is followed (``plan_weights``), then the plan's.
        With the plan's, a decode replica stands for its share of the pools' pair: its planned rate
        times ``min(1, prefill planned / decode planned)`` over the ready pools, so the decode and
        aggregated replicas share the demand as the plan split it (a request sent to a decode replica
        takes prefill capacity too). A variant the plan gives no rate weighs ``NO_PLAN_RPS``. The
        router's own weights while no prefill replica is ready (decode replicas then prefill locally,
        which the plan's decode rates do not count)."""
        if self.pd_route is not None:
            return self.pd_route
        plan = self.plan_weights
        if not plan or (self.decode_ready and not self.prefill_ready):
            self.pd_route = self.weights
            return self.weights
        out = dict(self.weights)
        out.update({v: max(plan.get(v, 0.0), NO_PLAN_RPS) for v in self.all_variants})
        decode = sum(out[r.variant] for r in self.decode_ready)
        if decode > 0:
            share = min(1.0, sum(out[r.variant] for r in self.prefill_ready) / decode)
            out.update({v: out[v] * share for v, role in self.role_of.items() if role != PREFILL})
        self.pd_route = out
        return out

    def set_concurrency(self, budget: dict[str, int], headroom: float) -> None:
        """Hold each variant's replicas to ``budget`` (variant -> requests in flight per replica), the
        detector's filter at ``budget x (1 + headroom)`` (``GatewayConfig.headroom``)."""
        self.max_concurrency = budget
        self.dispatch_limit = {v: int(n * (1.0 + headroom)) for v, n in budget.items()}

    def counts(self, variant: str) -> VariantCounts:
        """Current replica counts of ``variant``."""
        c = VariantCounts()
        for r in self.replicas:
            if r.variant != variant:
                continue
            if r.state == READY:
                c.ready += 1
            elif r.state == PROVISIONING:
                c.starting += 1
            elif r.state == DRAINING:
                c.draining += 1
        return c


class FleetSimulator:
    """Event-driven simulation of a fleet serving one workload.

    Args:
        cfg: the fleet.
        workload: requests to replay; all go to ``service`` (default: the first service). A
            ``WorkloadStream`` (``autoscaler.workload.stream``) is read a chunk at a time as arrivals
            reach it, never more than one chunk ahead of the last arrival; it needs
            ``keep_requests=False``, and its run is the run of a ``Workload`` of the same requests.
        service: name of the service the workload targets.
        admission: run each service's gateway with flow control (module docstring).
        keep_requests: keep every request's first attempt (``requests``) and last (``final``) as
            ``SimRequest`` objects for the caller to read; False keeps only what ``outcome_arrays``
            gives (its status and the times of its first and last token, 17 bytes a request), making
            each attempt's object when it is sent and dropping it when the request ends: what results
            need, without ~0.4 KB of objects per request (issue 33: a 14-day replay).

    Raises:
        ValueError: a ``WorkloadStream`` with ``keep_requests``, or flow control with prefill/decode roles.

    The control loop drives it: ``run_until(t)`` advances the simulation, ``set_replicas`` actuates,
    and ``services`` / ``requests`` expose state for observation and results.
    """

    def __init__(self, cfg: FleetConfig, workload: AnyWorkload, service: str | None = None,
                 admission: bool = False, keep_requests: bool = True) -> None:
        self.cfg = cfg
        self.workload = workload
        self.target = cfg.service(service).name
        self.services = {s.name: ServiceSim(s, _weights(s, cfg)) for s in cfg.services}
        self._target_svc = self.services[self.target]
        if admission and any(s.roles is not None for s in cfg.services):
            raise ValueError("the gateway's flow control (an admission policy) with prefill/decode roles is not "
                             "simulated yet: run without --admission")
        self._handoffs: dict[SimRequest, tuple[PrefillReplica, DecodeReplica]] = {}  # remote prefills in progress
        self._link_windows: list[LinkSlowdown] = list(cfg.simulator.link_slowdowns)
        if admission:
            g = cfg.simulator.gateway
            for svc in self.services.values():
                svc.flow = Gateway(g)
                svc.ceilings = g.ceilings(len(PRIORITIES))
                if g.saturation == "concurrency":
                    svc.set_concurrency(concurrency_budget(svc.cfg, cfg.engine, g.max_concurrency), g.headroom)
                    if g.concurrency_mode != "requests":
                        svc.max_tokens = token_budget(svc.cfg, cfg.engine, g, cfg.simulator.clients.streaming,
                                                      cfg.simulator.router == "prefix_affinity")
                        svc.token_limit = {v: int(n * (1.0 + g.headroom)) for v, n in svc.max_tokens.items()}
        # the EPP's token counter: charged at dispatch, released at the first token or at the end
        self._count_tokens = admission and cfg.simulator.gateway.saturation == "concurrency" \
            and cfg.simulator.gateway.concurrency_mode != "requests"
        self._release_first = releases_at_first_token(cfg.simulator.gateway, cfg.simulator.clients.streaming)
        self.now = 0.0
        self._events: list[tuple[float, int, int, object, int]] = []
        self._seq = 0
        self._rid = 0
        self._next_arrival = 0  # the next request to arrive, its rid
        # _wreqs: the requests at hand, the first of which is request _base: the whole workload, or
        # the stream's current chunk (the next is read when its last request arrives: _refill)
        self._chunks: Iterator[list[Request]] | None = None
        self._base = 0
        if isinstance(workload, WorkloadStream):
            if keep_requests:
                raise ValueError("a streamed workload (WorkloadStream) makes each request as it arrives: run it "
                                 "with keep_requests=False")
            self._chunks = workload.chunks()
            self._wreqs: list[Request] = next(self._chunks, [])
            n, self._last_arrival_s = workload.count, workload.last_arrival_s
        else:
            self._wreqs = workload.requests
            n = len(self._wreqs)
            self._last_arrival_s = self._wreqs[-1].arrival_s if self._wreqs else 0.0
        self._count = n
        self.keep_requests = keep_requests
        self._requests: list[SimRequest] | None = None
        self._final: list[SimRequest] | None = None
        if keep_requests:
            assert isinstance(workload, Workload)
            with collector_paused():  # a new object per request: nothing here for the collector to free
                self._requests = [SimRequest(r) for r in workload.requests]
            self._final = list(self._requests)
        else:
            # what results read of each request's last attempt, written when the request ends
            # array and bytearray, not numpy: one item is written per request, faster so
            self._status = bytearray(n)  # index in STATUSES
            self._t_first = array("d", [math.nan]) * n
            self._t_finish = array("d", [math.nan]) * n
            self._live: dict[int, SimRequest] = {}  # rid -> last attempt, of the requests sent and not ended
        self._first: deque[SimRequest] = deque()  # first attempts sent, oldest first, that may still time out
        self._closed = bytearray(n)
        self._stopping = False
        self._jitter = random.Random(RETRY_SEED)
        self.retries = 0
        self.shed_final = 0  # requests whose last attempt was shed
        self.shed_mid_workflow = 0  # ... of which continued a workflow in progress
        self.open_requests = n
        # read on every event (``_next_timeout_s``); the fleet's settings do not change during a run
        self._streaming = cfg.simulator.clients.streaming
        self._client_timeout_s = cfg.simulator.client_timeout_s
        # _route by a heap (same choice as least_outstanding): for that router, with no flow control
        # (it routes through _pick, and would leave the load marks unread)
        self._route_heap = cfg.simulator.router != "prefix_affinity" and not admission
        self._pd_filter = cfg.simulator.pd_saturation_filter
        self._pd_priority = cfg.simulator.prefill_priority
        self.scale_events = 0
        self.crash_log: list[dict[str, object]] = []
        self.cut_requests = 0  # attempts failed because their replica's termination grace ran out
        for s in self.services.values():
            for v in s.cfg.variants:
                for _ in range(v.start_replicas):
                    self._new_replica(s, v, ready_now=True)
            for _, v in s.cfg.role_variants():
                for _ in range(v.start_replicas):
                    self._new_replica(s, v, ready_now=True)
        for c in cfg.simulator.crashes:
            self._push(c.time_s, _CRASH, (c.service or cfg.services[0].name, c.variant), 0)

    # ------------------------------------------------------------------ events
    def _push(self, t: float, kind: int, obj: object, version: int) -> None:
        self._seq += 1
        heappush(self._events, (t, self._seq, kind, obj, version))

    def push_step(self, t: float, replica: Replica, version: int) -> None:
        """Schedule the end of a replica's engine step."""
        self._seq += 1  # _push spelled out: this runs at every step
        heappush(self._events, (t, self._seq, _STEP, replica, version))

    def _next_timeout_s(self) -> float:
        """When the oldest open request's client gives up (inf when none is open)."""
        first = self._first
        streaming = self._streaming
        while first and (first[0].status is not None or (streaming and first[0].t_first is not None)):
            first.popleft()
        if not first:
            return math.inf
        return first[0].req.arrival_s + self._client_timeout_s

    def run_until(self, t_end: float) -> None:
        """Process every arrival, event and client timeout up to and including ``t_end`` (seconds)."""
        wreqs = self._wreqs
        base = self._base
        kept = self._requests
        events = self._events
        services = self.services
        n = len(wreqs)  # requests at hand: request base + n - 1 is the last
        inf = math.inf
        gated = any(svc.flow is not None for svc in services.values())  # flow control is set up at start only
        # The next client timeout only moves later as requests end, except when a request arrives with
        # none open: so a value read earlier is a lower bound, and is read again only when it could
        # come first (or it is inf and a request arrives to an empty fleet).
        t_out = self._next_timeout_s()
        nxt = self._next_arrival  # only this loop moves it: the next arrival is re-read when it does
        t_arr = wreqs[nxt - base].arrival_s if nxt - base < n else inf
        while True:
            t_evt = events[0][0] if events else inf
            t_next = t_arr if t_arr <= t_evt else t_evt
            if t_out <= t_next or t_out <= t_end:
                t_out = self._next_timeout_s()
            if t_next > t_end and t_out > t_end:
                break
            if t_out < t_next:  # at equal times the arrival or the completion comes first
                self.now = t_out
                self._time_out(self._first[0])
                t_out = -inf
            elif t_arr <= t_evt:
                self.now = t_arr
                if kept is not None:
                    sr = kept[nxt]
                else:
                    sr = SimRequest(wreqs[nxt - base])
                    self._live[nxt] = sr
                self._first.append(sr)
                nxt += 1
                self._next_arrival = nxt
                if nxt - base == n and self._chunks is not None:  # the last at hand has arrived: read on
                    self._refill()
                    wreqs, base = self._wreqs, self._base
                    n = len(wreqs)
                if t_out == inf:
                    t_out = -inf
                self._arrive(sr)
                t_arr = wreqs[nxt - base].arrival_s if nxt - base < n else inf
            else:
                t, _, kind, obj, version = heappop(events)
                self.now = t
                if kind == _STEP:
                    if version == obj._version:  # type: ignore[attr-defined]  # else a step replaced: ignored
                        obj.on_step_end(t, version)  # type: ignore[attr-defined]
                    svc = services[obj.service]  # type: ignore[attr-defined]
                    if gated:
                        flow = svc.flow
                        if flow is not None and flow.waiting:
                            self._fill(svc, obj)  # type: ignore[arg-type]
                    if svc.gateway:  # a held backlog: the step may have freed room (_drain_gateway)
                        self._drain_gateway(svc)
                elif kind == _READY:
                    self._on_ready(obj)  # type: ignore[arg-type]
                else:
                    self._other_event(kind, obj)
        self.now = max(self.now, t_end)

    def _refill(self) -> None:
        """Take the stream's next chunk as the requests at hand (none left: an empty list)."""
        assert self._chunks is not None
        self._base = self._next_arrival
        self._wreqs = next(self._chunks, [])
        if not self._wreqs:
            self._chunks = None

    def _unsent(self) -> Iterator[Request]:
        """The requests not yet arrived, in arrival order (the rest of the stream read now)."""
        yield from self._wreqs[self._next_arrival - self._base:]
        if self._chunks is not None:
            for chunk in self._chunks:
                yield from chunk
            self._chunks = None

    def _other_event(self, kind: int, obj: object) -> None:
        """Handle an event other than a step's end or a replica turning ready (``run_until``)."""
        if kind == _CRASH:
            self._crash(*obj)  # type: ignore[misc]
        elif kind == _KILL:
            self._kill(obj)  # type: ignore[arg-type]
        elif kind == _RETRY:
            self._retry(obj)  # type: ignore[arg-type]
        elif kind == _TIMEOUT:
            if obj.status is None and not (  # type: ignore[attr-defined]
                    obj.t_first is not None and self.cfg.simulator.clients.streaming):  # type: ignore[attr-defined]
                self._time_out(obj)  # type: ignore[arg-type]
        elif kind == _TRANSFER:
            self._transfer_done(obj)  # type: ignore[arg-type]
        elif kind == _DRAIN:
            self._drain_gateway(obj)  # type: ignore[arg-type]
        else:
            self._deadline(obj)  # type: ignore[arg-type]

    def crash_outcomes(self) -> list[dict[str, object]]:
        """Every configured crash with its outcome: ``time_s``, ``service``, ``variant``, ``applied``,
        ``failed_requests`` and, when not applied, ``why`` (no ready replica, or after the run ended)."""
        out = list(self.crash_log)
        pending = sorted(self.cfg.simulator.crashes, key=lambda c: c.time_s)[len(self.crash_log):]
        for c in pending:
            out.append({"time_s": c.time_s, "service": c.service or self.cfg.services[0].name,
                        "variant": c.variant, "applied": False, "failed_requests": 0,
                        "why": "after the last request ended"})
        return out

    @property
    def done(self) -> bool:
        """True when every request has ended (completed, rejected or failed)."""
        return self.open_requests == 0

    @property
    def in_flight(self) -> int:
        """Requests that have arrived and not yet ended (on a replica or at a gateway)."""
        return self.open_requests - (self._count - self._next_arrival)

    @property
    def request_count(self) -> int:
        """Requests in the workload."""
        return self._count

    @property
    def arrived(self) -> int:
        """Requests that have arrived so far."""
        return self._next_arrival

    @property
    def next_arrival_s(self) -> float | None:
        """Arrival time of the next request not yet arrived, seconds; None when all have arrived."""
        i = self._next_arrival - self._base
        if i >= len(self._wreqs):
            return None
        return self._wreqs[i].arrival_s

    @property
    def last_arrival_s(self) -> float:
        """Arrival time of the last request, seconds (0 for an empty workload)."""
        return self._last_arrival_s

    @property
    def requests(self) -> list[SimRequest]:
        """Every request's first attempt, in arrival order (``keep_requests`` only).

        Raises:
            AttributeError: the simulator was made with ``keep_requests=False``.
        """
        if self._requests is None:
            raise AttributeError("FleetSimulator(keep_requests=False) keeps no SimRequest per request: "
                                 "read outcome_arrays()")
        return self._requests

    @property
    def final(self) -> list[SimRequest]:
        """Every request's last attempt, in arrival order (``keep_requests`` only).

        Raises:
            AttributeError: the simulator was made with ``keep_requests=False``.
        """
        if self._final is None:
            raise AttributeError("FleetSimulator(keep_requests=False) keeps no SimRequest per request: "
                                 "read outcome_arrays()")
        return self._final

    def outcome_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each request's last attempt, in arrival order (index = ``Request.rid``): its status (object
        array: ``completed``, ``rejected``, ``failed``, ``rejected_admission``, None while open), and
        the simulated times of its first token and of its end, seconds (float arrays, NaN when none).
        Without ``keep_requests``, a request still open reads None and NaN even when its last attempt
        has ended and waits for its retry."""
        if self._final is not None:
            status = np.array([sr.status for sr in self._final], dtype=object)
            t_first = np.array([np.nan if sr.t_first is None else sr.t_first for sr in self._final], dtype=float)
            t_finish = np.array([np.nan if sr.t_finish is None else sr.t_finish for sr in self._final], dtype=float)
            return status, t_first, t_finish
        codes = np.frombuffer(self._status, dtype=np.uint8)
        return (np.array(STATUSES, dtype=object)[codes], np.array(self._t_first, dtype=float),
                np.array(self._t_finish, dtype=float))

    def outcome_codes(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``outcome_arrays`` without its copies: each request's status as its index in ``STATUSES``
        (uint8), and the times of its first token and of its end (float64, NaN when none). Without
        ``keep_requests`` the three are read-only views of the simulator's own columns (no copy: 17
        bytes a request stay 17), valid while the simulator lives; they change if it runs on."""
        if self._final is not None:
            status, t_first, t_finish = self.outcome_arrays()
            codes = np.array([_STATUS_CODE[s] for s in status], dtype=np.uint8)
            return codes, t_first, t_finish
        views = (np.frombuffer(self._status, dtype=np.uint8), np.frombuffer(self._t_first, dtype=float),
                 np.frombuffer(self._t_finish, dtype=float))
        for v in views:
            v.flags.writeable = False
        return views

    def last_end_s(self) -> float | None:
        """The latest end of a request's last attempt, seconds; None when none has ended."""
        if self._final is not None:
            return max((sr.t_finish for sr in self._final if sr.t_finish is not None), default=None)
        t_finish = np.frombuffer(self._t_finish, dtype=float)
        ends = t_finish[~np.isnan(t_finish)]
        return float(ends.max()) if ends.size else None

    # ------------------------------------------------------------------ requests
    def _arrive(self, sr: SimRequest) -> None:
        svc = self._target_svc
        svc.arrivals += 1
        req = sr.req
        svc.arrivals_by_priority[req.priority] += 1
        # count it in its models.arrivals.BIN_S bin, closing the bins before it (ServiceSim.arrival_bins)
        sec = math.floor(self.now / BIN_S)
        if sec != svc._second:
            svc._binned += svc._second_count
            svc._squares += svc._second_count * svc._second_count
            svc._second, svc._second_count = sec, 0
        svc._second_count += 1
        if req.input_tokens + req.output_tokens > svc.cfg.max_model_len:
            self._end_attempt(sr, REJECTED)
            return
        if svc.flow is not None:
            verdict = svc.flow.offer(sr, self.now)
            if verdict == SHED_429:
                self._end_attempt(sr, SHED)
                return
            if verdict == DEFER:
                assert sr.deadline_s is not None
                self._push(sr.deadline_s, _DEADLINE, sr, 0)
            self._pump(svc)
            return
        if svc.gateway:  # a backlog is held: the request queues behind it (first come, first served)
            svc.gateway.append(sr)
            self._drain_gateway(svc)
            return
        if svc.pd is not None:
            self._route_pd(svc, sr)
            return
        if not svc.ready:
            svc.gateway.append(sr)
            return
        self._route(svc, sr)

    def _pick(self, svc: ServiceSim, replicas: Sequence[Replica], sr: SimRequest) -> Replica:
        weights = svc.weights if svc.pd is None else svc.pd_weights()
        if self.cfg.simulator.router == "prefix_affinity":
            return prefix_affinity(replicas, weights, sr.req)
        return least_outstanding(replicas, weights)

    def follow_plan(self, service: str, weights: Mapping[str, float]) -> None:
        """Let ``service``'s router weigh replicas by a controller's plan (``Decision.route_weights``:
        variant -> requests/s per replica, >= 0; ``ServiceSim.pd_weights``), for a service with
        prefill/decode pools; ignored for one without (its router keeps the ITL-rate weights)."""
        svc = self.services[service]
        if svc.pd is None:
            return
        svc.plan_weights = dict(weights)
        svc.pd_route = None

    @staticmethod
    def _routable(svc: ServiceSim) -> list[Replica]:
        """The ready replicas not cordoned (all ready ones if every one is)."""
        return [r for r in svc.ready if not r.cordoned] or svc.ready

    def _route(self, svc: ServiceSim, sr: SimRequest) -> None:
        if self._route_heap:
            self._least_outstanding_by_heap(svc).enqueue(sr, self.now)
            return
        self._pick(svc, self._routable(svc), sr).enqueue(sr, self.now)

    def _route_pd(self, svc: ServiceSim, sr: SimRequest, held: bool = False) -> bool:
        """Route ``sr`` as llm-d's P/D scheduling does (llm-d-router v0.10.0
        ``disagg-profile-handler``: the decode profile first, then the prefill profile when the decider
        says so): a decode replica among the ready decode and aggregated replicas not cordoned (llm-d's
        ``decode-filter`` passes pods labelled ``decode`` and unlabelled ones), then, when ``remote_prefill``
        holds on that replica's prefix cache and a prefill replica is ready, a prefill replica (the
        ``prefill-filter``: pods labelled ``prefill``); each picked by the fleet's router. Held at the
        gateway while no decode or aggregated replica is ready; prefilled by its decode replica when no
        prefill replica is (llm-d then keeps the decode profile's result alone). An aggregated replica
        always serves the whole request.

        ``held``: ``sr`` is the head of the gateway's backlog (``_drain_gateway``): each pick is among
        the replicas the gateway's per-pod saturation rule leaves free (``_saturated``), and with none
        free (a decode or aggregated replica, or a prefill replica when the prefill is remote) nothing
        is sent. That rule counts a prefill replica's whole queue even under ``simulator.prefill_priority``:
        only a fresh arrival's pool test (``_spill``, ``prefill_saturated``) counts the requests it would
        wait behind (``PrefillReplica.ahead``). llm-d's saturation detector, which the held requests'
        rule stands for, reads each pod's waiting queue and KV usage alone and does not know the order
        the pod admits in (llm-d-router, commit 39142fb, ``saturationdetector/utilization/detector.go``).
        Returns whether ``sr`` was sent (always, unless ``held``; a fresh arrival with no decode or
        aggregated replica ready is held at the gateway)."""
        decoders = [r for r in svc.ready if not r.cordoned] + [r for r in svc.decode_ready if not r.cordoned] \
            or svc.ready + svc.decode_ready
        if held:
            decoders = [r for r in decoders if not self._saturated(r)]
        elif self._pd_filter and svc.prefill_ready:
            decoders = self._spill(svc, decoders, sr.req.priority)
        if not decoders:
            if not held:
                svc.gateway.append(sr)
            return False
        d = self._pick(svc, decoders, sr)
        pd = svc.pd
        assert pd is not None
        if isinstance(d, DecodeReplica) and svc.prefill_ready:
            req = sr.req
            cached = d.cache.match_blocks(req.hash_ids) * d.cache.block_tokens if req.hash_ids else 0
            if pd.router == "dynamo":
                dyn = pd.dynamo  # the length test first: a short prompt needs no count of the queue
                remote = req.input_tokens - cached > dyn.max_local_prefill_length and dynamo_remote_prefill(
                    req.input_tokens, cached, self._prefill_queue(svc), dyn.max_local_prefill_length,
                    dyn.max_prefill_queue_size)
            else:
                remote = remote_prefill(req.input_tokens, cached, pd.non_cached_tokens)
            if remote:
                prefillers = [r for r in svc.prefill_ready if not r.cordoned] or svc.prefill_ready
                if held:
                    prefillers = [r for r in prefillers if not self._saturated(r)]
                    if not prefillers:
                        return False
                p = self._pick(svc, prefillers, sr)
                assert isinstance(p, PrefillReplica)
                self._handoffs[sr] = (p, d)
                d.inbound += 1
                p.enqueue(sr, self.now)
                return True
        d.enqueue(sr, self.now)
        return True

    @staticmethod
    def _prefill_queue(svc: ServiceSim) -> int:
        """The prefill queue Dynamo's conditional disaggregation reads (``dynamo_remote_prefill``): the
        requests sent to ``svc``'s prefill replicas (ready or draining) that none has started to prefill,
        i.e. the sum of their ``waiting`` queues (a preempted one, back in ``waiting``, counts again).

        Dynamo's queue is one NATS stream its prefill workers pull from, each worker one request at a
        time (``PrefillWorker.prefill_queue_handler``, ``examples/llm/components/prefill_worker.py`` at
        02e16f7: dequeue, prefill to the end, dequeue again), so a request a worker holds is out of the
        queue. Here each prefill replica has its own queue, filled by the fleet's router, and a replica
        admits into its batch as many as its engine limits allow (``max_num_seqs``, the token budget),
        so while prefills are short it holds fewer waiting than Dynamo's one-at-a-time worker would
        leave queued. Requests held at the gateway are not counted (they have no decode replica yet).
        Read over ``svc.prefill_live``: a gone replica holds no request (each way out, ``_retire``, empties
        or fails its queue first), so it adds nothing, and ``svc.replicas`` keeps every one ever made."""
        return sum(len(r.waiting) for r in svc.prefill_live)

    def _spill(self, svc: ServiceSim, decoders: list[Replica], priority: int) -> list[Replica]:
        """The candidates a fresh arrival's decode pick chooses among under ``pd_saturation_filter``
        (``SimulatorConfig``): ``decoders`` (the ready decode and aggregated replicas) less the decode
        replicas while every routable prefill replica is saturated, then less those saturated by the
        per-pod rule (``_saturated``); with none left, the first step's (so a burst that saturates
        every replica still goes to the aggregated ones), and with none of those, all of ``decoders``.

        The second step is llm-d's saturation filter (llm-d-router, commit 39142fb,
        ``pkg/epp/framework/plugins/flowcontrol/saturationdetector/utilization/detector.go``,
        ``Detector.Filter``: it keeps the endpoints whose waiting queue and KV usage are under the
        detector's thresholds times ``1 + headroom``, and returns every endpoint when none is). The
        first is this simulator's extension: llm-d filters the decode and prefill profiles apart, and
        its prefill filter, failing open, still sends a request to a saturated prefill pool once its
        decode pod is picked; here a decode replica stands for its pair, so past the prefill pool's
        saturation the aggregated replicas take the burst (issue 34: a prefill replica absorbs 1.17x
        its modelled rate, an aggregated one 2.5-2.8x, ``benchmarks/pd_slack.py``). The per-pod rule
        is the one ``_drain_gateway`` uses (saturated past ``queue_depth_threshold`` waiting, where
        the filter's limit is reached at it: one request apart).

        With ``simulator.prefill_priority`` a prefill replica counts as saturated for an arrival of
        ``priority`` by the requests it would queue behind there (``PrefillReplica.ahead``: those of its
        priority or a higher one), not by its whole queue: a burst of lower priorities queued at the
        pool does not spill a higher-priority arrival that would overtake it."""
        prefillers = [r for r in svc.prefill_ready if not r.cordoned] or svc.prefill_ready
        pool_full = all(self.prefill_saturated(r, priority) for r in prefillers)
        paired = [r for r in decoders if not (pool_full and isinstance(r, DecodeReplica))]
        return [r for r in paired if not self._saturated(r)] or paired or decoders

    def prefill_saturated(self, r: Replica, priority: int) -> bool:
        """Whether prefill replica ``r`` counts as saturated for a fresh arrival of ``priority`` in
        ``_spill``'s pool test: the gateway's per-pod rule (``_saturated``), its queue counted, under
        ``simulator.prefill_priority``, as the requests the arrival would wait behind
        (``PrefillReplica.ahead``). ``benchmarks/pd_misses.py`` records the pool's state by it."""
        if not self._pd_priority:
            return self._saturated(r)
        g = self.cfg.simulator.gateway
        return bool((isinstance(r, PrefillReplica) and r.ahead(priority) > g.queue_depth_threshold)
                    or r.kv_used > g.kv_cache_threshold * r.kv_cap)

    def on_prefilled(self, sr: SimRequest, replica: PrefillReplica, now: float) -> None:
        """Called by a prefill replica when ``sr``'s prompt is prefilled: its decode pod's sidecar sends it
        to the decode replica (``DecodeReplica.receive``); if that replica is gone, the attempt fails."""
        _, d = self._handoffs[sr]
        d.inbound -= 1
        if d.state == GONE:
            self._end_attempt(sr, FAILED)
            return
        d.receive(sr, now)

    def push_transfer(self, t: float, sr: SimRequest) -> None:
        """Schedule the end of ``sr``'s KV read at ``t`` (seconds)."""
        self._push(t, _TRANSFER, sr, 0)

    def slow_link(self, window: LinkSlowdown) -> None:
        """Add a link slowdown window (a fault injected in code, as ``simulator.link_slowdowns``)."""
        self._link_windows.append(window)

    def transfer_seconds(self, replica: DecodeReplica, tokens: int, now: float) -> float:
        """Seconds for ``replica`` to read ``tokens`` tokens of KV, a read starting at ``now``:
        ``KVTransfer.seconds`` with the bandwidth divided by the product of the ``bandwidth_factor`` of
        the service's link slowdown windows holding ``now`` and their ``extra_latency_s`` added."""
        factor, extra = 1.0, 0.0
        for w in self._link_windows:
            if (w.service or self.cfg.services[0].name) == replica.service and w.active(now):
                factor *= w.bandwidth_factor
                extra += w.extra_latency_s
        return replica.link.seconds(tokens, replica.profile.kv_bytes_per_token, factor, extra)

    def _transfer_done(self, sr: SimRequest) -> None:
        """``sr``'s KV has been read: its prefill replica frees it, its decode replica computes on."""
        handoff = self._handoffs.pop(sr, None)
        if handoff is None:  # the attempt ended during the read
            return
        p, d = handoff
        p.release(sr, self.now)
        d.loaded(sr, self.now)
        svc = self.services[p.service]
        if svc.gateway:  # the prefill replica's KV freed may free it (_drain_gateway)
            self._drain_gateway(svc)

    def _least_outstanding_by_heap(self, svc: ServiceSim) -> Replica:
        """``least_outstanding(_routable(svc), svc.weights)`` from a heap of the routable replicas by
        (score, position in ``svc.ready``): the same replica (the lowest score, the earliest on a tie),
        in O(log n) a request where the scan is O(n) (a third of the run at x100, 55 replicas).

        Each replica's entry is re-made when its outstanding count changed (``Replica.route_marks``);
        the heap is rebuilt when the routable set changed (``ServiceSim.invalidate_routes``) or it holds
        too many stale entries.
        """
        weights = svc.weights
        heap = svc.route_heap
        marks = svc.route_marks
        # each entry: least_outstanding's score, Replica.outstanding spelled out (per request), a new version
        if heap is None or len(heap) > 4 * len(svc.ready) + 64:
            for r in marks:
                r._marked = False
            marks.clear()
            svc.route_epoch += 1
            epoch = svc.route_epoch
            heap = []
            for r in self._routable(svc):
                r.route_epoch = epoch
                r.route_ver += 1
                heap.append(((len(r.waiting) + len(r.prefilling) + r.n_dec + 1) / weights[r.variant],
                             r.route_seq, r.route_ver, r))
            heapify(heap)
            svc.route_heap = heap
        else:
            epoch = svc.route_epoch
            for r in marks:
                r._marked = False
                if r.route_epoch == epoch:
                    r.route_ver += 1
                    heappush(heap, ((len(r.waiting) + len(r.prefilling) + r.n_dec + 1) / weights[r.variant],
                                    r.route_seq, r.route_ver, r))
            marks.clear()
        while True:
            _, _, ver, best = heap[0]
            if ver == best.route_ver and best.route_epoch == epoch:
                return best
            heappop(heap)

    def _saturated(self, r: Replica) -> bool:
        """The gateway's saturation rule (``GatewayConfig``): too many waiting, or the KV cache too full."""
        g = self.cfg.simulator.gateway
        return len(r.waiting) > g.queue_depth_threshold or r.kv_used > g.kv_cache_threshold * r.kv_cap

    def _pool_saturation(self, pods: list[Replica]) -> float:
        """The pool's saturation (``GatewayConfig``, ``pool``): the mean over ``pods`` of each one's
        ``max(waiting / queue_depth_threshold, kv usage / kv_cache_threshold)``; inf with no pod."""
        g = self.cfg.simulator.gateway
        if not pods:
            return math.inf
        return _mean_utilization(pods, g.queue_depth_threshold, g.kv_cache_threshold)

    def _admitter_saturation(self, pods: list[Replica]) -> float:
        """The probabilistic admitter's saturation of ``pods`` (llm-d-router v0.10.0
        ``probabilisticadmitter/plugin.go``, ``computeSaturation``): the pool rule's mean with the
        admitter's own thresholds (``GatewayConfig.admitter_*``); 0 with no pod (the plugin then admits)."""
        g = self.cfg.simulator.gateway
        return _mean_utilization(pods, g.admitter_queue_depth_threshold, g.admitter_kv_cache_threshold) if pods else 0.0

    def _concurrency_saturation(self, svc: ServiceSim, pods: list[Replica]) -> float:
        """The pool's saturation (``GatewayConfig``, ``concurrency``, llm-d-router v0.10.0
        ``concurrency/detector.go`` ``Saturation``): ``requests``: requests in flight over the pods'
        ``max_concurrency`` summed; ``tokens``: tokens in flight over their ``max_token_concurrency``
        summed; ``hybrid``: the mean over the pods of the larger of the two ratios; 1 with no pod."""
        if not pods:
            return 1.0
        mode = self.cfg.simulator.gateway.concurrency_mode
        if mode == "requests":
            return sum(r.outstanding for r in pods) / sum(svc.max_concurrency[r.variant] for r in pods)
        if mode == "tokens":
            return sum(svc.tokens.get(r.rid, 0) for r in pods) / sum(svc.max_tokens[r.variant] for r in pods)
        return sum(max(r.outstanding / svc.max_concurrency[r.variant],
                       svc.tokens.get(r.rid, 0) / svc.max_tokens[r.variant]) for r in pods) / len(pods)

    def _below_limits(self, svc: ServiceSim, r: Replica) -> bool:
        """The detector's filter (``detector.go`` ``admits``): ``r`` below its request limit
        (``requests``), its token limit (``tokens``) or both (``hybrid``), each ``x (1 + headroom)``."""
        mode = self.cfg.simulator.gateway.concurrency_mode
        if mode != "tokens" and r.outstanding >= svc.dispatch_limit[r.variant]:
            return False
        return mode == "requests" or svc.tokens.get(r.rid, 0) < svc.token_limit[r.variant]

    def _charge(self, svc: ServiceSim, sr: SimRequest, r: Replica) -> None:
        """Count ``sr``, dispatched to ``r``, in ``r``'s tokens in flight (``token_charge``)."""
        g = self.cfg.simulator.gateway
        cached = 0
        if self.cfg.simulator.router == "prefix_affinity" and sr.req.hash_ids:
            cached = min(sr.req.input_tokens, r.cache.match_blocks(sr.req.hash_ids) * r.cache.block_tokens)
        sr.gw_tokens = int(token_charge(np.asarray(sr.req.input_tokens), np.asarray(cached), g))
        sr.gw_rid = r.rid
        svc.tokens[r.rid] = svc.tokens.get(r.rid, 0) + sr.gw_tokens

    def _uncharge(self, sr: SimRequest) -> None:
        """Release what ``sr`` was charged, once (the producer's ``OnEvicted``)."""
        if sr.gw_tokens:
            tokens = self.services[self.target].tokens
            tokens[sr.gw_rid] -= sr.gw_tokens
            sr.gw_tokens = 0

    def on_first_token(self, sr: SimRequest, now: float) -> None:
        """Called by a replica at a request's first token: the EPP frees its tokens then when it does."""
        if self._release_first:
            self._uncharge(sr)

    def _pump(self, svc: ServiceSim) -> None:
        """Dispatch queued requests while the gateway's saturation rule allows (``GatewayConfig``), the
        router choosing among the replicas it allows."""
        flow = svc.flow
        assert flow is not None
        g = self.cfg.simulator.gateway
        if g.saturation != "pod":
            pods = self._routable(svc)
            ceilings = svc.ceilings
            while flow.waiting:
                if g.saturation == "concurrency":
                    sat = self._concurrency_saturation(svc, pods)
                    candidates = [r for r in pods if self._below_limits(svc, r)]
                else:
                    sat, candidates = self._pool_saturation(pods), pods
                lowest = next((p for p, ceiling in enumerate(ceilings) if sat < ceiling), None)
                if lowest is None or not candidates:
                    return
                sr = flow.pop(self.now, lowest)
                if sr is None:  # only held bands wait
                    return
                if self._released(svc, sr, lambda: pods):
                    r = self._pick(svc, candidates, sr)
                    if self._count_tokens:
                        self._charge(svc, sr, r)
                    r.enqueue(sr, self.now)
            return
        pods = self._routable(svc)
        free = [r for r in pods if not self._saturated(r)]
        while free and flow.waiting:
            sr = flow.pop(self.now)
            assert sr is not None
            if not self._released(svc, sr, lambda: pods):
                continue
            r = self._pick(svc, free, sr)
            r.enqueue(sr, self.now)
            if self._saturated(r):
                free.remove(r)

    def _fill(self, svc: ServiceSim, r: Replica) -> None:
        """After a step of ``r``: the pool rule dispatches as ``_pump``; the per-pod rule dispatches to
        ``r`` while it is ready and unsaturated."""
        flow = svc.flow
        assert flow is not None
        if self.cfg.simulator.gateway.saturation != "pod":
            self._pump(svc)
            return
        while flow.waiting and r.state == READY and not r.cordoned and not self._saturated(r):
            sr = flow.pop(self.now)
            assert sr is not None
            if self._released(svc, sr, lambda: self._routable(svc)):
                r.enqueue(sr, self.now)

    def _released(self, svc: ServiceSim, sr: SimRequest, pods: Callable[[], list[Replica]]) -> bool:
        """``sr``, just dispatched by flow control, passes the EPP's admitter on ``pods()`` (``Gateway.release``;
        listed only when the admitter reads them); one it rejects ends here, shed (its client retries
        an HTTP 500 as a 429)."""
        assert svc.flow is not None
        if svc.flow.release(sr, lambda: self._admitter_saturation(pods())):
            return True
        self._end_attempt(sr, SHED)
        return False

    def _end(self, sr: SimRequest, status: str) -> None:
        sr.status = status
        sr.t_finish = self.now
        if sr.gw_tokens:
            self._uncharge(sr)

    def _end_attempt(self, sr: SimRequest, status: str) -> None:
        """End the attempt ``sr`` with ``status``; its client sends it again (``ClientConfig``) or the
        request ends with it."""
        self._end(sr, status)
        if self._handoffs:
            handoff = self._handoffs.pop(sr, None)
            if handoff is not None:  # a remote prefill in progress: its prefill replica frees what it holds
                if sr.replica is handoff[0]:  # still prefilling: never sent on to its decode replica
                    handoff[1].inbound -= 1
                handoff[0].release(sr, self.now)
        clients = self.cfg.simulator.clients
        if status in RETRIED and sr.attempt < clients.max_retries and not self._stopping:
            delay = min(clients.backoff_base_s * 2 ** sr.attempt, clients.backoff_cap_s)
            delay *= 1 - clients.jitter * self._jitter.random()
            self.retries += 1
            self._push(self.now + delay, _RETRY, sr, 0)
            return
        self._close(sr)

    def _close(self, sr: SimRequest) -> None:
        rid = sr.req.rid
        if self._closed[rid]:
            return
        self._closed[rid] = 1
        self.open_requests -= 1
        if self._final is None:  # keep_requests=False: what results read, then the attempt goes
            self._status[rid] = _STATUS_CODE[sr.status]
            if sr.t_first is not None:
                self._t_first[rid] = sr.t_first
            if sr.t_finish is not None:
                self._t_finish[rid] = sr.t_finish
            self._live.pop(rid, None)
        if sr.status == SHED:
            self.shed_final += 1
            self.shed_mid_workflow += sr.continuing

    def _retry(self, prev: SimRequest) -> None:
        """The client of ``prev`` sends its request again, as a new attempt."""
        sr = SimRequest(prev.req, prev.attempt + 1, self.now)
        if self._final is not None:
            self._final[prev.req.rid] = sr
        else:
            self._live[prev.req.rid] = sr
        self._push(self.now + self.cfg.simulator.client_timeout_s, _TIMEOUT, sr, 0)
        self._arrive(sr)

    def on_complete(self, sr: SimRequest, now: float) -> None:
        """Called by a replica when a request has produced its last token."""
        self._end(sr, COMPLETED)
        rid = sr.req.rid
        if not self._closed[rid]:  # _close spelled out: per request
            self._closed[rid] = 1
            self.open_requests -= 1
            if self._final is None:
                self._status[rid] = _COMPLETED_CODE
                if sr.t_first is not None:
                    self._t_first[rid] = sr.t_first
                if sr.t_finish is not None:
                    self._t_finish[rid] = sr.t_finish
                self._live.pop(rid, None)
        flow = self._target_svc.flow
        if flow is not None:
            flow.completed(now)

    def _drain_gateway(self, svc: ServiceSim) -> None:
        """Release the gateway's backlog (``svc.gateway``, held while no replica was ready), head first,
        one request at a time: each goes where the router sends a fresh arrival (``_route_pd``,
        ``_pick``), among the ready replicas the gateway's per-pod saturation rule leaves free
        (``_saturated``: at most ``queue_depth_threshold`` waiting, KV use at most ``kv_cache_threshold``,
        the endpoint picker's defaults). With none free the rest stays held; it is released again after
        a step of any of the service's replicas, a KV read's end, an arrival (which queues behind it),
        or replicas turning ready (after all those turning ready at the same instant are). So a backlog
        spreads by load over the replicas that turn ready together, instead of all going to the first:
        an endpoint picker holds a request rather than queue it on a replica it judges saturated
        (llm-d v0.9 docs, "Flow Control": held during saturation, "no-regret scheduling"), and
        Dynamo's router sends none to a worker over its busy thresholds (Dynamo v1.2.1 docs, "Request
        Rejection": the push router skips busy workers)."""
        gateway = svc.gateway
        if svc.pd is not None:
            while gateway and self._route_pd(svc, gateway[0], held=True):
                gateway.popleft()
            return
        free = [r for r in self._routable(svc) if not self._saturated(r)]
        while gateway and free:
            r = self._pick(svc, free, gateway[0])
            r.enqueue(gateway.popleft(), self.now)
            if self._saturated(r):
                free.remove(r)

    def _time_out(self, sr: SimRequest) -> None:
        """The client of ``sr`` gave up: take it out of wherever it is; the attempt failed."""
        svc = self.services[self.target]
        if sr.replica is not None:
            sr.replica.abort(sr, self.now)
        elif svc.flow is not None:
            svc.flow.discard(sr, self.now)
        else:
            svc.gateway.remove(sr)
        self._end_attempt(sr, FAILED)

    def _deadline(self, sr: SimRequest) -> None:
        """A deferred attempt's deadline: shed it if it is still queued."""
        flow = self.services[self.target].flow
        if sr.status is None and sr.queued_s is not None and flow is not None:
            flow.expire(sr, self.now)
            self._end_attempt(sr, SHED)

    # ------------------------------------------------------------------ replicas
    def _new_replica(self, svc: ServiceSim, v: Variant, ready_now: bool = False) -> Replica:
        on_warm_nodes = sum(1 for r in svc.replicas if r.variant == v.name and r.state != GONE and r.warm_start)
        warm = on_warm_nodes < v.warm_nodes  # a node holding the weights is free
        delay = 0.0 if ready_now else (v.startup_warm_s if warm else v.startup_cold_s)
        placed = self.now if ready_now else self._placed_s(svc.cfg.name, v.name)
        self._rid += 1
        role = svc.role_of.get(v.name)
        args = (self._rid, svc.cfg.name, v.name,
                get_profile(v.profile).slowed(self.cfg.simulator.slowdown.get(v.name, 1.0)), self.cfg.engine,
                v.kv_cache_tokens, self.workload.block_tokens, self, self.now, placed + delay,
                v.price_per_replica_hour, warm)
        r: Replica
        if role is None:
            r = Replica(*args)
        elif role == PREFILL:
            r = PrefillReplica(*args)
            if self.cfg.simulator.prefill_priority:
                r.priority_order = True
        else:
            assert svc.pd is not None
            r = DecodeReplica(*args, link=svc.pd.kv_transfer)
        r.scheduled_s = placed
        if self._route_heap and role is None:
            r.route_marks = svc.route_marks
            r.on_cordon = svc.invalidate_routes
        svc.replicas.append(r)
        if role == PREFILL:
            svc.prefill_live.append(r)
        if ready_now:
            self._on_ready(r)
        else:
            self._push(r.ready_s, _READY, r, 0)
        return r

    def _placed_s(self, service: str, variant: str) -> float:
        """When a pod of ``variant`` asked for now gets a node: now, or the end of the unschedulable
        window it falls in (inf when that window never ends)."""
        t = self.now
        for u in self.cfg.simulator.unschedulable:
            if (u.service or self.cfg.services[0].name) == service and u.variant == variant \
                    and u.start_s <= t and (u.end_s is None or t < u.end_s):
                t = float("inf") if u.end_s is None else u.end_s
        return t

    def _on_ready(self, r: Replica) -> None:
        if r.state != PROVISIONING:
            return
        r.state = READY
        svc = self.services[r.service]
        svc.ready_seq += 1
        r.route_seq = svc.ready_seq
        svc.ready_list(r).append(r)
        svc.invalidate_routes()
        if svc.flow is not None:
            self._pump(svc)
        elif svc.gateway:  # released once every replica turning ready at this instant is (_drain_gateway)
            self._push(self.now, _DRAIN, svc, 0)

    def _retire(self, r: Replica) -> None:
        svc = self.services[r.service]
        ready = svc.ready_list(r)
        if r in ready:
            ready.remove(r)
            svc.invalidate_routes()
        if r.role == PREFILL and r in svc.prefill_live:
            svc.prefill_live.remove(r)
        r.state = GONE
        r.gone_s = self.now
        r.refresh_gauges()
        # a gone replica serves nothing again; it stays listed for its cost, so its prefix cache (up
        # to its KV cache's blocks, ~0.1 MB) would stay with it, once per replica ever retired
        r.cache = PrefixCache(r.kv_cap, r.cache.block_tokens)

    def on_drained(self, replica: Replica, now: float) -> None:
        """Called by a draining replica when its last request has finished (it stays while it holds KV
        for a prefill/decode hand-over)."""
        if replica.holds_kv:
            return
        self._retire(replica)

    def _kill(self, r: Replica) -> None:
        """The termination grace of a draining replica ran out: what it still holds fails."""
        if r.state != DRAINING:
            return
        failed = r.fail_all(self.now)
        self.cut_requests += len(failed)
        for sr in failed:
            r.metrics.success["abort"] += 1
            self._end_attempt(sr, FAILED)
        self._retire(r)

    def crash(self, service: str, variant: str) -> int:
        """Crash the oldest ready replica of ``variant`` (a prefill or decode pool's too) now (its requests
        fail, a replacement starts). Returns the number of requests that failed; 0 when no replica of it
        is ready."""
        entry: dict[str, object] = {}
        self._crash(service, variant, entry)
        return int(entry["failed_requests"])  # type: ignore[call-overload]

    def crash_replica(self, r: Replica) -> int:
        """Crash the ready replica ``r`` now (its requests fail, a replacement starts). Returns the number
        of requests that failed."""
        if r.state != READY:
            raise ValueError(f"replica {r.rid} of {r.variant} is not ready: only a ready replica crashes")
        entry: dict[str, object] = {}
        self._crash_one(r, entry)
        return int(entry["failed_requests"])  # type: ignore[call-overload]

    def _crash(self, service: str, variant: str, entry: dict[str, object] | None = None) -> None:
        svc = self.services[service]
        pool = svc.ready if variant in svc.variants else svc.prefill_ready + svc.decode_ready
        victims = [r for r in pool if r.variant == variant]
        if entry is None:  # a configured crash: reported by crash_outcomes
            entry = {}
            self.crash_log.append(entry)
        entry.update(time_s=self.now, service=service, variant=variant)
        if not victims:
            entry.update(applied=False, failed_requests=0, why="no ready replica of the variant")
            return
        self._crash_one(min(victims, key=lambda x: x.ready_s), entry)

    def _crash_one(self, r: Replica, entry: dict[str, object]) -> None:
        svc = self.services[r.service]
        variant = r.variant
        failed = r.fail_all(self.now)
        for sr in failed:
            r.metrics.success["error"] += 1
            self._end_attempt(sr, FAILED)
        entry.update(applied=True, failed_requests=len(failed))
        self._retire(r)
        self._new_replica(svc, svc.all_variants[variant])

    def follow_itl_budget(self, service: str, itl_budget: Mapping[str, int]) -> bool:
        """Let ``service``'s concurrency detector take a published ITL budget (variant -> requests in
        flight per replica, each >= 1) when its gateway follows one (``GatewayConfig.budget_refresh_s``)
        and the last change is at least that long ago: each variant's ``max_concurrency`` (``auto-min``:
        the fewest published, for all) and its filter. True when it changed them."""
        g = self.cfg.simulator.gateway
        svc = self.services[service]
        if g.budget_refresh_s is None or svc.flow is None or not itl_budget \
                or self.now - svc.budget_set_s < g.budget_refresh_s:
            return False
        if g.max_concurrency == "auto-min":
            new = dict.fromkeys(svc.max_concurrency, min(itl_budget.values()))
        else:
            new = {v: itl_budget.get(v, n) for v, n in svc.max_concurrency.items()}
        svc.set_concurrency(new, g.headroom)
        svc.budget_set_s = self.now
        return True

    def set_replicas(self, service: str, variant: str, desired: int, remove_first: Sequence[int] = ()) -> int:
        """Actuate: make ready + starting replicas of ``variant`` equal ``desired``.

        Scale-down removes the replicas whose ids are in ``remove_first`` first (in that order, those
        of this variant and not gone), then starting replicas (newest first), then drains the ready
        replicas holding the fewest requests. Returns the change applied (replicas added, negative if
        removed).
        """
        svc = self.services[service]
        v = svc.all_variants[variant]
        current = svc.counts(variant).current
        delta = desired - current
        if delta > 0:
            for _ in range(delta):
                self._new_replica(svc, v)
        elif delta < 0:
            starting = [r for r in svc.replicas if r.variant == variant and r.state == PROVISIONING]
            starting.sort(key=lambda r: -r.created_s)
            pool = svc.ready if variant in svc.variants else svc.prefill_ready + svc.decode_ready
            ready = [r for r in pool if r.variant == variant]
            ready.sort(key=lambda r: (r.outstanding, -r.ready_s))
            by_id = {r.rid: r for r in starting + ready}
            named = [by_id[i] for i in dict.fromkeys(remove_first) if i in by_id]
            named_ids = {r.rid for r in named}
            rest = [r for r in starting + ready if r.rid not in named_ids]
            for r in (named + rest)[: -delta]:
                r.removed_s = self.now
                if r.state == PROVISIONING or (r.outstanding == 0 and not r.holds_kv):
                    self._retire(r)
                else:
                    r.state = DRAINING
                    svc.ready_list(r).remove(r)
                    svc.invalidate_routes()
                    grace = self.cfg.simulator.termination_grace_s
                    if grace is not None:
                        self._push(self.now + grace, _KILL, r, 0)
        if delta:
            self.scale_events += 1
        return delta

    def fail_open(self) -> int:
        """End the simulation: fail every request still open (e.g. past the drain limit), with no
        retry. Returns how many."""
        self._stopping = True
        n = 0
        if self._final is not None:
            open_attempts: Iterable[SimRequest] = self._final
        else:  # the same order: the requests sent, then those never sent (their first attempt, made now)
            sent = [self._live[rid] for rid in sorted(self._live)]
            open_attempts = itertools.chain(sent, (SimRequest(r) for r in self._unsent()))
        for sr in open_attempts:
            if not self._closed[sr.req.rid]:
                if sr.status is None:
                    self._end(sr, FAILED)
                self._close(sr)
                n += 1
        return n

    def alive_replicas(self, service: str) -> list[Replica]:
        """Replicas of ``service`` that are not gone."""
        return [r for r in self.services[service].replicas if r.state != GONE]
