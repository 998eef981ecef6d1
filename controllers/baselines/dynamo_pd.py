"""NVIDIA Dynamo planner, throughput-based loop in its disaggregated mode (``mode: disagg``): a prefill
replica count and a decode replica count per adjustment interval (``controllers.baselines.dynamo`` is its
aggregated sibling; the predictors and the interval are the same).

Sources: ai-dynamo/dynamo ``components/src/dynamo/planner/core/throughput_scaling.py`` (read at 0c9050c:
``_throughput_disagg``, ``_compute_prefill_replicas``, ``_compute_decode_replicas``),
``components/src/dynamo/planner/core/perf_model/prefill.py`` (at 4d3f672:
``find_best_engine_prefill_rps``) and ``perf_model/decode.py`` (at 439d645: ``find_best_engine_decode_rps``),
``components/src/dynamo/planner/config/defaults.py`` (the 180-s ``throughput_adjustment_interval``,
``min_endpoint`` 1, targets ``ttft`` 500 ms and ``itl`` 50 ms).

Every 180 s:

1. Observe the interval as the aggregated planner does (``controllers.baselines.dynamo``): the request
   count from the gateway's arrivals; the mean input and output lengths from the decode pool's counters
   (every request reaches a decode replica, which counts its whole prompt and its output: the service-wide
   counters count a remotely prefilled prompt twice), the prefix-cache hit rate from the prefill pool's
   (where the prompts are computed; 0 while unknown). Each feeds a predictor (``kalman`` or ``constant``).
2. ``demand = predicted requests / 180`` requests/s; both pools size for all of it (in Dynamo every request
   is prefilled by the prefill workers).
3. Prefill, per replica: ``engine_rps = 1 / wt``, ``wt`` the time to prefill one prompt of the predicted
   ``effective_isl = isl x (1 - hit)`` tokens alone, in chunks of ``max_num_batched_tokens`` (Dynamo's
   regression of a forward pass's wall time on its prefill tokens; here the replica's profile, attention
   included, the stand-in for the planner's profile). Replicas: ``max(ceil(demand / engine_rps),
   sla_floor, min_endpoint)``, ``sla_floor = ceil(wt / ttft)`` when one prompt alone takes longer than
   the TTFT target, else 1.
4. Decode, per replica: at the context ``isl + osl / 2``, the largest batch ``B`` (binary search over
   ``[1, min(floor(kv_cache_tokens / context), max_num_seqs)]``) whose decode step ``wt(B)`` (``B``
   sequences, ``B x context`` KV tokens) is within the ITL target; ``engine_rps = B / (osl x wt(B))``
   (Little's law); ``B = 1`` when even one sequence misses it. Replicas: ``max(ceil(demand /
   engine_rps), min_endpoint)``.
5. On a pool of several GPU generations the pool's count is placed as the aggregated planner places its
   own (``planner_replicas``: ``controllers.split`` at the engine rates, at least the count in total).
   The GPU budget is the pools' replica caps (not the planner's ``max_gpu_budget``); the loop clamps each
   pool to its bounds (``own_guard``). Aggregated variants beside the pools are left as they are.

Not modelled: the load-based (FPM) loop (off by default), the planner's correction factors, its GPU
budget band (``budget.py``) and its conditional disaggregation.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from controllers.base import Decision, change_reason, hold
from controllers.baselines.dynamo import (
    DEFAULT_PREDICTOR,
    ITL_TARGET_S,
    MIN_ENDPOINT,
    TTFT_TARGET_S,
    DynamoPlanner,
    planner_replicas,
)
from controllers.baselines.predictors import PREDICTORS
from controllers.roles import DECODE, PREFILL, pool_service
from models.capacity import ReplicaSpec
from models.profiles import prefill_pairs

if TYPE_CHECKING:
    from autoscaler.config import EngineConfig, Service
    from autoscaler.state import ServiceEstimate


def prefill_engine(spec: ReplicaSpec, isl: float, ttft_s: float) -> tuple[float, int]:
    """(engine requests/s, SLA floor) of one prefill replica for prompts of ``isl`` tokens (step 3).

    ``wt`` is the sum over the prompt's chunks of ``max_num_batched_tokens`` tokens of the profile's step
    time of that chunk alone (its attention over the chunks before it included).
    """
    tokens = max(1, round(isl))
    budget = spec.max_num_batched_tokens
    wt, start = 0.0, 0
    while start < tokens:
        chunk = min(budget, tokens - start)
        wt += spec.profile.step_time(chunk, 0, 0, prefill_pairs(start, chunk))
        start += chunk
    floor = math.ceil(wt / ttft_s) if wt > ttft_s else 1
    return 1.0 / wt, floor


def decode_engine(spec: ReplicaSpec, isl: float, osl: float, itl_s: float) -> tuple[float, int]:
    """(engine requests/s, batch ``B``) of one decode replica (step 4)."""
    context = isl + osl / 2.0

    def wt(batch: int) -> float:
        return spec.profile.step_time(0, batch, round(batch * context))

    most = max(1, min(int(spec.kv_cache_tokens / context), spec.max_num_seqs))
    best = 1
    if wt(1) <= itl_s:
        lo, hi = 1, most
        while lo <= hi:
            mid = (lo + hi) // 2
            if wt(mid) <= itl_s:
                best, lo = mid, mid + 1
            else:
                hi = mid - 1
    return best / (osl * wt(best)), best


class DynamoPDPlanner(DynamoPlanner):
    """The disaggregated throughput planner (module docstring); the aggregated one's settings and checks,
    its own ``decide``.

    Args:
        engine: the vLLM engine settings of each replica.
        predictor: ``kalman`` or ``constant``.
        ttft, itl: targets, seconds.
    """

    scales_roles = True
    kind = "dynamo-pd"

    def __init__(self, engine: EngineConfig, predictor: str = DEFAULT_PREDICTOR, ttft: float = TTFT_TARGET_S,
                 itl: float = ITL_TARGET_S, *, name: str = "dynamo-pd") -> None:
        super().__init__(engine, predictor, ttft, itl, name=name)

    def replicas(self, svc: Service, demand: float, isl: float, osl: float, hit: float,
                 current: dict[str, int]) -> tuple[dict[str, int], str]:
        """Steps 3 to 5: pool variant -> replicas for ``demand`` requests/s of ``isl`` / ``osl`` tokens at
        prefix hit rate ``hit``, and what each pool's engine rate was."""
        desired: dict[str, int] = {}
        notes = []
        for role in (PREFILL, DECODE):
            pool = pool_service(svc, role)
            rates, floor = {}, MIN_ENDPOINT
            for v in pool.variants:
                spec = ReplicaSpec.of(v, self.engine)
                if role == PREFILL:
                    rates[v.name], f = prefill_engine(spec, isl * (1.0 - min(max(hit, 0.0), 1.0)), self.ttft)
                    floor = max(floor, f)
                else:
                    rates[v.name], _ = decode_engine(spec, isl, osl, self.itl)
            mine = {v.name: current.get(v.name, 0) for v in pool.variants}
            desired.update(planner_replicas(demand, pool, mine, rates, min_endpoint=floor))
            need = {n: math.ceil(demand / r) for n, r in rates.items()}
            notes.append(f"{role} {need} at {', '.join(f'{r:.3g}' for r in rates.values())} req/s per replica"
                         + (f", SLA floor {floor}" if floor > MIN_ENDPOINT else ""))
        return desired, "; ".join(notes)

    def decide(self, est: ServiceEstimate, svc: Service) -> Decision:
        """Desired replicas per pool variant (module docstring)."""
        current = est.pool_current
        if svc.roles is None or PREFILL not in est.pools or DECODE not in est.pools:
            return hold(est.current, "dynamo-pd: no prefill/decode pools observed")
        arrivals = est.signals.arrival_rate_rps
        if arrivals is None or not arrivals > 0:
            return hold(current, "dynamo-pd: metrics contain None or NaN, skipping")
        dec = est.pools[DECODE].signals
        preds = self.load.setdefault(svc.name, {k: PREDICTORS[self.predictor]() for k in ("num_req", "isl", "osl")})
        preds["num_req"].add(arrivals * self.window_s)
        rate, prompt, gen = dec.request_rate_rps, dec.prompt_tokens_rps, dec.generation_tokens_rps
        if rate is not None and rate > 0 and prompt is not None and gen is not None:
            preds["isl"].add(prompt / rate)
            preds["osl"].add(gen / rate)
        num_req, isl, osl = (preds[k].predict() for k in ("num_req", "isl", "osl"))
        if num_req is None or isl is None or osl is None:
            return hold(current, "dynamo-pd: no load observed yet")
        hit = est.pools[PREFILL].signals.prefix_hit_rate or 0.0
        demand = max(num_req, 0.0) / self.window_s
        desired, notes = self.replicas(svc, demand, max(isl, 1.0), max(osl, 1.0), hit, current)
        return Decision(desired, f"dynamo-pd: demand {demand:.3g} req/s (isl {isl:.0f}, osl {osl:.0f}, "
                        f"hit {hit:.2f}): {notes}", change_reason(desired, current),
                        terms={"target_capacity_rps": demand})
