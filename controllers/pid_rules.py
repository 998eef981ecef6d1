"""The PID controller's rules around its control law, each a pure function (``controllers.pid``).

``PIDController.decide`` runs them as a chain, in this order, on the PID's output ``u`` (the
service's target capacity, requests/s):

1. ``overload_target``: at the error clip, or while the gateway sheds, size from the queue and the
   arrivals, not the latency;
2. ``demand_cap``: a scale-up asks for at most ``STARTING_DEMAND_CAP`` x the demand while capacity is
   settling or the queue is not growing;
3. ``demand_floor``: a scale-down leaves at least ``DOWN_DEMAND_FLOOR`` x the arrivals (none while
   they are unknown or may read low);
   (a prefill or decode pool's loop also runs ``backlog_cap`` after ``demand_cap``: a scale-up sized
   for the arrivals plus the service's backlog drained over ``BACKLOG_DRAIN_S``, not for the backlog
   as steady demand; and ``slo_hold`` after ``against_error``: no scale-down of a pool while the
   service misses its SLO)
4. (the target is split into replicas per variant, ``controllers.split``)
5. ``against_error``: never move against the error's sign, nor scale up with nothing to serve or a
   backlog that drains before a replica could start (returns why, or None);
6. ``reanchor``: where the integral goes after a hold (the fleet, bumpless).

What each rule reads of the tick is a ``Load``. Units: requests/s for rates and capacities, seconds
for times, requests for queue lengths. The module docstring of ``controllers.pid`` gives why each
rule exists; docs/controllers.md the runs that found them.
"""

from __future__ import annotations

from dataclasses import dataclass

OVERLOAD_LOOKBACK_S = 60.0
"""Seconds of queue history the overload and demand rules read (and "recently ready" means)."""

STARTING_DEMAND_CAP = 1.5
"""The target is at most this many times the demand (arrivals, or completions plus the queue's
growth) unless the queue grows: at its setpoint the PID runs near 1.2-1.3x the demand in capacity."""

DOWN_DEMAND_FLOOR = 1.25
"""A scale-down leaves at least this many times the window's mean arrivals in capacity: the PID's
own operating ratio at its setpoint (1.2-1.3x), so noise around a steady mean cannot take it below."""

QUEUE_NOISE = 0.1
"""A queue that grows by at most one request plus this share of the running ones over the lookback
is noise, not a growing queue (the fault suite's prefill-sinusoid: one more waiting request lifted
the demand cap while the window still showed a drained backlog)."""

BACKLOG_DRAIN_S = 300.0
"""Seconds over which a pool's loop plans to drain the service's backlog (``backlog_cap``): one cold
start (``startup_cold_s`` of every shipped fleet file, 300 s), so replicas ordered now arrive while the
backlog is still there to serve. The fault suite's decode-pool-loss: the gateway held about 3,500
requests (300 s x 12 req/s) until the lost decode replicas were back, and the pools' loops read the
released backlog at the error clip as an overload of four times their capacity (prefill 2 -> 8,
decode 3 -> 10 at 12 req/s: more than twice the demand)."""

SLO_MISSED_RATIO = 1.0
"""``slo_mean_ratio`` (the larger of mean TTFT / TTFT SLO and mean TPOT / ITL SLO, interactive) at or
above which the service misses its SLO (``slo_hold``): the mean at the target, so at least a large share
of the requests miss it (the PID's setpoint, 0.3, is where they meet it)."""

History = tuple[tuple[float, float], ...]
"""``(time s, queue length)`` samples, oldest first."""

ReadyHistory = tuple[tuple[float, tuple[tuple[str, int], ...]], ...]
"""``(time s, ((variant, ready replicas), ...))`` samples, oldest first."""


@dataclass(frozen=True)
class Load:
    """What the rules read of one tick of one service.

    Attributes:
        capacity_rps: capacity of the replicas ready and starting.
        ready_capacity_rps: capacity of the ready replicas.
        served_capacity_rps: mean capacity of the replicas ready over the signal window, the capacity
            that served ``served_rps`` (``served_capacity``); None: the ready capacity.
        out_max: the most capacity the variants' caps allow.
        served_rps: completion rate (``request_rate_rps``); None: unknown.
        arrivals_rps: the arrival rate (``arrival_rate_rps``: the gateway's counter, else inferred from the
            completions and the growth of the held requests over the window); None: unknown.
        arrivals_low: ``arrivals_rps`` may read low: inferred (no gateway counter) while a ready replica
            reports nothing, so its completions and held requests are missing from the sums
            (``autoscaler.loop.estimate.ArrivalInference``). ``demand_floor`` reads it as unknown.
        shedding: the gateway sheds some priority (``gateway_shed_rps.<p>`` > 0).
        history: queue samples over ``OVERLOAD_LOOKBACK_S``.
        running: requests running now; None: unknown.
        queue: requests waiting now; None: unknown.
        settling: capacity is settling: replicas starting, one ready within ``OVERLOAD_LOOKBACK_S``,
            or a ready pod that reports nothing yet.
        warm_start_s: the shortest warm start of the service's variants.
    """

    capacity_rps: float
    ready_capacity_rps: float
    out_max: float
    served_rps: float | None
    arrivals_rps: float | None
    shedding: bool
    history: History
    running: float | None
    queue: float | None
    settling: bool
    warm_start_s: float
    served_capacity_rps: float | None = None
    arrivals_low: bool = False


def record_queue(history: History, now_s: float, queue: float | None) -> History:
    """``history`` with ``(now_s, queue)`` appended and samples older than ``OVERLOAD_LOOKBACK_S`` dropped;
    unchanged while the queue is unknown."""
    if queue is None:
        return history
    return (*(h for h in history if h[0] >= now_s - OVERLOAD_LOOKBACK_S), (now_s, queue))


def record_ready(history: ReadyHistory, now_s: float, window_s: float, ready: dict[str, int]) -> ReadyHistory:
    """``history`` with ``(now_s, ready)`` appended and samples older than ``window_s`` dropped."""
    return (*(h for h in history if h[0] > now_s - window_s), (now_s, tuple(sorted(ready.items()))))


def served_capacity(history: ReadyHistory, weights: dict[str, float]) -> float | None:
    """Mean over the samples of ``history`` of their ready capacity counted in ``weights`` (variant
    -> requests/s per replica; a variant it lacks counts 0), requests/s; None without samples.

    The completions a window's rates show were served by the replicas ready over that window, not
    by the ones ready now: replicas that became ready at the end of a surge's window served none of
    it, and arrivals over completions times the capacity ready now counts them as if they had (the
    surge-long scenario's PID ordered 2.6x its need at a flow-controlled gateway that way).
    """
    if not history:
        return None
    return sum(sum(n * weights.get(v, 0.0) for v, n in counts) for _, counts in history) / len(history)


def overload_factor(history: History, served: float | None, cap: float) -> float | None:
    """Arrivals over completions, at most ``cap``: ``(served + queue growth) / served``; None when unknown.

    Args:
        history: queue samples; growth is between the first and last.
        served: completion rate, requests/s (None or 0: unknown).
        cap: the largest factor returned.
    """
    if not served or len(history) < 2 or history[-1][0] <= history[0][0]:
        return None
    growth = max(history[-1][1] - history[0][1], 0.0) / (history[-1][0] - history[0][0])
    return min((served + growth) / served, cap)


def queue_growing(history: History, running: float | None) -> bool:
    """Whether the queue grew between the first and last sample of ``history`` by more than
    ``1 + QUEUE_NOISE * running`` requests (``running``: requests running now; None counts as 0)."""
    return len(history) >= 2 and history[-1][1] - history[0][1] > 1 + QUEUE_NOISE * (running or 0.0)


def drain_time_s(history: History) -> float | None:
    """Seconds until the queue empties at its rate of decline between the first and last sample of
    ``history``; None when it is empty or not declining."""
    if len(history) < 2 or history[-1][0] <= history[0][0] or history[-1][1] <= 0:
        return None
    rate = (history[0][1] - history[-1][1]) / (history[-1][0] - history[0][0])
    return history[-1][1] / rate if rate > 0 else None


def overload_target(u: float, error: float, error_clip: float, load: Load) -> float:
    """The target raised from the arrivals over the completions when the latency no longer says how
    much is missing: the error at ``error_clip``, or positive while the gateway sheds (the shed demand
    never reaches a pod). Each factor is at most ``1 + error_clip``; the result at most ``out_max``;
    ``u`` unchanged otherwise or when no factor is known.

    - The queue's factor (``overload_factor``) times the ready capacity. On a step the window's
      completions lag the rise (part of the window ran below capacity), so this over-reaches by the
      capacity that just became ready, which is what the step needs (the step scenario lost 3.5
      points of interactive attainment and cost 16 % more when it was the window's capacity).
    - While shedding, the gateway's arrivals over completions times ``served_capacity_rps`` (else the
      ready capacity): the gateway holds the pool at its limit, so the window's completions are what
      the window's replicas serve; times the capacity ready *now*, replicas ready at the end of the
      window counted as if they had served all of it (surge-long's PID behind a concurrency-limited
      gateway ordered 2.6x its need, 14 H100s that arrived as the surge ended).
    """
    if not (error >= error_clip or (load.shedding and error > 0)):
        return u
    cap = 1.0 + error_clip
    factor = overload_factor(load.history, load.served_rps, cap)
    target = u if factor is None else max(u, load.ready_capacity_rps * factor)
    if load.shedding and load.arrivals_rps is not None and load.served_rps:
        served_by = load.ready_capacity_rps if load.served_capacity_rps is None else load.served_capacity_rps
        target = max(target, served_by * min(load.arrivals_rps / load.served_rps, cap))
    return min(target, load.out_max) if target > u else u


def demand_cap(u: float, load: Load) -> float:
    """A scale-up (``u`` above the capacity) cut to ``STARTING_DEMAND_CAP`` x the demand (the larger of
    the arrivals and the completions times the queue's overload factor), never below the capacity;
    only while capacity is settling or the queue is not growing, and not while the gateway sheds
    (``overload_target`` sizes that case)."""
    if load.shedding or u <= load.capacity_rps or not (load.settling or not queue_growing(load.history, load.running)):
        return u
    demand = max(load.arrivals_rps or 0.0,
                 (load.served_rps or 0.0) * (overload_factor(load.history, load.served_rps, float("inf")) or 1.0))
    if demand <= 0:
        return u
    return max(min(u, STARTING_DEMAND_CAP * demand), load.capacity_rps)


def demand_floor(u: float, load: Load) -> float:
    """A scale-down (``u`` below the capacity) stops at ``DOWN_DEMAND_FLOOR`` x the arrivals, or at the
    capacity if that is less; ``u`` unchanged when it is no scale-down or the arrivals are known to be 0.

    Arrivals unknown, or ones that may read low (``Load.arrivals_low``): the floor is unknown, so no
    scale-down goes on its account (the capacity; missing data is never read as no demand). Read as no
    floor, pod-metrics-missing without a gateway counter took one ``down_on_missing_data`` on seeds 0-2
    (docs/controllers.md, "The estimate without a gateway").
    """
    if u >= load.capacity_rps:
        return u
    if load.arrivals_rps is None or load.arrivals_low:
        return load.capacity_rps
    return max(u, min(DOWN_DEMAND_FLOOR * load.arrivals_rps, load.capacity_rps))


def floor_unknown(u: float, load: Load) -> bool:
    """Whether ``demand_floor`` held a scale-down of ``u`` because the arrivals are unknown or may read
    low (the words the PID's reason adds)."""
    return u < load.capacity_rps and (load.arrivals_rps is None or load.arrivals_low)


def backlog_cap(u: float, load: Load, backlog: float | None) -> float:
    """A scale-up (``u`` above the capacity) cut to ``DOWN_DEMAND_FLOOR`` x the arrivals plus
    ``backlog / BACKLOG_DRAIN_S``, never below the capacity; ``u`` unchanged without known, non-zero
    arrivals or a known backlog.

    For a prefill or decode pool: its completions fall when the other pool stalls (no hand-over while
    the decode pool is lost), so the overload factor (arrivals over completions) reads the other
    pool's fault as this pool's overload, and the backlog released when it ends as steady demand.
    The arrivals are the demand of both pools (each request passes both), the backlog what must be
    drained on top; a backlog that keeps growing lifts the cap with it, so a capacity model wrong
    about a GPU cannot hold the pool below its need for good.

    Args:
        u: the target, requests/s of capacity.
        load: the tick's ``Load`` (its capacity and arrivals).
        backlog: requests waiting in the whole service (gateway and every pool), None when unknown.
    """
    if u <= load.capacity_rps or not load.arrivals_rps or backlog is None:
        return u
    return max(min(u, DOWN_DEMAND_FLOOR * load.arrivals_rps + backlog / BACKLOG_DRAIN_S), load.capacity_rps)


def slo_missed(slo_ratio: float | None) -> bool:
    """Whether a service's ``slo_mean_ratio`` says it misses its SLO: known and at or above
    ``SLO_MISSED_RATIO``."""
    return slo_ratio is not None and slo_ratio >= SLO_MISSED_RATIO


def slo_hold(change_rps: float, slo_ratio: float | None) -> str | None:
    """Why a pool's scale-down of ``change_rps`` (< 0) is held, or None: the service's ``slo_mean_ratio``
    is at or above ``SLO_MISSED_RATIO``. A pool's own signal can read calm while the service misses its
    SLO (the prefill pool idles while the decode pool is lost; it drains the released backlog fast while
    the requests' TTFT still counts their wait), and a replica removed then is missing when the backlog
    reaches it. Unknown (None): not held (no signal to hold on; the pool's own rules still apply)."""
    if change_rps >= 0 or not slo_missed(slo_ratio):
        return None
    return f"the service misses its SLO (slo_mean_ratio {slo_ratio:.3g})"


def against_error(change_rps: float, error: float, load: Load) -> str | None:
    """Why a change of ``change_rps`` of capacity is held, or None when it may go ahead.

    Held: a scale-up with the error at or below zero, with nothing running or waiting, or with a
    queue that drains within ``warm_start_s``; a scale-down with the error at or above zero. The
    reason is the parenthesis the decision's text ends with.
    """
    empty = load.running is not None and load.queue is not None and load.running + load.queue == 0
    drain_s = drain_time_s(load.history)
    draining = drain_s is not None and drain_s <= load.warm_start_s
    if not ((change_rps > 0 and (error <= 0 or empty or draining)) or (change_rps < 0 and error >= 0)):
        return None
    if error > 0 and empty:
        return "nothing is running or waiting"
    if error > 0 and draining:
        return f"the queue drains in {drain_s:.0f} s, before a new replica could start"
    return "the output disagrees with the error's sign"


def reanchor(integral: float | None, error: float, held: bool, capacity_rps: float, p: float, d: float,
             out_min: float, out_max: float) -> float | None:
    """The integral after the rules: the capacity inside the deadband (``error`` 0), so a P-term move
    does not come back as the opposite one; ``capacity - P - D`` within the output limits after a
    hold against the error (bumpless: the output is the fleet); else ``integral`` unchanged."""
    if error == 0:
        return capacity_rps
    if held:
        return min(max(capacity_rps - p - d, out_min), out_max)
    return integral
