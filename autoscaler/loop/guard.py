"""Guard stage: safety rules between a controller's decision and the actuator.

Rules, in order: hold everything when the controller could not decide (missing data is never
read as zero), within each variant's bounds; clamp each variant to ``[min_replicas,
min(max_replicas, quota)]`` (a variant above its cap, say one whose pods cannot be placed
(``autoscaler.loop.runner.available``), comes down to it at once, whatever the rules below); no scale-down
within ``scale_down_cooldown_s`` of the service's last scale-up; at most ``max_step_up`` replicas
added and ``max_step_down`` removed per tick (summed over variants: additions go to the variants
with the lowest cost per unit of capacity first, removals to the highest first, as in
``controllers.split``). Replicas still starting count as current capacity, since the
controller compares its target with ready + starting. Each cut is named (``controllers.base.Reason``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from autoscaler.config import GuardConfig, Service
from controllers.base import Decision, Reason
from controllers.split import cost_per_capacity


@dataclass
class GuardState:
    """Per-service guard memory: time of the last scale-up and consecutive idle ticks."""

    last_scale_up_s: float | None = None
    idle_ticks: int = 0


@dataclass
class Guarded:
    """The guard's output: replicas per variant, the reason text, and the cuts it made."""

    replicas: dict[str, int]
    reason: str
    limits: list[Reason] = field(default_factory=list)


def clamp(decision: Decision, current: dict[str, int], svc: Service) -> Guarded:
    """The decision clamped to each variant's bounds (the only rule for a controller with its own
    guard). A hold keeps the current replicas, brought within the bounds too (a variant below its
    minimum goes up to it, one above its cap comes down to it, named), unless the counts themselves
    are unknown (``Reason.COUNTS_UNKNOWN``: nothing can be set)."""
    if decision.hold and decision.code is Reason.COUNTS_UNKNOWN:
        return Guarded(dict(current), decision.reason)
    out: dict[str, int] = {}
    limits: list[Reason] = []
    notes = [decision.reason]
    for v in svc.variants:
        want = current[v.name] if decision.hold else decision.desired.get(v.name, current[v.name])
        out[v.name] = min(max(want, v.min_replicas), v.cap)
        if want > v.cap:
            limits.append(Reason.TOO_MANY_REPLICAS)
            notes.append(f"{v.name}: capped at {v.cap}")
        elif want < v.min_replicas:
            limits.append(Reason.TOO_FEW_REPLICAS)
            notes.append(f"{v.name}: kept at its minimum {v.min_replicas}")
    return Guarded(out, "; ".join(notes), limits)


def guard(
    decision: Decision,
    current: dict[str, int],
    svc: Service,
    cfg: GuardConfig,
    state: GuardState,
    now: float,
    weights: dict[str, float],
) -> Guarded:
    """Apply the safety rules (module docstring). Updates ``state``.

    ``weights`` maps variant to the capacity of one replica (requests/s), to rank variants by cost.
    """
    bounded = clamp(decision, current, svc)
    if decision.hold:
        if any(n > current[k] for k, n in bounded.replicas.items()):
            state.last_scale_up_s = now
        return bounded
    reasons = [bounded.reason]
    limits = list(bounded.limits)
    cooling = state.last_scale_up_s is not None and now - state.last_scale_up_s < cfg.scale_down_cooldown_s
    out = dict(current)
    up_left, down_left = cfg.max_step_up, cfg.max_step_down
    by_cost = sorted(svc.variants, key=lambda v: cost_per_capacity(v, weights[v.name]))
    for v in by_cost:
        delta = bounded.replicas[v.name] - current[v.name]
        if delta <= 0:
            continue
        step = min(delta, up_left)
        up_left -= step
        if step < delta:
            reasons.append(f"{v.name}: step limited to +{step}")
            limits.append(Reason.SCALE_UP_LIMIT)
        out[v.name] = current[v.name] + step
    for v in reversed(by_cost):
        delta = bounded.replicas[v.name] - current[v.name]
        if delta >= 0:
            continue
        if current[v.name] > v.cap:  # above its cap (a quota, or pods that cannot be placed): no waiting
            out[v.name] = v.cap
            delta = bounded.replicas[v.name] - v.cap
            if delta >= 0:
                continue
        if cooling:
            reasons.append(f"{v.name}: scale-down held by cool-down")
            limits.append(Reason.COOLDOWN)
            continue
        step = min(-delta, down_left)
        down_left -= step
        if step < -delta:
            reasons.append(f"{v.name}: step limited to -{step}")
            limits.append(Reason.SCALE_DOWN_LIMIT)
        out[v.name] -= step
    if any(out[n] > current[n] for n in out):
        state.last_scale_up_s = now
    return Guarded(out, "; ".join(reasons), limits)
