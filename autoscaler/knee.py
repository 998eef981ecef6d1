"""The simulator's knee of a replica: the highest Poisson arrival rate it serves within the SLO.

What the capacity model (``models.capacity``) predicts is measured here: one replica of a variant
(or several behind the simulator's least-loaded router, rates then per replica) serves Poisson
arrivals for ``run_s`` whose (prompt, output) lengths are drawn, with replacement, from given pairs
(a trace's, or synthetic ones); bisection on the rate finds the highest one at which the interactive
SLO attainment stays at the target. The target is ``DEFAULT_ATTAINMENT`` less what the replicas miss
even idle (prompts they cannot prefill within the TTFT target alone: no rate removes them), as the
model's budget is; the idle share is measured at ``IDLE_SHARE`` of the lower end of the search.

Used by ``benchmarks/capacity.py`` and the capacity model's tests.
"""

from __future__ import annotations

import numpy as np

from autoscaler.config import FleetConfig
from autoscaler.report import summarize
from autoscaler.simulate import run_simulation
from autoscaler.workload.types import Request, Workload
from controllers.static import StaticController
from models.capacity import DEFAULT_ATTAINMENT
from models.profiles import get_profile, prefill_pairs

IDLE_SHARE = 0.05
"""The rate, as a share of the search's lower end, at which a replica counts as idle (its misses
there are the mix's own)."""
IDLE_REQUESTS = 2000
"""Requests the idle share is measured on (a 1-point share to about +-0.5 points)."""
IDLE_GAP_FACTOR = 2.0
IDLE_GAP_S = 1.0
"""A paired twin's request arrives ``IDLE_GAP_FACTOR`` times the one before it's idle service (by the
profile's step times, ``idle_service_s``) plus ``IDLE_GAP_S`` after it (``spaced_twin``): a margin, not a
fit, for what the step times leave out (the simulator's own are the profile's)."""


def one_replica(cfg: FleetConfig, variant: str, *, kv_cache_tokens: int | None = None,
                max_num_seqs: int | None = None, max_num_batched_tokens: int | None = None,
                ttft_s: float | None = None, max_model_len: int | None = None, replicas: int = 1) -> FleetConfig:
    """``cfg``'s first service reduced to one variant, ``variant``, starting with ``replicas`` (one by
    default; no quota, no minimum), with these settings changed where given.

    Raises:
        KeyError: the first service has no variant ``variant``.
    """
    out = cfg.model_copy(deep=True)
    svc = out.services[0]
    chosen = [v for v in svc.variants if v.name == variant]
    if not chosen:
        raise KeyError(f"service {svc.name} has no variant {variant!r}")
    svc.variants = chosen
    v = chosen[0]
    v.min_replicas, v.quota, v.initial_replicas = 0, None, replicas
    v.max_replicas = max(v.max_replicas, replicas)
    if kv_cache_tokens is not None:
        v.kv_cache_tokens = kv_cache_tokens
    _set_limits(out, ttft_s, max_model_len, max_num_seqs, max_num_batched_tokens)
    return out


def _set_limits(out: FleetConfig, ttft_s: float | None, max_model_len: int | None, max_num_seqs: int | None,
                max_num_batched_tokens: int | None) -> None:
    """Set, where given, the first service's interactive TTFT target and context, and the engine's
    limits, on ``out`` (a copy the caller owns)."""
    svc = out.services[0]
    if ttft_s is not None:
        svc.slo["interactive"].ttft_s = ttft_s
    if max_model_len is not None:
        svc.max_model_len = max_model_len
    if max_num_seqs is not None:
        out.engine.max_num_seqs = max_num_seqs
    if max_num_batched_tokens is not None:
        out.engine.max_num_batched_tokens = max_num_batched_tokens


def pd_fleet(cfg: FleetConfig, prefill: int, decode: int, *, kv_cache_tokens: int | None = None,
             max_num_seqs: int | None = None, max_num_batched_tokens: int | None = None,
             ttft_s: float | None = None, max_model_len: int | None = None) -> FleetConfig:
    """``cfg``'s first service reduced to its P/D pools (``roles``), no aggregated variant: the first
    variant of each pool, held at ``prefill`` and ``decode`` replicas (no quota, no minimum), with these
    settings changed where given (``kv_cache_tokens`` on both pools). Its knee (``knee``) is in
    requests/s of the whole service: one prefill and many decode replicas measure a prefill replica's,
    many prefill and one decode replica a decode replica's (``models.capacity_roles``).

    Raises:
        ValueError: the first service has no ``roles``, or a replica count below 1.
    """
    if prefill < 1 or decode < 1:
        raise ValueError(f"pd_fleet needs at least one replica per pool, got prefill={prefill}, decode={decode}")
    out = cfg.model_copy(deep=True)
    svc = out.services[0]
    if svc.roles is None:
        raise ValueError(f"service {svc.name} has no roles (prefill/decode pools) to measure")
    svc.variants = []
    svc.roles.prefill, svc.roles.decode = svc.roles.prefill[:1], svc.roles.decode[:1]
    for v, n in ((svc.roles.prefill[0], prefill), (svc.roles.decode[0], decode)):
        v.min_replicas, v.quota, v.initial_replicas = 0, None, n
        v.max_replicas = max(v.max_replicas, n)
        if kv_cache_tokens is not None:
            v.kv_cache_tokens = kv_cache_tokens
    _set_limits(out, ttft_s, max_model_len, max_num_seqs, max_num_batched_tokens)
    return out


def poisson_workload(rate_rps: float, input_tokens: np.ndarray, output_tokens: np.ndarray, run_s: float,
                     seed: int = 0) -> Workload:
    """Poisson arrivals at ``rate_rps`` over ``run_s`` seconds, each request's lengths one of the pairs
    ``(input_tokens[i], output_tokens[i])`` drawn uniformly with replacement (seeded).

    Raises:
        ValueError: no pair, pairs of different counts, or a rate or duration that is not > 0.
    """
    ins, outs = np.asarray(input_tokens), np.asarray(output_tokens)
    if ins.size == 0 or ins.size != outs.size:
        raise ValueError("need at least one (prompt, output) pair, as many prompts as outputs")
    if not (rate_rps > 0 and run_s > 0):
        raise ValueError(f"need rate_rps > 0 and run_s > 0, got {rate_rps} and {run_s}")
    rng = np.random.default_rng(seed)
    t = np.sort(rng.uniform(0.0, run_s, rng.poisson(rate_rps * run_s)))
    pick = rng.integers(0, ins.size, t.size)
    return Workload([Request(float(a), int(ins[i]), int(outs[i])) for a, i in zip(t, pick, strict=True)],
                    source="knee")


def _replicas(cfg: FleetConfig) -> int:
    """The replicas ``one_replica`` set: its first variant's ``initial_replicas`` (1 where unset); 1 for
    a ``pd_fleet`` (its rates are the whole service's)."""
    variants = cfg.services[0].variants
    return (variants[0].initial_replicas or 1) if variants else 1


def attainment(cfg: FleetConfig, workload: Workload) -> float:
    """Interactive SLO attainment of ``cfg``'s replicas (``one_replica``: its first variant's
    ``initial_replicas``, held; ``pd_fleet``: its pools, which no controller scales) serving ``workload``."""
    svc = cfg.services[0]
    held = {svc.variants[0].name: _replicas(cfg)} if svc.variants else {}
    one = StaticController({svc.name: held}, cfg.controller.tick_s, cfg.controller.window_s)
    return float(summarize(run_simulation(cfg, workload, one))["slo_attainment"]["interactive"])


def knee(cfg: FleetConfig, input_tokens: np.ndarray, output_tokens: np.ndarray, lo_rps: float, hi_rps: float,
         steps: int = 8, run_s: float = 1200.0, seed: int = 0, min_requests: int = 0,
         idle_requests: int = IDLE_REQUESTS, paired_idle: bool = False) -> tuple[float, float]:
    """``(knee requests/s per replica, target attainment)`` of ``cfg``'s replicas (``one_replica``) on
    these length pairs: the middle of the last bracket after ``steps`` bisections of ``[lo_rps,
    hi_rps]`` (each a simulation of ``run_s`` seconds on the same seed at that rate times the
    replicas, longer where ``lo_rps`` would bring fewer than ``min_requests``: at 1 req/s, 20 minutes
    are ~1,200 requests and 1 % of them twelve, too few to place the 99 % knee within 10 %), where
    the target is ``DEFAULT_ATTAINMENT`` less the share missed at ``IDLE_SHARE x lo_rps`` (over
    ``idle_requests``, default ``IDLE_REQUESTS``: more where the replica misses many requests idle
    and its misses grow slowly with the rate, so that the idle share's noise does not move the knee).
    A knee at either end of the bracket means it lies outside.

    ``paired_idle``: each run's own requests are served idle as well (the same requests in the same
    order, each arriving once the one before it has left an idle replica: ``spaced_twin``), and a rate
    passes where the run misses at most ``1 - DEFAULT_ATTAINMENT`` more than its twin: the idle
    share then comes from the same draw as the run's, so its sampling noise cancels (on ServeGen-day
    lengths an A100 misses 14 % idle, and two independent draws of 10,000-20,000 requests differ by
    +-0.4 points, nearly the whole 1 % budget); ``idle_requests`` is then unused, and the target
    returned is the last run's twin's. False (default): one idle run for all. (Until i28-capband the
    twin stretched the run's arrival times to ``IDLE_SHARE x lo_rps``, 20-100x the run's span of
    simulated time (the static controller ticks every 15 simulated s; not profiled), and a 9-step
    search on ServeGen-day lengths on an A100 ran past 76 minutes; the spaced twin spans less than its
    run there, and a 20,000-request run with its twin takes 27-53 s CPU.) Needs ``one_replica``'s
    fleet (a variant to read step times from).

    Raises:
        ValueError: ``0 < lo_rps < hi_rps`` does not hold, ``steps`` or ``idle_requests`` < 1, or
            ``paired_idle`` on a fleet without variants (``pd_fleet``).
    """
    if paired_idle and not cfg.services[0].variants:
        raise ValueError("paired_idle needs one_replica's fleet: a P/D fleet has no variant to space its twin by")
    if not 0 < lo_rps < hi_rps or steps < 1 or idle_requests < 1:
        raise ValueError(f"need 0 < lo_rps < hi_rps, steps >= 1 and idle_requests >= 1, got {lo_rps}, {hi_rps}, "
                         f"{steps}, {idle_requests}")
    n = _replicas(cfg)
    run_s = max(run_s, min_requests / (lo_rps * n))
    idle_rps = IDLE_SHARE * lo_rps * n
    target = 0.0
    if not paired_idle:
        idle = attainment(cfg, poisson_workload(idle_rps, input_tokens, output_tokens, idle_requests / idle_rps,
                                                seed))
        target = DEFAULT_ATTAINMENT - (1.0 - idle)
    lo, hi = lo_rps, hi_rps
    for _ in range(steps):
        mid = (lo + hi) / 2
        run = poisson_workload(mid * n, input_tokens, output_tokens, run_s, seed)
        if paired_idle:
            target = DEFAULT_ATTAINMENT - (1.0 - attainment(cfg, spaced_twin(cfg, run)))
        ok = attainment(cfg, run) >= target
        lo, hi = (mid, hi) if ok else (lo, mid)
    return (lo + hi) / 2, target


def idle_twin(workload: Workload, slowdown: float) -> Workload:
    """``workload``'s requests (the same lengths, in the same order) with every arrival time divided by
    ``slowdown`` (< 1 stretches them: the same requests arriving that many times less often).

    Raises:
        ValueError: ``slowdown`` not > 0.
    """
    if not slowdown > 0:
        raise ValueError(f"slowdown must be > 0, got {slowdown}")
    return Workload([Request(r.arrival_s / slowdown, r.input_tokens, r.output_tokens) for r in workload.requests],
                    source="knee")


def idle_service_s(cfg: FleetConfig, input_tokens: int, output_tokens: int) -> float:
    """An upper bound, seconds, of how long a request of these lengths stays on an idle replica of
    ``cfg``'s first variant: its prompt's chunks of ``max_num_batched_tokens`` (each step priced with
    the attention pairs of its position and, beyond what an idle replica runs, one decoding sequence
    of the whole context beside it), then ``output_tokens`` decode steps of one sequence at the whole
    context (``PerformanceProfile.step_time``, which grows in each count). The profile is the one the
    simulator runs the variant with: slowed by ``simulator.slowdown`` where that names it (each step that
    many times as long; unslowed, a spaced twin on a slowed replica overlapped its requests).

    Raises:
        ValueError: negative lengths, or a fleet without variants.
    """
    if input_tokens < 0 or output_tokens < 0:
        raise ValueError(f"lengths must be >= 0, got {input_tokens} and {output_tokens}")
    variants = cfg.services[0].variants
    if not variants:
        raise ValueError("idle_service_s needs a fleet with a variant (one_replica's)")
    v = variants[0]
    profile = get_profile(v.profile).slowed(cfg.simulator.slowdown.get(v.name, 1.0))
    budget = max(cfg.engine.max_num_batched_tokens, 1)
    ctx = input_tokens + output_tokens
    t, done = 0.0, 0
    while done < input_tokens:
        c = min(budget, input_tokens - done)
        t += profile.step_time(c, 1, ctx, float(prefill_pairs(done, c)))
        done += c
    return t + output_tokens * profile.step_time(0, 1, ctx)


def spaced_twin(cfg: FleetConfig, workload: Workload) -> Workload:
    """``workload``'s requests (the same lengths, in the same order) served one at a time: the first at
    its own arrival time, each next ``IDLE_GAP_FACTOR x idle_service_s + IDLE_GAP_S`` after the one
    before it, so every request finds ``cfg``'s replicas idle. Its span is the sum of the requests'
    idle service, not the run's span stretched (``idle_twin``).

    Raises:
        ValueError: as ``idle_service_s``.
    """
    reqs = workload.requests
    t = reqs[0].arrival_s if reqs else 0.0
    out = []
    for r in reqs:
        out.append(Request(t, r.input_tokens, r.output_tokens))
        t += IDLE_GAP_FACTOR * idle_service_s(cfg, r.input_tokens, r.output_tokens) + IDLE_GAP_S
    return Workload(out, source="knee")
