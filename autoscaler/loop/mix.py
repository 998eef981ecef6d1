"""Estimate stage: the request mix the capacity model sizes replicas for, learnt from what is served.

A fleet file's ``typical_request`` is a guess made once. When the traffic differs (8k-token prompts
where 1k were declared: dynamo#10528's prefill-heavy burst), every capacity the loop reads is wrong
from the first tick: one GH200 counted as 14.9 req/s where it serves 2.9, so a PID that caps a
scale-up at 1.5x the demand never scales up, and a demand floor lets the fleet shrink below its need.

``MixTracker`` starts from ``typical_request`` and, once the window holds at least
``MIN_REQUESTS`` completions, re-derives the per-replica capacities (``models.capacity.variant_weights``)
from the window's own means: prompt tokens per request (``prompt_tokens_rps / request_rate_rps``),
output tokens per request (``generation_tokens_rps / request_rate_rps``) and the prefix-cache hit rate
(``prefix_hit_rate``; the declared one where the server exports none). These are vLLM's
``vllm:prompt_tokens_total``, ``vllm:generation_tokens_total`` and ``vllm:request_success_total``
rates over the same window. While load rises, tokens are counted before their requests complete,
so the means read long and the capacities low: the error is on the side of more replicas.

Only a window whose running requests held steady is read: within ``STEADY_TOLERANCE`` of its
completions between its first sample and now. Tokens are counted as they are computed and requests
as they complete, so the tokens of requests running at either end of the window bias the means by
about the change in running requests over the completions (a queue does not: waiting requests
have no tokens counted yet). A standing backlog is read, so a mix that leaves the fleet short is
learnt while it is short.

It re-derives only when the prompt tokens computed per request (input x (1 - hit)) or the output
tokens per request moved by more than ``MIX_TOLERANCE`` from the mix the capacities were derived
for: every change moves the unit a capacity-based controller integrates in, so it must be rare.
A variant that cannot meet the SLO for the served mix at any load gets capacity 0, as
``variant_weights`` gives it (the split then moves its load to the others). A mix under which no
variant can meet it is not adopted: there is nothing to size for, and the warning says so.

Prefill/decode pools: the loop keeps a second tracker per service with pools, for a controller that
scales them (``weigh`` = ``controllers.roles.role_weights``), fed the decode pool's signals: every
request reaches a decode replica, which counts its whole prompt and its output (the prefix-cache hit
rate is then the decode pods' own).

The capacities are a pure function of the variants' replica specs, the interactive SLO and the
mix's three means, and cost ~60 ms a service (the capacity model's bisections), so ``weights_for``
keeps the last ``CACHE_SIZE`` of them: a fleet of many services on the same variants (one model for
several tenants, or a daemon that starts leading a shard of them) derives each set once, not once
per service, in the same tick.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from collections.abc import Callable

from autoscaler.config import EngineConfig, Service
from autoscaler.loop.forecast import per_request
from autoscaler.state import Signals
from models.capacity import Memo, ReplicaSpec, RequestMix, variant_weights

log = logging.getLogger(__name__)

MIN_REQUESTS = 20.0
"""Completions the window must hold before its means replace the declared mix (20: the standard error
of a mean of lognormal lengths with sigma 1 is then sqrt(e - 1) / sqrt(20) = 29 %, near the tolerance
below; more requests narrow it)."""

MIX_TOLERANCE = 0.25
"""Relative change of prompt tokens computed or output tokens per request that re-derives the
capacities (the same 25 % as the PID's deadband: smaller moves are inside the capacity model's error)."""

STEADY_TOLERANCE = 0.1
"""Largest change in running requests over a window, as a share of the window's completions, whose
means are read (a bias of at most ~10 %, inside ``MIX_TOLERANCE``)."""


CACHE_SIZE = 4096
"""Capacity sets ``weights_for`` keeps (each a few variants' floats: ~1 MiB at most; 4096 holds a
distinct set for each of 500 services x 3 variants with room for their mixes to move)."""

_cache = Memo(CACHE_SIZE)


def weights_for(svc: Service, engine: EngineConfig, mix: tuple[float, float, float]) -> dict[str, float]:
    """``models.capacity.variant_weights`` of ``svc`` at the mix of these means (prompt tokens, output
    tokens, prefix hit rate), a copy of the one computed before for the same inputs when it is kept
    (least recently used first out): the variants' names and replica specs (``ReplicaSpec.of``: the
    profile, the engine's limits, the KV cache), the interactive SLO's TTFT and ITL, the means.

    Raises:
        ValueError: as ``RequestMix.from_means`` (a mean below 1 token).
    """
    slo = svc.slo["interactive"]
    key = (tuple((v.name, ReplicaSpec.of(v, engine)) for v in svc.variants), slo.ttft_s, slo.itl_s, mix)
    hit = _cache.get(key)
    if isinstance(hit, dict):
        return dict(hit)
    weights = variant_weights(svc, engine, RequestMix.from_means(*mix))
    _cache.put(key, dict(weights))
    return weights


class MixTracker:
    """The per-replica capacities (variant -> requests/s) of one service for the mix it serves.

    Args:
        svc: the service; its ``typical_request`` is the starting mix.
        engine: the simulator's engine settings the capacity model reads.
        window_s: the signal window, seconds (``controller.window_s``).
        observed: learn the mix from the signals; False keeps ``typical_request`` for good.
        weigh: (service, engine, mix) -> variant -> one replica's capacity, requests/s: None (the default)
            for the aggregated variants' (``variant_weights`` through ``weights_for``), or the pools'
            (``controllers.roles.role_weights``).
        sizes: whether there is anything to size (default: the service has aggregated variants).
    """

    def __init__(self, svc: Service, engine: EngineConfig, window_s: float, observed: bool = True,
                 weigh: Callable[[Service, EngineConfig, RequestMix], dict[str, float]] | None = None,
                 sizes: bool | None = None) -> None:
        t = svc.typical_request
        self.svc = svc
        self.engine = engine
        self.window_s = window_s
        self.observed = observed
        self.weigh = weigh
        self.sizes = bool(svc.variants) if sizes is None else sizes
        self.basis = (t.input_tokens, t.output_tokens, t.prefix_hit_rate)
        self.weights = self._derive(self.basis)
        self._refused = False
        self._running: deque[tuple[float, float | None]] = deque()  # (time s, running) over the window

    def _derive(self, mix: tuple[float, float, float]) -> dict[str, float]:
        """The capacities at the mix of these means: ``weights_for``'s kept copy for the aggregated
        variants (``weigh`` None), else ``weigh`` computed afresh (the pools' are few)."""
        if self.weigh is None:
            return weights_for(self.svc, self.engine, mix)
        return self.weigh(self.svc, self.engine, RequestMix.from_means(*mix))

    def update(self, signals: Signals, time_s: float) -> dict[str, float]:
        """The capacities for this tick at ``time_s`` (seconds), re-derived when the window is steady and
        its mix left the tolerance (module docstring); unchanged when a signal it needs is unknown or
        the window holds too few requests."""
        if not self.sizes:  # prefill/decode pools only: no aggregated variant to size (nor to warn of)
            return self.weights
        self._running.append((time_s, _count(signals.running)))
        while len(self._running) > 1 and self._running[1][0] <= time_s - self.window_s:
            self._running.popleft()
        mix = self.window_mix(signals) if self.observed and self.steady(signals, time_s) else None
        if mix is None or not self._moved(mix):
            return self.weights
        weights = self._derive(mix)
        if all(w <= 0 for w in weights.values()):
            if not self._refused:  # once until a mix is adopted: the window's means move every tick
                log.warning("%s: no variant meets the SLO for the served mix of %.0f in / %.0f out tokens (hit %.2f); "
                            "keeping the capacities of %.0f / %.0f", self.svc.name, *mix, *self.basis[:2])
            self._refused = True
            return self.weights
        log.info("%s: sizing for the served mix: %.0f in / %.0f out tokens, hit %.2f (was %.0f / %.0f, %.2f)",
                 self.svc.name, *mix, *self.basis)
        self.basis, self.weights, self._refused = mix, weights, False
        return self.weights

    def steady(self, signals: Signals, time_s: float) -> bool:
        """Whether the running requests, known at the window's start and now (``time_s``), changed by
        at most ``STEADY_TOLERANCE`` of the window's completions."""
        (t0, first), (_, last) = self._running[0], self._running[-1]
        rate = _count(signals.request_rate_rps)
        if first is None or last is None or rate is None or time_s - t0 < self.window_s:
            return False
        return abs(last - first) <= STEADY_TOLERANCE * rate * self.window_s

    def window_mix(self, signals: Signals) -> tuple[float, float, float] | None:
        """(mean prompt tokens, mean output tokens, prefix hit rate) of the window; None when unknown."""
        rate = _count(signals.request_rate_rps)
        prompt = per_request(_count(signals.prompt_tokens_rps), rate)
        gen = per_request(_count(signals.generation_tokens_rps), rate)
        longest = self.svc.max_model_len
        if (rate is None or prompt is None or gen is None or rate * self.window_s < MIN_REQUESTS
                or not (1 <= prompt <= longest and 1 <= gen <= longest)):
            return None  # unknown, too few, or means no accepted request can have: not a mix
        hit = signals.prefix_hit_rate
        hit = self.basis[2] if hit is None or not 0 <= hit <= 1 else min(hit, 0.99)
        return prompt, gen, hit

    def _moved(self, mix: tuple[float, float, float]) -> bool:
        computed, basis_computed = mix[0] * (1 - mix[2]), self.basis[0] * (1 - self.basis[2])
        return (abs(computed / basis_computed - 1) > MIX_TOLERANCE
                or abs(mix[1] / self.basis[1] - 1) > MIX_TOLERANCE)


def _count(x: float | None) -> float | None:
    """``x`` when it is a finite number >= 0 (a rate, a count), else None: unknown, never a value."""
    return x if x is not None and math.isfinite(x) and x >= 0 else None
