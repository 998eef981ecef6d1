"""Default metric targets for the metric-threshold baselines: one replica's load at 70 % of its SLO rate.

HPA, KEDA, Knative and AIBrix scale on a per-pod metric against a target the operator picks; the
anchors' documented examples (e.g. KV usage 0.5, concurrency 100 x 70 %) are for other models and
GPUs, and on this fleet they sit in the saturated region (a replica's KV usage or concurrency is
only that high once its queue grows). An operator would load-test one replica; ``operating_point``
does that with the capacity model (``models.capacity``) on the workload's mean request:

    r    = u x rate at which the mean ITL reaches the interactive ITL objective
    step = t0 / (1 - r x work)                         (mean step time at rate r)
    concurrency = r x L_out x step                     (Little's law: in flight = rate x time in system)
    kv_usage    = concurrency x (L_in + L_out / 2) / kv_cache_tokens

for the variant with the lowest cost per unit of capacity (the one that carries most of the load),
with ``u = TARGET_UTILIZATION`` = 0.7, Knative's ``container-concurrency-target-percentage``
(knative/serving ``config/core/configmaps/autoscaler.yaml``), the one target-utilisation default
among the anchors. ``t0`` and ``work`` are the profile's marginal costs (``models.capacity``).
"""

from __future__ import annotations

from dataclasses import dataclass

from autoscaler.config import Service
from autoscaler.workload.types import INTERACTIVE, Workload
from controllers.split import cost_per_capacity
from controllers.static import served
from models.capacity import marginal_costs, replica_capacity_rps
from models.profiles import get_profile

TARGET_UTILIZATION = 0.7


@dataclass(frozen=True)
class OperatingPoint:
    """One replica of ``variant`` at ``rate_rps``: mean step time (s), requests in flight, KV usage (0..1)."""

    variant: str
    rate_rps: float
    step_s: float
    concurrency: float
    kv_usage: float


def operating_point(svc: Service, input_tokens: float, output_tokens: float,
                    utilization: float = TARGET_UTILIZATION) -> OperatingPoint:
    """The module docstring's operating point for mean lengths ``input_tokens``/``output_tokens``.

    Raises:
        ValueError: ``utilization`` outside (0, 1), or the ITL objective is below a profile's fixed step time.
    """
    if not 0 < utilization < 1:
        raise ValueError(f"utilization must be in (0, 1), got {utilization}")
    itl = svc.slo[INTERACTIVE].itl_s
    caps = {v.name: replica_capacity_rps(get_profile(v.profile), input_tokens, output_tokens, itl)
            for v in svc.variants}
    v = min(svc.variants, key=lambda v: cost_per_capacity(v, caps[v.name]))
    t0, a, b, g = marginal_costs(get_profile(v.profile))
    work = a * input_tokens + b * output_tokens + g * (input_tokens + output_tokens / 2) * output_tokens
    rate = utilization * caps[v.name]
    step = t0 / (1 - rate * work)
    concurrency = rate * output_tokens * step
    kv = concurrency * (input_tokens + output_tokens / 2) / v.kv_cache_tokens
    return OperatingPoint(v.name, rate, step, concurrency, kv)


def workload_operating_point(svc: Service, workload: Workload) -> OperatingPoint:
    """``operating_point`` at the mean prompt and output lengths of the requests ``svc`` accepts."""
    reqs = served(workload, svc.max_model_len)
    n = max(len(reqs), 1)
    return operating_point(svc, max(sum(r.input_tokens for r in reqs) / n, 1.0),
                           max(sum(r.output_tokens for r in reqs) / n, 1.0))
