"""Dynamo's planner in its disaggregated mode (controllers.baselines.dynamo_pd): the prefill and decode
replica counts worked out by hand from its formulas (ai-dynamo/dynamo 0c9050c
``throughput_scaling.py``; ``perf_model/prefill.py`` ``find_best_engine_prefill_rps``, ``perf_model/decode.py``
``find_best_engine_decode_rps``) on the ``llama-3-8b/h100-sxm`` profile's step model:
a step of ``p`` prompt tokens forming ``q`` attention pairs and ``n`` decodes of ``c`` context tokens takes
``t0 + a (p + r q) + b n + g c``, ``g = kv_bytes / (bandwidth_efficiency x 3.35e12 B/s)``.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from autoscaler.config import EngineConfig
from autoscaler.config.loading import parse_config
from autoscaler.state import PoolObservation, ServiceEstimate, Signals, VariantObservation
from controllers.baselines.dynamo_pd import DynamoPDPlanner, decode_engine, prefill_engine
from controllers.registry import build
from models.capacity import ReplicaSpec
from models.profiles import get_profile

H100 = get_profile("llama-3-8b/h100-sxm")
T0, A, R, B = H100.step_overhead_s, H100.prefill_s_per_token, H100.attention_tokens_per_pair, H100.decode_s_per_seq
G = H100.kv_bytes_per_token / (H100.bandwidth_efficiency * 3.35e12)
SLO = {"interactive": {"ttft_s": 2.0, "itl_s": 0.1}, "batch": {"ttft_s": 20.0, "itl_s": 0.25}}
SPEC = ReplicaSpec(H100, 256, 8192, 16, 400_000)


def chunk_s(k: int, s: int) -> float:
    """A prefill chunk of ``k`` tokens after ``s`` computed ones, alone."""
    return T0 + A * (k + R * (k * s + k * (k + 1) / 2))


def test_a_prefill_replicas_rate_is_one_over_one_prompts_prefill() -> None:
    # 3,000 tokens: one chunk (budget 8,192): wt = t0 + a (3000 + r 3000 x 3001 / 2) = 0.0856 s.
    wt = chunk_s(3000, 0)
    assert wt == pytest.approx(0.0856, abs=1e-4)
    rate, floor = prefill_engine(SPEC, 3000, 0.5)
    assert rate == pytest.approx(1 / wt)
    assert floor == 1


def test_a_prompt_slower_than_the_ttft_target_sets_the_sla_floor() -> None:
    # 20,000 tokens in chunks of 8,192, 8,192 and 3,616: 0.2399 + 0.3018 + 0.1573 = 0.6990 s > 0.5 s,
    # so the floor is ceil(0.699 / 0.5) = 2 replicas.
    wt = chunk_s(8192, 0) + chunk_s(8192, 8192) + chunk_s(3616, 16384)
    assert wt == pytest.approx(0.6990, abs=1e-3)
    rate, floor = prefill_engine(SPEC, 20000, 0.5)
    assert rate == pytest.approx(1 / wt)
    assert floor == 2


@pytest.mark.parametrize(("itl", "batch"), [
    # context 3,000 + 200 / 2 = 3,100 tokens; per sequence b + 3,100 g = 2.2803e-4 s more per step.
    (0.05, 129),  # (0.05 - t0) / 2.2803e-4 = 185 > the KV's floor(400,000 / 3,100) = 129: KV-bound
    (0.02, 53),   # (0.02 - t0) / 2.2803e-4 = 53.6: ITL-bound
])
def test_a_decode_replicas_rate_is_littles_law_at_the_largest_batch_within_the_itl(itl: float, batch: int) -> None:
    assert min(math.floor((itl - T0) / (B + 3100 * G)), 400_000 // 3100) == batch
    rate, best = decode_engine(SPEC, 3000, 200, itl)
    assert best == batch
    assert rate == pytest.approx(batch / (200 * (T0 + B * batch + G * batch * 3100)))


def test_one_sequence_past_the_itl_target_still_gives_a_rate() -> None:
    rate, best = decode_engine(SPEC, 3000, 200, 0.005)  # below t0 alone
    assert best == 1
    assert rate == pytest.approx(1 / (200 * (T0 + B + G * 3100)))


def variant(name: str) -> dict[str, Any]:
    return {"name": name, "gpu": "H100-SXM", "price_per_gpu_hour": 2.0, "min_replicas": 1, "max_replicas": 16,
            "initial_replicas": 1, "kv_cache_tokens": 400_000, "profile": "llama-3-8b/h100-sxm"}


def pd_service() -> Any:
    doc = {"services": [{"name": "svc", "model": "m", "slo": SLO, "variants": [],
                         "roles": {"prefill": [variant("p")], "decode": [variant("d")]}}]}
    return parse_config(doc, "<pd>")


def test_the_planner_sizes_both_pools_for_the_whole_demand() -> None:
    # 30 req/s arrive (5,400 in 180 s), the decode pool counts 3,000 prompt and 200 output tokens a request.
    # Prefill: ceil(30 x 0.0856) = ceil(2.57) = 3. Decode (itl 50 ms): 129 / (200 x 0.03718) = 17.35 req/s
    # a replica, ceil(30 / 17.35) = 2.
    cfg = pd_service()
    ctl = DynamoPDPlanner(EngineConfig(), predictor="constant")
    pools = {
        "prefill": PoolObservation("prefill", Signals(), {"p": VariantObservation(1, 0)}),
        "decode": PoolObservation("decode", Signals(request_rate_rps=30.0, prompt_tokens_rps=90_000.0,
                                                    generation_tokens_rps=6_000.0), {"d": VariantObservation(1, 0)}),
    }
    est = ServiceEstimate("svc", 180.0, Signals(arrival_rate_rps=30.0), {}, {}, False, 0.0, 0.0, 0, pools=pools)
    d = ctl.decide(est, cfg.services[0])
    assert math.ceil(30 * chunk_s(3000, 0)) == 3
    assert math.ceil(30 / (129 / (200 * (T0 + B * 129 + G * 129 * 3100)))) == 2
    assert d.desired == {"p": 3, "d": 2}
    # no arrivals: the planner skips the interval ("Metrics contain None or NaN")
    quiet = ServiceEstimate("svc", 360.0, Signals(arrival_rate_rps=0.0), {}, {}, False, 0.0, 0.0, 0, pools=pools)
    assert ctl.decide(quiet, cfg.services[0]).hold


def test_dynamo_pd_needs_pools() -> None:
    cfg = parse_config({"services": [{"name": "svc", "model": "m", "slo": SLO, "variants": [variant("a")]}]}, "<a>")
    with pytest.raises(ValueError, match="dynamo-pd scales prefill/decode pools: service svc has none"):
        build("dynamo-pd", cfg)
    assert build("dynamo-pd:predictor=constant", pd_service()).tick_s == 180.0


def test_dynamo_pd_bad_settings_name_it() -> None:
    # its settings are the aggregated planner's, checked by the same code under its own name
    with pytest.raises(ValueError, match="dynamo-pd predictor must be one of"):
        DynamoPDPlanner(EngineConfig(), predictor="prophet")
    with pytest.raises(ValueError, match=r"dynamo-pd ttft and itl targets must be > 0, got 0\.5, 0"):
        DynamoPDPlanner(EngineConfig(), ttft=0.5, itl=0)
