"""Guard stage: safety rules between a controller's decision and the actuator.

Rules, in order: hold everything when the controller could not decide (missing data is never
read as zero); clamp each variant to ``[min_replicas, min(max_replicas, quota)]``; no scale-down
within ``scale_down_cooldown_s`` of the service's last scale-up; at most ``max_step_up`` replicas
added and ``max_step_down`` removed per tick (summed over variants: additions go to the variants
with the lowest cost per unit of capacity first, removals to the highest first, as in
``controllers.split``). Replicas still starting count as current capacity, since the
controller compares its target with ready + starting.
"""

from __future__ import annotations

from dataclasses import dataclass

from autoscaler.config import GuardConfig, Service
from controllers.base import Decision
from controllers.split import cost_per_capacity


@dataclass
class GuardState:
    """Per-service guard memory: time of the last scale-up and consecutive idle ticks."""

    last_scale_up_s: float | None = None
    idle_ticks: int = 0


def guard(
    decision: Decision,
    current: dict[str, int],
    svc: Service,
    cfg: GuardConfig,
    state: GuardState,
    now: float,
    weights: dict[str, float],
) -> tuple[dict[str, int], str]:
    """Apply the safety rules; returns ``(replicas per variant, reason)``. Updates ``state``.

    ``weights`` maps variant to the capacity of one replica (requests/s), to rank variants by cost.
    """
    if decision.hold:
        return dict(current), decision.reason
    bounded = {v.name: min(max(decision.desired.get(v.name, current[v.name]), v.min_replicas), v.cap)
               for v in svc.variants}
    reasons = [decision.reason]
    cooling = state.last_scale_up_s is not None and now - state.last_scale_up_s < cfg.scale_down_cooldown_s
    out = dict(current)
    up_left, down_left = cfg.max_step_up, cfg.max_step_down
    by_cost = sorted(svc.variants, key=lambda v: cost_per_capacity(v, weights[v.name]))
    for v in by_cost:
        delta = bounded[v.name] - current[v.name]
        if delta <= 0:
            continue
        step = min(delta, up_left)
        up_left -= step
        if step < delta:
            reasons.append(f"{v.name}: step limited to +{step}")
        out[v.name] = current[v.name] + step
    for v in reversed(by_cost):
        delta = bounded[v.name] - current[v.name]
        if delta >= 0:
            continue
        if cooling:
            reasons.append(f"{v.name}: scale-down held by cool-down")
            continue
        step = min(-delta, down_left)
        down_left -= step
        if step < -delta:
            reasons.append(f"{v.name}: step limited to -{step}")
        out[v.name] = current[v.name] - step
    if any(out[n] > current[n] for n in out):
        state.last_scale_up_s = now
    return out, "; ".join(reasons)
