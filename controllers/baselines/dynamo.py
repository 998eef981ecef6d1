"""NVIDIA Dynamo planner, throughput-based loop (aggregated serving: one pool per GPU generation).

Sources (``docs/anchors.md#dynamo-throughput-scaling``): ai-dynamo/dynamo
``components/src/dynamo/planner/core/throughput_scaling.py``
(read at 0c9050c), ``components/src/dynamo/planner/config/defaults.py``,
``docs/fern/design-docs/planner-design.md``, and ``components/planner/src/dynamo/planner/utils/prometheus.py``
for the metrics.

Every ``throughput_adjustment_interval`` = 180 s:

1. Observe the last interval (the loop's signals over a 180 s window, the planner's
   ``increase(...[180s])`` queries): request count ``num_req = arrival rate x 180`` (the planner reads
   ``dynamo_frontend_requests_total``, requests arriving at its frontend: here the gateway's
   ``arrival_rate_rps``, which keeps counting when the fleet saturates and completions stall), mean
   input length ``isl = prompt tokens / completed requests`` and output length ``osl = generation
   tokens / completed requests``, and the prefix-cache hit rate. No arrival (``0/0`` ISL), or the
   arrival rate unknown, makes the planner skip the interval ("Metrics contain None or NaN",
   ai-dynamo/dynamo#3131); an interval with arrivals but no completion keeps the last ISL and OSL.
2. Feed ``num_req``, ``isl`` and ``osl`` to one load predictor each (``predictors``: ``constant`` or
   ``kalman``) and forecast the next interval; the hit rate is read with last-value semantics (an
   unknown one, no prefix-cache query in the window, gives no discount: the conservative choice).
3. ``demand = predicted num_req / 180`` requests/s. Per-replica throughput at the TTFT and ITL targets,
   prefill work discounted by the hit rate (``effective_isl = isl x (1 - hit)``): the capacity model
   every controller here sizes with (``models.capacity.replica_capacity`` at the predicted mean
   lengths), our stand-in for the planner's interpolated pre-deployment profile.
4. Replicas: ``ceil(demand / per-replica throughput)``, at least ``min_endpoint`` = 1. Dynamo has one
   pool; on a fleet of several GPU generations the demand is split with ``controllers.split``
   (cheapest cost per capacity first). The GPU budget is the fleet file's replica caps (not the
   planner's default ``max_gpu_budget`` = 8).

Targets default to the planner's defaults ``ttft`` = 500 ms and ``itl`` = 50 ms; pass the service's
SLO (``dynamo:ttft=2:itl=0.1``) to plan for it instead. The correction factors of the older planner
and the load-based (FPM) loop (off by default, ``enable_load_scaling=False``) are not modelled.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from controllers.base import Controller, Decision, change_reason, hold
from controllers.baselines.predictors import PREDICTORS, ConstantPredictor
from controllers.split import cost_per_capacity, split_capacity
from models.capacity import ReplicaSpec, RequestMix, replica_capacity

if TYPE_CHECKING:
    from autoscaler.config import EngineConfig, Service
    from autoscaler.state import ServiceEstimate

THROUGHPUT_ADJUSTMENT_INTERVAL_S = 180.0
TTFT_TARGET_S = 0.5
ITL_TARGET_S = 0.05
MIN_ENDPOINT = 1
DEFAULT_PREDICTOR = "kalman"


def planner_replicas(demand_rps: float, svc: Service, current: dict[str, int], per_replica_rps: dict[str, float],
                     min_endpoint: int = MIN_ENDPOINT) -> dict[str, int]:
    """Step 4: replicas per variant covering ``demand_rps``, at least ``min_endpoint`` in total."""
    desired = split_capacity(demand_rps, svc.variants, current, per_replica_rps)
    cheapest_first = sorted(svc.variants, key=lambda v: cost_per_capacity(v, per_replica_rps[v.name]))
    for v in cheapest_first:
        while sum(desired.values()) < min_endpoint and desired[v.name] < v.cap:
            desired[v.name] += 1
    return desired


class DynamoPlanner(Controller):
    """The throughput planner (module docstring).

    Class attribute ``kind``: the controller's spec name in error messages.

    Args:
        engine: the vLLM engine settings of each replica.
        predictor: ``kalman`` or ``constant``.
        ttft, itl: targets, seconds.
    """


    kind = "dynamo"

    def __init__(self, engine: EngineConfig, predictor: str = DEFAULT_PREDICTOR, ttft: float = TTFT_TARGET_S,
                 itl: float = ITL_TARGET_S, *, name: str = "dynamo") -> None:
        super().__init__(name, THROUGHPUT_ADJUSTMENT_INTERVAL_S, THROUGHPUT_ADJUSTMENT_INTERVAL_S, own_guard=True)
        if predictor not in PREDICTORS:
            raise ValueError(f"{self.kind} predictor must be one of {', '.join(PREDICTORS)}, got '{predictor}'")
        if ttft <= 0 or itl <= 0:
            raise ValueError(f"{self.kind} ttft and itl targets must be > 0, got {ttft}, {itl}")
        self.engine = engine
        self.predictor = predictor
        self.ttft = ttft
        self.itl = itl
        self.load: dict[str, dict[str, ConstantPredictor]] = {}

    def decide(self, est: ServiceEstimate, svc: Service) -> Decision:
        """Desired replicas per variant (module docstring)."""
        sig = est.signals
        arrivals = sig.arrival_rate_rps
        rate, prompt, gen = sig.request_rate_rps, sig.prompt_tokens_rps, sig.generation_tokens_rps
        if arrivals is None or not arrivals > 0:
            return hold(est.current, "dynamo: metrics contain None or NaN, skipping")
        preds = self.load.setdefault(svc.name, {k: PREDICTORS[self.predictor]() for k in ("num_req", "isl", "osl")})
        preds["num_req"].add(arrivals * self.window_s)
        if rate is not None and rate > 0 and prompt is not None and gen is not None:
            preds["isl"].add(prompt / rate)
            preds["osl"].add(gen / rate)
        num_req, isl, osl = (preds[k].predict() for k in ("num_req", "isl", "osl"))
        if num_req is None or isl is None or osl is None:
            return hold(est.current, "dynamo: no load observed yet")
        hit = sig.prefix_hit_rate or 0.0
        demand = max(num_req, 0.0) / self.window_s
        mix = RequestMix.from_means(max(isl, 1.0), max(osl, 1.0), min(hit, 0.99))
        per_replica = {v.name: replica_capacity(ReplicaSpec.of(v, self.engine), mix, self.ttft, self.itl).rps
                       for v in svc.variants}
        desired = planner_replicas(demand, svc, est.current, per_replica)
        need = {v.name: math.ceil(demand / per_replica[v.name]) if per_replica[v.name] > 0 else "none meets the targets"
                for v in svc.variants}
        return Decision(desired,
                        f"dynamo: demand {demand:.3g} req/s (isl {isl:.0f}, osl {osl:.0f}, hit {hit:.2f}), "
                        f"single-pool replicas {need}",
                        change_reason(desired, est.current), terms={"target_capacity_rps": demand})
