"""Steady-state capacity of one replica, derived from its performance profile.

Little's law on a continuously batched engine: at ``rate`` requests/s with mean prompt ``L_in``
and output ``L_out`` tokens and step time ``s``, each step carries ``rate*s*L_in`` prefill tokens
and ``rate*s*L_out`` decoding sequences with mean context ``L_in + L_out/2``. With the profile's
marginal costs (``t0`` per step, ``a`` per prefill token, ``b`` per sequence, ``g`` per context
token) the step time solves ``s = t0 + rate*s*(a*L_in + b*L_out + g*(L_in + L_out/2)*L_out)``, so
the largest rate whose step time (= mean inter-token latency) stays within ``itl_s`` is

    rate_max = (1 - t0/itl_s) / (a*L_in + b*L_out + g*(L_in + L_out/2)*L_out).

``replica_capacity_slo_rps`` adds a TTFT target and prefix-cache hits (for the Dynamo planner and
the static cost-optimal mix, ``controllers.baselines``): without queueing, vLLM's chunked prefill
takes ``k = ceil(L_in*(1-hit) / max_num_batched_tokens)`` steps to prefill a prompt's uncached
tokens, so TTFT ~ k mean steps and the step time must stay within ``min(itl_s, ttft_s/k)``; cached
tokens drop out of the prefill work (``a*L_in*(1-hit)``) but are still read as context by decode.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from models.profiles import get_profile

if TYPE_CHECKING:
    from autoscaler.config import Service
    from models.profiles import PerformanceProfile

REFERENCE_INPUT_TOKENS = 1024
REFERENCE_OUTPUT_TOKENS = 256
REFERENCE_ITL_S = 0.08


def marginal_costs(profile: PerformanceProfile) -> tuple[float, float, float, float]:
    """``(t0, a, b, g)``: seconds per step, per prefill token, per decode sequence, per context token.

    Read off the profile by finite differences around a mid-size batch (prefill 1024 tokens,
    32 sequences), where vLLM serving steps usually sit.
    """
    p0, n0 = 1024, 32
    base = profile.step_time(p0, n0, 0)
    a = (profile.step_time(p0 + 1024, n0, 0) - base) / 1024
    b = (profile.step_time(p0, n0 + 32, 0) - base) / 32
    t0 = base - a * p0 - b * n0
    return max(t0, 0.0), a, b, profile.seconds_per_ctx_token


def replica_capacity_rps(
    profile: PerformanceProfile,
    input_tokens: float = REFERENCE_INPUT_TOKENS,
    output_tokens: float = REFERENCE_OUTPUT_TOKENS,
    itl_s: float = REFERENCE_ITL_S,
) -> float:
    """Largest request rate (requests/s) one replica sustains with mean ITL <= ``itl_s`` seconds.

    Raises:
        ValueError: ``itl_s`` is not above the profile's fixed step cost (no rate can meet it).
    """
    return _max_rate(profile, input_tokens, input_tokens, output_tokens, itl_s, "ITL")


def _max_rate(profile: PerformanceProfile, prefill_tokens: float, input_tokens: float, output_tokens: float,
              step_s: float, what: str) -> float:
    """Largest rate whose mean step time stays within ``step_s`` (module docstring's formula)."""
    t0, a, b, g = marginal_costs(profile)
    if step_s <= t0:
        raise ValueError(f"{what} target {step_s}s is below the fixed step time {t0:.4f}s of {profile.name}")
    work = a * prefill_tokens + b * output_tokens + g * (input_tokens + output_tokens / 2) * output_tokens
    return (1 - t0 / step_s) / work


def replica_capacity_slo_rps(
    profile: PerformanceProfile,
    input_tokens: float,
    output_tokens: float,
    itl_s: float,
    ttft_s: float,
    chunk_tokens: int,
    prefix_hit_rate: float = 0.0,
) -> float:
    """Largest request rate (requests/s) one replica sustains with mean ITL <= ``itl_s`` and TTFT <= ``ttft_s``.

    Args:
        profile: the replica's step-time model.
        input_tokens, output_tokens: mean prompt and output lengths, tokens.
        itl_s, ttft_s: targets, seconds.
        chunk_tokens: prefill tokens per engine step (vLLM ``max_num_batched_tokens``).
        prefix_hit_rate: fraction of prompt tokens served from the prefix cache, in [0, 1).

    Raises:
        ValueError: the binding step time ``min(itl_s, ttft_s/k)`` (module docstring) is not above the
            profile's fixed step cost, or ``prefix_hit_rate`` is outside [0, 1).
    """
    if not 0.0 <= prefix_hit_rate < 1.0:
        raise ValueError(f"prefix_hit_rate must be in [0, 1), got {prefix_hit_rate}")
    uncached = input_tokens * (1.0 - prefix_hit_rate)
    steps = max(1, math.ceil(uncached / chunk_tokens))
    if ttft_s / steps < itl_s:
        return _max_rate(profile, uncached, input_tokens, output_tokens, ttft_s / steps, f"TTFT/{steps}-step")
    return _max_rate(profile, uncached, input_tokens, output_tokens, itl_s, "ITL")


def variant_weights(svc: Service) -> dict[str, float]:
    """variant -> capacity of one replica in requests/s at the reference workload.

    A variant's profile describes one whole replica (all its GPUs), so ``gpus_per_replica`` changes
    its price, not its capacity here.
    """
    return {v.name: replica_capacity_rps(get_profile(v.profile)) for v in svc.variants}
