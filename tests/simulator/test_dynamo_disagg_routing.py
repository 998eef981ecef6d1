"""NVIDIA Dynamo's conditional disaggregation as a P/D routing rule (``roles.router: dynamo``;
``autoscaler.simulator.disagg.dynamo_remote_prefill``): the rule against hand-worked cases, a small
simulated case worked by hand where a long prompt goes remote while the prefill queue is short and
stays on its decode replica once the queue is full, and the fleet file's errors.

The rule (ai-dynamo/dynamo ``examples/llm/components/disagg_router.py`` at 02e16f7,
``PyDisaggregatedRouter.prefill_remote``): remote when the prompt less its prefix-cache hit is longer
than ``max_local_prefill_length`` and the prefill queue holds fewer than ``max_prefill_queue_size``
requests. Defaults 1000 and 3: the worker flags of ``examples/llm/utils/vllm.py`` at 0f42bc4. Dynamo's
repository has no unit test of this rule that could be found (its ``examples/llm`` tests were end-to-end
serve tests), so the cases below are worked from that source.

Hand values use the ``llama-3-8b/h100-sxm`` profile (as ``test_disaggregation.py``): a prompt of p
tokens prefilled from scratch in one step takes t0 + a (p + r p (p + 1) / 2).
"""

from __future__ import annotations

from typing import Any

import pytest

from autoscaler.config import DynamoDisagg
from autoscaler.config.loading import parse_config
from autoscaler.errors import ConfigError
from autoscaler.simulator.disagg import DecodeReplica, PrefillReplica, dynamo_remote_prefill
from autoscaler.simulator.engine import COMPLETED, SimRequest
from autoscaler.simulator.fleet import FleetSimulator
from autoscaler.workload.types import Request, Workload
from models.profiles import get_profile, prefill_pairs

H100 = get_profile("llama-3-8b/h100-sxm")
SLO = {"interactive": {"ttft_s": 2.0, "itl_s": 0.1}, "batch": {"ttft_s": 20.0, "itl_s": 0.25}}


def variant(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "gpu": "H100-SXM",
        "price_per_gpu_hour": 2.0,
        "min_replicas": 1,
        "max_replicas": 1,
        "initial_replicas": 1,
        "kv_cache_tokens": 400_000,
        "profile": "llama-3-8b/h100-sxm",
    }


def pd_doc(**roles: Any) -> dict[str, Any]:
    """One service ``svc``: one prefill replica ``p`` and one decode replica ``d``, ``roles`` added."""
    svc = {
        "name": "svc",
        "model": "m",
        "slo": SLO,
        "variants": [],
        "roles": {
            "prefill": [variant("p")],
            "decode": [variant("d")],
            "kv_transfer": {"bandwidth_gbps": 400.0, "latency_s": 0.01},
            **roles,
        },
    }
    return {"services": [svc], "simulator": {"client_timeout_s": 600.0}}


# ------------------------------------------------------------------------------ the rule, by hand
@pytest.mark.parametrize(
    ("prompt", "cached", "queue", "max_local", "max_queue", "remote"),
    [
        (4000, 0, 0, 1000, 3, True),  # 4000 uncached > 1000, queue 0 < 3
        (1000, 0, 0, 1000, 3, False),  # 1000 is not longer than 1000: strictly ">"
        (1001, 0, 0, 1000, 3, True),
        (4000, 3000, 0, 1000, 3, False),  # the decode replica caches 3000: 1000 left, local
        (4000, 2999, 0, 1000, 3, True),  # 1001 left
        (4000, 0, 2, 1000, 3, True),  # 2 queued < 3
        (4000, 0, 3, 1000, 3, False),  # 3 queued: not fewer than 3, local however long the prompt
        (100_000, 0, 0, 1000, 0, False),  # a queue limit of 0 keeps every prefill local
        (1, 0, 0, 0, 1, True),  # a limit of 0 tokens: any uncached token goes remote
        (500, 500, 0, 0, 1, False),  # ... and a fully cached prompt does not
    ],
)
def test_the_rule_is_dynamos_conditional_disaggregation(
    prompt: int, cached: int, queue: int, max_local: int, max_queue: int, remote: bool
) -> None:
    assert dynamo_remote_prefill(prompt, cached, queue, max_local, max_queue) is remote


def test_the_defaults_are_dynamos_worker_flags() -> None:
    # examples/llm/utils/vllm.py (parse_vllm_args): --max-local-prefill-length 1000, --max-prefill-queue-size 3
    d = DynamoDisagg()
    assert (d.max_local_prefill_length, d.max_prefill_queue_size) == (1000, 3)
    roles = parse_config(pd_doc(router="dynamo"), "<pd>").services[0].roles
    assert roles is not None and roles.router == "dynamo" and roles.dynamo == DynamoDisagg()
    default = parse_config(pd_doc(), "<pd>").services[0].roles
    assert default is not None and default.router == "llm-d"


# ------------------------------------------------------------------------------ a simulated case, by hand
def run(doc: dict[str, Any], wl: Workload) -> tuple[FleetSimulator, list[int], list[int]]:
    """Run ``wl`` on ``doc``'s fleet; the prompts the prefill replica was sent, in order, and the prefill
    queue's size (``FleetSimulator._prefill_queue``) just after each arrival was routed."""
    sim = FleetSimulator(parse_config(doc, "<pd>"), wl)
    p, d = sim.services["svc"].replicas
    assert isinstance(p, PrefillReplica) and isinstance(d, DecodeReplica)
    sent: list[int] = []
    enqueue = p.enqueue

    def spy(sr: SimRequest, now: float) -> None:
        sent.append(sr.req.input_tokens)
        enqueue(sr, now)

    p.enqueue = spy  # type: ignore[method-assign]
    queues = []
    for r in wl.requests:
        sim.run_until(r.arrival_s + 1e-9)
        queues.append(FleetSimulator._prefill_queue(sim.services["svc"]))
    sim.run_until(100.0)
    assert sim.done and all(sr.status == COMPLETED for sr in sim.requests)
    return sim, sent, queues


# Five requests, distinct prompt lengths; the decode replica caches nothing (no hash ids).
WL = Workload(
    [
        Request(arrival_s=0.00, input_tokens=4000, output_tokens=2),  # R0
        Request(arrival_s=0.01, input_tokens=4100, output_tokens=2),  # R1
        Request(arrival_s=0.02, input_tokens=4200, output_tokens=2),  # R2
        Request(arrival_s=0.03, input_tokens=500, output_tokens=2),  # R3
        Request(arrival_s=1.00, input_tokens=4300, output_tokens=2),  # R4
    ]
)


def test_a_long_prompt_goes_remote_while_the_prefill_queue_is_short_and_stays_local_once_it_is_full() -> None:
    # max_local_prefill_length 1000, max_prefill_queue_size 1.
    # R0 (t=0): 4000 > 1000, queue 0 < 1 -> remote; the idle prefill replica starts it at once (a
    #   0.1134-s step), so it is not waiting: the queue stays 0.
    # R1 (t=0.01): 4100 > 1000, queue 0 < 1 -> remote; the prefill replica is mid-step, R1 waits: queue 1.
    # R2 (t=0.02): 4200 > 1000 but queue 1 is not < 1 -> the decode replica prefills it itself.
    # R3 (t=0.03): 500 is not > 1000 -> local whatever the queue (still 1).
    # R4 (t=1): R0 and R1 were prefilled by t = 0.1134 + 0.1159 s, the queue is 0 again -> remote.
    sim, sent, queues = run(
        pd_doc(router="dynamo", dynamo={"max_local_prefill_length": 1000, "max_prefill_queue_size": 1}), WL
    )
    assert sent == [4000, 4100, 4300]
    assert queues == [0, 1, 1, 1, 0]
    p = sim.services["svc"].replicas[0]
    assert p.metrics.prompt_tokens == 4000 + 4100 + 4300
    r2 = sim.requests[2]
    # R2, prefilled locally: the decode replica was idle at t = 0.02 (R0's KV reaches it at ~0.134 s), so
    # its first token is one prefill step of 4200 tokens later: t0 + a (4200 + r x 4200 x 4201 / 2).
    t_r2 = 0.02 + H100.step_time(4200, 0, 0, prefill_pairs(0, 4200))
    assert r2.t_first == pytest.approx(t_r2, rel=1e-12)
    assert r2.t_first == pytest.approx(0.02 + 7.7655e-3 + 2.45596e-5 * (4200 + 3.75601e-5 * 4200 * 4201 / 2), rel=1e-5)


def test_a_longer_queue_limit_sends_that_prompt_remote_and_llm_ds_rule_sends_every_long_one() -> None:
    # max_prefill_queue_size 2: R2 sees 1 queued < 2 -> remote too (queue 2 after it); R3 stays local by
    # length; R4 remote as before.
    _, sent, queues = run(pd_doc(router="dynamo", dynamo={"max_prefill_queue_size": 2}), WL)
    assert sent == [4000, 4100, 4200, 4300]
    assert queues == [0, 1, 2, 2, 0]
    # llm-d's rule (the default router, non_cached_tokens 1000) ignores the queue: every prompt of 1000
    # tokens or more goes remote, and R3 (500) stays local.
    _, sent, _ = run(pd_doc(non_cached_tokens=1000), WL)
    assert sent == [4000, 4100, 4200, 4300]


def test_a_prompt_the_decode_replica_has_cached_stays_local_under_dynamos_rule() -> None:
    # Blocks of 512 tokens. R0 (2000 tokens, blocks 1-4) goes remote (nothing cached, 2000 > the limit)
    # and its blocks enter the decode replica's cache as it takes the prompt in. R1 (t=5, 2000 tokens,
    # blocks 1-3 then 5): 3 x 512 = 1536 cached there, 464 uncached. Limit 400: 464 > 400 -> remote.
    # Limit 500: 464 is not > 500 -> local (a decode-replica prefix hit of 1536 tokens).
    shared = (1, 2, 3)

    def wl() -> Workload:
        return Workload(
            [
                Request(arrival_s=0.0, input_tokens=2000, output_tokens=2, hash_ids=(*shared, 4)),
                Request(arrival_s=5.0, input_tokens=2000, output_tokens=2, hash_ids=(*shared, 5)),
            ],
            block_tokens=512,
        )

    _, sent, _ = run(pd_doc(router="dynamo", dynamo={"max_local_prefill_length": 400}), wl())
    assert sent == [2000, 2000]
    sim, sent, _ = run(pd_doc(router="dynamo", dynamo={"max_local_prefill_length": 500}), wl())
    assert sent == [2000]
    _, d = sim.services["svc"].replicas
    assert d.metrics.prefix_hits == 1536


# ------------------------------------------------------------------------------ fleet-file errors
def one_line_error(doc: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as exc:
        parse_config(doc, "<pd>")
    msg = str(exc.value)
    assert "\n" not in msg
    return msg


@pytest.mark.parametrize(
    ("roles", "expected"),
    [
        ({"router": "sglang"}, "<pd>: services[svc].roles.router: Input should be 'llm-d' or 'dynamo'"),
        (
            {"router": "dynamo", "non_cached_tokens": 64},
            "<pd>: services[svc].roles: non_cached_tokens is llm-d's threshold, not read with router: dynamo (set "
            "dynamo.max_local_prefill_length instead)",
        ),
        (
            {"dynamo": {"max_prefill_queue_size": 4}},
            "<pd>: services[svc].roles: dynamo (Dynamo's conditional-disaggregation parameters) is read only with "
            "router: dynamo, and router is llm-d",
        ),
        (
            {"router": "dynamo", "dynamo": {"max_prefill_queue_size": -1}},
            "<pd>: services[svc].roles.dynamo.max_prefill_queue_size: Input should be greater than or equal to 0",
        ),
        (
            {"router": "dynamo", "dynamo": {"max_local_prefill_length": -1}},
            "<pd>: services[svc].roles.dynamo.max_local_prefill_length: Input should be greater than or equal to 0",
        ),
        (
            {"router": "dynamo", "dynamo": {"max_queue": 4}},
            "<pd>: services[svc].roles.dynamo.max_queue: Extra inputs are not permitted",
        ),
    ],
)
def test_bad_router_settings_are_one_line_errors(roles: dict[str, Any], expected: str) -> None:
    assert one_line_error(pd_doc(**roles)) == expected
