"""Default metric targets for the metric-threshold baselines: one replica's load at 70 % of its capacity.

HPA, KEDA, Knative and AIBrix scale on a per-pod metric against a target the operator picks; the
anchors' documented examples (e.g. KV usage 0.5, concurrency 100 x 70 %) are for other models and
GPUs, and on this fleet they sit in the saturated region (a replica's KV usage or concurrency is
only that high once its queue grows). An operator would load-test one replica; ``calibrate`` does
that with the capacity model (``models.capacity``): for the variant with the lowest cost per unit
of capacity (the one that carries most of the load), the fluid operating point
(``models.capacity.operating_point``) at ``u`` x its capacity gives

    concurrency = requests on the replica (Little's law on the time in system)
    kv_usage    = mean KV tokens resident / kv_cache_tokens

with ``u = TARGET_UTILIZATION`` = 0.7, Knative's ``container-concurrency-target-percentage``
(knative/serving ``config/core/configmaps/autoscaler.yaml``), the one target-utilisation default
among the anchors. The request mix is the trace's when there is one, else the fleet file's
``typical_request`` (``models.capacity.service_mix``), so a live daemon calibrates the same way.
"""

from __future__ import annotations

from dataclasses import dataclass

from autoscaler.config import EngineConfig, Service
from controllers.base import POOLS_ONLY, FleetMismatchError
from controllers.split import cost_per_capacity
from models.capacity import ReplicaSpec, RequestMix, operating_point, variant_weights

TARGET_UTILIZATION = 0.7


@dataclass(frozen=True)
class Calibration:
    """One replica of ``variant`` at ``rate_rps``: requests on it and its KV usage (0..1)."""

    variant: str
    rate_rps: float
    concurrency: float
    kv_usage: float


def calibrate(svc: Service, engine: EngineConfig, mix: RequestMix,
              utilization: float = TARGET_UTILIZATION) -> Calibration:
    """The module docstring's operating point for ``mix``.

    Raises:
        ValueError: ``utilization`` outside (0, 1), or no variant can meet the SLO for ``mix``;
            ``FleetMismatchError`` (a ValueError) for a service with no aggregated variant.
    """
    if not 0 < utilization < 1:
        raise ValueError(f"utilization must be in (0, 1), got {utilization}")
    if not svc.variants:
        raise FleetMismatchError(POOLS_ONLY.format(service=svc.name))
    caps = variant_weights(svc, engine, mix)
    if not any(c > 0 for c in caps.values()):
        raise ValueError(f"service {svc.name}: no variant meets the interactive SLO for this request mix "
                         f"(mean {mix.mean_input:.0f} prompt / {mix.mean_output:.0f} output tokens), so no target "
                         "can be calibrated; set it in the spec (e.g. hpa:target=0.5)")
    v = min(svc.variants, key=lambda v: cost_per_capacity(v, caps[v.name]))
    spec = ReplicaSpec.of(v, engine)
    op = operating_point(spec, mix, utilization * caps[v.name])
    return Calibration(v.name, op.rate_rps, op.concurrency, op.kv_tokens / v.kv_cache_tokens)
