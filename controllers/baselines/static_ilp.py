"""Static cost-optimal GPU mix: one integer program on the whole trace's peak (Mélange-style).

The Mélange ILP (Griggs et al., arXiv 2404.14527; used by AIBrix's GPU optimizer,
``python/aibrix/aibrix/gpu_optimizer/optimizer/solver/melange/solver.py``, ``docs/anchors.md#aibrix-gpu-optimizer``)
with the request sizes folded into each GPU's capacity for the trace's mix:

    minimise   sum_v price_v x n_v                       ($/hour)
    subject to sum_v capacity_v x n_v >= peak rate        (requests/s)
               min_replicas_v <= n_v <= min(max_replicas_v, quota_v), n_v integer

solved with ``scipy.optimize.milp`` (HiGHS). ``capacity_v`` is one replica's capacity at the service's
interactive SLO for the request mix the service accepts (``max_model_len``; ``models.capacity``);
the peak is their highest 60 s arrival rate (``controllers.static.peak_rate_rps``), as for
``static``. The fleet starts at this mix and never scales.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp

from autoscaler.config import EngineConfig, Service, Variant
from controllers.static import StaticController
from models.capacity import RequestMix, variant_weights


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


def static_ilp_controller(svc: Service, engine: EngineConfig, mix: RequestMix | None, peak_rps: float,
                          tick_s: float, window_s: float, name: str = "static-ilp") -> StaticController:
    """A ``StaticController`` holding the cost-optimal mix for ``peak_rps`` (requests/s) of ``mix``
    (None: nothing accepted, every variant at its minimum)."""
    if mix is None:
        mix_replicas = {v.name: v.min_replicas for v in svc.variants}
    else:
        mix_replicas = cost_optimal_mix(svc.variants, peak_rps, variant_weights(svc, engine, mix))
    return StaticController({svc.name: mix_replicas}, tick_s, window_s, name)
