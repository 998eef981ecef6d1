"""Static cost-optimal GPU mix: one integer program on the whole trace's peak (Mélange-style).

The Mélange ILP (Griggs et al., arXiv 2404.14527; used by AIBrix's GPU optimizer,
``python/aibrix/aibrix/gpu_optimizer/optimizer/solver/melange/solver.py``, ANCHORS.md §2 and §7)
reduced to one request-size bucket, the trace's mean:

    minimise   sum_v price_v x n_v                       ($/hour)
    subject to sum_v capacity_v x n_v >= peak rate        (requests/s)
               min_replicas_v <= n_v <= min(max_replicas_v, quota_v), n_v integer

solved with ``scipy.optimize.milp`` (HiGHS). ``capacity_v`` is one replica's rate at the service's
interactive TTFT and ITL objectives and the mean prompt/output lengths of the requests the service
accepts (``max_model_len``; ``models.capacity.replica_capacity_slo_rps``); the peak is their highest
60 s arrival rate (``controllers.static.peak_rate_rps``), as for ``static``. The fleet starts at this
mix and never scales.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp

from autoscaler.config import EngineConfig, Service, Variant
from autoscaler.workload.types import INTERACTIVE, Workload
from controllers.static import StaticController, peak_rate_rps, served
from models.capacity import replica_capacity_slo_rps
from models.profiles import get_profile


def cost_optimal_mix(variants: Sequence[Variant], demand_rps: float,
                     capacity_rps: Mapping[str, float]) -> dict[str, int]:
    """Cheapest integer replicas per variant whose capacity covers ``demand_rps``.

    Args:
        variants: bounds and prices.
        demand_rps: capacity to provide, requests/s.
        capacity_rps: variant -> capacity of one replica, requests/s.

    Returns:
        variant -> replicas. When even every variant at its cap falls short, every variant at its cap.
    """
    caps = np.array([v.cap for v in variants], dtype=float)
    w = np.array([capacity_rps[v.name] for v in variants])
    if float(w @ caps) < demand_rps:
        return {v.name: v.cap for v in variants}
    res = milp(
        c=np.array([v.price_per_replica_hour for v in variants]),
        constraints=LinearConstraint(w[np.newaxis, :], lb=demand_rps, ub=np.inf),
        integrality=np.ones(len(variants)),
        bounds=Bounds(np.array([v.min_replicas for v in variants], dtype=float), caps),
    )
    if res.x is None:
        raise RuntimeError(f"static-ilp: HiGHS found no solution ({res.message})")
    return {v.name: round(float(x)) for v, x in zip(variants, res.x, strict=True)}


def static_ilp_controller(svc: Service, workload: Workload, engine: EngineConfig) -> StaticController:
    """A ``StaticController`` (named ``static-ilp``) holding the cost-optimal mix for ``workload``'s peak."""
    reqs = served(workload, svc.max_model_len)
    mean_in = sum(r.input_tokens for r in reqs) / max(len(reqs), 1)
    mean_out = sum(r.output_tokens for r in reqs) / max(len(reqs), 1)
    slo = svc.slo[INTERACTIVE]
    capacity = {
        v.name: replica_capacity_slo_rps(get_profile(v.profile), max(mean_in, 1.0), max(mean_out, 1.0), slo.itl_s,
                                         slo.ttft_s, engine.max_num_batched_tokens)
        for v in svc.variants
    }
    peak = peak_rate_rps(workload, max_model_len=svc.max_model_len)
    ctrl = StaticController({svc.name: cost_optimal_mix(svc.variants, peak, capacity)})
    ctrl.name = "static-ilp"
    return ctrl
